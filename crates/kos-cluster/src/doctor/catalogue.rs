//! The flows a working cluster needs, each with the source address it really has, checked against the
//! snapshot: the API from clients and from every node (by the address its kubeconfig uses), the API
//! load balancer to the control planes, etcd, kubelets, the CNI's own traffic, and every Service load
//! balancer to its NodePorts.

use std::net::IpAddr;

use super::intent::{Intent, anywhere, cni_name};
use super::model::{
    Api, ApiTarget, Listener, LoadBalancer, Member, Node, Port, Provider, Role, Snapshot, proto,
};
use super::neutron::{Neutron, Peer, Traffic};
use super::octavia::{self, Sender};
use super::report::{Finding, Flow, Report, Section};
use crate::spec::Cni;

/// The Kubernetes API's port (kos's listener and kube-apiserver).
pub const API_PORT: u16 = 6443;
const KUBELET_PORT: u16 = 10250;
const ETCD_PORTS: (u16, u16) = (2379, 2380);
const BGP_PORT: u16 = 179;
/// The Linux kernel's VXLAN port, flannel's and cilium's default (not IANA's 4789).
const VXLAN_LINUX_PORT: u16 = 8472;
const CILIUM_HEALTH_PORT: u16 = 4240;
/// How many sources' evidence a flow from many nodes shows.
const SHOWN_SOURCES: usize = 3;

/// Every needed flow of the cluster in `snap`. Without `intent` (no spec), the CNI's traffic is
/// reported as not checked, and the API's clients are those its listener admits (or not checked for a
/// floating-IP endpoint).
#[must_use]
pub fn analyse(snap: &Snapshot, intent: Option<&Intent>) -> Report {
    let n = Neutron::new(snap);
    let nodes: Vec<(&Node, &Port)> = snap
        .nodes
        .iter()
        .filter_map(|node| snap.port(&node.port_id).map(|p| (node, p)))
        .collect();
    let mut sections = vec![api(&n, &nodes, intent)];
    let cps: Vec<(&Node, &Port)> = nodes
        .iter()
        .copied()
        .filter(|(node, _)| node.role == Role::ControlPlane)
        .collect();
    if cps.len() > 1 {
        sections.push(Section {
            title: "etcd between control planes".into(),
            flows: between(
                &n,
                &cps,
                "control plane",
                "etcd",
                Traffic {
                    protocol: proto::TCP,
                    ports: Some(ETCD_PORTS),
                },
            ),
        });
    }
    sections.push(Section {
        title: "Kubelets".into(),
        flows: between(&n, &nodes, "node", "kubelet", Traffic::tcp(KUBELET_PORT)),
    });
    sections.push(cni(&n, &nodes, intent));
    for lb in &snap.service_lbs {
        sections.push(service(&n, &nodes, lb));
    }
    if let Some(i) = intent
        && !i.fetch_from.is_empty()
    {
        sections.push(fetching(&n, &nodes, i));
    }
    Report {
        cluster: snap.cluster.clone(),
        sections,
    }
}

/// The mirrors and proxy the spec names, from every node: the nodes' security groups must let
/// them out to each on its port. What this cannot see is said: a name is resolved on the nodes (kos
/// checks egress to any address then), and the path beyond the node's port (the router's gateway,
/// the cloud's firewalls, the mirror's own) is not modelled.
fn fetching(n: &Neutron<'_>, nodes: &[(&Node, &Port)], intent: &Intent) -> Section {
    let flows = intent
        .fetch_from
        .iter()
        .map(|t| {
            let traffic = Traffic::tcp(t.port);
            let addr: Option<IpAddr> = t.host.parse().ok();
            let dst = match addr {
                Some(a) => Peer::host(a, t.host.clone()),
                None => Peer::new(super::intent::anywhere(), format!("any address ({} is resolved on the nodes)", t.host)),
            };
            let results: Vec<Finding> = nodes
                .iter()
                .filter_map(|(_, p)| {
                    let own = p.address()?;
                    Some(n.egress(p, super::ranges::host(own), &dst, traffic))
                })
                .collect();
            let mut f = if results.is_empty() {
                Finding::unknown("no node port with an address to check from")
            } else {
                aggregate(results)
            };
            if addr.is_none() && matches!(f.verdict, super::report::Verdict::Blocked) {
                f = Finding::unknown(format!(
                    "the nodes may not send {} to any address; {} is a name kos cannot resolve as the nodes do, so whether a rule admits its address is not known",
                    traffic.show(),
                    t.host
                ));
            }
            f.evidence.push(
                "not checked: the route beyond the node's port (router gateway, the cloud's and the mirror's firewalls) and DNS".into(),
            );
            Flow::new(
                t.what.clone(),
                format!("every node ({})", nodes.len()),
                format!("{}:{}", t.host, t.port),
                traffic.show(),
                f,
            )
        })
        .collect();
    Section {
        title: "Mirrors and proxy".into(),
        flows,
    }
}

/// `cp-0 (10.0.0.5)`.
fn node_label(node: &Node, port: &Port) -> String {
    match port.address() {
        Some(a) => format!("{} ({a})", node.name),
        None => node.name.clone(),
    }
}

