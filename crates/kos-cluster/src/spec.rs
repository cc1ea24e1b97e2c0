//! The typed cluster spec, as `cluster.yaml` describes it after validation.
//!
//! Every value here has passed its checks: a `ClusterSpec` cannot hold an even control-plane count, a floating-IP
//! endpoint with an Octavia provider, both a created and an existing network, or a CIDR with host bits set.
//! Defaults are already applied. Fields that preflight checks against the cloud (flavors, images, networks,
//! zones...) keep their source span, so its diagnostics can point at the same YAML line.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::Deref;

use ipnet::{IpNet, Ipv4Net};
use miette::SourceSpan;

use crate::names::{ClusterName, DnsName, LabelKey, LabelValue, PoolName, Tag};

/// The only `apiVersion` this kos reads.
pub const API_VERSION: &str = "kos.dev/v1alpha1";
/// The only `kind`.
pub const KIND: &str = "Cluster";
/// `podCIDR` when not given (the flannel/kubeadm convention).
pub const DEFAULT_POD_CIDR: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(10, 244, 0, 0), 16);
/// `serviceCIDR` when not given (kubeadm's default).
pub const DEFAULT_SERVICE_CIDR: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(10, 96, 0, 0), 12);

/// A value and the bytes of `cluster.yaml` it came from.
///
/// Equality ignores the span: two specs that say the same thing are equal wherever they say it. A defaulted
/// value's span points at its parent key.
#[derive(Clone, Copy, Debug)]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where it is in the source.
    pub span: SourceSpan,
}

impl<T> Spanned<T> {
    /// Pairs a value with its span.
    pub fn new(value: T, span: SourceSpan) -> Self {
        Self { value, span }
    }

    /// Maps the value, keeping the span.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Spanned<U> {
        Spanned::new(f(self.value), self.span)
    }
}

impl<T: PartialEq> PartialEq for Spanned<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: Eq> Eq for Spanned<T> {}

impl<T> Deref for Spanned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// A validated `cluster.yaml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// `metadata.name`; prefix of every resource name and value of the `kos-cluster` tag.
    pub name: Spanned<ClusterName>,
    /// `metadata.tags`: extra tags put on every resource.
    pub tags: Vec<Tag>,
    /// `spec.kubernetesVersion`.
    pub kubernetes_version: KubernetesVersion,
    /// `spec.network`.
    pub network: Network,
    /// `spec.apiEndpoint`.
    pub api_endpoint: ApiEndpoint,
    /// `spec.controlPlane`.
    pub control_plane: ControlPlane,
    /// `spec.nodePools`, names unique.
    pub node_pools: Vec<NodePool>,
    /// `spec.addons`.
    pub addons: Addons,
    /// `spec.serviceLoadBalancers`.
    pub service_load_balancers: ServiceLoadBalancers,
    /// `spec.sshPublicKey`: put on every server if given; kos itself never uses SSH.
    pub ssh_public_key: Option<SshPublicKey>,
    /// `spec.mirrors`: where nodes fetch what they would otherwise fetch from the internet.
    pub mirrors: Mirrors,
    /// `spec.proxy`: the HTTP(S) proxy nodes reach the internet (or the mirrors) through.
    pub proxy: Option<Proxy>,
}

impl ClusterSpec {
    /// Control planes plus every pool's count: the number of servers (and node ports) the cluster has.
    #[must_use]
    pub fn node_count(&self) -> u32 {
        self.control_plane.count.get() + self.node_pools.iter().map(|p| p.count.value).sum::<u32>()
    }

    /// The Octavia provider of the Services' load balancers: the one given, else the API load
    /// balancer's, else `None` (the cloud's default).
    #[must_use]
    pub fn service_lb_provider(&self) -> Option<LbProvider> {
        match (
            self.service_load_balancers.provider,
            self.api_endpoint.kind.value,
        ) {
            (Some(p), _) => Some(p.value),
            (None, EndpointKind::LoadBalancer { provider }) => Some(provider),
            (None, EndpointKind::FloatingIp) => None,
        }
    }
}

/// `spec.serviceLoadBalancers`: how the cloud controller makes the load balancers of `type:
/// LoadBalancer` Services.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ServiceLoadBalancers {
    /// `provider`; unset: the API load balancer's provider (see [`ClusterSpec::service_lb_provider`]).
    pub provider: Option<Spanned<LbProvider>>,
}

/// A Kubernetes release `1.MINOR.PATCH` within the supported window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    minor: u32,
    patch: u32,
}

