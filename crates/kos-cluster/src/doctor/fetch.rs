//! What doctor reads from the cloud, in a bounded number of list calls: six Neutron lists (networks,
//! subnets, routers, every port the project can see, Octavia's and OVN's on its networks included,
//! every security group with its rules, floating IPs), four Octavia lists (the project's load
//! balancers, listeners, pools, monitors), then one member list per pool of the cluster's load
//! balancers (Octavia lists members only per pool). Never one GET per object.
//!
//! kos's own objects are told apart as observe does ([`Inventory::classify`]); the CCM's load balancers
//! by their upstream name `kube_service_<cluster>_…`.

use std::net::IpAddr;

use futures::{StreamExt, TryStreamExt, try_join};
use ipnet::IpNet;
use kos_cloud::model::load_balancer::{self as lbm, LoadBalancerFilter, MonitorType};
use kos_cloud::model::network::{
    self as nm, FloatingIpFilter, NetworkFilter, PortFilter, RouterFilter, SecurityGroupFilter,
    SubnetFilter,
};
use kos_cloud::{CloudError, Session};

use super::model::{
    Api, ApiTarget, Direction, Family, FixedIp, FloatingIp, Group, Listener, LoadBalancer, Member,
    Monitor, Node, Pool, Port, PortSecurity, Protocol, Provider, Remote, Role, Router, Rule,
    Snapshot, Subnet, proto,
};
use crate::graph::Kind;
use crate::observe::{Inventory, Observed};

/// Member lists fetched at once.
const MEMBER_LISTS_AT_ONCE: usize = 8;

/// Reads everything doctor needs about `cluster`.
///
/// # Errors
/// The first list call that failed (after the session's retries).
pub async fn fetch(session: &Session, cluster: &str) -> Result<Snapshot, CloudError> {
    let (net, lb) = (session.network(), session.load_balancer());
    let (nf, sf, rf, pf, gf, ff) = (
        NetworkFilter::default(),
        SubnetFilter::default(),
        RouterFilter::default(),
        PortFilter::default(),
        SecurityGroupFilter::default(),
        FloatingIpFilter::default(),
    );
    let (networks, subnets, routers, ports, security_groups, floating_ips) = try_join!(
        net.list_networks(&nf),
        net.list_subnets(&sf),
        net.list_routers(&rf),
        net.list_ports(&pf),
        net.list_security_groups(&gf),
        net.list_floating_ips(&ff),
    )?;
    let lb_filter = LoadBalancerFilter {
        project_id: Some(session.project_id().to_owned()),
        ..LoadBalancerFilter::default()
    };
    let (load_balancers, listeners, pools, monitors) = try_join!(
        lb.list_load_balancers(&lb_filter),
        lb.list_project_listeners(),
        lb.list_project_pools(),
        lb.list_project_health_monitors(),
    )?;
    let inv = Inventory {
        networks,
        subnets,
        routers,
        ports,
        security_groups,
        floating_ips,
        load_balancers,
        listeners,
        pools,
        monitors,
        ..Inventory::default()
    };
    let observed = inv.classify(cluster);
    let wanted: Vec<&lbm::LoadBalancer> = inv
        .load_balancers
        .iter()
        .filter(|l| is_api_lb(&observed, l) || is_service_lb(cluster, l))
        .collect();
    let pool_ids: Vec<String> = inv
        .pools
        .iter()
        .filter(|p| {
            p.loadbalancers
                .iter()
                .any(|r| wanted.iter().any(|l| l.id == r.id))
        })
        .map(|p| p.id.clone())
        .collect();
    let members: Vec<(String, Vec<lbm::Member>)> = futures::stream::iter(pool_ids)
        .map(|id| async move { lb.list_members(&id).await.map(|m| (id, m)) })
        .buffer_unordered(MEMBER_LISTS_AT_ONCE)
        .try_collect()
        .await?;
    Ok(snapshot(cluster, &inv, &observed, &members))
}

fn is_api_lb(observed: &Observed, l: &lbm::LoadBalancer) -> bool {
    observed.get("api-lb").iter().any(|r| r.id == l.id)
}

fn is_service_lb(cluster: &str, l: &lbm::LoadBalancer) -> bool {
    l.name.starts_with(&format!("kube_service_{cluster}_"))
}

