//! CertificateSigningRequests as the kubelet's TLS bootstrap meets them: created as the bootstrap
//! token's user, approved and signed by kube-controller-manager's `certificate-controller`, each
//! request authorised and admitted as kube-apiserver does (module `csr`), and the garbage
//! collector's cascade as its own ServiceAccount.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kos_kube_fake::{FakeError, FakeKube, User};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

type R = Result<(), Box<dyn std::error::Error>>;

const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

fn bootstrap() -> User {
    User::authenticated(
        "system:bootstrap:abcdef",
        [
            "system:bootstrappers".to_owned(),
            "system:bootstrappers:kubeadm:default-node-token".to_owned(),
        ],
    )
}

fn controller() -> User {
    User::service_account("kube-system", "certificate-controller")
}

/// A kubelet's request: an ECDSA key, `system:node:<node>` in `system:nodes`.
fn request_pem(node: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    p.serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem")
        .into_bytes()
}

fn csr(name: &str, request: Vec<u8>, usages: &[&str]) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request),
            signer_name: SIGNER.into(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

fn binding(name: &str, role: &str, group: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: group.into(),
            namespace: None,
        }]),
    }
}

/// What kubeadm binds for its default node token: CSR creation.
fn kubeadm_bootstrap_rbac(fake: &FakeKube) -> R {
    fake.insert(&binding(
        "kubeadm:kubelet-bootstrap",
        "system:node-bootstrapper",
        "system:bootstrappers:kubeadm:default-node-token",
    ))?;
    Ok(())
}

fn api_error(e: FakeError) -> kos_kube_fake::ApiError {
    match e {
        FakeError::Api(e) => e,
        other => panic!("not the API's answer: {other}"),
    }
}

fn approved() -> CertificateSigningRequestCondition {
    CertificateSigningRequestCondition {
        type_: "Approved".into(),
        status: "True".into(),
        reason: Some("AutoApproved".into()),
        message: Some(
            "Auto approving kubelet client certificate after SubjectAccessReview.".into(),
        ),
        ..CertificateSigningRequestCondition::default()
    }
}

/// A certificate for the request (a self-signed stand-in: the API checks its PEM, not its issuer).
fn certificate() -> Vec<u8> {
    let key = rcgen::KeyPair::generate().expect("key");
    rcgen::CertificateParams::new(vec!["x".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("cert")
        .pem()
        .into_bytes()
}

#[tokio::test]
async fn a_created_request_names_its_requester_whatever_the_body_says() -> R {
    let fake = FakeKube::start().await?;
    kubeadm_bootstrap_rbac(&fake)?;
    let mut c = csr(
        "c1",
        request_pem("n1"),
        &["digital signature", "client auth"],
    );
    c.spec.username = Some("system:admin".into());
    c.status = Some(Default::default());
    let made = fake.acting_as(bootstrap(), "kubelet").create(&c)?;
    assert_eq!(
        made.spec.username.as_deref(),
        Some("system:bootstrap:abcdef")
    );
    let groups = made.spec.groups.unwrap_or_default();
    assert!(groups.contains(&"system:bootstrappers:kubeadm:default-node-token".to_owned()));
    assert!(groups.contains(&"system:authenticated".to_owned()));
    Ok(())
}

#[tokio::test]
async fn without_kubeadms_binding_the_token_may_not_ask_for_a_certificate() -> R {
    let fake = FakeKube::start().await?;
    let c = csr(
        "c1",
        request_pem("n1"),
        &["digital signature", "client auth"],
    );
    let e = api_error(
        fake.acting_as(bootstrap(), "kubelet")
            .create(&c)
            .expect_err("refused"),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "certificatesigningrequests.certificates.k8s.io is forbidden: User \"system:bootstrap:abcdef\" cannot create resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope"
    );
    Ok(())
}

#[tokio::test]
async fn requests_are_validated_as_the_apiserver_validates_them() -> R {
    let fake = FakeKube::start().await?;
    let admin = fake.acting_as(User::loopback(), "test");
    let refused = |c: CertificateSigningRequest| {
        let e = api_error(admin.create(&c).expect_err("refused"));
        assert_eq!(e.code, 422, "{}", e.message);
        e.message
    };
    let m = refused(csr("a", b"not a pem".to_vec(), &["client auth"]));
    assert!(
        m.contains("spec.request: Invalid value")
            && m.contains("PEM block type must be CERTIFICATE REQUEST"),
        "{m}"
    );
    let m = refused(csr("b", request_pem("n1"), &[]));
    assert!(m.contains("spec.usages: Required value"), "{m}");
    let m = refused(csr("c", request_pem("n1"), &["client auth", "flying"]));
    assert!(
        m.contains("spec.usages[1]: Unsupported value: \"flying\""),
        "{m}"
    );
    let m = refused(csr("d", request_pem("n1"), &["client auth", "client auth"]));
    assert!(m.contains("spec.usages[1]: Duplicate value"), "{m}");
    let mut legacy = csr("e", request_pem("n1"), &["client auth"]);
    legacy.spec.signer_name = "kubernetes.io/legacy-unknown".into();
    let m = refused(legacy);
    assert!(
        m.contains("the legacy signerName is not allowed via this API version"),
        "{m}"
    );
    let mut short = csr("f", request_pem("n1"), &["client auth"]);
    short.spec.expiration_seconds = Some(60);
    let m = refused(short);
    assert!(
        m.contains("may not specify a duration less than 600 seconds"),
        "{m}"
    );
    // A request signed by another key than the one it names.
    let pem = String::from_utf8(request_pem("n1"))?;
    let mut der = x509_der(&pem);
    let last = der.len() - 1;
    der[last] ^= 0x01;
    let tampered = pem_of("CERTIFICATE REQUEST", &der);
    let m = refused(csr("g", tampered, &["client auth"]));
    assert!(m.contains("signature"), "{m}");
    Ok(())
}

fn x509_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("base64")
}

fn pem_of(label: &str, der: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("ascii"))
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
    .into_bytes()
}

