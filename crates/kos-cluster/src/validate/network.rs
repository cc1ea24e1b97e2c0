//! `spec.network` and the address rules: valid IPv4 network addresses, sane sizes, no overlaps between the node,
//! pod and service ranges, and warnings for ranges that collide with well-known ones (seeds/002: collisions found
//! only after the cluster was up).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};
use miette::SourceSpan;

use super::read::{Cx, Field, Obj, list, parsed, string};
use crate::diagnostics::{Code, Diagnostic};
use crate::spec::{
    CreateNetwork, DEFAULT_POD_CIDR, DEFAULT_SERVICE_CIDR, ExistingNetwork, Network, NetworkSource,
    ResourceRef, Spanned,
};

/// Largest node subnet prefix: a /28 holds 11 nodes after Neutron's and Octavia's addresses.
const NODE_MAX_PREFIX: u8 = 28;
/// kube-controller-manager gives each node a /24 of the pod range (`--node-cidr-mask-size`).
const POD_PER_NODE_PREFIX: u8 = 24;
/// kube-apiserver refuses service ranges larger than /12 for IPv4.
const SERVICE_MIN_PREFIX: u8 = 12;
const SERVICE_MAX_PREFIX: u8 = 24;
/// Network, broadcast, gateway, DHCP port, load-balancer VIP.
const NODE_SUBNET_OVERHEAD: u64 = 5;

/// Ranges that break clusters in ways only seen later, with why.
const RESERVED: [(Ipv4Net, &str); 2] = [
    (
        Ipv4Net::new_assert(Ipv4Addr::new(169, 254, 0, 0), 16),
        "link-local 169.254.0.0/16, home of the metadata service at 169.254.169.254",
    ),
    (
        Ipv4Net::new_assert(Ipv4Addr::new(172, 17, 0, 0), 16),
        "Docker's default bridge 172.17.0.0/16; hosts running Docker would be unreachable from pods",
    ),
];

