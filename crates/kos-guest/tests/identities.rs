//! Every simulated component writes as the identity it has on a real cluster, so a missing binding
//! fails as it would there: kubeadm with super-admin.conf then admin.conf, the joining kubelet's
//! TLS bootstrap (its CSR as the bootstrap token's user, approved and signed by
//! kube-controller-manager's `certificate-controller`), the garbage collector as its
//! ServiceAccount.
// The test's own hands set up and break the cluster, as no component of it would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kos_bootstrap::{PkiDelivery, Role};

fn formed(c: &kos_bootstrap::ClusterInput, s: &kos_bootstrap::ClusterSecrets) -> World {
    let mut w = World::new();
    w.boot("cp-0", true, user_data(c, Role::InitControlPlane, s));
    w.settle_hours(1);
    w
}

fn assert_detail(w: &World, id: &kos_guest::ServerId, needle: &str) {
    let details = w.failure_details(id);
    assert!(
        details.iter().any(|d| d.contains(needle)),
        "{needle:?} not in {details:?}"
    );
}

fn unbind(w: &World, binding: &str) {
    w.only_cluster()
        .kube
        .delete::<ClusterRoleBinding>(None, binding)
        .unwrap();
}

/// (user, method, path, status) of every request the cluster's API server answered.
/// A worker that joined a one-control-plane cluster without kubeadm's binding `binding`, its join
/// failed; the world, the worker and the cluster's secrets.
fn join_without(binding: &str) -> (World, kos_guest::ServerId, kos_bootstrap::ClusterSecrets) {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    unbind(&w, binding);
    let id = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    (w, id, s)
}

fn requests(w: &World) -> Vec<(String, String, String, u16)> {
    w.only_cluster()
        .kube
        .requests()
        .into_iter()
        .map(|r| (r.user.unwrap_or_default(), r.method, r.path, r.status))
        .collect()
}

#[tokio::test]
async fn kubeadm_init_binds_its_admins_as_super_admin_and_writes_the_rest_as_admin() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let w = formed(&c, &s);
    assert!(w.markers(&w.control_planes[0]).starts_with(&init_markers()));
    let r = requests(&w);
    let crbs = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let at = |user: &str, method: &str, path: &str, status: u16| {
        r.iter()
            .position(|(u, m, p, st)| u == user && m == method && p == path && *st == status)
            .unwrap_or_else(|| panic!("no {user} {method} {path} {status} in {r:#?}"))
    };
    // admin.conf is refused (it is no admin yet), super-admin.conf binds its group.
    let refused = at("kubernetes-admin", "POST", crbs, 403);
    let bound = at("kubernetes-super-admin", "POST", crbs, 201);
    assert!(refused < bound);
    // Then admin.conf: the uploaded configuration, the token, the control-plane marks.
    for (method, path) in [
        ("POST", "/api/v1/namespaces/kube-system/configmaps"),
        ("POST", "/api/v1/namespaces/kube-public/configmaps"),
        ("POST", "/api/v1/namespaces/kube-system/secrets"),
        ("POST", crbs),
    ] {
        assert!(at("kubernetes-admin", method, path, 201) > bound);
    }
    assert!(r.iter().any(|(u, m, p, st)| u == "kubernetes-admin"
        && m == "PATCH"
        && p.starts_with("/api/v1/nodes/")
        && *st == 200));
    // Nothing of kubeadm's is written without a user any more.
    assert!(
        r.iter()
            .filter(|(_, m, _, _)| m != "GET")
            .all(|(u, _, _, _)| !u.is_empty()),
        "{r:#?}"
    );
}

#[tokio::test]
async fn a_control_plane_join_without_the_cluster_admins_binding_cannot_mark_itself() {
    let c = cluster("1.34.2", 3, 0);
    let s = secrets();
    let mut w = formed(&c, &s);
    unbind(&w, "kubeadm:cluster-admins");
    let id = w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    w.settle_hours(2);
    assert_join_failed(&w, &id);
    assert_detail(
        &w,
        &id,
        "error execution phase control-plane-join/mark-control-plane: error applying control-plane label and taints: nodes \"",
    );
    assert_detail(
        &w,
        &id,
        "\" is forbidden: User \"kubernetes-admin\" cannot get resource \"nodes\" in API group \"\" at the cluster scope",
    );
    assert_eq!(w.only_cluster().etcd.len(), 1);
}

