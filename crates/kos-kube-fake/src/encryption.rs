//! Encryption at rest, as kube-apiserver's `--encryption-provider-config` does it: the
//! `apiserver.config.k8s.io/v1` `EncryptionConfiguration` parsed and validated as strictly as the
//! apiserver's loader (a file it refuses makes it exit, so [`EncryptionConfig::parse`] is what the
//! simulated node calls before it starts a front), and the prefix transformers every stored Secret
//! goes through: written with the first provider (its first key), read with whichever provider's
//! prefix matches, `identity` matching a value without a `k8s:enc:` prefix.
//!
//! Simplified, and said so:
//! - the ciphers are real AEADs from aws-lc-rs, not the apiserver's: `secretbox` (XSalsa20-Poly1305
//!   upstream, which no crate here provides) seals with ChaCha20-Poly1305 under the same 32-byte
//!   key and a 12-byte random nonce; `aescbc` and `aesgcm` seal with AES-GCM of the key's length.
//!   The stored bytes are `k8s:enc:<provider>:v1:<key name>:` then nonce and ciphertext, as the
//!   real prefixes are, so what a test can see (the key name, no plaintext, a key that opens it or
//!   not) is what etcd shows of a real cluster; the bytes after the prefix are not byte-compatible;
//! - `kms` providers parse but cannot run (no plugin): a config whose write provider is `kms` is
//!   refused at start, naming the simplification;
//! - only rules for `secrets` transform anything: the store keeps its at-rest view of Secrets only
//!   (other resources a rule names are validated and stored as identity).

use std::collections::BTreeSet;
use std::fmt;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;
use serde_json::Value;

/// The only version kube-apiserver decodes the file as.
pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";
pub const KIND: &str = "EncryptionConfiguration";
const PREFIX: &str = "k8s:enc:";

/// Why kube-apiserver refuses the file (its words, the field path first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub message: String,
}

fn err(message: impl Into<String>) -> ConfigError {
    ConfigError {
        message: message.into(),
    }
}

/// A named key. Its bytes never print.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    secret: Vec<u8>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} ***)", self.name)
    }
}

/// One provider of a rule, in the order the file lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    Identity,
    Secretbox(Vec<Key>),
    Aescbc(Vec<Key>),
    Aesgcm(Vec<Key>),
    /// A KMS plugin, by name (not simulated: see the module docs).
    Kms(String),
}

impl Provider {
    fn tag(&self) -> &'static str {
        match self {
            Provider::Identity => "identity",
            Provider::Secretbox(_) => "secretbox",
            Provider::Aescbc(_) => "aescbc",
            Provider::Aesgcm(_) => "aesgcm",
            Provider::Kms(_) => "kms",
        }
    }

    fn keys(&self) -> &[Key] {
        match self {
            Provider::Secretbox(k) | Provider::Aescbc(k) | Provider::Aesgcm(k) => k,
            Provider::Identity | Provider::Kms(_) => &[],
        }
    }
}

/// One `resources[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub resources: Vec<String>,
    pub providers: Vec<Provider>,
}

/// A parsed configuration; [`EncryptionConfig::none`] is an apiserver without the flag.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EncryptionConfig {
    pub rules: Vec<Rule>,
}

const IDENTITY: [Provider; 1] = [Provider::Identity];

impl EncryptionConfig {
    /// No `--encryption-provider-config`: everything is stored as it is.
    #[must_use]
    pub fn none() -> EncryptionConfig {
        EncryptionConfig::default()
    }

