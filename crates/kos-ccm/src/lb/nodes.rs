//! Which Nodes become pool members, and at which address.
//!
//! Node filtering follows the generic service controller as of StableLoadBalancerNodeSet (GA in
//! Kubernetes 1.30): nodes labelled `node.kubernetes.io/exclude-from-external-load-balancers`, nodes
//! tainted `ToBeDeletedByClusterAutoscaler` and nodes being deleted are left out; readiness is *not*
//! a filter (a flapping node would otherwise rewrite every pool; the health monitor takes a dead
//! node out instead). Then the `node-selector` applies (upstream `filterNodes`). The address is
//! the node's first InternalIP of the Service's family, else its first ExternalIP (upstream
//! `nodeAddressForLB`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;

pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// A node that will be a member.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Backend {
    pub name: String,
    pub address: String,
}

/// The members of every pool, sorted by node name, and the nodes left out for lack of an address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backends {
    pub backends: Vec<Backend>,
    pub without_address: Vec<String>,
}

fn excluded(node: &Node) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(EXCLUDE_LABEL));
    let doomed = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT));
    labelled || doomed || node.metadata.deletion_timestamp.is_some()
}

fn selected(node: &Node, selector: &BTreeMap<String, String>) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    selector
        .iter()
        .all(|(k, v)| labels.get(k).is_some_and(|have| v.is_empty() || have == v))
}

/// The first InternalIP, else the first ExternalIP, of the wanted family.
pub fn address_for_lb(node: &Node, ipv6: bool) -> Option<String> {
    let addrs = node.status.as_ref()?.addresses.as_ref()?;
    ["InternalIP", "ExternalIP"].iter().find_map(|kind| {
        addrs
            .iter()
            .filter(|a| a.type_ == *kind)
            .find(|a| {
                a.address
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_ipv6() == ipv6)
            })
            .map(|a| a.address.clone())
    })
}

/// The backends for a Service from all the cluster's nodes.
pub fn backends(nodes: &[Node], selector: &BTreeMap<String, String>, ipv6: bool) -> Backends {
    let mut out = Backends::default();
    for node in nodes
        .iter()
        .filter(|n| !excluded(n) && selected(n, selector))
    {
        let name = node.metadata.name.clone().unwrap_or_default();
        match address_for_lb(node, ipv6) {
            Some(address) => out.backends.push(Backend { name, address }),
            None => out.without_address.push(name),
        }
    }
    out.backends.sort();
    out.backends.dedup_by(|a, b| a.name == b.name);
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn node(name: &str, addrs: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).into(), (*v).into()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                addresses: Some(
                    addrs
                        .iter()
                        .map(|(t, a)| NodeAddress {
                            type_: (*t).into(),
                            address: (*a).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn internal_ip_of_the_family_wins_then_external() {
        let n = node(
            "a",
            &[
                ("ExternalIP", "203.0.113.4"),
                ("InternalIP", "fd00::4"),
                ("InternalIP", "10.0.0.4"),
            ],
            &[],
        );
        assert_eq!(address_for_lb(&n, false).as_deref(), Some("10.0.0.4"));
        assert_eq!(address_for_lb(&n, true).as_deref(), Some("fd00::4"));
        let ext = node("b", &[("ExternalIP", "203.0.113.5")], &[]);
        assert_eq!(address_for_lb(&ext, false).as_deref(), Some("203.0.113.5"));
    }

    #[test]
    fn excluded_tainted_and_unselected_nodes_are_left_out() {
        let mut tainted = node("t", &[("InternalIP", "10.0.0.2")], &[]);
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: TO_BE_DELETED_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let nodes = vec![
            node("b", &[("InternalIP", "10.0.0.3")], &[("pool", "web")]),
            node("a", &[("InternalIP", "10.0.0.1")], &[("pool", "web")]),
            node("x", &[("InternalIP", "10.0.0.9")], &[(EXCLUDE_LABEL, "")]),
            tainted,
            node("db", &[("InternalIP", "10.0.0.5")], &[("pool", "db")]),
            node("noaddr", &[], &[("pool", "web")]),
        ];
        let sel = BTreeMap::from([("pool".to_owned(), "web".to_owned())]);
        let b = backends(&nodes, &sel, false);
        assert_eq!(
            b.backends
                .iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert_eq!(b.without_address, vec!["noaddr"]);
        let any = BTreeMap::from([("pool".to_owned(), String::new())]);
        assert_eq!(backends(&nodes, &any, false).backends.len(), 3);
    }
}
