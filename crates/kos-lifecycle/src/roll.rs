//! Rolling replacement of the servers a plan marks [`Op::Roll`]: made for another flavor, image, boot
//! volume, zone, key, Kubernetes release, or other labels and taints. Immutable nodes, replaced the way
//! Cluster API's kubeadm control plane does it, without a management cluster:
//!
//! - control planes first, one at a time, then each pool's workers, one at a time;
//! - before each step the cluster must be healthy (every node Ready, every etcd member up: the CLI
//!   converges and follows the bootstrap of the previous step's new node first);
//! - a step drains the node (Eviction API, so PodDisruptionBudgets hold), removes a control plane's
//!   etcd member, deletes its Node, then its server (and a boot volume made again); the next
//!   converge creates the new one from the spec and waits for it.
//!
//! Nothing is kept between steps but what the cloud and the cluster show: a run killed anywhere is
//! finished by `kos up` again (the plan still marks the old server, or finds the new one missing).
//!
//! In-place replacement: a server's logical id, port and address stay. Workers are replaced so; control
//! planes only with `controlPlane.maxSurge: 0` (a floating-IP endpoint), and then only when two others
//! keep etcd's quorum while one is gone (Cluster API's `maxSurge: 0`, which needs three replicas); a
//! single one is refused with what to do instead. With `maxSurge: 1` (the default behind a load
//! balancer) a control plane's successor joins first: [`crate::succession`].

use std::collections::{BTreeMap, BTreeSet};

use kos_cluster::graph::Kind;
use kos_cluster::names::{ClusterName, resource_name};
use kos_cluster::plan::{Action, Op, Plan};
use kos_cluster::spec::{ConditionStatus, HealthCheck, UnhealthyCondition};

use crate::formation::is_control_plane;
use crate::health::{self, Remediation};
use crate::succession::Retirement;

/// One server to replace now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `cp-1`, `workers-0`.
    pub logical_id: String,
    /// The server's (and its Node's) name.
    pub name: String,
    pub control_plane: bool,
    /// Its boot volume, when that is made again too.
    pub volume: Option<String>,
    /// Why (the plan's changes).
    pub changes: Vec<String>,
    /// Removed for good (a smaller control-plane count), not replaced.
    pub scale_down: bool,
}

impl Target {
    /// The server of `a` replaced for `changes`. A replacement boots a fresh volume from the image:
    /// the old one holds the old node's disk (its kubeadm state, its etcd data), which a new node
    /// must not find; so its boot volume, when it has one, goes with it.
    #[must_use]
    pub fn replacing(plan: &Plan, a: &Action, changes: Vec<String>) -> Target {
        let volume = format!("vol-{}", a.logical_id);
        Target {
            logical_id: a.logical_id.clone(),
            name: a.name.clone(),
            control_plane: is_control_plane(&a.logical_id),
            volume: plan
                .actions
                .iter()
                .any(|v| v.kind == Kind::Volume && v.logical_id == volume && v.existing.is_some())
                .then_some(volume),
            changes,
            scale_down: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollError {
    #[error(
        "control plane {target} must be replaced ({why}), but it is the only one: its etcd member is the \
         whole of etcd, and replacing it in place would lose the cluster"
    )]
    SingleControlPlane { target: String, why: String },
    #[error(
        "control plane {target} must be replaced ({why}), but with {count} control planes etcd would keep no \
         quorum while it is gone"
    )]
    TooFewControlPlanes {
        target: String,
        why: String,
        count: usize,
    },
}

impl RollError {
    /// What the user can do.
    #[must_use]
    pub fn help(&self) -> &'static str {
        "with `controlPlane.maxSurge: 0` a control plane is replaced in place, which needs 3 of them: \
         behind a load balancer, let `maxSurge` default to 1 (a successor joins first), or scale to 3 \
         first; or keep the control plane's machine and kubernetesVersion as they are in the spec"
    }
}

/// The plan for everything but the rolling replacement: [`Op::Roll`] objects are kept as they are
/// (the engine never replaces a running server on its own).
#[must_use]
pub fn without_rolls(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    for a in &mut p.actions {
        if a.op == Op::Roll {
            a.op = Op::NoOp;
            a.reason = "replaced one at a time after the rest is up to date".into();
        }
    }
    p
}

/// Whether the plan replaces running servers.
#[must_use]
pub fn rolls(plan: &Plan) -> bool {
    plan.actions
        .iter()
        .any(|a| a.kind == Kind::Server && a.op == Op::Roll)
}