    /// Reads the file as kube-apiserver's loader does (strict decoding, then validation).
    ///
    /// # Errors
    /// What kube-apiserver exits with, e.g. `resources[0].providers[0].secretbox.keys[0].secret:
    /// Invalid value: "REDACTED": secret is not of the expected length, got 16, expected one of [32]`.
    pub fn parse(yaml: &str) -> Result<EncryptionConfig, ConfigError> {
        let doc: Value = serde_saphyr::from_str(yaml)
            .map_err(|e| err(format!("error while parsing file: {e}")))?;
        let obj = doc
            .as_object()
            .ok_or_else(|| err("error while parsing file: Object 'Kind' is missing"))?;
        let version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() {
            return Err(err("error while parsing file: Object 'Kind' is missing"));
        }
        if version != API_VERSION || kind != KIND {
            return Err(err(format!(
                "error while parsing file: no kind \"{kind}\" is registered for version \"{version}\""
            )));
        }
        unknown(obj, &["apiVersion", "kind", "resources"], "")?;
        let rules = obj
            .get("resources")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if rules.is_empty() {
            return Err(err(
                "resources: Required value: EncryptionConfiguration.Resources must contain at least one resource",
            ));
        }
        let mut out = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            out.push(rule(r, &format!("resources[{i}]"))?);
        }
        let config = EncryptionConfig { rules: out };
        if let Some(p) = config.providers("secrets").first()
            && let Provider::Kms(name) = p
        {
            return Err(err(format!(
                "kms provider {name:?}: KMS plugins are not simulated by kos-kube-fake"
            )));
        }
        Ok(config)
    }

    /// The providers of the first rule naming `resource` (a core-group plural such as `secrets`,
    /// or `*.`/`*.*`), identity alone when none does.
    #[must_use]
    pub fn providers(&self, resource: &str) -> &[Provider] {
        self.rules
            .iter()
            .find(|r| {
                r.resources.iter().any(|x| {
                    x == resource || x == &format!("{resource}.") || x == "*." || x == "*.*"
                })
            })
            .map_or(&IDENTITY[..], |r| &r.providers)
    }

    /// The key names of a resource's providers, in order (`identity` for identity): what a test or
    /// a status shows, never the key material.
    #[must_use]
    pub fn key_names(&self, resource: &str) -> Vec<String> {
        self.providers(resource)
            .iter()
            .flat_map(|p| match p {
                Provider::Identity => vec!["identity".to_owned()],
                Provider::Kms(n) => vec![format!("kms:{n}")],
                p => p.keys().iter().map(|k| k.name.clone()).collect(),
            })
            .collect()
    }

    /// What etcd holds for `plain` at `storage_key`, written with the first provider's first key.
    pub(crate) fn seal(&self, resource: &str, storage_key: &str, plain: &[u8]) -> Vec<u8> {
        let Some(p) = self.providers(resource).first() else {
            return plain.to_vec();
        };
        let Some(k) = p.keys().first() else {
            // identity (kms was refused at parse)
            return plain.to_vec();
        };
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce);
        let mut out = format!("{PREFIX}{}:v1:{}:", p.tag(), k.name).into_bytes();
        let mut body = plain.to_vec();
        let sealed = aead_key(p, k).and_then(|key| {
            key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(storage_key.as_bytes()),
                &mut body,
            )
            .ok()
        });
        if sealed.is_none() {
            // A key that parsed has a valid length for its cipher; nothing else fails here.
            return plain.to_vec();
        }
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        out
    }

    /// The plaintext of a stored value, as the apiserver's prefix transformer finds it.
    ///
    /// # Errors
    /// kube-apiserver's reason, e.g. `no matching prefix found` or `identity transformer tried to
    /// read encrypted data`.
    pub(crate) fn open(
        &self,
        resource: &str,
        storage_key: &str,
        stored: &[u8],
    ) -> Result<Vec<u8>, String> {
        let providers = self.providers(resource);
        for p in providers {
            for k in p.keys() {
                let prefix = format!("{PREFIX}{}:v1:{}:", p.tag(), k.name);
                let Some(rest) = stored.strip_prefix(prefix.as_bytes()) else {
                    continue;
                };
                let (nonce, body) = rest.split_at_checked(NONCE_LEN).ok_or("invalid data")?;
                let key = aead_key(p, k).ok_or("invalid key")?;
                let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "invalid nonce")?;
                let mut body = body.to_vec();
                let plain = key
                    .open_in_place(nonce, Aad::from(storage_key.as_bytes()), &mut body)
                    .map_err(|_| format!("{}: failed to decrypt data", p.tag()))?;
                return Ok(plain.to_vec());
            }
        }
        let encrypted = stored.starts_with(PREFIX.as_bytes());
        if providers.contains(&Provider::Identity) {
            if encrypted {
                return Err("identity transformer tried to read encrypted data".into());
            }
            return Ok(stored.to_vec());
        }
        Err("no matching prefix found".into())
    }
}

