//! What the router's extra routes and the nodes' ports should hold, from the nodes alone. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kos_cloud::model::network::{AddressPair, HostRoute, Port};

/// A node's pod CIDRs and the address their traffic goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRoute {
    pub node: String,
    /// Each pod CIDR with the node's InternalIP of its family.
    pub routes: Vec<(IpNet, IpAddr)>,
}

impl NodeRoute {
    /// `None` for a node with no pod CIDR yet, or no InternalIP of a CIDR's family (nothing can be
    /// routed to it: upstream skips such nodes too).
    pub fn of(node: &Node) -> Option<NodeRoute> {
        let name = node.metadata.name.clone()?;
        let spec = node.spec.as_ref()?;
        let mut cidrs: Vec<&str> = spec
            .pod_cidrs
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if cidrs.is_empty() {
            cidrs.extend(spec.pod_cidr.as_deref());
        }
        let internal: Vec<IpAddr> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        let routes: Vec<(IpNet, IpAddr)> = cidrs
            .iter()
            .filter_map(|c| c.parse::<IpNet>().ok())
            .filter_map(|cidr| {
                let via = internal
                    .iter()
                    .find(|ip| ip.is_ipv4() == matches!(cidr, IpNet::V4(_)))?;
                Some((cidr.trunc(), *via))
            })
            .collect();
        (!routes.is_empty()).then_some(NodeRoute { node: name, routes })
    }
}

/// The changes to make.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutePlan {
    pub add: Vec<HostRoute>,
    /// Routes inside the cluster CIDR that no node needs (blackholes included).
    pub remove: Vec<HostRoute>,
    /// Port id → its complete new allowed address pairs.
    pub ports: BTreeMap<String, Vec<AddressPair>>,
}

impl RoutePlan {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty() && self.ports.is_empty()
    }
}

fn route(cidr: IpNet, via: IpAddr) -> HostRoute {
    HostRoute {
        destination: cidr.to_string(),
        nexthop: via.to_string(),
    }
}

/// Routes are managed only inside the cluster CIDR (the generic route controller's rule): every
/// other route on the router belongs to someone else and is never touched.
fn managed(cluster_cidr: &IpNet, destination: &str) -> bool {
    destination
        .parse::<IpNet>()
        .is_ok_and(|d| cluster_cidr.contains(&d))
}

/// Plans the router's extra routes and the allowed address pairs of the nodes' ports (a port
/// with port security drops packets from the pod CIDR otherwise). `ports` are the candidates:
/// a node's port is the one whose fixed IP is the route's nexthop.
pub fn plan(
    cluster_cidr: &IpNet,
    current_routes: &[HostRoute],
    nodes: &[NodeRoute],
    ports: &[Port],
) -> RoutePlan {
    let desired: BTreeSet<(String, String)> = nodes
        .iter()
        .flat_map(|n| n.routes.iter())
        .filter(|(cidr, _)| cluster_cidr.contains(cidr))
        .map(|(c, v)| (c.to_string(), v.to_string()))
        .collect();
    let current: BTreeSet<(String, String)> = current_routes
        .iter()
        .map(|r| (r.destination.clone(), r.nexthop.clone()))
        .collect();
    let add = desired
        .difference(&current)
        .map(|(d, n)| HostRoute {
            destination: d.clone(),
            nexthop: n.clone(),
        })
        .collect();
    let remove = current
        .difference(&desired)
        .filter(|(d, _)| managed(cluster_cidr, d))
        .map(|(d, n)| HostRoute {
            destination: d.clone(),
            nexthop: n.clone(),
        })
        .collect();

    // Pod CIDRs each port must allow: those routed to one of its fixed IPs.
    let mut wanted: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for n in nodes {
        for (cidr, via) in &n.routes {
            if !cluster_cidr.contains(cidr) {
                continue;
            }
            let via = via.to_string();
            if let Some(p) = ports
                .iter()
                .find(|p| p.fixed_ips.iter().any(|f| f.ip_address == via))
            {
                wanted.entry(&p.id).or_default().insert(cidr.to_string());
            }
        }
    }
    let mut port_changes = BTreeMap::new();
    for p in ports {
        // Port security off: the pairs do not matter, and Neutron refuses them.
        if p.port_security_enabled == Some(false) {
            continue;
        }
        let want = wanted.remove(p.id.as_str()).unwrap_or_default();
        let kept: Vec<AddressPair> = p
            .allowed_address_pairs
            .iter()
            .filter(|a| !managed(cluster_cidr, &a.ip_address) || want.contains(&a.ip_address))
            .cloned()
            .collect();
        let have: BTreeSet<&str> = kept.iter().map(|a| a.ip_address.as_str()).collect();
        let mut next = kept.clone();
        next.extend(
            want.iter()
                .filter(|c| !have.contains(c.as_str()))
                .map(|c| AddressPair {
                    ip_address: c.clone(),
                    mac_address: None,
                }),
        );
        if next != p.allowed_address_pairs {
            port_changes.insert(p.id.clone(), next);
        }
    }
    RoutePlan {
        add,
        remove,
        ports: port_changes,
    }
}

