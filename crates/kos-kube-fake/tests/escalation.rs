//! RBAC escalation prevention as kube-apiserver's rbac storage does it: a user writes a role only
//! with the permissions it grants (or `escalate`), a binding only to a role it may `bind` or whose
//! permissions it holds; members of `system:masters` write anything. Through kube-rs clients of
//! users authenticated by token, as a tenant's kubectl would.
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kos_kube_fake::{FakeKube, User};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

type R = Result<(), Box<dyn std::error::Error>>;

fn from<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn role(ns: &str, name: &str, rules: Value) -> Role {
    from(json!({"metadata": {"name": name, "namespace": ns}, "rules": rules}))
}

fn cluster_role(name: &str, rules: Value) -> ClusterRole {
    from(json!({"metadata": {"name": name}, "rules": rules}))
}

fn role_binding(ns: &str, name: &str, kind: &str, role: &str, user: &str) -> RoleBinding {
    from(json!({
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
}

fn cluster_role_binding(name: &str, role: &str, user: &str) -> ClusterRoleBinding {
    from(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
}

fn alice() -> User {
    User::authenticated("alice", ["team".to_owned()])
}

/// A fake where `alice` may write Roles and RoleBindings in `team` and read Pods there.
async fn team() -> Result<(FakeKube, kube::Client), Box<dyn std::error::Error>> {
    let fake = FakeKube::start().await?;
    let admin = fake.client()?;
    let ns: k8s_openapi::api::core::v1::Namespace = from(json!({"metadata": {"name": "team"}}));
    Api::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let rbac_writer = role(
        "team",
        "rbac-writer",
        json!([
            rule(
                &["rbac.authorization.k8s.io"],
                &["roles", "rolebindings"],
                &["create", "update", "patch", "get"]
            ),
            rule(&[""], &["pods"], &["get", "list"]),
        ]),
    );
    Api::namespaced(admin.clone(), "team")
        .create(&PostParams::default(), &rbac_writer)
        .await?;
    Api::namespaced(admin.clone(), "team")
        .create(
            &PostParams::default(),
            &role_binding("team", "alice", "Role", "rbac-writer", "alice"),
        )
        .await?;
    let client = fake.user_client(&alice())?;
    Ok((fake, client))
}

fn refusal(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not the API's answer: {other}"),
    }
}

#[tokio::test]
async fn a_role_granting_what_its_writer_lacks_is_forbidden_with_the_missing_rules() -> R {
    let (_fake, alice) = team().await?;
    let roles: Api<Role> = Api::namespaced(alice, "team");
    // What alice holds she may grant.
    roles
        .create(
            &PostParams::default(),
            &role("team", "reader", json!([rule(&[""], &["pods"], &["get"])])),
        )
        .await?;
    let e = roles
        .create(
            &PostParams::default(),
            &role(
                "team",
                "deleter",
                json!([
                    rule(&[""], &["pods"], &["get", "delete"]),
                    rule(&["", "apps"], &["secrets"], &["get", "list"]),
                ]),
            ),
        )
        .await
        .unwrap_err();
    let s = refusal(e);
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        "roles.rbac.authorization.k8s.io \"deleter\" is forbidden: user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}\n\
         {APIGroups:[\"apps\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
    );
    let d = s.details.unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("deleter", "rbac.authorization.k8s.io", "roles")
    );
    // Widening a role on update is checked as well (a merge patch here).
    let e = roles
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": [rule(&[""], &["pods"], &["*"])]})),
        )
        .await
        .unwrap_err();
    let s = refusal(e);
    assert_eq!(s.code, 403);
    assert!(
        s.message
            .ends_with("{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"*\"]}"),
        "{}",
        s.message
    );
    Ok(())
}

