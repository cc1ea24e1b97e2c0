//! Before control planes are made again in a running cluster, their stale etcd members go
//! ([`kos_lifecycle::membership`]). etcd is reached as Cluster API reaches it, with no SSH: a
//! port-forward through the API server to port 2379 of a running member's `etcd-<node>` mirror pod,
//! TLS with a short-lived client certificate of the cluster's etcd CA.

use k8s_openapi::api::core::v1::Pod;
use kos_cluster::graph::Kind;
use kos_cluster::plan::{Op, Plan};
use kos_lifecycle::etcd::{Dial, EtcdClient, EtcdError, EtcdTls};
use kos_lifecycle::formation::is_control_plane;
use kos_lifecycle::membership::{Joining, remove_stale};
use kube::Api;
use kube::api::ListParams;

use super::cluster::api_client_at;
use crate::bootstrap::Local;
use crate::cloud::Connected;

/// The control planes this plan creates (or replaces) in a running cluster, with the address their
/// port has already.
pub(super) fn joining(plan: &Plan) -> Vec<Joining> {
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

/// Removes the members `joining` would collide with; the lines to show. Err when etcd cannot be
/// reached: the control planes could not join, so nothing is created.
pub(super) async fn remove_stale_members(
    c: &Connected,
    local: &Local,
    joining: &[Joining],
    why: &str,
) -> Result<Vec<String>, String> {
    let meta = local
        .meta_data()
        .map_err(|e| format!("{e:?}"))?
        .ok_or("the API address of the cluster is not known on this machine")?;
    let secrets = local
        .secrets()
        .map_err(|e| format!("{e:?}"))?
        .ok_or("the cluster's secrets are not on this machine")?;
    let version: kos_bootstrap::KubeVersion = meta
        .kubernetes_version
        .parse()
        .map_err(|e| format!("{e}"))?;
    let client = api_client_at(c, &meta.api_address, &version, &secrets)
        .await
        .map_err(|e| kos_lifecycle::api::chain(&e))?
        .client();
    let pods: Api<Pod> = Api::namespaced(client, "kube-system");
    let etcds = pods
        .list(&ListParams::default().labels("component=etcd"))
        .await
        .map_err(|e| {
            format!(
                "listing the etcd pods through the API at {}: {e}",
                meta.api_address
            )
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
        .ok_or("no etcd member of the cluster runs (no Ready etcd pod in kube-system)")?;
    let tls = EtcdTls::for_cluster(&secrets, time::OffsetDateTime::now_utc())
        .map_err(|e| e.to_string())?;
    let etcd = EtcdClient::new(
        PortForward {
            pods,
            pod: pod.clone(),
        },
        tls,
    );
    let removed = remove_stale(&etcd, joining)
        .await
        .map_err(|e| format!("etcd through {pod}: {e}"))?;
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

impl Dial for PortForward {
    type Stream = tokio::io::DuplexStream;

    async fn dial(&self) -> Result<Self::Stream, EtcdError> {
        let mut pf = self
            .pods
            .portforward(&self.pod, &[2379])
            .await
            .map_err(|e| EtcdError::Transport(format!("port-forward to {}: {e}", self.pod)))?;
        pf.take_stream(2379)
            .ok_or_else(|| EtcdError::Transport(format!("port-forward to {}: no stream", self.pod)))
    }
}
