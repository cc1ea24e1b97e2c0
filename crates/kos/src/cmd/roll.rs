//! One step of a rolling replacement or a control-plane scale-down ([`kos_lifecycle::roll`]): the
//! old server's node drained, a control plane's etcd member removed, its server (and a boot volume
//! made again, or a retired control plane's port and volume) deleted, then its Node. The converge that
//! follows makes the new server from the spec and waits for it.

use std::time::Duration;

use kos_cluster::apply::ApplyOptions;
use kos_cluster::graph::Kind;
use kos_cluster::plan::Plan;
use kos_control::roll::{AddonImages, ConfigMove};
use kos_lifecycle::api::chain;
use kos_lifecycle::membership::Joining;
use kos_lifecycle::roll::Target;

use super::Failure;
use super::cluster::{ApiClientError, Prepared, api_client};
use crate::bootstrap::KubeadmBootstrap;
use crate::cli::UpArgs;
use crate::cloud::Connected;
use crate::kube::Kube;
use crate::local::Local;
use kos_control::store::{Records as _, StoreError};

/// Removes the nodes of `batch` (one control plane, or workers of one pool) from the cluster and
/// their servers from the cloud, as `removal` says.
pub(super) async fn remove(
    c: &Connected,
    p: &Prepared,
    batch: &[Target],
    args: &UpArgs,
    removal: &Plan,
) -> Result<(), Failure> {
    let cluster = &p.graph.cluster;
    let Some(first) = batch.first() else {
        return Ok(());
    };
    for t in batch {
        eprintln!(
            "kos: {cluster}: {} {} ({})",
            if t.scale_down {
                "removing"
            } else {
                "replacing"
            },
            t.logical_id,
            crate::term::escape(&t.changes.join("; "))
        );
    }
    let local = Local::for_session(&c.session, cluster).map_err(Failure::input)?;
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
    let kube = api_client(c, &p.spec, &meta.api_address, &secrets)
        .await
        .map_err(|e| {
            stop(
                first,
                &format!("the cluster's API does not answer: {}", chain(&e)),
            )
        })?;
    for t in batch {
        drain(c, &kube, t, args.drain_timeout).await?;
    }
    // The control plane made again in its place reads its release and certificate names from
    // kubeadm-config.
    if batch.iter().any(|t| t.control_plane)
        && let Some(m) = config_move(c, p).map_err(|e| stop(first, &chain(&e)))?
    {
        apply_move(&m, &kube, cluster)
            .await
            .map_err(|e| stop(first, &chain(&e)))?;
    }
    for t in batch.iter().filter(|t| t.control_plane) {
        let address = p
            .decided
            .plan
            .actions
            .iter()
            .find(|a| a.kind == Kind::Port && a.logical_id == format!("port-{}", t.logical_id))
            .and_then(|a| a.existing.as_ref())
            .and_then(|r| r.facts.address.clone());
        let leaving = [Joining {
            name: t.name.clone(),
            address,
        }];
        let lines = super::members::remove_stale_members(
            c,
            &local,
            &leaving,
            if t.scale_down {
                "the control plane is removed"
            } else {
                "its control plane is replaced"
            },
        )
        .await
        .map_err(|e| {
            stop(
                t,
                &format!("its etcd member cannot be removed: {}", chain(&e)),
            )
        })?;
        for l in lines {
            eprintln!("kos: {}", crate::term::escape(&l));
        }
    }
    let bootstrap = KubeadmBootstrap::new(
        &p.spec,
        &p.resolved,
        &c.session,
        secrets,
        &local,
        p.keys
            .as_ref()
            .map(kos_lifecycle::encryption::KeyState::desired),
    )
    .map_err(Failure::input)?;
    let opts = ApplyOptions {
        parallelism: usize::from(args.parallelism),
        ..ApplyOptions::default()
    };
    let changes = removal.summary().changes();
    let (tx, progress) = crate::progress::spawn(changes as u64);
    let result =
        kos_cluster::apply::apply(&c.session, &p.graph, removal, &bootstrap, opts, tx).await;
    let _ = progress.await;
    result.map_err(|e| {
        Failure::cloud_report(miette::miette!(
            help = "run `kos up` again: it continues the replacement",
            "{e}"
        ))
    })?;
    // After their servers: a running kubelet would register its Node again.
    for t in batch {
        super::drain::remove_node(&kube, &t.name)
            .await
            .map_err(|e| {
                Failure::cloud_report(miette::miette!(
                    help = "delete it with `kubectl delete node`; the cloud controller also removes Nodes whose server is gone",
                    "the Node {} of the deleted server cannot be deleted: {}",
                    t.name,
                    chain(&e)
                ))
            })?;
    }
    Ok(())
}

