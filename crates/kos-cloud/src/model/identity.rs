//! Keystone: the token's identity and application credentials (what the CCM and CSI authenticate with).

use std::fmt;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::common::nullable;

/// Who the session is, from its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    pub user_id: String,
    pub project_id: String,
    pub region: Option<String>,
    /// When the current token expires (the SDK re-authenticates after that).
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RoleRef {
    pub id: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApplicationCredential {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub project_id: Option<String>,
    pub expires_at: Option<String>,
    pub unrestricted: bool,
    #[serde(deserialize_with = "nullable")]
    pub roles: Vec<RoleRef>,
    /// What it may call; empty: anything its roles allow.
    #[serde(deserialize_with = "nullable")]
    pub access_rules: Vec<AccessRule>,
}

/// One Keystone access rule: a request the credential's tokens may make. Each service's
/// keystonemiddleware (`auth_token.BaseAuthProtocol.validate_allowed_request`) lets a request
/// through when a rule has its own `[keystone_authtoken] service_type`, the request's method, and a
/// `path` that matches the request's whole path as the service sees it (its endpoint's prefix
/// included): `*` or `{name}` is one segment, `**` anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default)]
pub struct AccessRule {
    /// A catalog service type: `compute`, `block-storage`.
    pub service: String,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    pub method: String,
    /// Starts with `/`; at most 225 characters (Keystone's schema).
    pub path: String,
}

impl ApplicationCredential {
    /// When it expires (`None`: never, or a time Keystone would not write).
    #[must_use]
    pub fn expires(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.expires_at.as_deref().and_then(parse_keystone_time)
    }
}

/// A time as Keystone writes it: UTC, with or without fraction and `Z`
/// (`2018-02-27T18:30:59.000000`).
#[must_use]
pub fn parse_keystone_time(t: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let t = t.strip_suffix('Z').unwrap_or(t);
    chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|n| n.and_utc())
}

/// An `expires_at` for [`ApplicationCredentialCreate`]: Keystone appends a `Z` unless there is one
/// and then parses ISO 8601 (`keystone.common.utils.parse_expiration_date`), so an offset such as
/// `+00:00` is refused; whole seconds, `Z`.
#[must_use]
pub fn keystone_expiry(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A new application credential with its secret, which Keystone returns only once.
#[derive(Clone)]
pub struct NewApplicationCredential {
    pub credential: ApplicationCredential,
    pub secret: SecretString,
}

impl fmt::Debug for NewApplicationCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewApplicationCredential")
            .field("credential", &self.credential)
            .field("secret", &"[REDACTED]")
            .finish()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ApplicationCredentialCreate {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// RFC 3339; `None` never expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Role names; empty = all of the user's roles on the project.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "role_names")]
    pub roles: Vec<String>,
    /// May create further credentials and trusts: kos never needs that.
    pub unrestricted: bool,
    /// Empty: none (the credential may make any call its roles allow).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub access_rules: Vec<AccessRule>,
}

fn role_names<S: serde::Serializer>(roles: &[String], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(roles.iter().map(|r| serde_json::json!({"name": r})))
}

#[derive(Deserialize)]
pub(crate) struct CreatedWire {
    #[serde(flatten)]
    pub credential: ApplicationCredential,
    #[serde(default)]
    pub secret: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{keys, parse_sample, sample_keys};
    use secrecy::ExposeSecret;

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn application_credentials_parse() -> R {
        let c: CreatedWire = parse_sample(
            "identity/admin/application-credential-create-response.json",
            "application_credential",
        )?;
        assert_eq!(c.secret.as_deref(), Some("rEaqvJka48mpv"));
        assert_eq!(c.credential.name, "monitoring");
        let l: Vec<ApplicationCredential> = parse_sample(
            "identity/admin/application-credential-list-response.json",
            "application_credentials",
        )?;
        assert_eq!(l.len(), 2);
        let _: ApplicationCredential = parse_sample(
            "identity/admin/application-credential-get-response.json",
            "application_credential",
        )?;
        Ok(())
    }

    #[test]
    fn create_request_matches_and_secret_is_redacted() -> R {
        let c = ApplicationCredentialCreate {
            name: "monitoring".into(),
            description: Some("d".into()),
            expires_at: Some("2018-02-27T18:30:59Z".into()),
            roles: vec!["Reader".into()],
            unrestricted: false,
            access_rules: Vec::new(),
        };
        let v = serde_json::to_value(&c)?;
        let mut want = sample_keys(
            "identity/admin/application-credential-create-request.json",
            "application_credential",
        )?;
        want.retain(|k| k != "secret" && k != "access_rules");
        assert_eq!(keys(&v), want, "no rules: no `access_rules` key at all");
        assert_eq!(v["roles"], serde_json::json!([{"name": "Reader"}]));
        let rule = AccessRule {
            service: "compute".into(),
            method: "GET".into(),
            path: "/v2.1/servers/*".into(),
        };
        let with = ApplicationCredentialCreate {
            access_rules: vec![rule],
            ..c
        };
        let v = serde_json::to_value(&with)?;
        let mut want = sample_keys(
            "identity/admin/application-credential-create-request.json",
            "application_credential",
        )?;
        want.retain(|k| k != "secret");
        assert_eq!(keys(&v), want);
        assert_eq!(
            v["access_rules"],
            serde_json::json!([{"service": "compute", "method": "GET", "path": "/v2.1/servers/*"}])
        );
        let n = NewApplicationCredential {
            credential: ApplicationCredential::default(),
            secret: SecretString::from("hunter2"),
        };
        assert!(!format!("{n:?}").contains("hunter2"));
        assert_eq!(n.secret.expose_secret(), "hunter2");
        Ok(())
    }

    #[test]
    fn keystone_times_are_written_and_read_as_keystone_does() -> R {
        let at = parse_keystone_time("2018-02-27T18:30:59.000000").ok_or("parse")?;
        assert_eq!(keystone_expiry(at), "2018-02-27T18:30:59Z");
        assert_eq!(parse_keystone_time("2018-02-27T18:30:59Z"), Some(at));
        let c = ApplicationCredential {
            expires_at: None,
            ..ApplicationCredential::default()
        };
        assert_eq!(c.expires(), None);
        Ok(())
    }
}
