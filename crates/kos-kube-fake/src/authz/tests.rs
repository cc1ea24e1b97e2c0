use serde_json::json;

use super::*;

fn store() -> Store {
    crate::test_store(true)
}

fn put(s: &mut Store, plural: &str, obj: Value) {
    crate::test_put(s, "rbac.authorization.k8s.io", plural, obj);
}

fn cluster_role(s: &mut Store, name: &str, rules: Value) {
    put(
        s,
        "clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}),
    );
}

fn role(s: &mut Store, ns: &str, name: &str, rules: Value) {
    put(
        s,
        "roles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules}),
    );
}

fn cluster_binding(s: &mut Store, name: &str, role: &str, subjects: Value) {
    put(
        s,
        "clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects}),
    );
}

fn binding(s: &mut Store, ns: &str, name: &str, kind: &str, role: &str, subjects: Value) {
    put(
        s,
        "rolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role}, "subjects": subjects}),
    );
}

fn user(name: &str, groups: &[&str]) -> User {
    User::authenticated(name, groups.iter().map(|g| (*g).to_owned()))
}

fn can(s: &Store, u: &User, method: &str, path: &str) -> bool {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    authorize(s, u, &RequestInfo::parse(method, path, query)).is_ok()
}

fn message(s: &Store, u: &User, method: &str, path: &str) -> String {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    match authorize(s, u, &RequestInfo::parse(method, path, query)) {
        Ok(why) => panic!("allowed: {why}"),
        Err(e) => {
            assert_eq!((e.code, e.reason), (403, "Forbidden"));
            e.message
        }
    }
}

#[test]
fn request_info_reads_urls_as_the_apiserver_does() {
    let i = RequestInfo::parse("GET", "/api/v1/namespaces/kube-system/pods", "watch=true");
    assert_eq!(
        (i.verb.as_str(), i.namespace.as_str(), i.resource.as_str()),
        ("watch", "kube-system", "pods")
    );
    assert_eq!(
        RequestInfo::parse("GET", "/api/v1/pods", "watch=false").verb,
        "list"
    );
    assert_eq!(
        RequestInfo::parse("GET", "/api/v1/pods", "watch=1").verb,
        "watch"
    );
    let i = RequestInfo::parse("DELETE", "/api/v1/namespaces/a/pods", "");
    assert_eq!(i.verb, "deletecollection");
    // A Namespace is its own namespace; `status` and `finalize` are its subresources.
    let i = RequestInfo::parse("GET", "/api/v1/namespaces/kube-system", "");
    assert_eq!(
        (
            i.verb.as_str(),
            i.namespace.as_str(),
            i.resource.as_str(),
            i.name.as_str()
        ),
        ("get", "kube-system", "namespaces", "kube-system")
    );
    let i = RequestInfo::parse("PUT", "/api/v1/namespaces/x/finalize", "");
    assert_eq!(
        (i.resource.as_str(), i.subresource.as_str()),
        ("namespaces", "finalize")
    );
    let i = RequestInfo::parse(
        "PATCH",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        "",
    );
    assert_eq!(
        (i.api_group.as_str(), i.verb.as_str(), i.name.as_str()),
        ("coordination.k8s.io", "patch", "l")
    );
    let i = RequestInfo::parse("POST", "/api/v1/namespaces/a/pods/p/eviction", "");
    assert_eq!(
        (i.verb.as_str(), i.subresource.as_str(), i.name.as_str()),
        ("create", "eviction", "p")
    );
    let i = RequestInfo::parse("GET", "/apis/apps/v1/watch/namespaces/a/deployments", "");
    assert_eq!(
        (i.verb.as_str(), i.resource.as_str()),
        ("watch", "deployments")
    );
    // Fewer parts than a resource: non-resource paths, the HTTP method as the verb.
    for p in [
        "/api",
        "/api/v1",
        "/apis/apps/v1",
        "/version",
        "/openapi/v3",
        "/",
    ] {
        let i = RequestInfo::parse("GET", p, "");
        assert!(!i.resource_request, "{p}");
        assert_eq!(i.verb, "get");
    }
    // A list of one name by field selector names it (for resourceNames); two names do not.
    let i = RequestInfo::parse(
        "GET",
        "/api/v1/namespaces/a/configmaps",
        "fieldSelector=metadata.name%3Dx",
    );
    assert_eq!((i.verb.as_str(), i.name.as_str()), ("list", "x"));
}

