//! The RBAC objects kube-apiserver's `rbac/bootstrap-roles` post-start hook keeps in every
//! cluster (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`), the subset kos's flows meet:
//! `cluster-admin` bound to `system:masters`; `system:discovery` and `system:basic-user` bound to
//! every authenticated user; `system:public-info-viewer` (health and version) bound to everyone;
//! the ClusterRoles kubeadm binds for joining nodes (`system:node-bootstrapper`, the CSR
//! approvers' `nodeclient` and `selfnodeclient`); `system:kube-scheduler` and
//! `system:volume-scheduler` bound to the user `system:kube-scheduler`; and the roles of the
//! kube-controller-manager controllers the simulated clusters run, each `system:controller:<name>`
//! bound to the ServiceAccount `kube-system/<name>` (kubeadm runs kube-controller-manager with
//! `--use-service-account-credentials=true`): `attachdetach-controller`,
//! `persistent-volume-binder`, `node-controller`, `pod-garbage-collector`,
//! `generic-garbage-collector`, `deployment-controller`, `daemon-set-controller`,
//! `certificate-controller` (csrapproving, csrsigning), and the Roles of
//! `token-cleaner` (kube-system) and `bootstrap-signer` (kube-system and kube-public). Missing ones
//! are created when a fake starts, as the hook reconciles them; existing ones are left as they
//! are. The rules are upstream's as of 1.34–1.36 with their default feature gates.
//!
//! Not seeded: the other controllers' roles (nothing in the simulation acts as them),
//! `system:kube-controller-manager` (its own identity, used only for its informers and to mint
//! the controllers' tokens), `system:node` (unbound in real clusters: the Node authorizer stands
//! for it), the aggregated `admin`/`edit`/`view` and their `system:aggregate-to-*` parts.

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

fn binding_to(name: &str, role: &str, subjects: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

fn user(name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name})
}

fn service_account(ns: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
}

