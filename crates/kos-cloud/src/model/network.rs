//! Neutron: networks, subnets, routers, ports, security groups and rules, floating IPs, tags, quotas.
//!
//! Create requests carry their tags, but the tags are not serialised into the POST: Neutron refuses them
//! there (400) on every resource but ports, and keeps a port's only with its
//! `tag-ports-during-bulk-creation` extension. The facade applies them with a PUT …/tags right after,
//! or, for ports on a cloud with that extension, adds them to the POST itself
//! (`NetworkApi::create_ports`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};
#[cfg(test)]
use serde_json::Value;
use serde_json::json;

use super::common::{QuotaUsage, TagQuery, nullable};

/// A Neutron object that carries its tags: what a lookup by name needs to tell whose it is, and what a
/// create fills in after its tag PUT.
pub trait Tagged {
    fn id(&self) -> &str;
    fn tags(&self) -> &[String];
    fn tags_mut(&mut self) -> &mut Vec<String>;
}

macro_rules! tagged {
    ($($t:ty),*) => {$(
        impl Tagged for $t {
            fn id(&self) -> &str { &self.id }
            fn tags(&self) -> &[String] { &self.tags }
            fn tags_mut(&mut self) -> &mut Vec<String> { &mut self.tags }
        }
    )*};
}
tagged!(Network, Subnet, Router, Port, SecurityGroup, FloatingIp);

/// A Neutron resource type that takes tags (`PUT /v2.0/{collection}/{id}/tags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaggedKind {
    Network,
    Subnet,
    Port,
    Router,
    SecurityGroup,
    FloatingIp,
}

impl TaggedKind {
    /// The collection's path segment.
    pub fn collection(self) -> &'static str {
        match self {
            TaggedKind::Network => "networks",
            TaggedKind::Subnet => "subnets",
            TaggedKind::Port => "ports",
            TaggedKind::Router => "routers",
            TaggedKind::SecurityGroup => "security-groups",
            TaggedKind::FloatingIp => "floatingips",
        }
    }

    pub(crate) fn op_replace_tags(self) -> &'static str {
        match self {
            TaggedKind::Network => "network.tags.replace",
            TaggedKind::Subnet => "subnet.tags.replace",
            TaggedKind::Port => "port.tags.replace",
            TaggedKind::Router => "router.tags.replace",
            TaggedKind::SecurityGroup => "security_group.tags.replace",
            TaggedKind::FloatingIp => "floating_ip.tags.replace",
        }
    }

    pub(crate) fn op_add_tag(self) -> &'static str {
        match self {
            TaggedKind::Network => "network.tags.add",
            TaggedKind::Subnet => "subnet.tags.add",
            TaggedKind::Port => "port.tags.add",
            TaggedKind::Router => "router.tags.add",
            TaggedKind::SecurityGroup => "security_group.tags.add",
            TaggedKind::FloatingIp => "floating_ip.tags.add",
        }
    }
}

fn push(q: &mut Vec<(String, String)>, k: &str, v: Option<&String>) {
    if let Some(v) = v {
        q.push((k.to_owned(), v.clone()));
    }
}

// ---------------------------------------------------------------- networks

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Network {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub status: String,
    pub admin_state_up: bool,
    pub shared: bool,
    #[serde(rename = "router:external")]
    pub external: bool,
    pub mtu: Option<u32>,
    pub port_security_enabled: Option<bool>,
    /// Subnet ids.
    pub subnets: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkCreate {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_state_up: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_security_enabled: Option<bool>,
    /// Applied after create.
    #[serde(skip)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkFilter {
    pub name: Option<String>,
    pub id: Option<String>,
    /// `router:external`.
    pub external: Option<bool>,
    pub tags: TagQuery,
}

impl NetworkFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = self.tags.to_query();
        push(&mut q, "name", self.name.as_ref());
        push(&mut q, "id", self.id.as_ref());
        if let Some(e) = self.external {
            q.push(("router:external".into(), e.to_string()));
        }
        q
    }
}

