//! What `kubeadm init phase upload-certs` puts into a running cluster, made by kos from the cluster's
//! secrets: joining control planes then download the shared CAs and keys with a certificate key that is
//! valid only while the `kubeadm-certs` Secret lives (two hours, through the bootstrap token that owns
//! it), and their user_data carries no private key.
//!
//! Mirrors kubeadm's cmd/kubeadm/app/phases/copycerts: AES-256-GCM with a random nonce prepended
//! (`cryptoutil.EncryptBytes`), one entry per file with `/` turned into `-`, owned by a short-lived
//! bootstrap token that has no usages, readable by the default node-token group through the
//! `kubeadm:kubeadm-certs` Role.

use std::time::Duration;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;
use rand::CryptoRng;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::token::BootstrapToken;
use crate::{ClusterSecrets, Error, Result, Sensitive};

/// kubeadm's `KubeadmCertsSecret`.
pub const KUBEADM_CERTS: &str = "kubeadm-certs";
/// kubeadm's `KubeadmCertsClusterRoleName` (a Role, despite the constant's name).
pub const KUBEADM_CERTS_ROLE: &str = "kubeadm:kubeadm-certs";
/// kubeadm's `DefaultCertTokenDuration`: how long the Secret lives.
pub const CERTS_TTL: Duration = Duration::from_secs(2 * 3600);
/// kubeadm's `NodeBootstrapTokenAuthGroup`: who joins, and so who may read the Secret.
const NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// The short-lived token that owns `kubeadm-certs`: the token cleaner deletes it when it expires and
/// the garbage collector then deletes the Secret. It has no usages, so it authenticates nobody.
pub fn ttl_token<R: CryptoRng + ?Sized>(rng: &mut R, now: OffsetDateTime) -> Result<Sensitive> {
    let t = BootstrapToken::generate(rng, now, CERTS_TTL);
    let expiration = t
        .expires
        .format(&Rfc3339)
        .map_err(|_| Error::invalid("token expiry", "cannot be written as RFC 3339"))?;
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{}", t.id), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "description": "Proxy for managing TTL for the kubeadm-certs secret",
            "token-id": t.id,
            "token-secret": t.secret.expose(),
            "expiration": expiration,
        },
    });
    Ok(Sensitive::new(doc.to_string()))
}

/// The `kube-system/kubeadm-certs` Secret: every shared CA and key sealed with `key` (64 hex digits),
/// owned by the TTL token Secret `owner_name` of uid `owner_uid`.
pub fn kubeadm_certs(
    secrets: &ClusterSecrets,
    key: &Sensitive,
    owner_name: &str,
    owner_uid: &str,
) -> Result<Sensitive> {
    let sealer = Sealer::new(key.expose())?;
    let files: [(&str, &str); 8] = [
        ("ca.crt", &secrets.ca.cert_pem),
        ("ca.key", secrets.ca.key_pem.expose()),
        ("front-proxy-ca.crt", &secrets.front_proxy_ca.cert_pem),
        (
            "front-proxy-ca.key",
            secrets.front_proxy_ca.key_pem.expose(),
        ),
        ("sa.pub", &secrets.service_account.public_pem),
        ("sa.key", secrets.service_account.private_pem.expose()),
        ("etcd/ca.crt", &secrets.etcd_ca.cert_pem),
        ("etcd/ca.key", secrets.etcd_ca.key_pem.expose()),
    ];
    let mut data = serde_json::Map::new();
    for (file, content) in files {
        let sealed = sealer.seal(content.as_bytes())?;
        data.insert(
            file.replace('/', "-"),
            Value::String(base64::engine::general_purpose::STANDARD.encode(sealed)),
        );
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": KUBEADM_CERTS,
            "namespace": "kube-system",
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Secret",
                "name": owner_name,
                "uid": owner_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "type": "Opaque",
        "data": data,
    });
    Ok(Sensitive::new(doc.to_string()))
}

