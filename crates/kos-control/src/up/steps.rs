//! A turn's steps besides the converge, carried out through the cluster's API: a rolling
//! replacement's or scale-down's removal ([`remove`]), workers a smaller pool drops drained first
//! ([`drain_scaled_down`]), Nodes of removed servers deleted ([`delete_nodes`]), kubeadm-config
//! moved before control planes join ([`before_joins`]), the addons following the minor
//! ([`follow_minor`]), and unhealthy nodes for a repair ([`unhealthy`]).

use kos_cluster::apply::ApplyError;
use kos_cluster::graph::Kind;
use kos_cluster::plan::{Action, Op, Plan};
use kos_lifecycle::api::chain;
use kos_lifecycle::audience::Audience;
use kos_lifecycle::drain::DrainError;
use kos_lifecycle::roll::{NodeHealth, Target};

use super::{Env, Turn};
use crate::connect::{ClientError, api_client, stored_api_client};
use crate::kube::{Kube, KubeError};
use crate::members::MembersError;
use crate::report::Event;
use crate::retire::{self, Retire, RetireError};
use crate::roll::{AddonImages, ConfigMove, ConfigMoveError};
use crate::store::{Cause, Records as _, StoreError};

/// Why a step stopped the run.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A replacement or removal stopped before anything of its node was deleted.
    #[error("cannot replace {node}: {why}")]
    Replace { node: String, why: ReplaceStop },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The user_data's renderer cannot be made (nothing was changed).
    #[error(transparent)]
    Bootstrap(Cause),
    /// The removal's apply stopped (servers may be deleted).
    #[error("{0}")]
    Apply(ApplyError),
    /// The server is deleted, its Node is not.
    #[error("the Node {node} of the deleted server cannot be deleted: {}", chain(.cause))]
    RemoveNode { node: String, cause: DrainError },
    /// kubeadm-config could not be moved before control planes join (nothing was changed).
    #[error("a control plane cannot join {cluster} yet: {why}")]
    Join { cluster: String, why: JoinStop },
    /// A repair needs the nodes' health from the API.
    #[error("cannot list the cluster's nodes: {}", chain(.0))]
    Unhealthy(ClientError),
}

impl StepError {
    /// What the user can do about it, said to `to`.
    #[must_use]
    pub fn help(&self, to: Audience) -> Option<String> {
        let again = to.again();
        match self {
            StepError::Replace { .. } => Some(format!(
                "nothing of it was deleted; fix the cause, then {again}"
            )),
            StepError::Apply(_) => Some(format!("{again}: it continues the replacement")),
            StepError::RemoveNode { .. } => Some(
                "delete it with `kubectl delete node`; the cloud controller also removes Nodes whose \
                 server is gone"
                    .into(),
            ),
            StepError::Join { .. } => Some(format!(
                "nothing was changed; fix the cause, then {again}"
            )),
            StepError::Unhealthy(_) => Some(match to {
                Audience::Cli => "--repair needs the cluster's API to answer from here".into(),
                Audience::Operator => {
                    "health checks need the cluster's API to answer from where the operator runs"
                        .into()
                }
            }),
            StepError::Store(_) | StepError::Bootstrap(_) => None,
        }
    }
}

/// Why a node could not be replaced or removed.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceStop {
    #[error("the cluster's secrets are not on this machine")]
    NoSecrets,
    #[error("the cluster's API address is not known on this machine")]
    NoAddress,
    #[error("the cluster's API does not answer: {}", chain(.0))]
    Client(ClientError),
    #[error("{}", chain(.0))]
    Move(MoveError),
    #[error("{}", chain(.0))]
    Drain(DrainError),
    #[error("{}", chain(.0))]
    ConfigMove(ConfigMoveError),
    #[error("its etcd member cannot be removed: {}", chain(.0))]
    Members(MembersError),
}

/// Why kubeadm-config could not be moved before control planes join.
#[derive(Debug, thiserror::Error)]
pub enum JoinStop {
    #[error("{}", chain(.0))]
    Move(MoveError),
    #[error("the cluster's API does not answer: {}", chain(.0))]
    Client(ClientError),
    #[error("{}", chain(.0))]
    ConfigMove(ConfigMoveError),
}

/// Why the store cannot say what kubeadm-config must name.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the cluster's API address is not known on this machine")]
    NoAddress,
}

/// Why the addons could not follow the minor.
#[derive(Debug, thiserror::Error)]
pub enum FollowMinorError {
    #[error(transparent)]
    Pins(kos_bootstrap::Error),
    #[error(transparent)]
    Api(KubeError),
}

