//! Before control planes are made again in a running cluster, their stale etcd members go
//! ([`kos_lifecycle::membership`]). etcd is reached as Cluster API reaches it, with no SSH: a
//! port-forward through the API server to port 2379 of a running member's `etcd-<node>` mirror pod,
//! TLS with a short-lived client certificate of the cluster's etcd CA.

use k8s_openapi::api::core::v1::Pod;
use kos_bootstrap::ClusterSecrets;
use kos_cluster::graph::Kind;
use kos_cluster::plan::{Op, Plan};
use kos_lifecycle::etcd::{Dial, EtcdClient, EtcdError, EtcdTls, Step};
use kos_lifecycle::formation::is_control_plane;
use kos_lifecycle::membership::{Joining, remove_stale};
use kube::Api;
use kube::api::ListParams;

use crate::kube::Kube;

/// The control planes this plan creates (or replaces) in a running cluster, with the address their
/// port has already.
#[must_use]
pub fn joining(plan: &Plan) -> Vec<Joining> {
    plan.actions
        .iter()
        .filter(|a| {
            a.kind == Kind::Server
                && matches!(a.op, Op::Create | Op::Replace)
                && is_control_plane(&a.logical_id)
        })
        .map(|a| Joining {
            name: a.name.clone(),
            address: plan
                .actions
                .iter()
                .find(|p| p.logical_id == format!("port-{}", a.logical_id))
                .and_then(|p| p.existing.as_ref())
                .and_then(|p| p.facts.address.clone()),
        })
        .collect()
}

/// Why the stale members could not be removed (etcd was not reached, or refused).
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    #[error("listing the etcd pods through the API at {address}")]
    ListPods {
        address: String,
        #[source]
        source: kube::Error,
    },
    #[error("no etcd member of the cluster runs (no Ready etcd pod in kube-system)")]
    NoneRunning,
    /// The etcd client certificate cannot be made from the cluster's etcd CA.
    #[error(transparent)]
    Tls(EtcdError),
    #[error("etcd through {pod}")]
    Etcd {
        pod: String,
        #[source]
        source: EtcdError,
    },
}

/// Why the stale members were not removed: what the store keeps, the API, or etcd.
#[derive(Debug, thiserror::Error)]
pub enum StaleMembersError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("the API address of the cluster is not known on this machine")]
    NoAddress,
    #[error("the cluster's secrets are not on this machine")]
    NoSecrets,
    #[error(transparent)]
    Version(kos_bootstrap::Error),
    #[error(transparent)]
    Client(Box<crate::connect::ClientError>),
    #[error(transparent)]
    Members(MembersError),
}

/// [`remove_stale_members`] with the secrets and API address `store` keeps, the API reached as
/// `cloud` says; the lines to show. Err when etcd cannot be reached: the control planes could not
/// join, so nothing is created.
///
/// # Errors
/// [`StaleMembersError`].
pub async fn remove_stale_members_stored<S: crate::store::SecretStore + ?Sized>(
    cloud: crate::connect::Cloud<'_>,
    store: &S,
    joining: &[Joining],
    why: &str,
) -> Result<Vec<String>, StaleMembersError> {
    use crate::store::Records as _;
    let meta = store.meta()?.ok_or(StaleMembersError::NoAddress)?;
    let secrets = store.pki()?.ok_or(StaleMembersError::NoSecrets)?;
    let version: kos_bootstrap::KubeVersion = meta
        .kubernetes_version
        .parse()
        .map_err(StaleMembersError::Version)?;
    let kube = crate::connect::api_client_at(cloud, &meta.api_address, &version, &secrets)
        .await
        .map_err(|e| StaleMembersError::Client(Box::new(e)))?;
    remove_stale_members(&kube, &meta.api_address, &secrets, joining, why)
        .await
        .map_err(StaleMembersError::Members)
}