impl KubernetesVersion {
    /// The supported minors of 1.x, oldest first: the three newest releases, from kos's pins table
    /// (crates/kos-bootstrap/src/pins.yaml), where each has its cloud controller and CSI images.
    #[must_use]
    pub fn supported_minors() -> Vec<u32> {
        kos_bootstrap::addons::Pins::builtin()
            .map(|p| p.supported_minors().collect())
            .unwrap_or_default()
    }

    /// The release a spec without `kubernetesVersion` gets: the newest patch of the newest minor.
    ///
    /// # Errors
    /// The pins table is broken (a bug the tests catch).
    pub fn default_release() -> Result<Self, VersionError> {
        let pins = kos_bootstrap::addons::Pins::builtin().map_err(|_| VersionError::Table)?;
        Self::parse(&pins.kubernetes.default)
    }

    /// Parses `1.MINOR.PATCH`, with or without a leading `v`.
    ///
    /// # Errors
    /// What is wrong with the string, worded to follow it ("`1.28.0` is outside...").
    pub fn parse(s: &str) -> Result<Self, VersionError> {
        let digits = s.strip_prefix('v').unwrap_or(s);
        let parts: Vec<&str> = digits.split('.').collect();
        let number = |p: &str| -> Option<u32> {
            let ok = !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit())
                && (p == "0" || !p.starts_with('0'));
            ok.then(|| p.parse().ok()).flatten()
        };
        let [major, minor, patch] = parts[..] else {
            return Err(VersionError::Shape);
        };
        let (Some(major), Some(minor), Some(patch)) = (number(major), number(minor), number(patch))
        else {
            return Err(VersionError::Shape);
        };
        if major != 1 {
            return Err(VersionError::Major(major));
        }
        let supported = Self::supported_minors();
        if !supported.contains(&minor) {
            return Err(VersionError::Unsupported {
                minor,
                supported: supported
                    .iter()
                    .map(|m| format!("1.{m}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(Self { minor, patch })
    }

    /// The minor release (the `36` of `1.36.4`).
    #[must_use]
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// The patch release.
    #[must_use]
    pub fn patch(self) -> u32 {
        self.patch
    }
}

/// Without the `v`: `1.36.4`. kubeadm's `kubernetesVersion` wants `v{version}`.
impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}.{}", self.minor, self.patch)
    }
}

/// Why a Kubernetes version was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not three dot-separated numbers.
    #[error("is not a version of the form `1.MINOR.PATCH`")]
    Shape,
    /// Not Kubernetes 1.x.
    #[error("has major version {0}; Kubernetes releases are 1.x")]
    Major(u32),
    /// Outside the window kos supports.
    #[error("is outside the supported releases ({supported})")]
    Unsupported { minor: u32, supported: String },
    /// kos's own pins table does not parse: a bug.
    #[error("cannot be checked: kos's pins table is malformed (a bug)")]
    Table,
}

/// `spec.network`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    /// Where the nodes' subnet comes from.
    pub source: NetworkSource,
    /// `externalNetwork`; `None` means preflight picks the only external network or fails.
    pub external_network: Option<Spanned<ResourceRef>>,
    /// `podCIDR`; at least a /24, no overlap with the others.
    pub pod_cidr: Spanned<Ipv4Net>,
    /// `serviceCIDR`; between /12 and /24, no overlap with the others.
    pub service_cidr: Spanned<Ipv4Net>,
    /// `ssh.allowedCIDRs`: sources allowed to reach port 22; empty means no SSH rule at all.
    pub ssh_allowed_cidrs: Vec<Spanned<IpNet>>,
}

/// `spec.network.create` or `spec.network.existing`: exactly one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkSource {
    /// kos creates network, subnet and router (and deletes them on `down`).
    Create(CreateNetwork),
    /// The user's network, subnet and router; kos never deletes them.
    Existing(ExistingNetwork),
}

/// `spec.network.create`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateNetwork {
    /// The subnet's CIDR: at least a /28, host bits clear.
    pub cidr: Spanned<Ipv4Net>,
    /// `dnsServers` for the subnet; empty leaves Neutron's default.
    pub dns_servers: Vec<Ipv4Addr>,
}

/// `spec.network.existing`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingNetwork {
    /// The network the nodes' ports go on.
    pub network: Spanned<ResourceRef>,
    /// The subnet on it; preflight reads its CIDR and checks it against the pod and service CIDRs.
    pub subnet: Spanned<ResourceRef>,
    /// The router that connects the subnet to the external network, if floating IPs are needed.
    pub router: Option<Spanned<ResourceRef>>,
}