/// The Role and RoleBinding that let joining nodes (the default node-token group) read the Secret.
pub fn rbac() -> [(&'static str, Value); 2] {
    [
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": KUBEADM_CERTS_ROLE, "namespace": "kube-system"},
                "rules": [{
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": [KUBEADM_CERTS],
                    "verbs": ["get"],
                }],
            }),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": KUBEADM_CERTS_ROLE, "namespace": "kube-system"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": KUBEADM_CERTS_ROLE,
                },
                "subjects": [{
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Group",
                    "name": NODE_TOKEN_GROUP,
                }],
            }),
        ),
    ]
}

struct Sealer(LessSafeKey);

impl Sealer {
    fn new(hex_key: &str) -> Result<Self> {
        let bad = || Error::invalid("certificate key", "is not 64 hex digits");
        if hex_key.len() != 64 {
            return Err(bad());
        }
        let bytes = (0..hex_key.len())
            .step_by(2)
            .map(|i| {
                hex_key
                    .get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(bad)?;
        let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| bad())?;
        Ok(Self(LessSafeKey::new(key)))
    }

    /// nonce ‖ ciphertext ‖ tag, as Go's `gcm.Seal(nonce, nonce, data, nil)`.
    fn seal(&self, data: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce)
            .map_err(|_| Error::invalid("certificate key", "no randomness for a nonce"))?;
        let mut sealed = data.to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .map_err(|_| Error::invalid("certificate key", "sealing failed"))?;
        let mut out = nonce.to_vec();
        out.extend(sealed);
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn open(hex_key: &str, sealed: &[u8]) -> Vec<u8> {
        let bytes: Vec<u8> = (0..64)
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex_key[i..i + 2], 16).unwrap())
            .collect();
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &bytes).unwrap());
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let mut buf = rest.to_vec();
        key.open_in_place(
            Nonce::try_assume_unique_for_key(nonce).unwrap(),
            Aad::empty(),
            &mut buf,
        )
        .unwrap()
        .to_vec()
    }

    #[test]
    fn every_shared_file_is_sealed_with_the_key_and_owned_by_the_token() {
        let mut rng = rand::rng();
        let now = OffsetDateTime::now_utc();
        let secrets = ClusterSecrets::generate(&mut rng, now, Duration::from_secs(3600)).unwrap();
        let key = crate::token::certificate_key(&mut rng);
        let doc: Value = serde_json::from_str(
            kubeadm_certs(&secrets, &key, "bootstrap-token-abcdef", "u1")
                .unwrap()
                .expose(),
        )
        .unwrap();
        let data = doc["data"].as_object().unwrap();
        let names: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ca.crt",
                "ca.key",
                "etcd-ca.crt",
                "etcd-ca.key",
                "front-proxy-ca.crt",
                "front-proxy-ca.key",
                "sa.key",
                "sa.pub"
            ]
        );
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(data["ca.key"].as_str().unwrap())
            .unwrap();
        // Sealed: the plain key is not in the Secret, and the certificate key opens it.
        assert!(!String::from_utf8_lossy(&sealed).contains("PRIVATE KEY"));
        assert_eq!(
            open(key.expose(), &sealed),
            secrets.ca.key_pem.expose().as_bytes()
        );
        let owner = &doc["metadata"]["ownerReferences"][0];
        assert_eq!(owner["name"], "bootstrap-token-abcdef");
        assert_eq!(owner["uid"], "u1");
        assert_eq!(owner["controller"], true);
        assert!(kubeadm_certs(&secrets, &Sensitive::new("zz"), "n", "u").is_err());
    }

    #[test]
    fn the_ttl_token_authenticates_nobody_and_lives_two_hours() {
        let now = OffsetDateTime::now_utc();
        let doc: Value =
            serde_json::from_str(ttl_token(&mut rand::rng(), now).unwrap().expose()).unwrap();
        let data = doc["stringData"].as_object().unwrap();
        assert!(
            data.keys()
                .all(|k| !k.starts_with("usage-") && k != "auth-extra-groups")
        );
        let two_hours = (now + time::Duration::hours(2)).format(&Rfc3339).unwrap();
        assert_eq!(data["expiration"], two_hours.as_str());
        assert_eq!(
            doc["metadata"]["name"],
            format!("bootstrap-token-{}", data["token-id"].as_str().unwrap())
        );
    }
}
