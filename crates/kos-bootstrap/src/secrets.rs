//! Everything secret a cluster's bootstrap needs, generated once on the workstation and stored by the CLI
//! (0600) so that every re-run renders the same cluster: a re-provisioned node joins with the same CA and a
//! token the cluster knows (the token mismatch of seed 004 cannot happen).

use std::time::Duration;

use rand::CryptoRng;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::pki::{self, CaKind, CaPair, KeyPairPem};
use crate::token::{self, BootstrapToken};
use crate::{Error, Result, Sensitive};

/// Default join window: the token TTL. Long enough for slow image pulls, short because user-data (and so
/// the token) is readable from the metadata service.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(2 * 3600);

const BUNDLE_FORMAT: &str = "kos-cluster-secrets/v1";

/// The cluster's CAs, service-account keys, bootstrap token and certificate key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSecrets {
    pub ca: CaPair,
    pub etcd_ca: CaPair,
    pub front_proxy_ca: CaPair,
    pub service_account: KeyPairPem,
    pub token: BootstrapToken,
    /// Hex AES-256 key for `kubeadm init --upload-certs` and control-plane joins.
    pub certificate_key: Sensitive,
}

impl ClusterSecrets {
    /// Generates everything. `rng` drives the token, certificate key and serial numbers (seed it in
    /// tests); private keys come from aws-lc-rs. `now` is the certificates' start and the token's clock.
    pub fn generate<R: CryptoRng + ?Sized>(
        rng: &mut R,
        now: OffsetDateTime,
        token_ttl: Duration,
    ) -> Result<Self> {
        Ok(Self {
            ca: pki::generate_ca(rng, CaKind::Cluster, now)?,
            etcd_ca: pki::generate_ca(rng, CaKind::Etcd, now)?,
            front_proxy_ca: pki::generate_ca(rng, CaKind::FrontProxy, now)?,
            service_account: pki::generate_key_pair()?,
            token: BootstrapToken::generate(rng, now, token_ttl),
            certificate_key: token::certificate_key(rng),
        })
    }

    /// `sha256:<hex>` of the cluster CA's public key, for `caCertHashes`.
    pub fn discovery_hash(&self) -> Result<String> {
        pki::discovery_hash(&self.ca.cert_pem)
    }

    /// On a re-run: if the token has less than `margin` left, replace it (same TTL) and return true. The
    /// CAs, keys and certificate key never change. A running cluster does not know the new token: the
    /// CLI must create it through the API ([`crate::addons::bootstrap_token_secret`]) before nodes join.
    pub fn refresh_token_if_expired<R: CryptoRng + ?Sized>(
        &mut self,
        rng: &mut R,
        now: OffsetDateTime,
        margin: Duration,
    ) -> bool {
        if !self.token.is_expired(now, margin) {
            return false;
        }
        self.token = BootstrapToken::generate(rng, now, self.token.ttl);
        true
    }

    /// The bundle the CLI stores (JSON of PEMs). It is secret as a whole.
    pub fn to_bundle(&self) -> Sensitive {
        let b = Bundle {
            format: BUNDLE_FORMAT.into(),
            ca: self.ca.clone().into(),
            etcd_ca: self.etcd_ca.clone().into(),
            front_proxy_ca: self.front_proxy_ca.clone().into(),
            service_account: BundleKeys {
                private_key: self.service_account.private_pem.clone(),
                public_key: self.service_account.public_pem.clone(),
            },
            token: BundleToken {
                id: self.token.id.clone(),
                secret: self.token.secret.clone(),
                ttl_seconds: self.token.ttl.as_secs(),
                expires_unix: self.token.expires.unix_timestamp(),
            },
            certificate_key: self.certificate_key.clone(),
        };
        // Serialising plain strings and integers to JSON cannot fail.
        Sensitive::new(serde_json::to_string_pretty(&b).unwrap_or_default() + "\n")
    }

    /// Reads a bundle written by [`to_bundle`](Self::to_bundle) and checks every part. Errors name the
    /// position or part, never the content.
    pub fn from_bundle(text: &str) -> Result<Self> {
        let b: Bundle = serde_json::from_str(text).map_err(|e| {
            Error::Bundle(format!(
                "{:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ))
        })?;
        if b.format != BUNDLE_FORMAT {
            return Err(Error::Bundle(format!(
                "unknown format {:?}, expected {BUNDLE_FORMAT}",
                b.format
            )));
        }
        let expires = OffsetDateTime::from_unix_timestamp(b.token.expires_unix)
            .map_err(|_| Error::Bundle("token.expires_unix out of range".into()))?;
        let s = Self {
            ca: b.ca.into(),
            etcd_ca: b.etcd_ca.into(),
            front_proxy_ca: b.front_proxy_ca.into(),
            service_account: KeyPairPem {
                private_pem: b.service_account.private_key,
                public_pem: b.service_account.public_key,
            },
            token: BootstrapToken {
                id: b.token.id,
                secret: b.token.secret,
                ttl: Duration::from_secs(b.token.ttl_seconds),
                expires,
            },
            certificate_key: b.certificate_key,
        };
        for (what, ca) in [
            ("ca", &s.ca),
            ("etcd_ca", &s.etcd_ca),
            ("front_proxy_ca", &s.front_proxy_ca),
        ] {
            pki::pem_to_der(&ca.cert_pem, "CERTIFICATE")
                .map_err(|_| Error::Bundle(format!("{what}.cert is not a PEM certificate")))?;
            pki::check_key(&ca.key_pem)
                .map_err(|_| Error::Bundle(format!("{what}.key is not a PEM private key")))?;
        }
        pki::check_key(&s.service_account.private_pem).map_err(|_| {
            Error::Bundle("service_account.private_key is not a PEM private key".into())
        })?;
        if !s.token.is_well_formed() {
            return Err(Error::Bundle(
                "token is not [a-z0-9]{6}.[a-z0-9]{16}".into(),
            ));
        }
        let ck = s.certificate_key.expose();
        if ck.len() != 64 || !ck.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::Bundle("certificate_key is not 64 hex digits".into()));
        }
        Ok(s)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Bundle {
    format: String,
    ca: BundleCa,
    etcd_ca: BundleCa,
    front_proxy_ca: BundleCa,
    service_account: BundleKeys,
    token: BundleToken,
    certificate_key: Sensitive,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BundleCa {
    cert: String,
    key: Sensitive,
}

impl From<CaPair> for BundleCa {
    fn from(c: CaPair) -> Self {
        Self {
            cert: c.cert_pem,
            key: c.key_pem,
        }
    }
}

impl From<BundleCa> for CaPair {
    fn from(c: BundleCa) -> Self {
        Self {
            cert_pem: c.cert,
            key_pem: c.key,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BundleKeys {
    private_key: Sensitive,
    public_key: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BundleToken {
    id: String,
    secret: Sensitive,
    ttl_seconds: u64,
    expires_unix: i64,
}
