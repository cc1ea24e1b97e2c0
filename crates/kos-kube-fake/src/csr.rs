//! CertificateSigningRequests (`certificates.k8s.io/v1`) as kube-apiserver serves them, read from
//! its registry strategy (pkg/registry/certificates/certificates/strategy.go), its validation
//! (pkg/apis/certificates/validation/validation.go) and the three admission plugins on them
//! (plugin/pkg/admission/certificates/{approval,signing,subjectrestriction}):
//! - a create records who asks (`spec.username`, `uid`, `groups`, `extra`) and clears `status`;
//!   the main resource then changes metadata only, `/status` the certificate and the conditions
//!   other than Approved and Denied, `/approval` the conditions only;
//! - the request must be a PEM `CERTIFICATE REQUEST` whose signature verifies; `usages` are
//!   required, known and unique; `signerName` is `<domain>/<path>` (never
//!   `kubernetes.io/legacy-unknown` in v1); `expirationSeconds` at least 600; Approved, Denied and
//!   Failed conditions only `True`, Approved and Denied exclusive, no condition type twice, none of
//!   the three removed; a certificate is PEM `CERTIFICATE` blocks, set once;
//! - approving needs `approve` on `signers` (certificates.k8s.io) named the CSR's signer or
//!   `<domain>/*`, issuing a certificate `sign` likewise; the `kubernetes.io/kube-apiserver-client`
//!   signer never takes a request in `system:masters`.
//!
//! Simplified: `signerName`'s domain and path are checked for shape (a dotted DNS subdomain, a
//! non-empty path, 571 characters in all), not every rule of `ValidateSignerName`; condition
//! timestamps are set when missing, not moved on every change.

use serde_json::{Value, json};

use crate::authz::{RequestInfo, User, authorize};
use crate::error::{ApiError, ApiResult, Cause};
use crate::resources::ResourceType;
use crate::store::{Scope, Store};

const GROUP: &str = "certificates.k8s.io";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const LEGACY_SIGNER: &str = "kubernetes.io/legacy-unknown";
const GUARDED: [&str; 3] = ["Approved", "Denied", "Failed"];

/// Every usage the API knows (`allValidUsages`).
const USAGES: [&str; 23] = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

pub(crate) fn is_csr(rt: &ResourceType) -> bool {
    rt.group == GROUP && rt.kind == "CertificateSigningRequest"
}

fn cause(reason: &'static str, field: &str, message: String) -> Cause {
    Cause {
        reason,
        field: field.to_owned(),
        message,
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn conditions(v: &Value) -> Vec<Value> {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn of_type(v: &Value, t: &str) -> Vec<Value> {
    conditions(v)
        .into_iter()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some(t))
        .collect()
}

/// The strategies' `PrepareForCreate` and `PrepareForUpdate` for the request's path.
pub(crate) fn prepare(obj: &mut Value, old: Option<&Value>, scope: Scope, user: Option<&User>) {
    let Some(old) = old else {
        // Who asks is the server's to say; a test insert (no user) keeps what it brings.
        if let Some(u) = user {
            obj["status"] = json!({});
            let spec = &mut obj["spec"];
            if !spec.is_object() {
                *spec = json!({});
            }
            spec["username"] = json!(u.name);
            spec["groups"] = json!(u.groups);
            if let Some(m) = spec.as_object_mut() {
                m.remove("uid");
                m.remove("extra");
            }
        }
        return;
    };
    if scope == Scope::Everything {
        return;
    }
    obj["spec"] = old.get("spec").cloned().unwrap_or(Value::Null);
    match scope {
        Scope::Main => obj["status"] = old.get("status").cloned().unwrap_or_else(|| json!({})),
        Scope::Status => {
            // `preserveConditionInstances`: Approved and Denied are the approval path's; as many
            // as before are put back as they were, more or fewer fail validation.
            let mut conds = conditions(obj);
            for t in ["Approved", "Denied"] {
                let before = of_type(old, t);
                let at: Vec<usize> = conds
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| str_at(c, "/type") == t)
                    .map(|(i, _)| i)
                    .collect();
                if at.len() == before.len() {
                    for (i, c) in at.into_iter().zip(before) {
                        conds[i] = c;
                    }
                }
            }
            set_conditions(obj, conds);
        }
        Scope::Approval => {
            let conds = conditions(obj);
            obj["status"] = old.get("status").cloned().unwrap_or_else(|| json!({}));
            set_conditions(obj, conds);
        }
        Scope::Everything => {}
    }
    stamp_conditions(obj);
}

fn set_conditions(obj: &mut Value, conds: Vec<Value>) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    if conds.is_empty() {
        if let Some(m) = obj["status"].as_object_mut() {
            m.remove("conditions");
        }
    } else {
        obj["status"]["conditions"] = Value::Array(conds);
    }
}

