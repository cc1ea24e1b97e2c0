//! Encryption at rest, as kube-apiserver's `--encryption-provider-config` does it: the
//! `apiserver.config.k8s.io/v1` `EncryptionConfiguration` parsed and validated as strictly as the
//! apiserver's loader (a file it refuses makes it exit, so [`EncryptionConfig::parse`] is what the
//! simulated node calls before it starts a front), and the prefix transformers every stored Secret
//! goes through: written with the first provider (its first key), read with whichever provider's
//! prefix matches, `identity` matching a value without a `k8s:enc:` prefix.
//!
//! The stored bytes are those kube-apiserver writes (`storage/value/encrypt/{secretbox,aes}`):
//! `k8s:enc:<provider>:v1:<key name>:` then
//! - `secretbox`: a random 24-byte nonce and NaCl's `secretbox` (XSalsa20-Poly1305, tag first) of
//!   the value, no authenticated data;
//! - `aesgcm`: a random 12-byte nonce and AES-GCM (ciphertext, then tag) with the etcd key as the
//!   authenticated data, so a value copied to another key does not open;
//! - `aescbc`: a random 16-byte IV and AES-CBC of the PKCS#7-padded value.
//!
//! So a value sealed here opens with kube-apiserver's code and the other way round (the tests
//! check NaCl's own test vector and the layouts).
//!
//! Simplified, and said so:
//! - `kms` providers parse but cannot run (no plugin): a config whose write provider is `kms` is
//!   refused at start, naming the simplification;
//! - only rules for `secrets` transform anything: the store keeps its at-rest view of Secrets only
//!   (other resources a rule names are validated and stored as identity).

use std::collections::BTreeSet;
use std::fmt;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{
    AES_128, AES_192, AES_256, DecryptionContext, EncryptionContext, PaddedBlockDecryptingKey,
    PaddedBlockEncryptingKey, UnboundCipherKey,
};
use aws_lc_rs::iv::FixedLength;
use base64::Engine as _;
use crypto_secretbox::XSalsa20Poly1305;
use crypto_secretbox::aead::{Aead as _, KeyInit as _};
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
        let mut out = format!("{PREFIX}{}:v1:{}:", p.tag(), k.name).into_bytes();
        match transform_to_storage(p, &k.secret, storage_key, plain) {
            Some(body) => {
                out.extend_from_slice(&body);
                out
            }
            // A key that parsed has a valid length for its cipher; nothing else fails here.
            None => plain.to_vec(),
        }
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
                return transform_from_storage(p, &k.secret, storage_key, rest)
                    .map_err(|e| format!("{}: {e}", p.tag()));
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

const SECRETBOX_NONCE: usize = 24;
const SECRETBOX_OVERHEAD: usize = 16;
const GCM_NONCE: usize = 12;
const CBC_BLOCK: usize = 16;

/// What follows the prefix: the provider's transformer applied to `plain` (`None` for a key
/// length the provider does not take, which parsing has already refused).
fn transform_to_storage(
    p: &Provider,
    secret: &[u8],
    storage_key: &str,
    plain: &[u8],
) -> Option<Vec<u8>> {
    match p {
        Provider::Secretbox(_) => {
            let cipher = XSalsa20Poly1305::new_from_slice(secret).ok()?;
            let mut nonce = [0u8; SECRETBOX_NONCE];
            rand::fill(&mut nonce);
            let sealed = cipher.encrypt(&nonce.into(), plain).ok()?;
            Some([nonce.as_slice(), &sealed].concat())
        }
        Provider::Aesgcm(_) => {
            let key = gcm_key(secret)?;
            let mut nonce = [0u8; GCM_NONCE];
            rand::fill(&mut nonce);
            let mut body = plain.to_vec();
            key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(storage_key.as_bytes()),
                &mut body,
            )
            .ok()?;
            Some([nonce.as_slice(), &body].concat())
        }
        Provider::Aescbc(_) => {
            let key = PaddedBlockEncryptingKey::cbc_pkcs7(cbc_key(secret)?).ok()?;
            let mut iv = [0u8; CBC_BLOCK];
            rand::fill(&mut iv);
            let mut body = plain.to_vec();
            key.less_safe_encrypt(&mut body, EncryptionContext::Iv128(FixedLength::from(iv)))
                .ok()?;
            Some([iv.as_slice(), &body].concat())
        }
        Provider::Identity | Provider::Kms(_) => None,
    }
}

