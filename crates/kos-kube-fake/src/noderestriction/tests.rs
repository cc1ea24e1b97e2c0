use serde_json::json;

use super::*;
use crate::store::{Scope, WriteCtx};

fn store() -> Store {
    crate::test_store(false)
}

fn put(s: &mut Store, group: &str, plural: &str, obj: Value) -> Value {
    crate::test_put(s, group, plural, obj)
}

fn node_user(name: &str) -> User {
    User::node(name)
}

/// A write as `user` through the store, so the admission runs where the server runs it.
fn as_user(user: &User, scope: Scope) -> WriteCtx {
    let mut c = crate::test_ctx(scope);
    c.keep_status = false;
    c.user = Some(user.clone());
    c
}

fn node(s: &mut Store, name: &str) -> Value {
    put(
        s,
        "",
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
    )
}

fn mirror(node: &Value, name: &str) -> Value {
    let n = node["metadata"]["name"].as_str().unwrap_or_default();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system",
            "annotations": {"kubernetes.io/config.mirror": "h"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": n,
                "uid": node["metadata"]["uid"], "controller": true}]},
        "spec": {"nodeName": n, "containers": [{"name": "c", "image": "i"}]}})
}

fn message(r: ApiResult<Value>) -> String {
    match r {
        Ok(v) => panic!("admitted: {v}"),
        Err(e) => {
            assert_eq!(e.code, 403, "{}", e.message);
            e.message
        }
    }
}

#[test]
fn others_than_nodes_pass() {
    let mut s = store();
    let res = s.type_index("", "v1", "pods").expect("pods");
    let admin = User::authenticated("admin", Vec::<String>::new());
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    s.create(res, "a", pod, &as_user(&admin, Scope::Main))
        .expect("not a node: not this plugin's");
}

#[test]
fn a_node_creates_only_its_own_mirror_pods() {
    let mut s = store();
    let n1 = node(&mut s, "n1");
    let n2 = node(&mut s, "n2");
    let res = s.type_index("", "v1", "pods").expect("pods");
    let ctx = as_user(&node_user("n1"), Scope::Main);
    s.create(res, "kube-system", mirror(&n1, "etcd-n1"), &ctx)
        .expect("its own mirror pod");

    let mut plain = mirror(&n1, "plain");
    plain["metadata"]["annotations"] = json!({});
    assert_eq!(
        message(s.create(res, "kube-system", plain, &ctx)),
        "pods \"plain\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
    );
    assert!(
        message(s.create(res, "kube-system", mirror(&n2, "etcd-n2"), &ctx))
            .ends_with("node \"n1\" can only create pods with spec.nodeName set to itself")
    );
    let mut orphan = mirror(&n1, "orphan");
    orphan["metadata"]["ownerReferences"] = json!([]);
    assert!(
        message(s.create(res, "kube-system", orphan, &ctx))
            .ends_with("node \"n1\" can only create pods with an owner reference set to itself")
    );
    let mut stale = mirror(&n1, "stale");
    stale["metadata"]["ownerReferences"][0]["uid"] = json!("not-the-uid");
    assert!(message(s.create(res, "kube-system", stale, &ctx)).contains("UID mismatch"));
    let mut blocking = mirror(&n1, "blocking");
    blocking["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(true);
    assert!(
        message(s.create(res, "kube-system", blocking, &ctx))
            .ends_with("must not set blockOwnerDeletion on an owner reference")
    );
    let mut secret = mirror(&n1, "secret");
    secret["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
    assert!(
        message(s.create(res, "kube-system", secret, &ctx))
            .ends_with("node \"n1\" can not create pods that reference secrets")
    );
    let mut claim = mirror(&n1, "claim");
    claim["spec"]["volumes"] = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "x"}}]);
    assert!(
        message(s.create(res, "kube-system", claim, &ctx))
            .ends_with("can not create pods that reference persistentvolumeclaims")
    );
    let mut account = mirror(&n1, "account");
    account["spec"]["serviceAccountName"] = json!("default");
    assert!(
        message(s.create(res, "kube-system", account, &ctx))
            .ends_with("can not create pods that reference a service account")
    );
}