/// An OpenStack resource given by id or by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResourceRef {
    /// A UUID (with or without dashes): looked up by id.
    Id(String),
    /// Anything else: looked up by name, and must match exactly one resource.
    Name(String),
}

impl ResourceRef {
    /// Classifies `s`: UUID-shaped strings are ids, the rest names.
    #[must_use]
    pub fn parse(s: &str) -> Self {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        let uuid_shape = s.len() == 36 && [8, 13, 18, 23].iter().all(|&i| s.as_bytes()[i] == b'-');
        let is_id = hex.len() == 32
            && hex.chars().all(|c| c.is_ascii_hexdigit())
            && (uuid_shape || s.len() == 32);
        if is_id {
            Self::Id(s.to_owned())
        } else {
            Self::Name(s.to_owned())
        }
    }

    /// The string as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::Id(s) | Self::Name(s) => s,
        }
    }
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.apiEndpoint`: how clients reach the Kubernetes API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiEndpoint {
    /// Load balancer or floating IP; a floating IP only with one control plane.
    pub kind: Spanned<EndpointKind>,
    /// `public`: a floating IP on the external network (default) or only the private VIP/IP.
    pub public: bool,
    /// `allowedCIDRs`: sources allowed to reach port 6443; empty means everyone.
    pub allowed_cidrs: Vec<Spanned<IpNet>>,
    /// `dnsName`: added to the API server certificate's SANs.
    pub dns_name: Option<DnsName>,
}

/// `spec.apiEndpoint.type` with what belongs to each type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointKind {
    /// An Octavia load balancer in front of the control planes.
    LoadBalancer {
        /// `provider`.
        provider: LbProvider,
    },
    /// The single control plane's own address.
    FloatingIp,
}

/// Octavia provider driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LbProvider {
    /// Service VMs; the default everywhere.
    Amphora,
    /// OVN's distributed load balancer: no VM to boot, L4 only.
    Ovn,
}

impl LbProvider {
    /// Octavia's name for the provider.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Amphora => "amphora",
            Self::Ovn => "ovn",
        }
    }
}

/// What control planes and pools have in common: the server shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `flavor`, name or id; Nova flavor ids are free-form (`1`, `m1.small`), so preflight tries both.
    pub flavor: Spanned<String>,
    /// `image`.
    pub image: Spanned<ImageRef>,
    /// `bootVolume`: boot from a Cinder volume instead of the flavor's disk.
    pub boot_volume: Option<BootVolume>,
    /// `availabilityZones`: servers are spread over them round-robin; empty lets Nova choose.
    pub availability_zones: Vec<Spanned<String>>,
}

/// `spec.controlPlane`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlane {
    /// `count`: 1, 3 or 5.
    pub count: Spanned<ControlPlaneCount>,
    /// Flavor, image, boot volume, zones.
    pub machine: Machine,
    /// `serverGroupPolicy`, defaulted to anti-affinity when there is more than one.
    pub server_group_policy: ServerGroupPolicy,
    /// `maxSurge`, 0 or 1 (Cluster API's kubeadm control plane): whether a replaced control plane's
    /// successor joins before it leaves. Unset: 1 behind a load balancer, 0 behind a floating IP
    /// (whose one server's port is the endpoint). See [`ControlPlane::surges`].
    pub max_surge: Option<Spanned<u32>>,
    /// `healthCheck`: when a control plane counts as unhealthy and is replaced.
    pub health_check: HealthCheck,
}

impl ControlPlane {
    /// Whether a replacement joins a new control plane first (`maxSurge: 1`), or removes the old one
    /// first (`maxSurge: 0`: needs three, as etcd must keep quorum while one is gone).
    #[must_use]
    pub fn surges(&self, endpoint: EndpointKind) -> bool {
        match self.max_surge {
            Some(s) => s.value > 0,
            None => !matches!(endpoint, EndpointKind::FloatingIp),
        }
    }
}

/// An etcd-friendly number of control planes: odd, at most 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControlPlaneCount {
    /// No fault tolerance.
    One,
    /// Tolerates one failure.
    Three,
    /// Tolerates two failures.
    Five,
}

impl ControlPlaneCount {
    /// The number.
    #[must_use]
    pub fn get(self) -> u32 {
        match self {
            Self::One => 1,
            Self::Three => 3,
            Self::Five => 5,
        }
    }

    /// The count for `n`, if it is 1, 3 or 5.
    #[must_use]
    pub fn from_u32(n: u32) -> Option<Self> {
        match n {
            1 => Some(Self::One),
            3 => Some(Self::Three),
            5 => Some(Self::Five),
            _ => None,
        }
    }
}

/// `image`: a name or id, or the tags that select exactly one image.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ImageRef {
    /// `image: <name or id>`.
    Ref(ResourceRef),
    /// `image: {tags: [..]}`: the one image carrying all these tags.
    Tags(Vec<String>),
}

/// `bootVolume`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootVolume {
    /// `sizeGB`, 10–2048.
    pub size_gb: u32,
    /// `type`: Cinder volume type; `None` uses the cloud's default.
    pub volume_type: Option<Spanned<String>>,
    /// `availabilityZone`: the Cinder zone of every boot volume of the group. `None`: the server's
    /// compute zone when Cinder has a zone of that name, else Cinder's only zone, else Cinder's
    /// default ([`crate::resolved::ResolvedBootVolume::zone_for`]).
    pub availability_zone: Option<Spanned<String>>,
}

impl BootVolume {
    /// Smallest size: a node image and container images need room.
    pub const MIN_GB: u32 = 10;
    /// Largest size kos accepts; bigger is almost certainly a unit mistake (MB for GB).
    pub const MAX_GB: u32 = 2048;
}

/// Nova server-group policy for a set of servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerGroupPolicy {
    /// Different hypervisors, or the server fails to schedule.
    AntiAffinity,
    /// Different hypervisors when possible.
    SoftAntiAffinity,
    /// The same hypervisor.
    Affinity,
    /// No server group.
    None,
}

impl ServerGroupPolicy {
    /// Nova's policy name, or `None` when no server group is made.
    #[must_use]
    pub fn nova_policy(self) -> Option<&'static str> {
        match self {
            Self::AntiAffinity => Some("anti-affinity"),
            Self::SoftAntiAffinity => Some("soft-anti-affinity"),
            Self::Affinity => Some("affinity"),
            Self::None => None,
        }
    }
}

/// `spec.nodePools[]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePool {
    /// `name`, unique among pools.
    pub name: Spanned<PoolName>,
    /// `count`, 0–500.
    pub count: Spanned<u32>,
    /// Flavor, image, boot volume, zones.
    pub machine: Machine,
    /// `labels` set on the pool's nodes.
    pub labels: BTreeMap<LabelKey, LabelValue>,
    /// `taints` set on the pool's nodes.
    pub taints: Vec<Taint>,
    /// `serverGroupPolicy`, default soft anti-affinity.
    pub server_group_policy: ServerGroupPolicy,
    /// `maxUnavailable`, default 1 (0 with a `maxSurge`): how many of the pool's nodes a rolling
    /// replacement takes down at once before their successors join.
    pub max_unavailable: u32,
    /// `maxSurge`, default 0: how many successors join before the nodes they replace leave (each
    /// under a fresh index). 0: nodes are replaced in place, keeping their name, port and address.
    pub max_surge: u32,
    /// `healthCheck`: when a node of the pool counts as unhealthy and is replaced.
    pub health_check: HealthCheck,
    /// `autoscaling`: the bounds the cluster-autoscaler scales the pool within (through
    /// kos-operator's provider), `count` being its current target size; `None`, `count` alone.
    pub autoscaling: Option<Autoscaling>,
}

