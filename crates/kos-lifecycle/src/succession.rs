//! Which servers a run's graph holds, and which leave: scale-up and scale-down, and the replacement
//! of servers made for another spec (flavor, image, Kubernetes release, certificates) by successors
//! that join first, the way Cluster API does it with `maxSurge` (its kubeadm control plane's 1, a
//! MachineDeployment's any):
//!
//! 1. successors join under fresh indexes (`cp-3` beside `cp-0 … cp-2`), each in the zone of the
//!    server it replaces, and the converge waits until they are Ready (a control plane's etcd member
//!    healthy);
//! 2. then the oldest outdated ones leave: drained, a control plane's etcd member removed, server,
//!    port and volume deleted, the Node deleted;
//! 3. again, until none is left. A pool's `maxUnavailable` also lets that many leave before their
//!    successors join.
//!
//! For control planes etcd keeps its quorum throughout and tolerates as many failures as before, and
//! a single control plane is replaced too (1 → 2 → 1 members). Decided from what the cloud shows
//! alone, so a run killed anywhere is continued by the next: successors that exist are not made
//! twice, and the server that was leaving (the oldest outdated one) is chosen again.
//!
//! Without surge (`maxSurge: 0`: a floating-IP endpoint's control plane, or a pool's default) only a
//! smaller count retires here; outdated servers are replaced in place by [`crate::roll`].

use std::collections::{BTreeMap, BTreeSet};

use kos_cluster::graph::{Kind, Slots};
use kos_cluster::observe::Observed;
use kos_cluster::plan::{Op, Plan};

use crate::quorum::{QuorumError, removal_order, running_members};

/// `kos-retire`: a pool server's tag saying it leaves first when the pool's count is smaller. The
/// cluster autoscaler names the nodes it removes (kos-operator's provider tags them, then lowers the
/// count): the cloud keeps the choice, so a turn killed in between still removes those and no other.
pub const TAG_RETIRE: &str = "kos-retire";

/// A server that leaves, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement {
    /// `cp-2`, `workers-0`.
    pub id: String,
    /// As the user reads it: `the count is smaller`, or what its successor changes.
    pub why: String,
}

/// The servers of this run: the graph's, and those that leave as steps, in this order (control
/// planes one at a time, a pool's together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Succession {
    pub slots: Slots,
    pub retirements: Vec<Retirement>,
    /// Servers that have not joined yet (`cp-1`), for which something that would leave stays: the
    /// run looks again once the converge followed them.
    pub waiting: Vec<String>,
}

/// What decides one group of servers: the control planes (`cp`) or a pool.
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    /// `cp`, or the pool's name: ids are `<prefix>-<index>`.
    pub prefix: &'a str,
    /// `count`.
    pub count: u32,
    /// `maxSurge`: successors that may join beyond `count`.
    pub surge: u32,
    /// `maxUnavailable` (a pool's with a surge; 0 for control planes): outdated servers that may leave
    /// before their successors join.
    pub unavailable: u32,
    /// The group's availability zones (round-robin by index; 0: Nova chooses).
    pub zones: usize,
}

/// The index of a group's object id: `cp-3`, `port-cp-3`, `vol-cp-3` → 3 for `cp`.
fn index_of(id: &str, prefix: &str) -> Option<u32> {
    let parse = |host: &str| {
        let (_, index) = host.rsplit_once('-')?;
        (crate::roll::group_of(host) == prefix)
            .then(|| index.parse::<u32>().ok())
            .flatten()
    };
    parse(id)
        .or_else(|| id.strip_prefix("port-").and_then(parse))
        .or_else(|| id.strip_prefix("vol-").and_then(parse))
}

/// Every index of group `prefix` anything in the cloud is tagged or named with: a server, or what a
/// crash left of one (its port or volume), which the next converge completes rather than duplicates.
#[must_use]
pub fn existing(observed: &Observed, prefix: &str) -> BTreeSet<u32> {
    observed
        .resources
        .iter()
        .filter(|(_, found)| !found.is_empty())
        .filter_map(|(id, _)| index_of(id, prefix))
        .collect()
}