#[test]
fn pod_status_and_deletes_only_of_pods_bound_to_it() {
    let mut s = store();
    let n1 = node(&mut s, "n1");
    let n2 = node(&mut s, "n2");
    put(&mut s, "", "pods", mirror(&n1, "mine"));
    put(&mut s, "", "pods", mirror(&n2, "theirs"));
    let res = s.type_index("", "v1", "pods").expect("pods");
    let ctx = as_user(&node_user("n1"), Scope::Status);
    let with_status = |s: &Store, name: &str| {
        let mut p = s.get(res, "kube-system", name).expect("stored");
        p["status"] = json!({"phase": "Running"});
        p
    };
    let p = with_status(&s, "mine");
    s.update(res, "kube-system", "mine", p, &ctx)
        .expect("its own pod's status");
    let p = with_status(&s, "theirs");
    assert_eq!(
        message(s.update(res, "kube-system", "theirs", p, &ctx)),
        "pods \"theirs\" is forbidden: node \"n1\" can only update pod status for pods with spec.nodeName set to itself"
    );
    let patched = s.patch(
        res,
        "kube-system",
        "mine",
        crate::log::PatchType::Merge,
        &json!({"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Failed"}}),
        false,
        &ctx,
    );
    // The status subresource keeps the labels as stored, so the plugin sees none changed.
    patched.expect("labels of a status write are the stored ones");

    fn gone(name: &str) -> Attributes<'_> {
        Attributes {
            op: Op::Delete,
            group: "",
            resource: "pods",
            subresource: "",
            namespace: "kube-system",
            name,
            object: None,
            old: None,
        }
    }
    admit(&s, &node_user("n1"), &gone("mine")).expect("its own pod");
    let e = admit(&s, &node_user("n1"), &gone("theirs")).expect_err("another node's pod");
    assert_eq!(
        e.message,
        "pods \"theirs\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
    );
    let e = admit(&s, &node_user("n1"), &gone("absent")).expect_err("no such pod");
    assert_eq!(e.code, 404);

    fn evict(name: &str) -> Attributes<'_> {
        Attributes {
            op: Op::Create,
            subresource: "eviction",
            object: Some(&Value::Null),
            ..gone(name)
        }
    }
    admit(&s, &node_user("n1"), &evict("mine")).expect("evicts its own pod");
    assert!(
        admit(&s, &node_user("n1"), &evict("theirs"))
            .expect_err("another node's pod")
            .message
            .ends_with("node n1 can only evict pods with spec.nodeName set to itself")
    );
}