fn aead_key(p: &Provider, k: &Key) -> Option<LessSafeKey> {
    let alg = match (p, k.secret.len()) {
        (Provider::Secretbox(_), 32) => &aead::CHACHA20_POLY1305,
        (Provider::Aescbc(_) | Provider::Aesgcm(_), 16) => &aead::AES_128_GCM,
        (Provider::Aescbc(_) | Provider::Aesgcm(_), 24) => &aead::AES_192_GCM,
        (Provider::Aescbc(_) | Provider::Aesgcm(_), 32) => &aead::AES_256_GCM,
        _ => return None,
    };
    UnboundKey::new(alg, &k.secret).ok().map(LessSafeKey::new)
}

/// Strict decoding: a field the Go type lacks.
fn unknown(
    obj: &serde_json::Map<String, Value>,
    known: &[&str],
    at: &str,
) -> Result<(), ConfigError> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(err(format!(
            "error while parsing file: strict decoding error: unknown field \"{at}{k}\""
        ))),
        None => Ok(()),
    }
}

fn rule(v: &Value, at: &str) -> Result<Rule, ConfigError> {
    let obj = v
        .as_object()
        .ok_or_else(|| err(format!("{at}: Invalid value: not an object")))?;
    unknown(obj, &["resources", "providers"], &format!("{at}."))?;
    let resources: Vec<String> = obj
        .get("resources")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if resources.is_empty() {
        return Err(err(format!(
            "{at}.resources: Required value: at least one resource is required"
        )));
    }
    let providers = obj
        .get("providers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if providers.is_empty() {
        return Err(err(format!(
            "{at}.providers: Required value: at least one provider is required"
        )));
    }
    let mut out = Vec::new();
    for (i, p) in providers.iter().enumerate() {
        out.push(provider(p, &format!("{at}.providers[{i}]"))?);
    }
    Ok(Rule {
        resources,
        providers: out,
    })
}

fn provider(v: &Value, at: &str) -> Result<Provider, ConfigError> {
    let obj = v
        .as_object()
        .ok_or_else(|| err(format!("{at}: Invalid value: not an object")))?;
    unknown(
        obj,
        &["identity", "secretbox", "aescbc", "aesgcm", "kms"],
        &format!("{at}."),
    )?;
    let (name, body) = match obj.iter().collect::<Vec<_>>().as_slice() {
        [] => {
            return Err(err(format!(
                "{at}: Invalid value: \"{{}}\": provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"
            )));
        }
        [(n, b)] => (n.as_str(), *b),
        _ => {
            return Err(err(format!(
                "{at}: Invalid value: more than one provider specified in a single element, should split into different list elements"
            )));
        }
    };
    let at = format!("{at}.{name}");
    Ok(match name {
        "identity" => Provider::Identity,
        "secretbox" => Provider::Secretbox(keys(body, &at, &[32])?),
        "aescbc" => Provider::Aescbc(keys(body, &at, &[16, 24, 32])?),
        "aesgcm" => Provider::Aesgcm(keys(body, &at, &[16, 24, 32])?),
        _ => {
            let name = body
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    err(format!(
                        "{at}.name: Required value: name is a mandatory field for a KMS provider"
                    ))
                })?;
            Provider::Kms(name.to_owned())
        }
    })
}

