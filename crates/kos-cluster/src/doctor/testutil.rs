//! Hand-built cloud objects for doctor's unit tests.

use std::net::IpAddr;

use ipnet::IpNet;

use super::model::{
    Direction, Family, FixedIp, Group, Port, PortSecurity, Protocol, Remote, Rule, Snapshot, Subnet,
};

pub const SUBNET: &str = "subnet-1";

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// A CIDR, or an address as a one-address net.
pub fn net(s: &str) -> IpNet {
    s.parse()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .expect("a CIDR or an address")
}

/// A port with port security on, one fixed IP on [`SUBNET`], these groups.
pub fn port(id: &str, address: &str, groups: &[&str]) -> Port {
    Port {
        id: id.into(),
        name: id.into(),
        network_id: "net-1".into(),
        device_owner: "compute:nova".into(),
        device_id: format!("server-{id}"),
        fixed_ips: vec![FixedIp {
            subnet_id: SUBNET.into(),
            address: ip(address),
        }],
        allowed_pairs: Vec::new(),
        security: PortSecurity::Enabled {
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        },
    }
}

/// As [`port`], with allowed address pairs.
pub fn port_with_pairs(id: &str, address: &str, groups: &[&str], pairs: &[&str]) -> Port {
    Port {
        allowed_pairs: pairs.iter().map(|p| net(p)).collect(),
        ..port(id, address, groups)
    }
}

/// As [`port`], with port security off (and so no groups).
pub fn open_port(id: &str, address: &str) -> Port {
    Port {
        security: PortSecurity::Disabled,
        ..port(id, address, &[])
    }
}

/// A stateful group.
pub fn group(id: &str, rules: Vec<Rule>) -> Group {
    Group {
        id: id.into(),
        name: id.into(),
        stateful: true,
        rules,
    }
}

/// An IPv4 rule.
pub fn rule(
    id: &str,
    direction: Direction,
    protocol: Option<&str>,
    ports: Option<(u16, u16)>,
    remote: Remote,
) -> Rule {
    Rule {
        id: id.into(),
        direction,
        family: Family::V4,
        protocol: Protocol::parse(protocol),
        ports,
        remote,
    }
}

pub fn ingress(
    id: &str,
    protocol: Option<&str>,
    ports: Option<(u16, u16)>,
    remote: Remote,
) -> Rule {
    rule(id, Direction::Ingress, protocol, ports, remote)
}

/// Neutron's default IPv4 egress rule: everything, anywhere.
pub fn egress_all(id: &str) -> Rule {
    rule(id, Direction::Egress, None, None, Remote::Any)
}

pub fn prefix(s: &str) -> Remote {
    Remote::Prefix(net(s))
}

pub fn snapshot(ports: Vec<Port>, groups: Vec<Group>) -> Snapshot {
    Snapshot {
        cluster: "demo".into(),
        ports,
        groups,
        subnets: vec![Subnet {
            id: SUBNET.into(),
            network_id: "net-1".into(),
            cidr: net("10.0.0.0/24"),
        }],
        ..Snapshot::default()
    }
}

/// kos's groups as `graph/rules.rs` makes them today: `sg-cp` (API from `api_from`, the subnet and
/// nodes; etcd among control planes) and `sg-node` (kubelet, NodePorts and everything between nodes).
pub fn kos_groups(api_from: &[&str]) -> Vec<Group> {
    let mut cp: Vec<Rule> = api_from
        .iter()
        .enumerate()
        .map(|(i, c)| {
            ingress(
                &format!("cp-clients-{i}"),
                Some("tcp"),
                Some((6443, 6443)),
                prefix(c),
            )
        })
        .collect();
    cp.extend([
        ingress(
            "cp-subnet",
            Some("tcp"),
            Some((6443, 6443)),
            prefix("10.0.0.0/24"),
        ),
        ingress(
            "cp-nodes",
            Some("tcp"),
            Some((6443, 6443)),
            Remote::Group("sg-node".into()),
        ),
        ingress(
            "cp-etcd",
            Some("tcp"),
            Some((2379, 2380)),
            Remote::Group("sg-cp".into()),
        ),
        egress_all("cp-egress"),
    ]);
    let node = vec![
        ingress(
            "node-kubelet",
            Some("tcp"),
            Some((10250, 10250)),
            Remote::Group("sg-node".into()),
        ),
        ingress(
            "node-nodeports",
            Some("tcp"),
            Some((30000, 32767)),
            Remote::Group("sg-node".into()),
        ),
        ingress("node-cni", None, None, Remote::Group("sg-node".into())),
        egress_all("node-egress"),
    ];
    vec![group("sg-cp", cp), group("sg-node", node)]
}