/// How a member is called: the node whose port holds its address, else the port, else the address.
fn member_label(nodes: &[(&Node, &Port)], port: Option<&Port>, addr: IpAddr) -> String {
    match port {
        Some(p) => nodes.iter().find(|(_, np)| np.id == p.id).map_or_else(
            || format!("port {} ({addr})", p.label()),
            |(node, _)| format!("{} ({addr})", node.name),
        ),
        None => addr.to_string(),
    }
}

// ------------------------------------------------------------------------------------------ the API

fn api(n: &Neutron<'_>, nodes: &[(&Node, &Port)], intent: Option<&Intent>) -> Section {
    let snap = n.snapshot();
    let title = "Kubernetes API".to_owned();
    let Some(api) = &snap.api else {
        return Section {
            title,
            flows: vec![Flow::new(
                "API endpoint",
                "-",
                "-",
                format!("tcp/{API_PORT}"),
                Finding::unknown(
                    "no API endpoint: neither kos's load balancer (api-lb) nor the control plane's port \
                     (port-cp-0) was found",
                ),
            )],
        };
    };
    let mut flows = Vec::new();
    let fip = match (&api.floating_ip, intent.map(|i| i.public)) {
        (Some(f), _) if f.port_id.is_none() => {
            flows.push(Flow::new(
                "API floating IP",
                "-",
                f.address.to_string(),
                format!("tcp/{API_PORT}"),
                Finding::blocked(format!(
                    "floating IP {} (api-fip) points at no port: run `kos up`",
                    f.address
                )),
            ));
            None
        }
        (Some(f), _) => Some(f.address),
        (None, Some(true)) => {
            flows.push(Flow::new(
                "API floating IP",
                "-",
                "-",
                format!("tcp/{API_PORT}"),
                Finding::blocked("the spec makes the API public but it has no floating IP (api-fip): run `kos up`"),
            ));
            None
        }
        (None, _) => None,
    };
    flows.extend(api_clients(n, api, fip, intent));
    flows.extend(nodes_to_api(n, nodes, api, fip));
    if let ApiTarget::LoadBalancer(lb) = &api.target {
        for l in &lb.listeners {
            flows.extend(lb_to_members(n, nodes, lb, l, "API LB → control plane"));
        }
    }
    Section { title, flows }
}

/// The target's address as seen from the node subnet (VIP, or the control plane's port).
fn api_address(snap: &Snapshot, api: &Api) -> Option<IpAddr> {
    match &api.target {
        ApiTarget::LoadBalancer(lb) => lb.vip_address,
        ApiTarget::Port(p) => snap.port(p).and_then(Port::address),
    }
}

/// The API LB's listener (kos's listens on 6443).
fn api_listener(lb: &LoadBalancer) -> Option<&Listener> {
    lb.listeners
        .iter()
        .find(|l| l.port == API_PORT)
        .or(lb.listeners.first())
}

fn api_clients(
    n: &Neutron<'_>,
    api: &Api,
    fip: Option<IpAddr>,
    intent: Option<&Intent>,
) -> Vec<Flow> {
    let snap = n.snapshot();
    let to = fip.or_else(|| api_address(snap, api));
    let to_label = to.map_or_else(|| "API".to_owned(), |a| format!("{a}:{API_PORT}"));
    let clients: Vec<ipnet::IpNet> = match (intent, &api.target) {
        (Some(i), _) => i.api_clients.clone(),
        (None, ApiTarget::LoadBalancer(lb)) => match api_listener(lb) {
            Some(l) if !l.allowed_cidrs.is_empty() => l.allowed_cidrs.clone(),
            _ if fip.is_some() => vec![anywhere()],
            _ => Vec::new(),
        },
        (None, ApiTarget::Port(_)) => {
            return vec![Flow::new(
                "clients → API",
                "clients",
                to_label,
                format!("tcp/{API_PORT}"),
                Finding::not_checked(
                    "pass -f <spec>: its apiEndpoint.allowedCIDRs say who must reach the API",
                ),
            )];
        }
    };
    clients
        .into_iter()
        .map(|c| {
            let client = Peer::new(c, "clients");
            let finding = match &api.target {
                ApiTarget::LoadBalancer(lb) => match api_listener(lb) {
                    Some(l) => octavia::listener_admits(lb, l, &client)
                        .then(ovn_members(n, lb, l, &client)),
                    None => Finding::blocked(format!("LB {} has no listener", lb.name)),
                },
                ApiTarget::Port(p) => match snap.port(p) {
                    Some(port) => n.ingress(port, &client, Traffic::tcp(API_PORT)),
                    None => Finding::unknown(format!("port {p} is gone")),
                },
            };
            Flow::new(
                "clients → API",
                c.to_string(),
                to_label.clone(),
                format!("tcp/{API_PORT}"),
                finding,
            )
        })
        .collect()
}

/// OVN keeps the client's address: every member's port must admit it. Nothing to add for others.
fn ovn_members(n: &Neutron<'_>, lb: &LoadBalancer, l: &Listener, client: &Peer) -> Finding {
    if lb.provider != Provider::Ovn {
        return Finding::all([]);
    }
    let snap = n.snapshot();
    let Some(pool) = &l.pool else {
        return Finding::blocked(format!("listener {} has no pool", l.label()));
    };
    Finding::all(pool.members.iter().map(|m| {
        // OVN SNATs a member's own connection to the VIP back to it with the VIP as source (hairpin).
        let src = match (
            lb.vip_address,
            snap.port_with_address(m.address, m.subnet_id.as_deref()),
        ) {
            (Some(vip), Some(p))
                if client.net.prefix_len() == client.net.max_prefix_len()
                    && p.fixed_ips.iter().any(|f| f.address == client.net.addr()) =>
            {
                Peer::host(
                    vip,
                    "the VIP: OVN SNATs a member's connection to its own VIP",
                )
            }
            _ => client.clone(),
        };
        member_ingress(n, m, m.address, Traffic::to(pool.protocol, m.port), &src)
    }))
}

