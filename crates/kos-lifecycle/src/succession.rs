//! Which control planes a run's graph holds, and which leave: scale-up and scale-down, and the
//! replacement of control planes made for another spec (flavor, image, Kubernetes release,
//! certificates) the way Cluster API's kubeadm control plane does it with `maxSurge: 1`:
//!
//! 1. a successor joins under a fresh index (`cp-3` beside `cp-0 … cp-2`), in the zone of the control
//!    plane it replaces, and the converge waits until it is Ready and its etcd member healthy;
//! 2. then the oldest control plane made for another spec leaves: drained, its etcd member removed,
//!    its server, port and volume deleted, its Node deleted;
//! 3. again, until none is left.
//!
//! Etcd keeps its quorum throughout and tolerates as many failures as before, and a single control
//! plane is replaced too (1 → 2 → 1 members). Decided from what the cloud shows alone, so a run killed
//! anywhere is continued by the next: a successor that exists is not made twice, and the control
//! plane that was leaving (the oldest outdated one) is chosen again.
//!
//! With `maxSurge: 0` (a floating-IP endpoint, or asked for) only scale-down retires here; outdated
//! control planes are replaced in place by [`crate::roll`].

use std::collections::{BTreeMap, BTreeSet};

use kos_cluster::graph::{Kind, Slots};
use kos_cluster::observe::Observed;
use kos_cluster::plan::{Op, Plan};

use crate::quorum::{QuorumError, removal_order, running_members};

/// A control plane that leaves, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement {
    /// `cp-2`.
    pub id: String,
    /// As the user reads it: `controlPlane.count is smaller`, or what its successor changes.
    pub why: String,
}

/// The control planes of this run: the graph's, and those that leave, one at a time, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Succession {
    pub slots: Slots,
    pub retirements: Vec<Retirement>,
}

/// What decides the control planes.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// `controlPlane.count`.
    pub count: u32,
    /// `maxSurge: 1`: an outdated control plane's successor joins first.
    pub surge: bool,
    /// The control planes' availability zones (round-robin by index; 0: Nova chooses).
    pub zones: usize,
}

/// The index of a control plane's object id: `cp-3`, `port-cp-3`, `vol-cp-3` → 3.
fn index_of(id: &str) -> Option<u32> {
    let host = id
        .strip_prefix("port-")
        .or_else(|| id.strip_prefix("vol-"))
        .unwrap_or(id);
    host.strip_prefix("cp-")
        .filter(|_| crate::formation::is_control_plane(host))
        .and_then(|n| n.parse().ok())
}

/// Every control-plane index anything in the cloud is tagged or named with: a server, or what a crash
/// left of one (its port or volume), which the next converge completes rather than duplicates.
#[must_use]
pub fn existing(observed: &Observed) -> BTreeSet<u32> {
    observed
        .resources
        .iter()
        .filter(|(_, found)| !found.is_empty())
        .filter_map(|(id, _)| index_of(id))
        .collect()
}

/// What exists, topped up with the lowest free indexes to `count`: the graph to plan against before
/// anything is decided, so that every existing control plane is compared with the spec.
#[must_use]
pub fn provisional(observed: &Observed, count: u32) -> Slots {
    let mut have = existing(observed);
    let mut next = 0;
    while (have.len() as u32) < count {
        if have.insert(next) {
            continue;
        }
        next += 1;
    }
    Slots::control_planes(have)
}

/// The control planes `plan` (made against [`provisional`]) replaces, with why.
#[must_use]
pub fn outdated(plan: &Plan) -> BTreeMap<String, String> {
    plan.actions
        .iter()
        .filter(|a| {
            a.kind == Kind::Server
                && a.op == Op::Roll
                && crate::formation::is_control_plane(&a.logical_id)
        })
        .map(|a| (a.logical_id.clone(), a.changes.join("; ")))
        .collect()
}