// ---------------------------------------------------------------- subnets

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocationPool {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostRoute {
    pub destination: String,
    pub nexthop: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Subnet {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub network_id: String,
    pub cidr: String,
    pub ip_version: u8,
    pub gateway_ip: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub allocation_pools: Vec<AllocationPool>,
    #[serde(deserialize_with = "nullable")]
    pub dns_nameservers: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub host_routes: Vec<HostRoute>,
    pub enable_dhcp: bool,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

/// The subnet's gateway: Neutron's default (first address), a given address, or none at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Gateway {
    #[default]
    Auto,
    Ip(String),
    Disabled,
}

impl Gateway {
    fn is_auto(&self) -> bool {
        *self == Gateway::Auto
    }
}

impl Serialize for Gateway {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Gateway::Ip(ip) => s.serialize_str(ip),
            Gateway::Auto | Gateway::Disabled => s.serialize_none(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubnetCreate {
    pub network_id: String,
    pub name: String,
    pub cidr: String,
    pub ip_version: u8,
    #[serde(rename = "gateway_ip", skip_serializing_if = "Gateway::is_auto")]
    pub gateway: Gateway,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocation_pools: Vec<AllocationPool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dns_nameservers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_dhcp: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Applied after create.
    #[serde(skip)]
    pub tags: Vec<String>,
}

impl SubnetCreate {
    /// An IPv4 or IPv6 subnet (the version follows the CIDR) with Neutron's default gateway and pool.
    pub fn new(
        network_id: impl Into<String>,
        name: impl Into<String>,
        cidr: impl Into<String>,
    ) -> Self {
        let cidr = cidr.into();
        SubnetCreate {
            network_id: network_id.into(),
            name: name.into(),
            ip_version: if cidr.contains(':') { 6 } else { 4 },
            cidr,
            gateway: Gateway::Auto,
            allocation_pools: Vec::new(),
            dns_nameservers: Vec::new(),
            enable_dhcp: None,
            description: None,
            tags: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubnetFilter {
    pub name: Option<String>,
    pub network_id: Option<String>,
    pub tags: TagQuery,
}

impl SubnetFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = self.tags.to_query();
        push(&mut q, "name", self.name.as_ref());
        push(&mut q, "network_id", self.network_id.as_ref());
        q
    }
}

// ---------------------------------------------------------------- routers

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FixedIp {
    pub subnet_id: String,
    pub ip_address: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExternalGateway {
    pub network_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_snat: Option<bool>,
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub external_fixed_ips: Vec<FixedIp>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Router {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub status: String,
    pub admin_state_up: bool,
    pub external_gateway_info: Option<ExternalGateway>,
    /// Extra routes (what OCCM's route controller manages).
    #[serde(deserialize_with = "nullable")]
    pub routes: Vec<HostRoute>,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RouterCreate {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_gateway_info: Option<ExternalGateway>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_state_up: Option<bool>,
    /// Applied after create.
    #[serde(skip)]
    pub tags: Vec<String>,
}

impl RouterCreate {
    /// A router with its gateway on `external_network_id` (SNAT as the cloud defaults).
    pub fn with_gateway(name: impl Into<String>, external_network_id: impl Into<String>) -> Self {
        RouterCreate {
            name: name.into(),
            external_gateway_info: Some(ExternalGateway {
                network_id: external_network_id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// What add/remove_router_interface answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RouterInterface {
    /// The router's id.
    pub id: String,
    pub subnet_id: String,
    pub port_id: String,
    pub network_id: String,
    pub subnet_ids: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterFilter {
    pub name: Option<String>,
    pub tags: TagQuery,
}

impl RouterFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = self.tags.to_query();
        push(&mut q, "name", self.name.as_ref());
        q
    }
}

// ---------------------------------------------------------------- ports

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AddressPair {
    /// An address or a CIDR (kos puts the pod and service CIDRs here).
    pub ip_address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

impl AddressPair {
    pub fn ip(ip_or_cidr: impl Into<String>) -> Self {
        AddressPair {
            ip_address: ip_or_cidr.into(),
            mac_address: None,
        }
    }
}

/// A fixed IP asked for on a new or updated port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum FixedIpRequest {
    /// Any free address of the subnet.
    Subnet { subnet_id: String },
    /// This address of this subnet.
    Address {
        subnet_id: String,
        ip_address: String,
    },
    /// This address, on whichever subnet of the network holds it.
    Ip { ip_address: String },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Port {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub network_id: String,
    pub device_id: String,
    pub device_owner: String,
    pub mac_address: String,
    pub status: String,
    pub admin_state_up: bool,
    #[serde(deserialize_with = "nullable")]
    pub fixed_ips: Vec<FixedIp>,
    #[serde(deserialize_with = "nullable")]
    pub allowed_address_pairs: Vec<AddressPair>,
    #[serde(deserialize_with = "nullable")]
    pub security_groups: Vec<String>,
    pub port_security_enabled: Option<bool>,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub project_id: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortCreate {
    pub network_id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixed_ips: Vec<FixedIpRequest>,
    /// Needs port security on (Neutron rejects the pairs otherwise); set them all at once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// `None`: the project's default group; `Some(vec![])`: no group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_security_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_state_up: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_owner: Option<String>,
    /// Applied after create.
    #[serde(skip)]
    pub tags: Vec<String>,
}

impl PortCreate {
    pub fn new(network_id: impl Into<String>, name: impl Into<String>) -> Self {
        PortCreate {
            network_id: network_id.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// Refuses combinations Neutron rejects, before sending.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_port_security(
            self.port_security_enabled,
            self.security_groups.as_deref(),
            &self.allowed_address_pairs,
        )
    }
}

fn check_port_security(
    enabled: Option<bool>,
    sgs: Option<&[String]>,
    aaps: &[AddressPair],
) -> Result<(), String> {
    if enabled == Some(false) {
        if sgs.is_some_and(|s| !s.is_empty()) {
            return Err("security groups need port_security_enabled".into());
        }
        if !aaps.is_empty() {
            return Err("allowed address pairs need port_security_enabled".into());
        }
    }
    Ok(())
}

/// A partial port update: `None` leaves the field as it is; lists replace the whole list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_ips: Option<Vec<FixedIpRequest>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_address_pairs: Option<Vec<AddressPair>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_security_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_state_up: Option<bool>,
}

impl PortUpdate {
    pub(crate) fn check(&self) -> Result<(), String> {
        check_port_security(
            self.port_security_enabled,
            self.security_groups.as_deref(),
            self.allowed_address_pairs.as_deref().unwrap_or_default(),
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortFilter {
    pub name: Option<String>,
    pub network_id: Option<String>,
    pub device_id: Option<String>,
    pub device_owner: Option<String>,
    pub tags: TagQuery,
}

impl PortFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = self.tags.to_query();
        push(&mut q, "name", self.name.as_ref());
        push(&mut q, "network_id", self.network_id.as_ref());
        push(&mut q, "device_id", self.device_id.as_ref());
        push(&mut q, "device_owner", self.device_owner.as_ref());
        q
    }
}

// ---------------------------------------------------------------- security groups

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecurityGroupRule {
    pub id: String,
    pub security_group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    pub protocol: Option<String>,
    pub port_range_min: Option<u16>,
    pub port_range_max: Option<u16>,
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
    /// A Neutron address group (API extension `address-group`): the rule matches its addresses.
    pub remote_address_group_id: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    #[serde(deserialize_with = "nullable")]
    pub security_group_rules: Vec<SecurityGroupRule>,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub stateful: Option<bool>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SecurityGroupCreate {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Applied after create.
    #[serde(skip)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtherType {
    IPv4,
    IPv6,
}

/// Where the traffic of a rule comes from (or goes to): anywhere, a CIDR, or members of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Any,
    IpPrefix(String),
    Group(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroupRuleCreate {
    pub security_group_id: String,
    pub direction: Direction,
    pub ethertype: EtherType,
    /// `tcp`, `udp`, `icmp`, a number, or `None` for any.
    pub protocol: Option<String>,
    /// Inclusive; for ICMP, (type, code).
    pub port_range: Option<(u16, u16)>,
    pub remote: Remote,
    pub description: Option<String>,
}

impl SecurityGroupRuleCreate {
    /// Ingress TCP on `ports` from `remote`, IPv4.
    pub fn tcp_in(security_group_id: impl Into<String>, ports: (u16, u16), remote: Remote) -> Self {
        SecurityGroupRuleCreate {
            security_group_id: security_group_id.into(),
            direction: Direction::Ingress,
            ethertype: EtherType::IPv4,
            protocol: Some("tcp".into()),
            port_range: Some(ports),
            remote,
            description: None,
        }
    }
}

impl SecurityGroupRuleCreate {
    /// Whether `r` is this rule as Neutron sees it: the same content (group, direction, ethertype,
    /// protocol, ports, remote), which is how Neutron refuses a duplicate (409
    /// `SecurityGroupRuleExists`). Rules have no name or tags, so this is how one whose create
    /// answer was lost is found. The description is no part of it.
    pub fn same_as(&self, r: &SecurityGroupRule) -> bool {
        let direction = match self.direction {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        };
        let ethertype = match self.ethertype {
            EtherType::IPv4 => "IPv4",
            EtherType::IPv6 => "IPv6",
        };
        let (prefix, group) = match &self.remote {
            Remote::Any => (None, None),
            Remote::IpPrefix(p) => (any_prefix(p), None),
            Remote::Group(g) => (None, Some(g.as_str())),
        };
        r.security_group_id == self.security_group_id
            && r.direction == direction
            && r.ethertype == ethertype
            && protocol_number(self.protocol.as_deref()) == protocol_number(r.protocol.as_deref())
            && self.port_range == r.port_range_min.zip(r.port_range_max)
            && prefix == r.remote_ip_prefix.as_deref().and_then(any_prefix)
            && group == r.remote_group_id.as_deref()
    }
}

/// A protocol as Neutron compares it: `tcp` and `6` are one; `any` and none are none.
fn protocol_number(p: Option<&str>) -> Option<String> {
    let p = p?.to_ascii_lowercase();
    let n = match p.as_str() {
        "any" | "" => return None,
        "icmp" => "1",
        "tcp" => "6",
        "udp" => "17",
        "ipv6-icmp" | "icmpv6" => "58",
        other => other,
    };
    Some(n.to_owned())
}

/// A remote prefix as Neutron stores it: an address is its host CIDR, `0.0.0.0/0` and `::/0` are
/// "anywhere" (no prefix).
fn any_prefix(p: &str) -> Option<String> {
    let (addr, len) = match p.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (p, None),
    };
    let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
        return Some(p.to_owned());
    };
    let len = len.map_or(if ip.is_ipv4() { 32 } else { 128 }, |l| {
        l.parse().unwrap_or(u8::MAX)
    });
    (len != 0).then(|| format!("{ip}/{len}"))
}

impl Serialize for SecurityGroupRuleCreate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = json!({
            "security_group_id": self.security_group_id,
            "direction": match self.direction { Direction::Ingress => "ingress", Direction::Egress => "egress" },
            "ethertype": match self.ethertype { EtherType::IPv4 => "IPv4", EtherType::IPv6 => "IPv6" },
        });
        if let Some(p) = &self.protocol {
            v["protocol"] = json!(p);
        }
        if let Some((min, max)) = self.port_range {
            v["port_range_min"] = json!(min);
            v["port_range_max"] = json!(max);
        }
        match &self.remote {
            Remote::Any => {}
            Remote::IpPrefix(p) => v["remote_ip_prefix"] = json!(p),
            Remote::Group(g) => v["remote_group_id"] = json!(g),
        }
        if let Some(d) = &self.description {
            v["description"] = json!(d);
        }
        v.serialize(s)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityGroupFilter {
    pub name: Option<String>,
    pub tags: TagQuery,
}

impl SecurityGroupFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = self.tags.to_query();
        push(&mut q, "name", self.name.as_ref());
        q
    }
}

// ---------------------------------------------------------------- floating IPs

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FloatingIp {
    pub id: String,
    pub floating_ip_address: String,
    pub floating_network_id: String,
    pub port_id: Option<String>,
    pub fixed_ip_address: Option<String>,
    pub router_id: Option<String>,
    pub status: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FloatingIpCreate {
    pub floating_network_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Associate right away (needs a router between the port's subnet and the external network).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed_ip_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floating_ip_address: Option<String>,
    /// Applied after create.
    #[serde(skip)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloatingIpFilter {
    pub description: Option<String>,
    pub port_id: Option<String>,
    pub floating_ip_address: Option<String>,
    pub floating_network_id: Option<String>,
    /// Only this project's (an admin session sees every project's otherwise).
    pub project_id: Option<String>,
    pub tags: TagQuery,
}

impl FloatingIpFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = self.tags.to_query();
        push(&mut q, "description", self.description.as_ref());
        push(&mut q, "port_id", self.port_id.as_ref());
        push(
            &mut q,
            "floating_ip_address",
            self.floating_ip_address.as_ref(),
        );
        push(
            &mut q,
            "floating_network_id",
            self.floating_network_id.as_ref(),
        );
        push(&mut q, "project_id", self.project_id.as_ref());
        q
    }
}

/// `GET /v2.0/quotas/{project}/details`: resource name (`port`, `floatingip`, …) → limit and usage.
pub type NetworkQuotas = BTreeMap<String, QuotaUsage>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{keys, parse_sample, sample_keys};

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn a_rule_is_found_by_its_content_as_neutron_compares_it() {
        let want = SecurityGroupRuleCreate {
            description: Some("api".into()),
            ..SecurityGroupRuleCreate::tcp_in(
                "sg",
                (6443, 6443),
                Remote::IpPrefix("10.0.0.5".into()),
            )
        };
        let have = SecurityGroupRule {
            id: "r1".into(),
            security_group_id: "sg".into(),
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("6".into()),
            port_range_min: Some(6443),
            port_range_max: Some(6443),
            remote_ip_prefix: Some("10.0.0.5/32".into()),
            ..SecurityGroupRule::default()
        };
        assert!(
            want.same_as(&have),
            "tcp is 6, an address its /32, description aside"
        );
        let other_port = SecurityGroupRule {
            port_range_max: Some(6444),
            ..have.clone()
        };
        assert!(!want.same_as(&other_port));
        let other_group = SecurityGroupRule {
            security_group_id: "sg2".into(),
            ..have.clone()
        };
        assert!(!want.same_as(&other_group));
        let any = SecurityGroupRuleCreate {
            remote: Remote::IpPrefix("0.0.0.0/0".into()),
            ..want.clone()
        };
        let unset = SecurityGroupRule {
            remote_ip_prefix: None,
            ..have.clone()
        };
        assert!(any.same_as(&unset), "0.0.0.0/0 is no prefix");
        assert!(!want.same_as(&unset));
        let by_group = SecurityGroupRuleCreate {
            remote: Remote::Group("peer".into()),
            ..want
        };
        let grouped = SecurityGroupRule {
            remote_ip_prefix: None,
            remote_group_id: Some("peer".into()),
            ..have
        };
        assert!(by_group.same_as(&grouped));
        assert!(!any.same_as(&grouped));
    }

    #[test]
    fn responses_parse() -> R {
        let n: Network = parse_sample("network/networks/network-show-response.json", "network")?;
        assert!(!n.id.is_empty());
        let l: Vec<Network> =
            parse_sample("network/networks/networks-list-response.json", "networks")?;
        assert!(!l.is_empty());
        let s: Subnet = parse_sample("network/subnets/subnet-show-response.json", "subnet")?;
        assert!(!s.cidr.is_empty());
        let _: Vec<Subnet> = parse_sample("network/subnets/subnets-list-response.json", "subnets")?;
        let r: Router = parse_sample("network/routers/router-show-response.json", "router")?;
        assert!(r.external_gateway_info.is_some());
        let _: Vec<Router> = parse_sample("network/routers/routers-list-response.json", "routers")?;
        let i: RouterInterface =
            parse_sample("network/routers/router-add-interface-response.json", "")?;
        assert!(!i.port_id.is_empty());
        let p: Port = parse_sample("network/ports/port-show-response.json", "port")?;
        assert_eq!(p.fixed_ips[0].ip_address, "10.0.0.1");
        let _: Vec<Port> = parse_sample("network/ports/ports-list-response.json", "ports")?;
        let p: Port = parse_sample("network/ports/port-create-response.json", "port")?;
        assert!(!p.id.is_empty());
        let g: SecurityGroup = parse_sample(
            "network/security-groups/security-group-show-response.json",
            "security_group",
        )?;
        assert!(!g.id.is_empty());
        let _: Vec<SecurityGroup> = parse_sample(
            "network/security-groups/security-groups-list-response.json",
            "security_groups",
        )?;
        let _: SecurityGroupRule = parse_sample(
            "network/security-groups/security-group-rule-show-response.json",
            "security_group_rule",
        )?;
        let f: FloatingIp = parse_sample(
            "network/floatingips/floatingip-show-response.json",
            "floatingip",
        )?;
        assert_eq!(f.floating_ip_address, "172.24.4.228");
        let _: Vec<FloatingIp> = parse_sample(
            "network/floatingips/floating-ips-list-response.json",
            "floatingips",
        )?;
        let q: NetworkQuotas = parse_sample(
            "network/quota_details/quota-details-show-for-project-response.json",
            "quota",
        )?;
        assert_eq!(
            q["port"],
            QuotaUsage {
                limit: 500,
                used: 21,
                reserved: 3
            }
        );
        Ok(())
    }

    #[test]
    fn create_requests_use_the_api_reference_keys() -> R {
        let net = NetworkCreate {
            name: "n".into(),
            admin_state_up: Some(true),
            mtu: Some(1400),
            tags: vec!["t".into()],
            ..Default::default()
        };
        let got = keys(&serde_json::to_value(&net)?);
        let want = sample_keys("network/networks/network-create-request.json", "network")?;
        assert!(got.iter().all(|k| want.contains(k)), "{got:?} ⊄ {want:?}");

        let sub = SubnetCreate::new("net", "s", "192.168.199.0/24");
        assert_eq!(keys(&serde_json::to_value(&sub)?), {
            let mut w = sample_keys("network/subnets/subnet-create-request.json", "subnet")?;
            w.push("name".into());
            w.sort();
            w
        });
        let mut sub = SubnetCreate::new("net", "s", "fd00::/64");
        sub.gateway = Gateway::Disabled;
        let v = serde_json::to_value(&sub)?;
        assert_eq!(
            (v["ip_version"].clone(), v["gateway_ip"].clone()),
            (json!(6), Value::Null)
        );
        assert!(v.as_object().is_some_and(|o| o.contains_key("gateway_ip")));

        let r = RouterCreate {
            admin_state_up: Some(true),
            ..RouterCreate::with_gateway("router1", "ext")
        };
        assert_eq!(
            keys(&serde_json::to_value(&r)?),
            sample_keys("network/routers/router-create-request.json", "router")?
        );

        let p = PortCreate {
            fixed_ips: vec![FixedIpRequest::Address {
                subnet_id: "s".into(),
                ip_address: "10.0.0.5".into(),
            }],
            allowed_address_pairs: vec![AddressPair::ip("10.244.0.0/16")],
            security_groups: Some(vec!["sg".into()]),
            port_security_enabled: Some(true),
            ..PortCreate::new("net", "p")
        };
        let v = serde_json::to_value(&p)?;
        let want = sample_keys("network/ports/port-create-request.json", "port")?;
        assert!(
            keys(&v)
                .iter()
                .all(|k| want.contains(k) || k == "fixed_ips" || k == "security_groups")
        );
        assert_eq!(
            v["fixed_ips"],
            json!([{"subnet_id": "s", "ip_address": "10.0.0.5"}])
        );
        assert!(v.get("tags").is_none(), "tags go in a separate PUT");

        let rule = SecurityGroupRuleCreate {
            remote: Remote::Group("g".into()),
            ..SecurityGroupRuleCreate::tcp_in("sg", (80, 80), Remote::Any)
        };
        let mut want = sample_keys(
            "network/security-groups/security-group-rule-create-request.json",
            "security_group_rule",
        )?;
        want.retain(|k| k != "remote_address_group_id");
        assert_eq!(keys(&serde_json::to_value(&rule)?), want);

        let fip = FloatingIpCreate {
            floating_network_id: "ext".into(),
            description: Some("d".into()),
            port_id: Some("p".into()),
            fixed_ip_address: Some("10.0.0.3".into()),
            subnet_id: Some("s".into()),
            ..Default::default()
        };
        let want = sample_keys(
            "network/floatingips/floatingip-create-request.json",
            "floatingip",
        )?;
        assert!(
            keys(&serde_json::to_value(&fip)?)
                .iter()
                .all(|k| want.contains(k))
        );
        Ok(())
    }

    #[test]
    fn port_security_off_with_groups_or_pairs_is_refused() {
        let mut p = PortCreate {
            port_security_enabled: Some(false),
            ..PortCreate::new("n", "p")
        };
        assert!(p.check().is_ok());
        p.allowed_address_pairs.push(AddressPair::ip("10.0.0.0/8"));
        assert!(p.check().is_err());
        let u = PortUpdate {
            port_security_enabled: Some(false),
            security_groups: Some(vec!["x".into()]),
            ..Default::default()
        };
        assert!(u.check().is_err());
    }

    #[test]
    fn filters_render_query_params() {
        let f = NetworkFilter {
            external: Some(true),
            name: Some("public".into()),
            ..Default::default()
        };
        assert_eq!(
            f.to_query(),
            vec![
                ("name".into(), "public".into()),
                ("router:external".into(), "true".into())
            ]
        );
        let f = PortFilter {
            device_id: Some("d".into()),
            tags: TagQuery::all(["a"]),
            ..Default::default()
        };
        assert_eq!(
            f.to_query(),
            vec![
                ("tags".into(), "a".into()),
                ("device_id".into(), "d".into())
            ]
        );
    }
}