fn keys(v: &Value, at: &str, lengths: &[usize]) -> Result<Vec<Key>, ConfigError> {
    if let Some(obj) = v.as_object() {
        unknown(obj, &["keys"], &format!("{at}."))?;
    }
    let list = v
        .get("keys")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if list.is_empty() {
        return Err(err(format!(
            "{at}.keys: Required value: at least one keys is required"
        )));
    }
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for (i, k) in list.iter().enumerate() {
        let at = format!("{at}.keys[{i}]");
        if let Some(obj) = k.as_object() {
            unknown(obj, &["name", "secret"], &format!("{at}."))?;
        }
        let name = k.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            return Err(err(format!(
                "{at}.name: Required value: name is a mandatory field for a key"
            )));
        }
        if name.contains(':') {
            return Err(err(format!(
                "{at}.name: Invalid value: \"{name}\": should not contain ':'"
            )));
        }
        if !names.insert(name.to_owned()) {
            return Err(err(format!("{at}.name: Duplicate value: \"{name}\"")));
        }
        let secret = k.get("secret").and_then(Value::as_str).unwrap_or("");
        if secret.is_empty() {
            return Err(err(format!(
                "{at}.secret: Required value: secret is a mandatory field for a key"
            )));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(secret)
            .map_err(|_| {
                err(format!(
                    "{at}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"
                ))
            })?;
        if !lengths.contains(&bytes.len()) {
            return Err(err(format!(
                "{at}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {lengths:?}",
                bytes.len()
            )));
        }
        out.push(Key {
            name: name.to_owned(),
            secret: bytes,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn b64(n: usize) -> String {
        base64::engine::general_purpose::STANDARD.encode(vec![7u8; n])
    }

    fn config(providers: &str) -> String {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"
        )
    }

    fn secretbox(names: &[&str]) -> String {
        let keys: String = names
            .iter()
            .map(|n| format!("      - name: {n}\n        secret: {}\n", b64(32)))
            .collect();
        format!("  - secretbox:\n      keys:\n{keys}")
    }

    fn refused(yaml: &str) -> String {
        EncryptionConfig::parse(yaml).unwrap_err().message
    }

    #[test]
    fn a_valid_file_parses_with_its_key_names_in_order() {
        let c = EncryptionConfig::parse(&config(&format!(
            "{}  - identity: {{}}\n",
            secretbox(&["key-2", "key-1"])
        )))
        .unwrap();
        assert_eq!(c.key_names("secrets"), ["key-2", "key-1", "identity"]);
        assert_eq!(c.key_names("configmaps"), ["identity"]);
        assert!(!format!("{c:?}").contains(&b64(32)), "{c:?}");
    }

    #[test]
    fn what_kube_apiserver_refuses_is_refused() {
        let short = config(&format!(
            "  - secretbox:\n      keys:\n      - name: k\n        secret: {}\n",
            b64(16)
        ));
        assert!(
            refused(&short).contains("keys[0].secret: Invalid value: \"REDACTED\": secret is not of the expected length, got 16, expected one of [32]"),
            "{}",
            refused(&short)
        );
        // aescbc takes 16, 24 or 32 bytes.
        let cbc = config(&format!(
            "  - aescbc:\n      keys:\n      - name: k\n        secret: {}\n",
            b64(24)
        ));
        assert!(EncryptionConfig::parse(&cbc).is_ok());
        let cbc = cbc.replace(&b64(24), &b64(20));
        assert!(refused(&cbc).contains("expected one of [16, 24, 32]"));
        assert!(refused(&config(&secretbox(&["a", "a"]))).contains("Duplicate value: \"a\""));
        assert!(refused(&config(&secretbox(&[""]))).contains("name: Required value"));
        assert!(refused(&config(&secretbox(&["a:b"]))).contains("should not contain ':'"));
        assert!(
            refused(&config("  - rot13: {}\n"))
                .contains("unknown field \"resources[0].providers[0].rot13\""),
            "{}",
            refused(&config("  - rot13: {}\n"))
        );
        assert!(
            refused(&config("  - identity: {}\n    secretbox: {keys: []}\n"))
                .contains("more than one provider")
        );
        let wrong = config("  - identity: {}\n").replace("/v1", "/v2");
        assert!(refused(&wrong).contains("no kind \"EncryptionConfiguration\" is registered for version \"apiserver.config.k8s.io/v2\""));
        let kind = config("  - identity: {}\n")
            .replace("kind: EncryptionConfiguration", "kind: EncryptionConfig");
        assert!(refused(&kind).contains("no kind \"EncryptionConfig\""));
        assert!(refused("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: []\n").contains("at least one resource"));
        assert!(refused(&config("")).contains("at least one provider"));
        let bad64 = config(
            "  - secretbox:\n      keys:\n      - name: k\n        secret: \"!!notbase64\"\n",
        );
        assert!(refused(&bad64).contains("base64"));
    }

    #[test]
    fn values_are_sealed_with_the_first_key_and_opened_by_name() {
        let c = EncryptionConfig::parse(&config(&format!(
            "{}  - identity: {{}}\n",
            secretbox(&["key-1"])
        )))
        .unwrap();
        let plain = br#"{"data":{"password":"hunter2"}}"#;
        let stored = c.seal("secrets", "/registry/secrets/default/s", plain);
        assert!(stored.starts_with(b"k8s:enc:secretbox:v1:key-1:"));
        assert!(!stored.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            c.open("secrets", "/registry/secrets/default/s", &stored)
                .unwrap(),
            plain
        );
        // Plain values (written before the key) stay readable while identity is listed.
        assert_eq!(c.open("secrets", "k", plain).unwrap(), plain);
        // A server without key-1 cannot read it.
        let other = EncryptionConfig::parse(&config(&format!(
            "{}  - identity: {{}}\n",
            secretbox(&["key-2"])
        )))
        .unwrap();
        assert_eq!(
            other
                .open("secrets", "/registry/secrets/default/s", &stored)
                .unwrap_err(),
            "identity transformer tried to read encrypted data"
        );
        let only = EncryptionConfig::parse(&config(&secretbox(&["key-2"]))).unwrap();
        assert_eq!(
            only.open("secrets", "k", plain).unwrap_err(),
            "no matching prefix found"
        );
        assert_eq!(EncryptionConfig::none().seal("secrets", "k", plain), plain);
    }

    /// The store seals each Secret with the configuration that wrote it, keeps the bytes when it
    /// is read, and an API server without the key answers kube-apiserver's 500.
    #[tokio::test]
    async fn the_store_keeps_secrets_sealed_by_their_writer() {
        use k8s_openapi::api::core::v1::Secret;
        let fake = crate::FakeKube::start().await.unwrap();
        let one = std::sync::Arc::new(
            EncryptionConfig::parse(&config(&format!(
                "{}  - identity: {{}}\n",
                secretbox(&["key-1"])
            )))
            .unwrap(),
        );
        let mut s = Secret::default();
        s.metadata.name = Some("plain".into());
        s.metadata.namespace = Some("default".into());
        s.string_data = Some([("password".to_owned(), "hunter2".to_owned())].into());
        fake.insert(&s).unwrap();
        fake.set_encryption(one.clone());
        s.metadata.name = Some("sealed".into());
        fake.insert(&s).unwrap();
        let rest = fake.at_rest();
        let by = |n: &str| rest.iter().find(|a| a.name == n).unwrap().clone();
        assert_eq!(by("plain").key_name(), None);
        assert_eq!(by("sealed").key_name().as_deref(), Some("key-1"));
        assert_eq!(
            by("sealed").prefix().as_deref(),
            Some("k8s:enc:secretbox:v1:key-1:")
        );
        assert!(!String::from_utf8_lossy(&by("sealed").bytes()).contains("hunter2"));
        let res = fake.shared.store().type_index("", "v1", "secrets").unwrap();
        // The writer reads both: its key, and identity for the plain one.
        assert!(
            fake.shared
                .store()
                .check_readable(res, None, None, &one)
                .is_ok()
        );
        let two = EncryptionConfig::parse(&config(&format!(
            "{}  - identity: {{}}\n",
            secretbox(&["key-2"])
        )))
        .unwrap();
        let e = fake
            .shared
            .store()
            .check_readable(res, Some("default"), Some("sealed"), &two)
            .unwrap_err();
        assert_eq!((e.code, e.reason), (500, "InternalError"));
        assert_eq!(
            e.message,
            "Internal error occurred: unable to transform key \"/registry/secrets/default/sealed\": identity transformer tried to read encrypted data"
        );
        // A snapshot keeps the bytes: a restored cluster still needs key-1.
        let back =
            crate::FakeKube::start_sync_from(crate::Config::default(), &fake.snapshot()).unwrap();
        assert_eq!(
            back.at_rest()
                .iter()
                .find(|a| a.name == "sealed")
                .unwrap()
                .value,
            by("sealed").value
        );
    }
}