/// The value a provider's transformer reads from what follows its prefix; the errors are
/// kube-apiserver's words.
fn transform_from_storage(
    p: &Provider,
    secret: &[u8],
    storage_key: &str,
    data: &[u8],
) -> Result<Vec<u8>, &'static str> {
    const SHORT: &str = "the stored data was shorter than the required size";
    match p {
        Provider::Secretbox(_) => {
            if data.len() < SECRETBOX_NONCE + SECRETBOX_OVERHEAD {
                return Err(SHORT);
            }
            let (nonce, body) = data.split_at(SECRETBOX_NONCE);
            let cipher = XSalsa20Poly1305::new_from_slice(secret).map_err(|_| "invalid key")?;
            let nonce: [u8; SECRETBOX_NONCE] = nonce.try_into().map_err(|_| SHORT)?;
            // secretbox.Open's failure, as the transformer words it.
            cipher
                .decrypt(&nonce.into(), body)
                .map_err(|_| "output array was not large enough for encryption")
        }
        Provider::Aesgcm(_) => {
            if data.len() < GCM_NONCE {
                return Err(SHORT);
            }
            let (nonce, body) = data.split_at(GCM_NONCE);
            let key = gcm_key(secret).ok_or("invalid key")?;
            let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SHORT)?;
            let mut body = body.to_vec();
            let plain = key
                .open_in_place(nonce, Aad::from(storage_key.as_bytes()), &mut body)
                .map_err(|_| "cipher: message authentication failed")?;
            Ok(plain.to_vec())
        }
        Provider::Aescbc(_) => {
            if data.len() < CBC_BLOCK {
                return Err(SHORT);
            }
            let (iv, body) = data.split_at(CBC_BLOCK);
            if body.len() % CBC_BLOCK != 0 {
                return Err("the stored data is not a multiple of the block size");
            }
            let key = PaddedBlockDecryptingKey::cbc_pkcs7(cbc_key(secret).ok_or("invalid key")?)
                .map_err(|_| "invalid key")?;
            let iv: [u8; CBC_BLOCK] = iv.try_into().map_err(|_| SHORT)?;
            let mut body = body.to_vec();
            let plain = key
                .decrypt(&mut body, DecryptionContext::Iv128(FixedLength::from(iv)))
                .map_err(|_| "invalid padding on input")?;
            Ok(plain.to_vec())
        }
        Provider::Identity | Provider::Kms(_) => Err("no matching prefix found"),
    }
}

fn gcm_key(secret: &[u8]) -> Option<LessSafeKey> {
    let alg = match secret.len() {
        16 => &aead::AES_128_GCM,
        24 => &aead::AES_192_GCM,
        32 => &aead::AES_256_GCM,
        _ => return None,
    };
    UnboundKey::new(alg, secret).ok().map(LessSafeKey::new)
}