/// `populateConditionTimestamps`: a condition without its times gets now.
fn stamp_conditions(obj: &mut Value) {
    let now = crate::store::now();
    if let Some(Value::Array(cs)) = obj.pointer_mut("/status/conditions") {
        for c in cs {
            for f in ["lastUpdateTime", "lastTransitionTime"] {
                if c.get(f).is_none_or(Value::is_null) {
                    c[f] = json!(now);
                }
            }
        }
    }
}

/// The PEM of `spec.request` (base64 in JSON).
pub fn request_pem(obj: &Value) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(str_at(obj, "/spec/request"))
        .ok()
}

/// `ParseCSR` and `CheckSignature`: the subject's organisations, or why not.
pub fn parse_request(pem: &[u8]) -> Result<Vec<String>, String> {
    use x509_parser::prelude::FromDer as _;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_owned())?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| format!("asn1: {e}"))?;
    req.verify_signature()
        .map_err(|e| format!("x509: signature verification failure: {e}"))?;
    Ok(req
        .certification_request_info
        .subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_owned))
        .collect())
}

/// `validateCertificate`: PEM `CERTIFICATE` blocks, each a certificate (PEM headers are not
/// looked for).
fn check_certificate(pem: &[u8]) -> Result<(), String> {
    let mut blocks = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let Ok(block) = block else { break };
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                block.label
            ));
        }
        block.parse_x509().map_err(|e| format!("x509: {e}"))?;
        blocks += 1;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

fn certificate(obj: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(str_at(obj, "/status/certificate"))
        .unwrap_or_default()
}

/// `ValidateSignerName`, for shape.
fn signer_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Required value".into());
    }
    if name.len() > 571 {
        return Some(format!(
            "Too long: may not be more than 571 bytes (got {})",
            name.len()
        ));
    }
    let shape = "must be a fully qualified domain and path of the form 'example.com/signer-name'";
    let Some((domain, path)) = name.split_once('/') else {
        return Some(format!("Invalid value: {name:?}: {shape}"));
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !domain.contains('.') || domain.len() > 253 || !domain.split('.').all(label_ok) {
        return Some(format!(
            "Invalid value: {domain:?}: should be a domain with at least two segments separated by dots"
        ));
    }
    if path.is_empty() {
        return Some(format!("Invalid value: {name:?}: {shape}"));
    }
    None
}

fn has_unknown(u: &[&str]) -> bool {
    u.iter().any(|x| !USAGES.contains(x))
}

fn has_duplicates(u: &[&str]) -> bool {
    u.iter().enumerate().any(|(i, x)| u[..i].contains(x))
}