fn stop(t: &Target, why: ReplaceStop) -> StepError {
    StepError::Replace {
        node: t.logical_id.clone(),
        why,
    }
}

/// Removes the nodes of `batch` (one control plane, or workers of one pool) from the cluster and
/// their servers from the cloud, as `removal` says ([`retire::remove`]), with the store's secrets
/// and the cluster's API client.
///
/// # Errors
/// [`StepError`], naming the node it stopped at.
pub async fn remove(
    env: &Env<'_>,
    p: &Turn,
    batch: &[Target],
    removal: &Plan,
) -> Result<(), StepError> {
    let Some(first) = batch.first() else {
        return Ok(());
    };
    let secrets = env
        .store
        .pki()?
        .ok_or_else(|| stop(first, ReplaceStop::NoSecrets))?;
    let meta = env
        .store
        .meta()?
        .ok_or_else(|| stop(first, ReplaceStop::NoAddress))?;
    let kube = api_client(env.cloud, &p.spec, &meta.api_address, &secrets)
        .await
        .map_err(|e| stop(first, ReplaceStop::Client(e)))?;
    let config_move = if batch.iter().any(|t| t.control_plane) {
        config_move(env, p).map_err(|e| stop(first, ReplaceStop::Move(e)))?
    } else {
        None
    };
    let bootstrap = env
        .bootstraps
        .bootstrap(p, secrets.clone())
        .map_err(StepError::Bootstrap)?;
    let retire = Retire {
        session: env.cloud.session,
        kube: &kube,
        api_address: &meta.api_address,
        secrets: &secrets,
        graph: &p.graph,
        plan: &p.decided.plan,
        config_move,
        bootstrap: bootstrap.as_ref(),
        drain_timeout: env.options.drain_timeout,
        parallelism: env.options.parallelism,
    };
    let (tx, progress) = env
        .report
        .apply_progress(removal.summary().changes() as u64);
    let result = retire::remove(&retire, batch, removal, tx, env.report).await;
    let _ = progress.await;
    result.map_err(|e| {
        let at = |node: &str| batch.iter().find(|t| t.logical_id == node).unwrap_or(first);
        match e {
            RetireError::Drain { node, source } => stop(at(&node), ReplaceStop::Drain(source)),
            RetireError::ConfigMove { node, source } => {
                stop(at(&node), ReplaceStop::ConfigMove(source))
            }
            RetireError::Members { node, source } => stop(at(&node), ReplaceStop::Members(source)),
            RetireError::Apply(e) => StepError::Apply(e),
            RetireError::RemoveNode { node, source } => StepError::RemoveNode {
                node,
                cause: source,
            },
        }
    })
}

/// Workers a smaller pool count removes: drained before the converge deletes their servers, their
/// Nodes deleted after. When the API does not answer from here (a private endpoint), they go
/// undrained, with a warning ([`Event::NotDrained`]).
///
/// # Errors
/// [`StepError::Replace`] when a drain fails.
pub async fn drain_scaled_down(
    env: &Env<'_>,
    p: &Turn,
    plan: &Plan,
) -> Result<Vec<String>, StepError> {
    let leaving: Vec<Target> = plan
        .actions
        .iter()
        .filter(|a| {
            a.kind == Kind::Server
                && a.op == Op::Delete
                && !kos_lifecycle::formation::is_control_plane(&a.logical_id)
                && a.existing.as_ref().is_some_and(|r| r.tagged && !r.failed)
        })
        .map(|a| Target {
            logical_id: a.logical_id.clone(),
            name: a.name.clone(),
            control_plane: false,
            volume: None,
            changes: vec!["its pool's count is smaller".into()],
            scale_down: true,
        })
        .collect();
    if leaving.is_empty() {
        return Ok(Vec::new());
    }
    let kube = match client(env, p).await {
        Ok(k) => k,
        Err(e) => {
            env.report.event(Event::NotDrained {
                nodes: &leaving
                    .iter()
                    .map(|t| t.logical_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                why: &chain(&e),
            });
            return Ok(Vec::new());
        }
    };
    for t in &leaving {
        env.report.event(Event::Leaving {
            cluster: &p.graph.cluster,
            node: &t.logical_id,
            scale_down: true,
            changes: &t.changes.join("; "),
        });
        retire::drain(
            env.cloud.session,
            &kube,
            t,
            env.options.drain_timeout,
            env.report,
        )
        .await
        .map_err(|e| stop(t, ReplaceStop::Drain(e)))?;
    }
    Ok(leaving.into_iter().map(|t| t.name).collect())
}

/// Deletes the Nodes of servers that are gone (a running kubelet would have registered them again).
pub async fn delete_nodes(env: &Env<'_>, p: &Turn, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let Ok(kube) = client(env, p).await else {
        return;
    };
    for n in names {
        if let Err(e) = crate::drain::remove_node(&kube, n).await {
            env.report.event(Event::NodeKept {
                node: n,
                why: &chain(&e),
            });
        }
    }
}

