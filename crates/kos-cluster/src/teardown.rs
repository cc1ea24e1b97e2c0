//! Teardown (`kos down`) and garbage collection (`kos gc`).
//!
//! Teardown deletes everything tagged for the cluster (or, untagged, named `kos-<cluster>-<logical id>`
//! exactly: never an object of a cluster whose name extends this one's), plus what the cluster made at run
//! time through kos-ccm (or the upstream CCM) and CSI: load balancers named `kube_service_<cluster>_…`,
//! floating IPs described "… from cluster <cluster>", the CCM's `lb-sg-…` security groups, Cinder volumes
//! and snapshots with `cinder.csi.openstack.org/cluster=<cluster>` (the CSI driver writes it on both),
//! ports left on kos's network and interfaces of kos's router. A snapshot without that metadata (a user's,
//! taken by hand of a CSI volume) is never deleted: Cinder then refuses the volume, and teardown names
//! the snapshot instead of deleting data kos did not make. kos-ccm tags its objects `kos-ccm-cluster=<cluster>` (older releases: `kos-cluster=<cluster>`,
//! kos's own key); a tag alone never dooms a load balancer, since kos-ccm also tags a user's load balancer
//! that Services share, and that one is the user's.
//! Order: each object as soon as what holds it is gone (`apply/delete.rs` `holds`: a server's port
//! after that server, a subnet after its ports and interface, a volume after its server and the
//! snapshots, which Cinder refuses it with even while they are being deleted), waiting for absence of
//! servers, LBs, snapshots and volumes; the load balancers, servers and floating IPs go at once;
//! reports list them in [`Kind::delete_rank`] order. A delete refused because an
//! earlier one took effect (its answer lost) waits for absence like an accepted one. It works on half-made
//! clusters, is idempotent, and never touches a bring-your-own network, subnet or router (they carry no kos
//! tag and no kos name). [`teardown_with_events`] reports progress as apply does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use kos_cloud::{CloudError, Session};
use serde::Serialize;

use tokio::sync::mpsc::Sender;

use crate::apply::{Deleter, Filters, Waiter};
use crate::events::{Event, Phase, emit};
use crate::graph::Kind;
use crate::names::{TAG_CCM_CLUSTER, TAG_CLUSTER};
use crate::observe::{CSI_CLUSTER_KEY, Facts, Inventory, ROUTER_INTERFACE, Resource, Scope};

/// Knobs of a teardown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownOptions {
    /// List what would be deleted, delete nothing.
    pub dry_run: bool,
    pub poll_interval: Duration,
    /// For each wait for absence (and "in use" retries).
    pub deadline: Duration,
    /// Whose clock `poll_interval` and `deadline` are in.
    pub clock: crate::apply::WaitClock,
}

impl Default for TeardownOptions {
    fn default() -> Self {
        TeardownOptions {
            dry_run: false,
            poll_interval: Duration::from_secs(2),
            deadline: Duration::from_secs(600),
            clock: crate::apply::WaitClock::Cloud,
        }
    }
}

impl TeardownOptions {
    /// For the simulator (`SimConfig::fast()`).
    #[must_use]
    pub fn fast() -> Self {
        TeardownOptions {
            dry_run: false,
            poll_interval: Duration::from_millis(5),
            deadline: Duration::from_secs(30),
            clock: crate::apply::WaitClock::Local,
        }
    }
}

/// What a teardown deleted (or, dry, would delete).
#[derive(Debug, Clone, Serialize)]
pub struct TeardownReport {
    pub cluster: String,
    pub dry_run: bool,
    /// In delete order.
    pub resources: Vec<Resource>,
}