/// A cluster range (node, pod or service CIDR): IPv4 and a network address.
pub(super) fn cluster_cidr(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<Ipv4Net>> {
    match any_cidr(cx, f)?.value {
        IpNet::V4(net) => Some(Spanned::new(net, f.span())),
        IpNet::V6(net) => f.invalid(
            cx,
            Code::InvalidCidr,
            format!("`{net}` is IPv6; kos builds IPv4 clusters"),
            "IPv6",
            "use an IPv4 CIDR such as `10.0.0.0/24`",
        ),
    }
}

/// A source range in `allowedCIDRs`: IPv4 or IPv6, written as a network address.
pub(super) fn any_cidr(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<IpNet>> {
    let s = string(cx, f)?;
    let text = s.value.trim();
    match text.parse::<IpNet>() {
        Ok(net) if net != net.trunc() => f.invalid(
            cx,
            Code::CidrHostBits,
            format!("`{text}` has host bits set"),
            "host bits set",
            format!("did you mean `{}`?", net.trunc()),
        ),
        Ok(net) => Some(Spanned::new(net, s.span)),
        Err(_) => {
            let help = match text.parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => format!("add a prefix length: `{a}/32` for one address"),
                Ok(IpAddr::V6(a)) => format!("add a prefix length: `{a}/128` for one address"),
                Err(_) => {
                    "write a CIDR: an address, `/`, a prefix length, e.g. `10.0.0.0/24`".to_owned()
                }
            };
            f.invalid(
                cx,
                Code::InvalidCidr,
                format!("`{text}` is not a CIDR"),
                "not a CIDR",
                help,
            )
        }
    }
}

/// `spec.network`, with the rules that involve only its own fields.
pub(super) fn network(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Network> {
    let m = Obj::new(
        cx,
        f,
        &[
            "create",
            "existing",
            "externalNetwork",
            "podCIDR",
            "serviceCIDR",
            "ssh",
        ],
    )?;
    let source = source(cx, &m);
    let external_network = m.opt(cx, "externalNetwork", resource_ref);
    let pod_given = m.get(cx, "podCIDR").is_some();
    let service_given = m.get(cx, "serviceCIDR").is_some();
    let pod_cidr = m.or(
        cx,
        "podCIDR",
        Spanned::new(DEFAULT_POD_CIDR, m.at()),
        cluster_cidr,
    );
    let service_cidr = m.or(
        cx,
        "serviceCIDR",
        Spanned::new(DEFAULT_SERVICE_CIDR, m.at()),
        cluster_cidr,
    );
    let ssh = m.or(cx, "ssh", Vec::new(), |cx, f| {
        let ssh = Obj::new(cx, f, &["allowedCIDRs"])?;
        ssh.or(cx, "allowedCIDRs", Vec::new(), |cx, f| {
            list(cx, f, any_cidr)
        })
    });

    let path = m.path();
    let node = match &source {
        Some(NetworkSource::Create(c)) => Some(Range::new("create.cidr", c.cidr, true)),
        _ => None,
    };
    let pod = pod_cidr.map(|c| Range::new("podCIDR", c, pod_given));
    let service = service_cidr.map(|c| Range::new("serviceCIDR", c, service_given));
    if let Some(r) = &node {
        check_size(cx, path, r, 0, NODE_MAX_PREFIX, "the node subnet");
    }
    if let Some(r) = &pod {
        check_size(cx, path, r, 0, POD_PER_NODE_PREFIX, "the pod range");
    }
    if let Some(r) = &service {
        check_size(
            cx,
            path,
            r,
            SERVICE_MIN_PREFIX,
            SERVICE_MAX_PREFIX,
            "the service range",
        );
    }
    let ranges: Vec<&Range> = [&node, &pod, &service].into_iter().flatten().collect();
    for (i, b) in ranges.iter().enumerate() {
        for a in &ranges[..i] {
            check_overlap(cx, path, a, b);
        }
        check_reserved(cx, path, b);
    }
    if let Some(ssh) = &ssh {
        warn_open_to_world(
            cx,
            &format!("{path}.ssh.allowedCIDRs"),
            ssh,
            "SSH (port 22)",
        );
    }

    Some(Network {
        source: source?,
        external_network: external_network?,
        pod_cidr: pod_cidr?,
        service_cidr: service_cidr?,
        ssh_allowed_cidrs: ssh?,
    })
}

/// `create` or `existing`, exactly one.
fn source(cx: &mut Cx<'_>, m: &Obj<'_>) -> Option<NetworkSource> {
    match (m.key_span(cx, "create"), m.key_span(cx, "existing")) {
        (Some(create), Some(existing)) => {
            cx.push(
                Diagnostic::error(Code::Conflict, m.path(), "has both `create` and `existing`")
                    .label(existing, "bring your own network...")
                    .label(create, "...or let kos create one")
                    .help("keep exactly one of `create` and `existing`"),
            );
            None
        }
        (None, None) => {
            cx.push(
                Diagnostic::error(
                    Code::MissingField,
                    &format!("{}.create", m.path()),
                    "the network needs `create` or `existing`",
                )
                .label(m.at(), "neither `create` nor `existing` here")
                .help(
                    "add `create: {cidr: 10.0.0.0/24}` to let kos make the network, or \
                     `existing: {network: NAME, subnet: NAME}` to use yours",
                ),
            );
            None
        }
        (Some(_), None) => m
            .req(cx, "create", |cx, f| {
                let c = Obj::new(cx, f, &["cidr", "dnsServers"])?;
                let cidr = c.req(cx, "cidr", cluster_cidr);
                let dns_servers = c.or(cx, "dnsServers", Vec::new(), |cx, f| {
                    list(cx, f, |cx, f| {
                        parsed::<Ipv4Addr>(cx, f, Code::InvalidValue, "an IPv4 address", "1.1.1.1")
                            .map(|a| a.value)
                    })
                });
                Some(CreateNetwork {
                    cidr: cidr?,
                    dns_servers: dns_servers?,
                })
            })
            .map(NetworkSource::Create),
        (None, Some(_)) => m
            .req(cx, "existing", |cx, f| {
                let e = Obj::new(cx, f, &["network", "subnet", "router"])?;
                let network = e.req(cx, "network", resource_ref);
                let subnet = e.req(cx, "subnet", resource_ref);
                let router = e.opt(cx, "router", resource_ref);
                Some(ExistingNetwork {
                    network: network?,
                    subnet: subnet?,
                    router: router?,
                })
            })
            .map(NetworkSource::Existing),
    }
}

pub(super) fn resource_ref(cx: &mut Cx<'_>, f: &Field<'_>) -> Option<Spanned<ResourceRef>> {
    string(cx, f).map(|s| s.map(|s| ResourceRef::parse(s.trim())))
}

/// A cluster range as the rules see it: which field, its value, and whether the user wrote it.
pub(super) struct Range {
    pub field: &'static str,
    pub net: Ipv4Net,
    pub span: SourceSpan,
    pub given: bool,
}

impl Range {
    pub fn new(field: &'static str, net: Spanned<Ipv4Net>, given: bool) -> Self {
        Self {
            field,
            net: net.value,
            span: net.span,
            given,
        }
    }

    /// Label text that also says when the value is a default the user never wrote.
    fn label(&self) -> String {
        if self.given {
            format!("{} {}", self.field, self.net)
        } else {
            format!("{} defaults to {}", self.field, self.net)
        }
    }
}

fn check_size(cx: &mut Cx<'_>, path: &str, r: &Range, min: u8, max: u8, what: &str) {
    let prefix = r.net.prefix_len();
    if (min..=max).contains(&prefix) {
        return;
    }
    let (problem, fix) = if prefix > max {
        (
            format!("too small for {what}"),
            format!("use /{max} or larger"),
        )
    } else {
        (
            format!("too large for {what}; Kubernetes allows at most /{min}"),
            format!("use /{min} or smaller"),
        )
    };
    cx.push(
        Diagnostic::error(
            Code::CidrSize,
            &format!("{path}.{}", r.field),
            format!("`{}` is {problem}", r.net),
        )
        .label(r.span, r.label())
        .help(format!(
            "{fix}, e.g. `{}`",
            resized(r.net, prefix.clamp(min, max))
        )),
    );
}

fn resized(net: Ipv4Net, prefix: u8) -> Ipv4Net {
    Ipv4Net::new(net.network(), prefix).map_or(net, |n| n.trunc())
}

fn check_overlap(cx: &mut Cx<'_>, path: &str, a: &Range, b: &Range) {
    if !(a.net.contains(&b.net.network()) || b.net.contains(&a.net.network())) {
        return;
    }
    // Blame the range the user wrote, the later one if both.
    let (primary, other) = if b.given || !a.given { (b, a) } else { (a, b) };
    cx.push(
        Diagnostic::error(
            Code::CidrOverlap,
            &format!("{path}.{}", primary.field),
            format!(
                "{} {} overlaps {} {}",
                primary.field, primary.net, other.field, other.net
            ),
        )
        .label(primary.span, primary.label())
        .label(other.span, other.label())
        .help(format!(
            "node, pod and service ranges must be disjoint; change `{}` to a free range",
            primary.field
        )),
    );
}

fn check_reserved(cx: &mut Cx<'_>, path: &str, r: &Range) {
    for (reserved, why) in RESERVED {
        if r.net.contains(&reserved.network()) || reserved.contains(&r.net.network()) {
            cx.push(
                Diagnostic::warning(
                    Code::CidrReserved,
                    &format!("{path}.{}", r.field),
                    format!("{} overlaps {why}", r.net),
                )
                .label(r.span, r.label())
                .help("pick a range clear of it, e.g. inside 10.0.0.0/8"),
            );
        }
    }
}

/// Warns when a source list lets in the whole internet: legal, but rarely meant for SSH.
pub(super) fn warn_open_to_world(
    cx: &mut Cx<'_>,
    path: &str,
    cidrs: &[Spanned<IpNet>],
    what: &str,
) {
    if let Some(open) = cidrs.iter().find(|c| c.prefix_len() == 0) {
        cx.push(
            Diagnostic::warning(
                Code::Risky,
                path,
                format!("{what} is open to the whole internet"),
            )
            .label(open.span, "any source")
            .help("list only the ranges you connect from"),
        );
    }
}

/// Rules between the network and the number of nodes: each node needs an address in the node subnet and a /24
/// of the pod range.
pub(super) fn check_capacity(cx: &mut Cx<'_>, network: &Network, counts: &[Spanned<u32>]) {
    let path = "spec.network";
    let nodes: u64 = counts.iter().map(|c| u64::from(c.value)).sum();
    let count_labels = |mut d: Diagnostic| {
        for c in counts.iter().filter(|c| c.value > 0) {
            d = d.label(c.span, format!("{} nodes", c.value));
        }
        d
    };
    let hosts = |net: Ipv4Net| 1u64 << (32 - u32::from(net.prefix_len()));
    if let NetworkSource::Create(c) = &network.source {
        let room = hosts(c.cidr.value).saturating_sub(NODE_SUBNET_OVERHEAD);
        if nodes > room {
            let needed = (32 - (nodes + NODE_SUBNET_OVERHEAD).next_power_of_two().ilog2()) as u8;
            cx.push(count_labels(
                Diagnostic::error(
                    Code::CidrSize,
                    &format!("{path}.create.cidr"),
                    format!(
                        "{} has room for {room} nodes, the spec asks for {nodes}",
                        c.cidr.value
                    ),
                )
                .label(c.cidr.span, "node subnet")
                .help(format!(
                    "use a larger subnet, e.g. `{}`",
                    resized(c.cidr.value, needed)
                )),
            ));
        }
    }
    let pod = network.pod_cidr.value;
    let per_node = 1u64 << (POD_PER_NODE_PREFIX.saturating_sub(pod.prefix_len()));
    if pod.prefix_len() <= POD_PER_NODE_PREFIX && nodes > per_node {
        let needed = POD_PER_NODE_PREFIX - nodes.next_power_of_two().ilog2() as u8;
        cx.push(count_labels(
            Diagnostic::error(
                Code::CidrSize,
                &format!("{path}.podCIDR"),
                format!("{pod} gives {per_node} nodes a /24 each, the spec asks for {nodes} nodes"),
            )
            .label(network.pod_cidr.span, "pod range")
            .help(format!(
                "use a larger pod range, e.g. `{}`",
                resized(pod, needed)
            )),
        ));
    }
}