/// The servers to replace, in order: control planes by index, then workers in the plan's order (the
/// spec's pools, by index).
#[must_use]
pub fn order(plan: &Plan) -> Vec<Target> {
    let mut servers: Vec<&Action> = plan
        .actions
        .iter()
        .filter(|a| a.kind == Kind::Server && a.op == Op::Roll)
        .collect();
    // Pools in the order the plan lists them, servers of a pool by index.
    let pools: Vec<&str> = plan
        .actions
        .iter()
        .filter(|a| a.kind == Kind::Server)
        .map(|a| group_of(&a.logical_id))
        .fold(Vec::new(), |mut v, p| {
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    servers.sort_by_key(|a| {
        let index = a.logical_id.rsplit_once('-').map_or("", |(_, i)| i);
        (
            !is_control_plane(&a.logical_id),
            pools.iter().position(|p| *p == group_of(&a.logical_id)),
            index.parse::<u32>().unwrap_or(u32::MAX),
        )
    });
    servers
        .into_iter()
        .map(|a| Target::replacing(plan, a, a.changes.clone()))
        .collect()
}

/// The plan as `kos plan` shows it: each replaced server's reason says when its turn comes.
#[must_use]
pub fn annotated(plan: &Plan) -> Plan {
    let order = order(plan);
    let n = order.len();
    let mut p = plan.clone();
    for a in &mut p.actions {
        if a.kind == Kind::Server
            && a.op == Op::Roll
            && let Some(k) = order.iter().position(|t| t.logical_id == a.logical_id)
        {
            a.reason = format!("{} (replacement {} of {n})", a.reason, k + 1);
        }
    }
    p
}

/// The next server to replace, if any, and whether that may be done now.
///
/// # Errors
/// A control plane to replace while fewer than three run.
pub fn next(plan: &Plan) -> Result<Option<Target>, RollError> {
    let Some(t) = order(plan).into_iter().next() else {
        return Ok(None);
    };
    if t.control_plane {
        let count = plan
            .actions
            .iter()
            .filter(|a| {
                a.kind == Kind::Server && is_control_plane(&a.logical_id) && a.op != Op::Delete
            })
            .count();
        let why = t.changes.join("; ");
        if count == 1 {
            return Err(RollError::SingleControlPlane {
                target: t.logical_id,
                why,
            });
        }
        if count < 3 {
            return Err(RollError::TooFewControlPlanes {
                target: t.logical_id,
                why,
                count,
            });
        }
    }
    Ok(Some(t))
}

/// The next servers to replace together: one control plane, or up to `max_unavailable(pool)` workers
/// of the first pool with replacements (a pool's `maxUnavailable`).
///
/// # Errors
/// As [`next`].
pub fn next_batch(
    plan: &Plan,
    max_unavailable: &dyn Fn(&str) -> usize,
) -> Result<Vec<Target>, RollError> {
    let Some(first) = next(plan)? else {
        return Ok(Vec::new());
    };
    if first.control_plane {
        return Ok(vec![first]);
    }
    let this = group_of(&first.logical_id);
    let max = max_unavailable(this).max(1);
    Ok(order(plan)
        .into_iter()
        .filter(|t| !t.control_plane && group_of(&t.logical_id) == this)
        .take(max)
        .collect())
}

/// Every control plane to replace, checked before anything changes: a refusal must come before the
/// first server is replaced, not halfway.
///
/// # Errors
/// As [`next`], for the first control plane that cannot be replaced.
pub fn check(plan: &Plan) -> Result<(), RollError> {
    if order(plan).iter().any(|t| t.control_plane) {
        let cps_first = Plan {
            cluster: plan.cluster.clone(),
            refused: Vec::new(),
            actions: plan
                .actions
                .iter()
                .filter(|a| a.kind != Kind::Server || is_control_plane(&a.logical_id))
                .cloned()
                .collect(),
        };
        next(&cps_first)?;
    }
    Ok(())
}

/// The plan of one step's removal: the target's server (and a boot volume made again) deleted,
/// everything else kept as it is.
#[must_use]
pub fn removal(plan: &Plan, t: &Target) -> Plan {
    let mut p = plan.clone();
    let mut deletes = Vec::new();
    for a in &mut p.actions {
        let this = a.logical_id == t.logical_id && a.kind == Kind::Server
            || t.volume.as_deref() == Some(a.logical_id.as_str()) && a.kind == Kind::Volume;
        if this && a.existing.is_some() && a.op != Op::Delete {
            // The engine reads a desired object without an action as one to create: it stays
            // listed (kept for this run) and its delete goes with the others, last.
            let mut d = a.clone();
            d.op = Op::Delete;
            d.reason = format!("replaced: {}", t.changes.join("; "));
            deletes.push(d);
        }
        if a.op != Op::Delete {
            a.op = Op::NoOp;
        }
    }
    p.actions.extend(deletes);
    p.actions.sort_by_key(|a| a.op == Op::Delete);
    p
}

/// The servers whose bootstrap an interrupted run left failed (`ids`), to be made again.
#[must_use]
pub fn remakes(plan: &Plan, ids: &[String]) -> Vec<Target> {
    ids.iter()
        .filter_map(|id| {
            let a = plan.for_node(id).filter(|a| a.kind == Kind::Server)?;
            Some(Target::replacing(
                plan,
                a,
                vec!["its bootstrap failed after an interrupted run: made again".into()],
            ))
        })
        .collect()
}

/// The plan of one step: every target of `batch` removed, a replaced one with its boot volume, a
/// retiring one with its port and volume; nothing else changed. The turn's other deletes are not
/// this step's: after a converge they are retirements (a successor joined), each its own step,
/// drained and a control plane's etcd member removed first; deleted along with a server made again
/// (a remake, a repair), a control plane would leave its member behind.
#[must_use]
pub fn step_plan(plan: &Plan, batch: &[Target]) -> Plan {
    let retiring: Vec<&Target> = batch.iter().filter(|t| t.scale_down).collect();
    let p = retirement_of(plan, &retiring);
    batch
        .iter()
        .filter(|t| !t.scale_down)
        .fold(p, |p, t| removal(&p, t))
}

/// A node whose Ready condition is not True: `status` (False or Unknown) since `since_unix` (the
/// condition's last transition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy {
    pub node: String,
    pub status: ConditionStatus,
    pub since_unix: i64,
}

/// The cluster's Nodes as `kos up --repair` judges them: every Node's name, and those whose Ready
/// condition is not True.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeHealth {
    pub names: BTreeSet<String>,
    pub unhealthy: Vec<Unhealthy>,
}

