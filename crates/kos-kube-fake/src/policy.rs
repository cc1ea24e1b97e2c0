//! The RBAC objects kube-apiserver's `rbac/bootstrap-roles` post-start hook keeps in every
//! cluster (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`), the subset kos's flows meet:
//! `cluster-admin` bound to `system:masters`; `system:discovery` and `system:basic-user` bound to
//! every authenticated user; `system:public-info-viewer` (health and version) bound to everyone;
//! and the ClusterRoles kubeadm binds for joining nodes (`system:node-bootstrapper`, the CSR
//! approvers' `nodeclient` and `selfnodeclient`). Missing ones are created when a fake starts, as
//! the hook reconciles them; existing ones are left as they are.
//!
//! Not seeded: the controllers' roles (`system:controller:*`: the simulated controllers run in
//! process), `system:node` (unbound in real clusters: the Node authorizer stands for it), the
//! aggregated `admin`/`edit`/`view` and their `system:aggregate-to-*` parts.

use serde_json::{Value, json};

use crate::authz::{AUTHENTICATED, MASTERS, UNAUTHENTICATED};

fn meta(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(name),
        "rules": rules,
    })
}

fn binding_to_groups(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// `(plural, object)` of every bootstrap object.
pub(crate) fn objects() -> Vec<(&'static str, Value)> {
    let get = json!(["get"]);
    let public = json!(["/healthz", "/livez", "/readyz", "/version", "/version/"]);
    let discovery = json!([
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/"
    ]);
    let csr = "certificates.k8s.io";
    let roles = [
        cluster_role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
        ),
        cluster_role(
            "system:discovery",
            json!([{"nonResourceURLs": discovery, "verbs": get}]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": public, "verbs": get}]),
        ),
        cluster_role(
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
            ]),
        ),
        cluster_role(
            "system:node-bootstrapper",
            json!([{"apiGroups": [csr], "resources": ["certificatesigningrequests"], "verbs": ["create", "get", "list", "watch"]}]),
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            json!([{"apiGroups": [csr], "resources": ["certificatesigningrequests/nodeclient"], "verbs": ["create"]}]),
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            json!([{"apiGroups": [csr], "resources": ["certificatesigningrequests/selfnodeclient"], "verbs": ["create"]}]),
        ),
    ];
    let bindings = [
        binding_to_groups("cluster-admin", "cluster-admin", &[MASTERS]),
        binding_to_groups("system:discovery", "system:discovery", &[AUTHENTICATED]),
        binding_to_groups("system:basic-user", "system:basic-user", &[AUTHENTICATED]),
        binding_to_groups(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
    ];
    roles
        .into_iter()
        .map(|r| ("clusterroles", r))
        .chain(bindings.into_iter().map(|b| ("clusterrolebindings", b)))
        .collect()
}
