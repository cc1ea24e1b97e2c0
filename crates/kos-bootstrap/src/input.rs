//! What the CLI tells this crate about the cluster and each node. These are this crate's own types so the
//! renderer does not depend on the spec format; `validate` rejects what kubeadm, kubelet or cloud-init
//! would reject later on a machine nobody can log into.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use secrecy::SecretString;

use crate::{Error, Result};

/// A Kubernetes release, `major.minor.patch` (a leading `v` is accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KubeVersion {
    /// `v1.36.4`, as kubeadm and `kubeadm version -o short` write it.
    pub fn tag(&self) -> String {
        format!("v{self}")
    }

    /// `v1.36`: the pkgs.k8s.io channel.
    pub fn channel(&self) -> String {
        format!("v{}.{}", self.major, self.minor)
    }

    /// The group bound to cluster-admin for admin kubeconfigs (kubeadm's admin.conf since 1.29).
    pub fn admin_group(&self) -> &'static str {
        "kubeadm:cluster-admins"
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for KubeVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(
                "kubernetes version",
                format!("{s:?} is not MAJOR.MINOR.PATCH, e.g. 1.31.4"),
            )
        };
        let core = s.strip_prefix('v').unwrap_or(s);
        let mut it = core.split('.').map(|p| {
            if p.is_empty()
                || !p.bytes().all(|b| b.is_ascii_digit())
                || (p.len() > 1 && p.starts_with('0'))
            {
                Err(bad())
            } else {
                p.parse::<u32>().map_err(|_| bad())
            }
        });
        let (Some(major), Some(minor), Some(patch), None) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(bad());
        };
        let v = KubeVersion {
            major: major?,
            minor: minor?,
            patch: patch?,
        };
        let pins = crate::addons::Pins::builtin()?;
        if v.major != 1 || pins.images_for(v.minor).is_none() {
            let minors: Vec<String> = pins.supported_minors().map(|m| format!("1.{m}")).collect();
            return Err(Error::invalid(
                "kubernetes version",
                format!(
                    "{v} is not supported (kos supports {}; the newest is {})",
                    minors.join(", "),
                    pins.kubernetes.default
                ),
            ));
        }
        Ok(v)
    }
}

/// The control-plane endpoint every node uses: the pre-allocated floating IP or a DNS name, and the port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiEndpoint {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for ApiEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            _ => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// The CNI applied by the first control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cni {
    Calico,
    Cilium,
    Flannel,
    KubeRouter,
}

impl Cni {
    /// The key in the pins table.
    pub fn key(self) -> &'static str {
        match self {
            Self::Calico => "calico",
            Self::Cilium => "cilium",
            Self::Flannel => "flannel",
            Self::KubeRouter => "kube-router",
        }
    }
}

/// An upstream manifest and the sha256 it must have: lets a user pin a CNI manifest the built-in table
/// cannot vouch for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestPin {
    pub url: String,
    pub sha256: String,
}

/// Which cloud controller manager runs the OpenStack integration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ccm {
    /// The upstream openstack-cloud-controller-manager at the pinned image.
    Upstream,
    /// kos-ccm at the given image reference (same manifests, same cloud.conf).
    Kos { image: String },
}

/// Which storage driver the first control plane installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Csi {
    /// cinder-csi at the pinned images, and a default StorageClass.
    Cinder,
    /// kos-csi at the given image reference (the same driver name, cloud.conf, sidecars and
    /// StorageClass as cinder-csi).
    Kos { image: String },
    /// None: the user brings their own (or needs no volumes).
    None,
}

/// What goes into `cloud.conf` for the CCM and cinder-csi. The credential is the per-cluster
/// application credential the deployer creates.
#[derive(Debug, Clone)]
pub struct CloudConf {
    pub auth_url: String,
    pub region: String,
    pub application_credential_id: String,
    pub application_credential_secret: SecretString,
    pub floating_network_id: String,
    pub subnet_id: String,
    /// The Octavia provider of the Services' load balancers (`lb-provider`); `None`: the cloud's default.
    pub lb_provider: Option<String>,
    /// The PEM bundle that verifies the cloud's endpoints (clouds.yaml `cacert`), for `ca-file`.
    pub ca_cert: Option<String>,
    /// The Cinder zone CSI volumes are made in when the nodes' compute zones are not Cinder's:
    /// `[BlockStorage] ignore-volume-az` and the default StorageClass's `availability`, so a volume
    /// is made there and is reachable from the node that asked (Nova attaches across zones).
    /// `None`: a volume goes to its node's zone, as upstream does by default.
    pub csi_volume_zone: Option<String>,
}