/// What `kos up --repair` found in one turn: the servers to replace and the groups whose health
/// check holds remediation back (each with why).
#[derive(Debug, Clone, Default)]
pub struct Repairs {
    pub targets: Vec<Target>,
    pub held: Vec<(String, String)>,
    /// In how many seconds (of the judging clock) a node now pending (NotReady, not joined yet)
    /// may become unhealthy, the soonest: when a controller should look again.
    pub recheck_secs: Option<u64>,
    /// How many nodes are not healthy and stay as they are this turn (pending, or held by their
    /// group's `maxUnhealthy`): the turn does not wait for them to be Ready.
    pub left_not_healthy: usize,
    /// Each judged group as its check found it, in the groups' order (what a status shows).
    pub groups: Vec<GroupHealth>,
}

/// One group's health this turn, as a MachineHealthCheck's status counts it: how many servers it
/// judged, how many are healthy, which are unhealthy and why, and whether they may be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupHealth {
    /// `cp` or a pool's name.
    pub group: String,
    pub expected: usize,
    pub healthy: usize,
    /// Unhealthy nodes with what was found (the checks' own words, `; ` between them).
    pub unhealthy: Vec<(String, String)>,
    /// Nodes not healthy yet not unhealthy for long enough (NotReady within the timeout, booting).
    pub pending: Vec<String>,
    pub remediation: Remediation,
}

/// The servers `kos up --repair` replaces, in the roll's order (control planes first): each group
/// (`cp`, a pool) is judged by its `healthCheck` ([`crate::health`]), with the Ready timeouts set to
/// `after` seconds when the run says so (`--repair-after`). A server the plan replaces or removes
/// anyway is left to that (one in ERROR is replaced by the plan itself); a server without a Node
/// is unhealthy once it has run longer than the check's `nodeStartupTimeout` (it never joined, or
/// its Node was deleted), pending before. A time ahead of `now` (another machine's clock) counts
/// as now.
#[must_use]
pub fn repairs(
    plan: &Plan,
    rules: &BTreeMap<String, HealthCheck>,
    nodes: &NodeHealth,
    now: i64,
    after: Option<i64>,
) -> Repairs {
    let unhealthy = &nodes.unhealthy;
    let mut groups: BTreeMap<&str, Vec<&Action>> = BTreeMap::new();
    for a in plan
        .actions
        .iter()
        .filter(|a| a.kind == Kind::Server && matches!(a.op, Op::NoOp | Op::Update))
    {
        groups.entry(group_of(&a.logical_id)).or_default().push(a);
    }
    let mut out = Repairs::default();
    for (group, actions) in groups {
        let mut rule = rules.get(group).cloned().unwrap_or_default();
        if let Some(after) = after {
            let secs = u64::try_from(after).unwrap_or(0);
            rule.unhealthy_conditions = [ConditionStatus::Unknown, ConditionStatus::False]
                .into_iter()
                .map(|status| UnhealthyCondition {
                    condition: "Ready".into(),
                    status,
                    timeout_secs: secs,
                })
                .collect();
        }
        // The Node of each server: Ready unless listed unhealthy; none at all, judged from when
        // Nova made the server (unknown: just now).
        let targets: Vec<health::Target> = actions
            .iter()
            .map(|a| {
                let ready = |status, since: i64| {
                    health::NodeSeen::Present(vec![health::NodeCondition {
                        condition: "Ready".into(),
                        status,
                        last_transition_unix: since.min(now),
                    }])
                };
                let node = match unhealthy.iter().find(|u| u.node == a.name) {
                    Some(u) => ready(u.status, u.since_unix),
                    None if nodes.names.contains(&a.name) => ready(ConditionStatus::True, now),
                    None => health::NodeSeen::NotYet,
                };
                health::Target {
                    name: a.name.clone(),
                    created_unix: server_created(a).map_or(now, |t| t.min(now)),
                    error: None,
                    node,
                }
            })
            .collect();
        let assessed = health::assess(&rule, &targets, now);
        out.groups.push(GroupHealth {
            group: group.to_owned(),
            expected: targets.len(),
            healthy: assessed.healthy.len(),
            unhealthy: assessed
                .unhealthy
                .iter()
                .map(|(name, findings)| {
                    let found = findings
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ");
                    (name.clone(), found)
                })
                .collect(),
            pending: assessed.pending.iter().map(|(n, _)| n.clone()).collect(),
            remediation: assessed.remediation,
        });
        if rule.enabled
            && let Some(secs) = assessed.recheck_in_secs()
        {
            out.recheck_secs = Some(out.recheck_secs.map_or(secs, |s| s.min(secs)));
        }
        match assessed.remediation {
            Remediation::Allowed => out.left_not_healthy += assessed.pending.len(),
            Remediation::Disabled if assessed.unhealthy.is_empty() => continue,
            held => {
                if !assessed.unhealthy.is_empty() {
                    out.held.push((group.to_owned(), held.to_string()));
                }
                if matches!(held, Remediation::Restricted { .. }) {
                    out.left_not_healthy += assessed.pending.len() + assessed.unhealthy.len();
                }
                continue;
            }
        }
        for (name, findings) in &assessed.unhealthy {
            let Some(a) = actions.iter().find(|a| &a.name == name) else {
                continue;
            };
            // Every unhealthy target here is one of `unhealthy` (the others' Ready is True).
            let why = match unhealthy.iter().find(|u| &u.node == name) {
                Some(u) => format!(
                    "NotReady for {}s (Ready {} past its health check's timeout)",
                    (now - u.since_unix).max(0),
                    u.status.as_str()
                ),
                None => findings
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            };
            out.targets.push(Target::replacing(plan, a, vec![why]));
        }
    }
    out.targets.sort_by_key(|t| !t.control_plane);
    out
}

