//! The kubelet's TLS bootstrap on a joining node, as its three parties do it on a real cluster,
//! each with its own credentials, so that RBAC decides as it would:
//! - the kubelet, as the bootstrap token's user (`system:bootstrap:<id>`, in the token's
//!   `auth-extra-groups` and `system:bootstrappers`), creates a `certificates.k8s.io/v1`
//!   CertificateSigningRequest for `system:node:<name>` in `system:nodes` with the signer
//!   `kubernetes.io/kube-apiserver-client-kubelet` (kubeadm's `kubeadm:kubelet-bootstrap` binding
//!   to `system:node-bootstrapper` lets it);
//! - kube-controller-manager's csrapproving controller, as `kube-system/certificate-controller`
//!   (pkg/controller/certificates/approver/sarapprove.go), recognises a kubelet client request
//!   (`ValidateKubeletClientCSR`: organisation exactly `system:nodes`, a `system:node:` common
//!   name, no SANs, the usages `digital signature` and `client auth`, and `key encipherment` or
//!   not) and approves it if a SubjectAccessReview says its requester may create
//!   `certificatesigningrequests/selfnodeclient` (its own name renewing) or `/nodeclient`
//!   (kubeadm's `kubeadm:node-autoapprove-bootstrap` binding);
//! - the csrsigning controller, as the same ServiceAccount
//!   (pkg/controller/certificates/signer/signer.go), signs an approved kubelet client request with
//!   the cluster CA (a control plane's `ca.crt` and `ca.key`), or marks it Failed when it is not
//!   one;
//! - the kubelet reads its certificate back.
//!
//! The controllers run continuously while a control plane of the cluster runs
//! ([`run_controllers`], from the guest's tick): any request, a join's or one a user made through
//! the API, is approved if its requester may autoapprove and signed once approved, by them or by a
//! user through `/approval`. A joining kubelet waits for its certificate within kubeadm's join
//! step, so the controllers' pass over its request runs there, while it waits. A request left
//! pending is kubeadm's TLS-bootstrap timeout.
//!
//! Not modelled: the signers other than `kubernetes.io/kube-apiserver-client-kubelet`
//! (`kube-apiserver-client`, `kubelet-serving`, `legacy-unknown`), csrcleaner.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
};
use kos_kube_fake::{Acting, FakeError, FakeKube, User};
use kube::api::ObjectMeta;
use time::OffsetDateTime;

use crate::error::GuestError;

pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const GROUP: &str = "certificates.k8s.io";
const NODES: &str = "system:nodes";
const NODE_PREFIX: &str = "system:node:";

/// The kubelet's new key and its request (PEM): ECDSA P-256, the kubelet's usages for it.
pub fn kubelet_request(node: &str) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{NODE_PREFIX}{node}"));
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, NODES);
    let csr = p
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| e.to_string())?;
    Ok((key.serialize_pem(), csr))
}

/// What a request asks for, as the controllers parse it.
struct Request {
    common_name: String,
    organizations: Vec<String>,
    has_sans: bool,
}

fn parse(pem: &[u8]) -> Result<Request, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| e.to_string())?;
    use x509_parser::prelude::FromDer as _;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| e.to_string())?;
    let subject = &req.certification_request_info.subject;
    let common_name = subject
        .iter_common_name()
        .find_map(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_owned();
    let organizations = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_owned))
        .collect();
    let has_sans = req.requested_extensions().into_iter().flatten().any(|e| {
        matches!(e, x509_parser::extensions::ParsedExtension::SubjectAlternativeName(s) if !s.general_names.is_empty())
    });
    Ok(Request {
        common_name,
        organizations,
        has_sans,
    })
}

/// `ValidateKubeletClientCSR` (pkg/apis/certificates/helpers.go).
fn kubelet_client_problem(r: &Request, usages: &[String]) -> Option<String> {
    if r.organizations != [NODES] {
        return Some("subject organization is not system:nodes".into());
    }
    if r.has_sans {
        return Some("DNS, email, IP or URI subjectAltNames are not allowed".into());
    }
    if !r.common_name.starts_with(NODE_PREFIX) {
        return Some("subject common name does not begin with system:node:".into());
    }
    let mut got: Vec<&str> = usages.iter().map(String::as_str).collect();
    got.sort_unstable();
    got.dedup();
    let rsa = ["client auth", "digital signature", "key encipherment"];
    let no_rsa = ["client auth", "digital signature"];
    if got != rsa && got != no_rsa {
        return Some(format!(
            "usages did not match [{}] or [{}]",
            rsa.join(" "),
            no_rsa.join(" ")
        ));
    }
    None
}