#[tokio::test]
async fn escalate_on_roles_lets_a_user_grant_more_than_it_holds() -> R {
    let (fake, alice) = team().await?;
    let admin = fake.client()?;
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(
            &PostParams::default(),
            &role(
                "team",
                "escalator",
                json!([rule(
                    &["rbac.authorization.k8s.io"],
                    &["roles"],
                    &["escalate"]
                )]),
            ),
        )
        .await?;
    Api::<RoleBinding>::namespaced(admin, "team")
        .create(
            &PostParams::default(),
            &role_binding("team", "alice-escalates", "Role", "escalator", "alice"),
        )
        .await?;
    Api::<Role>::namespaced(alice, "team")
        .create(
            &PostParams::default(),
            &role("team", "all", json!([rule(&["*"], &["*"], &["*"])])),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_binding_needs_bind_on_its_role_or_all_its_permissions() -> R {
    let (fake, alice) = team().await?;
    let admin = fake.client()?;
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    cluster_roles
        .create(
            &PostParams::default(),
            &cluster_role("pod-reader", json!([rule(&[""], &["pods"], &["get"])])),
        )
        .await?;
    cluster_roles
        .create(
            &PostParams::default(),
            &cluster_role(
                "secret-reader",
                json!([rule(&[""], &["secrets"], &["get"])]),
            ),
        )
        .await?;
    let bindings: Api<RoleBinding> = Api::namespaced(alice.clone(), "team");
    // Alice holds `get pods` in `team`: she may hand it on.
    bindings
        .create(
            &PostParams::default(),
            &role_binding("team", "bob-pods", "ClusterRole", "pod-reader", "bob"),
        )
        .await?;
    let e = bindings
        .create(
            &PostParams::default(),
            &role_binding("team", "bob-secrets", "ClusterRole", "secret-reader", "bob"),
        )
        .await
        .unwrap_err();
    let s = refusal(e);
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "rolebindings.rbac.authorization.k8s.io \"bob-secrets\" is forbidden: user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
    );
    // A role that does not exist is its 404 for her.
    let e = bindings
        .create(
            &PostParams::default(),
            &role_binding("team", "bob-nothing", "ClusterRole", "nothing", "bob"),
        )
        .await
        .unwrap_err();
    let s = refusal(e);
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            404,
            "clusterroles.rbac.authorization.k8s.io \"nothing\" not found"
        )
    );
    // `bind` of another ClusterRole by name does not help; of this one it does.
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(
            &PostParams::default(),
            &role(
                "team",
                "binder",
                json!([{
                    "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                    "verbs": ["bind"], "resourceNames": ["pod-reader"],
                }]),
            ),
        )
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), "team")
        .create(
            &PostParams::default(),
            &role_binding("team", "alice-binds", "Role", "binder", "alice"),
        )
        .await?;
    assert_eq!(
        bindings
            .create(
                &PostParams::default(),
                &role_binding("team", "bob-secrets", "ClusterRole", "secret-reader", "bob"),
            )
            .await
            .map_err(refusal)
            .unwrap_err()
            .code,
        403
    );
    Api::<Role>::namespaced(admin.clone(), "team")
        .patch(
            "binder",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": [{
                "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                "verbs": ["bind"], "resourceNames": ["secret-reader"],
            }]})),
        )
        .await?;
    bindings
        .create(
            &PostParams::default(),
            &role_binding("team", "bob-secrets", "ClusterRole", "secret-reader", "bob"),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn resource_names_limit_what_a_holder_may_grant() -> R {
    let (fake, alice) = team().await?;
    let admin = fake.client()?;
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(
            &PostParams::default(),
            &role(
                "team",
                "one-map",
                json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["a"]}]),
            ),
        )
        .await?;
    Api::<RoleBinding>::namespaced(admin, "team")
        .create(
            &PostParams::default(),
            &role_binding("team", "alice-map", "Role", "one-map", "alice"),
        )
        .await?;
    let roles: Api<Role> = Api::namespaced(alice, "team");
    let named = |name: &str, names: Value| {
        role(
            "team",
            name,
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": names}]),
        )
    };
    roles
        .create(&PostParams::default(), &named("a", json!(["a"])))
        .await?;
    let e = roles
        .create(&PostParams::default(), &named("ab", json!(["a", "b"])))
        .await
        .unwrap_err();
    assert!(refusal(e).message.ends_with(
        "{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"b\"], Verbs:[\"get\"]}"
    ));
    let e = roles
        .create(
            &PostParams::default(),
            &role(
                "team",
                "any",
                json!([rule(&[""], &["configmaps"], &["get"])]),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(refusal(e).code, 403);
    Ok(())
}

#[tokio::test]
async fn an_aggregation_rule_needs_cluster_admin_and_masters_write_anything() -> R {
    let fake = FakeKube::start().await?;
    let admin = fake.client()?;
    // `carol` may write ClusterRoles and holds what the aggregated role's own rules grant.
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &PostParams::default(),
            &cluster_role(
                "role-writer",
                json!([
                    rule(
                        &["rbac.authorization.k8s.io"],
                        &["clusterroles"],
                        &["create", "get"]
                    ),
                    rule(&[""], &["pods"], &["get"]),
                ]),
            ),
        )
        .await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &PostParams::default(),
            &cluster_role_binding("carol", "role-writer", "carol"),
        )
        .await?;
    let carol = fake.user_client(&User::authenticated("carol", []))?;
    let aggregated: ClusterRole = from(json!({
        "metadata": {"name": "aggregated"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]},
        "rules": [rule(&[""], &["pods"], &["get"])],
    }));
    let e = Api::<ClusterRole>::all(carol)
        .create(&PostParams::default(), &aggregated)
        .await
        .unwrap_err();
    let s = refusal(e);
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "clusterroles.rbac.authorization.k8s.io \"aggregated\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
        )
    );
    // A member of system:masters (not bound to anything) writes what it likes.
    let root = fake.user_client(&User::authenticated("root", ["system:masters".to_owned()]))?;
    Api::<ClusterRole>::all(root.clone())
        .create(&PostParams::default(), &aggregated)
        .await?;
    Api::<ClusterRoleBinding>::all(root)
        .create(
            &PostParams::default(),
            &cluster_role_binding("carol-all", "cluster-admin", "carol"),
        )
        .await?;
    Ok(())
}

/// In-process components are checked as over HTTP.
#[tokio::test]
async fn an_in_process_user_is_checked_as_well() -> R {
    let (fake, _) = team().await?;
    let alice = fake.acting_as(alice(), "kubectl");
    let err = alice
        .create(&role("team", "all", json!([rule(&["*"], &["*"], &["*"])])))
        .unwrap_err();
    let kos_kube_fake::FakeError::Api(e) = err else {
        panic!("not the API's answer: {err}")
    };
    assert_eq!(e.code, 403);
    assert!(
        e.message
            .contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        e.message
    );
    Ok(())
}
