//! The in-process helpers the simulated clusters (kos-guest) use: a fake started from synchronous
//! code, objects applied as JSON by apiVersion and kind, and the addon types they apply.
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kos_kube_fake::{FakeError, FakeKube};
use kube::api::Api;
use serde_json::json;

type R = Result<(), Box<dyn std::error::Error>>;

#[test]
fn start_sync_outside_a_runtime_is_an_error_not_a_panic() {
    assert!(matches!(
        FakeKube::start_sync(Default::default()),
        Err(FakeError::Start(_))
    ));
}

#[tokio::test]
async fn apply_json_creates_then_updates_and_the_api_serves_it() -> R {
    let fake = FakeKube::start_sync(Default::default())?;
    let ds = |image: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "calico-node", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"k8s-app": "calico-node"}},
                "template": {"metadata": {"labels": {"k8s-app": "calico-node"}},
                             "spec": {"containers": [{"name": "c", "image": image}]}}
            }
        })
    };
    fake.apply_json(&ds("a:1"), "kubectl")?;
    fake.apply_json(&ds("a:2"), "kubectl")?;
    let api: Api<DaemonSet> = Api::namespaced(fake.client()?, "kube-system");
    let got = api.get("calico-node").await?;
    let v = serde_json::to_value(&got)?;
    let image = v.pointer("/spec/template/spec/containers/0/image");
    assert_eq!(image, Some(&json!("a:2")));
    assert_eq!(fake.list_json("apps/v1", "DaemonSet", None)?.len(), 1);
    Ok(())
}

#[tokio::test]
async fn rbac_names_may_hold_colons_and_unknown_kinds_are_no_match() -> R {
    let fake = FakeKube::start().await?;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:cloud-controller-manager"}, "rules": []
    });
    fake.apply_json(&role, "kubectl")?;
    assert!(
        fake.get::<ClusterRole>(None, "system:cloud-controller-manager")?
            .is_some()
    );
    let crd_object = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": "x"}
    });
    let err = fake.apply_json(&crd_object, "kubectl").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no matches for kind \"VolumeSnapshotClass\" in version \"snapshot.storage.k8s.io/v1\""
    );
    Ok(())
}
