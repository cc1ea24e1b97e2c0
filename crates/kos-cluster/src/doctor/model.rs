//! What doctor reads from the cloud, in the form the analysis needs: addresses parsed, protocols as
//! numbers, port security as a state that either filters (with its groups) or does not.
//!
//! Everything here is plain data; [`super::fetch`] builds it from kos-cloud's lists, tests build it by
//! hand. Values the cloud sent that cannot be read (a protocol name Neutron does not know, a prefix that
//! is not a CIDR) are kept as such, so the analysis can say "unknown" instead of guessing.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

/// IP protocol numbers doctor's flows use.
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const IPIP: u8 = 4;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;

    /// Protocols whose rules match destination ports (the others ignore a rule's port range, or, for
    /// ICMP, read it as type and code).
    #[must_use]
    pub fn has_ports(p: u8) -> bool {
        matches!(p, TCP | UDP | SCTP | 33 | 136)
    }

    /// `tcp/6443`, `udp/8472`, `ipip`.
    #[must_use]
    pub fn show(p: u8, port: Option<u16>) -> String {
        let name = match p {
            ICMP => "icmp".to_owned(),
            IPIP => "ipip".to_owned(),
            TCP => "tcp".to_owned(),
            UDP => "udp".to_owned(),
            ICMPV6 => "icmpv6".to_owned(),
            SCTP => "sctp".to_owned(),
            n => format!("protocol {n}"),
        };
        match port {
            Some(port) if has_ports(p) => format!("{name}/{port}"),
            _ => name,
        }
    }
}

/// Everything observed that matters for connectivity.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub cluster: String,
    /// kos's nodes, control planes first.
    pub nodes: Vec<Node>,
    /// Every port the project can see (its own, and Octavia's and OVN's on its networks).
    pub ports: Vec<Port>,
    /// Every security group the project can see; ports may name others.
    pub groups: Vec<Group>,
    pub subnets: Vec<Subnet>,
    pub routers: Vec<Router>,
    /// How clients and nodes reach the Kubernetes API, as built.
    pub api: Option<Api>,
    /// The load balancers the CCM made for Services (`kube_service_<cluster>_…`).
    pub service_lbs: Vec<LoadBalancer>,
}

impl Snapshot {
    #[must_use]
    pub fn port(&self, id: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.id == id)
    }

    #[must_use]
    pub fn group(&self, id: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.id == id)
    }

    #[must_use]
    pub fn subnet(&self, id: &str) -> Option<&Subnet> {
        self.subnets.iter().find(|s| s.id == id)
    }

    /// The port holding `address` as a fixed IP, preferring one on `subnet`.
    #[must_use]
    pub fn port_with_address(&self, address: IpAddr, subnet: Option<&str>) -> Option<&Port> {
        let holds = |p: &&Port| p.fixed_ips.iter().any(|f| f.address == address);
        let on_subnet = subnet.and_then(|s| {
            self.ports.iter().filter(holds).find(|p| {
                p.fixed_ips
                    .iter()
                    .any(|f| f.address == address && f.subnet_id == s)
            })
        });
        on_subnet.or_else(|| self.ports.iter().find(holds))
    }

    /// The router with an interface on `subnet`.
    #[must_use]
    pub fn router_of(&self, subnet: &str) -> Option<&Router> {
        self.routers
            .iter()
            .find(|r| r.interface_subnets.iter().any(|s| s == subnet))
    }
}

/// A node of the cluster: its server's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The logical id of its server (`cp-0`, `workers-1`).
    pub name: String,
    pub role: Role,
    pub port_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    ControlPlane,
    Worker,
}

/// A Neutron port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub id: String,
    pub name: String,
    pub network_id: String,
    pub device_owner: String,
    pub device_id: String,
    pub fixed_ips: Vec<FixedIp>,
    /// Allowed address pairs: addresses or CIDRs the port may also send from.
    pub allowed_pairs: Vec<IpNet>,
    pub security: PortSecurity,
}

impl Port {
    /// How reports name it: its name, or its id when it has none.
    #[must_use]
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            &self.id
        } else {
            &self.name
        }
    }

    /// Its address on `subnet`.
    #[must_use]
    pub fn address_on(&self, subnet: &str) -> Option<IpAddr> {
        self.fixed_ips
            .iter()
            .find(|f| f.subnet_id == subnet)
            .map(|f| f.address)
    }

    /// Its first fixed IP.
    #[must_use]
    pub fn address(&self) -> Option<IpAddr> {
        self.fixed_ips.first().map(|f| f.address)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedIp {
    pub subnet_id: String,
    pub address: IpAddr,
}

/// Neutron's `port_security_enabled`: off means no security group filtering and no anti-spoofing at
/// all, so a port without it cannot carry groups (Neutron refuses them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSecurity {
    Disabled,
    /// Filtered by these groups (none: everything is dropped but replies to its own traffic).
    Enabled {
        groups: Vec<String>,
    },
}

/// A security group and its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub id: String,
    pub name: String,
    /// Connection tracking: replies to allowed traffic pass without a rule.
    pub stateful: bool,
    pub rules: Vec<Rule>,
}

