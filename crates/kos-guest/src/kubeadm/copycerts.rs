//! kubeadm's `copycerts` (cmd/kubeadm/app/phases/copycerts): `init --upload-certs` encrypts the shared
//! certificates and keys with the certificate key (AES-256-GCM, a random nonce prepended to the
//! sealed data, as kubeadm's `cryptoutil.EncryptBytes`) into the `kube-system/kubeadm-certs` Secret,
//! one entry per file with `/` turned into `-`; a joining control plane decrypts them with the key its
//! JoinConfiguration carries. Real encryption, so "decryptable with this key" is an honest check.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

/// The files kubeadm transfers (local etcd), relative to the certificates directory.
pub const SHARED_FILES: &[&str] = &[
    "ca.crt",
    "ca.key",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
    "sa.pub",
    "sa.key",
    "etcd/ca.crt",
    "etcd/ca.key",
];

/// The Secret entry of a file: kubeadm's `certOrKeyNameToSecretName`.
pub fn secret_key(file: &str) -> String {
    file.replace('/', "-")
}

fn key(hex_key: &str) -> Result<LessSafeKey, String> {
    let bytes =
        hex_decode(hex_key).ok_or("error decoding certificate key: encoding/hex: invalid byte")?;
    let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
        .map_err(|_| "crypto/aes: invalid key size".to_owned())?;
    Ok(LessSafeKey::new(unbound))
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Seals `data` with the hex key: nonce || ciphertext || tag.
pub fn encrypt(data: &[u8], hex_key: &str) -> Result<Vec<u8>, String> {
    let k = key(hex_key)?;
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).map_err(|_| "cannot draw a nonce".to_owned())?;
    let mut sealed = data.to_vec();
    k.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::empty(),
        &mut sealed,
    )
    .map_err(|_| "cannot encrypt".to_owned())?;
    let mut out = nonce.to_vec();
    out.extend(sealed);
    Ok(out)
}

/// Opens what [`encrypt`] sealed; a wrong key is Go's "cipher: message authentication failed".
pub fn decrypt(data: &[u8], hex_key: &str) -> Result<Vec<u8>, String> {
    let k = key(hex_key)?;
    if data.len() < NONCE_LEN {
        return Err("data to decrypt is too small".into());
    }
    let (nonce, sealed) = data.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "bad nonce".to_owned())?;
    let mut buf = sealed.to_vec();
    let plain = k
        .open_in_place(nonce, Aad::empty(), &mut buf)
        .map_err(|_| "cipher: message authentication failed".to_owned())?;
    Ok(plain.to_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_right_key_opens() {
        let k1 = "11".repeat(32);
        let k2 = "22".repeat(32);
        let sealed = encrypt(b"-----BEGIN CERTIFICATE-----", &k1).unwrap();
        assert_eq!(
            decrypt(&sealed, &k1).unwrap(),
            b"-----BEGIN CERTIFICATE-----"
        );
        assert_eq!(
            decrypt(&sealed, &k2).unwrap_err(),
            "cipher: message authentication failed"
        );
        assert_eq!(secret_key("etcd/ca.key"), "etcd-ca.key");
    }
}
