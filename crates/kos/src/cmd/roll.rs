//! One step of a rolling replacement or a control-plane scale-down ([`kos_lifecycle::roll`]): the
//! old server's node drained, a control plane's etcd member removed, its server (and a boot volume
//! made again, or a retired control plane's port and volume) deleted, then its Node. The converge that
//! follows makes the new server from the spec and waits for it.

use std::time::Duration;

use kos_cluster::graph::Kind;
use kos_cluster::plan::Plan;
use kos_control::report::Report as _;
use kos_control::retire::{self, Retire, RetireError};
use kos_control::roll::{AddonImages, ConfigMove};
use kos_lifecycle::api::chain;
use kos_lifecycle::roll::Target;

use super::Failure;
use crate::bootstrap::KubeadmBootstrap;
use crate::cli::UpArgs;
use crate::cloud::Connected;
use crate::kube::Kube;
use crate::local::Local;
use crate::progress::Lines;
use kos_control::connect::{ClientError, api_client, stored_api_client};
use kos_control::store::{Records as _, StoreError};
use kos_control::up::Turn;

/// Removes the nodes of `batch` (one control plane, or workers of one pool) from the cluster and
/// their servers from the cloud, as `removal` says ([`kos_control::retire::remove`]): this
/// machine's secrets and the cluster's API client, then the library's steps.
pub(super) async fn remove(
    c: &Connected,
    p: &Turn,
    batch: &[Target],
    args: &UpArgs,
    removal: &Plan,
) -> Result<(), Failure> {
    let Some(first) = batch.first() else {
        return Ok(());
    };
    let local = Local::for_session(&c.session, &p.graph.cluster).map_err(Failure::input)?;
    let secrets = local
        .pki()
        .map_err(|e| Failure::store(&e))?
        .ok_or_else(|| stop(first, "the cluster's secrets are not on this machine"))?;
    let meta = local
        .meta()
        .map_err(|e| Failure::store(&e))?
        .ok_or_else(|| {
            stop(
                first,
                "the cluster's API address is not known on this machine",
            )
        })?;
    let kube = api_client(c.cloud(), &p.spec, &meta.api_address, &secrets)
        .await
        .map_err(|e| {
            stop(
                first,
                &format!("the cluster's API does not answer: {}", chain(&e)),
            )
        })?;
    let config_move = if batch.iter().any(|t| t.control_plane) {
        config_move(c, p).map_err(|e| stop(first, &chain(&e)))?
    } else {
        None
    };
    let bootstrap = KubeadmBootstrap::new(
        &p.spec,
        &p.resolved,
        &c.session,
        secrets.clone(),
        &local,
        p.keys
            .as_ref()
            .map(kos_lifecycle::encryption::KeyState::desired),
    )
    .map_err(Failure::input)?;
    let retire = Retire {
        session: &c.session,
        kube: &kube,
        api_address: &meta.api_address,
        secrets: &secrets,
        graph: &p.graph,
        plan: &p.decided.plan,
        config_move,
        bootstrap: &bootstrap,
        drain_timeout: Duration::from_secs(args.drain_timeout),
        parallelism: usize::from(args.parallelism),
    };
    let (tx, progress) = crate::progress::spawn(removal.summary().changes() as u64);
    let result = retire::remove(&retire, batch, removal, tx, &Lines).await;
    let _ = progress.await;
    result.map_err(|e| {
        let at = |node: &str| batch.iter().find(|t| t.logical_id == node).unwrap_or(first);
        match e {
            RetireError::Drain { node, source } => stop(at(&node), &chain(&source)),
            RetireError::ConfigMove { node, source } => stop(at(&node), &chain(&source)),
            RetireError::Members { node, source } => stop(
                at(&node),
                &format!("its etcd member cannot be removed: {}", chain(&source)),
            ),
            RetireError::Apply(e) => Failure::cloud_report(miette::miette!(
                help = "run `kos up` again: it continues the replacement",
                "{e}"
            )),
            RetireError::RemoveNode { node, source } => Failure::cloud_report(miette::miette!(
                help = "delete it with `kubectl delete node`; the cloud controller also removes Nodes whose server is gone",
                "the Node {node} of the deleted server cannot be deleted: {}",
                chain(&source)
            )),
        }
    })
}