/// A client of the cluster's API, when its `/readyz` says ok.
async fn client(env: &Env<'_>, p: &Turn) -> Result<Kube, ClientError> {
    let kube = stored_api_client(env.cloud, &p.spec, env.store).await?;
    if !kube.readyz().await? {
        return Err(ClientError::NotReady);
    }
    Ok(kube)
}

/// After an upgrade the cloud controller and CSI follow the cluster's minor: every Deployment and
/// DaemonSet of kube-system running an older release of their images gets the pinned one (its
/// controller rolls the pods). Nothing to do when the API does not answer from here.
///
/// # Errors
/// [`FollowMinorError`].
pub async fn follow_minor(env: &Env<'_>, p: &Turn) -> Result<Vec<String>, FollowMinorError> {
    let Some(images) = AddonImages::for_minor(p.spec.kubernetes_version.minor())
        .map_err(FollowMinorError::Pins)?
    else {
        return Ok(Vec::new());
    };
    let Ok(kube) = client(env, p).await else {
        return Ok(Vec::new());
    };
    images.follow(&kube).await.map_err(FollowMinorError::Api)
}

/// Every Node's name, and those whose Ready condition is not True, since when.
///
/// # Errors
/// [`StepError::Unhealthy`] when the API does not answer.
pub async fn unhealthy(env: &Env<'_>, p: &Turn) -> Result<NodeHealth, StepError> {
    let kube = client(env, p).await.map_err(StepError::Unhealthy)?;
    crate::roll::unhealthy(&kube)
        .await
        .map_err(|e| StepError::Unhealthy(ClientError::Api(e)))
}

/// Before a control plane joins, kubeadm-config says what it must take from the cluster, as Cluster
/// API's control plane sets it before it rolls: the new release (an upgrade with `maxSurge: 1`) and
/// the certificate names (a new `apiEndpoint.dnsName`).
///
/// # Errors
/// [`StepError::Join`] (nothing was changed).
pub async fn before_joins(env: &Env<'_>, p: &Turn, converging: &Plan) -> Result<(), StepError> {
    let joins = converging
        .actions
        .iter()
        .filter(|a| is_control_plane(a))
        .any(|a| a.op == Op::Create);
    let cluster = &p.graph.cluster;
    let fail = |why: JoinStop| StepError::Join {
        cluster: cluster.clone(),
        why,
    };
    if !joins {
        return Ok(());
    }
    let Some(m) = config_move(env, p).map_err(|e| fail(JoinStop::Move(e)))? else {
        return Ok(());
    };
    let kube = client(env, p)
        .await
        .map_err(|e| fail(JoinStop::Client(e)))?;
    retire::move_config(&m, &kube, cluster, env.report)
        .await
        .map_err(|e| fail(JoinStop::ConfigMove(e)))
}

fn is_control_plane(a: &Action) -> bool {
    a.kind == Kind::Server && kos_lifecycle::formation::is_control_plane(&a.logical_id)
}

/// The move kubeadm-config needs, if an existing control plane was made for another release or
/// other certificate names; `None` otherwise, so that a plain scale-up needs no API from here (a
/// private endpoint has none).
fn config_move(env: &Env<'_>, p: &Turn) -> Result<Option<ConfigMove>, MoveError> {
    let wanted = p.spec.kubernetes_version.to_string();
    let needed = kos_lifecycle::kubeadm_config::Needed::of(&p.decided.plan, &p.graph, &wanted);
    if !needed.any() {
        return Ok(None);
    }
    let sans = if needed.names {
        let address = env.store.meta()?.ok_or(MoveError::NoAddress)?.api_address;
        Some(crate::roll::cert_sans(
            &address,
            p.spec.api_endpoint.dns_name.as_ref().map(|d| d.as_str()),
        ))
    } else {
        None
    };
    Ok(Some(ConfigMove {
        version: needed.version.then_some(wanted),
        sans,
        encryption: needed.encryption && p.keys.is_some(),
    }))
}
