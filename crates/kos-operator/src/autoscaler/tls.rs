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
    #[error(
        "the TLS files in {dir} make no server configuration (is tls.key the key of tls.crt?): {}",
        kos_lifecycle::api::chain(source)
    )]
    Invalid {
        dir: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("signing the endpoint's certificate for {host} with {dir}/ca.key: {source}")]
    Sign {
        host: String,
        dir: String,
        #[source]
        source: rcgen::Error,
    },
}

/// The server's TLS configuration from `dir` (`tls.crt`, `tls.key`, `ca.crt`). Without `tls.crt`
/// but with the CA's `ca.key` and the address the autoscalers dial (`advertised`, `host:port`),
/// the operator signs its own serving certificate for that host (kept in memory, a year long), so
/// that nothing but the CA need be made for it.
///
/// # Errors
/// A file that cannot be read, or a CA that cannot sign.
fn server_config_for(dir: &Path, advertised: Option<&str>) -> Result<ServerTlsConfig, TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    let ca = read(CA_FILE)?;
    let identity = match advertised {
        Some(address) if !dir.join(CERT_FILE).exists() => {
            let key = read(super::install::CA_KEY_FILE)?;
            let host = host_of(address);
            let (cert, key) = serving(&ca, &key, host).map_err(|source| TlsError::Sign {
                host: host.to_owned(),
                dir: dir.display().to_string(),
                source,
            })?;
            Identity::from_pem(cert, key)
        }
        _ => Identity::from_pem(read(CERT_FILE)?, read(KEY_FILE)?),
    };
    Ok(ServerTlsConfig::new()
        .identity(identity)
        .client_ca_root(Certificate::from_pem(ca)))
}

/// How often the endpoint looks at its files again (cert-manager renews a Certificate's Secret in
/// place, and kubelet swaps the mounted files within about a minute of that).
pub const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The endpoint's TLS as loaded, and what to look at to know it is out of date: the files it came
/// from changed, or the certificate the operator signed itself has lived two thirds of its life.
pub struct Tls {
    dir: PathBuf,
    advertised: Option<String>,
    /// A digest of the directory's four files as they were read (never their bytes: `ca.key` and
    /// `tls.key` are secrets).
    stamp: u64,
    config: ServerTlsConfig,
    /// When the certificate signed in memory is to be replaced.
    renew_at: Option<std::time::Instant>,
    poll: std::time::Duration,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("dir", &self.dir)
            .field("advertised", &self.advertised)
            .field("renew_at", &self.renew_at)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// The TLS of `dir`, as [`server_config_for`] makes it.
    ///
    /// # Errors
    /// A file that cannot be read, or a CA that cannot sign.
    pub fn load(dir: &Path, advertised: Option<&str>) -> Result<Tls, TlsError> {
        let stamp = stamp(dir);
        let config = server_config_for(dir, advertised)?;
        // What rustls refuses (a key that is not the certificate's) is told now, not when the
        // endpoint is to serve with it.
        tonic::transport::Server::builder()
            .tls_config(config.clone())
            .map_err(|source| TlsError::Invalid {
                dir: dir.display().to_string(),
                source,
            })?;
        let signed_here = advertised.is_some() && !dir.join(CERT_FILE).exists();
        let renew_at = signed_here.then(|| {
            let life = std::time::Duration::from_secs(
                u64::try_from(super::install::CERT_DAYS).unwrap_or(1) * 86_400,
            );
            std::time::Instant::now() + life * 2 / 3
        });
        Ok(Tls {
            dir: dir.to_owned(),
            advertised: advertised.map(str::to_owned),
            stamp,
            config,
            renew_at,
            poll: RELOAD_EVERY,
        })
    }

    /// Looks at the files every `poll` instead of every [`RELOAD_EVERY`].
    #[must_use]
    pub fn polling_every(mut self, poll: std::time::Duration) -> Tls {
        self.poll = poll;
        self
    }

    /// The server configuration to serve with now.
    #[must_use]
    pub fn config(&self) -> ServerTlsConfig {
        self.config.clone()
    }

    /// How long to wait between looks.
    #[must_use]
    pub fn poll(&self) -> std::time::Duration {
        self.poll
    }

    /// The TLS to serve with from now on, when this one is out of date; `None` while it is not.
    ///
    /// # Errors
    /// The files changed but do not make a configuration (kept: the caller serves on with this one).
    pub fn reloaded(&self) -> Result<Option<Tls>, TlsError> {
        let due = self
            .renew_at
            .is_some_and(|at| std::time::Instant::now() >= at);
        if !due && stamp(&self.dir) == self.stamp {
            return Ok(None);
        }
        Tls::load(&self.dir, self.advertised.as_deref()).map(|t| Some(t.polling_every(self.poll)))
    }
}

/// A digest of `dir`'s TLS files (a missing one counts as missing).
fn stamp(dir: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for name in [CA_FILE, super::install::CA_KEY_FILE, CERT_FILE, KEY_FILE] {
        std::fs::read(dir.join(name)).ok().hash(&mut h);
    }
    h.finish()
}

/// The host of `host:port` (`[v6]:port` too; an address without a port is a host).
fn host_of(address: &str) -> &str {
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(h, _)| h);
    }
    match address.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => address,
    }
}

/// A serving certificate for `host` (an IP address or a DNS name, in its subjectAltName) signed
/// by the CA: `(cert PEM, key PEM)`.
fn serving(ca_pem: &[u8], ca_key: &[u8], host: &str) -> Result<(String, String), rcgen::Error> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(&text(ca_pem), rcgen::KeyPair::from_pem(&text(ca_key))?)?;
    let san = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => rcgen::SanType::IpAddress(ip),
        Err(_) => rcgen::SanType::DnsName(host.to_owned().try_into()?),
    };
    leaf(
        &issuer,
        host,
        vec![san],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    )
}

