//! The network as a guest (or the workstation) sees it: which servers an API endpoint `host:port`
//! forwards to, from the cloud's real state. Only what routes:
//! - a **floating IP** leads to its port when it is associated and the L3 agent reported it
//!   `ACTIVE`; from a server, only if one of its subnets has a router whose gateway is on the
//!   floating IP's network (that is how the server's packets get there). Its port is a server's
//!   (that server) or a load balancer's VIP (the load balancer, seen from the router's external
//!   gateway address: the router SNATs the server's traffic on its way out);
//! - a **VIP** (or a load balancer behind a floating IP) leads to the members of the default pool of
//!   its listener on that port, whose servers are ACTIVE, in pool order, when the load balancer and
//!   the listener are up and the listener's `allowed_cidrs` admit the source address;
//! - a **fixed IP** leads to the server that owns it;
//! - from a server, a VIP or fixed IP is reached on a shared network, or through a router that has
//!   interfaces (or its gateway) on both subnets.
//!
//! The workstation ([`Source::Workstation`]) is "anywhere": it reaches every address (as through a
//! VPN) and every `allowed_cidrs` admits it, so a cluster is checkable from the machine running kos.
//! Security groups are not evaluated here (`kos doctor` analyses them).

use std::net::IpAddr;

use ipnet::IpNet;

use crate::neutron::{NeutronState, Port, ROUTER_GATEWAY, ROUTER_INTERFACE};
use crate::octavia::{LoadBalancer, OctaviaState};
use crate::state::Cloud;

/// Who connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A Nova server, by id (its ports' addresses are the source addresses).
    Server(String),
    /// The machine running kos.
    Workstation,
}

/// One server an endpoint forwards to, and the port it connects to there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub server: String,
    pub port: u16,
}

/// The backends `endpoint` (`host:port`, IPv6 in brackets) reaches from `from`.
pub fn reach(cloud: &Cloud, from: &Source, endpoint: &str) -> Vec<Backend> {
    let Some((host, port)) = split_endpoint(endpoint) else {
        return Vec::new();
    };
    let n = &cloud.neutron;
    if let Some(fip) = n
        .floating_ips
        .iter()
        .find(|f| f.floating_ip_address == host.to_string())
    {
        let Some(port_id) = fip.port_id.as_deref().filter(|_| fip.status == "ACTIVE") else {
            return Vec::new();
        };
        // The router that carries `from`'s packets to the floating IP's network, and the address
        // it SNATs them to.
        let snat = match from {
            Source::Workstation => None,
            Source::Server(id) => {
                let routers = source_subnets(cloud, id)
                    .into_iter()
                    .filter_map(|s| router_to(n, &s, &fip.floating_network_id))
                    .collect::<Vec<_>>();
                let Some(router) = routers.first() else {
                    return Vec::new();
                };
                gateway_ip(n, router)
            }
        };
        if let Some(lb) = cloud
            .octavia
            .loadbalancers
            .iter()
            .find(|l| l.vip_port_id == port_id)
        {
            let src = match from {
                Source::Workstation => Addr::Anywhere,
                Source::Server(_) => snat.map_or(Addr::None, Addr::Ip),
            };
            return members(cloud, lb, port, &src);
        }
        return port_server(cloud, port_id)
            .map(|server| vec![Backend { server, port }])
            .unwrap_or_default();
    }
    let ip = host.to_string();
    if let Some(lb) = cloud
        .octavia
        .loadbalancers
        .iter()
        .find(|l| l.vip_address == ip)
    {
        let vip_subnet = lb.vip_subnet_id.clone().unwrap_or_default();
        let src = match from {
            Source::Workstation => Addr::Anywhere,
            Source::Server(id) => match local_source(cloud, id, &vip_subnet) {
                Some(a) => Addr::Ip(a),
                None => return Vec::new(),
            },
        };
        return members(cloud, lb, port, &src);
    }
    let Some(p) = n
        .ports
        .iter()
        .find(|p| p.fixed_ips.iter().any(|f| f.ip_address == ip))
    else {
        return Vec::new();
    };
    let Some(server) = port_server(cloud, &p.m.id) else {
        return Vec::new();
    };
    if let Source::Server(id) = from {
        let subnet = p
            .fixed_ips
            .iter()
            .find(|f| f.ip_address == ip)
            .map(|f| f.subnet_id.clone())
            .unwrap_or_default();
        if local_source(cloud, id, &subnet).is_none() {
            return Vec::new();
        }
    }
    vec![Backend { server, port }]
}

/// `host:port` or `[v6]:port`.
fn split_endpoint(endpoint: &str) -> Option<(IpAddr, u16)> {
    let (host, port) = endpoint.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.parse().ok()?, port.parse().ok()?))
}

/// The source address as the listener sees it.
enum Addr {
    Anywhere,
    Ip(IpAddr),
    /// The traffic has no address a listener could admit (no gateway IP on the router).
    None,
}

fn admitted(allowed: &[String], src: &Addr) -> bool {
    if allowed.is_empty() {
        return true;
    }
    match src {
        Addr::Anywhere => true,
        Addr::None => false,
        Addr::Ip(ip) => allowed
            .iter()
            .filter_map(|c| c.parse::<IpNet>().ok())
            .any(|net| net.contains(ip)),
    }
}