/// `src` reaching member `m` at `addr` with `traffic`.
fn member_ingress(
    n: &Neutron<'_>,
    m: &Member,
    addr: IpAddr,
    traffic: Traffic,
    src: &Peer,
) -> Finding {
    match n.snapshot().port_with_address(addr, m.subnet_id.as_deref()) {
        Some(p) => n.ingress(p, src, traffic),
        None => Finding::unknown(format!("no visible port has the member's address {addr}")),
    }
}

/// Every node to the API by the address its kubeconfig uses: the floating IP when there is one (then
/// the router SNATs the hairpinned traffic to its gateway address), else the VIP or the control
/// plane's address (then the node's own address arrives).
fn nodes_to_api(
    n: &Neutron<'_>,
    nodes: &[(&Node, &Port)],
    api: &Api,
    fip: Option<IpAddr>,
) -> Vec<Flow> {
    let snap = n.snapshot();
    let Some(dst) = fip.or_else(|| api_address(snap, api)) else {
        return Vec::new();
    };
    let traffic = Traffic::tcp(API_PORT);
    nodes
        .iter()
        .filter_map(|(node, port)| {
            let own = port.address()?;
            let dst_peer = Peer::host(dst, if fip.is_some() { "the API floating IP" } else { "the API" });
            if fip.is_none()
                && let ApiTarget::Port(p) = &api.target
                && *p == port.id
            {
                return None; // the control plane talks to itself: no port in between
            }
            let out = n.egress(port, super::ranges::host(own), &dst_peer, traffic);
            let src = if fip.is_some() {
                let subnet = port.fixed_ips.first().map(|f| f.subnet_id.as_str()).unwrap_or_default();
                match snap.router_of(subnet).and_then(|r| r.gateway_ips.first().map(|g| (r, *g))) {
                    Some((r, gw)) => Ok(Peer::host(
                        gw,
                        format!("router {}'s gateway: it SNATs node traffic to the floating IP", r.name),
                    )),
                    None => Err(Finding::unknown(format!(
                        "no router with a gateway and an interface on subnet {subnet} is visible: cannot tell the \
                         address node traffic to the floating IP {dst} arrives from"
                    ))),
                }
            } else {
                Ok(Peer::host(own, node.name.clone()))
            };
            let rest = match src {
                Err(f) => f,
                Ok(src) => match &api.target {
                    ApiTarget::LoadBalancer(lb) => match api_listener(lb) {
                        Some(l) => octavia::listener_admits(lb, l, &src).then(ovn_members(n, lb, l, &src)),
                        None => Finding::blocked(format!("LB {} has no listener", lb.name)),
                    },
                    ApiTarget::Port(p) => match snap.port(p) {
                        Some(cp) => n.ingress(cp, &src, traffic),
                        None => Finding::unknown(format!("port {p} is gone")),
                    },
                },
            };
            Some(Flow::new(
                "node → API",
                node_label(node, port),
                format!("{dst}:{API_PORT}"),
                traffic.show(),
                out.then(rest),
            ))
        })
        .collect()
}

/// A load balancer to each member of listener `l`'s pool, and its health monitor to each member.
fn lb_to_members(
    n: &Neutron<'_>,
    nodes: &[(&Node, &Port)],
    lb: &LoadBalancer,
    l: &Listener,
    name: &str,
) -> Vec<Flow> {
    let snap = n.snapshot();
    let Some(pool) = &l.pool else {
        return vec![Flow::new(
            name,
            format!("LB {}", lb.name),
            "-",
            proto::show(l.protocol, Some(l.port)),
            Finding::blocked(format!(
                "listener {} has no pool: it forwards to nobody",
                l.label()
            )),
        )];
    };
    let mut flows = Vec::new();
    for m in &pool.members {
        let member_port = snap.port_with_address(m.address, m.subnet_id.as_deref());
        let to = format!("{}:{}", member_label(nodes, member_port, m.address), m.port);
        let traffic = Traffic::to(pool.protocol, m.port);
        match octavia::data_sender(snap, lb, m) {
            // OVN forwards the client's own packets: the client rows above cover them.
            Sender::Client => {}
            sender => flows.push(sent(n, lb, m, m.address, traffic, sender, name, to)),
        }
        if let Some(mon) = &pool.monitor {
            let addr = m.monitor_address.unwrap_or(m.address);
            let port = m.monitor_port.unwrap_or(m.port);
            let traffic = Traffic::to(mon.protocol, port);
            let to = format!(
                "{}:{port}",
                member_label(
                    nodes,
                    snap.port_with_address(addr, m.subnet_id.as_deref()),
                    addr
                )
            );
            let sender = octavia::monitor_sender(snap, lb, m);
            flows.push(sent(
                n,
                lb,
                m,
                addr,
                traffic,
                sender,
                &format!("{name} (health check {})", mon.kind),
                to,
            ));
        }
    }
    if pool.members.is_empty() {
        flows.push(Flow::new(
            name,
            format!("LB {}", lb.name),
            "-",
            proto::show(pool.protocol, None),
            Finding::unknown(format!("pool {} has no members", pool.name)),
        ));
    }
    flows
}