/// The control planes of this run, from what exists, which of them are `outdated`, and `rule`.
///
/// # Errors
/// A removal no order can make while keeping etcd's quorum: the message names the control planes at
/// fault.
pub fn decide(
    observed: &Observed,
    outdated: &BTreeMap<String, String>,
    rule: Rule,
) -> Result<Succession, QuorumError> {
    let exist = existing(observed);
    let members: BTreeMap<u32, bool> = running_members(observed)
        .into_iter()
        .map(|(i, m)| (i, m.healthy))
        .collect();
    let is_outdated = |i: u32| rule.surge && outdated.contains_key(&format!("cp-{i}"));
    let count = rule.count as usize;
    let excess = exist.len().saturating_sub(count);

    // Who leaves: what the spec replaces first (the oldest: the one whose successor was made for
    // it), then what holds no member, then unhealthy members, then the newest.
    let mut candidates: Vec<u32> = exist.iter().copied().collect();
    candidates.sort_by_key(|&i| {
        let member = match members.get(&i) {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        };
        if is_outdated(i) {
            (0, member, i64::from(i))
        } else {
            (1, member, -i64::from(i))
        }
    });
    let leaving: Vec<u32> = candidates.into_iter().take(excess).collect();

    // Who joins: enough to reach `count` up-to-date control planes, at most one above `count`.
    let current = exist
        .iter()
        .filter(|&&i| !is_outdated(i) && !leaving.contains(&i))
        .count();
    let room = (count + usize::from(rule.surge)).saturating_sub(exist.len());
    let joining_n = count.saturating_sub(current).min(room);
    // A successor takes the zone of the control plane it replaces (the oldest outdated one).
    let replaced = exist
        .iter()
        .copied()
        .filter(|&i| is_outdated(i) && !leaving.contains(&i))
        .min();
    let mut taken: BTreeSet<u32> = exist.clone();
    let mut joining = Vec::new();
    for _ in 0..joining_n {
        let zone_fit = |j: u32| match (replaced, rule.zones) {
            (Some(r), z) if z > 1 => j as usize % z == r as usize % z,
            _ => true,
        };
        let j = (0..)
            .find(|j| !taken.contains(j) && zone_fit(*j))
            .unwrap_or(0);
        taken.insert(j);
        joining.push(j);
    }

    let kept: Vec<u32> = exist
        .iter()
        .copied()
        .filter(|i| !leaving.contains(i))
        .chain(joining)
        .collect();
    let slots = Slots::control_planes(kept);

    // Those with no member go first (nothing to lose), then quorum's order.
    let mut retirements: Vec<String> = leaving
        .iter()
        .filter(|i| !members.contains_key(i))
        .map(|i| format!("cp-{i}"))
        .collect();
    if leaving.iter().any(|i| members.contains_key(i)) {
        let all: Vec<crate::quorum::Member> = running_members(observed)
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        let going: BTreeSet<String> = leaving.iter().map(|i| format!("cp-{i}")).collect();
        retirements.extend(removal_order(&all, &going)?);
    }
    let retirements = retirements
        .into_iter()
        .map(|id| {
            let why = match outdated.get(&id).filter(|_| rule.surge) {
                Some(changes) => {
                    format!("replaced by a control plane that joined first ({changes})")
                }
                None => "controlPlane.count is smaller".to_owned(),
            };
            Retirement { id, why }
        })
        .collect();
    Ok(Succession { slots, retirements })
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

    fn rule(count: u32, surge: bool) -> Rule {
        Rule {
            count,
            surge,
            zones: 0,
        }
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
        let s = decide(&Observed::default(), &outdated(&[]), rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec![]));
        // A crash left cp-1's port alone: it is cp-1's still, and no fourth is made.
        let o = observed(&[("cp-0", "ACTIVE"), ("port-cp-1", "DOWN")]);
        assert_eq!(provisional(&o, 3).control_plane(), [0, 1, 2]);
        let s = decide(&o, &outdated(&[]), rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec![]));
    }

    /// 3 outdated: a fourth joins; with four, the oldest outdated leaves; then the next successor.
    #[test]
    fn a_successor_joins_before_the_oldest_outdated_leaves() {
        let o = observed(&THREE);
        let old = outdated(&["cp-0", "cp-1", "cp-2"]);
        let s = decide(&o, &old, rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2, 3], vec![]));

        let o = observed(&[THREE.as_slice(), &[("cp-3", "ACTIVE")]].concat());
        let s = decide(&o, &old, rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![1, 2, 3], vec!["cp-0".to_owned()]));
        assert!(
            s.retirements[0].why.contains("flavor: a → b"),
            "{:?}",
            s.retirements
        );

        // cp-0 gone: the next successor takes its free index.
        let o = observed(&[("cp-1", "ACTIVE"), ("cp-2", "ACTIVE"), ("cp-3", "ACTIVE")]);
        let s = decide(&o, &outdated(&["cp-1", "cp-2"]), rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2, 3], vec![]));
        // Done: nothing joins, nothing leaves.
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-4", "ACTIVE"), ("cp-3", "ACTIVE")]);
        let s = decide(&o, &outdated(&[]), rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 3, 4], vec![]));
    }

    /// One control plane: 1 → 2 → 1 members, the cluster's data carried by etcd itself.
    #[test]
    fn a_single_control_plane_is_replaced_through_two() {
        let o = observed(&[("cp-0", "ACTIVE")]);
        let s = decide(&o, &outdated(&["cp-0"]), rule(1, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1], vec![]));
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "ACTIVE")]);
        let s = decide(&o, &outdated(&["cp-0"]), rule(1, true)).unwrap();
        assert_eq!(ids(&s), (vec![1], vec!["cp-0".to_owned()]));
    }

    /// Without surge, outdated control planes stay (replaced in place by `roll`); only a smaller
    /// count retires, the newest first.
    #[test]
    fn without_surge_only_a_smaller_count_retires() {
        let o = observed(&THREE);
        let s = decide(&o, &outdated(&["cp-0"]), rule(3, false)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec![]));
        let s = decide(&o, &outdated(&[]), rule(1, false)).unwrap();
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
        let s = decide(&o, &outdated(&[]), rule(1, true)).unwrap();
        assert_eq!(
            ids(&s),
            (vec![1], vec!["cp-0".to_owned(), "cp-2".to_owned()])
        );
        // Two of three stopped: quorum is lost already; nothing is removed.
        let o = observed(&[("cp-0", "SHUTOFF"), ("cp-1", "SHUTOFF"), ("cp-2", "ACTIVE")]);
        let e = decide(&o, &outdated(&[]), rule(1, true)).unwrap_err();
        assert!(
            e.to_string().contains("cp-0") && e.to_string().contains("cp-1"),
            "{e}"
        );
        // A server in ERROR never booted: it leaves first, with nothing to lose.
        let o = observed(&[("cp-0", "ACTIVE"), ("cp-1", "ACTIVE"), ("cp-2", "ERROR")]);
        let s = decide(&o, &outdated(&[]), rule(1, true)).unwrap();
        assert_eq!(ids(&s).1, ["cp-2", "cp-1"]);
        // A port a crash left behind leaves before any member.
        let o = observed(&[THREE.as_slice(), &[("port-cp-3", "DOWN")]].concat());
        let s = decide(&o, &outdated(&[]), rule(3, true)).unwrap();
        assert_eq!(ids(&s), (vec![0, 1, 2], vec!["cp-3".to_owned()]));
    }

    /// Scaling down while outdated: the outdated ones leave first.
    #[test]
    fn scale_down_and_replacement_together_retire_the_outdated() {
        let o = observed(&[THREE.as_slice(), &[("cp-3", "ACTIVE"), ("cp-4", "ACTIVE")]].concat());
        let s = decide(&o, &outdated(&["cp-0", "cp-1", "cp-2"]), rule(3, true)).unwrap();
        let (slots, gone) = ids(&s);
        assert_eq!(slots, [2, 3, 4]);
        assert_eq!(gone.len(), 2);
        assert!(gone.contains(&"cp-0".to_owned()) && gone.contains(&"cp-1".to_owned()));
    }

    /// Zones round-robin by index: cp-1's successor in three zones is cp-4 (zone 1), not cp-3.
    #[test]
    fn a_successor_joins_in_the_zone_it_replaces() {
        let o = observed(&[("cp-1", "ACTIVE"), ("cp-2", "ACTIVE"), ("cp-3", "ACTIVE")]);
        let s = decide(
            &o,
            &outdated(&["cp-1", "cp-2"]),
            Rule {
                count: 3,
                surge: true,
                zones: 3,
            },
        )
        .unwrap();
        assert_eq!(ids(&s), (vec![1, 2, 3, 4], vec![]));
    }
}