/// Octavia forwards while the load balancer works (ACTIVE, or changing its configuration).
fn forwarding(status: &str, admin_up: bool) -> bool {
    admin_up && matches!(status, "ACTIVE" | "PENDING_UPDATE")
}

/// The members of the listener on `port` that the source may reach, as servers.
fn members(cloud: &Cloud, lb: &LoadBalancer, port: u16, src: &Addr) -> Vec<Backend> {
    let o: &OctaviaState = &cloud.octavia;
    if !forwarding(&lb.base.provisioning_status, lb.base.admin_state_up) {
        return Vec::new();
    }
    let Some(listener) = o.listeners.iter().find(|l| {
        l.loadbalancer_id == lb.base.id
            && l.protocol_port == i64::from(port)
            && forwarding(&l.base.provisioning_status, l.base.admin_state_up)
    }) else {
        return Vec::new();
    };
    if !admitted(&listener.allowed_cidrs, src) {
        return Vec::new();
    }
    let Some(pool) = listener.default_pool_id.as_deref() else {
        return Vec::new();
    };
    o.members
        .iter()
        .filter(|m| m.pool_id == pool && m.base.admin_state_up)
        .filter_map(|m| {
            let port = u16::try_from(m.protocol_port).ok()?;
            let p = cloud.neutron.ports.iter().find(|p| {
                p.fixed_ips.iter().any(|f| {
                    f.ip_address == m.address
                        && m.subnet_id.as_ref().is_none_or(|s| *s == f.subnet_id)
                })
            })?;
            let server = port_server(cloud, &p.m.id)?;
            Some(Backend { server, port })
        })
        .collect()
}

/// The ACTIVE Nova server a port is bound to.
fn port_server(cloud: &Cloud, port_id: &str) -> Option<String> {
    let p = cloud.neutron.ports.iter().find(|p| p.m.id == port_id)?;
    let s = cloud.nova.server(&p.device_id)?;
    (s.vm_state == "active" && s.delete_at.is_none()).then(|| s.id.clone())
}

fn server_ports<'a>(cloud: &'a Cloud, server: &str) -> Vec<&'a Port> {
    cloud
        .nova
        .server(server)
        .map(|s| {
            s.ports
                .iter()
                .filter_map(|sp| cloud.neutron.ports.iter().find(|p| p.m.id == sp.port_id))
                .collect()
        })
        .unwrap_or_default()
}

fn source_subnets(cloud: &Cloud, server: &str) -> Vec<String> {
    server_ports(cloud, server)
        .into_iter()
        .flat_map(|p| p.fixed_ips.iter().map(|f| f.subnet_id.clone()))
        .collect()
}

/// The server's address that reaches `subnet`: one on that subnet's network, else one on a subnet
/// that a router connects to it.
fn local_source(cloud: &Cloud, server: &str, subnet: &str) -> Option<IpAddr> {
    let n = &cloud.neutron;
    let target_net = n
        .subnets
        .iter()
        .find(|s| s.m.id == subnet)?
        .network_id
        .clone();
    let ports = server_ports(cloud, server);
    let same_net = ports
        .iter()
        .filter(|p| p.network_id == target_net)
        .flat_map(|p| p.fixed_ips.iter())
        .find_map(|f| f.ip_address.parse().ok());
    same_net.or_else(|| {
        ports
            .iter()
            .flat_map(|p| p.fixed_ips.iter())
            .find(|f| routed_between(n, &f.subnet_id, subnet))
            .and_then(|f| f.ip_address.parse().ok())
    })
}

/// The subnets a router is attached to (interfaces and gateway).
fn router_subnets(n: &NeutronState, router: &str) -> Vec<String> {
    n.ports
        .iter()
        .filter(|p| {
            p.device_id == router
                && (p.device_owner == ROUTER_INTERFACE || p.device_owner == ROUTER_GATEWAY)
        })
        .flat_map(|p| p.fixed_ips.iter().map(|f| f.subnet_id.clone()))
        .collect()
}

fn routed_between(n: &NeutronState, a: &str, b: &str) -> bool {
    n.routers.iter().filter(|r| r.admin_state_up).any(|r| {
        let subnets = router_subnets(n, &r.m.id);
        subnets.iter().any(|s| s == a) && subnets.iter().any(|s| s == b)
    })
}

/// The router with an interface on `subnet` and its gateway on `network`.
fn router_to(n: &NeutronState, subnet: &str, network: &str) -> Option<String> {
    n.routers
        .iter()
        .filter(|r| r.admin_state_up)
        .filter(|r| r.gateway.as_ref().is_some_and(|g| g.network_id == network))
        .find(|r| {
            n.ports.iter().any(|p| {
                p.device_id == r.m.id
                    && p.device_owner == ROUTER_INTERFACE
                    && p.fixed_ips.iter().any(|f| f.subnet_id == subnet)
            })
        })
        .map(|r| r.m.id.clone())
}

/// The router's external gateway address (what it SNATs to).
fn gateway_ip(n: &NeutronState, router: &str) -> Option<IpAddr> {
    let gw = n
        .routers
        .iter()
        .find(|r| r.m.id == router)?
        .gateway
        .as_ref()?;
    n.ports
        .iter()
        .find(|p| p.m.id == gw.port_id)?
        .fixed_ips
        .iter()
        .find_map(|f| f.ip_address.parse().ok())
}
