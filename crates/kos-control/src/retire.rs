//! One step of a rolling replacement or a control-plane scale-down ([`kos_lifecycle::roll`]),
//! carried out: the old server's node drained, kubeadm-config moved for the control plane made in
//! its place, a control plane's etcd member removed, its server (and a boot volume made again, or
//! a retired control plane's port and volume) deleted through kos-cluster's apply, then its Node.
//! The converge that follows makes the new server from the spec and waits for it.

use std::time::Duration;

use kos_bootstrap::ClusterSecrets;
use kos_cloud::Session;
use kos_cluster::apply::{ApplyError, ApplyOptions};
use kos_cluster::bootstrap::Bootstrap;
use kos_cluster::events::Event as ApplyEvent;
use kos_cluster::graph::{DesiredGraph, Kind};
use kos_cluster::plan::Plan;
use kos_lifecycle::drain::{DrainError, Drained};
use kos_lifecycle::membership::Joining;
use kos_lifecycle::roll::Target;
use tokio::sync::mpsc::Sender;

use crate::kube::Kube;
use crate::members::MembersError;
use crate::report::{Event, Report};
use crate::roll::{ConfigMove, ConfigMoveError};

/// What a removal works with besides the batch.
pub struct Retire<'a> {
    pub session: &'a Session,
    /// The client of the cluster's API (it answered).
    pub kube: &'a Kube,
    /// The cluster's API address (etcd is reached through a port-forward of it).
    pub api_address: &'a str,
    pub secrets: &'a ClusterSecrets,
    pub graph: &'a DesiredGraph,
    /// The turn's plan: where the control planes' ports are.
    pub plan: &'a Plan,
    /// What kubeadm-config must say for a control plane made in a leaving one's place.
    pub config_move: Option<ConfigMove>,
    /// Renders the user_data of what the removal's apply makes (nothing, usually).
    pub bootstrap: &'a dyn Bootstrap,
    pub drain_timeout: Duration,
    pub parallelism: usize,
}

/// What stopped a removal, and at which node. Before [`RetireError::Apply`] nothing of the batch
/// was deleted.
#[derive(Debug, thiserror::Error)]
pub enum RetireError {
    #[error("{node}: cannot drain its node")]
    Drain {
        node: String,
        #[source]
        source: DrainError,
    },
    #[error("{node}: kubeadm-config cannot be moved")]
    ConfigMove {
        node: String,
        #[source]
        source: ConfigMoveError,
    },
    #[error("{node}: its etcd member cannot be removed")]
    Members {
        node: String,
        #[source]
        source: MembersError,
    },
    #[error(transparent)]
    Apply(ApplyError),
    #[error("the Node {node} of the deleted server cannot be deleted")]
    RemoveNode {
        node: String,
        #[source]
        source: DrainError,
    },
}

impl RetireError {
    /// Whether anything of the batch was deleted when it stopped.
    #[must_use]
    pub fn deleted_some(&self) -> bool {
        matches!(self, RetireError::Apply(_) | RetireError::RemoveNode { .. })
    }
}

/// Removes the nodes of `batch` (one control plane, or workers of one pool) from the cluster and
/// their servers from the cloud, as `removal` says; the removal's apply reports to `progress`.
///
/// # Errors
/// [`RetireError`], naming the node it stopped at.
pub async fn remove(
    r: &Retire<'_>,
    batch: &[Target],
    removal: &Plan,
    progress: Sender<ApplyEvent>,
    report: &dyn Report,
) -> Result<(), RetireError> {
    let cluster = &r.graph.cluster;
    let Some(first) = batch.first() else {
        return Ok(());
    };
    for t in batch {
        report.event(Event::Leaving {
            cluster,
            node: &t.logical_id,
            scale_down: t.scale_down,
            changes: &t.changes.join("; "),
        });
    }
    for t in batch {
        drain(r.session, r.kube, t, r.drain_timeout, report)
            .await
            .map_err(|source| RetireError::Drain {
                node: t.logical_id.clone(),
                source,
            })?;
    }
    // The control plane made again in its place reads its release and certificate names from
    // kubeadm-config.
    if batch.iter().any(|t| t.control_plane)
        && let Some(m) = &r.config_move
    {
        move_config(m, r.kube, cluster, report)
            .await
            .map_err(|source| RetireError::ConfigMove {
                node: first.logical_id.clone(),
                source,
            })?;
    }
    for t in batch.iter().filter(|t| t.control_plane) {
        let address = r
            .plan
            .actions
            .iter()
            .find(|a| a.kind == Kind::Port && a.logical_id == format!("port-{}", t.logical_id))
            .and_then(|a| a.existing.as_ref())
            .and_then(|e| e.facts.address.clone());
        let leaving = [Joining {
            name: t.name.clone(),
            address,
        }];
        let why = if t.scale_down {
            "the control plane is removed"
        } else {
            "its control plane is replaced"
        };
        let lines =
            crate::members::remove_stale_members(r.kube, r.api_address, r.secrets, &leaving, why)
                .await
                .map_err(|source| RetireError::Members {
                    node: t.logical_id.clone(),
                    source,
                })?;
        for line in &lines {
            report.event(Event::Member { line });
        }
    }
    let opts = ApplyOptions {
        parallelism: r.parallelism,
        ..ApplyOptions::default()
    };
    kos_cluster::apply::apply(r.session, r.graph, removal, r.bootstrap, opts, progress)
        .await
        .map_err(RetireError::Apply)?;
    // After their servers: a running kubelet would register its Node again.
    for t in batch {
        crate::drain::remove_node(r.kube, &t.name)
            .await
            .map_err(|source| RetireError::RemoveNode {
                node: t.name.clone(),
                source,
            })?;
    }
    Ok(())
}

/// Drains `t`'s node; a PodDisruptionBudget that holds past `timeout` stops it before the server
/// goes. Polls at the cloud's pace.
///
/// # Errors
/// The drain's.
pub async fn drain(
    session: &Session,
    kube: &Kube,
    t: &Target,
    timeout: Duration,
    report: &dyn Report,
) -> Result<Drained, DrainError> {
    let opts = kos_lifecycle::drain::Options {
        timeout,
        poll: session
            .pace()
            .local(Duration::from_secs(2))
            .max(Duration::from_millis(100)),
        ..kos_lifecycle::drain::Options::default()
    };
    let d = crate::drain::drain_node(kube, &t.name, opts, &mut |line| {
        report.event(Event::Drain {
            node: &t.logical_id,
            line,
        });
    })
    .await?;
    report.event(Event::Drained {
        node: &t.logical_id,
        evicted: d.evicted.len(),
    });
    Ok(d)
}

/// `m` applied to kubeadm-config, reporting what it changed.
///
/// # Errors
/// As [`ConfigMove::apply`].
pub async fn move_config(
    m: &ConfigMove,
    kube: &Kube,
    cluster: &str,
    report: &dyn Report,
) -> Result<(), ConfigMoveError> {
    if m.apply(kube).await? {
        report.event(Event::ConfigMoved {
            cluster,
            version: m.version.as_deref(),
            encryption: m.encryption,
            sans: m.sans.as_deref(),
        });
    }
    Ok(())
}