/// Removes the members `joining` would collide with, through the cluster's API (`kube`, reached at
/// `address`); the lines to show, each ending with `why`. Err when etcd cannot be reached: the
/// control planes could not join, so nothing is created.
///
/// # Errors
/// [`MembersError`]: no running member, the API or etcd refused or did not answer.
pub async fn remove_stale_members(
    kube: &Kube,
    address: &str,
    secrets: &ClusterSecrets,
    joining: &[Joining],
    why: &str,
) -> Result<Vec<String>, MembersError> {
    let pods: Api<Pod> = Api::namespaced(kube.client(), "kube-system");
    let etcds = pods
        .list(&ListParams::default().labels("component=etcd"))
        .await
        .map_err(|source| MembersError::ListPods {
            address: address.to_owned(),
            source,
        })?;
    // A member that runs: its mirror pod Ready, on a node that is not one being made again.
    let pod = etcds
        .items
        .iter()
        .filter(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            !joining.iter().any(|j| Some(j.name.as_str()) == node)
        })
        .find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .and_then(|p| p.metadata.name.clone())
        .ok_or(MembersError::NoneRunning)?;
    let tls = EtcdTls::for_cluster(secrets, time::OffsetDateTime::now_utc())
        .map_err(MembersError::Tls)?;
    let etcd = EtcdClient::new(
        PortForward {
            pods,
            pod: pod.clone(),
        },
        tls,
    );
    let removed = remove_stale(&etcd, joining)
        .await
        .map_err(|source| MembersError::Etcd {
            pod: pod.clone(),
            source,
        })?;
    Ok(removed
        .iter()
        .map(|m| {
            format!(
                "removed etcd member {} ({:016x}, {}): {why}",
                if m.name.is_empty() {
                    "(never started)"
                } else {
                    &m.name
                },
                m.id.0,
                m.peer_urls.join(", ")
            )
        })
        .collect())
}

/// A fresh port-forward to port 2379 of an etcd pod for every connection.
struct PortForward {
    pods: Api<Pod>,
    pod: String,
}

impl PortForward {
    fn step(&self) -> Step {
        Step::Dial {
            target: format!("port-forward to {}", self.pod),
        }
    }
}

/// A port-forward that gave no stream for etcd's port.
#[derive(Debug, thiserror::Error)]
#[error("no stream for port 2379")]
struct NoStream;

impl Dial for PortForward {
    type Stream = tokio::io::DuplexStream;

    async fn dial(&self) -> Result<Self::Stream, EtcdError> {
        let mut pf = self
            .pods
            .portforward(&self.pod, &[2379])
            .await
            .map_err(|e| EtcdError::transport(self.step(), e))?;
        pf.take_stream(2379)
            .ok_or_else(|| EtcdError::transport(self.step(), NoStream))
    }
}

#[cfg(test)]
mod tests {
    use kos_cluster::observe::{Facts, Resource};
    use kos_cluster::plan::Action;

    use super::*;

    fn action(kind: Kind, id: &str, op: Op, address: Option<&str>) -> Action {
        Action {
            logical_id: id.into(),
            kind,
            name: format!("kos-c-{id}"),
            op,
            reason: String::new(),
            changes: Vec::new(),
            existing: address.map(|a| Resource {
                kind,
                logical_id: id.into(),
                id: format!("id-{id}"),
                name: format!("kos-c-{id}"),
                tagged: true,
                state: "ACTIVE".into(),
                failed: false,
                facts: Facts {
                    address: Some(a.into()),
                    ..Facts::default()
                },
            }),
        }
    }

    /// Control planes made or made again join, with their port's address when the port stays;
    /// workers and kept control planes do not.
    #[test]
    fn control_planes_made_or_made_again_join_with_their_ports_address() {
        let plan = Plan {
            cluster: "c".into(),
            actions: vec![
                action(Kind::Port, "port-cp-1", Op::NoOp, Some("10.0.0.11")),
                action(Kind::Server, "cp-0", Op::NoOp, None),
                action(Kind::Server, "cp-1", Op::Replace, None),
                action(Kind::Server, "cp-2", Op::Create, None),
                action(Kind::Server, "w-0", Op::Create, None),
            ],
            refused: Vec::new(),
        };
        let j = joining(&plan);
        let got: Vec<(&str, Option<&str>)> = j
            .iter()
            .map(|j| (j.name.as_str(), j.address.as_deref()))
            .collect();
        assert_eq!(
            got,
            [("kos-c-cp-1", Some("10.0.0.11")), ("kos-c-cp-2", None)]
        );
    }
}