#[tokio::test]
async fn a_joined_worker_holds_a_certificate_the_certificate_controller_approved_and_signed() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = formed(&c, &s);
    let id = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(2);
    assert_eq!(w.markers(&id), join_markers());
    let csrs = w
        .only_cluster()
        .kube
        .list::<CertificateSigningRequest>(None)
        .unwrap();
    assert_eq!(csrs.len(), 1, "{csrs:?}");
    let csr = &csrs[0];
    assert_eq!(
        csr.spec.username.as_deref(),
        Some(format!("system:bootstrap:{}", s.token.id).as_str())
    );
    let status = csr.status.clone().unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    assert_eq!(conds[0].type_, "Approved");
    assert_eq!(conds[0].reason.as_deref(), Some("AutoApproved"));
    let cert = status.certificate.expect("issued").0;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&cert).unwrap();
    let x = pem.parse_x509().unwrap();
    assert!(
        x.subject().to_string().starts_with("CN=system:node:"),
        "{}",
        x.subject()
    );
    // Issued by the cluster's CA, the one kos gave the control plane.
    let ca = s.ca.cert_pem.clone();
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.as_bytes()).unwrap();
    assert_eq!(x.issuer(), ca_pem.parse_x509().unwrap().subject());
}

#[tokio::test]
async fn without_the_autoapprove_binding_the_csr_stays_pending_and_the_join_times_out() {
    let (w, id, _) = join_without("kubeadm:node-autoapprove-bootstrap");
    assert_detail(
        &w,
        &id,
        "error execution phase kubelet-start: timed out waiting for the kubelet to perform the TLS Bootstrap: CertificateSigningRequest \"csr-",
    );
    assert_detail(
        &w,
        &id,
        "as [nodeclient] but subject access review was not approved",
    );
    let csrs = w
        .only_cluster()
        .kube
        .list::<CertificateSigningRequest>(None)
        .unwrap();
    assert!(!csrs.is_empty());
    assert!(csrs.iter().all(|c| {
        c.status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_none()
            && c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none()
    }));
}

#[tokio::test]
async fn without_kubeadms_bootstrap_binding_the_kubelet_cannot_ask_for_a_certificate() {
    let (w, id, s) = join_without("kubeadm:kubelet-bootstrap");
    assert_detail(
        &w,
        &id,
        &format!(
            "timed out waiting for the kubelet to perform the TLS Bootstrap: the kubelet's certificate signing request was refused: certificatesigningrequests.certificates.k8s.io is forbidden: User \"system:bootstrap:{}\" cannot create resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope",
            s.token.id
        ),
    );
}

#[tokio::test]
async fn without_its_binding_the_certificate_controller_approves_nothing() {
    let (w, id, _) = join_without("system:controller:certificate-controller");
    assert_detail(
        &w,
        &id,
        "User \"system:serviceaccount:kube-system:certificate-controller\" cannot get resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope",
    );
}

#[tokio::test]
async fn without_its_binding_the_garbage_collector_leaves_kubeadm_certs() {
    let mut c = cluster("1.34.2", 3, 0);
    c.pki_delivery = PkiDelivery::UploadCerts;
    let s = secrets_with_ttl(Duration::from_secs(24 * 3600));
    let mut w = formed(&c, &s);
    assert!(w.only_cluster().secret("kubeadm-certs").unwrap().is_some());
    unbind(&w, "system:controller:generic-garbage-collector");
    w.advance(time::Duration::minutes(125));
    // The token cleaner deleted the owner; the collector may not delete what it owned.
    let owner_gone = w
        .only_cluster()
        .kube
        .list::<k8s_openapi::api::core::v1::Secret>(Some("kube-system"))
        .unwrap()
        .iter()
        .all(|t| {
            kos_guest::cluster::secret_str(t, "description").as_deref()
                != Some("Proxy for managing TTL for the kubeadm-certs secret")
        });
    assert!(owner_gone);
    assert!(w.only_cluster().secret("kubeadm-certs").unwrap().is_some());
    let refused: Vec<_> = requests(&w)
        .into_iter()
        .filter(|(u, _, _, st)| {
            u == "system:serviceaccount:kube-system:generic-garbage-collector" && *st == 403
        })
        .collect();
    assert!(!refused.is_empty());
}

/// Advances the world a second at a time until `id`'s `step` is done (at most a simulated hour).
fn run_past(w: &mut World, id: &kos_guest::ServerId, step: &str) {
    let marker = format!("kos-bootstrap: {step} ok");
    for _ in 0..3600 {
        if w.markers(id).contains(&marker) {
            return;
        }
        w.advance(time::Duration::seconds(1));
    }
    panic!("{step} never finished: {:?}", w.markers(id));
}