/// The snapshot of `cluster` in the lists (`members`: each pool's, by pool id).
pub(crate) fn snapshot(
    cluster: &str,
    inv: &Inventory,
    observed: &Observed,
    members: &[(String, Vec<lbm::Member>)],
) -> Snapshot {
    let ports: Vec<Port> = inv.ports.iter().map(port).collect();
    let mut nodes: Vec<Node> = observed
        .all()
        .filter(|r| r.kind == Kind::Port)
        .filter_map(|r| {
            let host = r.logical_id.strip_prefix("port-")?;
            let role = match host.strip_prefix("cp-") {
                Some(i) if i.bytes().all(|b| b.is_ascii_digit()) => Role::ControlPlane,
                _ => Role::Worker,
            };
            Some(Node {
                name: host.to_owned(),
                role,
                port_id: r.id.clone(),
            })
        })
        .collect();
    nodes.sort_by(|a, b| {
        (a.role != Role::ControlPlane, &a.name).cmp(&(b.role != Role::ControlPlane, &b.name))
    });
    nodes.dedup_by(|a, b| a.name == b.name);
    let convert_lb = |l: &lbm::LoadBalancer| load_balancer(inv, members, l);
    let api_lb = inv
        .load_balancers
        .iter()
        .find(|l| is_api_lb(observed, l))
        .map(convert_lb);
    let api_fip = observed.get("api-fip").first().and_then(|r| {
        let address = r.facts.address.as_deref()?.parse().ok()?;
        Some(FloatingIp {
            id: r.id.clone(),
            address,
            port_id: r.facts.port_id.clone(),
        })
    });
    let cp_port = observed.get("port-cp-0").first().map(|r| r.id.clone());
    let target = match (api_lb, cp_port) {
        (Some(lb), _) => Some(ApiTarget::LoadBalancer(Box::new(lb))),
        (None, Some(p)) => Some(ApiTarget::Port(p)),
        (None, None) => None,
    };
    let mut service_lbs: Vec<LoadBalancer> = inv
        .load_balancers
        .iter()
        .filter(|l| is_service_lb(cluster, l))
        .map(convert_lb)
        .collect();
    service_lbs.sort_by(|a, b| a.name.cmp(&b.name));
    Snapshot {
        cluster: cluster.to_owned(),
        nodes,
        routers: inv.routers.iter().map(|r| router(r, &inv.ports)).collect(),
        ports,
        groups: inv.security_groups.iter().map(group).collect(),
        subnets: inv
            .subnets
            .iter()
            .filter_map(|s| {
                Some(Subnet {
                    id: s.id.clone(),
                    network_id: s.network_id.clone(),
                    cidr: s.cidr.parse().ok()?,
                })
            })
            .collect(),
        api: target.map(|target| Api {
            floating_ip: api_fip,
            target,
        }),
        service_lbs,
    }
}

/// An address or a CIDR (allowed address pairs and prefixes take both).
fn net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

fn port(p: &nm::Port) -> Port {
    Port {
        id: p.id.clone(),
        name: p.name.clone(),
        network_id: p.network_id.clone(),
        device_owner: p.device_owner.clone(),
        device_id: p.device_id.clone(),
        fixed_ips: p
            .fixed_ips
            .iter()
            .filter_map(|f| {
                Some(FixedIp {
                    subnet_id: f.subnet_id.clone(),
                    address: f.ip_address.parse().ok()?,
                })
            })
            .collect(),
        allowed_pairs: p
            .allowed_address_pairs
            .iter()
            .filter_map(|a| net(&a.ip_address))
            .collect(),
        // Without the port-security extension the field is absent and groups still filter.
        security: if p.port_security_enabled == Some(false) {
            PortSecurity::Disabled
        } else {
            PortSecurity::Enabled {
                groups: p.security_groups.clone(),
            }
        },
    }
}

fn group(g: &nm::SecurityGroup) -> Group {
    Group {
        id: g.id.clone(),
        name: g.name.clone(),
        stateful: g.stateful.unwrap_or(true),
        rules: g
            .security_group_rules
            .iter()
            .filter_map(|r| {
                let direction = match r.direction.as_str() {
                    "ingress" => Direction::Ingress,
                    "egress" => Direction::Egress,
                    other => {
                        tracing::warn!(rule = %r.id, direction = other, "security group rule with an unknown direction ignored");
                        return None;
                    }
                };
                let Some(family) = Family::parse(&r.ethertype) else {
                    tracing::warn!(rule = %r.id, ethertype = %r.ethertype, "security group rule with an unknown ethertype ignored");
                    return None;
                };
                let remote = match (&r.remote_group_id, &r.remote_address_group_id, &r.remote_ip_prefix) {
                    (Some(g), _, _) => Remote::Group(g.clone()),
                    (None, Some(a), _) => Remote::AddressGroup(a.clone()),
                    (None, None, Some(p)) => net(p).map_or_else(|| Remote::Unreadable(p.clone()), Remote::Prefix),
                    (None, None, None) => Remote::Any,
                };
                Some(Rule {
                    id: r.id.clone(),
                    direction,
                    family,
                    protocol: Protocol::parse(r.protocol.as_deref()),
                    ports: match (r.port_range_min, r.port_range_max) {
                        (Some(lo), Some(hi)) => Some((lo, hi)),
                        (Some(p), None) | (None, Some(p)) => Some((p, p)),
                        (None, None) => None,
                    },
                    remote,
                })
            })
            .collect(),
    }
}