fn condition(csr: &CertificateSigningRequest, t: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
}

fn issued(csr: &CertificateSigningRequest) -> Option<&ByteString> {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .filter(|c| !c.0.is_empty())
}

fn certificate_controller(kube: &FakeKube) -> Acting<'_> {
    crate::cluster::controller(kube, "certificate-controller")
}

fn requester(csr: &CertificateSigningRequest) -> User {
    User::authenticated(
        csr.spec.username.clone().unwrap_or_default(),
        csr.spec.groups.clone().unwrap_or_default(),
    )
}

/// csrapproving's pass over one request: `None` when it approved it (or had nothing to do), else
/// why it left it pending.
fn approve(kube: &FakeKube, name: &str) -> Result<Option<String>, GuestError> {
    let cc = certificate_controller(kube);
    let csr = match cc.get::<CertificateSigningRequest>(None, name) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(Some(format!("CertificateSigningRequest {name:?} is gone"))),
        Err(FakeError::Api(e)) => {
            return Ok(Some(format!("the certificate controller: {}", e.message)));
        }
        Err(e) => return Err(e.into()),
    };
    if issued(&csr).is_some() || condition(&csr, "Approved") || condition(&csr, "Denied") {
        return Ok(None);
    }
    let Ok(req) = parse(&csr.spec.request.0) else {
        return Ok(Some(format!("unable to parse csr {name:?}")));
    };
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let node_client = csr.spec.signer_name == KUBELET_CLIENT_SIGNER
        && kubelet_client_problem(&req, &usages).is_none();
    let self_node_client =
        node_client && csr.spec.username.as_deref() == Some(req.common_name.as_str());
    let recognizers = [
        (
            self_node_client,
            "selfnodeclient",
            "Auto approving self kubelet client certificate after SubjectAccessReview.",
        ),
        (
            node_client,
            "nodeclient",
            "Auto approving kubelet client certificate after SubjectAccessReview.",
        ),
    ];
    let who = requester(&csr);
    let mut tried = Vec::new();
    for (recognised, sub, message) in recognizers {
        if !recognised {
            continue;
        }
        tried.push(sub);
        let allowed = match cc.review_access(
            &who,
            "create",
            GROUP,
            &format!("certificatesigningrequests/{sub}"),
            "",
            "",
        ) {
            Ok(a) => a,
            Err(FakeError::Api(e)) => {
                return Ok(Some(format!("the certificate controller: {}", e.message)));
            }
            Err(e) => return Err(e.into()),
        };
        if !allowed {
            continue;
        }
        let approved =
            cc.update_subresource::<CertificateSigningRequest>(None, name, "approval", |c| {
                c.status
                    .get_or_insert_default()
                    .conditions
                    .get_or_insert_default()
                    .push(CertificateSigningRequestCondition {
                        type_: "Approved".into(),
                        status: "True".into(),
                        reason: Some("AutoApproved".into()),
                        message: Some(message.into()),
                        ..CertificateSigningRequestCondition::default()
                    });
            });
        return match approved {
            Ok(_) => Ok(None),
            Err(FakeError::Api(e)) => {
                Ok(Some(format!("the certificate controller: {}", e.message)))
            }
            Err(e) => Err(e.into()),
        };
    }
    Ok(Some(if tried.is_empty() {
        format!("csr {name:?} is not a kubelet client request: nothing approves it")
    } else {
        format!(
            "recognized csr {name:?} as [{}] but subject access review was not approved",
            tried.join(" ")
        )
    }))
}

/// The cluster CA's certificate and key, as PEM.
pub struct Ca<'a> {
    pub cert: &'a str,
    pub key: &'a str,
}