/// Validation on create (`old` `None`) or on an update through `scope`.
pub(crate) fn validate(obj: &Value, old: Option<&Value>, scope: Scope) -> Vec<Cause> {
    let mut out = Vec::new();
    match request_pem(obj).ok_or_else(|| "illegal base64 data".to_owned()) {
        Ok(pem) => {
            if let Err(e) = parse_request(&pem) {
                out.push(cause(
                    "FieldValueInvalid",
                    "spec.request",
                    format!("Invalid value: \"<request>\": {e}"),
                ));
            }
        }
        Err(e) => out.push(cause(
            "FieldValueInvalid",
            "spec.request",
            format!("Invalid value: \"<request>\": {e}"),
        )),
    }
    let usages: Vec<&str> = obj
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let old_usages = old
        .and_then(|o| o.pointer("/spec/usages"))
        .and_then(Value::as_array);
    // What an old object already has is tolerated on its updates.
    let tolerate = |bad: fn(&[&str]) -> bool| {
        old_usages.is_some_and(|u| bad(&u.iter().filter_map(Value::as_str).collect::<Vec<_>>()))
    };
    if usages.is_empty() {
        out.push(cause(
            "FieldValueRequired",
            "spec.usages",
            "Required value".into(),
        ));
    }
    if !tolerate(has_unknown) {
        for (i, u) in usages.iter().enumerate() {
            if !USAGES.contains(u) {
                let mut known = USAGES.to_vec();
                known.sort_unstable();
                let list: Vec<String> = known.iter().map(|k| format!("{k:?}")).collect();
                out.push(cause(
                    "FieldValueNotSupported",
                    &format!("spec.usages[{i}]"),
                    format!(
                        "Unsupported value: {u:?}: supported values: {}",
                        list.join(", ")
                    ),
                ));
            }
        }
    }
    if !tolerate(has_duplicates) {
        for (i, u) in usages.iter().enumerate() {
            if usages[..i].contains(u) {
                out.push(cause(
                    "FieldValueDuplicate",
                    &format!("spec.usages[{i}]"),
                    format!("Duplicate value: {u:?}"),
                ));
            }
        }
    }
    let signer = str_at(obj, "/spec/signerName");
    let legacy_before = old.is_some_and(|o| str_at(o, "/spec/signerName") == LEGACY_SIGNER);
    if signer == LEGACY_SIGNER && !legacy_before {
        out.push(cause(
            "FieldValueInvalid",
            "spec.signerName",
            format!(
                "Invalid value: {signer:?}: the legacy signerName is not allowed via this API version"
            ),
        ));
    } else if signer != LEGACY_SIGNER
        && let Some(why) = signer_name_problem(signer)
    {
        let reason = if signer.is_empty() {
            "FieldValueRequired"
        } else {
            "FieldValueInvalid"
        };
        out.push(cause(reason, "spec.signerName", why));
    }
    if let Some(s) = obj
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        && s < 600
    {
        out.push(cause(
            "FieldValueInvalid",
            "spec.expirationSeconds",
            format!(
                "Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"
            ),
        ));
    }
    out.extend(validate_conditions(obj, old));
    let cert = certificate(obj);
    let unchanged = old.is_some_and(|o| certificate(o) == cert);
    if !cert.is_empty()
        && !unchanged
        && let Err(e) = check_certificate(&cert)
    {
        out.push(cause(
            "FieldValueInvalid",
            "status.certificate",
            format!("Invalid value: \"<certificate data>\": {e}"),
        ));
    }
    if let Some(old) = old {
        out.extend(validate_update(obj, old, scope));
    }
    out
}

fn validate_conditions(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    let old_both =
        old.is_some_and(|o| !of_type(o, "Approved").is_empty() && !of_type(o, "Denied").is_empty());
    let mut seen: Vec<String> = Vec::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions(obj).iter().enumerate() {
        let t = str_at(c, "/type");
        let s = str_at(c, "/status");
        let at = format!("status.conditions[{i}]");
        if t.is_empty() {
            out.push(cause(
                "FieldValueRequired",
                &format!("{at}.type"),
                "Required value".into(),
            ));
        }
        if s.is_empty() {
            out.push(cause(
                "FieldValueRequired",
                &format!("{at}.status"),
                "Required value".into(),
            ));
        } else if GUARDED.contains(&t) && s != "True" {
            out.push(cause(
                "FieldValueNotSupported",
                &format!("{at}.status"),
                format!("Unsupported value: {s:?}: supported values: \"True\""),
            ));
        } else if !matches!(s, "True" | "False" | "Unknown") {
            out.push(cause(
                "FieldValueNotSupported",
                &format!("{at}.status"),
                format!(
                    "Unsupported value: {s:?}: supported values: \"False\", \"True\", \"Unknown\""
                ),
            ));
        }
        match t {
            "Approved" => approved = true,
            "Denied" => denied = true,
            _ => {}
        }
        if approved && denied && matches!(t, "Approved" | "Denied") && !old_both {
            out.push(cause(
                "FieldValueInvalid",
                "status.conditions",
                format!(
                    "Invalid value: {t:?}: Approved and Denied conditions are mutually exclusive"
                ),
            ));
        }
        if seen.iter().any(|x| x == t) {
            out.push(cause(
                "FieldValueDuplicate",
                &format!("{at}.type"),
                format!("Duplicate value: {t:?}"),
            ));
        }
        seen.push(t.to_owned());
    }
    out
}