impl NodePool {
    /// Largest pool kos accepts.
    pub const MAX_COUNT: u32 = 500;
}

/// `autoscaling` of a pool: the cluster-autoscaler, through kos-operator, keeps the pool's `count`
/// (its target size) within `min..=max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Autoscaling {
    /// `min`, 0–500: the fewest nodes the autoscaler scales the pool down to.
    pub min: u32,
    /// `max`, 1–500 and at least `min`: the most nodes the autoscaler scales the pool up to.
    pub max: u32,
}

/// `healthCheck` of `spec.controlPlane` or of a pool: when one of its nodes counts as unhealthy and
/// is replaced, with Cluster API's MachineHealthCheck's fields and meaning (`unhealthyConditions`,
/// `nodeStartupTimeout`, `maxUnhealthy`); evaluated by `kos_lifecycle::health`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// `enabled`, default true: `false` never replaces a node of the group for its health.
    pub enabled: bool,
    /// `unhealthyConditions`: a node whose condition has had a status for longer than the timeout
    /// is unhealthy. Default: `Ready` `Unknown` or `False` for 5 minutes.
    pub unhealthy_conditions: Vec<UnhealthyCondition>,
    /// `nodeStartupTimeout`: how long a server may run without its Node before it is unhealthy
    /// (`None`: `0s`, never). Default 10 minutes, as Cluster API's.
    pub node_startup_timeout_secs: Option<u64>,
    /// `maxUnhealthy`: remediation stops while more of the group than this is not healthy (a
    /// partition must not replace half the cluster). Default 100%, as Cluster API's.
    pub max_unhealthy: MaxUnhealthy,
}

