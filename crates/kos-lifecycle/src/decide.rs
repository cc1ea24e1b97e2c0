//! One turn's decision, before anything changes: from the spec, what preflight resolved, what the
//! cloud shows and whether the cluster is formed, the desired graph and the [`Decided`] a run acts on
//! (the plan, the servers that leave, the groups that surge). Refusals come from here: a release
//! more than a minor away, a scale-down that would lose quorum, a change no running cluster can take.

use std::collections::{BTreeMap, BTreeSet};

use kos_bootstrap::KubeVersion;
use kos_cluster::ClusterSpec;
use kos_cluster::bootstrap::Formation;
use kos_cluster::graph::record::{TAG_KUBERNETES, recorded};
use kos_cluster::graph::{ApiVip, DesiredGraph, GraphError, Kind, Slots, VIP_PORT, desired_in};
use kos_cluster::observe::Observed;
use kos_cluster::plan::{self, Op, Plan};
use kos_cluster::resolved::Resolved;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::encryption::{NONE_RECORDED, TAG_ENCRYPTION};
use crate::formation::is_control_plane;

use crate::quorum::QuorumError;
use crate::run::Decided;
use crate::succession::{self, Rule};
use crate::version::{VersionError, check_change};

/// What a turn decides from.
pub struct Inputs<'a> {
    pub spec: &'a ClusterSpec,
    pub resolved: &'a Resolved,
    pub observed: &'a Observed,
    pub formation: Formation,
    /// The release this machine last applied: the running one for a cluster whose servers were made
    /// before they recorded theirs.
    pub last_applied: Option<KubeVersion>,
    /// `kos up --renew-certificates`: control planes made before this moment (Unix seconds: the
    /// run's start) are replaced, their successors getting new kubeadm certificates.
    pub renew_before: Option<i64>,
    /// The record of the key set the control planes' kube-apiservers should run with
    /// ([`crate::encryption::KeyState::desired_record`]); `None` leaves encryption out of the
    /// decision (a cluster whose keys are not known here).
    pub encryption: Option<&'a str>,
    /// Servers (`cp-1`) the cluster shows no Node of, when it was asked: they have not joined, and
    /// nothing they replace leaves yet.
    pub not_joined: &'a BTreeSet<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("spec.kubernetesVersion: {0}")]
    Version(#[from] VersionError),
    #[error("spec.controlPlane.count {count}: {source}")]
    Quorum { count: u32, source: QuorumError },
    #[error("cannot build the cluster's resource graph: {0}")]
    Graph(#[from] GraphError),
    #[error(
        "the spec changes what the running cluster {cluster} cannot change:\n  - {}",
        refused.join("\n  - ")
    )]
    Refused {
        cluster: String,
        refused: Vec<String>,
    },
}

/// The graph and the decision of one turn.
///
/// # Errors
/// A refusal: nothing may change.
pub fn decide(i: &Inputs<'_>) -> Result<(DesiredGraph, Decided), DecideError> {
    if i.formation == Formation::Formed {
        check_release(i)?;
    }
    let spec = i.spec;
    let count = spec.control_plane.count.get();
    let control_planes = Rule {
        prefix: "cp",
        count,
        surge: u32::from(spec.control_plane.surges(spec.api_endpoint.kind.value)),
        unavailable: 0,
        zones: i.resolved.control_plane.availability_zones.len(),
    };
    let pools: Vec<Rule<'_>> = spec
        .node_pools
        .iter()
        .map(|pool| Rule {
            prefix: pool.name.value.as_str(),
            count: pool.count.value,
            surge: pool.max_surge,
            unavailable: pool.max_unavailable,
            zones: i
                .resolved
                .pools
                .get(&pool.name.value)
                .map_or(0, |m| m.availability_zones.len()),
        })
        .collect();
    // A single control plane that cannot surge (behind a floating IP) can only be replaced in
    // place, which loses the cluster: its key set is left as it is (the rotation waits; `kos
    // rotate encryption-key` refuses such a cluster up front).
    let rekeyed = i
        .encryption
        .filter(|_| control_planes.surge > 0 || count > 1);
    let api_vip = api_vip(i.observed);
    let graph_of = |slots: &Slots| {
        let mut g = desired_in(
            spec,
            i.resolved,
            i.formation,
            &slots.clone().with_api_vip(api_vip),
        )?;
        if let Some(want) = i.encryption {
            record_keys(&mut g, want);
        }
        Ok::<_, GraphError>(g)
    };
    // Against every existing server first: which of them the spec replaces decides who joins.
    let counts: Vec<(&str, u32)> = pools.iter().map(|r| (r.prefix, r.count)).collect();
    let provisional = succession::provisional(i.observed, count, &counts);
    let graph = graph_of(&provisional)?;
    let mut first = plan::plan(&graph, i.observed);
    if let Some(before) = i.renew_before {
        renew(&mut first, before);
    }
    if let Some(want) = rekeyed {
        rekey(&mut first, want);
    }
    let succession = succession::decide(
        i.observed,
        &succession::outdated(&first),
        control_planes,
        &pools,
        i.not_joined,
    )
    .map_err(|source| DecideError::Quorum { count, source })?;
    let (graph, plan) = if succession.slots == provisional {
        (graph, first)
    } else {
        let graph = graph_of(&succession.slots)?;
        let mut plan = plan::plan(&graph, i.observed);
        if let Some(before) = i.renew_before {
            renew(&mut plan, before);
        }
        if let Some(want) = rekeyed {
            rekey(&mut plan, want);
        }
        (graph, plan)
    };
    if !plan.refused.is_empty() {
        return Err(DecideError::Refused {
            cluster: plan.cluster.clone(),
            refused: plan.refused,
        });
    }
    let surging: BTreeSet<String> = std::iter::once(&control_planes)
        .chain(&pools)
        .filter(|r| r.surge > 0)
        .map(|r| r.prefix.to_owned())
        .collect();
    let max_unavailable: BTreeMap<String, usize> = spec
        .node_pools
        .iter()
        .map(|p| (p.name.value.to_string(), p.max_unavailable as usize))
        .collect();
    let health: BTreeMap<String, kos_cluster::spec::HealthCheck> = std::iter::once((
        control_planes.prefix.to_owned(),
        spec.control_plane.health_check.clone(),
    ))
    .chain(
        spec.node_pools
            .iter()
            .map(|p| (p.name.value.to_string(), p.health_check.clone())),
    )
    .collect();
    Ok((
        graph,
        Decided {
            plan,
            retirements: succession.retirements,
            waiting: succession.waiting,
            surging,
            max_unavailable,
            health,
        },
    ))
}

