//! The cluster identity a node's files carry: the CA certificate and its discovery hash, computed
//! here from the certificate's SubjectPublicKeyInfo with x509-parser and sha2 (never with
//! kos-bootstrap's code, so the two cannot agree on a mistake).

use sha2::{Digest, Sha256};

/// `sha256:<hex>` of the SPKI DER of the first certificate in `pem`.
pub fn discovery_hash(pem: &[u8]) -> Result<String, String> {
    let (_, doc) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| format!("failed to parse the CA certificate PEM: {e}"))?;
    let cert = doc
        .parse_x509()
        .map_err(|e| format!("failed to parse the CA certificate: {e}"))?;
    let spki = cert.tbs_certificate.subject_pki.raw;
    Ok(format!("sha256:{}", hex(&Sha256::digest(spki))))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