impl Group {
    #[must_use]
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            &self.id
        } else {
            &self.name
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    #[must_use]
    pub fn of(a: IpAddr) -> Family {
        if a.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// Neutron's `ethertype`; anything else is not a rule Neutron would have taken.
    #[must_use]
    pub fn parse(ethertype: &str) -> Option<Family> {
        match ethertype.to_ascii_lowercase().as_str() {
            "ipv4" => Some(Family::V4),
            "ipv6" => Some(Family::V6),
            _ => None,
        }
    }
}

/// One security group rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    pub direction: Direction,
    pub family: Family,
    pub protocol: Protocol,
    /// Inclusive destination port range (ICMP: type and code); `None`: every port.
    pub ports: Option<(u16, u16)>,
    pub remote: Remote,
}

/// A rule's `protocol`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// `null` or `any`.
    Any,
    Number(u8),
    /// A value Neutron would not have stored; the rule's effect cannot be told.
    Unrecognised(String),
}

impl Protocol {
    /// Reads Neutron's `protocol`: `null`, `any`, a number 0–255 or a name of neutron-lib's
    /// `IP_PROTOCOL_MAP` (with the `icmpv6` alias), as `neutron/extensions/securitygroup.py`
    /// `convert_protocol` accepts them.
    #[must_use]
    pub fn parse(p: Option<&str>) -> Protocol {
        let Some(p) = p else {
            return Protocol::Any;
        };
        let lower = p.trim().to_ascii_lowercase();
        if lower == "any" {
            return Protocol::Any;
        }
        if let Ok(n) = lower.parse::<u8>() {
            return Protocol::Number(n);
        }
        let n = match lower.as_str() {
            "ah" => 51,
            "dccp" => 33,
            "egp" => 8,
            "esp" => 50,
            "gre" => 47,
            "hopopt" | "ip" => 0,
            "icmp" => proto::ICMP,
            "igmp" => 2,
            "ipip" => proto::IPIP,
            "ipv6-encap" => 41,
            "ipv6-frag" => 44,
            "ipv6-icmp" | "icmpv6" => proto::ICMPV6,
            "ipv6-nonxt" => 59,
            "ipv6-opts" => 60,
            "ipv6-route" => 43,
            "ospf" => 89,
            "pgm" => 113,
            "rsvp" => 46,
            "sctp" => proto::SCTP,
            "tcp" => proto::TCP,
            "udp" => proto::UDP,
            "udplite" => 136,
            "vrrp" => 112,
            _ => return Protocol::Unrecognised(p.to_owned()),
        };
        Protocol::Number(n)
    }
}

/// Where a rule's traffic comes from (ingress) or goes to (egress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Any,
    Prefix(IpNet),
    /// Ports carrying this group.
    Group(String),
    /// A Neutron address group: its addresses are not listed here.
    AddressGroup(String),
    /// A `remote_ip_prefix` that is not a CIDR.
    Unreadable(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub network_id: String,
    pub cidr: IpNet,
}

/// A router: where the cluster's traffic to floating IPs is SNATed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    pub id: String,
    pub name: String,
    /// Its external gateway's addresses.
    pub gateway_ips: Vec<IpAddr>,
    /// Subnets it has an interface on.
    pub interface_subnets: Vec<String>,
}

/// The Kubernetes API endpoint as built: a floating IP (public endpoints) in front of a load balancer
/// or the first control plane's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    pub floating_ip: Option<FloatingIp>,
    pub target: ApiTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatingIp {
    pub id: String,
    pub address: IpAddr,
    /// The port it points at (`None`: not associated).
    pub port_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiTarget {
    LoadBalancer(Box<LoadBalancer>),
    /// The single control plane's port.
    Port(String),
}

/// An Octavia provider, as far as the datapath differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// Service VMs (`amphora`, and its alias `octavia`): a proxy that connects to members itself.
    Amphora,
    /// OVN's distributed load balancer: DNAT only.
    Ovn,
    Other(String),
}

impl Provider {
    #[must_use]
    pub fn parse(p: Option<&str>) -> Provider {
        match p.unwrap_or("amphora") {
            "amphora" | "octavia" | "amphorav2" => Provider::Amphora,
            "ovn" => Provider::Ovn,
            other => Provider::Other(other.to_owned()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub provider: Provider,
    pub vip_address: Option<IpAddr>,
    pub vip_port_id: Option<String>,
    pub vip_subnet_id: Option<String>,
    /// A floating IP on the VIP port.
    pub floating_ip: Option<IpAddr>,
    pub listeners: Vec<Listener>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub id: String,
    pub name: String,
    /// The IP protocol clients use (TCP for HTTP, HTTPS, TERMINATED_HTTPS).
    pub protocol: u8,
    pub port: u16,
    /// Octavia's `allowed_cidrs` (`loadBalancerSourceRanges`); empty: everyone.
    pub allowed_cidrs: Vec<IpNet>,
    pub pool: Option<Pool>,
}

impl Listener {
    #[must_use]
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            &self.id
        } else {
            &self.name
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub id: String,
    pub name: String,
    /// The IP protocol of the member connections.
    pub protocol: u8,
    pub members: Vec<Member>,
    pub monitor: Option<Monitor>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub name: String,
    pub address: IpAddr,
    pub port: u16,
    pub subnet_id: Option<String>,
    pub monitor_address: Option<IpAddr>,
    pub monitor_port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitor {
    pub id: String,
    pub name: String,
    /// Octavia's type (`TCP`, `HTTP`, `PING`, …).
    pub kind: String,
    /// The IP protocol of its probes.
    pub protocol: u8,
}
