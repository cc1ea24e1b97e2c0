//! The narrow seam between the guest and whatever hosts it (kos-sim's Nova in stage 2, the tests
//! now). The host tells the guest what happens to a server ([`ServerEvent`]) and answers three
//! questions through [`Host`]: what time it is (the host's clock, which kos-sim scales), where a
//! server's console line goes, and which servers an endpoint reaches from a given server (the
//! network: floating IP, load balancer and its members). What runs on a server (an API server of
//! which cluster, a kubelet) is the guest's own state, so the host never needs to know Kubernetes.
//!
//! # Guarantees
//! - The guest never reads the wall clock: every time it stores or compares comes from
//!   [`Host::now`], so a test that advances its clock gets the same result on any machine.
//! - The guest calls the host only from [`crate::Guest::handle`] and [`crate::Guest::tick`], never
//!   in the background: the host drives progress by calling `tick` when its clock moved.
//!
//! # Assumptions
//! - [`Host::api_backends`] lists, in the order a client would reach them, the servers whose port
//!   the endpoint forwards to from `from` (one for a floating IP on a server, the pool members for a
//!   load balancer, none when nothing routes). Health is the guest's business: it skips servers that
//!   are off or run no API server.

use std::fmt;

use time::OffsetDateTime;

/// A server, by its Nova id (also its instance id: a re-created server is a new id).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ServerId(pub String);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ServerId {
    fn from(s: &str) -> ServerId {
        ServerId(s.to_owned())
    }
}

/// What the metadata service tells cloud-init about the instance (its `v1.*` instance-data keys).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Metadata {
    /// `v1.instance_id`: the Nova server id.
    pub instance_id: String,
    /// `v1.local_hostname`: the server's hostname (Nova: the name, sanitised).
    pub local_hostname: String,
    /// `v1.availability_zone`.
    pub availability_zone: String,
    /// `v1.region`.
    pub region: String,
}

/// What the image brings: the OS (the bootstrap installs packages on Debian and Ubuntu only) and a
/// kubeadm/kubelet baked in (a prebuilt image), if any.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Image {
    /// `ID` of `/etc/os-release` (`ubuntu`, `debian`, `cirros`, ...).
    pub os_id: String,
    /// `VERSION_CODENAME` of `/etc/os-release` (`noble`, `bookworm`; empty when unknown): the
    /// release whose suites apt fetches.
    #[serde(default)]
    pub release: String,
    /// `kubeadm version -o short` of a prebuilt image (`v1.31.4`), `None` when it has none.
    pub kubernetes: Option<String>,
}

impl Image {
    /// `VERSION_CODENAME` of a Debian or Ubuntu release, from Glance's `os_version` (`24.04`, `12`).
    pub fn codename(os_id: &str, version: &str) -> &'static str {
        match (os_id, version.trim()) {
            ("ubuntu", "22.04") => "jammy",
            ("ubuntu", "24.04") => "noble",
            ("debian", "11") => "bullseye",
            ("debian", "12") => "bookworm",
            ("debian", "13") => "trixie",
            _ => "",
        }
    }

    /// The archives the image's own apt sources name: (`primary`, `security`), as the
    /// distributions' cloud images ship them.
    pub fn apt_archives(&self) -> (&'static str, &'static str) {
        match self.os_id.as_str() {
            "debian" => (
                "http://deb.debian.org/debian",
                "http://deb.debian.org/debian-security",
            ),
            _ => (
                "http://archive.ubuntu.com/ubuntu",
                "http://security.ubuntu.com/ubuntu",
            ),
        }
    }

    /// A plain Ubuntu cloud image (no Kubernetes packages).
    pub fn ubuntu() -> Image {
        Image {
            os_id: "ubuntu".into(),
            release: "noble".into(),
            kubernetes: None,
        }
    }
}

/// A first boot of an instance: cloud-init runs its per-instance modules with this user_data.
#[derive(Clone)]
pub struct Boot {
    pub metadata: Metadata,
    /// The bytes after Nova's base64 (gzip or not), `None` when the server has no user_data.
    pub user_data: Option<Vec<u8>>,
    pub image: Image,
    /// The fixed IPs of the server's ports, in port order (what its network configuration says;
    /// kubeadm advertises the first).
    pub addresses: Vec<std::net::IpAddr>,
    /// It has a config drive (`config-2`): its user_data on a disk only root with device access reads.
    pub config_drive: bool,
}

impl fmt::Debug for Boot {
    // user_data holds the cluster's secrets: only its size.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Boot")
            .field("metadata", &self.metadata)
            .field("user_data_bytes", &self.user_data.as_ref().map(Vec::len))
            .field("image", &self.image)
            .field("addresses", &self.addresses)
            .field("config_drive", &self.config_drive)
            .finish()
    }
}

/// What happens to a server.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    /// Created and powered on for the first time.
    Boot(Box<Boot>),
    /// Soft or hard reboot: services come back, cloud-init's per-instance modules do not run again.
    Reboot,
    /// Powered off (`SHUTOFF`): its kubelet stops posting status, its API server and etcd member stop.
    Shutdown,
    /// Powered on again after a shutdown.
    Start,
    /// Deleted: as a shutdown that never ends; the cluster keeps its Node and etcd member until
    /// someone removes them.
    Delete,
}

/// The host's side of the seam.
pub trait Host: Send + Sync {
    /// The host's clock: when steps, retries and background jobs are due.
    fn now(&self) -> OffsetDateTime;
    /// The date on the servers' clocks: what the cluster stamps (token expirations, Node conditions)
    /// and compares with the timestamps others wrote (a token's `expiration`, which kos writes by
    /// the cloud's clock). A real node keeps the time the cloud's API servers keep (NTP); a
    /// simulator's is the cloud's date, at its time scale.
    fn calendar(&self) -> OffsetDateTime;
    /// Appends a line to a server's console log.
    fn console(&self, server: &ServerId, line: &str);
    /// The servers `endpoint` (`host:port`) reaches from `from`, in the order a client tries them.
    fn api_backends(&self, from: &ServerId, endpoint: &str) -> Vec<ServerId>;
    /// Whether a download of `url` from `from` reaches the internet now (an outage says no).
    fn internet_reaches(&self, from: &ServerId, url: &str) -> bool;
    /// Whether `url`'s host answers a proxy on the internet now: false only while it is down for
    /// everyone, not merely out of the servers' reach.
    fn internet_serves(&self, url: &str) -> bool;
}