/// The route a node's pod CIDR gets (for reports and tests).
pub fn host_route(cidr: IpNet, via: IpAddr) -> HostRoute {
    route(cidr, via)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kos_cloud::model::network::FixedIp;

    fn port(id: &str, ip: &str, pairs: &[&str]) -> Port {
        Port {
            id: id.into(),
            fixed_ips: vec![FixedIp {
                subnet_id: "s".into(),
                ip_address: ip.into(),
            }],
            allowed_address_pairs: pairs
                .iter()
                .map(|p| AddressPair {
                    ip_address: (*p).into(),
                    mac_address: None,
                })
                .collect(),
            ..Port::default()
        }
    }

    fn node(name: &str, cidr: &str, ip: &str) -> NodeRoute {
        NodeRoute {
            node: name.into(),
            routes: vec![(cidr.parse().expect("cidr"), ip.parse().expect("ip"))],
        }
    }

    #[test]
    fn adds_removes_and_leaves_foreign_routes_alone() {
        let cluster: IpNet = "10.244.0.0/16".parse().expect("cidr");
        let current = vec![
            // Someone else's route: outside the cluster CIDR.
            host_route(
                "192.168.50.0/24".parse().expect("c"),
                "10.0.0.1".parse().expect("i"),
            ),
            // A node that left.
            host_route(
                "10.244.9.0/24".parse().expect("c"),
                "10.0.0.99".parse().expect("i"),
            ),
            // Still right.
            host_route(
                "10.244.1.0/24".parse().expect("c"),
                "10.0.0.11".parse().expect("i"),
            ),
        ];
        let nodes = [
            node("a", "10.244.1.0/24", "10.0.0.11"),
            node("b", "10.244.2.0/24", "10.0.0.12"),
        ];
        let ports = [
            port("pa", "10.0.0.11", &["10.244.1.0/24"]),
            port("pb", "10.0.0.12", &["172.16.0.0/12"]),
            port("gone", "10.0.0.99", &["10.244.9.0/24", "10.96.0.0/12"]),
        ];
        let p = plan(&cluster, &current, &nodes, &ports);
        assert_eq!(
            p.add,
            [host_route(
                "10.244.2.0/24".parse().expect("c"),
                "10.0.0.12".parse().expect("i")
            )]
        );
        assert_eq!(
            p.remove,
            [host_route(
                "10.244.9.0/24".parse().expect("c"),
                "10.0.0.99".parse().expect("i")
            )]
        );
        let pairs = |id: &str| -> Vec<String> {
            p.ports[id].iter().map(|a| a.ip_address.clone()).collect()
        };
        assert!(!p.ports.contains_key("pa"), "already right");
        assert_eq!(pairs("pb"), ["172.16.0.0/12", "10.244.2.0/24"]);
        // The service CIDR pair kos itself put there stays; the stale pod CIDR goes.
        assert_eq!(pairs("gone"), ["10.96.0.0/12"]);
    }

    #[test]
    fn nothing_to_do_is_empty() {
        let cluster: IpNet = "10.244.0.0/16".parse().expect("cidr");
        let current = [host_route(
            "10.244.1.0/24".parse().expect("c"),
            "10.0.0.11".parse().expect("i"),
        )];
        let nodes = [node("a", "10.244.1.0/24", "10.0.0.11")];
        let ports = [port("pa", "10.0.0.11", &["10.244.1.0/24"])];
        assert!(plan(&cluster, &current, &nodes, &ports).is_empty());
    }

    #[test]
    fn nodes_without_a_pod_cidr_or_address_are_skipped() {
        let mut n = Node::default();
        n.metadata.name = Some("a".into());
        assert_eq!(NodeRoute::of(&n), None);
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidr: Some("10.244.1.0/24".into()),
            ..Default::default()
        });
        assert_eq!(NodeRoute::of(&n), None, "no InternalIP");
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: Some(vec![k8s_openapi::api::core::v1::NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.11".into(),
            }]),
            ..Default::default()
        });
        assert_eq!(
            NodeRoute::of(&n),
            Some(node("a", "10.244.1.0/24", "10.0.0.11"))
        );
    }
}