#[test]
fn a_node_modifies_only_its_own_node_within_the_kubelet_labels() {
    let mut s = store();
    node(&mut s, "n1");
    node(&mut s, "n2");
    let res = s.type_index("", "v1", "nodes").expect("nodes");
    let ctx = as_user(&node_user("n1"), Scope::Main);
    let mut other = s.get(res, "", "n2").expect("n2");
    other["metadata"]["labels"]["kubernetes.io/os"] = json!("linux");
    assert_eq!(
        message(s.update(res, "", "n2", other, &ctx)),
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    let status = as_user(&node_user("n1"), Scope::Status);
    let mut other = s.get(res, "", "n2").expect("n2");
    other["status"] = json!({"phase": "Running"});
    assert!(
        message(s.update(res, "", "n2", other, &status))
            .ends_with("is not allowed to modify node \"n2\"")
    );

    let mut own = s.get(res, "", "n1").expect("n1");
    own["metadata"]["labels"]["kubernetes.io/os"] = json!("linux");
    own["metadata"]["labels"]["node.kubernetes.io/instance-type"] = json!("m1");
    own["metadata"]["labels"]["example.com/free"] = json!("yes");
    s.update(res, "", "n1", own, &ctx)
        .expect("the kubelet's labels and unprefixed ones");
    let mut own = s.get(res, "", "n1").expect("n1");
    own["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
    own["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("a");
    assert_eq!(
        message(s.update(res, "", "n1", own, &ctx)),
        "nodes \"n1\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool, node-role.kubernetes.io/control-plane"
    );
    let mut own = s.get(res, "", "n1").expect("n1");
    own["spec"]["taints"] = json!([{"key": "k", "effect": "NoSchedule"}]);
    assert!(
        message(s.update(res, "", "n1", own, &ctx)).ends_with("is not allowed to modify taints")
    );

    let create = as_user(&node_user("n3"), Scope::Main);
    let labelled = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n3", "labels": {"node-role.kubernetes.io/worker": ""}}});
    assert_eq!(
        message(s.create(res, "", labelled, &create)),
        "nodes \"n3\" is forbidden: node \"n3\" is not allowed to set the following labels: node-role.kubernetes.io/worker"
    );
    let plain = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n3", "labels": {"kubernetes.io/hostname": "n3"}},
        "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}});
    s.create(res, "", plain, &create)
        .expect("registers with its taints and the kubelet's labels");
}

#[test]
fn claim_status_capacity_and_conditions_only() {
    let mut s = store();
    put(
        &mut s,
        "",
        "persistentvolumeclaims",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "a"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}),
    );
    let res = s
        .type_index("", "v1", "persistentvolumeclaims")
        .expect("claims");
    let ctx = as_user(&node_user("n1"), Scope::Status);
    let mut c = s.get(res, "a", "c").expect("c");
    c["status"]["capacity"] = json!({"storage": "2Gi"});
    c["status"]["conditions"] = json!([{"type": "FileSystemResizePending", "status": "False"}]);
    s.update(res, "a", "c", c, &ctx)
        .expect("the kubelet's expansion result");
    let mut c = s.get(res, "a", "c").expect("c");
    c["status"]["phase"] = json!("Lost");
    assert!(
        message(s.update(res, "a", "c", c, &ctx)).starts_with(
            "persistentvolumeclaims \"c\" is forbidden: node \"n1\" is not allowed to update fields other than status.quantity and status.conditions"
        )
    );
    let main = as_user(&node_user("n1"), Scope::Main);
    let mut c = s.get(res, "a", "c").expect("c");
    c["metadata"]["labels"] = json!({"x": "y"});
    assert!(message(s.update(res, "a", "c", c, &main)).ends_with(": may only update PVC status"));
}

#[test]
fn leases_and_csinodes_only_its_own() {
    let mut s = store();
    let leases = s
        .type_index("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    let ctx = as_user(&node_user("n1"), Scope::Main);
    let lease = |ns: &str, name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": ns}, "spec": {"holderIdentity": name}})
    };
    s.create(
        leases,
        "kube-node-lease",
        lease("kube-node-lease", "n1"),
        &ctx,
    )
    .expect("its own lease");
    assert_eq!(
        message(s.create(
            leases,
            "kube-node-lease",
            lease("kube-node-lease", "n2"),
            &ctx
        )),
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node"
    );
    assert!(
        message(s.create(leases, "kube-system", lease("kube-system", "n1"), &ctx))
            .ends_with("can only access leases in the \"kube-node-lease\" system namespace")
    );
    let csinodes = s
        .type_index("storage.k8s.io", "v1", "csinodes")
        .expect("csinodes");
    let csinode = |name: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": name}, "spec": {"drivers": []}})
    };
    s.create(csinodes, "", csinode("n1"), &ctx)
        .expect("its own CSINode");
    assert!(
        message(s.create(csinodes, "", csinode("n2"), &ctx))
            .ends_with("can only access CSINode with the same name as the requesting node")
    );
}

#[test]
fn tokens_bound_to_its_pods_only() {
    let mut s = store();
    let n1 = node(&mut s, "n1");
    let n2 = node(&mut s, "n2");
    let mine = put(&mut s, "", "pods", mirror(&n1, "mine"));
    let theirs = put(&mut s, "", "pods", mirror(&n2, "theirs"));
    let request = |pod: &Value| {
        json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
            "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}})
    };
    let attrs = |body: &Value| -> ApiResult<()> {
        admit(
            &s,
            &node_user("n1"),
            &Attributes {
                op: Op::Create,
                group: "",
                resource: "serviceaccounts",
                subresource: "token",
                namespace: "kube-system",
                name: "default",
                object: Some(body),
                old: None,
            },
        )
    };
    attrs(&request(&mine)).expect("bound to its pod");
    assert!(
        attrs(&request(&theirs))
            .expect_err("another node's pod")
            .message
            .ends_with("node requested token bound to a pod scheduled on a different node")
    );
    assert!(
        attrs(&json!({"spec": {}}))
            .expect_err("unbound")
            .message
            .ends_with("node requested token not bound to a pod")
    );
    let mut stale = request(&mine);
    stale["spec"]["boundObjectRef"]["uid"] = json!("old");
    assert!(
        attrs(&stale)
            .expect_err("stale uid")
            .message
            .contains("does not match the UID in record")
    );
}
