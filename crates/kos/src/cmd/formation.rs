//! Whether the cluster exists (kos-lifecycle decides): what `kos up` tells each new control plane to do.

use std::time::Duration;

use kos_cluster::ClusterSpec;
use kos_cluster::observe::Observed;
use kos_lifecycle::formation::{ApiAnswer, Decision, Evidence, decide, running_control_planes};

use crate::cloud::Connected;
use crate::local::Local;
use kos_control::store::Records as _;

/// How long the API may take to answer before it counts as silent: a private endpoint never answers
/// from here, and must not hold up every plan.
const API_PROBE: Duration = Duration::from_secs(15);

/// The decision from what the cloud shows, and, only when no control plane of the cluster runs, from its
/// API at the address an earlier run recorded, verified with the cluster's CA.
pub(super) async fn formation(c: &Connected, spec: &ClusterSpec, observed: &Observed) -> Decision {
    let mut evidence = Evidence {
        running_control_planes: running_control_planes(observed),
        api: None,
        kubeadm_seen: None,
    };
    if evidence.needs_api() {
        evidence.api = probe(c, spec).await;
    }
    if evidence.needs_consoles() {
        let servers: Vec<String> = evidence
            .running_control_planes
            .iter()
            .filter_map(|id| server_id(observed, id))
            .collect();
        evidence.kubeadm_seen = Some(kos_control::follow::kubeadm_ran(&c.session, &servers).await);
    }
    let d = decide(&evidence);
    // The run prints the reason when it matters (a control plane is made); this is for -v.
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

/// `None` when nothing here knows where the API of this cluster was (no earlier run on this machine).
async fn probe(c: &Connected, spec: &ClusterSpec) -> Option<ApiAnswer> {
    let local = Local::for_session(&c.session, spec.name.value.as_str()).ok()?;
    let meta = local.meta().ok()??;
    let secrets = local.pki().ok()??;
    let ask = async {
        let kube =
            kos_control::connect::api_client(c.cloud(), spec, &meta.api_address, &secrets).await?;
        Ok::<_, kos_control::connect::ClientError>(kube.readyz().await?)
    };
    Some(match tokio::time::timeout(API_PROBE, ask).await {
        // Any HTTP answer over TLS verified with the cluster's CA: a cluster of this CA is there.
        Ok(Ok(_)) => ApiAnswer::Answered,
        Ok(Err(e)) => ApiAnswer::Silent(kos_lifecycle::api::chain(&e)),
        Err(_) => ApiAnswer::Silent(format!("no answer within {}s", API_PROBE.as_secs())),
    })
}