/// A certificate signed by `issuer` for one `usage`: common name `cn`, `sans`, valid from five
/// minutes ago for [`super::install::CERT_DAYS`]: `(cert PEM, key PEM)`. The endpoint's and each
/// autoscaler's.
pub(crate) fn leaf(
    issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
    cn: &str,
    sans: Vec<rcgen::SanType>,
    usage: rcgen::ExtendedKeyUsagePurpose,
) -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = sans;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(super::install::CERT_DAYS);
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
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

    /// A CA's certificate and key, PEM.
    fn ca() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn the_tls_is_reloaded_when_its_files_change_or_its_own_certificate_is_due() {
        let dir = tempfile::tempdir().unwrap();
        let (pem, key) = ca();
        std::fs::write(dir.path().join(CA_FILE), &pem).unwrap();
        std::fs::write(dir.path().join(super::super::install::CA_KEY_FILE), &key).unwrap();
        let mut tls = Tls::load(dir.path(), Some("10.0.0.5:8086")).unwrap();
        assert!(tls.reloaded().unwrap().is_none(), "nothing changed");
        let due = tls.renew_at.expect("a certificate signed here is renewed");
        let left = due - std::time::Instant::now();
        assert!(
            left > std::time::Duration::from_secs(200 * 86_400),
            "renewed after {left:?}"
        );
        // Two thirds of its year gone.
        tls.renew_at = Some(std::time::Instant::now());
        assert!(tls.reloaded().unwrap().is_some(), "a due certificate kept");
        // A CA cert-manager rotated.
        let tls = Tls::load(dir.path(), Some("10.0.0.5:8086")).unwrap();
        let (pem, key) = ca();
        std::fs::write(dir.path().join(CA_FILE), &pem).unwrap();
        std::fs::write(dir.path().join(super::super::install::CA_KEY_FILE), &key).unwrap();
        let next = tls.reloaded().unwrap().expect("new files read");
        assert!(next.reloaded().unwrap().is_none());
        // Files that no longer make a configuration: an error, and the caller keeps its own.
        std::fs::remove_file(dir.path().join(CA_FILE)).unwrap();
        assert!(next.reloaded().is_err());
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let (ca_pem, ca_key) = ca();
        std::fs::write(dir.path().join(CA_FILE), &ca_pem).unwrap();
        let issuer =
            rcgen::Issuer::from_ca_cert_pem(&ca_pem, rcgen::KeyPair::from_pem(&ca_key).unwrap())
                .unwrap();
        let san = || vec![rcgen::SanType::DnsName("localhost".try_into().unwrap())];
        let usage = rcgen::ExtendedKeyUsagePurpose::ServerAuth;
        let (cert, _) = leaf(&issuer, "kos-operator", san(), usage.clone()).unwrap();
        let (_, other_key) = leaf(&issuer, "kos-operator", san(), usage).unwrap();
        std::fs::write(dir.path().join(CERT_FILE), cert).unwrap();
        std::fs::write(dir.path().join(KEY_FILE), other_key).unwrap();
        let e = Tls::load(dir.path(), None).unwrap_err();
        assert!(matches!(e, TlsError::Invalid { .. }), "{e}");
        assert!(
            e.to_string().contains("is tls.key the key of tls.crt"),
            "{e}"
        );
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

    #[test]
    fn hosts_of_advertised_addresses() {
        assert_eq!(host_of("kos.example.net:8443"), "kos.example.net");
        assert_eq!(host_of("10.0.0.5:8443"), "10.0.0.5");
        assert_eq!(host_of("[fd00::5]:8443"), "fd00::5");
        assert_eq!(host_of("kos.example.net"), "kos.example.net");
    }

    /// Without `tls.crt`, the CA signs the endpoint's certificate for the advertised host, for
    /// serving only; without the address, `tls.crt` is required as before.
    #[test]
    fn the_ca_signs_the_endpoints_certificate_when_none_is_given() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "autoscaler CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CA_FILE), ca_cert.pem()).unwrap();
        assert!(matches!(
            server_config_for(dir.path(), None),
            Err(TlsError::Read { .. })
        ));
        assert!(matches!(
            server_config_for(dir.path(), Some("10.0.0.5:8443")),
            Err(TlsError::Read { .. })
        ));
        std::fs::write(
            dir.path().join(super::super::install::CA_KEY_FILE),
            ca_key.serialize_pem(),
        )
        .unwrap();
        assert!(server_config_for(dir.path(), Some("10.0.0.5:8443")).is_ok());
        for (host, ip) in [("10.0.0.5", true), ("kos.example.net", false)] {
            let (pem, _) = serving(
                ca_cert.pem().as_bytes(),
                ca_key.serialize_pem().as_bytes(),
                host,
            )
            .unwrap();
            let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
            let cert = der.parse_x509().unwrap();
            assert_eq!(
                cert.issuer()
                    .iter_common_name()
                    .next()
                    .unwrap()
                    .as_str()
                    .unwrap(),
                "autoscaler CA"
            );
            let san = cert.subject_alternative_name().unwrap().unwrap();
            let named = san.value.general_names.iter().any(|n| match n {
                x509_parser::extensions::GeneralName::IPAddress(b) => ip && *b == [10, 0, 0, 5],
                x509_parser::extensions::GeneralName::DNSName(d) => !ip && *d == host,
                _ => false,
            });
            assert!(named, "{host}: {:?}", san.value.general_names);
            let eku = cert.extended_key_usage().unwrap().unwrap();
            assert!(eku.value.server_auth && !eku.value.client_auth);
        }
    }
}
