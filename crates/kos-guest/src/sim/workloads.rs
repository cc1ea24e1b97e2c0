//! The status of the workloads no simulated node runs. No containers run here, so the Deployments and
//! DaemonSets the addons apply (CSI, CNI, CoreDNS) report themselves rolled out as soon as they are
//! stored, as a controller would once their pods started: `observedGeneration` current, every replica
//! updated and available. The cloud controller's DaemonSet is the exception: its status is what the
//! in-process CCM really does ([`super::ccm`]).

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus, Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::Node;

use crate::cluster::Cluster;

/// Reports every Deployment and DaemonSet of `cluster` but `except` (namespace, name) rolled out.
pub(crate) fn report_rolled_out(cluster: &Cluster, except: Option<&(String, String)>) {
    let skip = |ns: &Option<String>, name: &Option<String>| {
        except.is_some_and(|(n, d)| ns.as_deref() == Some(n) && name.as_deref() == Some(d))
    };
    let nodes = cluster
        .kube
        .list::<Node>(None)
        .map(|n| i32::try_from(n.len()).unwrap_or(i32::MAX))
        .unwrap_or(0);
    let deployments = cluster.kube.list::<Deployment>(None).unwrap_or_else(|e| {
        tracing::warn!("deployments: {e}");
        Vec::new()
    });
    for d in deployments {
        let m = &d.metadata;
        if skip(&m.namespace, &m.name) {
            continue;
        }
        let replicas = d.spec.replicas.unwrap_or(1);
        let want = DeploymentStatus {
            observed_generation: m.generation,
            replicas: Some(replicas),
            updated_replicas: Some(replicas),
            ready_replicas: Some(replicas),
            available_replicas: Some(replicas),
            ..DeploymentStatus::default()
        };
        if d.status.as_ref() != Some(&want)
            && let Some(name) = &m.name
            && let Err(e) = cluster
                .kube
                .modify::<Deployment>(m.namespace.as_deref(), name, |d| d.status = Some(want))
        {
            tracing::warn!("deployment {name}: {e}");
        }
    }
    let daemonsets = cluster.kube.list::<DaemonSet>(None).unwrap_or_else(|e| {
        tracing::warn!("daemonsets: {e}");
        Vec::new()
    });
    for d in daemonsets {
        let m = &d.metadata;
        if skip(&m.namespace, &m.name) {
            continue;
        }
        let want = DaemonSetStatus {
            observed_generation: m.generation,
            desired_number_scheduled: nodes,
            current_number_scheduled: nodes,
            updated_number_scheduled: Some(nodes),
            number_ready: nodes,
            number_available: Some(nodes),
            number_misscheduled: 0,
            ..DaemonSetStatus::default()
        };
        if d.status.as_ref() != Some(&want)
            && let Some(name) = &m.name
            && let Err(e) = cluster
                .kube
                .modify::<DaemonSet>(m.namespace.as_deref(), name, |d| d.status = Some(want))
        {
            tracing::warn!("daemonset {name}: {e}");
        }
    }
}