/// How joining control planes get the shared CA and service-account keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PkiDelivery {
    /// Every control plane's user-data carries the PKI (0600): a control plane can be re-provisioned and
    /// join at any time, long after `kubeadm-certs` expired or was deleted. Joins carry no certificateKey.
    #[default]
    AllControlPlanes,
    /// Only the first control plane carries the PKI; it uploads it (`--upload-certs`, 2 h lifetime) and
    /// the other control planes download it with `controlPlane.certificateKey`.
    UploadCerts,
}

/// The whole cluster, as far as bootstrap is concerned.
#[derive(Debug, Clone)]
pub struct ClusterInput {
    /// The kos cluster name: kubeadm clusterName, CCM `--cluster-name`, CSI `--cluster`, context `kos-<name>`.
    pub name: String,
    pub kubernetes_version: KubeVersion,
    pub endpoint: ApiEndpoint,
    /// Extra API server certificate SANs (floating IP, VIP, DNS name); the endpoint host is always added.
    pub cert_sans: Vec<String>,
    pub pod_cidr: IpNet,
    pub service_cidr: IpNet,
    pub cni: Cni,
    /// Overrides the pins table's manifest for `cni` (use it to supply a verified sha256).
    pub cni_manifest: Option<ManifestPin>,
    pub ccm: Ccm,
    pub csi: Csi,
    pub cloud: CloudConf,
    pub pki_delivery: PkiDelivery,
    /// How many nodes (control planes + workers) will join: the first control plane deletes the bootstrap
    /// token and `kubeadm-certs` once that many are registered (or the token expired).
    pub expected_nodes: u32,
    /// kubelet `serverTLSBootstrap`: off by default because nothing approves serving-cert CSRs yet.
    pub server_tls_bootstrap: bool,
    /// Encryption at rest for Secrets: every control plane gets the configuration file, the first
    /// one's ClusterConfiguration the flag and the volume; workers nothing. `None`: no encryption.
    pub encryption: Option<crate::Encryption>,
    /// Mirrors and proxy (`Default`: the public internet, directly).
    pub airgap: crate::Airgap,
}

/// A node's role in the bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs `kubeadm init`, then the addon step.
    InitControlPlane,
    /// Runs `kubeadm join --control-plane`.
    JoinControlPlane,
    /// Runs `kubeadm join`.
    Worker,
}

impl Role {
    pub fn is_control_plane(self) -> bool {
        !matches!(self, Self::Worker)
    }

    /// The value the bootstrap script switches on.
    pub fn key(self) -> &'static str {
        match self {
            Self::InitControlPlane => "init",
            Self::JoinControlPlane => "join-control-plane",
            Self::Worker => "worker",
        }
    }
}

/// A taint effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A taint the node registers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
}

