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

fn kubelet(node: &str) -> kos_kube_fake::User {
    kos_kube_fake::User::authenticated(format!("system:node:{node}"), ["system:nodes".to_owned()])
}

fn node(name: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
    )
    .unwrap()
}

/// A kubelet acting in process is authorised and admitted as over HTTP: its own Node it
/// registers and updates; another's it may not touch.
#[tokio::test]
async fn a_kubelet_acting_in_process_writes_only_its_own_node() -> R {
    use k8s_openapi::api::core::v1::Node;
    let fake = FakeKube::start().await?;
    fake.insert(&node("n2"))?;
    let n1 = fake.acting_as(kubelet("n1"), "kubelet");
    n1.create(&node("n1"))?;
    n1.update::<Node>(None, "n1", true, |n| {
        n.status.get_or_insert_default().phase = Some("Running".into());
    })?;
    let err = n1
        .update::<Node>(None, "n2", true, |n| {
            n.status.get_or_insert_default().phase = Some("Running".into());
        })
        .unwrap_err();
    let FakeError::Api(e) = err else {
        panic!("not the API's answer: {err}")
    };
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    let err = n1.get::<Node>(None, "n2").unwrap_err();
    assert!(
        err.to_string()
            .contains("node 'n1' cannot read 'n2', only its own Node object"),
        "{err}"
    );
    assert!(
        n1.delete::<Node>(None, "n1").is_err(),
        "a kubelet may not delete its Node"
    );
    let log = fake.requests();
    let denied: Vec<_> = log.iter().filter(|r| r.status == 403).collect();
    assert_eq!(denied.len(), 3, "{log:?}");
    assert!(
        denied
            .iter()
            .all(|r| r.user.as_deref() == Some("system:node:n1"))
    );
    Ok(())
}

/// The same user over HTTP, with its static token.
#[tokio::test]
async fn a_user_client_is_that_user() -> R {
    use k8s_openapi::api::core::v1::Node;
    let fake = FakeKube::start().await?;
    fake.insert(&node("n2"))?;
    let nodes: Api<Node> = Api::all(fake.user_client(&kubelet("n1"))?);
    nodes.create(&Default::default(), &node("n1")).await?;
    let patch = json!({"metadata": {"labels": {"kubernetes.io/os": "linux"}}});
    nodes
        .patch(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    let err = nodes
        .patch(
            "n2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not the API's answer: {err}")
    };
    assert_eq!(status.code, 403);
    assert!(
        status
            .message
            .ends_with("node \"n1\" is not allowed to modify node \"n2\""),
        "{}",
        status.message
    );
    let role = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
    let err = nodes
        .patch(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&role),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is not allowed to modify labels: node-role.kubernetes.io/control-plane"),
        "{err}"
    );
    Ok(())
}

/// A server-side apply in process is a `patch` of its user: refused without the permission,
/// created (201) then updated (200) with it, and logged with the user.
#[tokio::test]
async fn apply_json_as_a_user_is_authorised_and_logged_as_its_patch() -> R {
    let fake = FakeKube::start().await?;
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}
    });
    let dave = kos_kube_fake::User::authenticated("dave", []);
    let err = fake
        .acting_as(dave.clone(), "kubectl")
        .apply_json(&cm)
        .unwrap_err();
    let FakeError::Api(e) = err else {
        panic!("not the API's answer: {err}")
    };
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "configmaps \"c\" is forbidden: User \"dave\" cannot patch resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    fake.apply_json(
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "dave"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]
        }),
        "test",
    )?;
    let dave = fake.acting_as(dave, "kubectl");
    dave.apply_json(&cm)?;
    let mut changed = cm.clone();
    changed["data"]["a"] = json!("2");
    let got = dave.apply_json(&changed)?;
    assert_eq!(got.pointer("/data/a"), Some(&json!("2")));
    let applies: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some("dave") && r.method == "PATCH")
        .map(|r| r.status)
        .collect();
    assert_eq!(applies, vec![403, 201, 200]);
    Ok(())
}
