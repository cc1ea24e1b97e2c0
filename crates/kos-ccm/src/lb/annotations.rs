//! The Service annotations (and Service spec fields) the upstream openstack-cloud-controller-manager
//! honours (research/occm.md §1.2), parsed once into typed [`ServiceOptions`] with the cloud.conf
//! defaults and `[LoadBalancerClass "name"]` applied.
//!
//! The upstream reads each annotation where it needs it and silently falls back to the default on a
//! bad value (`"True"` for a boolean, `"5s"` for milliseconds). Here [`parse`] checks them all first
//! and returns either the options or *every* problem, each naming the annotation, the bad value and
//! the fix, so one Warning event tells the user everything at once. Nothing reaches the cloud from a
//! Service that has a problem.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use kos_cloud::model::load_balancer::{LbAlgorithm, ListenerTimeouts};
use regex::Regex;

use crate::config::{CloudConfig, LbMethod};

const P: &str = "loadbalancer.openstack.org/";

/// `"true"`: no floating IP (upstream key, in the beta namespace).
pub const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";
pub const CLASS: &str = "loadbalancer.openstack.org/class";
pub const FLOATING_NETWORK_ID: &str = "loadbalancer.openstack.org/floating-network-id";
pub const FLOATING_SUBNET_ID: &str = "loadbalancer.openstack.org/floating-subnet-id";
pub const FLOATING_SUBNET: &str = "loadbalancer.openstack.org/floating-subnet";
pub const FLOATING_SUBNET_TAGS: &str = "loadbalancer.openstack.org/floating-subnet-tags";
pub const SUBNET_ID: &str = "loadbalancer.openstack.org/subnet-id";
pub const NETWORK_ID: &str = "loadbalancer.openstack.org/network-id";
pub const MEMBER_SUBNET_ID: &str = "loadbalancer.openstack.org/member-subnet-id";
pub const PORT_ID: &str = "loadbalancer.openstack.org/port-id";
pub const CONNECTION_LIMIT: &str = "loadbalancer.openstack.org/connection-limit";
pub const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";
pub const PROXY_PROTOCOL: &str = "loadbalancer.openstack.org/proxy-protocol";
pub const X_FORWARDED_FOR: &str = "loadbalancer.openstack.org/x-forwarded-for";
pub const LB_METHOD: &str = "loadbalancer.openstack.org/lb-method";
pub const TIMEOUT_CLIENT_DATA: &str = "loadbalancer.openstack.org/timeout-client-data";
pub const TIMEOUT_MEMBER_CONNECT: &str = "loadbalancer.openstack.org/timeout-member-connect";
pub const TIMEOUT_MEMBER_DATA: &str = "loadbalancer.openstack.org/timeout-member-data";
pub const TIMEOUT_TCP_INSPECT: &str = "loadbalancer.openstack.org/timeout-tcp-inspect";
pub const ENABLE_HEALTH_MONITOR: &str = "loadbalancer.openstack.org/enable-health-monitor";
pub const HEALTH_MONITOR_DELAY: &str = "loadbalancer.openstack.org/health-monitor-delay";
pub const HEALTH_MONITOR_TIMEOUT: &str = "loadbalancer.openstack.org/health-monitor-timeout";
pub const HEALTH_MONITOR_MAX_RETRIES: &str =
    "loadbalancer.openstack.org/health-monitor-max-retries";
pub const HEALTH_MONITOR_MAX_RETRIES_DOWN: &str =
    "loadbalancer.openstack.org/health-monitor-max-retries-down";