#[test]
fn wildcards_match_verbs_groups_resources_and_urls() {
    let mut s = store();
    cluster_role(
        &mut s,
        "everything-in-apps",
        json!([{"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]}]),
    );
    cluster_role(
        &mut s,
        "nodes-anywhere",
        json!([{"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["get"]},
               {"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}]),
    );
    let u = user("alice", &[]);
    cluster_binding(
        &mut s,
        "a",
        "everything-in-apps",
        json!([{"kind": "User", "name": "alice"}]),
    );
    cluster_binding(
        &mut s,
        "b",
        "nodes-anywhere",
        json!([{"kind": "User", "name": "alice"}]),
    );
    assert!(can(
        &s,
        &u,
        "DELETE",
        "/apis/apps/v1/namespaces/x/deployments/d"
    ));
    assert!(can(
        &s,
        &u,
        "PUT",
        "/apis/apps/v1/namespaces/x/deployments/d/scale"
    ));
    assert!(!can(&s, &u, "GET", "/apis/batch/v1/namespaces/x/jobs/j"));
    assert!(can(&s, &u, "GET", "/api/v1/nodes/n1"));
    assert!(!can(&s, &u, "GET", "/api/v1/nodes"), "get is not list");
    assert!(
        !can(&s, &u, "GET", "/api/v1/nodes/n1/status"),
        "nodes is not nodes/status"
    );
    assert!(can(&s, &u, "GET", "/metrics"));
    assert!(!can(&s, &u, "POST", "/metrics"));
    assert!(can(&s, &u, "GET", "/logs/kube-apiserver.log"));
    assert!(!can(&s, &u, "GET", "/logsx"));
    // Every authenticated user may discover the API (system:discovery).
    assert!(can(&s, &u, "GET", "/apis/apps/v1"));
    // system:masters: everything, without a binding.
    assert!(can(
        &s,
        &user("root", &[MASTERS]),
        "DELETE",
        "/api/v1/namespaces/x/secrets/y"
    ));
    // The seeded cluster-admin binding is what kubeadm's groups are bound to, not the name.
    assert!(!can(
        &s,
        &user("kubernetes-admin", &[]),
        "GET",
        "/api/v1/secrets"
    ));
}

#[test]
fn subresources_match_exactly_or_by_star_slash() {
    let mut s = store();
    cluster_role(
        &mut s,
        "r",
        json!([
            {"apiGroups": [""], "resources": ["pods/eviction", "serviceaccounts/token"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        ]),
    );
    cluster_binding(&mut s, "r", "r", json!([{"kind": "User", "name": "u"}]));
    let u = user("u", &[]);
    assert!(can(&s, &u, "POST", "/api/v1/namespaces/a/pods/p/eviction"));
    assert!(
        !can(&s, &u, "POST", "/api/v1/namespaces/a/pods"),
        "pods/eviction is not pods"
    );
    assert!(can(
        &s,
        &u,
        "POST",
        "/api/v1/namespaces/a/serviceaccounts/sa/token"
    ));
    assert!(!can(&s, &u, "POST", "/api/v1/namespaces/a/serviceaccounts"));
    assert!(can(&s, &u, "PATCH", "/api/v1/nodes/n/status"));
    assert!(can(
        &s,
        &u,
        "PATCH",
        "/api/v1/namespaces/a/services/s/status"
    ));
    assert!(
        !can(&s, &u, "PATCH", "/api/v1/nodes/n"),
        "*/status is not the object"
    );
    assert!(can(&s, &u, "GET", "/api/v1/namespaces/a/pods/p"));
    assert!(
        !can(&s, &u, "GET", "/api/v1/namespaces/a/pods/p/log"),
        "pods is not pods/log"
    );
}

#[test]
fn resource_names_restrict_named_requests_only() {
    let mut s = store();
    role(
        &mut s,
        "kube-system",
        "one",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"], "verbs": ["get", "list", "watch", "create", "update", "delete"]}]),
    );
    binding(
        &mut s,
        "kube-system",
        "one",
        "Role",
        "one",
        json!([{"kind": "User", "name": "u"}]),
    );
    let u = user("u", &[]);
    let cms = "/api/v1/namespaces/kube-system/configmaps";
    assert!(can(&s, &u, "GET", &format!("{cms}/x")));
    assert!(can(&s, &u, "PUT", &format!("{cms}/x")));
    assert!(!can(&s, &u, "GET", &format!("{cms}/y")));
    // A create has no name in its URL: resourceNames never allow it.
    assert!(!can(&s, &u, "POST", cms));
    // Nor a list or watch of all of them, nor a deletecollection.
    assert!(!can(&s, &u, "GET", cms));
    assert!(!can(&s, &u, "GET", &format!("{cms}?watch=true")));
    assert!(!can(&s, &u, "DELETE", cms));
    // A list or watch narrowed to the name by field selector is allowed.
    assert!(can(
        &s,
        &u,
        "GET",
        &format!("{cms}?fieldSelector=metadata.name%3Dx")
    ));
    assert!(can(
        &s,
        &u,
        "GET",
        &format!("{cms}?watch=true&fieldSelector=metadata.name%3Dx")
    ));
    assert!(!can(
        &s,
        &u,
        "GET",
        &format!("{cms}?fieldSelector=metadata.name%3Dy")
    ));
    // The Role is kube-system's: not another namespace's, not the cluster's.
    assert!(!can(
        &s,
        &u,
        "GET",
        "/api/v1/namespaces/default/configmaps/x"
    ));
}

#[test]
fn a_role_binding_scopes_a_cluster_role_to_its_namespace() {
    let mut s = store();
    cluster_role(
        &mut s,
        "secret-reader",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]),
    );
    binding(
        &mut s,
        "team",
        "read",
        "ClusterRole",
        "secret-reader",
        json!([{"kind": "User", "name": "u"}]),
    );
    let u = user("u", &[]);
    assert!(can(&s, &u, "GET", "/api/v1/namespaces/team/secrets/s"));
    assert!(can(&s, &u, "GET", "/api/v1/namespaces/team/secrets"));
    assert!(!can(&s, &u, "GET", "/api/v1/namespaces/other/secrets/s"));
    assert!(
        !can(&s, &u, "GET", "/api/v1/secrets"),
        "all namespaces is cluster scope"
    );
    // A binding to a role that does not exist grants nothing.
    binding(
        &mut s,
        "team",
        "dangling",
        "Role",
        "nope",
        json!([{"kind": "User", "name": "v"}]),
    );
    assert!(!can(
        &s,
        &user("v", &[]),
        "GET",
        "/api/v1/namespaces/team/secrets/s"
    ));
}

#[test]
fn service_accounts_match_by_subject_and_by_their_groups() {
    let mut s = store();
    cluster_role(
        &mut s,
        "lease-user",
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}]),
    );
    // A ServiceAccount subject without a namespace is the binding's namespace's.
    binding(
        &mut s,
        "kube-system",
        "sa",
        "ClusterRole",
        "lease-user",
        json!([{"kind": "ServiceAccount", "name": "ccm"}]),
    );
    let ccm = User::service_account("kube-system", "ccm");
    assert_eq!(ccm.name, "system:serviceaccount:kube-system:ccm");
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l";
    assert!(can(&s, &ccm, "GET", path));
    assert!(!can(
        &s,
        &User::service_account("default", "ccm"),
        "GET",
        path
    ));
    // A user named like the ServiceAccount is it (as a client certificate with that name is).
    assert!(can(
        &s,
        &user("system:serviceaccount:kube-system:ccm", &[]),
        "GET",
        path
    ));
    // The groups: every ServiceAccount of a namespace, and of the cluster.
    cluster_binding(
        &mut s,
        "ns-sas",
        "lease-user",
        json!([{"kind": "Group", "name": "system:serviceaccounts:apps"}]),
    );
    let other = "/apis/coordination.k8s.io/v1/namespaces/x/leases/l";
    assert!(can(&s, &User::service_account("apps", "any"), "GET", other));
    assert!(!can(&s, &User::service_account("web", "any"), "GET", other));
    cluster_binding(
        &mut s,
        "all-sas",
        "lease-user",
        json!([{"kind": "Group", "name": "system:serviceaccounts"}]),
    );
    assert!(can(&s, &User::service_account("web", "any"), "GET", other));
    assert!(!can(&s, &user("alice", &[]), "GET", other));
}

#[test]
fn aggregated_cluster_roles_get_the_rules_of_the_roles_they_select() {
    let mut s = store();
    put(
        &mut s,
        "clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "monitoring"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}]}}),
    );
    cluster_binding(
        &mut s,
        "m",
        "monitoring",
        json!([{"kind": "User", "name": "u"}]),
    );
    let u = user("u", &[]);
    assert!(!aggregate(&mut s), "nothing selected yet");
    assert!(!can(&s, &u, "GET", "/api/v1/namespaces/a/endpoints"));
    put(
        &mut s,
        "clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "endpoints-reader", "labels": {"rbac.example.com/aggregate-to-monitoring": "true"}},
            "rules": [{"apiGroups": [""], "resources": ["endpoints"], "verbs": ["list"]}]}),
    );
    cluster_role(
        &mut s,
        "unlabelled",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
    );
    assert!(aggregate(&mut s));
    assert!(!aggregate(&mut s), "a second pass changes nothing");
    assert!(can(&s, &u, "GET", "/api/v1/namespaces/a/endpoints"));
    assert!(!can(&s, &u, "GET", "/api/v1/namespaces/a/pods"));
    let res = s
        .type_index("rbac.authorization.k8s.io", "v1", "clusterroles")
        .expect("type");
    let stored = s.get(res, "", "monitoring").expect("stored");
    assert_eq!(
        stored["rules"],
        json!([{"apiGroups": [""], "resources": ["endpoints"], "verbs": ["list"]}])
    );
}

#[test]
fn anonymous_users_get_only_the_public_info() {
    let s = store();
    let anon = User::anonymous();
    assert!(can(&s, &anon, "GET", "/version"));
    assert!(can(&s, &anon, "GET", "/healthz"));
    assert!(
        !can(&s, &anon, "GET", "/api"),
        "discovery is for authenticated users"
    );
    assert!(can(&s, &user("alice", &[]), "GET", "/api"));
}

#[test]
fn denials_are_the_apiservers_403() {
    let s = store();
    let u = User::service_account("kube-system", "cloud-controller-manager");
    assert_eq!(
        message(
            &s,
            &u,
            "GET",
            "/api/v1/namespaces/kube-system/secrets/cloud-config"
        ),
        "secrets \"cloud-config\" is forbidden: User \"system:serviceaccount:kube-system:cloud-controller-manager\" cannot get resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    assert_eq!(
        message(&s, &u, "GET", "/api/v1/nodes"),
        "nodes is forbidden: User \"system:serviceaccount:kube-system:cloud-controller-manager\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    assert_eq!(
        message(
            &s,
            &u,
            "PATCH",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
        ),
        "leases.coordination.k8s.io \"l\" is forbidden: User \"system:serviceaccount:kube-system:cloud-controller-manager\" cannot patch resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"kube-system\""
    );
    assert_eq!(
        message(&s, &u, "PATCH", "/api/v1/nodes/n1/status"),
        "nodes \"n1\" is forbidden: User \"system:serviceaccount:kube-system:cloud-controller-manager\" cannot patch resource \"nodes/status\" in API group \"\" at the cluster scope"
    );
    assert_eq!(
        message(&s, &User::anonymous(), "GET", "/api"),
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    let e = authorize(
        &s,
        &u,
        &RequestInfo::parse("GET", "/apis/apps/v1/namespaces/a/deployments/d", ""),
    )
    .expect_err("denied");
    assert_eq!(
        e.status()["details"],
        json!({"name": "d", "group": "apps", "kind": "deployments"})
    );
}

/// The authorizer reads a view of the roles and bindings built once per write to them: every
/// write of a binding or a role is seen by the next request, as the RBAC authorizer's informers
/// see it.
#[test]
fn every_write_of_a_role_or_binding_is_seen_by_the_next_request() {
    let mut s = store();
    let u = user("ann", &[]);
    let pods = "/api/v1/namespaces/app/pods";
    let bindings = s
        .type_index("rbac.authorization.k8s.io", "v1", "rolebindings")
        .expect("rolebindings");
    assert!(!can(&s, &u, "GET", pods));
    role(
        &mut s,
        "app",
        "reader",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
    );
    let ann = json!([{"kind": "User", "name": "ann"}]);
    binding(&mut s, "app", "ann-reads", "Role", "reader", ann.clone());
    assert!(can(&s, &u, "GET", pods));
    s.delete(bindings, "app", "ann-reads", &json!({}), false)
        .expect("delete");
    assert!(!can(&s, &u, "GET", pods));
    // A binding to a role that does not exist grants nothing until the role is made.
    binding(&mut s, "app", "ann-lists", "ClusterRole", "lister", ann);
    assert!(!can(&s, &u, "GET", pods));
    cluster_role(
        &mut s,
        "lister",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
    );
    assert!(can(&s, &u, "GET", pods));
    assert!(!can(&s, &u, "GET", "/api/v1/namespaces/other/pods"));
}
