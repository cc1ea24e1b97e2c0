use serde_json::{Value, json};

use super::*;
use crate::authz::{RequestInfo, authorize};

fn store() -> Store {
    crate::test_store(true)
}

fn put(s: &mut Store, group: &str, plural: &str, obj: Value) {
    crate::test_put(s, group, plural, obj);
}

fn node_user(name: &str) -> User {
    User::node(name)
}

/// A pod in `ns` bound to `node`, using a Secret, a ConfigMap, a claim and a ServiceAccount.
fn pod(s: &mut Store, ns: &str, name: &str, node: &str) {
    put(
        s,
        "",
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "serviceAccountName": format!("{name}-sa"),
            "containers": [{"name": "c", "image": "i",
                "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": format!("{name}-env"), "key": "k"}}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": format!("{name}-secret")}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": format!("{name}-cm")}}]}},
                {"name": "d", "persistentVolumeClaim": {"claimName": format!("{name}-claim")}},
            ]}}),
    );
}

fn allowed(s: &Store, u: &User, method: &str, path: &str, query: &str) -> bool {
    authorize(s, u, &RequestInfo::parse(method, path, query)).is_ok()
}

fn denial(s: &Store, u: &User, method: &str, path: &str, query: &str) -> String {
    match authorize(s, u, &RequestInfo::parse(method, path, query)) {
        Ok(why) => panic!("{method} {path}?{query} was allowed: {why}"),
        Err(e) => {
            assert_eq!(e.code, 403);
            e.message
        }
    }
}

#[test]
fn only_node_users_are_nodes() {
    assert_eq!(node_identity(&node_user("n1")), Some("n1"));
    // The name alone is not enough: the group makes a node.
    let impostor = User::authenticated("system:node:n1", Vec::<String>::new());
    assert_eq!(node_identity(&impostor), None);
    assert_eq!(node_identity(&node_user("")), Some(""));
    let s = store();
    let msg = denial(&s, &node_user(""), "GET", "/api/v1/services", "");
    assert!(
        msg.ends_with(": unknown node for user \"system:node:\""),
        "{msg}"
    );
}

#[test]
fn secrets_and_config_maps_of_its_pods_and_no_others() {
    let mut s = store();
    pod(&mut s, "a", "p1", "n1");
    pod(&mut s, "a", "p2", "n2");
    let n1 = node_user("n1");
    for path in [
        "/api/v1/namespaces/a/secrets/p1-secret",
        "/api/v1/namespaces/a/configmaps/p1-cm",
        "/api/v1/namespaces/a/configmaps/p1-env",
    ] {
        assert!(allowed(&s, &n1, "GET", path, ""), "{path}");
    }
    // One object by name may be listed and watched, as the kubelet's reflectors do.
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/a/secrets",
        "watch=true&fieldSelector=metadata.name%3Dp1-secret"
    ));
    let msg = denial(&s, &n1, "GET", "/api/v1/namespaces/a/secrets/p2-secret", "");
    assert_eq!(
        msg,
        "secrets \"p2-secret\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"a\": no relationship found between node 'n1' and this object"
    );
    // The same name in another namespace is another object.
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/b/secrets/p1-secret",
        ""
    ));
    assert!(
        denial(&s, &n1, "GET", "/api/v1/namespaces/a/secrets", "")
            .ends_with(": No Object name found")
    );
    assert!(
        denial(&s, &n1, "PUT", "/api/v1/namespaces/a/secrets/p1-secret", "")
            .ends_with(": can only read resources of this type")
    );
    assert!(
        denial(
            &s,
            &n1,
            "GET",
            "/api/v1/secrets",
            "fieldSelector=metadata.name%3Dp1-secret"
        )
        .ends_with(": can only read namespaced object of this type")
    );
}

#[test]
fn a_mirror_pod_grants_nothing_it_names() {
    let mut s = store();
    put(
        &mut s,
        "",
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "m", "namespace": "a", "annotations": {"kubernetes.io/config.mirror": "h"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "s", "secret": {"secretName": "stolen"}}]}}),
    );
    let n1 = node_user("n1");
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/a/secrets/stolen",
        ""
    ));
    // The pod itself is the node's.
    assert!(allowed(&s, &n1, "GET", "/api/v1/namespaces/a/pods/m", ""));
}