/// What exists, topped up with the lowest free indexes to `count`.
fn topped_up(observed: &Observed, prefix: &str, count: u32) -> BTreeSet<u32> {
    let mut have = existing(observed, prefix);
    let mut next = 0;
    while have.len() < count as usize {
        have.insert(next);
        next += 1;
    }
    have
}

/// Every existing server of every group, topped up to its count: the graph to plan against before
/// anything is decided, so that every existing server is compared with the spec.
#[must_use]
pub fn provisional(observed: &Observed, control_planes: u32, pools: &[(&str, u32)]) -> Slots {
    pools.iter().fold(
        Slots::control_planes(topped_up(observed, "cp", control_planes)),
        |slots, (name, count)| slots.with_pool(name, topped_up(observed, name, *count)),
    )
}

/// The servers `plan` (made against [`provisional`]) replaces, with why.
#[must_use]
pub fn outdated(plan: &Plan) -> BTreeMap<String, String> {
    plan.actions
        .iter()
        .filter(|a| a.kind == Kind::Server && a.op == Op::Roll)
        .map(|a| (a.logical_id.clone(), a.changes.join("; ")))
        .collect()
}

/// The servers of this run: for the control planes (`cp`, which always leave as steps, in quorum's
/// order) and each pool (which leave as steps when it surges; otherwise the converge drains and
/// deletes them).
///
/// `not_joined`: servers the cluster shows no Node of (`cp-1`), as far as it is known. They, and
/// those still in BUILD, have not joined: nothing they would replace leaves before they have.
///
/// # Errors
/// A control-plane removal no order can make while keeping etcd's quorum: the message names the
/// control planes at fault.
pub fn decide(
    observed: &Observed,
    outdated: &BTreeMap<String, String>,
    control_planes: Rule<'_>,
    pools: &[Rule<'_>],
    not_joined: &BTreeSet<String>,
) -> Result<Succession, QuorumError> {
    let mut waiting = Vec::new();
    let (kept, leaving) = group(
        observed,
        outdated,
        control_planes,
        (true, true),
        not_joined,
        &mut waiting,
    );
    // Control planes first: a pool's successors (of a new release, say) wait until no control plane
    // is outdated, joining or leaving, as a kubelet must not be newer than the API servers.
    let settled = leaving.is_empty()
        && kept.len() == existing(observed, control_planes.prefix).len()
        && !kept
            .iter()
            .any(|i| outdated.contains_key(&format!("cp-{i}")));
    // Nor does a pool grow while a control plane is outdated: its new nodes would run the new
    // release beside API servers of the old one. (A new cluster's pools are made with its control
    // planes: none is outdated.)
    let rolling = existing(observed, control_planes.prefix)
        .iter()
        .any(|i| outdated.contains_key(&format!("cp-{i}")));
    let mut slots = Slots::control_planes(kept);
    let mut retirements = control_plane_order(observed, &leaving)?;
    for rule in pools {
        let (kept, leaving) = group(
            observed,
            outdated,
            *rule,
            (settled, !rolling),
            not_joined,
            &mut waiting,
        );
        slots = slots.with_pool(rule.prefix, kept);
        if rule.surge > 0 {
            retirements.extend(leaving.iter().map(|i| format!("{}-{i}", rule.prefix)));
        }
    }
    let retirements = retirements
        .into_iter()
        .map(|id| {
            let why = match outdated.get(&id) {
                Some(changes) => format!("replaced by a successor that joined first ({changes})"),
                None if crate::formation::is_control_plane(&id) => {
                    "controlPlane.count is smaller".to_owned()
                }
                None if retired(observed, &id) => {
                    "the cluster autoscaler removes its node".to_owned()
                }
                None => "the pool's count is smaller".to_owned(),
            };
            Retirement { id, why }
        })
        .collect();
    Ok(Succession {
        slots,
        retirements,
        waiting,
    })
}

/// The indexes of group `prefix` whose server carries [`TAG_RETIRE`].
#[must_use]
pub fn retiring(observed: &Observed, prefix: &str) -> BTreeSet<u32> {
    observed
        .resources
        .keys()
        .filter(|id| retired(observed, id))
        .filter_map(|id| index_of(id, prefix))
        .collect()
}

/// Whether the server `id` (`workers-3`) carries [`TAG_RETIRE`].
fn retired(observed: &Observed, id: &str) -> bool {
    observed.resources.get(id).is_some_and(|found| {
        found
            .iter()
            .any(|r| r.kind == Kind::Server && r.facts.tags.iter().any(|t| t == TAG_RETIRE))
    })
}

/// Server state by index (`ACTIVE`, `BUILD`, `SHUTOFF`, …); none for no server (or one in ERROR,
/// which never booted).
fn states<'a>(observed: &'a Observed, prefix: &str) -> BTreeMap<u32, &'a str> {
    observed
        .resources
        .iter()
        .filter_map(|(id, found)| {
            let i = index_of(id, prefix)?;
            let server = found
                .iter()
                .find(|r| r.kind == Kind::Server && r.tagged && !r.failed)?;
            Some((i, server.state.as_str()))
        })
        .collect()
}