/// Every control plane made before `before` (Unix seconds) is replaced, with its boot volume, as one
/// whose kubeadm certificates run out is.
fn renew(plan: &mut Plan, before: i64) {
    let mut volumes = BTreeSet::new();
    for a in &mut plan.actions {
        let made = a
            .existing
            .as_ref()
            .and_then(|r| r.facts.machine.as_ref())
            .and_then(|m| m.created.as_deref())
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok());
        if a.kind == Kind::Server
            && is_control_plane(&a.logical_id)
            && matches!(a.op, Op::NoOp | Op::Update)
            && made.is_some_and(|t| t.unix_timestamp() < before)
        {
            a.op = Op::Roll;
            a.reason = "made for another spec: replaced, drained first".into();
            a.changes
                .push("its kubeadm certificates are renewed (--renew-certificates)".into());
            volumes.insert(format!("vol-{}", a.logical_id));
        }
    }
    plan::replace_volumes(&mut plan.actions, &volumes);
}

/// Every control plane made now records the key names its kube-apiserver runs with.
fn record_keys(graph: &mut DesiredGraph, want: &str) {
    for n in graph.nodes.values_mut() {
        if n.kind == Kind::Server && is_control_plane(&n.id) {
            n.tags.push(format!("{TAG_ENCRYPTION}={want}"));
        }
    }
}

/// Control planes whose kube-apiserver runs with another key set are replaced (with their boot
/// volumes): kos changes a node's files only by making it again. One made before kos recorded keys
/// runs without any ([`NONE_RECORDED`]).
fn rekey(plan: &mut Plan, want: &str) {
    let mut volumes = BTreeSet::new();
    for a in &mut plan.actions {
        let Some(have) = a.existing.as_ref() else {
            continue;
        };
        if a.kind != Kind::Server || !is_control_plane(&a.logical_id) {
            continue;
        }
        let recorded = recorded(&have.facts.tags, TAG_ENCRYPTION).unwrap_or(NONE_RECORDED);
        if recorded == want {
            continue;
        }
        if matches!(a.op, Op::NoOp | Op::Update) {
            a.op = Op::Roll;
            a.reason = "made for another spec: replaced, drained first".into();
            volumes.insert(format!("vol-{}", a.logical_id));
        }
        if matches!(a.op, Op::Roll | Op::Replace) {
            a.changes
                .push(format!("encryption keys changed: {recorded} → {want}"));
        }
    }
    plan::replace_volumes(&mut plan.actions, &volumes);
}

/// A running cluster moves one minor at a time and never back: from what its servers were made
/// with (their record tags), or else the release this machine last applied.
fn check_release(i: &Inputs<'_>) -> Result<(), VersionError> {
    let Ok(wanted) = i.spec.kubernetes_version.to_string().parse::<KubeVersion>() else {
        return Ok(());
    };
    let mut running: Vec<KubeVersion> = i
        .observed
        .all()
        .filter(|r| r.kind == Kind::Server)
        .filter_map(|r| recorded(&r.facts.tags, TAG_KUBERNETES))
        .filter_map(|v| v.parse().ok())
        .collect();
    if running.is_empty() {
        running.extend(i.last_applied);
    }
    check_change(&running, wanted)
}

