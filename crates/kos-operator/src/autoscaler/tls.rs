//! Mutual TLS of the autoscaler endpoint: the operator's certificate and key, the CA that signs the
//! autoscalers' client certificates, and which Cluster a client certificate speaks for (its common
//! name, `<namespace>/<name>`). A client without a certificate of that CA never gets a handshake.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The files of a directory a cert-manager Certificate's Secret is mounted as.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";
pub const CA_FILE: &str = "ca.crt";

/// Why the endpoint's TLS could not be set up. Never holds key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The server's TLS configuration from `dir` (`tls.crt`, `tls.key`, `ca.crt`).
///
/// # Errors
/// A file that cannot be read.
pub fn server_config(dir: &Path) -> Result<ServerTlsConfig, TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    let identity = Identity::from_pem(read(CERT_FILE)?, read(KEY_FILE)?);
    Ok(ServerTlsConfig::new()
        .identity(identity)
        .client_ca_root(Certificate::from_pem(read(CA_FILE)?)))
}

/// The Cluster (`namespace`, `name`) a client certificate (DER, the chain's first) speaks for.
#[must_use]
pub fn cluster_of(der: &[u8]) -> Option<(String, String)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    let (namespace, name) = cn.split_once('/')?;
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    (label(namespace) && label(name)).then(|| (namespace.to_owned(), name.to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cert(cn: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn a_client_certificate_names_one_cluster() {
        assert_eq!(
            cluster_of(&cert("fleet/demo")),
            Some(("fleet".into(), "demo".into()))
        );
        for bad in [
            "demo",
            "fleet/",
            "/demo",
            "Fleet/demo",
            "fleet/de/mo",
            "fleet/de mo",
        ] {
            assert_eq!(cluster_of(&cert(bad)), None, "{bad}");
        }
        assert_eq!(cluster_of(b"not a certificate"), None);
    }
}