/// One flow from the LB's own ports to `addr` on member `m`.
#[allow(clippy::too_many_arguments)] // one flow's worth of context, each used once
fn sent(
    n: &Neutron<'_>,
    lb: &LoadBalancer,
    m: &Member,
    addr: IpAddr,
    traffic: Traffic,
    sender: Sender<'_>,
    name: &str,
    to: String,
) -> Flow {
    match sender {
        Sender::Ports { ports, role, note } if !ports.is_empty() => {
            let from = ports
                .iter()
                .map(|(p, a)| format!("{a} ({})", p.label()))
                .collect::<Vec<_>>()
                .join(", ");
            let finding = Finding::all(ports.iter().map(|(p, a)| {
                let src = Peer::host(*a, format!("{role} {} of LB {}", p.label(), lb.name));
                let dst = Peer::host(addr, "member");
                octavia::sent_from(n, p, *a, &dst, traffic)
                    .then(member_ingress(n, m, addr, traffic, &src))
            }));
            Flow::new(
                name,
                from,
                to,
                traffic.show(),
                Finding::allowed(note).then(finding),
            )
        }
        Sender::Ports { note, .. } => Flow::new(
            name,
            format!("LB {}", lb.name),
            to,
            traffic.show(),
            Finding::unknown(note),
        ),
        Sender::Client => Flow::new(name, "clients", to, traffic.show(), Finding::all([])),
        Sender::Unknown(why) => Flow::new(
            name,
            format!("LB {}", lb.name),
            to,
            traffic.show(),
            Finding::unknown(why),
        ),
    }
}

// ------------------------------------------------------------------------------------------ nodes

/// `name` from every other member of `group` (`who`: "node", "control plane") to each, one flow per
/// destination.
fn between(
    n: &Neutron<'_>,
    group: &[(&Node, &Port)],
    who: &str,
    name: &str,
    traffic: Traffic,
) -> Vec<Flow> {
    group
        .iter()
        .map(|(node, port)| {
            let Some(dst) = port.address() else {
                return Flow::new(
                    name,
                    format!("every other {who}"),
                    node.name.clone(),
                    traffic.show(),
                    Finding::unknown(format!("port {} has no address", port.label())),
                );
            };
            let results: Vec<Finding> = group
                .iter()
                .filter(|(other, _)| other.port_id != node.port_id)
                .filter_map(|(other, op)| {
                    let src = Peer::host(op.address()?, other.name.clone());
                    Some(n.path(Some(op), &src, port, dst, traffic))
                })
                .collect();
            Flow::new(
                name,
                format!("every other {who} ({})", results.len()),
                node_label(node, port),
                traffic.show(),
                aggregate(results),
            )
        })
        .collect()
}

/// Many sources to one place: the worst verdict, with the evidence of the first sources that have it
/// (one when all are admitted: the others are admitted alike).
fn aggregate(results: Vec<Finding>) -> Finding {
    let Some(worst) = results.iter().map(|f| f.verdict.rank()).max() else {
        return Finding::allowed("no other node");
    };
    let matching: Vec<&Finding> = results
        .iter()
        .filter(|f| f.verdict.rank() == worst)
        .collect();
    let shown = if worst == 0 { 1 } else { SHOWN_SOURCES };
    let mut evidence: Vec<String> = matching
        .iter()
        .take(shown)
        .flat_map(|f| f.evidence.iter().cloned())
        .collect();
    if matching.len() > shown {
        evidence.push(format!(
            "… and {} more source(s) alike",
            matching.len() - shown
        ));
    }
    Finding {
        verdict: matching[0].verdict.clone(),
        evidence,
    }
}

// ------------------------------------------------------------------------------------------ the CNI

fn cni(n: &Neutron<'_>, nodes: &[(&Node, &Port)], intent: Option<&Intent>) -> Section {
    let Some(intent) = intent else {
        return Section {
            title: "CNI".into(),
            flows: vec![Flow::new(
                "CNI traffic",
                "every node",
                "every node",
                "-",
                Finding::not_checked("pass -f to check the CNI's traffic (the spec names the CNI)"),
            )],
        };
    };
    let title = format!("CNI ({})", cni_name(intent.cni));
    let both = |name: &str, t: Traffic| between(n, nodes, "node", name, t);
    let mut flows = Vec::new();
    match intent.cni {
        // calico.yaml: BIRD's BGP mesh, the default pool in IP-in-IP `Always` mode, no Typha.
        Cni::Calico => {
            flows.extend(both("BGP", Traffic::tcp(BGP_PORT)));
            flows.extend(both("IP-in-IP", Traffic::protocol(proto::IPIP)));
        }
        // kube-flannel.yml: the VXLAN backend on the kernel's port.
        Cni::Flannel => flows.extend(both("VXLAN", Traffic::udp(VXLAN_LINUX_PORT))),
        // Cilium's default tunnel and its health checks.
        Cni::Cilium => {
            flows.extend(both("VXLAN", Traffic::udp(VXLAN_LINUX_PORT)));
            flows.extend(both("cilium-health", Traffic::tcp(CILIUM_HEALTH_PORT)));
        }
        // kube-router: iBGP mesh; pods routed natively within the subnet (IP-in-IP only across subnets),
        // so pod addresses leave the nodes' ports.
        Cni::KubeRouter => {
            flows.extend(both("BGP", Traffic::tcp(BGP_PORT)));
            flows.extend(pod_traffic(n, nodes, intent));
        }
    }
    Section { title, flows }
}