/// Drains `t`'s node; a PodDisruptionBudget that holds past the timeout stops the run before the
/// server goes.
async fn drain(c: &Connected, kube: &Kube, t: &Target, timeout: u64) -> Result<(), Failure> {
    let opts = kos_lifecycle::drain::Options {
        timeout: Duration::from_secs(timeout),
        poll: c
            .session
            .pace()
            .local(Duration::from_secs(2))
            .max(Duration::from_millis(100)),
        ..kos_lifecycle::drain::Options::default()
    };
    let d = super::drain::drain_node(kube, &t.name, opts, &mut |l| {
        eprintln!("kos: {}: {}", t.logical_id, crate::term::escape(l));
    })
    .await
    .map_err(|e| stop(t, &chain(&e)))?;
    eprintln!(
        "kos: {}: drained ({} pod(s) evicted)",
        t.logical_id,
        d.evicted.len()
    );
    Ok(())
}

/// Workers a smaller pool count removes: drained before the converge deletes their servers, their
/// Nodes deleted after. When the API does not answer from here (a private endpoint), they go
/// undrained, with a warning.
pub(super) async fn drain_scaled_down(
    c: &Connected,
    p: &Prepared,
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
        eprintln!(
            "kos: {}: removing {} (its pool's count is smaller)",
            p.graph.cluster, t.logical_id
        );
        drain(c, &kube, t, args.drain_timeout).await?;
    }
    Ok(leaving.into_iter().map(|t| t.name).collect())
}

/// Deletes the Nodes of servers that are gone (a running kubelet would have registered them again).
pub(super) async fn delete_nodes(c: &Connected, p: &Prepared, names: &[String]) {
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
async fn client(c: &Connected, p: &Prepared) -> Result<Kube, ApiClientError> {
    let local = Local::for_session(&c.session, &p.graph.cluster).map_err(ApiClientError::local)?;
    let kube = super::cluster::local_api_client(c, &p.spec, &local).await?;
    if !kube.readyz().await? {
        return Err(ApiClientError::NotReady);
    }
    Ok(kube)
}

/// After an upgrade the cloud controller and CSI follow the cluster's minor: every Deployment and
/// DaemonSet of kube-system running an older release of their images gets the pinned one (its
/// controller rolls the pods). Nothing to do when the API does not answer from here.
pub(super) async fn follow_minor(
    c: &Connected,
    p: &Prepared,
) -> Result<Vec<String>, FollowMinorError> {
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
    p: &Prepared,
) -> Result<Vec<kos_lifecycle::roll::Unhealthy>, ApiClientError> {
    let kube = client(c, p).await?;
    Ok(kos_control::roll::unhealthy(&kube).await?)
}

/// Before a control plane joins, kubeadm-config says what it must take from the cluster, as Cluster
/// API's control plane sets it before it rolls: the new release (an upgrade with `maxSurge: 1`) and
/// the certificate names (a new `apiEndpoint.dnsName`).
pub(super) async fn before_joins(
    c: &Connected,
    p: &Prepared,
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
    apply_move(&m, &kube, cluster)
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
fn config_move(c: &Connected, p: &Prepared) -> Result<Option<ConfigMove>, MoveError> {
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

/// `m` applied to kubeadm-config; says what it changed.
async fn apply_move(
    m: &ConfigMove,
    kube: &Kube,
    cluster: &str,
) -> Result<(), kos_control::roll::ConfigMoveError> {
    if !m.apply(kube).await? {
        return Ok(());
    }
    if let Some(v) = &m.version {
        eprintln!("kos: {cluster}: kubeadm-config says Kubernetes {v}");
    }
    if m.encryption {
        eprintln!(
            "kos: {cluster}: kubeadm-config gives kube-apiserver its encryption configuration"
        );
    }
    if let Some(sans) = &m.sans {
        eprintln!(
            "kos: {cluster}: kubeadm-config names the API {}",
            sans.join(", ")
        );
    }
    Ok(())
}

fn stop(t: &Target, why: &str) -> Failure {
    Failure::cloud_report(miette::miette!(
        help = "nothing of it was deleted; fix the cause and run `kos up` again",
        "cannot replace {}: {why}",
        t.logical_id
    ))
}