#[test]
fn claims_volumes_their_secrets_and_attachments() {
    let mut s = store();
    pod(&mut s, "a", "p1", "n1");
    put(
        &mut s,
        "",
        "persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "claimRef": {"namespace": "a", "name": "p1-claim"},
                "csi": {"driver": "d", "volumeHandle": "h",
                    "nodeStageSecretRef": {"namespace": "ops", "name": "stage"},
                    "controllerPublishSecretRef": {"namespace": "ops", "name": "controller"}}}}),
    );
    put(
        &mut s,
        "",
        "persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv2"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "claimRef": {"namespace": "a", "name": "other"},
                "csi": {"driver": "d", "volumeHandle": "h2"}}}),
    );
    put(
        &mut s,
        "storage.k8s.io",
        "volumeattachments",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va1"},
            "spec": {"attacher": "d", "nodeName": "n1", "source": {"persistentVolumeName": "pv1"}}}),
    );
    let n1 = node_user("n1");
    let n2 = node_user("n2");
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/a/persistentvolumeclaims/p1-claim",
        ""
    ));
    assert!(allowed(&s, &n1, "GET", "/api/v1/persistentvolumes/pv1", ""));
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/persistentvolumes/pv2",
        ""
    ));
    assert!(!allowed(
        &s,
        &n2,
        "GET",
        "/api/v1/persistentvolumes/pv1",
        ""
    ));
    assert!(
        denial(&s, &n1, "GET", "/api/v1/persistentvolumes", "")
            .ends_with(": can only get individual resources of this type")
    );
    // The volume's kubelet-visible secret, not the controller's.
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/ops/secrets/stage",
        ""
    ));
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/ops/secrets/controller",
        ""
    ));
    // A claim's status: update and patch, not get.
    let status = "/api/v1/namespaces/a/persistentvolumeclaims/p1-claim/status";
    assert!(allowed(&s, &n1, "PATCH", status, ""));
    assert!(denial(&s, &n1, "GET", status, "").ends_with(": can only get/update/patch this type"));
    assert!(!allowed(&s, &n2, "PUT", status, ""));
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/apis/storage.k8s.io/v1/volumeattachments/va1",
        ""
    ));
    assert!(
        denial(
            &s,
            &n2,
            "GET",
            "/apis/storage.k8s.io/v1/volumeattachments/va1",
            ""
        )
        .ends_with("no relationship found between node 'n2' and this object")
    );
}

#[test]
fn tokens_only_for_its_pods_service_accounts() {
    let mut s = store();
    pod(&mut s, "a", "p1", "n1");
    let n1 = node_user("n1");
    let token = "/api/v1/namespaces/a/serviceaccounts/p1-sa/token";
    assert!(allowed(&s, &n1, "POST", token, ""));
    assert!(!allowed(&s, &node_user("n2"), "POST", token, ""));
    assert!(!allowed(
        &s,
        &n1,
        "POST",
        "/api/v1/namespaces/a/serviceaccounts/default/token",
        ""
    ));
    assert!(
        denial(
            &s,
            &n1,
            "GET",
            "/api/v1/namespaces/a/serviceaccounts/p1-sa",
            ""
        )
        .ends_with(": can only create tokens for individual service accounts")
    );
}

#[test]
fn its_own_lease_and_csinode() {
    let s = store();
    let n1 = node_user("n1");
    let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    assert!(allowed(&s, &n1, "PUT", &format!("{lease}/n1"), ""));
    assert!(allowed(&s, &n1, "POST", lease, ""));
    assert!(
        denial(&s, &n1, "PUT", &format!("{lease}/n2"), "")
            .ends_with(": can only access node lease with the same name as the requesting node")
    );
    assert!(
        denial(&s, &n1, "GET", lease, "")
            .ends_with(": can only get, create, update, patch, or delete a node lease")
    );
    assert!(
        denial(
            &s,
            &n1,
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/n1",
            ""
        )
        .ends_with(": can only access leases in the \"kube-node-lease\" system namespace")
    );
    let csinodes = "/apis/storage.k8s.io/v1/csinodes";
    assert!(allowed(&s, &n1, "GET", &format!("{csinodes}/n1"), ""));
    assert!(allowed(&s, &n1, "POST", csinodes, ""));
    assert!(!allowed(&s, &n1, "PATCH", &format!("{csinodes}/n2"), ""));
    assert!(
        denial(&s, &n1, "GET", csinodes, "")
            .ends_with(": can only get, create, update, patch, or delete a CSINode")
    );
}