/// `validateCertificateSigningRequestUpdate`.
fn validate_update(new: &Value, old: &Value, scope: Scope) -> Vec<Cause> {
    let forbidden = |m: String| {
        cause(
            "FieldValueForbidden",
            "status.conditions",
            format!("Forbidden: {m}"),
        )
    };
    let mut out = Vec::new();
    for t in GUARDED {
        if of_type(new, t).len() < of_type(old, t).len() {
            out.push(forbidden(format!(
                "updates may not remove a condition of type {t:?}"
            )));
        }
    }
    if scope != Scope::Approval {
        for t in ["Approved", "Denied"] {
            let (o, n) = (of_type(old, t), of_type(new, t));
            if n.len() > o.len() {
                out.push(forbidden(format!(
                    "updates may not add a condition of type {t:?}"
                )));
            } else if n.len() == o.len() && n != o {
                out.push(forbidden(format!(
                    "updates may not modify a condition of type {t:?}"
                )));
            }
        }
    }
    let (nc, oc) = (certificate(new), certificate(old));
    if nc != oc {
        let why = if scope != Scope::Status {
            Some("updates may not set certificate content")
        } else if !oc.is_empty() {
            Some("updates may not modify existing certificate content")
        } else {
            None
        };
        if let Some(why) = why {
            out.push(cause(
                "FieldValueForbidden",
                "status.certificate",
                format!("Forbidden: {why}"),
            ));
        }
    }
    out
}

/// `IsAuthorizedForSignerName`: `verb` on the signer, or on `<domain>/*`.
fn may_for_signer(store: &Store, user: &User, verb: &str, signer: &str) -> bool {
    let ask = |name: &str| {
        let info = RequestInfo {
            resource_request: true,
            verb: verb.to_owned(),
            api_group: GROUP.to_owned(),
            resource: "signers".to_owned(),
            name: name.to_owned(),
            ..RequestInfo::default()
        };
        authorize(store, user, &info).is_ok()
    };
    ask(signer)
        || signer
            .split_once('/')
            .is_some_and(|(domain, _)| ask(&format!("{domain}/*")))
}

/// The validating admission plugins CertificateApproval, CertificateSigning and
/// CertificateSubjectRestriction.
pub(crate) fn admit(
    store: &Store,
    rt: &ResourceType,
    user: &User,
    scope: Scope,
    new: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    let name = str_at(new, "/metadata/name");
    let forbid = |why: String| {
        ApiError::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", rt.qualified()),
        )
        .about(rt, &rt.plural, name)
    };
    match old {
        None => {
            if str_at(new, "/spec/signerName") == CLIENT_SIGNER
                && let Some(pem) = request_pem(new)
                && let Ok(orgs) = parse_request(&pem)
                && orgs.iter().any(|o| o == crate::authz::MASTERS)
            {
                return Err(forbid(format!(
                    "use of {CLIENT_SIGNER} signer with {} group is not allowed",
                    crate::authz::MASTERS
                )));
            }
        }
        Some(old) => {
            // Both look at the stored object's signer (a request cannot change it).
            let signer = str_at(old, "/spec/signerName");
            if scope == Scope::Approval && !may_for_signer(store, user, "approve", signer) {
                return Err(forbid(format!(
                    "user not permitted to approve requests with signerName {signer:?}"
                )));
            }
            if scope == Scope::Status
                && certificate(new) != certificate(old)
                && !may_for_signer(store, user, "sign", signer)
            {
                return Err(forbid(format!(
                    "user not permitted to sign requests with signerName {signer:?}"
                )));
            }
        }
    }
    Ok(())
}