impl HealthCheck {
    /// Cluster API's default node startup timeout.
    pub const NODE_STARTUP_TIMEOUT_SECS: u64 = 600;
    /// How long `Ready` may be `Unknown` or `False` by default.
    pub const NOT_READY_TIMEOUT_SECS: u64 = 300;
}

impl Default for HealthCheck {
    fn default() -> Self {
        let ready = |status| UnhealthyCondition {
            condition: "Ready".into(),
            status,
            timeout_secs: Self::NOT_READY_TIMEOUT_SECS,
        };
        Self {
            enabled: true,
            unhealthy_conditions: vec![
                ready(ConditionStatus::Unknown),
                ready(ConditionStatus::False),
            ],
            node_startup_timeout_secs: Some(Self::NODE_STARTUP_TIMEOUT_SECS),
            max_unhealthy: MaxUnhealthy::Percent(100),
        }
    }
}

/// One of `healthCheck.unhealthyConditions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnhealthyCondition {
    /// `type`: a Node condition type (`Ready`, `DiskPressure`, …).
    pub condition: String,
    /// `status`.
    pub status: ConditionStatus,
    /// `timeout`, in seconds.
    pub timeout_secs: u64,
}

/// A Kubernetes condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// As the API writes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// `healthCheck.maxUnhealthy`: a count, or a percentage of the group's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnhealthy {
    Count(u32),
    /// 0–100.
    Percent(u32),
}

impl MaxUnhealthy {
    /// How many of `total` may be unhealthy, as Kubernetes scales an int-or-percent without rounding
    /// up (`intstr.GetScaledValueFromIntOrPercent(…, false)`: 40% of 5 is 2).
    #[must_use]
    pub fn of(self, total: usize) -> usize {
        match self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => total * p as usize / 100,
        }
    }
}

impl std::fmt::Display for MaxUnhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    /// Label-key syntax.
    pub key: LabelKey,
    /// Label-value syntax; `None` for `key:Effect`.
    pub value: Option<LabelValue>,
    /// What the taint does.
    pub effect: TaintEffect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v}:{}", self.key, self.effect.as_str()),
            None => write!(f, "{}:{}", self.key, self.effect.as_str()),
        }
    }
}

/// Kubernetes taint effects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// `NoSchedule`.
    NoSchedule,
    /// `PreferNoSchedule`.
    PreferNoSchedule,
    /// `NoExecute`.
    NoExecute,
}

impl TaintEffect {
    /// The Kubernetes spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// `spec.addons`, read by the bootstrap.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Addons {
    /// `cni`, default Calico.
    pub cni: Cni,
    /// `ccm`, default the upstream OpenStack cloud controller manager.
    pub ccm: Ccm,
    /// `csi`, default Cinder (`cinder`, `{kos: {image}}` or `none`).
    pub csi: Csi,
    /// `cniManifest`: the CNI's manifest from this URL, checked against this sha256, instead of the
    /// pinned one (which kos applies only once its checksum is verified).
    pub cni_manifest: Option<CniManifest>,
    /// `credentialLifetimeDays`: how long the CCM's and CSI's application credential lives; `kos up`
    /// rotates it once a third of that is left. `None`:
    /// [`crate::credential::DEFAULT_LIFETIME_DAYS`].
    pub credential_lifetime_days: Option<Spanned<u32>>,
    /// `credentialAccessRules`: give that credential Keystone access rules, allowing exactly the
    /// requests kos-ccm and kos-csi make ([`crate::access_rules::CALLS`]). Off unless the spec says
    /// `true`: every service of the cloud must set `[keystone_authtoken] service_type`, or it refuses
    /// the credential's every token.
    pub credential_access_rules: bool,
    /// `csiAvailabilityZone`: the Cinder zone the CSI driver makes volumes in when the nodes'
    /// compute zones are not Cinder's (preflight checks it is one of Cinder's). `None`: preflight
    /// decides (no change when every node zone is Cinder's, else Cinder's only zone).
    pub csi_availability_zone: Option<Spanned<String>>,
}

