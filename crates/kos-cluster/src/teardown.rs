//! Teardown (`kos down`) and garbage collection (`kos gc`).
//!
//! Teardown deletes everything tagged for the cluster (or carrying its deterministic name), plus what the
//! cluster made at run time through the upstream CCM and CSI: load balancers named
//! `kube_service_<cluster>_…`, floating IPs described "… from cluster <cluster>", the CCM's `lb-sg-…`
//! security groups, Cinder volumes with `cinder.csi.openstack.org/cluster=<cluster>`, and ports left on
//! kos's network. Order: [`Kind::delete_rank`], waiting for absence of servers, LBs and volumes. It works on
//! half-made clusters, is idempotent, and never touches a bring-your-own network, subnet or router (they
//! carry no kos tag and no kos name).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use kos_cloud::{CloudError, Session};
use serde::Serialize;

use crate::apply::{Deleter, Filters, Waiter};
use crate::graph::Kind;
use crate::names::TAG_CLUSTER;
use crate::observe::{CSI_CLUSTER_KEY, Facts, Inventory, Resource, Scope};

/// Knobs of a teardown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownOptions {
    /// List what would be deleted, delete nothing.
    pub dry_run: bool,
    pub poll_interval: Duration,
    /// For each wait for absence (and "in use" retries).
    pub deadline: Duration,
}

impl Default for TeardownOptions {
    fn default() -> Self {
        TeardownOptions {
            dry_run: false,
            poll_interval: Duration::from_secs(2),
            deadline: Duration::from_secs(600),
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
}

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
    let inv = Inventory::fetch(session, Scope::All).await?;
    let mut doomed = doomed(&inv, cluster);
    doomed.sort_by_key(|r| (r.kind.delete_rank(), r.name.clone()));
    if !opts.dry_run && !doomed.is_empty() {
        let waiter = Waiter::new(
            session.clone(),
            Filters {
                servers: TagQuery::all([format!("{TAG_CLUSTER}={cluster}")]),
                load_balancers: LoadBalancerFilter::default(),
                volumes: VolumeFilter::default(),
            },
            opts.poll_interval,
        );
        let deleter = Deleter {
            session,
            waiter: &waiter,
            deadline: opts.deadline,
            poll: opts.poll_interval,
            events: None,
        };
        let failures = deleter.delete_all(doomed.clone()).await;
        if !failures.is_empty() {
            return Err(TeardownError::Incomplete {
                cluster: cluster.to_owned(),
                failures: failures
                    .into_iter()
                    .map(|(r, e)| (r, e.to_string()))
                    .collect(),
            });
        }
    }
    Ok(TeardownReport {
        cluster: cluster.to_owned(),
        dry_run: opts.dry_run,
        resources: doomed,
    })
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
    let mut runtime = run_time(inv, cluster);
    // Ports left on kos's own network (not the network's own DHCP/router/LB ports).
    runtime.extend(
        inv.ports
            .iter()
            .filter(|p| networks.contains(p.network_id.as_str()))
            .filter(|p| p.device_owner.is_empty() || p.device_owner.starts_with("compute:"))
            .map(|p| extra(Kind::Port, "leftover-port", &p.id, &p.name)),
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
    let tag = format!("{TAG_CLUSTER}={cluster}");
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
                    && (g.description.trim_end().ends_with(&sg_suffix) || g.tags.contains(&tag))
            })
            .map(|g| extra(Kind::SecurityGroup, "ccm-sg", &g.id, &g.name)),
    );
    out.extend(
        inv.volumes
            .iter()
            .filter(|v| v.metadata.get(CSI_CLUSTER_KEY).map(String::as_str) == Some(cluster))
            .map(|v| extra(Kind::Volume, "csi-volume", &v.id, &v.name)),
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
/// run-time LBs, FIPs and volumes of clusters of which nothing kos-made is left.
///
/// # Errors
/// A list call failed.
pub async fn orphans(session: &Session) -> Result<Vec<Orphan>, CloudError> {
    let inv = Inventory::fetch(session, Scope::All).await?;
    let prefix = format!("{TAG_CLUSTER}=");
    let cluster_of = |tags: &[String]| -> Option<String> {
        tags.iter()
            .find_map(|t| t.strip_prefix(&prefix))
            .map(str::to_owned)
    };
    let mut kos_clusters: BTreeSet<String> = BTreeSet::new();
    let mut alive: BTreeSet<String> = BTreeSet::new();
    for n in &inv.networks {
        if let Some(c) = cluster_of(&n.tags) {
            alive.insert(c.clone());
            kos_clusters.insert(c);
        }
    }
    for s in &inv.servers {
        if let Some(c) = cluster_of(&s.tags) {
            alive.insert(c.clone());
            kos_clusters.insert(c);
        }
    }
    let tag_lists = inv
        .subnets
        .iter()
        .map(|x| &x.tags)
        .chain(inv.routers.iter().map(|x| &x.tags))
        .chain(inv.ports.iter().map(|x| &x.tags))
        .chain(inv.security_groups.iter().map(|x| &x.tags))
        .chain(inv.floating_ips.iter().map(|x| &x.tags))
        .chain(inv.load_balancers.iter().map(|x| &x.tags));
    kos_clusters.extend(tag_lists.filter_map(|t| cluster_of(t)));
    kos_clusters.extend(
        inv.volumes
            .iter()
            .filter_map(|v| v.metadata.get(TAG_CLUSTER).cloned()),
    );
    let mut runtime_clusters: BTreeMap<String, ()> = BTreeMap::new();
    for l in &inv.load_balancers {
        if let Some(c) = l
            .name
            .strip_prefix("kube_service_")
            .and_then(|r| r.split('_').next())
        {
            runtime_clusters.insert(c.to_owned(), ());
        }
    }
    for f in &inv.floating_ips {
        if let Some((_, c)) = f.description.trim_end().rsplit_once("from cluster ") {
            runtime_clusters.insert(c.to_owned(), ());
        }
    }
    for v in &inv.volumes {
        if let Some(c) = v.metadata.get(CSI_CLUSTER_KEY) {
            runtime_clusters.insert(c.clone(), ());
        }
    }
    let mut out = Vec::new();
    for c in kos_clusters.iter().filter(|c| !alive.contains(*c)) {
        for r in doomed(&inv, c) {
            out.push(orphan(c, r, "its cluster has no servers and no network"));
        }
    }
    for c in runtime_clusters
        .keys()
        .filter(|c| !kos_clusters.contains(*c))
    {
        for r in run_time(&inv, c) {
            out.push(orphan(
                c,
                r,
                "made at run time by a cluster of which nothing is left",
            ));
        }
    }
    Ok(out)
}

fn orphan(cluster: &str, r: Resource, reason: &str) -> Orphan {
    Orphan {
        cluster: cluster.to_owned(),
        kind: r.kind,
        id: r.id,
        name: r.name,
        reason: reason.to_owned(),
    }
}

/// Tears down every cluster that has orphans (`kos gc --delete`).
///
/// # Errors
/// The first teardown that failed.
pub async fn delete_orphans(
    session: &Session,
    orphans: &[Orphan],
    opts: &TeardownOptions,
) -> Result<Vec<TeardownReport>, TeardownError> {
    let clusters: BTreeSet<&str> = orphans.iter().map(|o| o.cluster.as_str()).collect();
    let mut out = Vec::new();
    for c in clusters {
        out.push(teardown_with(session, c, opts).await?);
    }
    Ok(out)
}
