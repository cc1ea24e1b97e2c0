//! The minimal ingress rules per role. Every node carries `sg-node`; control planes also `sg-cp`.
//! Egress is left as Neutron makes it (allow all), and egress rules are never compared.

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
pub(super) fn control_plane(spec: &ClusterSpec, subnet: Ipv4Net) -> Vec<Rule> {
    let api = &spec.api_endpoint;
    let mut clients: Vec<String> = api.allowed_cidrs.iter().map(|c| c.to_string()).collect();
    if clients.is_empty() && api.public {
        clients.push("0.0.0.0/0".into());
    }
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
    rules.push(tcp(
        (2379, 2380),
        Remote::Group("sg-cp".into()),
        "etcd between control planes",
    ));
    dedup(rules)
}

/// Rules of `sg-node`: kubelet, NodePorts and all CNI traffic between nodes; SSH only from the given CIDRs.
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