/// Natively routed pod traffic: pod addresses must pass each node port's anti-spoofing (the pod CIDR in
/// its allowed address pairs, or port security off) and the other nodes' ingress rules.
fn pod_traffic(n: &Neutron<'_>, nodes: &[(&Node, &Port)], intent: &Intent) -> Vec<Flow> {
    let pods = intent.pod_cidr;
    let traffic = Traffic {
        protocol: proto::TCP,
        ports: Some((1, u16::MAX)),
    };
    let mut flows: Vec<Flow> = nodes
        .iter()
        .map(|(node, port)| {
            Flow::new(
                "pod addresses leave the node",
                format!("pods on {}", node.name),
                "the network",
                format!("from {pods}"),
                n.anti_spoofing(port, pods),
            )
        })
        .collect();
    flows.extend(nodes.iter().map(|(node, port)| {
        let results: Vec<Finding> = nodes
            .iter()
            .filter(|(other, _)| other.port_id != node.port_id)
            .map(|(other, op)| {
                let dst = Peer::new(pods, format!("pods on {}", node.name));
                let src = Peer::new(pods, format!("pods on {}", other.name));
                n.egress(op, pods, &dst, traffic)
                    .then(n.ingress(port, &src, traffic))
            })
            .collect();
        Flow::new(
            "pod traffic",
            format!("pods on every other node ({})", results.len()),
            format!("pods on {}", node.name),
            traffic.show(),
            aggregate(results),
        )
    }));
    flows
}

// ------------------------------------------------------------------------------------------ Services