/// csrsigning's pass over one request: `None` when it signed it (or had nothing to do), else why
/// not.
fn sign(
    kube: &FakeKube,
    name: &str,
    ca: &Ca<'_>,
    now: OffsetDateTime,
) -> Result<Option<String>, GuestError> {
    let cc = certificate_controller(kube);
    let csr = match cc.get::<CertificateSigningRequest>(None, name) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(Some(format!("CertificateSigningRequest {name:?} is gone"))),
        Err(FakeError::Api(e)) => {
            return Ok(Some(format!("the certificate controller: {}", e.message)));
        }
        Err(e) => return Err(e.into()),
    };
    if issued(&csr).is_some()
        || !condition(&csr, "Approved")
        || condition(&csr, "Denied")
        || condition(&csr, "Failed")
        || csr.spec.signer_name != KUBELET_CLIENT_SIGNER
    {
        return Ok(None);
    }
    let pem = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let problem = match parse(csr.spec.request.0.as_slice()) {
        Ok(r) => kubelet_client_problem(&r, &usages),
        Err(e) => Some(e),
    };
    let update =
        |change: Box<dyn FnOnce(&mut CertificateSigningRequest)>| match cc
            .update_subresource::<CertificateSigningRequest>(None, name, "status", change)
        {
            Ok(_) => Ok(None),
            Err(FakeError::Api(e)) => {
                Ok(Some(format!("the certificate controller: {}", e.message)))
            }
            Err(e) => Err(GuestError::from(e)),
        };
    if let Some(why) = problem {
        let why2 = why.clone();
        update(Box::new(move |c: &mut CertificateSigningRequest| {
            c.status
                .get_or_insert_default()
                .conditions
                .get_or_insert_default()
                .push(CertificateSigningRequestCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some("SignerValidationFailure".into()),
                    message: Some(why2),
                    ..CertificateSigningRequestCondition::default()
                });
        }))?;
        return Ok(Some(why));
    }
    let cert = match issue(&pem, &usages, csr.spec.expiration_seconds, ca, now) {
        Ok(c) => c,
        Err(e) => return Ok(Some(format!("the certificate controller cannot sign: {e}"))),
    };
    update(Box::new(move |c: &mut CertificateSigningRequest| {
        c.status.get_or_insert_default().certificate = Some(ByteString(cert.into_bytes()));
    }))
}

/// The certificate the kubelet client signer issues: the request's subject and key, client
/// auth, backdated five minutes, for `expirationSeconds` capped at kube-controller-manager's
/// default `--cluster-signing-duration` (a year).
fn issue(
    request_pem: &str,
    usages: &[String],
    expiration: Option<i32>,
    ca: &Ca<'_>,
    now: OffsetDateTime,
) -> Result<String, String> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(
        ca.cert,
        rcgen::KeyPair::from_pem(ca.key).map_err(|e| format!("CA key: {e}"))?,
    )
    .map_err(|e| format!("CA certificate: {e}"))?;
    let mut req =
        rcgen::CertificateSigningRequestParams::from_pem(request_pem).map_err(|e| e.to_string())?;
    let year = time::Duration::days(365);
    let lifetime = expiration
        .map(|s| time::Duration::seconds(i64::from(s)).min(year))
        .unwrap_or(year);
    req.params.not_before = now - time::Duration::minutes(5);
    req.params.not_after = now + lifetime;
    req.params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    if usages.iter().any(|u| u == "key encipherment") {
        req.params
            .key_usages
            .push(rcgen::KeyUsagePurpose::KeyEncipherment);
    }
    req.params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    req.params.is_ca = rcgen::IsCa::ExplicitNoCa;
    Ok(req.signed_by(&issuer).map_err(|e| e.to_string())?.pem())
}