/// One node: its role and the pool it belongs to.
#[derive(Debug, Clone)]
pub struct NodeInput {
    pub role: Role,
    pub pool: String,
    /// Extra kubelet `--node-labels`; the pool label `kos/pool=<pool>` is always added.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

/// The label every node carries with its pool name.
pub const POOL_LABEL: &str = "kos/pool";

impl ClusterInput {
    /// Rejects what would fail later on the machine.
    pub fn validate(&self) -> Result<()> {
        dns_label("cluster name", &self.name)?;
        if !(is_ip(&self.endpoint.host) || is_dns_subdomain(&self.endpoint.host)) {
            return Err(Error::invalid(
                "endpoint",
                "host must be an IP address or a DNS name",
            ));
        }
        if self.endpoint.port == 0 {
            return Err(Error::invalid("endpoint", "port must not be 0"));
        }
        for san in &self.cert_sans {
            if !(is_ip(san) || is_dns_subdomain(san) || wildcard_dns(san)) {
                return Err(Error::invalid(
                    "cert SAN",
                    format!("{san:?} is neither an IP address nor a DNS name"),
                ));
            }
        }
        if self.pod_cidr.addr().is_ipv4() != self.service_cidr.addr().is_ipv4() {
            return Err(Error::invalid(
                "CIDRs",
                "pod and service CIDRs must be of the same IP family",
            ));
        }
        if self.pod_cidr.contains(&self.service_cidr.network())
            || self.service_cidr.contains(&self.pod_cidr.network())
        {
            return Err(Error::invalid("CIDRs", "pod and service CIDRs overlap"));
        }
        if let Some(pin) = &self.cni_manifest {
            validate_pin("cni manifest", pin)?;
        }
        if let Ccm::Kos { image } = &self.ccm {
            image_ref("ccm image", image)?;
        }
        if let Csi::Kos { image } = &self.csi {
            image_ref("csi image", image)?;
        }
        let c = &self.cloud;
        for (field, v) in [
            ("auth_url", c.auth_url.as_str()),
            ("region", c.region.as_str()),
            (
                "application_credential_id",
                c.application_credential_id.as_str(),
            ),
            ("floating_network_id", c.floating_network_id.as_str()),
            ("subnet_id", c.subnet_id.as_str()),
        ] {
            single_line(field, v)?;
        }
        if let Some(z) = &c.csi_volume_zone {
            single_line("csi_volume_zone", z)?;
            if z.is_empty() {
                return Err(Error::invalid("csi_volume_zone", "must not be empty"));
            }
        }
        if !(c.auth_url.starts_with("https://") || c.auth_url.starts_with("http://")) {
            return Err(Error::invalid("auth_url", "must be an http(s) URL"));
        }
        single_line(
            "application_credential_secret",
            secrecy::ExposeSecret::expose_secret(&c.application_credential_secret),
        )?;
        if self.expected_nodes == 0 {
            return Err(Error::invalid(
                "expected_nodes",
                "at least the first control plane",
            ));
        }
        Ok(())
    }
}

impl NodeInput {
    /// Rejects labels the kubelet refuses to set on itself and malformed taints.
    pub fn validate(&self) -> Result<()> {
        dns_label("pool name", &self.pool)?;
        for (k, v) in &self.labels {
            qualified_name("node label key", k)?;
            label_value("node label value", v)?;
            if let Some((prefix, _)) = k.split_once('/') {
                let restricted = ["kubernetes.io", "k8s.io"]
                    .iter()
                    .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")));
                let allowed = ["kubelet.kubernetes.io", "node.kubernetes.io"]
                    .iter()
                    .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")));
                if restricted && !allowed {
                    return Err(Error::invalid(
                        "node label key",
                        format!(
                            "{k:?}: the kubelet may not set labels under {prefix} (NodeRestriction)"
                        ),
                    ));
                }
            }
        }
        for t in &self.taints {
            qualified_name("taint key", &t.key)?;
            if let Some(v) = &t.value {
                label_value("taint value", v)?;
            }
        }
        Ok(())
    }
}

fn validate_pin(field: &str, pin: &ManifestPin) -> Result<()> {
    if !pin.url.starts_with("https://")
        || pin
            .url
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '"')
    {
        return Err(Error::invalid(
            field,
            "url must be an https URL without quotes or spaces",
        ));
    }
    if pin.sha256.len() != 64
        || !pin
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(Error::invalid(
            field,
            "sha256 must be 64 lowercase hex digits",
        ));
    }
    Ok(())
}

/// Whether `image` can stand as a container image reference in a manifest: 1–255 characters of
/// `[A-Za-z0-9./:_@-]`, starting with a letter or digit. The spec's validation asks the same, so a
/// reference the bootstrap would refuse is refused before anything is made.
#[must_use]
pub fn is_image_ref(image: &str) -> bool {
    !image.is_empty()
        && image.len() <= 255
        && image
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"./:-_@".contains(&b))
        && image
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

pub(crate) fn image_ref(field: &str, image: &str) -> Result<()> {
    if is_image_ref(image) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("{image:?} is not an image reference"),
        ))
    }
}

fn single_line(field: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must be a non-empty single line"));
    }
    Ok(())
}

fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

fn wildcard_dns(s: &str) -> bool {
    s.strip_prefix("*.").is_some_and(is_dns_subdomain)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn dns_label(field: &str, s: &str) -> Result<()> {
    if is_dns_label(s) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("{s:?} is not a DNS label (a-z, 0-9, '-', at most 63)"),
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn qualified_name(field: &str, s: &str) -> Result<()> {
    let ok = match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("{s:?} is not a qualified name ([prefix/]name)"),
        ))
    }
}

fn label_value(field: &str, s: &str) -> Result<()> {
    if s.is_empty() || is_label_name(s) {
        Ok(())
    } else {
        Err(Error::invalid(field, format!("{s:?} is not a label value")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_strictly() {
        let v: KubeVersion = "v1.36.4".parse().unwrap();
        assert_eq!((v.tag(), v.channel()), ("v1.36.4".into(), "v1.36".into()));
        // Outside the three supported minors: refused, naming what is supported.
        let err = "1.33.1".parse::<KubeVersion>().unwrap_err().to_string();
        assert!(err.contains("1.34, 1.35, 1.36"), "{err}");
        for bad in [
            "1.36", "1.36.4.1", "1.36.x", "2.0.0", "1.20.0", "1.036.0", "", "1..1", "1.37.0",
        ] {
            assert!(bad.parse::<KubeVersion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoint_brackets_ipv6() {
        let e = ApiEndpoint {
            host: "2001:db8::1".into(),
            port: 6443,
        };
        assert_eq!(e.to_string(), "[2001:db8::1]:6443");
    }
}