pub const FLAVOR_ID: &str = "loadbalancer.openstack.org/flavor-id";
pub const AVAILABILITY_ZONE: &str = "loadbalancer.openstack.org/availability-zone";
pub const DEFAULT_TLS_CONTAINER_REF: &str = "loadbalancer.openstack.org/default-tls-container-ref";
/// Written by kos-ccm after create; set by hand to share an existing load balancer.
pub const LOAD_BALANCER_ID: &str = "loadbalancer.openstack.org/load-balancer-id";
/// Written by kos-ccm: the floating IP or VIP.
pub const LOAD_BALANCER_ADDRESS: &str = "loadbalancer.openstack.org/load-balancer-address";
pub const HOSTNAME: &str = "loadbalancer.openstack.org/hostname";
pub const NODE_SELECTOR: &str = "loadbalancer.openstack.org/node-selector";
/// Kubernetes' own; used only when `spec.loadBalancerSourceRanges` is empty.
pub const SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// Every annotation key read or written here (for typo detection).
pub const ALL: &[&str] = &[
    INTERNAL,
    CLASS,
    FLOATING_NETWORK_ID,
    FLOATING_SUBNET_ID,
    FLOATING_SUBNET,
    FLOATING_SUBNET_TAGS,
    SUBNET_ID,
    NETWORK_ID,
    MEMBER_SUBNET_ID,
    PORT_ID,
    CONNECTION_LIMIT,
    KEEP_FLOATING_IP,
    PROXY_PROTOCOL,
    X_FORWARDED_FOR,
    LB_METHOD,
    TIMEOUT_CLIENT_DATA,
    TIMEOUT_MEMBER_CONNECT,
    TIMEOUT_MEMBER_DATA,
    TIMEOUT_TCP_INSPECT,
    ENABLE_HEALTH_MONITOR,
    HEALTH_MONITOR_DELAY,
    HEALTH_MONITOR_TIMEOUT,
    HEALTH_MONITOR_MAX_RETRIES,
    HEALTH_MONITOR_MAX_RETRIES_DOWN,
    FLAVOR_ID,
    AVAILABILITY_ZONE,
    DEFAULT_TLS_CONTAINER_REF,
    LOAD_BALANCER_ID,
    LOAD_BALANCER_ADDRESS,
    HOSTNAME,
    NODE_SELECTOR,
    SOURCE_RANGES,
];

/// One thing wrong with a Service: the annotation (or spec field, or cloud.conf key), the value
/// and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub value: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?} {}", self.key, self.value, self.message)
    }
}

/// Which PROXY protocol version the pools speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    V1,
    V2,
}

/// Where the VIP goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VipChoice {
    /// An existing Neutron port (`port-id`).
    Port(String),
    /// A subnet (and optionally its network).
    Subnet(String),
    /// A network; Octavia picks the subnet.
    Network(String),
    /// Nothing configured: the subnet holding the nodes' addresses (found at create time).
    Auto,
}

/// A floating-subnet name pattern: a glob, or a regexp after `~`; `!` in front negates.
#[derive(Debug, Clone)]
pub struct NamePattern {
    pub raw: String,
    negate: bool,
    re: Regex,
}

impl NamePattern {
    pub fn parse(raw: &str) -> Result<NamePattern, String> {
        let (negate, pat) = match raw.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, raw),
        };
        let body = match pat.strip_prefix('~') {
            Some(re) => re.to_owned(),
            None => glob_to_regex(pat),
        };
        // The whole name must match, as upstream's `FindString(name) == name`.
        let re = Regex::new(&format!("^(?:{body})$")).map_err(|e| e.to_string())?;
        Ok(NamePattern {
            raw: raw.to_owned(),
            negate,
            re,
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        self.re.is_match(name) != self.negate
    }
}

fn glob_to_regex(glob: &str) -> String {
    let mut out = String::new();
    for c in glob.chars() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            c => out.push_str(&regex::escape(&c.to_string())),
        }
    }
    out
}

/// A floating-subnet tag filter: `a,b` = any of them; `&a,b` = all; `!` in front negates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSpec {
    pub tags: Vec<String>,
    pub all: bool,
    pub negate: bool,
}

impl TagSpec {
    pub fn parse(raw: &str) -> Result<TagSpec, String> {
        let (negate, rest) = match raw.strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, raw),
        };
        let (all, rest) = match rest.strip_prefix('&') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let tags: Vec<String> = rest.split(',').map(|t| t.trim().to_owned()).collect();
        if tags.iter().any(String::is_empty) {
            return Err("has an empty tag".into());
        }
        Ok(TagSpec { tags, all, negate })
    }

    pub fn matches(&self, have: &[String]) -> bool {
        let has = |t: &String| have.contains(t);
        let hit = if self.all {
            self.tags.iter().all(has)
        } else {
            self.tags.iter().any(has)
        };
        hit != self.negate
    }
}