/// Workers a smaller pool count removes: drained before the converge deletes their servers, their
/// Nodes deleted after. When the API does not answer from here (a private endpoint), they go
/// undrained, with a warning.
pub(super) async fn drain_scaled_down(
    c: &Connected,
    p: &Turn,
    plan: &Plan,
    args: &UpArgs,
) -> Result<Vec<String>, Failure> {
    let leaving: Vec<Target> = plan
        .actions
        .iter()
        .filter(|a| {
            a.kind == Kind::Server
                && a.op == kos_cluster::plan::Op::Delete
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
    let kube = match client(c, p).await {
        Ok(k) => k,
        Err(e) => {
            eprintln!(
                "kos: warning: cannot drain {} before removing them ({}): their pods go with their servers",
                leaving
                    .iter()
                    .map(|t| t.logical_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                chain(&e)
            );
            return Ok(Vec::new());
        }
    };
    for t in &leaving {
        Lines.event(kos_control::report::Event::Leaving {
            cluster: &p.graph.cluster,
            node: &t.logical_id,
            scale_down: true,
            changes: &t.changes.join("; "),
        });
        retire::drain(
            &c.session,
            &kube,
            t,
            Duration::from_secs(args.drain_timeout),
            &Lines,
        )
        .await
        .map_err(|e| stop(t, &chain(&e)))?;
    }
    Ok(leaving.into_iter().map(|t| t.name).collect())
}

/// Deletes the Nodes of servers that are gone (a running kubelet would have registered them again).
pub(super) async fn delete_nodes(c: &Connected, p: &Turn, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let Ok(kube) = client(c, p).await else {
        return;
    };
    for n in names {
        if let Err(e) = super::drain::remove_node(&kube, n).await {
            eprintln!(
                "kos: warning: the Node {n} of a removed server stays ({}); the cloud controller removes it",
                chain(&e)
            );
        }
    }
}

/// A client of the cluster's API, when its `/readyz` says ok.
async fn client(c: &Connected, p: &Turn) -> Result<Kube, ClientError> {
    let local = Local::for_session(&c.session, &p.graph.cluster)
        .map_err(|e| ClientError::Store(StoreError::Unusable(e.into())))?;
    let kube = stored_api_client(c.cloud(), &p.spec, &local).await?;
    if !kube.readyz().await? {
        return Err(ClientError::NotReady);
    }
    Ok(kube)
}

/// After an upgrade the cloud controller and CSI follow the cluster's minor: every Deployment and
/// DaemonSet of kube-system running an older release of their images gets the pinned one (its
/// controller rolls the pods). Nothing to do when the API does not answer from here.
pub(super) async fn follow_minor(c: &Connected, p: &Turn) -> Result<Vec<String>, FollowMinorError> {
    let Some(images) = AddonImages::for_minor(p.spec.kubernetes_version.minor())
        .map_err(FollowMinorError::Pins)?
    else {
        return Ok(Vec::new());
    };
    let Ok(kube) = client(c, p).await else {
        return Ok(Vec::new());
    };
    images.follow(&kube).await.map_err(FollowMinorError::Api)
}

/// Why the addons could not follow the minor.
#[derive(Debug, thiserror::Error)]
pub(super) enum FollowMinorError {
    #[error(transparent)]
    Pins(kos_bootstrap::Error),
    #[error(transparent)]
    Api(crate::kube::KubeError),
}

/// The nodes whose Ready condition is not True, and since when; `Err` when the API does not answer.
pub(super) async fn unhealthy(
    c: &Connected,
    p: &Turn,
) -> Result<kos_lifecycle::roll::NodeHealth, ClientError> {
    let kube = client(c, p).await?;
    Ok(kos_control::roll::unhealthy(&kube).await?)
}

/// Before a control plane joins, kubeadm-config says what it must take from the cluster, as Cluster
/// API's control plane sets it before it rolls: the new release (an upgrade with `maxSurge: 1`) and
/// the certificate names (a new `apiEndpoint.dnsName`).
pub(super) async fn before_joins(
    c: &Connected,
    p: &Turn,
    converging: &Plan,
) -> Result<(), Failure> {
    let joins = converging
        .actions
        .iter()
        .filter(|a| is_control_plane(a))
        .any(|a| a.op == kos_cluster::plan::Op::Create);
    let cluster = &p.graph.cluster;
    let fail = |why: String| {
        Failure::cloud_report(miette::miette!(
            help = "nothing was changed; fix the cause and run `kos up` again",
            "a control plane cannot join {cluster} yet: {why}"
        ))
    };
    if !joins {
        return Ok(());
    }
    let Some(m) = config_move(c, p).map_err(|e| fail(chain(&e)))? else {
        return Ok(());
    };
    let kube = client(c, p)
        .await
        .map_err(|e| fail(format!("the cluster's API does not answer: {}", chain(&e))))?;
    retire::move_config(&m, &kube, cluster, &Lines)
        .await
        .map_err(|e| fail(chain(&e)))
}

fn is_control_plane(a: &kos_cluster::plan::Action) -> bool {
    a.kind == Kind::Server && kos_lifecycle::formation::is_control_plane(&a.logical_id)
}

/// Why this machine cannot say what kubeadm-config must name.
#[derive(Debug, thiserror::Error)]
enum MoveError {
    /// What this machine keeps cannot be read (a rendered report, as kos shows it).
    #[error("{0:?}")]
    Local(miette::Report),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the cluster's API address is not known on this machine")]
    NoAddress,
}

/// The move kubeadm-config needs, if an existing control plane was made for another release or
/// other certificate names; `None` otherwise, so that a plain scale-up needs no API from here (a
/// private endpoint has none).
fn config_move(c: &Connected, p: &Turn) -> Result<Option<ConfigMove>, MoveError> {
    let wanted = p.spec.kubernetes_version.to_string();
    let needed = kos_lifecycle::kubeadm_config::Needed::of(&p.decided.plan, &p.graph, &wanted);
    if !needed.any() {
        return Ok(None);
    }
    let sans = if needed.names {
        let local = Local::for_session(&c.session, &p.graph.cluster).map_err(MoveError::Local)?;
        let address = local.meta()?.ok_or(MoveError::NoAddress)?.api_address;
        Some(crate::bootstrap::cert_sans(
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

fn stop(t: &Target, why: &str) -> Failure {
    Failure::cloud_report(miette::miette!(
        help = "nothing of it was deleted; fix the cause and run `kos up` again",
        "cannot replace {}: {why}",
        t.logical_id
    ))
}