/// Who makes the API load balancer's VIP port: kos, unless a load balancer exists without kos's
/// (made by an earlier kos, Octavia gave it its VIP): that one keeps it, since a new VIP would change
/// the API's address.
#[must_use]
pub fn api_vip(observed: &Observed) -> ApiVip {
    if !observed.get("api-lb").is_empty() && observed.get(VIP_PORT).is_empty() {
        ApiVip::Octavia
    } else {
        ApiVip::Kos
    }
}

#[cfg(test)]
mod tests {
    use kos_cluster::observe::{Facts, MachineFacts, Resource};
    use kos_cluster::plan::Action;

    use super::*;

    fn made_at(id: &str, kind: Kind, op: Op, created: &str) -> Action {
        Action {
            logical_id: id.into(),
            kind,
            name: format!("kos-demo-{id}"),
            op,
            reason: String::new(),
            changes: Vec::new(),
            existing: Some(Resource {
                kind,
                logical_id: id.into(),
                id: format!("id-{id}"),
                name: format!("kos-demo-{id}"),
                tagged: true,
                state: "ACTIVE".into(),
                failed: false,
                facts: Facts {
                    machine: Some(MachineFacts {
                        created: Some(created.into()),
                        ..MachineFacts::default()
                    }),
                    ..Facts::default()
                },
            }),
        }
    }

    /// Control planes made before the run are replaced with their volumes; one made during the run
    /// (a successor) and workers are not.
    #[test]
    fn renewing_replaces_the_control_planes_made_before_the_run() {
        let mut plan = Plan {
            cluster: "demo".into(),
            refused: Vec::new(),
            actions: vec![
                made_at("cp-0", Kind::Server, Op::NoOp, "2026-01-01T00:00:00Z"),
                made_at("vol-cp-0", Kind::Volume, Op::NoOp, "2026-01-01T00:00:00Z"),
                made_at("cp-1", Kind::Server, Op::Roll, "2026-01-01T00:00:00Z"),
                made_at("cp-2", Kind::Server, Op::NoOp, "2026-06-01T00:00:01Z"),
                made_at("workers-0", Kind::Server, Op::NoOp, "2026-01-01T00:00:00Z"),
            ],
        };
        let before = OffsetDateTime::parse("2026-06-01T00:00:00Z", &Rfc3339)
            .map(OffsetDateTime::unix_timestamp)
            .unwrap_or_default();
        renew(&mut plan, before);
        let ops: Vec<(&str, Op)> = plan
            .actions
            .iter()
            .map(|a| (a.logical_id.as_str(), a.op))
            .collect();
        assert_eq!(
            ops,
            [
                ("cp-0", Op::Roll),
                ("vol-cp-0", Op::Roll),
                ("cp-1", Op::Roll),
                ("cp-2", Op::NoOp),
                ("workers-0", Op::NoOp)
            ]
        );
        assert!(plan.actions[0].changes[0].contains("--renew-certificates"));
        assert!(plan.actions[2].changes.is_empty(), "replaced anyway");
    }

    fn seen(ids: &[(&str, Kind)]) -> Observed {
        let mut o = Observed::default();
        for (id, kind) in ids {
            o.resources.insert(
                (*id).to_owned(),
                vec![Resource {
                    kind: *kind,
                    logical_id: (*id).into(),
                    id: format!("id-{id}"),
                    name: format!("kos-demo-{id}"),
                    tagged: true,
                    state: "ACTIVE".into(),
                    failed: false,
                    facts: Facts::default(),
                }],
            );
        }
        o
    }

    /// A new cluster, or one half made by this kos, gets kos's VIP port; a load balancer an earlier
    /// kos made (Octavia's VIP) keeps its address.
    #[test]
    fn the_vip_port_is_kos_unless_a_load_balancer_has_octavias() {
        assert_eq!(api_vip(&seen(&[])), ApiVip::Kos);
        assert_eq!(api_vip(&seen(&[(VIP_PORT, Kind::Port)])), ApiVip::Kos);
        assert_eq!(
            api_vip(&seen(&[
                (VIP_PORT, Kind::Port),
                ("api-lb", Kind::LoadBalancer)
            ])),
            ApiVip::Kos
        );
        assert_eq!(
            api_vip(&seen(&[
                ("api-lb", Kind::LoadBalancer),
                ("api-fip", Kind::FloatingIp)
            ])),
            ApiVip::Octavia
        );
    }
}