/// Device owners of router interface ports (legacy, DVR, HA).
fn is_router_interface(owner: &str) -> bool {
    owner.starts_with("network:router_interface")
        || owner == "network:ha_router_replicated_interface"
}

fn router(r: &nm::Router, ports: &[nm::Port]) -> Router {
    Router {
        id: r.id.clone(),
        name: r.name.clone(),
        gateway_ips: r
            .external_gateway_info
            .iter()
            .flat_map(|g| g.external_fixed_ips.iter())
            .filter_map(|f| f.ip_address.parse().ok())
            .collect(),
        interface_subnets: ports
            .iter()
            .filter(|p| p.device_id == r.id && is_router_interface(&p.device_owner))
            .flat_map(|p| p.fixed_ips.iter().map(|f| f.subnet_id.clone()))
            .collect(),
    }
}

/// The IP protocol clients or members speak for an Octavia listener or pool protocol.
fn carried_by(p: &lbm::Protocol) -> u8 {
    match p {
        lbm::Protocol::Udp => proto::UDP,
        lbm::Protocol::Sctp => proto::SCTP,
        _ => proto::TCP,
    }
}

fn load_balancer(
    inv: &Inventory,
    members: &[(String, Vec<lbm::Member>)],
    l: &lbm::LoadBalancer,
) -> LoadBalancer {
    let listeners = inv
        .listeners
        .iter()
        .filter(|x| x.loadbalancers.iter().any(|r| r.id == l.id))
        .map(|x| Listener {
            id: x.id.clone(),
            name: x.name.clone(),
            protocol: carried_by(&x.protocol),
            port: x.protocol_port,
            allowed_cidrs: x.allowed_cidrs.iter().filter_map(|c| net(c)).collect(),
            pool: x
                .default_pool_id
                .as_deref()
                .and_then(|id| inv.pools.iter().find(|p| p.id == id))
                .map(|p| pool(inv, members, p)),
        })
        .collect();
    LoadBalancer {
        id: l.id.clone(),
        name: l.name.clone(),
        provider: Provider::parse(l.provider.as_deref()),
        vip_address: l.vip_address.as_deref().and_then(|a| a.parse().ok()),
        vip_port_id: l.vip_port_id.clone(),
        vip_subnet_id: l.vip_subnet_id.clone(),
        floating_ip: l.vip_port_id.as_deref().and_then(|vip| {
            inv.floating_ips
                .iter()
                .find(|f| f.port_id.as_deref() == Some(vip))
                .and_then(|f| f.floating_ip_address.parse().ok())
        }),
        listeners,
    }
}

fn pool(inv: &Inventory, members: &[(String, Vec<lbm::Member>)], p: &lbm::Pool) -> Pool {
    Pool {
        id: p.id.clone(),
        name: p.name.clone(),
        protocol: carried_by(&p.protocol),
        members: members
            .iter()
            .filter(|(id, _)| *id == p.id)
            .flat_map(|(_, m)| m.iter())
            .filter_map(|m| {
                Some(Member {
                    id: m.id.clone(),
                    name: m.name.clone(),
                    address: m.address.parse().ok()?,
                    port: m.protocol_port,
                    subnet_id: m.subnet_id.clone(),
                    monitor_address: m.monitor_address.as_deref().and_then(|a| a.parse().ok()),
                    monitor_port: m.monitor_port,
                })
            })
            .collect(),
        monitor: p
            .healthmonitor_id
            .as_deref()
            .and_then(|id| inv.monitors.iter().find(|h| h.id == id))
            .map(|h| Monitor {
                id: h.id.clone(),
                name: h.name.clone(),
                kind: h.kind.to_string(),
                protocol: match h.kind {
                    MonitorType::Ping => proto::ICMP,
                    MonitorType::UdpConnect => proto::UDP,
                    MonitorType::Sctp => proto::SCTP,
                    _ => proto::TCP,
                },
            }),
    }
}