fn service(n: &Neutron<'_>, nodes: &[(&Node, &Port)], lb: &LoadBalancer) -> Section {
    let snap = n.snapshot();
    let service = octavia::service_of(&snap.cluster, &lb.name).unwrap_or_else(|| lb.name.clone());
    let title = format!("Service {service} (load balancer {})", lb.name);
    let entry = lb.floating_ip.or(lb.vip_address);
    let mut flows = Vec::new();
    for l in &lb.listeners {
        let to = entry.map_or_else(|| format!("port {}", l.port), |a| format!("{a}:{}", l.port));
        let clients = if l.allowed_cidrs.is_empty() {
            vec![anywhere()]
        } else {
            l.allowed_cidrs.clone()
        };
        for c in clients {
            let client = Peer::new(c, "clients");
            flows.push(Flow::new(
                "clients → Service",
                c.to_string(),
                to.clone(),
                proto::show(l.protocol, Some(l.port)),
                octavia::listener_admits(lb, l, &client).then(ovn_members(n, lb, l, &client)),
            ));
        }
        flows.extend(lb_to_members(n, nodes, lb, l, "LB → NodePort"));
    }
    if lb.listeners.is_empty() {
        flows.push(Flow::new(
            "clients → Service",
            "clients",
            format!("LB {}", lb.name),
            "-",
            Finding::unknown("the load balancer has no listener yet"),
        ));
    }
    Section { title, flows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::model::{Api, Direction, FloatingIp, Port, PortSecurity, Provider};
    use crate::doctor::report::Verdict;
    use crate::doctor::testutil::*;

    fn flows<'a>(r: &'a Report, name: &str) -> Vec<&'a Flow> {
        r.flows().filter(|f| f.name == name).collect()
    }

    fn one<'a>(r: &'a Report, name: &str, to: &str) -> &'a Flow {
        let found: Vec<&Flow> = r
            .flows()
            .filter(|f| f.name == name && f.to.contains(to))
            .collect();
        assert_eq!(found.len(), 1, "one {name} flow to {to} in {}", r.text());
        found[0]
    }

    fn intent(cni: Cni, clients: &[&str], public: bool) -> Intent {
        Intent {
            cni,
            api_clients: clients.iter().map(|c| net(c)).collect(),
            public,
            pod_cidr: net("10.244.0.0/16"),
            fetch_from: Vec::new(),
        }
    }

    /// With mirrors and a proxy, every node's egress to each is checked, and what is not is said;
    /// a node group whose egress lets only the API out blocks an addressed mirror, while a named
    /// proxy is then unknown (its address is not known here).
    #[test]
    fn the_nodes_must_be_let_out_to_the_mirrors_and_the_proxy() {
        use crate::doctor::intent::FetchTarget;
        let mut s = minimal(&["0.0.0.0/0"]);
        let mut i = intent(Cni::Calico, &["0.0.0.0/0"], true);
        i.fetch_from = vec![
            FetchTarget {
                what: "mirror of registry.k8s.io".into(),
                host: "192.0.2.10".into(),
                port: 5000,
            },
            FetchTarget {
                what: "proxy".into(),
                host: "proxy.example".into(),
                port: 3128,
            },
        ];
        let r = analyse(&s, Some(&i));
        let mirror = one(&r, "mirror of registry.k8s.io", "192.0.2.10:5000");
        assert_eq!(mirror.verdict, Verdict::Allowed, "{}", r.text());
        assert!(
            mirror
                .evidence
                .iter()
                .any(|e| e.starts_with("not checked: the route"))
        );
        assert_eq!(
            one(&r, "proxy", "proxy.example:3128").verdict,
            Verdict::Allowed
        );
        assert!(
            r.sections
                .iter()
                .any(|sec| sec.title == "Mirrors and proxy")
        );

        // Egress narrowed to the API's port only: the mirror is blocked, the named proxy unknown.
        for g in &mut s.groups {
            g.rules.retain(|r| r.direction != Direction::Egress);
            g.rules.push(rule(
                "api-only",
                Direction::Egress,
                Some("tcp"),
                Some((6443, 6443)),
                prefix("0.0.0.0/0"),
            ));
        }
        let r = analyse(&s, Some(&i));
        let mirror = one(&r, "mirror of registry.k8s.io", "192.0.2.10:5000");
        assert_eq!(mirror.verdict, Verdict::Blocked, "{}", r.text());
        assert!(r.blocked());
        let proxy = one(&r, "proxy", "proxy.example:3128");
        assert!(
            matches!(proxy.verdict, Verdict::Unknown { .. }),
            "{}",
            r.text()
        );
        // Without mirrors in the spec, no such section.
        let r = analyse(&s, Some(&intent(Cni::Calico, &["0.0.0.0/0"], true)));
        assert!(
            !r.sections
                .iter()
                .any(|sec| sec.title == "Mirrors and proxy")
        );
    }

    /// kos's minimal cluster: one control plane behind a floating IP, two workers.
    fn minimal(api_from: &[&str]) -> Snapshot {
        let mut s = kos_cluster(1, 2, api_from);
        s.api = Some(Api {
            floating_ip: Some(FloatingIp {
                id: "fip".into(),
                address: ip("172.24.4.10"),
                port_id: Some("port-cp-0".into()),
            }),
            target: ApiTarget::Port("port-cp-0".into()),
        });
        s
    }

    fn web(provider: Provider) -> LoadBalancer {
        load_balancer(
            "kube_service_demo_default_web",
            provider,
            "10.0.0.50",
            80,
            &[],
            &[("10.0.0.20", 31080), ("10.0.0.21", 31080)],
            true,
        )
    }

    #[test]
    fn a_service_lb_cannot_reach_nodeports_that_admit_only_node_group_members() {
        let mut s = minimal(&["0.0.0.0/0"]);
        let lb = web(Provider::Amphora);
        s.ports.push(amphora_port(&lb, "10.0.0.23"));
        s.service_lbs.push(lb);
        let r = analyse(&s, None);
        let f = one(&r, "LB → NodePort", "workers-0");
        assert_eq!(f.verdict, Verdict::Blocked, "{}", r.text());
        assert_eq!(
            f.from,
            "10.0.0.23 (octavia-lb-vrrp-kube_service_demo_default_web)"
        );
        assert!(
            f.evidence.iter().any(|e| e.starts_with(
                "no ingress rule on any security group of port port-workers-0 (sg-node) admits tcp/31080 from 10.0.0.23 \
                 (amphora port octavia-lb-vrrp-kube_service_demo_default_web of LB kube_service_demo_default_web)"
            )),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("Octavia's own security groups keep Neutron's default egress"))
        );
        let hm = one(&r, "LB → NodePort (health check TCP)", "workers-1");
        assert_eq!(hm.verdict, Verdict::Blocked);
        assert!(r.blocked());
        assert!(
            r.sections.iter().any(|sec| sec.title
                == "Service default/web (load balancer kube_service_demo_default_web)")
        );

        // NodePorts open to the node subnet (where the amphora's port is): allowed, by that rule.
        let node_group = s
            .groups
            .iter_mut()
            .find(|g| g.id == "sg-node")
            .expect("sg-node");
        node_group.rules.push(ingress(
            "node-nodeports-subnet",
            Some("tcp"),
            Some((30000, 32767)),
            prefix("10.0.0.0/24"),
        ));
        let r = analyse(&s, None);
        let f = one(&r, "LB → NodePort", "workers-0");
        assert_eq!(f.verdict, Verdict::Allowed, "{}", r.text());
        assert!(
            f.evidence
                .iter()
                .any(|e| e.contains("rule node-nodeports-subnet")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn amphora_ports_out_of_sight_leave_the_lb_flows_unknown() {
        let mut s = minimal(&["0.0.0.0/0"]);
        s.service_lbs.push(web(Provider::Amphora));
        let r = analyse(&s, None);
        let f = one(&r, "LB → NodePort", "workers-0");
        assert!(matches!(f.verdict, Verdict::Unknown { .. }), "{}", r.text());
        assert!(!r.blocked());
    }

    #[test]
    fn nodes_reach_a_floating_ip_from_the_routers_gateway() {
        let s = minimal(&["0.0.0.0/0"]);
        let r = analyse(&s, Some(&intent(Cni::Calico, &["0.0.0.0/0"], true)));
        for f in flows(&r, "node → API") {
            assert_eq!(f.verdict, Verdict::Allowed, "{}", r.text());
            assert!(
                f.evidence
                    .iter()
                    .any(|e| e.contains("from 172.24.4.2 (router kos-demo-router's gateway")),
                "{:?}",
                f.evidence
            );
        }
        assert_eq!(
            flows(&r, "node → API").len(),
            3,
            "the control plane reaches its own floating IP too"
        );
        assert!(!r.blocked(), "{}", r.text());

        // allowedCIDRs that exclude the router's gateway lock every node out.
        let s = minimal(&["198.51.100.0/24"]);
        let r = analyse(&s, Some(&intent(Cni::Calico, &["198.51.100.0/24"], true)));
        assert_eq!(
            one(&r, "clients → API", "172.24.4.10").verdict,
            Verdict::Allowed
        );
        for f in flows(&r, "node → API") {
            assert_eq!(f.verdict, Verdict::Blocked, "{}", r.text());
            assert!(
                f.evidence
                    .iter()
                    .any(|e| e.contains("admits tcp/6443 from 172.24.4.2")),
                "{:?}",
                f.evidence
            );
        }
    }

    fn behind_lb(provider: Provider, allowed: &[&str], public: bool) -> Snapshot {
        let mut s = kos_cluster(3, 1, allowed);
        let lb = load_balancer(
            "kos-demo-api-lb",
            provider.clone(),
            "10.0.0.40",
            6443,
            if provider == Provider::Ovn {
                &[]
            } else {
                allowed
            },
            &[
                ("10.0.0.10", 6443),
                ("10.0.0.11", 6443),
                ("10.0.0.12", 6443),
            ],
            true,
        );
        if provider == Provider::Amphora {
            s.ports.push(amphora_port(&lb, "10.0.0.41"));
        }
        s.api = Some(Api {
            floating_ip: public.then(|| FloatingIp {
                id: "fip".into(),
                address: ip("172.24.4.10"),
                port_id: Some("kos-demo-api-lb-vip".into()),
            }),
            target: ApiTarget::LoadBalancer(Box::new(lb)),
        });
        s
    }

    #[test]
    fn an_api_listener_that_admits_only_the_users_cidrs_locks_the_nodes_out() {
        for public in [true, false] {
            let s = behind_lb(Provider::Amphora, &["198.51.100.0/24"], public);
            let r = analyse(&s, Some(&intent(Cni::Calico, &["198.51.100.0/24"], public)));
            for f in flows(&r, "node → API") {
                assert_eq!(f.verdict, Verdict::Blocked, "public {public}: {}", r.text());
                assert!(
                    f.evidence.iter().any(|e| e.contains("listener listener_0_kos-demo-api-lb of LB kos-demo-api-lb admits only 198.51.100.0/24")),
                    "{:?}",
                    f.evidence
                );
            }
            // The amphora reaches the control planes from its port on the node subnet, health checks too.
            let lb_flows = flows(&r, "API LB → control plane");
            assert_eq!(lb_flows.len(), 3, "{}", r.text());
            for f in lb_flows
                .iter()
                .chain(flows(&r, "API LB → control plane (health check TCP)").iter())
            {
                assert_eq!(f.verdict, Verdict::Allowed, "{}", r.text());
                assert!(
                    f.evidence.iter().any(|e| e.contains("rule cp-subnet")),
                    "{:?}",
                    f.evidence
                );
            }
            assert_eq!(flows(&r, "etcd").len(), 3);
            assert!(
                flows(&r, "etcd")
                    .iter()
                    .all(|f| f.verdict == Verdict::Allowed)
            );
        }
        let s = behind_lb(Provider::Amphora, &[], true);
        let r = analyse(&s, Some(&intent(Cni::Calico, &["0.0.0.0/0"], true)));
        assert!(!r.blocked(), "{}", r.text());
    }

    #[test]
    fn ovn_keeps_the_client_address_and_checks_health_from_its_own_port() {
        let mut s = minimal(&["0.0.0.0/0"]);
        s.service_lbs.push(web(Provider::Ovn));
        let r = analyse(&s, None);
        assert!(
            flows(&r, "LB → NodePort").is_empty(),
            "OVN sends the client's packets: {}",
            r.text()
        );
        let clients = one(&r, "clients → Service", "10.0.0.50:80");
        assert_eq!(clients.verdict, Verdict::Blocked, "{}", r.text());
        assert!(
            clients
                .evidence
                .iter()
                .any(|e| e.contains("admits tcp/31080 from 0.0.0.0/0 (clients)")),
            "{:?}",
            clients.evidence
        );
        let hm = one(&r, "LB → NodePort (health check TCP)", "workers-0");
        assert!(
            matches!(hm.verdict, Verdict::Unknown { .. }),
            "no health-check port yet: {}",
            r.text()
        );

        s.ports.push(Port {
            name: format!("ovn-lb-hm-{SUBNET}"),
            device_owner: "ovn-lb-hm:distributed".into(),
            ..open_port("hm", "10.0.0.3")
        });
        let r = analyse(&s, None);
        let hm = one(&r, "LB → NodePort (health check TCP)", "workers-0");
        assert_eq!(hm.verdict, Verdict::Blocked, "{}", r.text());
        assert!(
            hm.evidence.iter().any(|e| e.contains("from 10.0.0.3")),
            "{:?}",
            hm.evidence
        );
        assert!(
            hm.evidence
                .iter()
                .any(|e| e.contains("port security is off on port ovn-lb-hm-")),
            "{:?}",
            hm.evidence
        );
    }

    #[test]
    fn ovn_api_members_see_the_routers_gateway_or_the_node_or_their_own_vip() {
        let s = behind_lb(Provider::Ovn, &[], false);
        let r = analyse(&s, Some(&intent(Cni::Calico, &[], false)));
        // Private: nodes connect to the VIP from their own address, and sg-cp admits the subnet.
        assert!(
            flows(&r, "node → API")
                .iter()
                .all(|f| f.verdict == Verdict::Allowed),
            "{}",
            r.text()
        );
        let cp0 = flows(&r, "node → API")
            .into_iter()
            .find(|f| f.from.starts_with("cp-0"))
            .expect("cp-0");
        assert!(
            cp0.evidence
                .iter()
                .any(|e| e.contains("from 10.0.0.40 (the VIP")),
            "{:?}",
            cp0.evidence
        );
    }

    #[test]
    fn without_a_spec_the_cni_is_not_checked_and_with_one_its_own_traffic_is() {
        let s = minimal(&["0.0.0.0/0"]);
        let r = analyse(&s, None);
        let cni = r
            .sections
            .iter()
            .find(|sec| sec.title == "CNI")
            .expect("CNI section");
        assert!(
            matches!(&cni.flows[0].verdict, Verdict::NotChecked { reason } if reason.contains("pass -f"))
        );
        assert!(!r.blocked());

        let r = analyse(&s, Some(&intent(Cni::Calico, &["0.0.0.0/0"], true)));
        assert_eq!(flows(&r, "BGP").len(), 3);
        let ipip = one(&r, "IP-in-IP", "workers-1");
        assert_eq!(ipip.traffic, "ipip");
        assert_eq!(ipip.verdict, Verdict::Allowed, "{}", r.text());
        assert!(
            ipip.evidence.iter().any(|e| e.contains("rule node-cni")),
            "{:?}",
            ipip.evidence
        );
        let r = analyse(&s, Some(&intent(Cni::Flannel, &["0.0.0.0/0"], true)));
        assert_eq!(one(&r, "VXLAN", "cp-0").traffic, "udp/8472");
        let r = analyse(&s, Some(&intent(Cni::Cilium, &["0.0.0.0/0"], true)));
        assert_eq!(one(&r, "cilium-health", "cp-0").traffic, "tcp/4240");

        // Without the all-protocols rule, the overlay is blocked (kubelet still passes: its own rule).
        let mut s = s;
        s.groups
            .iter_mut()
            .for_each(|g| g.rules.retain(|r| r.id != "node-cni"));
        let r = analyse(&s, Some(&intent(Cni::Flannel, &["0.0.0.0/0"], true)));
        assert_eq!(one(&r, "VXLAN", "workers-0").verdict, Verdict::Blocked);
        assert_eq!(one(&r, "kubelet", "workers-0").verdict, Verdict::Allowed);
    }

    #[test]
    fn kube_router_pod_addresses_need_the_pod_cidr_in_every_node_ports_pairs() {
        let mut s = minimal(&["0.0.0.0/0"]);
        let r = analyse(&s, Some(&intent(Cni::KubeRouter, &["0.0.0.0/0"], true)));
        assert_eq!(flows(&r, "pod addresses leave the node").len(), 3);
        assert!(
            flows(&r, "pod addresses leave the node")
                .iter()
                .all(|f| f.verdict == Verdict::Allowed)
        );
        // Pod sources match `sg-node` only through the members' pairs: driver-dependent.
        let pods = one(&r, "pod traffic", "pods on workers-0");
        assert!(
            matches!(pods.verdict, Verdict::Unknown { .. }),
            "{}",
            r.text()
        );

        let w0 = s
            .ports
            .iter_mut()
            .find(|p| p.id == "port-workers-0")
            .expect("port");
        w0.allowed_pairs.clear();
        let r = analyse(&s, Some(&intent(Cni::KubeRouter, &["0.0.0.0/0"], true)));
        let f = flows(&r, "pod addresses leave the node")
            .into_iter()
            .find(|f| f.from == "pods on workers-0")
            .expect("flow");
        assert_eq!(f.verdict, Verdict::Blocked);
        assert!(f.evidence[0].contains("anti-spoofing"), "{:?}", f.evidence);
        let w0 = s
            .ports
            .iter_mut()
            .find(|p| p.id == "port-workers-0")
            .expect("port");
        w0.security = PortSecurity::Disabled;
        let r = analyse(&s, Some(&intent(Cni::KubeRouter, &["0.0.0.0/0"], true)));
        let f = flows(&r, "pod addresses leave the node")
            .into_iter()
            .find(|f| f.from == "pods on workers-0")
            .expect("flow");
        assert_eq!(f.verdict, Verdict::Allowed);
    }

    #[test]
    fn a_deleted_kubelet_rule_blocks_every_kubelet_and_names_what_is_missing() {
        let mut s = minimal(&["0.0.0.0/0"]);
        s.groups.iter_mut().for_each(|g| {
            g.rules
                .retain(|r| r.id != "node-kubelet" && r.id != "node-cni")
        });
        let r = analyse(&s, None);
        let f = one(&r, "kubelet", "workers-0");
        assert_eq!(f.verdict, Verdict::Blocked);
        assert_eq!(f.from, "every other node (2)");
        assert!(f.evidence.iter().any(|e| e.contains("no ingress rule on any security group of port port-workers-0 (sg-node) admits tcp/10250 from 10.0.0.10 (cp-0)")), "{:?}", f.evidence);
    }
}
