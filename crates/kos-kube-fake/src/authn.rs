//! Bearer tokens as kube-apiserver's token authenticators read them: bootstrap tokens (`<id>.<secret>`,
//! checked against their Secret in `kube-system`) and ServiceAccount tokens (issued by the
//! TokenRequest API, `serviceaccounts/<name>/token`, or [`crate::FakeKube::service_account_token`]
//! for what the kubelet would mount into a pod).
//!
//! A ServiceAccount token here is an opaque random string the fake remembers, not a signed JWT:
//! clients never look inside one. It is as strict as the real authenticator where that shows: it
//! authenticates only while unexpired and while its ServiceAccount exists with the UID it was
//! issued for (a deleted and recreated ServiceAccount invalidates its tokens), as
//! `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
//! `system:serviceaccounts:<ns>`.

use std::collections::BTreeMap;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use rand::RngCore as _;
use serde_json::Value;

use crate::authz::User;
use crate::store::Store;

/// kube-apiserver's `--service-account-extend-token-expiration` (on by default): the tokens the
/// kubelet asks for pods are valid a year whatever they asked, so a long simulation keeps working
/// without the kubelet's refresh.
pub const EXTENDED_TOKEN_LIFETIME: chrono::Duration = chrono::Duration::days(365);

#[derive(Debug, Clone)]
pub(crate) struct IssuedToken {
    namespace: String,
    name: String,
    uid: String,
    expires: DateTime<Utc>,
}

/// The ServiceAccount tokens issued by one fake, and the static tokens of the users the
/// in-process components act as (kube-apiserver's `--token-auth-file` stands for them).
#[derive(Debug, Default)]
pub(crate) struct Tokens(BTreeMap<String, IssuedToken>, BTreeMap<String, User>);

fn random_token() -> String {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// Why a token could not be issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IssueError {
    /// The ServiceAccount does not exist.
    NoServiceAccount,
}

impl Tokens {
    /// A token for `ns/name`, valid `lifetime` from now.
    pub fn issue(
        &mut self,
        store: &Store,
        ns: &str,
        name: &str,
        lifetime: chrono::Duration,
    ) -> Result<(String, DateTime<Utc>), IssueError> {
        let uid = service_account_uid(store, ns, name).ok_or(IssueError::NoServiceAccount)?;
        let token = random_token();
        let expires = Utc::now() + lifetime;
        self.0.insert(
            token.clone(),
            IssuedToken {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                uid,
                expires,
            },
        );
        Ok((token, expires))
    }

    /// A static token of `user` (one per user: asking again gives the same).
    pub fn static_token(&mut self, user: &User) -> String {
        if let Some((t, _)) = self.1.iter().find(|(_, u)| *u == user) {
            return t.clone();
        }
        let token = random_token();
        self.1.insert(token.clone(), user.clone());
        token
    }

    /// The user of `token`: a static one, or a ServiceAccount's if it is one of ours and still
    /// valid.
    pub fn authenticate(&self, store: &Store, token: &str) -> Option<User> {
        if let Some(u) = self.1.get(token) {
            return Some(u.clone());
        }
        let t = self.0.get(token)?;
        if t.expires <= Utc::now() {
            return None;
        }
        let uid = service_account_uid(store, &t.namespace, &t.name)?;
        (uid == t.uid).then(|| User::service_account(&t.namespace, &t.name))
    }
}

fn service_account_uid(store: &Store, ns: &str, name: &str) -> Option<String> {
    let res = store.type_index("", "v1", "serviceaccounts")?;
    let sa = store.get(res, ns, name).ok()?;
    sa.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The user of a bootstrap token (`<id>.<secret>`) that authenticates: its Secret in
/// `kube-system` has the secret, the authentication usage and no passed expiration. The user is
/// `system:bootstrap:<id>` in `system:bootstrappers` and the Secret's `auth-extra-groups`.
pub(crate) fn bootstrap_token(store: &Store, token: &str) -> Option<User> {
    let (id, secret) = token.split_once('.')?;
    let res = store.type_index("", "v1", "secrets")?;
    let s = store
        .get(res, "kube-system", &format!("bootstrap-token-{id}"))
        .ok()?;
    let field = |k: &str| -> Option<String> {
        let b64 = s.pointer(&format!("/data/{k}")).and_then(Value::as_str)?;
        let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        String::from_utf8(raw).ok()
    };
    let unexpired = field("expiration")
        .is_none_or(|e| DateTime::parse_from_rfc3339(&e).is_ok_and(|t| t > Utc::now()));
    let valid = s.get("type").and_then(Value::as_str) == Some("bootstrap.kubernetes.io/token")
        && field("token-secret").as_deref() == Some(secret)
        && field("usage-bootstrap-authentication").as_deref() == Some("true")
        && unexpired;
    if !valid {
        return None;
    }
    let mut groups = vec!["system:bootstrappers".to_owned()];
    groups.extend(
        field("auth-extra-groups")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned),
    );
    Some(User::authenticated(
        format!("system:bootstrap:{id}"),
        groups,
    ))
}

/// The `Authorization: Bearer` token of a request.
pub(crate) fn bearer(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// The user a trusted client certificate names: the subject's common name, its organisations as
/// groups (kube-apiserver's x509 authenticator).
pub(crate) fn certificate_user(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())?
        .to_owned();
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_owned)
        .collect();
    Some(User::authenticated(cn, groups))
}