impl Addons {
    /// The credential's lifetime in days, the default if the spec gives none.
    #[must_use]
    pub fn credential_lifetime_days(&self) -> u32 {
        self.credential_lifetime_days
            .as_ref()
            .map_or(crate::credential::DEFAULT_LIFETIME_DAYS, |d| d.value)
    }
}

/// A CNI manifest the user vouches for: an `https://` URL and the sha256 of its content.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CniManifest {
    pub url: String,
    /// 64 lowercase hex digits.
    pub sha256: String,
}

/// Pod network plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Cni {
    /// `calico`.
    #[default]
    Calico,
    /// `cilium`.
    Cilium,
    /// `flannel`.
    Flannel,
    /// `kube-router`.
    KubeRouter,
}

impl Cni {
    /// The spelling in the spec and in kos's pins table.
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            Self::Calico => "calico",
            Self::Cilium => "cilium",
            Self::Flannel => "flannel",
            Self::KubeRouter => "kube-router",
        }
    }
}

/// Cloud controller manager.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Ccm {
    /// `upstream`: openstack-cloud-controller-manager.
    #[default]
    Upstream,
    /// `{kos: {image}}`: kos's own controller from this image.
    Kos {
        /// Container image reference.
        image: String,
    },
}

/// Storage driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Csi {
    /// `cinder`: Cinder CSI plugin and a default StorageClass.
    #[default]
    Cinder,
    /// `{kos: {image}}`: kos-csi, kos's own drop-in for the Cinder CSI plugin (same driver name,
    /// flags and cloud.conf), from this image, and the same default StorageClass.
    Kos {
        /// Container image reference.
        image: String,
    },
    /// `none`.
    None,
}

impl Csi {
    /// The spelling in the spec and in a control plane's record (`kos-csi=…`).
    #[must_use]
    pub fn key(&self) -> &'static str {
        match self {
            Self::Cinder => "cinder",
            Self::Kos { .. } => "kos",
            Self::None => "none",
        }
    }
}

/// An OpenSSH public key line (`<algorithm> <base64 blob> [comment]`) whose blob names the same algorithm.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SshPublicKey {
    line: String,
    algorithm_len: usize,
}

impl SshPublicKey {
    /// Algorithms Nova keypairs and cloud-init accept.
    pub const ALGORITHMS: [&'static str; 7] = [
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    ];

    /// Checks one key line, as found in `~/.ssh/id_ed25519.pub`.
    ///
    /// # Errors
    /// What is wrong, worded to follow "the key ...".
    pub fn parse(s: &str) -> Result<Self, SshKeyError> {
        use base64::Engine as _;
        let line = s.trim();
        if line.starts_with("-----BEGIN") {
            return Err(SshKeyError::Pem);
        }
        if line.contains('\n') {
            return Err(SshKeyError::MultipleLines);
        }
        let mut fields = line.split_whitespace();
        let algorithm = fields.next().ok_or(SshKeyError::Empty)?;
        if !Self::ALGORITHMS.contains(&algorithm) {
            return Err(SshKeyError::Algorithm(algorithm.to_owned()));
        }
        let blob = fields
            .next()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .ok_or(SshKeyError::Blob)?;
        // The blob starts with the algorithm again, as an SSH string (u32 length, bytes): RFC 4253 §6.6.
        let inner = blob
            .get(..4)
            .and_then(|l| <[u8; 4]>::try_from(l).ok())
            .map(|l| u32::from_be_bytes(l) as usize)
            .and_then(|len| blob.get(4..4 + len));
        if inner != Some(algorithm.as_bytes()) {
            return Err(SshKeyError::Mismatch);
        }
        Ok(Self {
            line: line.split_whitespace().collect::<Vec<_>>().join(" "),
            algorithm_len: algorithm.len(),
        })
    }

    /// The key line, whitespace normalised.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.line
    }

    /// The algorithm, e.g. `ssh-ed25519`.
    #[must_use]
    pub fn algorithm(&self) -> &str {
        &self.line[..self.algorithm_len]
    }
}