/// `eventsRule()`: create, update and patch of Events, in both Event APIs.
fn events() -> Value {
    json!({"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "update", "patch"]})
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// `addControllerRole`: `system:controller:<name>` and its binding to `kube-system/<name>`.
fn controller(name: &str, rules: Vec<Value>) -> [(&'static str, Value); 2] {
    let role = format!("system:controller:{name}");
    [
        ("clusterroles", cluster_role(&role, Value::Array(rules))),
        (
            "clusterrolebindings",
            binding_to(&role, &role, vec![service_account("kube-system", name)]),
        ),
    ]
}

/// `addNamespaceRole` and `addNamespaceRoleBinding` of a controller's Role in `ns`.
fn namespaced_controller(ns: &str, name: &str, rules: Vec<Value>) -> [(&'static str, Value); 2] {
    let role = format!("system:controller:{name}");
    let mut m = meta(&role);
    m["namespace"] = json!(ns);
    [
        (
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": m.clone(), "rules": rules}),
        ),
        (
            "rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": m,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [service_account("kube-system", name)]}),
        ),
    ]
}

/// The controllers' roles (`controller_policy.go`, `namespace_policy.go`) of the controllers the
/// simulated clusters run, and the scheduler's.
fn components() -> Vec<(&'static str, Value)> {
    let read = ["get", "list", "watch"];
    let read_update = ["get", "list", "watch", "update", "patch"];
    let storage = "storage.k8s.io";
    let mut out: Vec<(&'static str, Value)> = Vec::new();
    out.extend(controller(
        "attachdetach-controller",
        vec![
            rule(
                &["list", "watch"],
                &[""],
                &["persistentvolumes", "persistentvolumeclaims"],
            ),
            rule(&read, &[""], &["nodes"]),
            rule(&["patch", "update"], &[""], &["nodes/status"]),
            rule(&["list", "watch"], &[""], &["pods"]),
            events(),
            rule(
                &["get", "create", "delete", "list", "watch"],
                &[storage],
                &["volumeattachments"],
            ),
            rule(&["get", "watch", "list"], &[storage], &["csidrivers"]),
            rule(&["get", "watch", "list"], &[storage], &["csinodes"]),
        ],
    ));
    out.extend(controller(
        "persistent-volume-binder",
        vec![
            rule(
                &["get", "list", "watch", "update", "create", "delete"],
                &[""],
                &["persistentvolumes"],
            ),
            rule(&["update"], &[""], &["persistentvolumes/status"]),
            rule(
                &["get", "list", "watch", "update"],
                &[""],
                &["persistentvolumeclaims"],
            ),
            rule(&["update"], &[""], &["persistentvolumeclaims/status"]),
            rule(
                &["list", "watch", "get", "create", "delete"],
                &[""],
                &["pods"],
            ),
            rule(&read, &[storage], &["storageclasses"]),
            rule(
                &["get", "create", "update", "delete"],
                &[""],
                &["endpoints"],
            ),
            rule(&["get", "create", "delete"], &[""], &["services"]),
            rule(&["get"], &[""], &["secrets"]),
            rule(&["get", "list"], &[""], &["nodes"]),
            rule(&["watch"], &[""], &["events"]),
            events(),
        ],
    ));
    out.extend(controller(
        "node-controller",
        vec![
            rule(
                &["get", "list", "update", "delete", "patch"],
                &[""],
                &["nodes"],
            ),
            rule(&["patch", "update"], &[""], &["nodes/status"]),
            rule(&["patch", "update"], &[""], &["pods/status"]),
            rule(&["list", "get", "delete"], &[""], &["pods"]),
            events(),
        ],
    ));
    out.extend(controller(
        "pod-garbage-collector",
        vec![
            rule(&["list", "watch", "delete"], &[""], &["pods"]),
            rule(&["get", "list"], &[""], &["nodes"]),
            rule(&["patch"], &[""], &["pods/status"]),
        ],
    ));
    // The rules below are `buildControllerRoles` of
    // plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go (1.34–1.36).
    out.extend(controller(
        "generic-garbage-collector",
        vec![
            rule(
                &["get", "list", "watch", "patch", "update", "delete"],
                &["*"],
                &["*"],
            ),
            events(),
        ],
    ));
    out.extend(controller(
        "deployment-controller",
        vec![
            rule(
                &["get", "list", "watch", "update"],
                &["extensions", "apps"],
                &["deployments"],
            ),
            rule(
                &["update"],
                &["extensions", "apps"],
                &["deployments/status"],
            ),
            rule(
                &["update"],
                &["extensions", "apps"],
                &["deployments/finalizers"],
            ),
            rule(
                &[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ],
                &["apps", "extensions"],
                &["replicasets"],
            ),
            rule(&["get", "list", "watch", "update"], &[""], &["pods"]),
            events(),
        ],
    ));
    out.extend(controller(
        "daemon-set-controller",
        vec![
            rule(&read, &["extensions", "apps"], &["daemonsets"]),
            rule(&["update"], &["extensions", "apps"], &["daemonsets/status"]),
            rule(
                &["update"],
                &["extensions", "apps"],
                &["daemonsets/finalizers"],
            ),
            rule(&["list", "watch"], &[""], &["nodes"]),
            rule(
                &["list", "watch", "create", "delete", "patch"],
                &[""],
                &["pods"],
            ),
            rule(&["create"], &[""], &["pods/binding"]),
            rule(
                &[
                    "get", "list", "watch", "create", "delete", "update", "patch",
                ],
                &["apps"],
                &["controllerrevisions"],
            ),
            events(),
        ],
    ));
    // csrapproving, csrsigning and csrcleaner run as `certificate-controller`.
    let signers = |verb: &str, names: &[&str]| json!({"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": names, "verbs": [verb]});
    out.extend(controller(
        "certificate-controller",
        vec![
            rule(
                &["get", "list", "watch", "delete"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
            ),
            rule(
                &["update"],
                &["certificates.k8s.io"],
                &[
                    "certificatesigningrequests/status",
                    "certificatesigningrequests/approval",
                ],
            ),
            signers("approve", &["kubernetes.io/kube-apiserver-client-kubelet"]),
            signers(
                "sign",
                &[
                    "kubernetes.io/legacy-unknown",
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                ],
            ),
            rule(
                &["create"],
                &["authorization.k8s.io"],
                &["subjectaccessreviews"],
            ),
            events(),
        ],
    ));
    out.extend(namespaced_controller(
        "kube-system",
        "token-cleaner",
        vec![
            rule(&["get", "list", "watch", "delete"], &[""], &["secrets"]),
            events(),
        ],
    ));
    out.extend(namespaced_controller(
        "kube-system",
        "bootstrap-signer",
        vec![rule(&read, &[""], &["secrets"])],
    ));
    out.extend(namespaced_controller(
        "kube-public",
        "bootstrap-signer",
        vec![
            rule(&read, &[""], &["configmaps"]),
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cluster-info"], "verbs": ["update"]}),
            events(),
        ],
    ));
    out.push((
        "clusterroles",
        cluster_role(
            "system:kube-scheduler",
            json!([
                events(),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-scheduler"], "verbs": ["get", "update"]},
                rule(&read, &[""], &["nodes"]),
                rule(&["get", "list", "watch", "delete"], &[""], &["pods"]),
                rule(&["create"], &[""], &["pods/binding", "bindings"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(&read, &[""], &["services", "replicationcontrollers"]),
                rule(&read, &["apps", "extensions"], &["replicasets"]),
                rule(&read, &["apps"], &["statefulsets"]),
                rule(&read, &["policy"], &["poddisruptionbudgets"]),
                rule(&read, &[""], &["persistentvolumeclaims", "persistentvolumes"]),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
                rule(&read, &[storage], &["csinodes"]),
                rule(&read, &[""], &["namespaces"]),
                rule(&read, &[storage], &["csidrivers"]),
                rule(&read, &[storage], &["csistoragecapacities"]),
            ]),
        ),
    ));
    out.push((
        "clusterroles",
        cluster_role(
            "system:volume-scheduler",
            json!([
                rule(&read_update, &[""], &["persistentvolumes"]),
                rule(&read, &[storage], &["storageclasses"]),
                rule(&read_update, &[""], &["persistentvolumeclaims"]),
            ]),
        ),
    ));
    for role in ["system:kube-scheduler", "system:volume-scheduler"] {
        out.push((
            "clusterrolebindings",
            binding_to(role, role, vec![user("system:kube-scheduler")]),
        ));
    }
    out
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
        .chain(components())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::{RequestInfo, User, authorize};
    use crate::store::{Scope, Store};

    fn store() -> Store {
        let mut s = Store::new(
            crate::resources::builtin(),
            100,
            ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(10, 96, 0, 0), 12).expect("cidr"),
        );
        for (plural, obj) in objects() {
            let res = s
                .type_index("rbac.authorization.k8s.io", "v1", plural)
                .expect("an RBAC type");
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            s.create(res, &ns, obj, &crate::test_ctx(Scope::Everything))
                .expect("created");
        }
        s
    }

    fn may(s: &Store, u: &User, method: &str, path: &str) -> bool {
        authorize(s, u, &RequestInfo::parse(method, path, "")).is_ok()
    }

    fn sa(name: &str) -> User {
        User::service_account("kube-system", name)
    }

    #[test]
    fn the_binder_updates_claims_and_volumes_but_never_patches_them() {
        let s = store();
        let b = sa("persistent-volume-binder");
        let pvc = "/api/v1/namespaces/a/persistentvolumeclaims/c";
        assert!(may(&s, &b, "PUT", pvc));
        assert!(may(&s, &b, "PUT", &format!("{pvc}/status")));
        assert!(may(&s, &b, "PUT", "/api/v1/persistentvolumes/v/status"));
        assert!(!may(&s, &b, "PATCH", pvc));
        assert!(!may(&s, &b, "PATCH", &format!("{pvc}/status")));
        assert!(!may(&s, &b, "PATCH", "/api/v1/persistentvolumes/v/status"));
        assert!(!may(&s, &b, "DELETE", pvc));
        // Another ServiceAccount of that name elsewhere is not the controller.
        let other = User::service_account("default", "persistent-volume-binder");
        assert!(!may(&s, &other, "PUT", pvc));
    }

    #[test]
    fn the_attach_detach_controller_makes_and_deletes_attachments_only() {
        let s = store();
        let a = sa("attachdetach-controller");
        let vas = "/apis/storage.k8s.io/v1/volumeattachments";
        assert!(may(&s, &a, "POST", vas));
        assert!(may(&s, &a, "DELETE", &format!("{vas}/x")));
        assert!(!may(&s, &a, "PATCH", &format!("{vas}/x")));
        assert!(!may(&s, &a, "PUT", &format!("{vas}/x/status")));
        assert!(may(&s, &a, "PATCH", "/api/v1/nodes/n/status"));
        assert!(!may(&s, &a, "PATCH", "/api/v1/nodes/n"));
    }

    #[test]
    fn the_node_lifecycle_controller_and_pod_gc() {
        let s = store();
        let n = sa("node-controller");
        assert!(may(&s, &n, "PUT", "/api/v1/nodes/x/status"));
        assert!(may(&s, &n, "PATCH", "/api/v1/namespaces/a/pods/p/status"));
        assert!(may(&s, &n, "DELETE", "/api/v1/namespaces/a/pods/p"));
        assert!(!may(&s, &n, "POST", "/api/v1/namespaces/a/pods"));
        let gc = sa("pod-garbage-collector");
        assert!(may(&s, &gc, "DELETE", "/api/v1/namespaces/a/pods/p"));
        assert!(!may(&s, &gc, "PUT", "/api/v1/namespaces/a/pods/p/status"));
        assert!(!may(&s, &gc, "DELETE", "/api/v1/nodes/x"));
    }

    #[test]
    fn token_cleaner_and_bootstrap_signer_in_their_namespaces_only() {
        let s = store();
        let t = sa("token-cleaner");
        assert!(may(
            &s,
            &t,
            "DELETE",
            "/api/v1/namespaces/kube-system/secrets/bootstrap-token-a"
        ));
        assert!(!may(
            &s,
            &t,
            "DELETE",
            "/api/v1/namespaces/default/secrets/x"
        ));
        assert!(!may(
            &s,
            &t,
            "PUT",
            "/api/v1/namespaces/kube-system/secrets/x"
        ));
        let b = sa("bootstrap-signer");
        assert!(may(
            &s,
            &b,
            "PUT",
            "/api/v1/namespaces/kube-public/configmaps/cluster-info"
        ));
        assert!(!may(
            &s,
            &b,
            "PUT",
            "/api/v1/namespaces/kube-public/configmaps/other"
        ));
        assert!(may(
            &s,
            &b,
            "GET",
            "/api/v1/namespaces/kube-system/secrets/bootstrap-token-a"
        ));
        assert!(!may(
            &s,
            &b,
            "DELETE",
            "/api/v1/namespaces/kube-system/secrets/bootstrap-token-a"
        ));
    }

    #[test]
    fn the_workload_controllers_update_only_the_status_of_theirs() {
        let s = store();
        let d = sa("deployment-controller");
        let deploy = "/apis/apps/v1/namespaces/a/deployments/web";
        assert!(may(&s, &d, "PUT", &format!("{deploy}/status")));
        assert!(!may(&s, &d, "PATCH", &format!("{deploy}/status")));
        assert!(may(&s, &d, "PUT", deploy));
        assert!(may(&s, &d, "POST", "/api/v1/namespaces/a/events"));
        assert!(!may(
            &s,
            &d,
            "PUT",
            "/apis/apps/v1/namespaces/a/daemonsets/x/status"
        ));
        let ds = sa("daemon-set-controller");
        assert!(may(
            &s,
            &ds,
            "PUT",
            "/apis/apps/v1/namespaces/a/daemonsets/x/status"
        ));
        assert!(!may(
            &s,
            &ds,
            "PUT",
            "/apis/apps/v1/namespaces/a/daemonsets/x"
        ));
        assert!(may(&s, &ds, "GET", "/api/v1/nodes"));
        assert!(may(
            &s,
            &ds,
            "PATCH",
            "/apis/events.k8s.io/v1/namespaces/a/events/e"
        ));
    }

    #[test]
    fn the_garbage_collector_deletes_and_patches_anything_but_creates_nothing() {
        let s = store();
        let gc = sa("generic-garbage-collector");
        assert!(may(
            &s,
            &gc,
            "DELETE",
            "/api/v1/namespaces/kube-system/secrets/kubeadm-certs"
        ));
        assert!(may(
            &s,
            &gc,
            "PATCH",
            "/apis/apps/v1/namespaces/a/replicasets/r"
        ));
        assert!(!may(&s, &gc, "POST", "/api/v1/namespaces/a/pods"));
    }

    #[test]
    fn the_certificate_controller_approves_kubelet_clients_and_signs_more() {
        let s = store();
        let cc = sa("certificate-controller");
        let signer = |verb: &str, name: &str| RequestInfo {
            resource_request: true,
            verb: verb.into(),
            api_group: "certificates.k8s.io".into(),
            resource: "signers".into(),
            name: name.into(),
            ..RequestInfo::default()
        };
        let ok = |i: RequestInfo| authorize(&s, &cc, &i).is_ok();
        assert!(ok(signer(
            "approve",
            "kubernetes.io/kube-apiserver-client-kubelet"
        )));
        assert!(!ok(signer(
            "approve",
            "kubernetes.io/kube-apiserver-client"
        )));
        assert!(ok(signer("sign", "kubernetes.io/kube-apiserver-client")));
        assert!(ok(signer("sign", "kubernetes.io/kubelet-serving")));
        assert!(!ok(signer("sign", "example.com/x")));
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        assert!(may(&s, &cc, "PUT", &format!("{csrs}/c/approval")));
        assert!(may(&s, &cc, "PUT", &format!("{csrs}/c/status")));
        assert!(!may(&s, &cc, "PUT", &format!("{csrs}/c")));
        assert!(!may(&s, &cc, "POST", csrs));
        assert!(may(
            &s,
            &cc,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        ));
    }

    #[test]
    fn the_scheduler_binds_pods_and_updates_claims_through_the_volume_scheduler_role() {
        let s = store();
        let k = User::authenticated("system:kube-scheduler", Vec::<String>::new());
        assert!(may(&s, &k, "POST", "/api/v1/namespaces/a/pods/p/binding"));
        assert!(may(&s, &k, "PATCH", "/api/v1/namespaces/a/pods/p/status"));
        assert!(may(
            &s,
            &k,
            "PATCH",
            "/api/v1/namespaces/a/persistentvolumeclaims/c"
        ));
        assert!(may(&s, &k, "PUT", "/api/v1/persistentvolumes/v"));
        assert!(!may(&s, &k, "DELETE", "/api/v1/persistentvolumes/v"));
        assert!(!may(&s, &k, "POST", "/api/v1/namespaces/a/pods"));
        assert!(!may(&s, &k, "GET", "/api/v1/namespaces/a/secrets/x"));
    }
}
