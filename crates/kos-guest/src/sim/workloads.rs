//! The status of the workloads no simulated node runs. No containers run here, so the Deployments and
//! DaemonSets the addons apply (CSI, CNI, CoreDNS) report themselves rolled out as soon as they are
//! stored, as a controller would once their pods started: `observedGeneration` current, every replica
//! updated and available. The cloud controller's DaemonSet is the exception: its status is what the
//! in-process CCM really does ([`super::ccm`]).
//!
//! Each status is written as the controller that owns it writes it: a PUT of `deployments/status`
//! as `kube-system/deployment-controller`, of `daemonsets/status` as
//! `kube-system/daemon-set-controller` (their bootstrap roles allow `update` of the status only),
//! reading what they list as themselves. A refusal leaves the status as it was and is logged with
//! the API server's text, as the controller would log it.

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus, Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::Node;

use kos_kube_fake::{Acting, FakeError, FakeKube};

use crate::cluster::controller;

fn warn_if_refused<T>(what: &str, r: Result<T, FakeError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!("{what}: {e}");
            None
        }
    }
}

/// Reports every Deployment and DaemonSet of `kube` but `except` (namespace, name) rolled out.
pub(crate) fn report_rolled_out(kube: &FakeKube, except: Option<&(String, String)>) {
    let skip = |ns: &Option<String>, name: &Option<String>| {
        except.is_some_and(|(n, d)| ns.as_deref() == Some(n) && name.as_deref() == Some(d))
    };
    let deployments = controller(kube, "deployment-controller");
    for d in
        warn_if_refused("deployments", deployments.list::<Deployment>(None, "")).unwrap_or_default()
    {
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
        {
            put_status(
                &deployments,
                m.namespace.as_deref(),
                name,
                |d: &mut Deployment| d.status = Some(want),
            );
        }
    }
    let daemons = controller(kube, "daemon-set-controller");
    let nodes = warn_if_refused("nodes", daemons.list::<Node>(None, ""))
        .map(|n| i32::try_from(n.len()).unwrap_or(i32::MAX))
        .unwrap_or(0);
    for d in warn_if_refused("daemonsets", daemons.list::<DaemonSet>(None, "")).unwrap_or_default()
    {
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
        {
            put_status(
                &daemons,
                m.namespace.as_deref(),
                name,
                |d: &mut DaemonSet| d.status = Some(want),
            );
        }
    }
}

fn put_status<K>(who: &Acting<'_>, ns: Option<&str>, name: &str, change: impl FnOnce(&mut K))
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
{
    let r = who.update::<K>(ns, name, true, change);
    warn_if_refused(&format!("{} {name}", K::kind(&())), r);
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // The test's own set-up.
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::ObjectMeta;

    fn deployment() -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            spec: DeploymentSpec {
                replicas: Some(2),
                ..DeploymentSpec::default()
            },
            status: None,
        }
    }

    fn rolled_out(kube: &FakeKube) -> Option<i32> {
        kube.get::<Deployment>(Some("default"), "web")
            .expect("get")
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
    }

    #[tokio::test]
    async fn the_deployment_controller_writes_the_status_as_itself() {
        let kube = FakeKube::start_sync(kos_kube_fake::Config::default()).expect("fake");
        kube.insert(&deployment()).expect("deployment");
        report_rolled_out(&kube, None);
        assert_eq!(rolled_out(&kube), Some(2));
        let w = kube.writes();
        assert!(
            w.iter().any(|r| r.user.as_deref()
                == Some("system:serviceaccount:kube-system:deployment-controller")
                && r.subresource.as_deref() == Some("status")),
            "{w:?}"
        );
    }

    #[tokio::test]
    async fn without_its_binding_the_deployment_controller_reports_nothing() {
        let kube = FakeKube::start_sync(kos_kube_fake::Config::default()).expect("fake");
        kube.delete::<ClusterRoleBinding>(None, "system:controller:deployment-controller")
            .expect("unbound");
        kube.insert(&deployment()).expect("deployment");
        report_rolled_out(&kube, None);
        assert_eq!(rolled_out(&kube), None);
        let refused: Vec<_> = kube
            .requests()
            .into_iter()
            .filter(|r| r.status == 403)
            .collect();
        assert!(
            refused.iter().any(|r| r.user.as_deref()
                == Some("system:serviceaccount:kube-system:deployment-controller")),
            "{refused:?}"
        );
    }
}
