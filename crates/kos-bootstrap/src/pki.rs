//! Offline PKI: the three CAs kubeadm expects, the service-account key pair, client certificates signed by
//! the cluster CA, and the discovery hash joins pin.
//!
//! Keys are ECDSA P-256 (kubeadm and kube-apiserver accept it for CAs and for the service-account signing
//! key). Key material comes from aws-lc-rs's own generator; serial numbers come from the caller's RNG.

use base64::Engine;
use rand::CryptoRng;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

use crate::{Error, Result, Sensitive, token::hex};

/// How long the CAs live (kubeadm's own default for CAs).
pub const CA_VALIDITY: Duration = Duration::days(3650);
/// How long an admin client certificate lives.
pub const CLIENT_VALIDITY: Duration = Duration::days(365);
/// Backdating against clock skew between the workstation and the servers.
const SKEW: Duration = Duration::minutes(5);

/// A CA certificate (public) and its private key (secret), both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaPair {
    pub cert_pem: String,
    pub key_pem: Sensitive,
}

/// A key pair without a certificate (the service-account signing key): PKCS#8 private, SPKI public.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPairPem {
    pub private_pem: Sensitive,
    pub public_pem: String,
}

/// Which CA: its common name is what kubeadm itself would write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaKind {
    Cluster,
    Etcd,
    FrontProxy,
}

impl CaKind {
    pub fn common_name(self) -> &'static str {
        match self {
            Self::Cluster => "kubernetes",
            Self::Etcd => "etcd-ca",
            Self::FrontProxy => "front-proxy-ca",
        }
    }
}

fn serial<R: CryptoRng + ?Sized>(rng: &mut R) -> SerialNumber {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    b[0] &= 0x7f; // positive INTEGER
    b[0] |= 0x01; // and no leading zero byte, so the length is fixed
    SerialNumber::from_slice(&b)
}

fn ca_params(kind: CaKind) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, kind.common_name());
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    p
}

/// A self-signed CA valid for [`CA_VALIDITY`] from `now`.
pub fn generate_ca<R: CryptoRng + ?Sized>(
    rng: &mut R,
    kind: CaKind,
    now: OffsetDateTime,
) -> Result<CaPair> {
    let key = KeyPair::generate()?;
    let mut p = ca_params(kind);
    p.not_before = now - SKEW;
    p.not_after = now + CA_VALIDITY;
    p.serial_number = Some(serial(rng));
    let cert = p.self_signed(&key)?;
    Ok(CaPair {
        cert_pem: cert.pem(),
        key_pem: Sensitive::new(key.serialize_pem()),
    })
}

/// A fresh key pair for service-account token signing.
pub fn generate_key_pair() -> Result<KeyPairPem> {
    let key = KeyPair::generate()?;
    Ok(KeyPairPem {
        private_pem: Sensitive::new(key.serialize_pem()),
        public_pem: key.public_key_pem(),
    })
}

/// A client certificate (CN `cn`, O `orgs`) signed by `ca`, with a fresh key; returns (cert PEM, key PEM).
pub fn sign_client<R: CryptoRng + ?Sized>(
    rng: &mut R,
    ca: &CaPair,
    kind: CaKind,
    cn: &str,
    orgs: &[&str],
    now: OffsetDateTime,
) -> Result<(String, Sensitive)> {
    sign_client_valid_for(rng, ca, kind, cn, orgs, now, CLIENT_VALIDITY)
}

/// As [`sign_client`], valid for `validity` from `now`: short-lived identities (kos's etcd client) that
/// are never stored.
pub fn sign_client_valid_for<R: CryptoRng + ?Sized>(
    rng: &mut R,
    ca: &CaPair,
    kind: CaKind,
    cn: &str,
    orgs: &[&str],
    now: OffsetDateTime,
    validity: Duration,
) -> Result<(String, Sensitive)> {
    let ca_key = KeyPair::from_pem(ca.key_pem.expose())?;
    // The issuer DN and key identifier are rebuilt from the same parameters that made the CA, so the
    // client cert's issuer and authority key id match the stored CA certificate.
    let issuer = Issuer::new(ca_params(kind), ca_key);
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    p.not_before = now - SKEW;
    p.not_after = now + validity;
    p.serial_number = Some(serial(rng));
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), Sensitive::new(key.serialize_pem())))
}

/// `sha256:<hex>` over the certificate's SubjectPublicKeyInfo DER: kubeadm's `caCertHashes` format.
pub fn discovery_hash(cert_pem: &str) -> Result<String> {
    let der = pem_to_der(cert_pem, "CERTIFICATE")?;
    let spki = spki_of(&der)?;
    Ok(format!("sha256:{}", hex(&Sha256::digest(spki))))
}

/// Checks that a PEM private key parses (used when reading a bundle back).
pub(crate) fn check_key(pem: &Sensitive) -> Result<()> {
    KeyPair::from_pem(pem.expose())
        .map(drop)
        .map_err(|_| Error::Malformed {
            what: "private key PEM",
        })
}

pub(crate) fn pem_to_der(pem: &str, label: &'static str) -> Result<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let malformed = Error::Malformed {
        what: "PEM document",
    };
    let start = pem.find(&begin).ok_or(Error::Malformed {
        what: "PEM document",
    })? + begin.len();
    let stop = pem[start..].find(&end).ok_or(malformed)? + start;
    let body: String = pem[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| Error::Malformed { what: "PEM base64" })
}

/// One DER TLV: (tag, header length, content length).
fn tlv(der: &[u8]) -> Result<(u8, usize, usize)> {
    let bad = || Error::Malformed {
        what: "certificate DER",
    };
    let tag = *der.first().ok_or_else(bad)?;
    let first = *der.get(1).ok_or_else(bad)?;
    let (hdr, len) = if first < 0x80 {
        (2, usize::from(first))
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(bad());
        }
        let bytes = der.get(2..2 + n).ok_or_else(bad)?;
        (
            2 + n,
            bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
        )
    };
    if der.len() < hdr + len {
        return Err(bad());
    }
    Ok((tag, hdr, len))
}

/// The SubjectPublicKeyInfo element (tag and all) of an X.509 certificate.
fn spki_of(cert: &[u8]) -> Result<&[u8]> {
    let bad = || Error::Malformed {
        what: "certificate DER",
    };
    let (tag, hdr, _) = tlv(cert)?; // Certificate ::= SEQUENCE
    if tag != 0x30 {
        return Err(bad());
    }
    let tbs = &cert[hdr..];
    let (tag, hdr, len) = tlv(tbs)?; // TBSCertificate ::= SEQUENCE
    if tag != 0x30 {
        return Err(bad());
    }
    let mut rest = &tbs[hdr..hdr + len];
    // [0] version (optional), serial, signature, issuer, validity, subject, then subjectPublicKeyInfo.
    if rest.first() == Some(&0xa0) {
        let (_, h, l) = tlv(rest)?;
        rest = &rest[h + l..];
    }
    for _ in 0..5 {
        let (_, h, l) = tlv(rest)?;
        rest = &rest[h + l..];
    }
    let (tag, h, l) = tlv(rest)?;
    if tag != 0x30 {
        return Err(bad());
    }
    Ok(&rest[..h + l])
}