#[tokio::test]
async fn the_addons_are_applied_as_admin_conf_and_fail_without_its_binding() {
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let mut w = World::new();
    let id = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    run_past(&mut w, &id, "cni");
    // The CNI stand-in was applied by admin.conf's user, as the script's kubectl does.
    assert!(
        requests(&w)
            .iter()
            .any(|(u, m, p, st)| u == "kubernetes-admin"
                && m == "PATCH"
                && p.starts_with("/apis/apps/v1/namespaces/kube-system/daemonsets/")
                && *st == 201),
        "{:#?}",
        requests(&w)
    );
    unbind(&w, "kubeadm:cluster-admins");
    w.settle_hours(1);
    let markers = w.markers(&id);
    assert!(
        !markers.contains(&"kos-bootstrap: addons ok".to_owned()),
        "{markers:?}"
    );
    assert!(
        markers
            .iter()
            .any(|m| m.starts_with("kos-bootstrap: addons retrying: gave up after 10 attempts: ")),
        "{markers:?}"
    );
    assert_detail(
        &w,
        &id,
        "is forbidden: User \"kubernetes-admin\" cannot patch resource",
    );
    // No write of the bootstrap is left without a user.
    assert!(
        requests(&w)
            .iter()
            .filter(|(_, m, _, _)| m != "GET")
            .all(|(u, _, _, _)| !u.is_empty()),
        "{:#?}",
        requests(&w)
    );
}

/// kube-controller-manager's certificate controllers run while the control plane does, for any
/// request: one a user made through the API for a kubelet client, the user not allowed to
/// autoapprove, stays pending until an admin approves it (`kubectl certificate approve`), and is
/// then signed with the cluster CA, no join running.
#[tokio::test]
async fn a_users_csr_stays_pending_until_an_admin_approves_it_then_is_signed() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    };
    let c = cluster("1.34.2", 1, 0);
    let s = secrets();
    let mut w = formed(&c, &s);
    let kube = &w.only_cluster().kube;
    // carol may ask for certificates, not have them approved for her.
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "carol-asks"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}],
    }))
    .unwrap();
    kube.insert(&binding).unwrap();
    let (_, request) = kos_guest::certificates::kubelet_request("extra").unwrap();
    let carol = kube.acting_as(kos_kube_fake::User::authenticated("carol", []), "kubectl");
    carol
        .create(&CertificateSigningRequest {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("extra".into()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request.into_bytes()),
                signer_name: kos_guest::certificates::KUBELET_CLIENT_SIGNER.into(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                ..Default::default()
            },
            status: None,
        })
        .unwrap();
    w.advance(time::Duration::minutes(10));
    let csr = |w: &World| {
        w.only_cluster()
            .kube
            .get::<CertificateSigningRequest>(None, "extra")
            .unwrap()
            .unwrap()
    };
    let pending = csr(&w).status.unwrap_or_default();
    assert!(pending.conditions.is_none(), "{pending:?}");
    assert!(pending.certificate.is_none(), "{pending:?}");
    // The controller looked, and asked whether carol may autoapprove.
    assert!(requests(&w).iter().any(|(u, m, p, st)| u
        == "system:serviceaccount:kube-system:certificate-controller"
        && m == "POST"
        && p == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        && *st == 201));
    let admin = w.only_cluster().kube.acting_as(
        kos_guest::kubeadm::rbac::admin(kos_guest::Version::parse("1.34.2").unwrap()),
        "kubectl",
    );
    admin
        .update_subresource::<CertificateSigningRequest>(None, "extra", "approval", |c| {
            c.status
                .get_or_insert_default()
                .conditions
                .get_or_insert_default()
                .push(CertificateSigningRequestCondition {
                    type_: "Approved".into(),
                    status: "True".into(),
                    reason: Some("KubectlApprove".into()),
                    message: Some("This CSR was approved by kubectl certificate approve.".into()),
                    ..Default::default()
                });
        })
        .unwrap();
    w.advance(time::Duration::minutes(1));
    let status = csr(&w).status.unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    assert_eq!(conds.len(), 1, "{conds:?}");
    assert_eq!(conds[0].reason.as_deref(), Some("KubectlApprove"));
    let cert = status.certificate.expect("signed").0;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&cert).unwrap();
    let x = pem.parse_x509().unwrap();
    assert_eq!(
        x.subject().to_string(),
        "CN=system:node:extra, O=system:nodes"
    );
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(s.ca.cert_pem.as_bytes()).unwrap();
    assert_eq!(x.issuer(), ca_pem.parse_x509().unwrap().subject());
}