/// Why an SSH public key was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SshKeyError {
    /// Blank.
    #[error("is empty")]
    Empty,
    /// A PEM block: most likely the private key.
    #[error("is a PEM block, probably a private key")]
    Pem,
    /// More than one line.
    #[error("spans several lines; give exactly one key")]
    MultipleLines,
    /// Unknown algorithm.
    #[error("starts with `{0}`, which is not an SSH key algorithm")]
    Algorithm(String),
    /// Missing or not base64.
    #[error("has no valid base64 key data after the algorithm")]
    Blob,
    /// Blob for another algorithm, or truncated.
    #[error("has key data that does not match its algorithm (truncated or mixed up?)")]
    Mismatch,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_accept_a_leading_v_and_refuse_shapes_and_old_releases() {
        let v = KubernetesVersion::parse("v1.36.2").expect("valid");
        assert_eq!(v.to_string(), "1.36.2");
        assert_eq!(KubernetesVersion::parse("1.31"), Err(VersionError::Shape));
        assert_eq!(
            KubernetesVersion::parse("1.031.0"),
            Err(VersionError::Shape)
        );
        assert_eq!(
            KubernetesVersion::parse("2.1.0"),
            Err(VersionError::Major(2))
        );
        assert_eq!(
            KubernetesVersion::parse("1.33.9"),
            Err(VersionError::Unsupported {
                minor: 33,
                supported: "1.34, 1.35, 1.36".into()
            })
        );
        assert_eq!(
            KubernetesVersion::default_release().map(|v| v.to_string()),
            Ok("1.36.4".to_owned())
        );
    }

    #[test]
    fn resource_refs_tell_ids_from_names() {
        assert!(matches!(
            ResourceRef::parse("0d3b8c5e-1f2a-4b6c-9d7e-123456789abc"),
            ResourceRef::Id(_)
        ));
        assert!(matches!(ResourceRef::parse("public"), ResourceRef::Name(_)));
        assert!(matches!(
            ResourceRef::parse("m1.large"),
            ResourceRef::Name(_)
        ));
    }

    #[test]
    fn ssh_keys_must_carry_their_own_algorithm() {
        let ok = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBRy6hQTfuZ21OSeYgWgxWM66OLh6yHnC+cDozVhPY0b me@host";
        assert_eq!(
            SshPublicKey::parse(ok).expect("valid").algorithm(),
            "ssh-ed25519"
        );
        let swapped = ok.replace("ssh-ed25519 ", "ssh-rsa ");
        assert_eq!(SshPublicKey::parse(&swapped), Err(SshKeyError::Mismatch));
        assert_eq!(
            SshPublicKey::parse("-----BEGIN OPENSSH PRIVATE KEY-----"),
            Err(SshKeyError::Pem)
        );
    }
}

/// An `http://` or `https://` URL as the spec gives it: `scheme://[user:password@]host[:port][/path]`.
/// Its `Debug` and [`HttpUrl::redacted`] hide a password (a proxy's credentials are secrets).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HttpUrl {
    text: String,
    /// Byte range of `host[:port]` in `text`.
    authority: std::ops::Range<usize>,
    /// Byte range of `user[:password]` (without the `@`), if any.
    userinfo: Option<std::ops::Range<usize>>,
}

/// Why a string is not an [`HttpUrl`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("does not start with http:// or https://")]
    Scheme,
    #[error("has no host")]
    NoHost,
    #[error("has a space, a quote or a control character")]
    Character,
    #[error("has a port that is not a number from 1 to 65535")]
    Port,
    #[error("has a query or fragment")]
    Query,
}