/// When Nova made the server an action keeps (its `created`, RFC 3339).
fn server_created(a: &Action) -> Option<i64> {
    let created = a
        .existing
        .as_ref()?
        .facts
        .machine
        .as_ref()?
        .created
        .as_deref()?;
    time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(time::OffsetDateTime::unix_timestamp)
}

/// Whether a control plane may be repaired: it must not be the only one (its etcd is the cluster's).
///
/// # Errors
/// The only control plane.
pub fn check_repair(plan: &Plan, t: &Target) -> Result<(), RollError> {
    if !t.control_plane {
        return Ok(());
    }
    let count = plan
        .actions
        .iter()
        .filter(|a| a.kind == Kind::Server && is_control_plane(&a.logical_id) && a.op != Op::Delete)
        .count();
    if count < 2 {
        return Err(RollError::SingleControlPlane {
            target: t.logical_id.clone(),
            why: t.changes.join("; "),
        });
    }
    Ok(())
}

/// The cloud objects of a server `cp-N`, `workers-N`: the server, its port and its boot volume.
fn parts_of(id: &str) -> [String; 3] {
    [id.to_owned(), format!("port-{id}"), format!("vol-{id}")]
}

/// The plan without the servers that leave as steps ([`crate::succession`]): each goes on its turn
/// ([`next_retirements`]), drained and a control plane's etcd member removed first. The rest converges
/// meanwhile (the API load balancer's members no longer list them).
#[must_use]
pub fn without_retirements(plan: &Plan, retirements: &[Retirement]) -> Plan {
    let parts: Vec<String> = retirements.iter().flat_map(|r| parts_of(&r.id)).collect();
    let mut p = plan.clone();
    p.actions
        .retain(|a| !(a.op == Op::Delete && parts.contains(&a.logical_id)));
    p
}

/// The group a server's logical id belongs to: `cp` or its pool's name.
#[must_use]
pub fn group_of(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(g, _)| g)
}

/// The next servers that leave, in the order `retirements` gives: one control plane (quorum's order),
/// or every retiring server of the first pool with any (its `maxUnavailable` and surge already
/// bounded how many).
///
/// A retirement whose server is gone but whose port or volume is not (a removal killed after the
/// server's delete) is a step too, finished as any removal goes (what is left of the drain and of a
/// control plane's etcd member, its port and volume, its Node): the converge leaves a retirement's
/// parts alone, and [`crate::succession`] holds the pools while a control plane is leaving, so
/// skipping it would end the run with the pools not rolled.
#[must_use]
pub fn next_retirements(plan: &Plan, retirements: &[Retirement]) -> Vec<Target> {
    let present = |r: &&Retirement| {
        let parts = parts_of(&r.id);
        let deleted = |a: &&Action| a.op == Op::Delete && parts.contains(&a.logical_id);
        let server = plan
            .actions
            .iter()
            .filter(deleted)
            .find(|a| a.kind == Kind::Server && a.logical_id == r.id);
        let name = match server {
            Some(a) => a.name.clone(),
            None if plan.actions.iter().any(|a| deleted(&a)) => ClusterName::new(&plan.cluster)
                .ok()
                .map(|c| resource_name(&c, &r.id))?,
            None => return None,
        };
        Some(Target {
            logical_id: r.id.clone(),
            name,
            control_plane: is_control_plane(&r.id),
            volume: None,
            changes: vec![r.why.clone()],
            scale_down: true,
        })
    };
    let Some(first) = retirements.iter().find_map(|r| present(&r)) else {
        return Vec::new();
    };
    if first.control_plane {
        return vec![first];
    }
    let group = group_of(&first.logical_id).to_owned();
    retirements
        .iter()
        .filter(|r| group_of(&r.id) == group)
        .filter_map(|r| present(&r))
        .collect()
}

/// The plan the in-place replacement works from: the servers of a group that surges (`surges(group)`:
/// control planes with `maxSurge: 1`, a pool with a `maxSurge`) are not replaced in place but
/// succeeded ([`crate::succession`]), so only the others roll here.
#[must_use]
pub fn in_place(plan: &Plan, surges: &dyn Fn(&str) -> bool) -> Plan {
    let mut p = plan.clone();
    for a in &mut p.actions {
        if a.kind == Kind::Server && a.op == Op::Roll && surges(group_of(&a.logical_id)) {
            a.op = Op::NoOp;
            a.reason = "its successor joins before it leaves".into();
        }
    }
    p
}