/// A CA for a cluster whose own CA's key the guest never saw (kubeadm generated it): what
/// kube-controller-manager signs with is then this (certificate, key) in PEM.
pub fn throwaway_ca() -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// kube-controller-manager's csrapproving and csrsigning controllers, which run while a control
/// plane of the cluster does: every request they have not seen in its current state (their
/// watch's events, `seen` their memory of them, by name and resourceVersion) is approved if
/// SubjectAccessReview lets its requester autoapprove, and signed with `ca` (the CA a running
/// control plane holds; `None`: no signer runs) once approved, however it was approved: by them
/// or by a user through `/approval` (`kubectl certificate approve`). A request neither approves is
/// left pending; a refusal by the API server is logged, and the request is tried again when it
/// changes.
pub fn run_controllers(
    kube: &FakeKube,
    seen: &std::sync::Mutex<std::collections::BTreeMap<String, String>>,
    ca: Option<&Ca<'_>>,
    now: OffsetDateTime,
) -> Result<(), GuestError> {
    let cc = certificate_controller(kube);
    let csrs = match cc.list::<CertificateSigningRequest>(None, "") {
        Ok(l) => l,
        Err(FakeError::Api(e)) => {
            tracing::warn!("certificate-controller: {}", e.message);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let mut seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.retain(|name, _| csrs.iter().any(|c| c.metadata.name.as_ref() == Some(name)));
    for csr in &csrs {
        let (Some(name), Some(rv)) = (&csr.metadata.name, &csr.metadata.resource_version) else {
            continue;
        };
        if seen.get(name) == Some(rv) {
            continue;
        }
        seen.insert(name.clone(), rv.clone());
        if issued(csr).is_some() || condition(csr, "Denied") || condition(csr, "Failed") {
            continue;
        }
        if !condition(csr, "Approved")
            && let Some(why) = approve(kube, name)?
        {
            tracing::debug!(csr = %name, "csrapproving: {why}");
        }
        if let Some(ca) = ca
            && let Some(why) = sign(kube, name, ca, now)?
        {
            tracing::debug!(csr = %name, "csrsigning: {why}");
        }
    }
    Ok(())
}

/// The kubelet's client certificate and key (PEM), or why it never came (kubeadm then times out).
pub type Bootstrapped = Result<(String, String), String>;

/// The whole bootstrap of `node`'s kubelet as `bootstrap` (the token's user); `ca` signs.
pub fn kubelet_bootstrap(
    kube: &FakeKube,
    bootstrap: User,
    node: &str,
    ca: &Ca<'_>,
    now: OffsetDateTime,
) -> Result<Bootstrapped, GuestError> {
    let (key, request) = match kubelet_request(node) {
        Ok(r) => r,
        Err(e) => return Ok(Err(format!("the kubelet cannot make its key: {e}"))),
    };
    let kubelet = kube.acting_as(bootstrap, "kubelet");
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let made = match kubelet.create(&csr) {
        Ok(c) => c,
        Err(FakeError::Api(e)) => {
            return Ok(Err(format!(
                "the kubelet's certificate signing request was refused: {}",
                e.message
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let name = made.metadata.name.unwrap_or_default();
    let pending = |why: String| -> Result<Bootstrapped, GuestError> {
        Ok(Err(format!(
            "CertificateSigningRequest {name:?} was never issued: {why}"
        )))
    };
    // kube-controller-manager's controllers reach the request while the kubelet waits.
    if let Some(why) = approve(kube, &name)? {
        return pending(why);
    }
    if let Some(why) = sign(kube, &name, ca, now)? {
        return pending(why);
    }
    let got = match kubelet.get::<CertificateSigningRequest>(None, &name) {
        Ok(c) => c,
        Err(FakeError::Api(e)) => return pending(e.message),
        Err(e) => return Err(e.into()),
    };
    match got.as_ref().and_then(issued) {
        Some(cert) => Ok(Ok((String::from_utf8_lossy(&cert.0).into_owned(), key))),
        None => pending("it has no certificate".into()),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // The test's own set-up.
mod tests {
    use super::*;

    fn fake() -> FakeKube {
        FakeKube::start_sync(kos_kube_fake::Config::default()).expect("fake")
    }

    fn ca() -> (String, String) {
        throwaway_ca().expect("ca")
    }

    fn token_user() -> User {
        User::authenticated(
            "system:bootstrap:abcdef",
            [
                "system:bootstrappers".to_owned(),
                crate::kubeadm::rbac::NODE_TOKEN_GROUP.to_owned(),
            ],
        )
    }

    fn kubeadm_rbac(kube: &FakeKube) {
        for b in crate::kubeadm::rbac::init().cluster_role_bindings {
            kube.insert(&b).expect("binding");
        }
    }

    #[tokio::test]
    async fn a_token_of_the_node_group_gets_a_certificate_for_its_node() {
        let kube = fake();
        kubeadm_rbac(&kube);
        let (cert, key) = ca();
        let ca = Ca {
            cert: &cert,
            key: &key,
        };
        let (pem, _) =
            kubelet_bootstrap(&kube, token_user(), "w-0", &ca, OffsetDateTime::UNIX_EPOCH)
                .expect("bootstrap")
                .expect("issued");
        let (_, doc) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
        let c = doc.parse_x509().expect("certificate");
        assert_eq!(
            c.subject().to_string(),
            "CN=system:node:w-0, O=system:nodes"
        );
        // Each party as itself.
        let users: Vec<(String, String, u16)> = kube
            .requests()
            .into_iter()
            .map(|r| {
                (
                    r.user.unwrap_or_default(),
                    format!("{} {}", r.method, r.path),
                    r.status,
                )
            })
            .collect();
        let cc = "system:serviceaccount:kube-system:certificate-controller";
        assert!(
            users.iter().any(|(u, p, s)| u == "system:bootstrap:abcdef"
                && p == "POST /apis/certificates.k8s.io/v1/certificatesigningrequests"
                && *s == 201),
            "{users:?}"
        );
        assert!(
            users
                .iter()
                .any(|(u, p, _)| u == cc && p.ends_with("/approval")),
            "{users:?}"
        );
        assert!(
            users
                .iter()
                .any(|(u, p, _)| u == cc && p.ends_with("/status")),
            "{users:?}"
        );
        assert!(
            users
                .iter()
                .any(|(u, p, _)| u == cc && p.ends_with("/subjectaccessreviews")),
            "{users:?}"
        );
    }

    /// A worker's TLS bootstrap on a cluster without kubeadm's binding `binding`: the fake, and
    /// why the bootstrap was refused.
    fn refused_without(binding: &str) -> (FakeKube, String) {
        let kube = fake();
        kubeadm_rbac(&kube);
        kube.delete::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(None, binding)
            .expect("deleted");
        let (cert, key) = ca();
        let ca = Ca {
            cert: &cert,
            key: &key,
        };
        let why = kubelet_bootstrap(&kube, token_user(), "w-0", &ca, OffsetDateTime::UNIX_EPOCH)
            .expect("bootstrap")
            .expect_err("refused");
        (kube, why)
    }

    #[tokio::test]
    async fn without_the_autoapprove_binding_the_request_stays_pending() {
        let (kube, why) = refused_without("kubeadm:node-autoapprove-bootstrap");
        assert!(
            why.ends_with("as [nodeclient] but subject access review was not approved"),
            "{why}"
        );
        let csrs = kube.list::<CertificateSigningRequest>(None).expect("list");
        assert_eq!(csrs.len(), 1);
        assert!(
            csrs[0]
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none()
        );
    }

    #[tokio::test]
    async fn without_its_binding_the_certificate_controller_can_do_nothing() {
        let (_, why) = refused_without("system:controller:certificate-controller");
        assert!(
            why.contains("User \"system:serviceaccount:kube-system:certificate-controller\" cannot get resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn without_kubeadms_bootstrap_binding_the_kubelet_may_not_ask() {
        let (_, why) = refused_without("kubeadm:kubelet-bootstrap");
        assert_eq!(
            why,
            "the kubelet's certificate signing request was refused: certificatesigningrequests.certificates.k8s.io is forbidden: User \"system:bootstrap:abcdef\" cannot create resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope"
        );
    }

    #[test]
    fn only_kubelet_client_requests_are_recognised() {
        let r = |cn: &str, o: &[&str]| Request {
            common_name: cn.into(),
            organizations: o.iter().map(|x| (*x).to_owned()).collect(),
            has_sans: false,
        };
        let u = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let ok = u(&["digital signature", "client auth"]);
        assert!(kubelet_client_problem(&r("system:node:a", &[NODES]), &ok).is_none());
        assert!(
            kubelet_client_problem(
                &r("system:node:a", &[NODES]),
                &u(&["client auth", "key encipherment", "digital signature"])
            )
            .is_none()
        );
        assert!(kubelet_client_problem(&r("system:node:a", &[NODES, "x"]), &ok).is_some());
        assert!(kubelet_client_problem(&r("admin", &[NODES]), &ok).is_some());
        assert!(
            kubelet_client_problem(
                &r("system:node:a", &[NODES]),
                &u(&["digital signature", "server auth"])
            )
            .is_some()
        );
    }
}
