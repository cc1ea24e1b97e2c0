//! The minimal ingress rules per role. Every node carries `sg-node`; control planes also `sg-cp`.
//! Egress is left as Neutron makes it (allow all), and egress rules are never compared.
//!
//! Who reaches the API, and from which address (what `kos doctor` checks on a running cluster):
//! - clients: from their own addresses (`apiEndpoint.allowedCIDRs`, or anywhere when public);
//! - an amphora load balancer: from its port on the node subnet;
//! - nodes directly (a private endpoint, or an OVN load balancer's members): from their own addresses;
//! - nodes through the API's floating IP: from the router's external gateway address, because the
//!   router SNATs traffic it hairpins back to a floating IP of its own (Neutron's L3 agent, and OVN,
//!   do so for DNATed traffic that did not enter from the external network).

use ipnet::Ipv4Net;

use crate::spec::ClusterSpec;

/// One ingress rule (IPv4).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// `None`: every protocol.
    pub protocol: Option<&'static str>,
    pub ports: Option<(u16, u16)>,
    pub remote: Remote,
    pub description: &'static str,
}

/// Where traffic may come from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Remote {
    Cidr(String),
    /// Members of the security group with this logical id.
    Group(String),
    /// The external gateway address of the router with this logical id (a /32), known once the router
    /// exists.
    RouterGateway(String),
}

/// An address range a listener admits, known now or once a router exists.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Cidr(String),
    /// The external gateway address of the router with this logical id (a /32).
    RouterGateway(String),
}

impl Source {
    /// The CIDR, with `gateway` giving a router's external gateway address (`None`: not known yet).
    pub fn resolve(&self, gateway: impl Fn(&str) -> Option<String>) -> Option<String> {
        match self {
            Self::Cidr(c) => Some(c.clone()),
            Self::RouterGateway(r) => gateway(r).map(|ip| host_cidr(&ip)),
        }
    }
}

/// `ip` as a single-address CIDR.
pub(crate) fn host_cidr(ip: &str) -> String {
    if ip.contains(':') {
        format!("{ip}/128")
    } else {
        format!("{ip}/32")
    }
}

/// Where the nodes' traffic to the API's floating IP comes from: the router's gateway (for a router kos
/// makes, by logical id; for the user's, its address), when the endpoint is public.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gateway {
    /// The endpoint is private: nodes reach it directly.
    NotUsed,
    /// kos's router `router`.
    Router(String),
    /// The user's router, whose gateway address preflight read.
    Address(String),
    /// The user's router, whose gateway address is unknown (no router named, or no gateway).
    Unknown,
}

impl Gateway {
    fn source(&self) -> Option<Source> {
        match self {
            Self::Router(r) => Some(Source::RouterGateway(r.clone())),
            Self::Address(ip) => Some(Source::Cidr(host_cidr(ip))),
            Self::NotUsed | Self::Unknown => None,
        }
    }
}

/// What the API listener admits: `allowedCIDRs` plus the nodes themselves (the node subnet, and the
/// router's gateway through which they reach the floating IP). Empty: everyone (no `allowedCIDRs`).
pub(super) fn listener_sources(spec: &ClusterSpec, subnet: Ipv4Net, gw: &Gateway) -> Vec<Source> {
    let api = &spec.api_endpoint;
    if api.allowed_cidrs.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Source> = api
        .allowed_cidrs
        .iter()
        .map(|c| Source::Cidr(c.to_string()))
        .collect();
    out.push(Source::Cidr(subnet.to_string()));
    out.extend(gw.source());
    out.sort();
    out.dedup();
    out
}

fn tcp(ports: (u16, u16), remote: Remote, description: &'static str) -> Rule {
    Rule {
        protocol: Some("tcp"),
        ports: Some(ports),
        remote,
        description,
    }
}

/// Rules of `sg-cp`: the API from clients, nodes and the load balancer's subnet; etcd among control planes.
pub(super) fn control_plane(spec: &ClusterSpec, subnet: Ipv4Net, gw: &Gateway) -> Vec<Rule> {
    let api = &spec.api_endpoint;
    let mut clients: Vec<String> = api.allowed_cidrs.iter().map(|c| c.to_string()).collect();
    if clients.is_empty() && api.public {
        clients.push("0.0.0.0/0".into());
    }
    let restricted = !api.allowed_cidrs.is_empty();
    let mut rules: Vec<Rule> = clients
        .into_iter()
        .map(|c| tcp((6443, 6443), Remote::Cidr(c), "kube-apiserver from clients"))
        .collect();
    rules.push(tcp(
        (6443, 6443),
        Remote::Cidr(subnet.to_string()),
        "kube-apiserver from the node subnet (load balancer)",
    ));
    rules.push(tcp(
        (6443, 6443),
        Remote::Group("sg-node".into()),
        "kube-apiserver from nodes",
    ));
    // Anywhere already covers it; with allowedCIDRs, nodes coming back through the floating IP (an OVN
    // load balancer or a floating-IP endpoint keeps that source) would be refused.
    if restricted {
        match gw.source() {
            Some(Source::RouterGateway(r)) => rules.push(tcp(
                (6443, 6443),
                Remote::RouterGateway(r),
                "kube-apiserver from nodes through the floating IP (router SNAT)",
            )),
            Some(Source::Cidr(c)) => rules.push(tcp(
                (6443, 6443),
                Remote::Cidr(c),
                "kube-apiserver from nodes through the floating IP (router SNAT)",
            )),
            None => {}
        }
    }
    rules.push(tcp(
        (2379, 2380),
        Remote::Group("sg-cp".into()),
        "etcd between control planes",
    ));
    dedup(rules)
}

/// Rules of `sg-node`: kubelet, NodePorts and all CNI traffic between nodes; SSH only from the given CIDRs.
/// A Service load balancer's traffic to NodePorts comes from elsewhere (an amphora's port, or the
/// clients themselves through OVN): the cloud controller opens those per Service
/// (`manage-security-groups` in the cloud.conf kos writes).
pub(super) fn node(spec: &ClusterSpec) -> Vec<Rule> {
    let nodes = || Remote::Group("sg-node".into());
    let mut rules = vec![
        tcp((10250, 10250), nodes(), "kubelet between nodes"),
        tcp((30000, 32767), nodes(), "NodePorts between nodes"),
        Rule {
            protocol: None,
            ports: None,
            remote: nodes(),
            description: "CNI: all protocols between nodes (overlay, BGP, pod traffic)",
        },
    ];
    rules.extend(
        spec.network
            .ssh_allowed_cidrs
            .iter()
            .map(|c| tcp((22, 22), Remote::Cidr(c.to_string()), "SSH")),
    );
    dedup(rules)
}

fn dedup(mut rules: Vec<Rule>) -> Vec<Rule> {
    rules.sort();
    rules.dedup_by(|a, b| (a.protocol, a.ports, &a.remote) == (b.protocol, b.ports, &b.remote));
    rules
}