/// A cluster as kos builds it on `10.0.0.0/24`: control planes at .10, .11 …, workers at .20, .21 …,
/// the pod and service CIDRs as allowed address pairs, a router with gateway 172.24.4.2.
pub fn kos_cluster(control_planes: usize, workers: usize, api_from: &[&str]) -> Snapshot {
    use super::model::{Node, Role, Router};
    let mut ports = Vec::new();
    let mut nodes = Vec::new();
    for (role, count, base, groups) in [
        (
            Role::ControlPlane,
            control_planes,
            10,
            &["sg-cp", "sg-node"][..],
        ),
        (Role::Worker, workers, 20, &["sg-node"][..]),
    ] {
        for i in 0..count {
            let name = match role {
                Role::ControlPlane => format!("cp-{i}"),
                Role::Worker => format!("workers-{i}"),
            };
            let id = format!("port-{name}");
            ports.push(port_with_pairs(
                &id,
                &format!("10.0.0.{}", base + i),
                groups,
                &["10.244.0.0/16", "10.96.0.0/12"],
            ));
            nodes.push(Node {
                name,
                role,
                port_id: id,
            });
        }
    }
    ports.push(Port {
        device_owner: "network:router_interface".into(),
        device_id: "router-1".into(),
        security: PortSecurity::Disabled,
        ..port("router-if", "10.0.0.1", &[])
    });
    Snapshot {
        nodes,
        routers: vec![Router {
            id: "router-1".into(),
            name: "kos-demo-router".into(),
            gateway_ips: vec![ip("172.24.4.2")],
            interface_subnets: vec![SUBNET.into()],
        }],
        ..snapshot(ports, kos_groups(api_from))
    }
}

/// An Octavia load balancer with a VIP on [`SUBNET`] and one TCP listener whose pool has `members`
/// (address, port), monitored by TCP when `monitored`.
pub fn load_balancer(
    name: &str,
    provider: super::model::Provider,
    vip: &str,
    listen: u16,
    allowed: &[&str],
    members: &[(&str, u16)],
    monitored: bool,
) -> super::model::LoadBalancer {
    use super::model::{Listener, LoadBalancer, Member, Monitor, Pool};
    LoadBalancer {
        id: format!("{name}-id"),
        name: name.into(),
        provider,
        vip_address: Some(ip(vip)),
        vip_port_id: Some(format!("{name}-vip")),
        vip_subnet_id: Some(SUBNET.into()),
        floating_ip: None,
        listeners: vec![Listener {
            id: format!("{name}-listener"),
            name: format!("listener_0_{name}"),
            protocol: super::model::proto::TCP,
            port: listen,
            allowed_cidrs: allowed.iter().map(|c| net(c)).collect(),
            pool: Some(Pool {
                id: format!("{name}-pool"),
                name: format!("pool_0_{name}"),
                protocol: super::model::proto::TCP,
                members: members
                    .iter()
                    .map(|(a, p)| Member {
                        id: format!("m-{a}"),
                        name: String::new(),
                        address: ip(a),
                        port: *p,
                        subnet_id: Some(SUBNET.into()),
                        monitor_address: None,
                        monitor_port: None,
                    })
                    .collect(),
                monitor: monitored.then(|| Monitor {
                    id: format!("{name}-hm"),
                    name: String::new(),
                    kind: "TCP".into(),
                    protocol: super::model::proto::TCP,
                }),
            }),
        }],
    }
}

/// The amphora's VRRP port of `lb` as Octavia plugs it: in its own project's group (not visible here),
/// the VIP as an allowed address pair.
pub fn amphora_port(lb: &super::model::LoadBalancer, address: &str) -> Port {
    let vip = lb.vip_address.map(|a| a.to_string()).unwrap_or_default();
    Port {
        device_id: format!("amphora-of-{}", lb.name),
        ..port_with_pairs(
            &format!("octavia-lb-vrrp-{}", lb.name),
            address,
            &["lb-octavia-group"],
            &[&vip],
        )
    }
}