/// One group: the indexes kept (with those joining) and those leaving, in the order they leave.
/// `replace`: whether its outdated servers may be succeeded now; `grow`: whether servers may join.
/// The servers that have not joined and hold a leave back go to `waiting`.
fn group(
    observed: &Observed,
    outdated: &BTreeMap<String, String>,
    rule: Rule<'_>,
    (replace, grow): (bool, bool),
    not_joined: &BTreeSet<String>,
    waiting: &mut Vec<String>,
) -> (Vec<u32>, Vec<u32>) {
    let exist = existing(observed, rule.prefix);
    let states = states(observed, rule.prefix);
    let is_outdated = |i: u32| {
        replace && rule.surge > 0 && outdated.contains_key(&format!("{}-{i}", rule.prefix))
    };
    let count = rule.count as usize;
    let outdated_n = exist.iter().filter(|&&i| is_outdated(i)).count();
    // A server still booting (BUILD) or without a Node (a successor an interrupted run made) has
    // not joined: what it would replace stays until a later turn finds it joined, as the converge
    // follows it first. Counted, a single control plane left the load balancer's pool before its
    // successor could join through it. While outdated ones are replaced, an index with no server
    // yet (its port made, then the run killed) is such a successor too; otherwise it is what a
    // crash left, and leaves first.
    let unjoined: Vec<u32> = exist
        .iter()
        .copied()
        .filter(|&i| {
            states.get(&i) == Some(&"BUILD")
                || not_joined.contains(&format!("{}-{i}", rule.prefix))
                || (outdated_n > 0 && !is_outdated(i) && !states.contains_key(&i))
        })
        .collect();
    // Beyond the excess, `maxUnavailable` outdated ones may leave before their successors join.
    let short = count.saturating_sub(exist.len());
    let early = (rule.unavailable as usize).saturating_sub(short);
    let leaving_of = |excess: usize| excess.max(outdated_n.min(excess + early));
    let leaving_n = leaving_of((exist.len() - unjoined.len()).saturating_sub(count));
    if leaving_of(exist.len().saturating_sub(count)) > leaving_n {
        waiting.extend(unjoined.iter().map(|i| format!("{}-{i}", rule.prefix)));
    }

    // Who leaves: what the autoscaler named, then what the spec replaces first (the oldest: the
    // one whose successor was made for it), then what holds no server, then unhealthy ones, then
    // the newest.
    let named = retiring(observed, rule.prefix);
    let mut candidates: Vec<u32> = exist.iter().copied().collect();
    candidates.sort_by_key(|&i| {
        if named.contains(&i) {
            return (-1, 0, i64::from(i));
        }
        let up = match states.get(&i).map(|s| *s == "ACTIVE") {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        };
        if is_outdated(i) {
            (0, up, i64::from(i))
        } else {
            (1, up, -i64::from(i))
        }
    });
    let leaving: Vec<u32> = candidates.into_iter().take(leaving_n).collect();

    // Who joins: enough to reach `count` up-to-date servers, at most `surge` above `count`.
    let current = exist
        .iter()
        .filter(|&&i| !is_outdated(i) && !leaving.contains(&i))
        .count();
    let room = (count + rule.surge as usize).saturating_sub(exist.len());
    let joining_n = if grow {
        count.saturating_sub(current).min(room)
    } else {
        0
    };
    // Successors take the zones of the servers they replace, oldest first.
    let mut replaced = exist
        .iter()
        .copied()
        .filter(|&i| is_outdated(i) && !leaving.contains(&i));
    let mut taken: BTreeSet<u32> = exist.clone();
    let mut joining = Vec::with_capacity(joining_n);
    for _ in 0..joining_n {
        let zone = replaced.next().filter(|_| rule.zones > 1);
        let j = (0..)
            .find(|j| {
                !taken.contains(j)
                    && zone.is_none_or(|r| *j as usize % rule.zones == r as usize % rule.zones)
            })
            .unwrap_or(0);
        taken.insert(j);
        joining.push(j);
    }

    let kept = exist
        .iter()
        .copied()
        .filter(|i| !leaving.contains(i))
        .chain(joining)
        .collect();
    (kept, leaving)
}