#[test]
fn reads_its_own_node_and_writes_any_for_admission_to_judge() {
    let s = store();
    let n1 = node_user("n1");
    assert!(allowed(&s, &n1, "GET", "/api/v1/nodes/n1", ""));
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/nodes",
        "watch=1&fieldSelector=metadata.name%3Dn1"
    ));
    assert_eq!(
        denial(&s, &n1, "GET", "/api/v1/nodes/n2", ""),
        "nodes \"n2\" is forbidden: User \"system:node:n1\" cannot get resource \"nodes\" in API group \"\" at the cluster scope: node 'n1' cannot read 'n2', only its own Node object"
    );
    assert!(
        denial(&s, &n1, "GET", "/api/v1/nodes", "")
            .ends_with(": node 'n1' cannot read all nodes, only its own Node object")
    );
    // NodeRestriction, not the authorizer, keeps these to its own Node.
    assert!(allowed(&s, &n1, "POST", "/api/v1/nodes", ""));
    assert!(allowed(&s, &n1, "PATCH", "/api/v1/nodes/n2/status", ""));
    assert!(allowed(&s, &n1, "PUT", "/api/v1/nodes/n2", ""));
    assert!(!allowed(&s, &n1, "DELETE", "/api/v1/nodes/n1", ""));
    assert!(!allowed(&s, &n1, "GET", "/api/v1/nodes/n1/status", ""));
}

#[test]
fn pods_by_node_name_selector_or_relationship() {
    let mut s = store();
    pod(&mut s, "a", "p1", "n1");
    pod(&mut s, "a", "p2", "n2");
    let n1 = node_user("n1");
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/pods",
        "watch=true&fieldSelector=spec.nodeName%3Dn1"
    ));
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/pods",
        "fieldSelector=spec.nodeName%3D%3Dn1"
    ));
    assert!(
        denial(
            &s,
            &n1,
            "GET",
            "/api/v1/pods",
            "fieldSelector=spec.nodeName%3Dn2"
        )
        .ends_with(": can only list/watch pods with spec.nodeName field selector")
    );
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/pods",
        "fieldSelector=spec.nodeName!%3Dn1"
    ));
    assert!(allowed(&s, &n1, "GET", "/api/v1/namespaces/a/pods/p1", ""));
    assert!(!allowed(&s, &n1, "GET", "/api/v1/namespaces/a/pods/p2", ""));
    // Writes the admission plugin judges.
    for (m, p) in [
        ("POST", "/api/v1/namespaces/a/pods"),
        ("DELETE", "/api/v1/namespaces/a/pods/p2"),
        ("PATCH", "/api/v1/namespaces/a/pods/p2/status"),
        ("POST", "/api/v1/namespaces/a/pods/p2/eviction"),
    ] {
        assert!(allowed(&s, &n1, m, p, ""), "{m} {p}");
    }
    assert!(!allowed(&s, &n1, "PUT", "/api/v1/namespaces/a/pods/p1", ""));
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/api/v1/namespaces/a/pods/p1/log",
        ""
    ));
    assert!(!allowed(&s, &n1, "DELETE", "/api/v1/namespaces/a/pods", ""));
}

#[test]
fn the_static_rules_for_the_rest() {
    let s = store();
    let n1 = node_user("n1");
    assert!(allowed(&s, &n1, "GET", "/api/v1/services", ""));
    assert!(allowed(&s, &n1, "POST", "/api/v1/namespaces/a/events", ""));
    assert!(allowed(
        &s,
        &n1,
        "GET",
        "/apis/storage.k8s.io/v1/csidrivers",
        ""
    ));
    assert!(!allowed(
        &s,
        &n1,
        "DELETE",
        "/api/v1/namespaces/a/services/x",
        ""
    ));
    assert!(!allowed(
        &s,
        &n1,
        "GET",
        "/apis/storage.k8s.io/v1/storageclasses",
        ""
    ));
    // Others than nodes are not the Node authorizer's: RBAC alone decides for them.
    let other = User::authenticated("someone", Vec::<String>::new());
    assert!(!allowed(&s, &other, "GET", "/api/v1/services", ""));
}