#[tokio::test]
async fn the_certificate_controller_approves_and_signs_others_may_not() -> R {
    let fake = FakeKube::start().await?;
    kubeadm_bootstrap_rbac(&fake)?;
    fake.acting_as(bootstrap(), "kubelet").create(&csr(
        "c1",
        request_pem("n1"),
        &["digital signature", "client auth"],
    ))?;
    // The requester may not approve its own request: no `update` of the approval subresource.
    let e = api_error(
        fake.acting_as(bootstrap(), "kubelet")
            .update_subresource::<CertificateSigningRequest>(None, "c1", "approval", |c| {
                c.status.get_or_insert_default().conditions = Some(vec![approved()]);
            })
            .expect_err("refused"),
    );
    assert_eq!(e.code, 403, "{}", e.message);
    // A user who may update approvals but holds no `approve` on the signer: the admission plugin.
    let approver_role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "csr-updater"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval", "certificatesigningrequests/status"], "verbs": ["update"]}],
    });
    fake.apply_json(&approver_role, "test")?;
    fake.insert(&binding("csr-updater", "csr-updater", "updaters"))?;
    let updater = User::authenticated("u", ["updaters".to_owned()]);
    let e = api_error(
        fake.acting_as(updater.clone(), "test")
            .update_subresource::<CertificateSigningRequest>(None, "c1", "approval", |c| {
                c.status.get_or_insert_default().conditions = Some(vec![approved()]);
            })
            .expect_err("refused"),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "certificatesigningrequests.certificates.k8s.io \"c1\" is forbidden: user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client-kubelet\""
    );
    let cc = fake.acting_as(controller(), "kube-controller-manager");
    // Approval through /status is not approval.
    let e = api_error(
        cc.update_subresource::<CertificateSigningRequest>(None, "c1", "status", |c| {
            c.status.get_or_insert_default().conditions = Some(vec![approved()]);
        })
        .expect_err("refused"),
    );
    assert_eq!(e.code, 422, "{}", e.message);
    assert!(
        e.message
            .contains("updates may not add a condition of type \"Approved\""),
        "{}",
        e.message
    );
    let a = cc.update_subresource::<CertificateSigningRequest>(None, "c1", "approval", |c| {
        c.status.get_or_insert_default().conditions = Some(vec![approved()]);
    })?;
    let conds = a.status.and_then(|s| s.conditions).unwrap_or_default();
    assert_eq!(conds.len(), 1);
    assert!(conds[0].last_update_time.is_some());
    // Signing: the updater holds `update` of /status but no `sign`.
    let e = api_error(
        fake.acting_as(updater, "test")
            .update_subresource::<CertificateSigningRequest>(None, "c1", "status", |c| {
                c.status.get_or_insert_default().certificate = Some(ByteString(certificate()));
            })
            .expect_err("refused"),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "certificatesigningrequests.certificates.k8s.io \"c1\" is forbidden: user not permitted to sign requests with signerName \"kubernetes.io/kube-apiserver-client-kubelet\""
    );
    let signed = cc.update_subresource::<CertificateSigningRequest>(None, "c1", "status", |c| {
        c.status.get_or_insert_default().certificate = Some(ByteString(certificate()));
    })?;
    assert!(signed.status.and_then(|s| s.certificate).is_some());
    // Set once.
    let e = api_error(
        cc.update_subresource::<CertificateSigningRequest>(None, "c1", "status", |c| {
            c.status.get_or_insert_default().certificate = Some(ByteString(certificate()));
        })
        .expect_err("refused"),
    );
    assert!(
        e.message
            .contains("updates may not modify existing certificate content"),
        "{}",
        e.message
    );
    // The requester reads its certificate (system:node-bootstrapper's `get`).
    let got = fake
        .acting_as(bootstrap(), "kubelet")
        .get::<CertificateSigningRequest>(None, "c1")?
        .expect("the request");
    assert!(got.status.and_then(|s| s.certificate).is_some());
    Ok(())
}