/// Control planes leaving: those without a member first (nothing to lose), then quorum's order.
fn control_plane_order(observed: &Observed, leaving: &[u32]) -> Result<Vec<String>, QuorumError> {
    let members: BTreeMap<u32, crate::quorum::Member> =
        running_members(observed).into_iter().collect();
    let mut order: Vec<String> = leaving
        .iter()
        .filter(|i| !members.contains_key(i))
        .map(|i| format!("cp-{i}"))
        .collect();
    if leaving.iter().any(|i| members.contains_key(i)) {
        let all: Vec<crate::quorum::Member> = members.into_values().collect();
        let going: BTreeSet<String> = leaving.iter().map(|i| format!("cp-{i}")).collect();
        order.extend(removal_order(&all, &going)?);
    }
    Ok(order)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kos_cluster::observe::{Facts, Resource};

    fn observed(objects: &[(&str, &str)]) -> Observed {
        let mut o = Observed::default();
        for (id, state) in objects {
            let kind = if id.starts_with("port-") {
                Kind::Port
            } else if id.starts_with("vol-") {
                Kind::Volume
            } else {
                Kind::Server
            };
            o.resources
                .entry((*id).to_owned())
                .or_default()
                .push(Resource {
                    kind,
                    logical_id: (*id).to_owned(),
                    id: format!("uuid-{id}"),
                    name: format!("kos-demo-{id}"),
                    tagged: true,
                    state: (*state).to_owned(),
                    failed: *state == "ERROR",
                    facts: Facts::default(),
                });
        }
        o
    }

    fn outdated(ids: &[&str]) -> BTreeMap<String, String> {
        ids.iter()
            .map(|i| ((*i).to_owned(), "flavor: a → b".to_owned()))
            .collect()
    }

    fn rule(count: u32, surge: bool) -> Rule<'static> {
        Rule {
            prefix: "cp",
            count,
            surge: u32::from(surge),
            unavailable: 0,
            zones: 0,
        }
    }

    /// With no Node known missing.
    fn decide4(
        observed: &Observed,
        outdated: &BTreeMap<String, String>,
        control_planes: Rule<'_>,
        pools: &[Rule<'_>],
    ) -> Result<Succession, QuorumError> {
        decide(observed, outdated, control_planes, pools, &BTreeSet::new())
    }

    fn ids(s: &Succession) -> (Vec<u32>, Vec<String>) {
        (
            s.slots.control_plane().to_vec(),
            s.retirements.iter().map(|r| r.id.clone()).collect(),
        )
    }

    const THREE: [(&str, &str); 3] = [("cp-0", "ACTIVE"), ("cp-1", "ACTIVE"), ("cp-2", "ACTIVE")];

    #[test]
    fn a_new_cluster_counts_from_zero_and_what_a_crash_left_is_completed() {
        let s = decide4(&Observed::default(), &outdated(&[]), rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec![]));
        // A crash left cp-1's port alone: it is cp-1's still, and no fourth is made.
        let o = observed(&[("cp-0", "ACTIVE"), ("port-cp-1", "DOWN")]);
        assert_eq!(provisional(&o, 3, &[]).control_plane(), [0, 1, 2]);
        let s = decide4(&o, &outdated(&[]), rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec![]));
    }

    /// 3 outdated: a fourth joins; with four, the oldest outdated leaves; then the next successor.
    #[test]
    fn a_successor_joins_before_the_oldest_outdated_leaves() {
        let o = observed(&THREE);
        let old = outdated(&["cp-0", "cp-1", "cp-2"]);
        let s = decide4(&o, &old, rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2, 3], vec![]));

        let o = observed(&[THREE.as_slice(), &[("cp-3", "ACTIVE")]].concat());
        let s = decide4(&o, &old, rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![1, 2, 3], vec!["cp-0".to_owned()]));
        assert!(
            s.retirements[0].why.contains("flavor: a → b"),
            "{:?}",
            s.retirements
        );

        // cp-0 gone: the next successor takes its free index.
        let o = observed(&[("cp-1", "ACTIVE"), ("cp-2", "ACTIVE"), ("cp-3", "ACTIVE")]);
        let s = decide4(&o, &outdated(&["cp-1", "cp-2"]), rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2, 3], vec![]));
        // Done: nothing joins, nothing leaves.
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-4", "ACTIVE"), ("cp-3", "ACTIVE")]);
        let s = decide4(&o, &outdated(&[]), rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 3, 4], vec![]));
    }

    /// One control plane: 1 → 2 → 1 members, the cluster's data carried by etcd itself.
    #[test]
    fn a_single_control_plane_is_replaced_through_two() {
        let o = observed(&[("cp-0", "ACTIVE")]);
        let s = decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1], vec![]));
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "ACTIVE")]);
        let s = decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![1], vec!["cp-0".to_owned()]));
    }

    /// A run killed while a single control plane's successor boots: the next run finds it in BUILD
    /// (no etcd member yet) and keeps both, so the converge follows it to Ready with cp-0 still in
    /// the load balancer's pool (it was refused: "1 of 2 members are healthy"; then cp-0 left the
    /// pool at once and cp-1 never reached the API to join).
    #[test]
    fn a_booting_successor_of_a_single_control_plane_is_waited_for() {
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "BUILD")]);
        let s = decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1], vec![]));
        assert_eq!(s.waiting, ["cp-1"]);
        // Up, but its Node is not there yet (killed after the boot): still waited for.
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "ACTIVE")]);
        let unjoined = BTreeSet::from(["cp-1".to_owned()]);
        let s = decide(&o, &outdated(&["cp-0"]), rule(1, true), &[], &unjoined).unwrap();
        assert_eq!(
            (ids(&s), s.waiting),
            ((vec![0, 1], vec![]), vec!["cp-1".to_owned()])
        );
        // Joined: now cp-0 leaves.
        let s = decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![1], vec!["cp-0".to_owned()]));
        assert!(s.waiting.is_empty());
        // Killed after the successor's port, before its server: it is made, cp-0 stays (it was
        // chosen to leave as "what holds no server" kept, and no member would remain: refused).
        let o = observed(&[("cp-0", "ACTIVE"), ("port-cp-1", "DOWN")]);
        let s = decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[]).unwrap();
        assert_eq!(
            (ids(&s), s.waiting),
            ((vec![0, 1], vec![]), vec!["cp-1".to_owned()])
        );
        // Three, one successor booting: no fifth joins, none leaves.
        let o = observed(&[THREE.as_slice(), &[("cp-3", "BUILD")]].concat());
        let old = outdated(&["cp-0", "cp-1", "cp-2"]);
        let s = decide4(&o, &old, rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2, 3], vec![]));
        // A smaller count still retires what exceeds it beside the booting one, which has no
        // member to lose and goes first.
        let s = decide4(&o, &outdated(&[]), rule(1, true), &[]).unwrap();
        assert_eq!(
            ids(&s),
            (vec![0, 1], vec!["cp-3".to_owned(), "cp-2".to_owned()])
        );
        // A control plane stopped is still unhealthy: with it, quorum is lost.
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "SHUTOFF")]);
        assert!(decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[]).is_err());
    }

    /// Without surge, outdated control planes stay (replaced in place by `roll`); only a smaller
    /// count retires, the newest first.
    #[test]
    fn without_surge_only_a_smaller_count_retires() {
        let o = observed(&THREE);
        let s = decide4(&o, &outdated(&["cp-0"]), rule(3, false), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec![]));
        let s = decide4(&o, &outdated(&[]), rule(1, false), &[]).unwrap();
        assert_eq!(
            ids(&s),
            (vec![0], vec!["cp-2".to_owned(), "cp-1".to_owned()])
        );
        assert_eq!(s.retirements[0].why, "controlPlane.count is smaller");
    }

    #[test]
    fn scale_down_keeps_quorum_or_is_refused() {
        // cp-0 stopped: it leaves first (as Cluster API's control plane prefers unhealthy machines),
        // and the healthy cp-1 stays.
        let o = observed(&[("cp-0", "SHUTOFF"), ("cp-1", "ACTIVE"), ("cp-2", "ACTIVE")]);
        let s = decide4(&o, &outdated(&[]), rule(1, true), &[]).unwrap();
        assert_eq!(
            ids(&s),
            (vec![1], vec!["cp-0".to_owned(), "cp-2".to_owned()])
        );
        // Two of three stopped: quorum is lost already; nothing is removed.
        let o = observed(&[("cp-0", "SHUTOFF"), ("cp-1", "SHUTOFF"), ("cp-2", "ACTIVE")]);
        let e = decide4(&o, &outdated(&[]), rule(1, true), &[]).unwrap_err();
        assert!(
            e.to_string().contains("cp-0") && e.to_string().contains("cp-1"),
            "{e}"
        );
        // A server in ERROR never booted: it leaves first, with nothing to lose.
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "ACTIVE"), ("cp-2", "ERROR")]);
        let s = decide4(&o, &outdated(&[]), rule(1, true), &[]).unwrap();
        assert_eq!(ids(&s).1, ["cp-2", "cp-1"]);
        // A port a crash left behind leaves before any member.
        let o = observed(&[THREE.as_slice(), &[("port-cp-3", "DOWN")]].concat());
        let s = decide4(&o, &outdated(&[]), rule(3, true), &[]).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec!["cp-3".to_owned()]));
    }

    /// Scaling down while outdated: the outdated ones leave first.
    #[test]
    fn scale_down_and_replacement_together_retire_the_outdated() {
        let o = observed(&[THREE.as_slice(), &[("cp-3", "ACTIVE"), ("cp-4", "ACTIVE")]].concat());
        let s = decide4(&o, &outdated(&["cp-0", "cp-1", "cp-2"]), rule(3, true), &[]).unwrap();
        let (slots, gone) = ids(&s);
        assert_eq!(slots, [2, 3, 4]);
        assert_eq!(gone.len(), 2);
        assert!(gone.contains(&"cp-0".to_owned()) && gone.contains(&"cp-1".to_owned()));
    }

    /// Zones round-robin by index: cp-1's successor in three zones is cp-4 (zone 1), not cp-3.
    #[test]
    fn a_successor_joins_in_the_zone_it_replaces() {
        let o = observed(&[("cp-1", "ACTIVE"), ("cp-2", "ACTIVE"), ("cp-3", "ACTIVE")]);
        let s = decide4(
            &o,
            &outdated(&["cp-1", "cp-2"]),
            Rule {
                zones: 3,
                ..rule(3, true)
            },
            &[],
        )
        .unwrap();
        assert_eq!(ids(&s), (vec![1, 2, 3, 4], vec![]));
    }

    fn pool(count: u32, surge: u32, unavailable: u32) -> Rule<'static> {
        Rule {
            prefix: "w",
            count,
            surge,
            unavailable,
            zones: 0,
        }
    }

    fn pool_ids(s: &Succession) -> (Vec<u32>, Vec<String>) {
        (
            s.slots.pool("w", 0),
            s.retirements.iter().map(|r| r.id.clone()).collect(),
        )
    }

    const CP: [(&str, &str); 1] = [("cp-0", "ACTIVE")];

    /// A pool with `maxSurge: 1, maxUnavailable: 0`: one successor joins, then the oldest outdated
    /// leaves, until none is left; the pool never has fewer than `count` nodes.
    #[test]
    fn a_pool_with_surge_replaces_through_successors() {
        let w = [("w-0", "ACTIVE"), ("w-1", "ACTIVE"), ("w-2", "ACTIVE")];
        let o = observed(&[CP.as_slice(), &w].concat());
        let old = outdated(&["w-0", "w-1", "w-2"]);
        let s = decide4(&o, &old, rule(1, true), &[pool(3, 1, 0)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1, 2, 3], vec![]));
        assert_eq!(s.slots.control_plane(), [0]);

        let o = observed(&[CP.as_slice(), &w, &[("w-3", "ACTIVE")]].concat());
        let s = decide4(&o, &old, rule(1, true), &[pool(3, 1, 0)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![1, 2, 3], vec!["w-0".to_owned()]));
        assert!(s.retirements[0].why.starts_with("replaced by a successor"));

        // While a control plane is outdated (or its successor joins), the pool waits.
        let o = observed(&[CP.as_slice(), &w].concat());
        let both = outdated(&["cp-0", "w-0", "w-1", "w-2"]);
        let s = decide4(&o, &both, rule(1, true), &[pool(3, 1, 0)]).unwrap();
        assert_eq!(s.slots.control_plane(), [0, 1]);
        assert_eq!(pool_ids(&s), (vec![0, 1, 2], vec![]));
        let o = observed(&[CP.as_slice(), &[("cp-1", "ACTIVE")], &w].concat());
        let s = decide4(&o, &both, rule(1, true), &[pool(3, 1, 0)]).unwrap();
        assert_eq!(
            pool_ids(&s),
            (vec![0, 1, 2], vec!["cp-0".to_owned()]),
            "cp-0 still leaves"
        );
        let o = observed(&[[("cp-1", "ACTIVE")].as_slice(), &w].concat());
        let s = decide4(&o, &both, rule(1, true), &[pool(3, 1, 0)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1, 2, 3], vec![]), "now the pool");

        // Nor does a pool grow (a larger count) while a control plane is outdated; a new cluster's
        // pools are made with its control planes.
        let o = observed(&[CP.as_slice(), &w].concat());
        let s = decide4(&o, &outdated(&["cp-0"]), rule(1, true), &[pool(5, 0, 1)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1, 2], vec![]));
        let s = decide4(&o, &outdated(&[]), rule(1, true), &[pool(5, 0, 1)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1, 2, 3, 4], vec![]));
        let s = decide4(
            &Observed::default(),
            &outdated(&[]),
            rule(3, true),
            &[pool(2, 1, 0)],
        )
        .unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1], vec![]));

        // Without surge the pool is left to the in-place roll: nothing joins or leaves here.
        let s = decide4(&observed(&w), &old, rule(1, true), &[pool(3, 0, 1)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1, 2], vec![]));
    }

    /// `maxSurge: 2, maxUnavailable: 1`: two join at once; with five, three leave (two for the
    /// surge, one more as unavailable), oldest first.
    #[test]
    fn a_pools_surge_and_unavailable_bound_each_step() {
        let w = [("w-0", "ACTIVE"), ("w-1", "ACTIVE"), ("w-2", "ACTIVE")];
        let old = outdated(&["w-0", "w-1", "w-2"]);
        let o = observed(&[CP.as_slice(), &w].concat());
        let s = decide4(&o, &old, rule(1, true), &[pool(3, 2, 0)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![0, 1, 2, 3, 4], vec![]));
        // maxUnavailable 1 as well: one outdated may leave at once while two join.
        let s = decide4(&o, &old, rule(1, true), &[pool(3, 2, 1)]).unwrap();
        assert_eq!(pool_ids(&s), (vec![1, 2, 3, 4], vec!["w-0".to_owned()]));
        let five = [CP.as_slice(), &w, &[("w-3", "ACTIVE"), ("w-4", "ACTIVE")]].concat();
        let s = decide4(&observed(&five), &old, rule(1, true), &[pool(3, 2, 1)]).unwrap();
        assert_eq!(
            pool_ids(&s),
            (
                vec![3, 4],
                vec!["w-0".to_owned(), "w-1".to_owned(), "w-2".to_owned()]
            )
        );
    }

    /// A pool's smaller count retires the unhealthy, then the newest, whether or not it surges; and
    /// another pool whose name starts alike is not counted in it.
    #[test]
    fn a_pools_scale_down_prefers_the_unhealthy_then_the_newest() {
        let w = [
            ("w-0", "ACTIVE"),
            ("w-1", "SHUTOFF"),
            ("w-2", "ACTIVE"),
            ("w-3", "ACTIVE"),
            ("w-x-0", "ACTIVE"),
        ];
        for surge in [0, 1] {
            let s = decide4(
                &observed(&w),
                &outdated(&[]),
                rule(1, true),
                &[pool(2, surge, 1)],
            )
            .unwrap();
            assert_eq!(s.slots.pool("w", 0), [0, 2], "surge {surge}");
            if surge > 0 {
                assert_eq!(pool_ids(&s).1, ["w-1", "w-3"]);
                assert_eq!(s.retirements[0].why, "the pool's count is smaller");
            } else {
                assert!(s.retirements.is_empty(), "the converge removes them");
            }
        }
    }

    /// The servers the autoscaler named leave before any other, surge or not, healthy or not;
    /// with the count unchanged (the provider killed between its tag and its count) none leaves.
    #[test]
    fn a_pools_scale_down_takes_the_servers_named_to_retire() {
        let w = [
            ("w-0", "ACTIVE"),
            ("w-1", "SHUTOFF"),
            ("w-2", "ACTIVE"),
            ("w-3", "ACTIVE"),
        ];
        let mut o = observed(&w);
        for r in o.resources.get_mut("w-0").unwrap() {
            r.facts.tags.push(TAG_RETIRE.to_owned());
        }
        assert_eq!(retiring(&o, "w"), BTreeSet::from([0]));
        for surge in [0, 1] {
            let s = decide4(&o, &outdated(&[]), rule(1, true), &[pool(3, surge, 1)]).unwrap();
            assert_eq!(s.slots.pool("w", 0), [1, 2, 3], "surge {surge}");
            if surge > 0 {
                assert_eq!(pool_ids(&s).1, ["w-0"]);
                assert_eq!(
                    s.retirements[0].why,
                    "the cluster autoscaler removes its node"
                );
            }
            let s = decide4(&o, &outdated(&[]), rule(1, true), &[pool(4, surge, 1)]).unwrap();
            assert_eq!(s.slots.pool("w", 0), [0, 1, 2, 3], "surge {surge}");
        }
    }
}