/// Which subnet of the floating network a new floating IP comes from.
#[derive(Debug, Clone, Default)]
pub enum FloatingSubnet {
    /// Neutron's choice.
    #[default]
    Any,
    Id(String),
    /// The first subnet matching both (when given) that still has a free address.
    Matching {
        name: Option<NamePattern>,
        tags: Option<TagSpec>,
    },
}

/// Health monitor settings (each pool gets one when `enabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorOptions {
    pub enabled: bool,
    /// `enable-health-monitor: "false"` was written (not just the default).
    pub disabled_explicitly: bool,
    pub delay: u32,
    pub timeout: u32,
    pub max_retries: u32,
    pub max_retries_down: u32,
}

/// Everything a Service asks of its load balancer, defaults applied.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// No floating IP.
    pub internal: bool,
    /// The `[LoadBalancerClass "name"]` chosen.
    pub class: Option<String>,
    pub vip: VipChoice,
    /// Explicit member subnet; `None` means "the VIP subnet".
    pub member_subnet_id: Option<String>,
    /// `None`: autodetect (the external network).
    pub floating_network_id: Option<String>,
    pub floating_subnet: FloatingSubnet,
    pub connection_limit: i64,
    pub keep_floating_ip: bool,
    pub proxy: Option<ProxyProtocol>,
    pub x_forwarded_for: bool,
    pub lb_method: LbAlgorithm,
    /// `None` where the provider has no timeouts (OVN).
    pub timeouts: Option<ListenerTimeouts>,
    pub monitor: MonitorOptions,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
    pub tls_container_ref: Option<String>,
    pub load_balancer_id: Option<String>,
    pub hostname: Option<String>,
    /// Label key → value ("" = any value).
    pub node_selector: BTreeMap<String, String>,
    /// `spec.loadBalancerSourceRanges` or the annotation; empty = everyone.
    pub source_ranges: Vec<IpNet>,
    /// `spec.loadBalancerIP`: the floating IP to use, or the VIP of an internal Service.
    pub load_balancer_ip: Option<IpAddr>,
    /// `spec.ipFamilies[0]` is IPv6: members and VIP are IPv6, no floating IP.
    pub ipv6: bool,
    /// The provider is OVN (no L7, PROXY, timeouts, flavors, allowed CIDRs, HTTP monitors).
    pub ovn: bool,
    /// Things that do not stop the reconcile but that the user should hear about.
    pub notes: Vec<Problem>,
}

struct Reader<'a> {
    ann: &'a BTreeMap<String, String>,
    problems: Vec<Problem>,
    notes: Vec<Problem>,
}

impl<'a> Reader<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.ann.get(key).map(String::as_str)
    }

    fn problem(&mut self, key: &str, value: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.to_owned(),
            value: value.to_owned(),
            message: message.into(),
        });
    }

    fn note(&mut self, key: &str, value: &str, message: impl Into<String>) {
        self.notes.push(Problem {
            key: key.to_owned(),
            value: value.to_owned(),
            message: message.into(),
        });
    }

    fn bool(&mut self, key: &str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some("true") => true,
            Some("false") => false,
            Some(v) => {
                self.problem(
                    key,
                    v,
                    "is not a boolean: write \"true\" or \"false\" (lower case, as the upstream CCM \
                     reads it)",
                );
                default
            }
        }
    }

    /// An integer in `min..=max`; `unit` says what it counts (for the message).
    fn int(&mut self, key: &str, default: i64, min: i64, max: i64, unit: &str) -> i64 {
        let Some(v) = self.get(key) else {
            return default;
        };
        match v.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => n,
            Ok(_) => {
                self.problem(
                    key,
                    v,
                    format!("is out of range: write a whole number of {unit} from {min} to {max}"),
                );
                default
            }
            Err(_) => {
                self.problem(
                    key,
                    v,
                    format!("is not a whole number: write a number of {unit}, e.g. \"{default}\""),
                );
                default
            }
        }
    }

    /// An OpenStack ID; an empty value counts as unset (the upstream reads "" as "not given").
    fn id(&mut self, key: &str, what: &str) -> Option<String> {
        let v = self.get(key)?.trim();
        if v.is_empty() {
            return None;
        }
        if is_openstack_id(v) {
            Some(v.to_owned())
        } else {
            self.problem(
                key,
                v,
                format!(
                    "is not an OpenStack ID: give the {what}'s UUID (`openstack … show -f value -c id \
                     <name>`), not its name"
                ),
            );
            None
        }
    }

    fn string(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
}