fn cbc_key(secret: &[u8]) -> Option<UnboundCipherKey> {
    let alg = match secret.len() {
        16 => &AES_128,
        24 => &AES_192,
        32 => &AES_256,
        _ => return None,
    };
    UnboundCipherKey::new(alg, secret).ok()
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

    /// NaCl's own vector (golang.org/x/crypto/nacl/secretbox `TestSecretBox`, made with the C
    /// implementation): what kube-apiserver's `secretbox` writes after the prefix and nonce.
    #[test]
    fn secretbox_is_nacl_secretbox() {
        let key = [1u8; 32];
        let nonce = [2u8; 24];
        let sealed = XSalsa20Poly1305::new_from_slice(&key)
            .unwrap()
            .encrypt(&nonce.into(), [3u8; 64].as_slice())
            .unwrap();
        let expected = "8442bc313f4626f1359e3b50122b6ce6fe66ddfe7d39d14e637eb4fd5b45beadab55198df6ab5368439792a23c87db70acb6156dc5ef957ac04f6276cf6093b84be77ff0849cc33e34b7254d5a8f65ad";
        let hex: String = sealed.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        // And the transformer reads a value laid out as the apiserver lays it out.
        let stored = [nonce.as_slice(), &sealed].concat();
        let p = Provider::Secretbox(vec![]);
        assert_eq!(
            transform_from_storage(&p, &key, "any", &stored).unwrap(),
            vec![3u8; 64]
        );
        assert_eq!(
            transform_from_storage(&p, &key, "any", &stored[..39]).unwrap_err(),
            "the stored data was shorter than the required size"
        );
    }

    /// The layouts after the prefix: secretbox 24 + 16 + n, aesgcm 12 + n + 16 bound to the etcd
    /// key, aescbc 16 + n padded to the block (a full block of padding when n is a multiple).
    #[test]
    fn each_provider_lays_out_its_bytes_as_the_apiserver() {
        let plain = [7u8; 32];
        let sb = Provider::Secretbox(vec![]);
        let gcm = Provider::Aesgcm(vec![]);
        let cbc = Provider::Aescbc(vec![]);
        let k32 = [9u8; 32];
        let k16 = [5u8; 16];
        let at = "/registry/secrets/default/s";

        let s = transform_to_storage(&sb, &k32, at, &plain).unwrap();
        assert_eq!(s.len(), 24 + 16 + 32);
        assert_eq!(
            transform_from_storage(&sb, &k32, "other", &s).unwrap(),
            plain
        );

        for key in [&k16[..], &[5u8; 24][..], &k32[..]] {
            let g = transform_to_storage(&gcm, key, at, &plain).unwrap();
            assert_eq!(g.len(), 12 + 32 + 16);
            assert_eq!(transform_from_storage(&gcm, key, at, &g).unwrap(), plain);
            // Copied under another etcd key, it does not open.
            assert_eq!(
                transform_from_storage(&gcm, key, "/registry/secrets/default/t", &g).unwrap_err(),
                "cipher: message authentication failed"
            );

            let c = transform_to_storage(&cbc, key, at, &plain).unwrap();
            assert_eq!(c.len(), 16 + 32 + 16);
            assert_eq!(
                transform_from_storage(&cbc, key, "other", &c).unwrap(),
                plain
            );
            let c = transform_to_storage(&cbc, key, at, &plain[..5]).unwrap();
            assert_eq!(c.len(), 16 + 16);
            assert_eq!(
                transform_from_storage(&cbc, key, at, &c[..20]).unwrap_err(),
                "the stored data is not a multiple of the block size"
            );
        }
        // AES-CBC as Go's crypto/cipher computes it: FIPS-197's AES-128 vector is the first
        // block of CBC with a zero IV (C.1: key 000102..0f, plaintext 00112233..ff).
        let key: Vec<u8> = (0u8..16).collect();
        let block: Vec<u8> = (0u8..16).map(|i| i * 0x11).collect();
        let stored = [&[0u8; 16][..], &cbc_encrypt_raw(&key, &block)].concat();
        let hex: String = stored[16..32].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "69c4e0d86a7b0430d8cdb78070b4c55a");
    }

    /// One PKCS#7-padded CBC encryption under a zero IV, through the transformer's key type.
    fn cbc_encrypt_raw(key: &[u8], plain: &[u8]) -> Vec<u8> {
        let k = PaddedBlockEncryptingKey::cbc_pkcs7(cbc_key(key).unwrap()).unwrap();
        let mut body = plain.to_vec();
        k.less_safe_encrypt(
            &mut body,
            EncryptionContext::Iv128(FixedLength::from([0u8; 16])),
        )
        .unwrap();
        body
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