#[derive(Debug, thiserror::Error)]
pub enum TeardownError {
    #[error("cannot list the cluster's resources: {0}")]
    Observe(#[from] CloudError),
    #[error("teardown of {cluster} incomplete ({} left; run it again): {}", .failures.len(), render(.failures))]
    Incomplete {
        cluster: String,
        failures: Vec<(Resource, String)>,
    },
    /// The caller's record of what was found failed: nothing was deleted.
    #[error("nothing deleted: what was found could not be recorded")]
    Found(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Called with what a teardown found, before it deletes anything (see [`teardown_recording`]).
type Found<'a> = Box<
    dyn FnOnce(&[Resource]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + 'a,
>;

fn render(f: &[(Resource, String)]) -> String {
    f.iter()
        .map(|(r, e)| format!("{} {} ({}): {e}", r.kind.as_str(), r.name, r.id))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Deletes the cluster `cluster` (with default waits; see [`teardown_with`]).
///
/// # Errors
/// See [`teardown_with`].
pub async fn teardown(
    session: &Session,
    cluster: &str,
    dry_run: bool,
) -> Result<TeardownReport, TeardownError> {
    let opts = TeardownOptions {
        dry_run,
        ..TeardownOptions::default()
    };
    teardown_with(session, cluster, &opts).await
}

/// Deletes everything of `cluster`, in reverse dependency order, waiting for absence.
///
/// # Errors
/// A list call failed, or some objects could not be deleted (each named with its cause); what could be
/// deleted was.
pub async fn teardown_with(
    session: &Session,
    cluster: &str,
    opts: &TeardownOptions,
) -> Result<TeardownReport, TeardownError> {
    run(session, cluster, opts, None, None).await
}

/// [`teardown_with`], calling `found` with the objects it is about to delete, in delete order,
/// after its one listing and before its first delete (not on a dry run): a caller records that it
/// found the cluster without listing the project a second time. When `found` fails, nothing is
/// deleted ([`TeardownError::Found`]).
///
/// # Errors
/// See [`teardown_with`], and [`TeardownError::Found`].
pub async fn teardown_recording<'a, E>(
    session: &Session,
    cluster: &str,
    opts: &TeardownOptions,
    found: impl FnOnce(&[Resource]) -> Result<(), E> + Send + 'a,
) -> Result<TeardownReport, TeardownError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let found: Found<'a> = Box::new(move |r| found(r).map_err(Into::into));
    run(session, cluster, opts, None, Some(found)).await
}

/// [`teardown_with`], reporting progress as apply does: [`Phase::Teardown`], then `Waiting`, `Deleted` and
/// `Failed` per object, then [`Phase::Done`] (also on a dry run or an error).
///
/// # Errors
/// See [`teardown_with`].
pub async fn teardown_with_events(
    session: &Session,
    cluster: &str,
    opts: &TeardownOptions,
    events: Sender<Event>,
) -> Result<TeardownReport, TeardownError> {
    run(session, cluster, opts, Some(&events), None).await
}

async fn run(
    session: &Session,
    cluster: &str,
    opts: &TeardownOptions,
    events: Option<&Sender<Event>>,
    found: Option<Found<'_>>,
) -> Result<TeardownReport, TeardownError> {
    emit(
        events,
        Event::Phase {
            phase: Phase::Teardown,
        },
    );
    let out = delete_cluster(session, cluster, opts, events, found).await;
    emit(events, Event::Phase { phase: Phase::Done });
    out
}

async fn delete_cluster(
    session: &Session,
    cluster: &str,
    opts: &TeardownOptions,
    events: Option<&Sender<Event>>,
    found: Option<Found<'_>>,
) -> Result<TeardownReport, TeardownError> {
    let inv = Inventory::fetch(session, Scope::All).await?;
    let mut doomed = doomed(&inv, cluster);
    doomed.sort_by_key(|r| (r.kind.delete_rank(), r.name.clone()));
    if !opts.dry_run {
        if let Some(found) = found {
            found(&doomed).map_err(TeardownError::Found)?;
        }
        delete(session, cluster, &doomed, opts, events).await?;
    }
    Ok(TeardownReport {
        cluster: cluster.to_owned(),
        dry_run: opts.dry_run,
        resources: doomed,
    })
}

/// Deletes `doomed` (in delete order), reporting each failure.
async fn delete(
    session: &Session,
    cluster: &str,
    doomed: &[Resource],
    opts: &TeardownOptions,
    events: Option<&Sender<Event>>,
) -> Result<(), TeardownError> {
    if doomed.is_empty() {
        return Ok(());
    }
    let waiter = Waiter::new(
        session.clone(),
        Filters {
            servers: TagQuery::all([format!("{TAG_CLUSTER}={cluster}")]),
            load_balancers: LoadBalancerFilter::default(),
            volumes: VolumeFilter::default(),
        },
        opts.poll_interval,
    )
    .with_clock(opts.clock);
    let deleter = Deleter {
        session,
        waiter: &waiter,
        deadline: opts.deadline,
        poll: opts.poll_interval,
        events,
    };
    let failures = deleter.delete_all(doomed.to_vec()).await;
    for (r, e) in &failures {
        emit(
            events,
            Event::Failed {
                id: r.logical_id.clone(),
                error: e.to_string(),
            },
        );
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(TeardownError::Incomplete {
            cluster: cluster.to_owned(),
            failures: failures
                .into_iter()
                .map(|(r, e)| (r, e.to_string()))
                .collect(),
        })
    }
}

/// Everything teardown removes for `cluster`.
fn doomed(inv: &Inventory, cluster: &str) -> Vec<Resource> {
    let observed = inv.classify(cluster);
    let mut out: Vec<Resource> = observed
        .all()
        // Children go with their LB (cascade), rules with their group; deleting the FIP disassociates it.
        .filter(|r| {
            !matches!(
                r.kind,
                Kind::SecurityGroupRules
                    | Kind::Members
                    | Kind::Listener
                    | Kind::Pool
                    | Kind::HealthMonitor
                    | Kind::FloatingIpAssociation
            )
        })
        .cloned()
        .collect();
    let known: BTreeSet<String> = out.iter().map(|r| r.id.clone()).collect();
    let networks: BTreeSet<&str> = out
        .iter()
        .filter(|r| r.kind == Kind::Network)
        .map(|r| r.id.as_str())
        .collect();
    let routers: BTreeSet<&str> = out
        .iter()
        .filter(|r| r.kind == Kind::Router)
        .map(|r| r.id.as_str())
        .collect();
    let mut runtime = run_time(inv, cluster);
    // Interfaces of kos's own routers, tagged or not (a crash between adding one and tagging it): the
    // router cannot go while one is left.
    runtime.extend(
        inv.ports
            .iter()
            .filter(|p| {
                p.device_owner == ROUTER_INTERFACE && routers.contains(p.device_id.as_str())
            })
            .map(|p| {
                let mut r = extra(Kind::RouterInterface, "router-if", &p.id, &p.name);
                r.facts.device_id = Some(p.device_id.clone());
                r.facts.subnet_id = p.fixed_ips.first().map(|f| f.subnet_id.clone());
                r
            }),
    );
    // Ports left on kos's own network (not the network's own DHCP/router/LB ports).
    runtime.extend(
        inv.ports
            .iter()
            .filter(|p| networks.contains(p.network_id.as_str()))
            .filter(|p| p.device_owner.is_empty() || p.device_owner.starts_with("compute:"))
            .map(|p| {
                let mut r = extra(Kind::Port, "leftover-port", &p.id, &p.name);
                r.facts.device_id = (!p.device_id.is_empty()).then(|| p.device_id.clone());
                r
            }),
    );
    out.extend(runtime.into_iter().filter(|r| !known.contains(&r.id)));
    out
}

fn extra(kind: Kind, logical: &str, id: &str, name: &str) -> Resource {
    Resource {
        kind,
        logical_id: logical.to_owned(),
        id: id.to_owned(),
        name: name.to_owned(),
        tagged: false,
        state: String::new(),
        failed: false,
        facts: Facts::default(),
    }
}

/// What the cluster's CCM and CSI made, by their naming conventions.
fn run_time(inv: &Inventory, cluster: &str) -> Vec<Resource> {
    let lb_prefix = format!("kube_service_{cluster}_");
    let fip_suffix = format!("from cluster {cluster}");
    let sg_suffix = format!("in cluster {cluster}");
    // kos-ccm's key, and kos's own that older kos-ccm releases wrote.
    let tags = [
        format!("{TAG_CCM_CLUSTER}={cluster}"),
        format!("{TAG_CLUSTER}={cluster}"),
    ];
    let mut out = Vec::new();
    out.extend(
        inv.load_balancers
            .iter()
            .filter(|l| l.name.starts_with(&lb_prefix))
            .map(|l| extra(Kind::LoadBalancer, "ccm-lb", &l.id, &l.name)),
    );
    out.extend(
        inv.floating_ips
            .iter()
            .filter(|f| f.description.trim_end().ends_with(&fip_suffix))
            .map(|f| extra(Kind::FloatingIp, "ccm-fip", &f.id, &f.description)),
    );
    out.extend(
        inv.security_groups
            .iter()
            .filter(|g| {
                g.name.starts_with("lb-sg-")
                    && (g.description.trim_end().ends_with(&sg_suffix)
                        || g.tags.iter().any(|t| tags.contains(t)))
            })
            .map(|g| extra(Kind::SecurityGroup, "ccm-sg", &g.id, &g.name)),
    );
    out.extend(
        inv.volumes
            .iter()
            .filter(|v| v.metadata.get(CSI_CLUSTER_KEY).map(String::as_str) == Some(cluster))
            .map(|v| extra(Kind::Volume, "csi-volume", &v.id, &v.name)),
    );
    out.extend(
        inv.snapshots
            .iter()
            .filter(|s| s.metadata.get(CSI_CLUSTER_KEY).map(String::as_str) == Some(cluster))
            .map(|s| extra(Kind::Snapshot, "csi-snapshot", &s.id, &s.name)),
    );
    out
}

/// A resource of a cluster that is gone (or of a cluster that never finished).
#[derive(Debug, Clone, Serialize)]
pub struct Orphan {
    pub cluster: String,
    pub kind: Kind,
    pub id: String,
    pub name: String,
    pub reason: String,
}

/// Resources tagged `kos-cluster=*` whose cluster has neither a server nor a network any more, and the
/// run-time LBs, FIPs, volumes and snapshots of clusters of which nothing kos-made is left.
///
/// A cluster with a network but no server yet is being made, not gone. Untagged objects in use are never
/// orphans (kos cannot tell a gone kos cluster's from those of a live cluster made by another tool that
/// shares the CCM's naming): a load balancer on a network servers run on, an attached volume, a floating
/// IP pointing at a port other than the VIP of a load balancer that is an orphan too, a volume with a
/// snapshot that does not go with it, a snapshot of a volume that stays.
///
/// # Errors
/// A list call failed.
pub async fn orphans(session: &Session) -> Result<Vec<Orphan>, CloudError> {
    let inv = Inventory::fetch(session, Scope::All).await?;
    Ok(find_orphans(&inv)
        .into_iter()
        .map(|(cluster, r, reason)| Orphan {
            cluster,
            kind: r.kind,
            id: r.id,
            name: r.name,
            reason: reason.to_owned(),
        })
        .collect())
}

/// Deletes the `orphans` that [`orphans`] listed and that still are orphans now (a cluster that came back
/// to life in between keeps its objects), and nothing else: not the rest of their clusters.
///
/// # Errors
/// A list call failed, or some orphans of a cluster could not be deleted (the clusters before it were
/// cleaned, the ones after it not tried).
pub async fn delete_orphans(
    session: &Session,
    orphans: &[Orphan],
    opts: &TeardownOptions,
) -> Result<Vec<TeardownReport>, TeardownError> {
    let listed: BTreeSet<&str> = orphans.iter().map(|o| o.id.as_str()).collect();
    let inv = Inventory::fetch(session, Scope::All).await?;
    let mut by_cluster: BTreeMap<String, Vec<Resource>> = BTreeMap::new();
    for (cluster, r, _) in find_orphans(&inv) {
        if listed.contains(r.id.as_str()) {
            by_cluster.entry(cluster).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    for (cluster, mut doomed) in by_cluster {
        doomed.sort_by_key(|r| (r.kind.delete_rank(), r.name.clone()));
        delete(session, &cluster, &doomed, opts, None).await?;
        out.push(TeardownReport {
            cluster,
            dry_run: false,
            resources: doomed,
        });
    }
    Ok(out)
}

/// The orphans of the project: `(cluster, resource, reason)`.
fn find_orphans(inv: &Inventory) -> Vec<(String, Resource, &'static str)> {
    let prefix = format!("{TAG_CLUSTER}=");
    let cluster_of = |tags: &[String]| -> Option<String> {
        tags.iter()
            .find_map(|t| t.strip_prefix(&prefix))
            .map(str::to_owned)
    };
    let alive: BTreeSet<String> = (inv.networks.iter().map(|n| &n.tags))
        .chain(inv.servers.iter().map(|s| &s.tags))
        .filter_map(|t| cluster_of(t))
        .collect();
    let kos_clusters = inv.clusters();
    let mut runtime_clusters: BTreeSet<&str> = BTreeSet::new();
    runtime_clusters.extend(inv.load_balancers.iter().filter_map(|l| {
        l.name
            .strip_prefix("kube_service_")
            .and_then(|r| r.split('_').next())
    }));
    runtime_clusters.extend(inv.floating_ips.iter().filter_map(|f| {
        f.description
            .trim_end()
            .rsplit_once("from cluster ")
            .map(|(_, c)| c)
    }));
    runtime_clusters.extend(
        (inv.volumes.iter().map(|v| &v.metadata))
            .chain(inv.snapshots.iter().map(|s| &s.metadata))
            .filter_map(|m| m.get(CSI_CLUSTER_KEY).map(String::as_str)),
    );
    let mut found = Vec::new();
    for c in kos_clusters.iter().filter(|c| !alive.contains(*c)) {
        found.extend(
            doomed(inv, c)
                .into_iter()
                .map(|r| (c.clone(), r, "its cluster has no servers and no network")),
        );
    }
    for c in runtime_clusters
        .into_iter()
        .filter(|c| !kos_clusters.contains(*c))
    {
        found.extend(run_time(inv, c).into_iter().map(|r| {
            (
                c.to_owned(),
                r,
                "made at run time by a cluster of which nothing is left",
            )
        }));
    }
    // What kos cannot prove is a cluster's (no tag: found by a naming convention that a live cluster made
    // by another tool shares) stays while something uses it: a load balancer on a network that servers run
    // on, an attached volume, a floating IP pointing at a port that does not go with an orphan LB.
    // Servers of this project only: an amphora LB's own port on its VIP network (`octavia-lb-vrrp-…`,
    // owned `compute:nova`, in the user's project) belongs to a server in Octavia's project, and is the
    // LB itself, not a user of it.
    let servers: BTreeSet<&str> = inv.servers.iter().map(|s| s.id.as_str()).collect();
    let serving: BTreeSet<&str> = inv
        .ports
        .iter()
        .filter(|p| {
            p.device_owner.starts_with("compute:") && servers.contains(p.device_id.as_str())
        })
        .map(|p| p.network_id.as_str())
        .collect();
    let lb = |id: &str| inv.load_balancers.iter().find(|l| l.id == id);
    let idle_lb = |r: &Resource| {
        r.tagged
            || lb(&r.id).is_none_or(|l| {
                l.vip_network_id
                    .as_deref()
                    .is_none_or(|n| !serving.contains(n))
            })
    };
    found.retain(|(_, r, _)| r.kind != Kind::LoadBalancer || idle_lb(r));
    let going_vips: BTreeSet<&str> = found
        .iter()
        .filter(|(_, r, _)| r.kind == Kind::LoadBalancer)
        .filter_map(|(_, r, _)| lb(&r.id)?.vip_port_id.as_deref())
        .collect();
    found.retain(|(_, r, _)| {
        r.tagged
            || match r.kind {
                Kind::FloatingIp => inv.floating_ips.iter().any(|f| {
                    f.id == r.id && f.port_id.as_deref().is_none_or(|p| going_vips.contains(p))
                }),
                Kind::Volume => inv
                    .volumes
                    .iter()
                    .any(|v| v.id == r.id && v.attachments.is_empty()),
                _ => true,
            }
    });
    // A snapshot and its volume go together or stay together: a volume kept by a snapshot that is not
    // an orphan (a user's, or a live cluster's) stays, and so does a snapshot of a volume that stays.
    // Snapshots hold no snapshots, so one pass settles both.
    let snapshot = |id: &str| inv.snapshots.iter().find(|s| s.id == id);
    let going_snapshots: BTreeSet<String> = found
        .iter()
        .filter(|(_, r, _)| r.kind == Kind::Snapshot)
        .map(|(_, r, _)| r.id.clone())
        .collect();
    let held: BTreeSet<&str> = inv
        .snapshots
        .iter()
        .filter(|s| !going_snapshots.contains(s.id.as_str()))
        .map(|s| s.volume_id.as_str())
        .collect();
    found.retain(|(_, r, _)| r.tagged || r.kind != Kind::Volume || !held.contains(r.id.as_str()));
    let going_volumes: BTreeSet<String> = found
        .iter()
        .filter(|(_, r, _)| r.kind == Kind::Volume)
        .map(|(_, r, _)| r.id.clone())
        .collect();
    let volumes: BTreeSet<&str> = inv.volumes.iter().map(|v| v.id.as_str()).collect();
    found.retain(|(_, r, _)| {
        r.kind != Kind::Snapshot
            || snapshot(&r.id).is_some_and(|s| {
                !volumes.contains(s.volume_id.as_str()) || going_volumes.contains(&s.volume_id)
            })
    });
    found
}

#[cfg(test)]
mod tests {
    use kos_cloud::model::block_storage::{Snapshot, Volume, VolumeAttachmentInfo};
    use kos_cloud::model::compute::Server;
    use kos_cloud::model::load_balancer::LoadBalancer;
    use kos_cloud::model::network::{FloatingIp, Port, SecurityGroup};

    use super::*;

    fn port(id: &str, network: &str, owner: &str, device: &str) -> Port {
        Port {
            id: id.into(),
            network_id: network.into(),
            device_owner: owner.into(),
            device_id: device.into(),
            ..Port::default()
        }
    }

    /// What a CCM made for `cluster`: an LB on `network`, with the port the amphora provider puts there.
    fn ccm_lb(cluster: &str, network: &str) -> (LoadBalancer, Port) {
        let lb = LoadBalancer {
            id: format!("lb-{cluster}"),
            name: format!("kube_service_{cluster}_default_web"),
            vip_network_id: Some(network.into()),
            vip_port_id: Some(format!("vip-{cluster}")),
            ..LoadBalancer::default()
        };
        // Owned `compute:nova` by an amphora, a server of Octavia's project (not listed here).
        let vrrp = port(
            &format!("vrrp-{cluster}"),
            network,
            "compute:nova",
            &format!("amphora-{cluster}"),
        );
        (lb, vrrp)
    }

    #[test]
    fn an_amphora_on_its_own_vip_network_does_not_keep_an_orphan_lb() {
        let (gone, gone_vrrp) = ccm_lb("gone", "net-a");
        let (used, used_vrrp) = ccm_lb("used", "net-b");
        let inv = Inventory {
            load_balancers: vec![gone, used],
            servers: vec![Server {
                id: "srv-1".into(),
                ..Server::default()
            }],
            ports: vec![
                gone_vrrp,
                used_vrrp,
                // One of the project's servers runs on net-b: its LB may serve a live cluster.
                port("p-1", "net-b", "compute:nova", "srv-1"),
            ],
            ..Inventory::default()
        };
        let found: Vec<(String, String)> = find_orphans(&inv)
            .into_iter()
            .map(|(c, r, _)| (c, r.id))
            .collect();
        assert_eq!(found, [("gone".to_owned(), "lb-gone".to_owned())]);
    }

    /// What kos-ccm makes at run time goes with `kos down` under its own key (`kos-ccm-cluster`) as
    /// under kos's (older kos-ccm releases); a user's load balancer that Services shared, which kos-ccm
    /// tags too, stays, and so does another cluster's.
    #[test]
    fn teardown_finds_what_kos_ccm_made_under_either_key_and_never_a_users_shared_lb() {
        let lb = |id: &str, name: &str, tags: &[&str]| LoadBalancer {
            id: id.into(),
            name: name.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..LoadBalancer::default()
        };
        let sg = |id: &str, tags: &[&str]| SecurityGroup {
            id: id.into(),
            name: format!("lb-sg-{id}-default-web"),
            description: "made by hand".into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..SecurityGroup::default()
        };
        let inv = Inventory {
            load_balancers: vec![
                lb(
                    "new",
                    "kube_service_demo_default_web",
                    &["kube_service_demo_default_web", "kos-ccm-cluster=demo"],
                ),
                lb(
                    "old",
                    "kube_service_demo_default_db",
                    &["kube_service_demo_default_db", "kos-cluster=demo"],
                ),
                lb(
                    "shared",
                    "edge",
                    &[
                        "team=x",
                        "kube_service_demo_default_api",
                        "kos-ccm-cluster=demo",
                    ],
                ),
                lb(
                    "other",
                    "kube_service_demo-b_default_web",
                    &["kos-ccm-cluster=demo-b"],
                ),
            ],
            floating_ips: vec![FloatingIp {
                id: "fip".into(),
                description:
                    "Floating IP for Kubernetes external service default/web from cluster demo"
                        .into(),
                ..FloatingIp::default()
            }],
            security_groups: vec![
                sg("sg-new", &["kos-ccm-cluster=demo"]),
                sg("sg-old", &["kos-cluster=demo"]),
                sg("sg-other", &["kos-ccm-cluster=demo-b"]),
            ],
            ..Inventory::default()
        };
        let mut ids: Vec<String> = doomed(&inv, "demo").into_iter().map(|r| r.id).collect();
        ids.sort();
        assert_eq!(ids, ["fip", "new", "old", "sg-new", "sg-old"]);
    }

    fn csi_volume(id: &str, cluster: &str, attached: bool) -> Volume {
        Volume {
            id: id.into(),
            name: format!("pvc-{id}"),
            metadata: BTreeMap::from([(CSI_CLUSTER_KEY.to_owned(), cluster.to_owned())]),
            attachments: if attached {
                vec![VolumeAttachmentInfo {
                    server_id: "srv".into(),
                    ..VolumeAttachmentInfo::default()
                }]
            } else {
                Vec::new()
            },
            ..Volume::default()
        }
    }

    /// A snapshot of `volume`: the CSI driver's of `cluster`, or (`None`) one a user took by hand.
    fn snapshot(id: &str, volume: &str, cluster: Option<&str>) -> Snapshot {
        Snapshot {
            id: id.into(),
            name: format!("snapshot-{id}"),
            volume_id: volume.into(),
            metadata: cluster
                .map(|c| BTreeMap::from([(CSI_CLUSTER_KEY.to_owned(), c.to_owned())]))
                .unwrap_or_default(),
            ..Snapshot::default()
        }
    }

    /// The CSI driver writes its cluster on its snapshots as on its volumes: both go with `kos down`,
    /// the snapshots first (Cinder refuses a volume with one). A snapshot a user took of a CSI volume
    /// is not kos's to delete, and another cluster's never.
    #[test]
    fn teardown_finds_the_csi_drivers_snapshots_first_and_never_a_users() {
        let inv = Inventory {
            volumes: vec![
                csi_volume("v1", "demo", false),
                csi_volume("v2", "demo", true),
                csi_volume("vb", "demo-b", false),
            ],
            snapshots: vec![
                snapshot("s1", "v1", Some("demo")),
                snapshot("s2", "v2", Some("demo")),
                snapshot("mine", "v1", None),
                snapshot("sb", "vb", Some("demo-b")),
            ],
            ..Inventory::default()
        };
        let mut doomed = doomed(&inv, "demo");
        doomed.sort_by_key(|r| (r.kind.delete_rank(), r.name.clone()));
        let order: Vec<(Kind, &str)> = doomed.iter().map(|r| (r.kind, r.id.as_str())).collect();
        assert_eq!(
            order,
            [
                (Kind::Snapshot, "s1"),
                (Kind::Snapshot, "s2"),
                (Kind::Volume, "v1"),
                (Kind::Volume, "v2"),
            ]
        );
        assert!(
            doomed
                .iter()
                .all(|r| r.kind != Kind::Snapshot || r.logical_id == "csi-snapshot")
        );
        assert!(Kind::Snapshot.delete_rank() < Kind::Volume.delete_rank());
    }

    /// gc: a CSI snapshot goes with its volume when that is an orphan, or alone when its volume is gone;
    /// a volume a user's snapshot holds stays (Cinder would refuse it, and the snapshot is the user's),
    /// and so do the snapshots of a volume that stays (held, or attached).
    #[test]
    fn gc_takes_a_snapshot_only_with_its_volume_and_never_a_held_volume() {
        let inv = Inventory {
            volumes: vec![
                csi_volume("free", "ghost", false),
                csi_volume("held", "ghost", false),
                csi_volume("used", "ghost", true),
            ],
            snapshots: vec![
                snapshot("s-free", "free", Some("ghost")),
                snapshot("s-held", "held", Some("ghost")),
                snapshot("users", "held", None),
                snapshot("s-used", "used", Some("ghost")),
                snapshot("s-lost", "gone-volume", Some("ghost")),
            ],
            ..Inventory::default()
        };
        let mut found: Vec<String> = find_orphans(&inv)
            .into_iter()
            .map(|(c, r, _)| {
                assert_eq!(c, "ghost");
                r.id
            })
            .collect();
        found.sort();
        assert_eq!(found, ["free", "s-free", "s-lost"]);
    }
}