/// A UUID, with or without dashes (Neutron and Octavia IDs are UUIDs).
pub fn is_openstack_id(s: &str) -> bool {
    let hex = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit());
    if s.len() == 32 {
        return hex(s);
    }
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && hex(p))
}

/// RFC 1123 subdomain (what Kubernetes accepts as `status.loadBalancer.ingress[].hostname`).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// A Kubernetes label key (`[prefix/]name`) or, with `value`, a label value.
fn is_label_part(s: &str, value: bool) -> bool {
    let name_ok = |n: &str| {
        n.len() <= 63
            && (value && n.is_empty()
                || !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                    && n.as_bytes()[0].is_ascii_alphanumeric()
                    && n.as_bytes()[n.len() - 1].is_ascii_alphanumeric())
    };
    if value {
        return name_ok(s);
    }
    match s.split_once('/') {
        Some((prefix, name)) => !prefix.is_empty() && is_dns_subdomain(prefix) && name_ok(name),
        None => name_ok(s),
    }
}

fn lb_algorithm(m: LbMethod) -> LbAlgorithm {
    LbAlgorithm::from(m.as_str())
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

/// Checks every annotation and spec field the load balancer depends on and returns the typed
/// options, or every problem found.
///
/// Errors: each [`Problem`] names the annotation (or `spec.…` field, or cloud.conf key), the
/// value, and the fix. Non-blocking findings (unknown `loadbalancer.openstack.org/` keys, values
/// the provider ignores) are in [`ServiceOptions::notes`].
pub fn parse(svc: &Service, cfg: &CloudConfig) -> Result<ServiceOptions, Vec<Problem>> {
    let empty = BTreeMap::new();
    let ann = svc.metadata.annotations.as_ref().unwrap_or(&empty);
    let mut r = Reader {
        ann,
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let lbc = &cfg.load_balancer;
    let ovn = lbc.lb_provider == "ovn";
    let spec = svc.spec.clone().unwrap_or_default();

    for key in ann.keys() {
        if key.starts_with(P) && !ALL.contains(&key.as_str()) {
            let near = crate::suggest::closest(key, ALL.iter().copied(), 3);
            let hint = match near {
                Some(k) => format!("is not an annotation kos-ccm knows: did you mean {k}?"),
                None => "is not an annotation kos-ccm knows; it is ignored".to_owned(),
            };
            r.note(key, &ann[key], hint);
        }
    }

    let ipv6 = spec
        .ip_families
        .as_ref()
        .and_then(|f| f.first())
        .is_some_and(|f| f == "IPv6");
    let internal_ann = r.bool(INTERNAL, false);
    let internal = if lbc.internal_lb {
        if r.get(INTERNAL) == Some("false") {
            r.note(
                INTERNAL,
                "false",
                "is ignored: [LoadBalancer] internal-lb = true makes every Service internal",
            );
        }
        true
    } else {
        internal_ann || ipv6
    };

    // The class: the upstream lets it win over the network and subnet annotations.
    let class_name = r.string(CLASS);
    let class = match &class_name {
        Some(name) => match cfg.load_balancer_classes.get(name) {
            Some(c) => Some(c.clone()),
            None => {
                let known: Vec<&str> = cfg
                    .load_balancer_classes
                    .keys()
                    .map(String::as_str)
                    .collect();
                let fix = if known.is_empty() {
                    "cloud.conf defines no [LoadBalancerClass \"name\"] section: add one or remove \
                     the annotation"
                        .to_owned()
                } else {
                    format!(
                        "use one of the classes cloud.conf defines: {}",
                        known.join(", ")
                    )
                };
                r.problem(CLASS, name, format!("is not a known class: {fix}"));
                None
            }
        },
        None => None,
    };

    // VIP placement: port-id, else subnet (annotation > class > config), else network.
    let port_id = r.id(PORT_ID, "Neutron port");
    let subnet_ann = r.id(SUBNET_ID, "subnet");
    let network_ann = r.id(NETWORK_ID, "network");
    let member_subnet_ann = r.id(MEMBER_SUBNET_ID, "subnet");
    let class_ref = class.as_ref();
    let subnet = subnet_ann
        .or_else(|| class_ref.and_then(|c| c.subnet_id.clone()))
        .or_else(|| lbc.subnet_id.clone());
    let network = network_ann
        .or_else(|| class_ref.and_then(|c| c.network_id.clone()))
        .or_else(|| lbc.network_id.clone());
    let vip = match (port_id, subnet, network) {
        (Some(p), s, n) => {
            if s.is_some() || n.is_some() {
                r.note(
                    PORT_ID,
                    &p,
                    "wins: the VIP is this port, the subnet and network settings are not used for it",
                );
            }
            VipChoice::Port(p)
        }
        (None, Some(s), _) => VipChoice::Subnet(s),
        (None, None, Some(n)) => VipChoice::Network(n),
        (None, None, None) => VipChoice::Auto,
    };
    let member_subnet_id = member_subnet_ann
        .or_else(|| class_ref.and_then(|c| c.member_subnet_id.clone()))
        .or_else(|| lbc.member_subnet_id.clone());

    // Floating network and subnet: class > annotation > config (the upstream order).
    let fnet_ann = r.id(FLOATING_NETWORK_ID, "external network");
    let floating_network_id = class_ref
        .and_then(|c| c.floating_network_id.clone())
        .or(fnet_ann)
        .or_else(|| lbc.floating_network_id.clone());
    let fsub_id_ann = r.id(FLOATING_SUBNET_ID, "subnet");
    let pattern = |r: &mut Reader, key: &str, raw: Option<String>| -> Option<NamePattern> {
        let raw = raw?;
        match NamePattern::parse(&raw) {
            Ok(p) => Some(p),
            Err(e) => {
                r.problem(
                    key,
                    &raw,
                    format!(
                        "is not a valid pattern ({e}): write a glob such as \"public-*\", or a \
                         regular expression after ~"
                    ),
                );
                None
            }
        }
    };
    let tagspec = |r: &mut Reader, key: &str, raw: Option<String>| -> Option<TagSpec> {
        let raw = raw?;
        match TagSpec::parse(&raw) {
            Ok(t) => Some(t),
            Err(e) => {
                r.problem(
                    key,
                    &raw,
                    format!("{e}: write tags separated by commas, e.g. \"public,ipv4\""),
                );
                None
            }
        }
    };
    let fsub_ann_name = r.string(FLOATING_SUBNET);
    let fsub_ann_tags = r.string(FLOATING_SUBNET_TAGS);
    let ann_name = pattern(&mut r, FLOATING_SUBNET, fsub_ann_name);
    let ann_tags = tagspec(&mut r, FLOATING_SUBNET_TAGS, fsub_ann_tags);
    let from = |id: Option<String>, name: Option<NamePattern>, tags: Option<TagSpec>| match (
        id, name, tags,
    ) {
        (Some(id), _, _) => Some(FloatingSubnet::Id(id)),
        (None, None, None) => None,
        (None, name, tags) => Some(FloatingSubnet::Matching { name, tags }),
    };
    let class_fsub = match class_ref {
        Some(c) => {
            let key = "[LoadBalancerClass] floating-subnet";
            let name = pattern(&mut r, key, c.floating_subnet.clone());
            let tags = tagspec(
                &mut r,
                "[LoadBalancerClass] floating-subnet-tags",
                c.floating_subnet_tags.clone(),
            );
            from(c.floating_subnet_id.clone(), name, tags)
        }
        None => None,
    };
    let cfg_fsub = {
        let name = pattern(
            &mut r,
            "[LoadBalancer] floating-subnet",
            lbc.floating_subnet.clone(),
        );
        let tags = tagspec(
            &mut r,
            "[LoadBalancer] floating-subnet-tags",
            lbc.floating_subnet_tags.clone(),
        );
        from(lbc.floating_subnet_id.clone(), name, tags)
    };
    let floating_subnet = class_fsub
        .or_else(|| from(fsub_id_ann, ann_name, ann_tags))
        .or(cfg_fsub)
        .unwrap_or_default();

    let connection_limit = r.int(
        CONNECTION_LIMIT,
        -1,
        -1,
        i64::from(i32::MAX),
        "connections (-1 for no limit)",
    );
    let keep_floating_ip = r.bool(KEEP_FLOATING_IP, false);
    let proxy = match r.get(PROXY_PROTOCOL) {
        None | Some("false") => None,
        Some("true" | "v1") => Some(ProxyProtocol::V1),
        Some("v2") => Some(ProxyProtocol::V2),
        Some(v) => {
            r.problem(
                PROXY_PROTOCOL,
                v,
                "is not a PROXY protocol setting: write \"true\" or \"v1\" (version 1), \"v2\" \
                 (version 2) or \"false\"",
            );
            None
        }
    };
    let x_forwarded_for = r.bool(X_FORWARDED_FOR, false);
    if proxy.is_some() && x_forwarded_for {
        let v = r.get(PROXY_PROTOCOL).unwrap_or_default().to_owned();
        r.problem(
            PROXY_PROTOCOL,
            &v,
            format!(
                "cannot be combined with {X_FORWARDED_FOR}: the PROXY header and an HTTP listener \
                 exclude each other; remove one of the two"
            ),
        );
    }
    let lb_method = match r.string(LB_METHOD) {
        None => lb_algorithm(lbc.lb_method),
        Some(v) => match LbMethod::ALL.iter().find(|m| **m == v) {
            Some(m) => LbAlgorithm::from(*m),
            None => {
                r.problem(
                    LB_METHOD,
                    &v,
                    format!(
                        "is not an Octavia algorithm: use one of {}",
                        LbMethod::ALL.join(", ")
                    ),
                );
                lb_algorithm(lbc.lb_method)
            }
        },
    };
    if ovn && lb_method != LbAlgorithm::SourceIpPort {
        let (key, v) = match r.get(LB_METHOD) {
            Some(v) => (LB_METHOD, v.to_owned()),
            None => ("[LoadBalancer] lb-method", lb_method.as_str().to_owned()),
        };
        r.problem(
            key,
            &v,
            "is not supported by the OVN provider: use SOURCE_IP_PORT",
        );
    }

    let ms = "milliseconds";
    let max_ms = 31_536_000;
    let t = [
        r.int(TIMEOUT_CLIENT_DATA, 50_000, 0, max_ms, ms),
        r.int(TIMEOUT_MEMBER_CONNECT, 5_000, 0, max_ms, ms),
        r.int(TIMEOUT_MEMBER_DATA, 50_000, 0, max_ms, ms),
        r.int(TIMEOUT_TCP_INSPECT, 0, 0, max_ms, ms),
    ]
    .map(|n| u64::try_from(n).unwrap_or(0));
    let timeouts = if ovn {
        for key in [
            TIMEOUT_CLIENT_DATA,
            TIMEOUT_MEMBER_CONNECT,
            TIMEOUT_MEMBER_DATA,
            TIMEOUT_TCP_INSPECT,
        ] {
            if let Some(v) = r.get(key) {
                r.note(
                    key,
                    v,
                    "is ignored: the OVN provider has no listener timeouts",
                );
            }
        }
        None
    } else {
        Some(ListenerTimeouts {
            timeout_client_data: Some(t[0]),
            timeout_member_connect: Some(t[1]),
            timeout_member_data: Some(t[2]),
            timeout_tcp_inspect: Some(t[3]),
        })
    };

    let enabled = r.bool(ENABLE_HEALTH_MONITOR, lbc.create_monitor);
    let disabled_explicitly = r.get(ENABLE_HEALTH_MONITOR) == Some("false");
    let s = "seconds";
    let delay = r.int(
        HEALTH_MONITOR_DELAY,
        i64::from(secs(lbc.monitor_delay)),
        1,
        i64::from(i32::MAX),
        s,
    );
    let timeout = r.int(
        HEALTH_MONITOR_TIMEOUT,
        i64::from(secs(lbc.monitor_timeout)),
        1,
        i64::from(i32::MAX),
        s,
    );
    let max_retries = r.int(
        HEALTH_MONITOR_MAX_RETRIES,
        i64::from(lbc.monitor_max_retries),
        1,
        10,
        "checks",
    );
    let max_retries_down = r.int(
        HEALTH_MONITOR_MAX_RETRIES_DOWN,
        i64::from(lbc.monitor_max_retries_down),
        1,
        10,
        "checks",
    );
    if timeout > delay {
        let (key, v) = match r.get(HEALTH_MONITOR_TIMEOUT) {
            Some(v) => (HEALTH_MONITOR_TIMEOUT, v.to_owned()),
            None => ("[LoadBalancer] monitor-timeout", format!("{timeout}s")),
        };
        r.problem(
            key,
            &v,
            format!(
                "is longer than the health monitor delay ({delay} s): Octavia needs timeout ≤ delay; \
                 lower it or raise {HEALTH_MONITOR_DELAY}"
            ),
        );
    }
    let u = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    let monitor = MonitorOptions {
        enabled,
        disabled_explicitly,
        delay: u(delay),
        timeout: u(timeout),
        max_retries: u(max_retries),
        max_retries_down: u(max_retries_down),
    };

    let flavor_id = r
        .id(FLAVOR_ID, "Octavia flavor")
        .or_else(|| lbc.flavor_id.clone());
    let availability_zone = r
        .string(AVAILABILITY_ZONE)
        .or_else(|| lbc.availability_zone.clone());
    if ovn && let Some(v) = r.get(FLAVOR_ID) {
        r.note(FLAVOR_ID, v, "is ignored: the OVN provider has no flavors");
    }
    let flavor_id = if ovn { None } else { flavor_id };

    let tls_container_ref = r
        .string(DEFAULT_TLS_CONTAINER_REF)
        .or_else(|| lbc.default_tls_container_ref.clone());
    if let Some(tls) = &tls_container_ref {
        let key = if r.get(DEFAULT_TLS_CONTAINER_REF).is_some() {
            DEFAULT_TLS_CONTAINER_REF
        } else {
            "[LoadBalancer] default-tls-container-ref"
        };
        if lbc.container_store == "barbican" && !is_barbican_ref(tls) {
            r.problem(
                key,
                tls,
                "is not a Barbican reference: write the container or secret URL, \
                 https://<key-manager>/v1/containers/<uuid> or …/v1/secrets/<uuid> (or set \
                 [LoadBalancer] container-store = external)",
            );
        }
    }

    let load_balancer_id = r.id(LOAD_BALANCER_ID, "Octavia load balancer");
    let hostname = r.string(HOSTNAME);
    if let Some(h) = &hostname
        && !is_dns_subdomain(h)
    {
        r.problem(
            HOSTNAME,
            h,
            "is not a DNS name: write lower-case labels of letters, digits and '-' separated by '.', \
             e.g. \"lb.example.com\"",
        );
    }

    let node_selector = match r.get(NODE_SELECTOR) {
        None => lbc.node_selector.clone(),
        Some(v) => {
            let mut m = BTreeMap::new();
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, val) = part.split_once('=').unwrap_or((part, ""));
                let (k, val) = (k.trim(), val.trim());
                if !is_label_part(k, false) || !is_label_part(val, true) {
                    r.problem(
                        NODE_SELECTOR,
                        v,
                        format!(
                            "has {part:?}, which is not a label selector term: write \
                             key=value,key2 with Kubernetes label keys and values"
                        ),
                    );
                    continue;
                }
                m.insert(k.to_owned(), val.to_owned());
            }
            m
        }
    };

    let source_ranges = source_ranges(&mut r, spec.load_balancer_source_ranges.as_deref());
    // OVN listeners take no allowed CIDRs; with manage-security-groups the Service's security
    // group enforces the ranges instead (security_groups.rs), so there is nothing to warn about.
    let source_ranges = if ovn && !source_ranges.is_empty() {
        if !lbc.manage_security_groups {
            r.note(
                "spec.loadBalancerSourceRanges",
                &source_ranges
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                "are ignored: the OVN provider has no allowed CIDRs on listeners (the upstream \
             enforces them only with manage-security-groups)",
            );
        }
        Vec::new()
    } else {
        source_ranges
    };

    let load_balancer_ip = match spec.load_balancer_ip.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(v) => match v.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                r.problem(
                    "spec.loadBalancerIP",
                    v,
                    "is not an IP address: give the floating IP (or, for an internal Service, the \
                     VIP) as a plain address",
                );
                None
            }
        },
    };

    let ports = spec.ports.as_deref().unwrap_or_default();
    if ports.is_empty() {
        r.problem(
            "spec.ports",
            "",
            "is empty: a load balancer needs at least one port",
        );
    }
    for (i, p) in ports.iter().enumerate() {
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        let key = format!("spec.ports[{i}].protocol");
        if !matches!(proto, "TCP" | "UDP" | "SCTP") {
            r.problem(&key, proto, "is not TCP, UDP or SCTP");
            continue;
        }
        if proto == "TCP" {
            continue;
        }
        if tls_container_ref.is_some() {
            r.problem(
                &key,
                proto,
                format!(
                    "cannot be served by a TERMINATED_HTTPS listener ({DEFAULT_TLS_CONTAINER_REF} is \
                     set): TLS termination needs TCP ports"
                ),
            );
        }
        if x_forwarded_for {
            r.problem(
                &key,
                proto,
                format!("cannot carry HTTP headers ({X_FORWARDED_FOR} is set): use TCP ports"),
            );
        }
        if proxy.is_some() {
            r.problem(
                &key,
                proto,
                format!("cannot carry the PROXY protocol ({PROXY_PROTOCOL} is set): use TCP ports"),
            );
        }
    }
    if ovn {
        for (key, on) in [
            (PROXY_PROTOCOL, proxy.is_some()),
            (X_FORWARDED_FOR, x_forwarded_for),
            (DEFAULT_TLS_CONTAINER_REF, tls_container_ref.is_some()),
        ] {
            if on {
                let v = r.get(key).unwrap_or("(cloud.conf)").to_owned();
                r.problem(
                    key,
                    &v,
                    "is not supported by the OVN provider (layer 4 only): remove it or use a \
                     Service class on an amphora provider",
                );
            }
        }
    }

    if !r.problems.is_empty() {
        return Err(r.problems);
    }
    Ok(ServiceOptions {
        internal,
        class: class_name,
        vip,
        member_subnet_id,
        floating_network_id,
        floating_subnet,
        connection_limit,
        keep_floating_ip,
        proxy,
        x_forwarded_for,
        lb_method,
        timeouts,
        monitor,
        flavor_id,
        availability_zone,
        tls_container_ref,
        load_balancer_id,
        hostname,
        node_selector,
        source_ranges,
        load_balancer_ip,
        ipv6,
        ovn,
        notes: r.notes,
    })
}