impl HttpUrl {
    /// Parses and checks the URL (no DNS, no IO).
    pub fn parse(s: &str) -> Result<Self, UrlError> {
        let rest = s
            .strip_prefix("https://")
            .or_else(|| s.strip_prefix("http://"))
            .ok_or(UrlError::Scheme)?;
        let start = s.len() - rest.len();
        // Characters that would break out of a quoted shell value, a TOML string or a unit file.
        if s.chars().any(|c| {
            c.is_control() || c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '`' | '$')
        }) {
            return Err(UrlError::Character);
        }
        if s.contains(['?', '#']) {
            return Err(UrlError::Query);
        }
        let end = rest.find('/').map_or(s.len(), |i| start + i);
        let (userinfo, host_start) = match userinfo_end(s, start) {
            Some(at) => (Some(start..at), at + 1),
            None => (None, start),
        };
        let authority = &s[host_start..end];
        let (host, port) = split_port(authority);
        if host.is_empty() || host == "[]" {
            return Err(UrlError::NoHost);
        }
        if let Some(p) = port
            && !p.parse::<u16>().is_ok_and(|n| n > 0)
        {
            return Err(UrlError::Port);
        }
        Ok(Self {
            text: s.to_owned(),
            authority: host_start..end,
            userinfo,
        })
    }

    /// The whole URL, password included: only for the node's files.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// `host[:port]`.
    #[must_use]
    pub fn authority(&self) -> &str {
        &self.text[self.authority.clone()]
    }

    /// The host alone (brackets kept for IPv6).
    #[must_use]
    pub fn host(&self) -> &str {
        split_port(self.authority()).0
    }

    /// `https` or `http`.
    #[must_use]
    pub fn scheme(&self) -> &str {
        if self.text.starts_with("https://") {
            "https"
        } else {
            "http"
        }
    }

    /// The path after the authority (`""` or starting with `/`).
    #[must_use]
    pub fn path(&self) -> &str {
        &self.text[self.authority.end..]
    }

    /// Whether the URL carries `user[:password]@`.
    #[must_use]
    pub fn has_userinfo(&self) -> bool {
        self.userinfo.is_some()
    }

    /// The URL with its credentials replaced by `***`, for output.
    #[must_use]
    pub fn redacted(&self) -> String {
        match &self.userinfo {
            Some(r) => format!("{}***{}", &self.text[..r.start], &self.text[r.end..]),
            None => self.text.clone(),
        }
    }
}

/// Where a URL's credentials (`user:password@`) end, for a URL whose authority starts at byte
/// `start` (just after `scheme://`): the last `@` before the first `/` or line break. Shared by the
/// parser and by what masks credentials in messages and snippets, so they agree on what is one.
#[must_use]
pub fn userinfo_end(s: &str, start: usize) -> Option<usize> {
    let rest = s.get(start..)?;
    let end = rest.find(['/', '\n']).unwrap_or(rest.len());
    rest[..end].rfind('@').map(|at| start + at)
}

/// `host[:port]` → host and port; an IPv6 host keeps its brackets.
fn split_port(authority: &str) -> (&str, Option<&str>) {
    match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    }
}

impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HttpUrl({})", self.redacted())
    }
}

/// `spec.mirrors`: the places an air-gapped cloud's nodes fetch from instead of the internet.
/// Everything not mirrored is fetched from its public location (through `spec.proxy` if given).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mirrors {
    /// `registries`: a public registry's host (`registry.k8s.io`, `docker.io`, …) → the mirror that
    /// serves its repositories under the same names (containerd's `hosts.toml`).
    pub registries: BTreeMap<String, HttpUrl>,
    /// `caBundle`: PEM certificates the nodes trust for the registry mirrors.
    pub ca_bundle: Option<String>,
    /// `packages.kubernetes`: serves what `https://pkgs.k8s.io` serves, at the same paths.
    pub kubernetes_packages: Option<HttpUrl>,
    /// `packages.os`: an apt mirror of the image's distribution archive (what
    /// `http://archive.ubuntu.com/ubuntu` or `http://deb.debian.org/debian` serves): cloud-init's
    /// `apt.primary`, where containerd, conntrack and the other OS packages come from.
    pub os_packages: Option<HttpUrl>,
    /// `packages.osSecurity`: the security archive's mirror (cloud-init's `apt.security`); `os`
    /// when not given (Ubuntu's mirrors carry `-security`; Debian's security archive is usually a
    /// mirror of its own, `…/debian-security`).
    pub os_security_packages: Option<HttpUrl>,
    /// `manifests`: serves each manifest kos downloads at `<manifests>/<host>/<path>` of its public
    /// URL; the pinned sha256 is checked as before.
    pub manifests: Option<HttpUrl>,
}

impl Mirrors {
    /// Whether anything is mirrored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.registries.is_empty()
            && self.kubernetes_packages.is_none()
            && self.os_packages.is_none()
            && self.os_security_packages.is_none()
            && self.manifests.is_none()
    }
}

/// `spec.proxy`: what the nodes' bootstrap, containerd and the kubelet reach the internet through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    /// `http`: for `http://` URLs.
    pub http: Option<HttpUrl>,
    /// `https`: for `https://` URLs.
    pub https: Option<HttpUrl>,
    /// `noProxy`: hosts, domains (`.example.com`) and CIDRs reached directly, besides the cluster's
    /// own (kos adds the node subnet, pod and service ranges, the API endpoint, `.svc`,
    /// `.cluster.local`, `localhost` and the metadata address).
    pub no_proxy: Vec<String>,
}