#[tokio::test]
async fn a_subject_access_review_answers_for_the_requester() -> R {
    let fake = FakeKube::start().await?;
    let cc = fake.acting_as(controller(), "kube-controller-manager");
    let nodeclient = |fake: &FakeKube| {
        fake.acting_as(controller(), "kube-controller-manager")
            .review_access(
                &bootstrap(),
                "create",
                "certificates.k8s.io",
                "certificatesigningrequests/nodeclient",
                "",
                "",
            )
    };
    assert!(!nodeclient(&fake)?);
    fake.insert(&binding(
        "kubeadm:node-autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:bootstrappers:kubeadm:default-node-token",
    ))?;
    assert!(nodeclient(&fake)?);
    assert!(!cc.review_access(
        &bootstrap(),
        "create",
        "certificates.k8s.io",
        "certificatesigningrequests/selfnodeclient",
        "",
        "",
    )?);
    // Asking needs `create` of subjectaccessreviews.
    let e = api_error(
        fake.acting_as(bootstrap(), "kubelet")
            .review_access(&bootstrap(), "get", "", "nodes", "", "n1")
            .expect_err("refused"),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message
            .contains("cannot create resource \"subjectaccessreviews\""),
        "{}",
        e.message
    );
    Ok(())
}

fn owned_by(name: &str, owner: &Secret) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Secret".into(),
                name: owner.metadata.name.clone().unwrap_or_default(),
                uid: owner.metadata.uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn secret(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

#[tokio::test]
async fn the_garbage_collector_cascades_as_its_service_account() -> R {
    let fake = FakeKube::start().await?;
    let owner = fake.insert(&secret("o1"))?;
    fake.insert(&owned_by("d1", &owner))?;
    fake.delete::<Secret>(Some("default"), "o1")?;
    assert!(fake.get::<ConfigMap>(Some("default"), "d1")?.is_none());
    // Without its binding the collector may delete nothing: the dependent stays.
    fake.delete::<ClusterRoleBinding>(None, "system:controller:generic-garbage-collector")?;
    let owner = fake.insert(&secret("o2"))?;
    fake.insert(&owned_by("d2", &owner))?;
    fake.delete::<Secret>(Some("default"), "o2")?;
    assert!(fake.get::<ConfigMap>(Some("default"), "d2")?.is_some());
    Ok(())
}

/// A controller's finalizer reads what its object owns while it cleans up: the collector deletes
/// the dependents only once the owner has gone, never when it is merely marked.
#[tokio::test]
async fn dependents_stay_while_the_owners_finalizer_holds_it() -> R {
    let fake = FakeKube::start().await?;
    let mut held = secret("o3");
    held.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let owner = fake.insert(&held)?;
    fake.insert(&owned_by("d3", &owner))?;
    fake.delete::<Secret>(Some("default"), "o3")?;
    let marked = fake
        .get::<Secret>(Some("default"), "o3")?
        .expect("kept by its finalizer");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(fake.get::<ConfigMap>(Some("default"), "d3")?.is_some());
    let client = fake.client()?;
    Api::<Secret>::namespaced(client, "default")
        .patch(
            "o3",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    assert!(fake.get::<Secret>(Some("default"), "o3")?.is_none());
    assert!(fake.get::<ConfigMap>(Some("default"), "d3")?.is_none());
    Ok(())
}