/// `https://host[:port]/v1/containers/<uuid>` or `…/v1/secrets/<uuid>` (upstream validates the
/// last two path segments, then GETs it from Barbican).
fn is_barbican_ref(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
    else {
        return false;
    };
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    segs.len() >= 3
        && matches!(segs[segs.len() - 2], "containers" | "secrets")
        && is_openstack_id(segs[segs.len() - 1])
}

fn source_ranges(r: &mut Reader, spec: Option<&[String]>) -> Vec<IpNet> {
    let (key, items): (&str, Vec<String>) = match spec {
        Some(s) if !s.is_empty() => ("spec.loadBalancerSourceRanges", s.to_vec()),
        _ => match r
            .get(SOURCE_RANGES)
            .map(str::trim)
            .filter(|v| !v.is_empty())
        {
            Some(v) => (
                SOURCE_RANGES,
                v.split(',').map(|x| x.trim().to_owned()).collect(),
            ),
            None => return Vec::new(),
        },
    };
    let mut out = Vec::new();
    for item in &items {
        match item.parse::<IpNet>() {
            Ok(n) => out.push(n.trunc()),
            Err(_) => r.problem(
                key,
                item,
                "is not a CIDR: write address/prefix, e.g. \"203.0.113.0/24\"",
            ),
        }
    }
    // Everyone is the same as no restriction: Octavia's default.
    if out.iter().any(|n| n.prefix_len() == 0) {
        return Vec::new();
    }
    out.sort();
    out.dedup();
    out
}
