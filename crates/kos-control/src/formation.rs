//! Whether the cluster exists (kos-lifecycle decides) from what the cloud shows and, when no
//! control plane runs, from its API: what a run tells each new control plane to do.

use std::time::Duration;

use kos_cluster::ClusterSpec;
use kos_cluster::observe::Observed;
use kos_lifecycle::formation::{ApiAnswer, Decision, Evidence, decide, running_control_planes};

use crate::connect::{ClientError, Cloud, api_client};
use crate::store::{Records as _, SecretStore};

/// How long the API may take to answer before it counts as silent: a private endpoint never answers
/// from here, and must not hold up every plan.
const API_PROBE: Duration = Duration::from_secs(15);

/// The decision from what the cloud shows, and, only when no control plane of the cluster runs,
/// from its API at the address `store` recorded, verified with the cluster's CA.
pub async fn formation<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: Option<&S>,
    spec: &ClusterSpec,
    observed: &Observed,
) -> Decision {
    let mut evidence = Evidence {
        running_control_planes: running_control_planes(observed),
        api: None,
        kubeadm_seen: None,
    };
    if evidence.needs_api() {
        evidence.api = match store {
            Some(store) => probe(cloud, store, spec).await,
            None => None,
        };
    }
    if evidence.needs_consoles() {
        let servers: Vec<String> = evidence
            .running_control_planes
            .iter()
            .filter_map(|id| server_id(observed, id))
            .collect();
        evidence.kubeadm_seen = Some(crate::follow::kubeadm_ran(cloud.session, &servers).await);
    }
    let d = decide(&evidence);
    // The run reports the reason when it matters (a control plane is made); this is for -v.
    tracing::debug!(cluster = %spec.name.value.as_str(), formation = ?d.formation, reason = %d.reason, "formation decided");
    d
}

/// The cloud id of control plane `logical_id`'s running server.
fn server_id(observed: &Observed, logical_id: &str) -> Option<String> {
    observed
        .resources
        .get(logical_id)?
        .iter()
        .find(|r| r.kind == kos_cluster::graph::Kind::Server && r.tagged && !r.failed)
        .map(|r| r.id.clone())
}

/// `None` when the store does not know where the API of this cluster was (no earlier run).
async fn probe<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    spec: &ClusterSpec,
) -> Option<ApiAnswer> {
    let meta = store.meta().ok()??;
    let secrets = store.pki().ok()??;
    let ask = async {
        let kube = api_client(cloud, spec, &meta.api_address, &secrets).await?;
        Ok::<_, ClientError>(kube.readyz().await?)
    };
    Some(match tokio::time::timeout(API_PROBE, ask).await {
        // Any HTTP answer over TLS verified with the cluster's CA: a cluster of this CA is there.
        Ok(Ok(_)) => ApiAnswer::Answered,
        Ok(Err(e)) => ApiAnswer::Silent(kos_lifecycle::api::chain(&e)),
        Err(_) => ApiAnswer::Silent(format!("no answer within {}s", API_PROBE.as_secs())),
    })
}