/// The plan of one server's removal: its server, port and volume deleted, nothing else changed (other
/// deletes wait for their turn or the next converge).
#[must_use]
pub fn retirement(plan: &Plan, t: &Target) -> Plan {
    retirement_of(plan, &[t])
}

/// [`retirement`] of several servers together (a pool's step).
fn retirement_of(plan: &Plan, targets: &[&Target]) -> Plan {
    let parts: Vec<String> = targets
        .iter()
        .flat_map(|t| parts_of(&t.logical_id))
        .collect();
    let mut p = plan.clone();
    p.actions
        .retain(|a| a.op != Op::Delete || parts.contains(&a.logical_id));
    for a in &mut p.actions {
        if a.op != Op::Delete {
            a.op = Op::NoOp;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use kos_cluster::observe::{Facts, Resource};

    fn action(id: &str, kind: Kind, op: Op) -> Action {
        Action {
            logical_id: id.into(),
            kind,
            name: format!("kos-demo-{id}"),
            op,
            reason: String::new(),
            changes: vec!["flavor: a → b".into()],
            existing: Some(Resource {
                kind,
                logical_id: id.into(),
                id: format!("id-{id}"),
                name: format!("kos-demo-{id}"),
                tagged: true,
                state: "ACTIVE".into(),
                failed: false,
                facts: Facts::default(),
            }),
        }
    }

    fn plan(actions: Vec<Action>) -> Plan {
        Plan {
            cluster: "demo".into(),
            actions,
            refused: Vec::new(),
        }
    }

    #[test]
    fn control_planes_go_first_then_workers_and_volumes_follow_their_server() {
        let p = plan(vec![
            action("network", Kind::Network, Op::NoOp),
            action("vol-workers-0", Kind::Volume, Op::Roll),
            action("workers-0", Kind::Server, Op::Roll),
            action("cp-10", Kind::Server, Op::Roll),
            action("cp-1", Kind::Server, Op::Roll),
            action("cp-2", Kind::Server, Op::NoOp),
            action("workers-2", Kind::Server, Op::Roll),
        ]);
        let ids: Vec<String> = order(&p).into_iter().map(|t| t.logical_id).collect();
        assert_eq!(ids, ["cp-1", "cp-10", "workers-0", "workers-2"]);
        let shown = annotated(&p);
        assert!(
            shown
                .for_node("cp-10")
                .is_some_and(|a| a.reason.ends_with("(replacement 2 of 4)")),
            "{shown:?}"
        );
        let w = order(&p).into_iter().nth(2).expect("a worker");
        assert_eq!(w.volume.as_deref(), Some("vol-workers-0"));
        // Its volume unchanged, a replaced server still gets a fresh one.
        let unchanged = plan(vec![
            action("vol-workers-0", Kind::Volume, Op::NoOp),
            action("workers-0", Kind::Server, Op::Roll),
        ]);
        assert_eq!(
            order(&unchanged)[0].volume.as_deref(),
            Some("vol-workers-0")
        );
        assert_eq!(
            next(&p)
                .expect("3 control planes")
                .expect("a step")
                .logical_id,
            "cp-1"
        );
        assert!(rolls(&p));
        let conv = without_rolls(&p);
        assert!(!rolls(&conv));
        assert!(conv.actions.iter().all(|a| a.op == Op::NoOp));
    }

    #[test]
    fn a_control_plane_is_replaced_only_when_two_others_keep_quorum() {
        let one = plan(vec![action("cp-0", Kind::Server, Op::Roll)]);
        assert!(matches!(
            next(&one),
            Err(RollError::SingleControlPlane { .. })
        ));
        assert!(check(&one).is_err());
        let two = plan(vec![
            action("cp-0", Kind::Server, Op::Roll),
            action("cp-1", Kind::Server, Op::Roll),
        ]);
        assert!(matches!(
            next(&two),
            Err(RollError::TooFewControlPlanes { count: 2, .. })
        ));
        // Workers of a one-control-plane cluster roll; the check looks at control planes only.
        let workers = plan(vec![
            action("cp-0", Kind::Server, Op::NoOp),
            action("workers-0", Kind::Server, Op::Roll),
        ]);
        assert!(check(&workers).is_ok());
        assert_eq!(
            next(&workers).expect("ok").expect("a step").logical_id,
            "workers-0"
        );
        // A refusal comes before the workers are touched.
        let both = plan(vec![
            action("workers-0", Kind::Server, Op::Roll),
            action("cp-0", Kind::Server, Op::Roll),
        ]);
        assert!(check(&both).is_err());
        // With maxSurge 1 the control plane is succeeded, not replaced in place: the workers roll.
        let surged = in_place(&both, &|g| g == "cp");
        assert!(check(&surged).is_ok());
        assert_eq!(
            next(&surged).expect("ok").expect("a step").logical_id,
            "workers-0"
        );
        let ops = |p: &Plan| p.actions.iter().map(|a| a.op).collect::<Vec<_>>();
        assert_eq!(ops(&in_place(&both, &|_| false)), ops(&both));
        // A pool that surges is succeeded too.
        assert!(!rolls(&in_place(&both, &|_| true)));
    }

    #[test]
    fn a_removal_deletes_the_target_and_its_volume_only() {
        let p = plan(vec![
            action("port-workers-0", Kind::Port, Op::NoOp),
            action("vol-workers-0", Kind::Volume, Op::Roll),
            action("workers-0", Kind::Server, Op::Roll),
            action("workers-1", Kind::Server, Op::Roll),
            action("vol-workers-1", Kind::Volume, Op::Roll),
        ]);
        let t = next(&p).expect("ok").expect("a step");
        let r = removal(&p, &t);
        let deleted: Vec<&str> = r
            .actions
            .iter()
            .filter(|a| a.op == Op::Delete)
            .map(|a| a.logical_id.as_str())
            .collect();
        assert_eq!(deleted, ["vol-workers-0", "workers-0"]);
        assert!(
            r.actions
                .iter()
                .filter(|a| a.op != Op::Delete)
                .all(|a| a.op == Op::NoOp)
        );
        // Still listed for the engine, which would otherwise create it in the same run.
        assert_eq!(r.for_node("workers-0").map(|a| a.op), Some(Op::NoOp));
        assert!(r.actions.last().is_some_and(|a| a.op == Op::Delete));
    }

    #[test]
    fn scaled_down_control_planes_go_one_at_a_time_in_quorums_order() {
        let p = plan(vec![
            action("cp-0", Kind::Server, Op::NoOp),
            action("members", Kind::Members, Op::Update),
            action("cp-1", Kind::Server, Op::Delete),
            action("port-cp-1", Kind::Port, Op::Delete),
            action("cp-2", Kind::Server, Op::Delete),
            action("port-cp-2", Kind::Port, Op::Delete),
            action("workers-3", Kind::Server, Op::Delete),
        ]);
        let leave = |id: &str| Retirement {
            id: id.to_owned(),
            why: "controlPlane.count is smaller".into(),
        };
        let order = [leave("cp-2"), leave("cp-1")];
        let conv = without_retirements(&p, &order);
        let deleted: Vec<&str> = conv
            .actions
            .iter()
            .filter(|a| a.op == Op::Delete)
            .map(|a| a.logical_id.as_str())
            .collect();
        assert_eq!(deleted, ["workers-3"], "workers go in the converge");
        assert!(conv.actions.iter().any(|a| a.op == Op::Update));
        let t = next_retirements(&p, &order).remove(0);
        assert_eq!(t.logical_id, "cp-2");
        let r = retirement(&p, &t);
        let deleted: Vec<&str> = r
            .actions
            .iter()
            .filter(|a| a.op == Op::Delete)
            .map(|a| a.logical_id.as_str())
            .collect();
        assert_eq!(deleted, ["cp-2", "port-cp-2"]);
        assert!(
            r.actions
                .iter()
                .all(|a| a.op == Op::Delete || a.op == Op::NoOp)
        );
        // Once cp-2 is gone, cp-1 is next.
        let after = plan(vec![
            action("cp-0", Kind::Server, Op::NoOp),
            action("cp-1", Kind::Server, Op::Delete),
        ]);
        assert_eq!(
            next_retirements(&after, &[leave("cp-1")])
                .into_iter()
                .map(|t| t.logical_id)
                .collect::<Vec<_>>(),
            ["cp-1"]
        );
    }

    /// A removal killed after its server went left its port and volume: the retirement is still a
    /// step (named as its server was, for its Node and etcd member), deleting what is left; one with
    /// nothing left is none.
    #[test]
    fn a_retirement_whose_server_went_is_finished_by_a_step() {
        let p = plan(vec![
            action("cp-3", Kind::Server, Op::NoOp),
            action("port-cp-2", Kind::Port, Op::Delete),
            action("vol-cp-2", Kind::Volume, Op::Delete),
            action("w-0", Kind::Server, Op::Roll),
        ]);
        let leave = |id: &str| Retirement {
            id: id.to_owned(),
            why: "controlPlane.count is smaller".into(),
        };
        assert!(
            without_retirements(&p, &[leave("cp-2")])
                .actions
                .iter()
                .all(|a| a.op != Op::Delete),
            "not the converge's"
        );
        let batch = next_retirements(&p, &[leave("cp-2")]);
        assert_eq!(
            batch,
            [Target {
                logical_id: "cp-2".into(),
                name: "kos-demo-cp-2".into(),
                control_plane: true,
                volume: None,
                changes: vec!["controlPlane.count is smaller".into()],
                scale_down: true,
            }]
        );
        let step = step_plan(&p, &batch);
        let mut deleted: Vec<&str> = step
            .actions
            .iter()
            .filter(|a| a.op == Op::Delete)
            .map(|a| a.logical_id.as_str())
            .collect();
        deleted.sort_unstable();
        assert_eq!(deleted, ["port-cp-2", "vol-cp-2"]);
        assert!(next_retirements(&p, &[leave("cp-1")]).is_empty());
    }

    /// A pool's retiring servers go in one step (their count already bounded by its surge and
    /// maxUnavailable), each with its port and volume; control planes stay one at a time.
    #[test]
    fn a_pools_retirements_go_together_with_their_ports_and_volumes() {
        let p = plan(vec![
            action("cp-0", Kind::Server, Op::Delete),
            action("cp-1", Kind::Server, Op::Delete),
            action("w-0", Kind::Server, Op::Delete),
            action("port-w-0", Kind::Port, Op::Delete),
            action("vol-w-0", Kind::Volume, Op::Delete),
            action("w-1", Kind::Server, Op::Delete),
            action("port-w-1", Kind::Port, Op::Delete),
            action("w-2", Kind::Server, Op::NoOp),
            action("x-0", Kind::Server, Op::Delete),
        ]);
        let leave = |id: &str| Retirement {
            id: id.to_owned(),
            why: "replaced by a successor that joined first (flavor: a → b)".into(),
        };
        let ids = |v: &[Target]| v.iter().map(|t| t.logical_id.clone()).collect::<Vec<_>>();
        let cps = next_retirements(&p, &[leave("cp-1"), leave("cp-0")]);
        assert_eq!(ids(&cps), ["cp-1"]);
        let order = [leave("w-1"), leave("x-0"), leave("w-0")];
        let batch = next_retirements(&p, &order);
        assert_eq!(ids(&batch), ["w-1", "w-0"]);
        assert!(batch.iter().all(|t| !t.control_plane && t.scale_down));
        let step = step_plan(&p, &batch);
        let mut deleted: Vec<&str> = step
            .actions
            .iter()
            .filter(|a| a.op == Op::Delete)
            .map(|a| a.logical_id.as_str())
            .collect();
        deleted.sort_unstable();
        assert_eq!(deleted, ["port-w-0", "port-w-1", "vol-w-0", "w-0", "w-1"]);
        assert_eq!(group_of("big-workers-12"), "big-workers");
    }

    /// A server made again (here a control plane whose bootstrap an interrupted run left failed)
    /// while another leaves: the step deletes the one made again, never the leaving one, whose
    /// drain and etcd member come first in its own step.
    #[test]
    fn a_step_deletes_only_its_own_servers() {
        let p = plan(vec![
            action("cp-1", Kind::Server, Op::NoOp),
            action("cp-3", Kind::Server, Op::NoOp),
            action("vol-cp-3", Kind::Volume, Op::NoOp),
            action("cp-0", Kind::Server, Op::Delete),
            action("port-cp-0", Kind::Port, Op::Delete),
            action("vol-cp-0", Kind::Volume, Op::Delete),
        ]);
        let batch = remakes(&p, &["cp-3".to_owned()]);
        assert_eq!(batch.len(), 1);
        let step = step_plan(&p, &batch);
        let mut deleted: Vec<&str> = step
            .actions
            .iter()
            .filter(|a| a.op == Op::Delete)
            .map(|a| a.logical_id.as_str())
            .collect();
        deleted.sort_unstable();
        assert_eq!(deleted, ["cp-3", "vol-cp-3"]);
        assert!(
            step.actions
                .iter()
                .all(|a| a.op == Op::Delete || a.op == Op::NoOp)
        );
    }

    /// Every server of `p` has its Node; `sick` are not Ready.
    fn health_of(p: &Plan, sick: &[Unhealthy]) -> NodeHealth {
        NodeHealth {
            names: p
                .actions
                .iter()
                .filter(|a| a.kind == Kind::Server)
                .map(|a| a.name.clone())
                .collect(),
            unhealthy: sick.to_vec(),
        }
    }

    /// A server without a Node is pending for its group's `nodeStartupTimeout` from when Nova
    /// made it, then unhealthy: it never joined, or its Node was deleted behind kos's back.
    /// Before, `--repair` took a server without a Node for a healthy one, whatever its age.
    #[test]
    fn repair_replaces_a_server_whose_node_never_came_or_went() {
        let made = |id: &str, created: &str| {
            let mut a = action(id, Kind::Server, Op::NoOp);
            if let Some(r) = a.existing.as_mut() {
                r.facts.machine = Some(kos_cluster::observe::MachineFacts {
                    created: Some(created.into()),
                    ..Default::default()
                });
            }
            a
        };
        // 2026-01-01T00:00:00Z is 1767225600.
        let now = 1_767_225_600 + 3600;
        let p = plan(vec![
            made("workers-0", "2026-01-01T00:00:00Z"),
            made("workers-1", "2026-01-01T00:55:00Z"),
            made("workers-2", "2026-01-01T00:00:00Z"),
        ]);
        let mut nodes = health_of(&p, &[]);
        nodes.names.remove("kos-demo-workers-0");
        nodes.names.remove("kos-demo-workers-1");
        let rules = BTreeMap::new();
        let r = repairs(&p, &rules, &nodes, now, None);
        let ids: Vec<&str> = r.targets.iter().map(|t| t.logical_id.as_str()).collect();
        assert_eq!(ids, ["workers-0"], "workers-1 is 5 minutes old: pending");
        assert_eq!(
            r.targets[0].changes,
            ["its Node failed to report startup in 600s"]
        );
        // `nodeStartupTimeout: 0s` switches the check off: no Node is never unhealthy.
        let off: BTreeMap<String, HealthCheck> = [(
            "workers".to_owned(),
            HealthCheck {
                node_startup_timeout_secs: None,
                ..HealthCheck::default()
            },
        )]
        .into();
        assert!(repairs(&p, &off, &nodes, now, None).targets.is_empty());
    }

    #[test]
    fn repair_replaces_nodes_notready_long_enough_control_planes_first() {
        let p = plan(vec![
            action("cp-0", Kind::Server, Op::NoOp),
            action("workers-0", Kind::Server, Op::NoOp),
            action("vol-workers-0", Kind::Volume, Op::NoOp),
            action("workers-1", Kind::Server, Op::NoOp),
            action("workers-2", Kind::Server, Op::Roll),
        ]);
        let u = |n: &str, since| Unhealthy {
            node: format!("kos-demo-{n}"),
            status: ConditionStatus::Unknown,
            since_unix: since,
        };
        let sick = [
            u("workers-0", 100),
            u("workers-1", 350),
            u("cp-0", 0),
            u("workers-2", 0),
        ];
        let sick = health_of(&p, &sick);
        let rules = BTreeMap::new();
        let ids =
            |r: Repairs| -> Vec<String> { r.targets.into_iter().map(|t| t.logical_id).collect() };
        assert_eq!(
            ids(repairs(&p, &rules, &sick, 400, Some(290))),
            ["cp-0", "workers-0"],
            "workers-1 too recent, workers-2 rolled anyway"
        );
        // The spec's default: Ready Unknown for 300 s.
        assert_eq!(ids(repairs(&p, &rules, &sick, 399, None)), ["cp-0"]);
        assert_eq!(
            ids(repairs(&p, &rules, &sick, 400, None)),
            ["cp-0", "workers-0"]
        );
        let w0 = repairs(&p, &rules, &sick, 400, Some(290))
            .targets
            .pop()
            .expect("workers-0");
        assert_eq!(w0.volume.as_deref(), Some("vol-workers-0"));
        assert!(
            w0.changes[0].starts_with("NotReady for 300s"),
            "{:?}",
            w0.changes
        );
        let cp = repairs(&p, &rules, &sick, 400, Some(290)).targets.remove(0);
        assert!(check_repair(&p, &cp).is_err(), "the only control plane");
        assert!(check_repair(&p, &w0).is_ok());
        // A NotReady time ahead of this clock (another machine's, or a simulated cloud's faster
        // one) counts as just now.
        let ahead = health_of(&p, &[u("workers-0", 10_000)]);
        assert!(repairs(&p, &rules, &ahead, 400, Some(1)).targets.is_empty());
        assert_eq!(repairs(&p, &rules, &ahead, 400, Some(0)).targets.len(), 1);
    }

    #[test]
    fn repair_follows_each_groups_health_check_and_holds_past_max_unhealthy() {
        use kos_cluster::spec::MaxUnhealthy;
        let p = plan(
            (0..5)
                .map(|i| action(&format!("workers-{i}"), Kind::Server, Op::NoOp))
                .collect(),
        );
        let sick = |n: usize| -> NodeHealth {
            let u: Vec<Unhealthy> = (0..n)
                .map(|i| Unhealthy {
                    node: format!("kos-demo-workers-{i}"),
                    status: ConditionStatus::False,
                    since_unix: 0,
                })
                .collect();
            health_of(&p, &u)
        };
        let rules: BTreeMap<String, HealthCheck> = [(
            "workers".to_owned(),
            HealthCheck {
                max_unhealthy: MaxUnhealthy::Percent(40),
                ..HealthCheck::default()
            },
        )]
        .into();
        // Three of five NotReady at once: a partition, not three dead nodes.
        let three = repairs(&p, &rules, &sick(3), 1000, None);
        assert!(three.targets.is_empty());
        assert_eq!(three.held.len(), 1);
        assert!(
            three.held[0]
                .1
                .contains("(total: 5, unhealthy: 3, maxUnhealthy: 2)"),
            "{:?}",
            three.held
        );
        assert_eq!(repairs(&p, &rules, &sick(2), 1000, None).targets.len(), 2);
        // Switched off: nothing replaced, and said so.
        let off: BTreeMap<String, HealthCheck> = [(
            "workers".to_owned(),
            HealthCheck {
                enabled: false,
                ..HealthCheck::default()
            },
        )]
        .into();
        let held = repairs(&p, &off, &sick(1), 1000, None);
        assert!(held.targets.is_empty());
        assert_eq!(held.held[0].0, "workers");
    }

    #[test]
    fn workers_go_in_batches_of_their_pools_max_unavailable() {
        let p = plan(vec![
            action("cp-0", Kind::Server, Op::NoOp),
            action("a-0", Kind::Server, Op::Roll),
            action("a-1", Kind::Server, Op::Roll),
            action("a-2", Kind::Server, Op::Roll),
            action("b-0", Kind::Server, Op::Roll),
        ]);
        let ids = |v: Vec<Target>| v.into_iter().map(|t| t.logical_id).collect::<Vec<_>>();
        let two = |pool: &str| if pool == "a" { 2 } else { 5 };
        assert_eq!(ids(next_batch(&p, &two).expect("ok")), ["a-0", "a-1"]);
        assert_eq!(
            ids(next_batch(&p, &|_| 0).expect("ok")),
            ["a-0"],
            "at least one"
        );
        let cps = plan(vec![
            action("cp-0", Kind::Server, Op::Roll),
            action("cp-1", Kind::Server, Op::Roll),
            action("cp-2", Kind::Server, Op::Roll),
        ]);
        assert_eq!(
            ids(next_batch(&cps, &|_| 3).expect("ok")),
            ["cp-0"],
            "one control plane"
        );
    }
}
