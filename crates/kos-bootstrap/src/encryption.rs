//! Encryption at rest for Secrets: the cluster's keys, the order kube-apiserver gets them in, and
//! the upstream `EncryptionConfiguration` every control plane's user_data writes to
//! [`CONFIG_PATH`] (0600, root), which the first control plane's ClusterConfiguration hands to
//! kube-apiserver (`encryption-provider-config` and a read-only hostPath volume) and which
//! `kubeadm join --control-plane` takes over from `kubeadm-config`.
//!
//! `secretbox` is upstream's recommended local provider (aescbc is discouraged); `identity` stays
//! last so Secrets written before a key existed remain readable until they are rewritten.

use std::fmt;

use base64::Engine as _;
use rand::CryptoRng;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, Sensitive};

/// The directory the API server's static pod mounts, and the file in it.
pub const CONFIG_DIR: &str = "/etc/kubernetes/enc";
pub const CONFIG_PATH: &str = "/etc/kubernetes/enc/encryption-config.yaml";
/// The kube-apiserver flag, as a v1beta4 extraArg name.
pub const FLAG: &str = "encryption-provider-config";
/// The extraVolume's name in the static pod.
pub const VOLUME: &str = "kos-encryption-config";
/// Bytes of a secretbox key.
pub const KEY_BYTES: usize = 32;

/// One named secretbox key: the name is public (server tags, status), the secret never prints.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionKey {
    /// `key-<n>`.
    pub name: String,
    /// 32 random bytes, base64 (standard alphabet), as the configuration carries them.
    pub secret: Sensitive,
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EncryptionKey({} ***)", self.name)
    }
}

impl EncryptionKey {
    /// A new key named `key-<index>`.
    pub fn generate<R: CryptoRng + ?Sized>(rng: &mut R, index: u32) -> Self {
        let mut bytes = [0u8; KEY_BYTES];
        rng.fill_bytes(&mut bytes);
        Self {
            name: format!("key-{index}"),
            secret: Sensitive::new(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }

    /// The `n` of `key-<n>` (0 for another name).
    pub fn index(&self) -> u32 {
        self.name
            .strip_prefix("key-")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Checks a stored key: a `key-<n>` name and 32 bytes of base64.
    pub fn validate(&self) -> Result<()> {
        if self.index() == 0 {
            return Err(Error::invalid(
                "encryption key",
                format!("name {:?} is not key-<n>", self.name),
            ));
        }
        let len = base64::engine::general_purpose::STANDARD
            .decode(self.secret.expose())
            .map(|b| b.len())
            .map_err(|_| {
                Error::invalid("encryption key", format!("{} is not base64", self.name))
            })?;
        if len != KEY_BYTES {
            return Err(Error::invalid(
                "encryption key",
                format!("{} is {len} bytes, not {KEY_BYTES}", self.name),
            ));
        }
        Ok(())
    }
}

/// One provider of the list, in the order kube-apiserver tries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// Plain storage: reads what was written before a key, or writes plainly while a first key is
    /// being added on every control plane.
    Identity,
    /// A secretbox provider with these keys (the first one writes).
    Secretbox(Vec<EncryptionKey>),
}

/// The providers a control plane's kube-apiserver runs with: the first one writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encryption {
    pub providers: Vec<Provider>,
}

impl Encryption {
    /// The record of the key set, key NAMES only, in order: `key-2.key-1.identity`. It goes into a
    /// server tag (Nova refuses `/` and `,` there), never the key material.
    pub fn record(&self) -> String {
        self.providers
            .iter()
            .flat_map(|p| match p {
                Provider::Identity => vec!["identity".to_owned()],
                Provider::Secretbox(keys) => keys.iter().map(|k| k.name.clone()).collect(),
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The upstream `EncryptionConfiguration` (YAML): secrets only.
    pub fn render(&self) -> Result<Sensitive> {
        if !self.providers.iter().any(|p| match p {
            Provider::Secretbox(keys) => !keys.is_empty(),
            Provider::Identity => false,
        }) {
            return Err(Error::invalid(
                "encryption",
                "a configuration needs at least one secretbox key",
            ));
        }
        let mut out = String::from(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n  - secrets\n  providers:\n",
        );
        for p in &self.providers {
            match p {
                Provider::Identity => out.push_str("  - identity: {}\n"),
                Provider::Secretbox(keys) => {
                    out.push_str("  - secretbox:\n      keys:\n");
                    for k in keys {
                        k.validate()?;
                        out.push_str(&format!(
                            "      - name: {}\n        secret: {}\n",
                            k.name,
                            k.secret.expose()
                        ));
                    }
                }
            }
        }
        Ok(Sensitive::new(out))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn key(i: u32) -> EncryptionKey {
        EncryptionKey::generate(&mut rand::rngs::StdRng::seed_from_u64(u64::from(i)), i)
    }

    #[test]
    fn the_configuration_parses_back_with_32_byte_keys_in_order() {
        let enc = Encryption {
            providers: vec![
                Provider::Secretbox(vec![key(2), key(1)]),
                Provider::Identity,
            ],
        };
        let text = enc.render().unwrap();
        let doc: serde_json::Value = serde_saphyr::from_str(text.expose()).unwrap();
        assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1");
        assert_eq!(doc["kind"], "EncryptionConfiguration");
        assert_eq!(
            doc["resources"][0]["resources"],
            serde_json::json!(["secrets"])
        );
        let providers = &doc["resources"][0]["providers"];
        let keys = providers[0]["secretbox"]["keys"].as_array().unwrap();
        assert_eq!(keys[0]["name"], "key-2");
        assert_eq!(keys[1]["name"], "key-1");
        for k in keys {
            let b = base64::engine::general_purpose::STANDARD
                .decode(k["secret"].as_str().unwrap())
                .unwrap();
            assert_eq!(b.len(), 32);
        }
        assert_eq!(providers[1], serde_json::json!({"identity": {}}));
        assert_eq!(enc.record(), "key-2.key-1.identity");
        assert_ne!(key(1).secret, key(2).secret);
    }

    #[test]
    fn the_key_never_prints() {
        let k = key(1);
        let enc = Encryption {
            providers: vec![Provider::Secretbox(vec![k.clone()])],
        };
        for shown in [format!("{k:?}"), format!("{enc:?}")] {
            assert!(!shown.contains(k.secret.expose()), "{shown}");
            assert!(shown.contains("key-1"), "{shown}");
        }
    }

    #[test]
    fn a_bad_key_or_no_key_is_refused() {
        let mut k = key(1);
        k.secret = Sensitive::new(base64::engine::general_purpose::STANDARD.encode([0u8; 16]));
        let enc = Encryption {
            providers: vec![Provider::Secretbox(vec![k])],
        };
        let e = enc.render().unwrap_err().to_string();
        assert!(e.contains("16 bytes"), "{e}");
        assert!(!e.contains("AAAA"), "{e}");
        let none = Encryption {
            providers: vec![Provider::Identity],
        };
        assert!(none.render().is_err());
    }
}
