//! Node addresses, with the upstream's rules and order (OCCM `instances_addresses.go`
//! `nodeAddresses`, then `k8s.io/cloud-provider`'s node controller):
//!
//! 1. `InternalIP` for every fixed IP of every ACTIVE Neutron port of the server;
//! 2. `ExternalIP` for `accessIPv4` / `accessIPv6`;
//! 3. `Hostname` from the server metadata key `hostname`;
//! 4. Nova `addresses`, networks in name order: a floating IP is `ExternalIP`; an address on a
//!    `public-network-name` network is `ExternalIP` (and no longer `InternalIP`); any other is
//!    `InternalIP` if `internal-network-name` is empty or names its network, else it is dropped
//!    (from the port addresses too);
//! 5. `address-sort-order` CIDRs group and sort matching addresses first;
//! 6. IPv6 dropped throughout when `ipv6-support-disabled`; duplicates (same type and address)
//!    never added twice.
//!
//! Then, per node: kubelet's `Hostname` kept when the cloud has none, and
//! `alpha.kubernetes.io/provided-node-ip` applied (`GetNodeAddressesFromNodeIP`): each provided
//! IP must be among the addresses; the matching addresses come first and are the only ones of
//! their types. Trunk subports (upstream step between 4 and 5) are not read.

use std::cmp::Ordering;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::NodeAddress;
use kos_cloud::model::compute::Server;
use kos_cloud::model::network::Port;

use crate::config::Networking;

/// The three address types a cloud provider reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressType {
    InternalIp,
    ExternalIp,
    Hostname,
}

impl AddressType {
    pub fn as_str(self) -> &'static str {
        match self {
            AddressType::InternalIp => "InternalIP",
            AddressType::ExternalIp => "ExternalIP",
            AddressType::Hostname => "Hostname",
        }
    }

    fn parse(s: &str) -> Option<AddressType> {
        match s {
            "InternalIP" => Some(AddressType::InternalIp),
            "ExternalIP" => Some(AddressType::ExternalIp),
            "Hostname" => Some(AddressType::Hostname),
            _ => None,
        }
    }
}

/// One node address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub kind: AddressType,
    pub address: String,
}

impl Address {
    fn new(kind: AddressType, address: impl Into<String>) -> Address {
        Address {
            kind,
            address: address.into(),
        }
    }

    pub fn to_node_address(&self) -> NodeAddress {
        NodeAddress {
            type_: self.kind.as_str().to_owned(),
            address: self.address.clone(),
        }
    }

    /// `None` for a type this controller does not manage (`InternalDNS`, `ExternalDNS`).
    pub fn from_node_address(a: &NodeAddress) -> Option<Address> {
        AddressType::parse(&a.type_).map(|k| Address::new(k, a.address.clone()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvidedIpError {
    #[error("cannot parse {value:?}: {detail}")]
    Parse { value: String, detail: String },
    #[error("no address from the cloud matches {ip} (the cloud reports {cloud})")]
    NotFound { ip: IpAddr, cloud: String },
}

/// As upstream: anything that is not an IPv4 address counts as IPv6 (`To4() == nil`).
fn is_ipv6(addr: &str) -> bool {
    addr.parse::<Ipv4Addr>().is_err()
}

fn add(addrs: &mut Vec<Address>, a: Address) {
    if !addrs.contains(&a) {
        addrs.push(a);
    }
}

/// Removes every address equal to `addr`, whatever its type.
fn remove(addrs: &mut Vec<Address>, addr: &str) {
    addrs.retain(|a| a.address != addr);
}

/// The addresses of `server` (steps 1 to 6 of the module docs).
pub fn node_addresses(server: &Server, ports: &[Port], net: &Networking) -> Vec<Address> {
    let v6_ok = |a: &str| !(is_ipv6(a) && net.ipv6_support_disabled);
    let mut addrs = Vec::new();
    for port in ports.iter().filter(|p| p.status == "ACTIVE") {
        for ip in port.fixed_ips.iter().filter(|ip| v6_ok(&ip.ip_address)) {
            add(
                &mut addrs,
                Address::new(AddressType::InternalIp, &ip.ip_address),
            );
        }
    }
    if !server.access_ipv4.is_empty() {
        add(
            &mut addrs,
            Address::new(AddressType::ExternalIp, &server.access_ipv4),
        );
    }
    if !server.access_ipv6.is_empty() && !net.ipv6_support_disabled {
        add(
            &mut addrs,
            Address::new(AddressType::ExternalIp, &server.access_ipv6),
        );
    }
    if let Some(h) = server.metadata.get("hostname").filter(|h| !h.is_empty()) {
        add(&mut addrs, Address::new(AddressType::Hostname, h));
    }
    // BTreeMap: networks in name order, as upstream sorts them.
    for (network, list) in &server.addresses {
        for a in list {
            let kind = if a.kind.as_deref() == Some("floating") {
                AddressType::ExternalIp
            } else if net.public_network_names.contains(network) {
                // A private network listed as public must not show up as both.
                remove(&mut addrs, &a.addr);
                AddressType::ExternalIp
            } else if net.internal_network_names.is_empty()
                || net.internal_network_names.contains(network)
            {
                AddressType::InternalIp
            } else {
                remove(&mut addrs, &a.addr);
                continue;
            };
            if v6_ok(&a.addr) {
                add(&mut addrs, Address::new(kind, &a.addr));
            }
        }
    }
    if !net.address_sort_order.is_empty() {
        sort_addresses(&mut addrs, &net.address_sort_order);
    }
    addrs
}

/// Higher for earlier CIDRs of `order`; 0 for addresses matching none (and hostnames).
fn priority(order: &[IpNet], addr: &str) -> usize {
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return 0;
    };
    order
        .iter()
        .position(|c| c.contains(&ip))
        .map_or(0, |i| order.len() - i)
}

/// 16-byte form, as Go's `net.ParseIP` compares them.
fn ip_bytes(addr: &str) -> [u8; 16] {
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a.to_ipv6_mapped().octets(),
        Ok(IpAddr::V6(a)) => a.octets(),
        Err(_) => [0; 16],
    }
}

/// Upstream `sortNodeAddresses`: a stable sort by priority, ascending IPs within a priority group;
/// addresses matching no CIDR keep their places relative to each other, after the matching ones.
pub fn sort_addresses(addrs: &mut [Address], order: &[IpNet]) {
    addrs.sort_by(|a, b| {
        let (pa, pb) = (priority(order, &a.address), priority(order, &b.address));
        match pb.cmp(&pa) {
            Ordering::Equal if pa > 0 => ip_bytes(&a.address).cmp(&ip_bytes(&b.address)),
            other => other,
        }
    });
}

/// kubelet's `--node-ip` as annotated: one IP, or a dual-stack pair `v4,v6` / `v6,v4`.
pub fn parse_provided_node_ip(value: &str) -> Result<Vec<IpAddr>, ProvidedIpError> {
    let err = |detail: &str| ProvidedIpError::Parse {
        value: value.to_owned(),
        detail: detail.to_owned(),
    };
    let ips = value
        .split(',')
        .map(|s| s.trim().parse::<IpAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| err("not an IP address"))?;
    match ips[..] {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(err("two IPs must be one IPv4 and one IPv6")),
        _ => Err(err("at most two IPs (one per family)")),
    }
}

/// `GetNodeAddressesFromNodeIP`: the addresses equal to a provided IP first, and they are the only
/// addresses of their types; every other type follows unchanged.
pub fn prefer_provided_ips(
    provided: &[IpAddr],
    cloud: &[Address],
) -> Result<Vec<Address>, ProvidedIpError> {
    let mut out: Vec<Address> = Vec::new();
    let mut enforced: Vec<AddressType> = Vec::new();
    for ip in provided {
        let matching: Vec<&Address> = cloud
            .iter()
            .filter(|a| a.address.parse::<IpAddr>().is_ok_and(|x| x == *ip))
            .collect();
        if matching.is_empty() {
            return Err(ProvidedIpError::NotFound {
                ip: *ip,
                cloud: cloud
                    .iter()
                    .map(|a| format!("{} {}", a.kind.as_str(), a.address))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        for a in matching {
            out.push(a.clone());
            enforced.push(a.kind);
        }
    }
    out.extend(
        cloud
            .iter()
            .filter(|a| !enforced.contains(&a.kind))
            .cloned(),
    );
    Ok(out)
}

/// What a node's `status.addresses` should be, given the cloud's addresses: kubelet's hostname
/// kept when the cloud reports none, and the provided node IP(s) applied.
pub fn for_node(
    cloud: &[Address],
    current: &[Address],
    provided_node_ip: Option<&str>,
) -> Result<Vec<Address>, ProvidedIpError> {
    let mut addrs = cloud.to_vec();
    if !addrs.iter().any(|a| a.kind == AddressType::Hostname) {
        addrs.extend(
            current
                .iter()
                .filter(|a| a.kind == AddressType::Hostname)
                .cloned(),
        );
    }
    match provided_node_ip {
        Some(v) => prefer_provided_ips(&parse_provided_node_ip(v)?, &addrs),
        None => Ok(addrs),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kos_cloud::model::compute::ServerAddress;
    use kos_cloud::model::network::FixedIp;

    use super::*;

    fn server(addresses: &[(&str, &str, &str)]) -> Server {
        let mut by_net: BTreeMap<String, Vec<ServerAddress>> = BTreeMap::new();
        for (net, addr, kind) in addresses {
            by_net
                .entry((*net).to_owned())
                .or_default()
                .push(ServerAddress {
                    addr: (*addr).to_owned(),
                    version: if addr.contains(':') { 6 } else { 4 },
                    kind: Some((*kind).to_owned()),
                    mac_addr: None,
                });
        }
        Server {
            id: "s1".into(),
            name: "n1".into(),
            addresses: by_net,
            ..Default::default()
        }
    }

    fn port(status: &str, ips: &[&str]) -> Port {
        Port {
            status: status.into(),
            fixed_ips: ips
                .iter()
                .map(|ip| FixedIp {
                    subnet_id: "sub".into(),
                    ip_address: (*ip).to_owned(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn show(addrs: &[Address]) -> Vec<String> {
        addrs
            .iter()
            .map(|a| format!("{} {}", a.kind.as_str(), a.address))
            .collect()
    }

    fn networking(f: impl FnOnce(&mut Networking)) -> Networking {
        let mut n = Networking::default();
        f(&mut n);
        n
    }

    #[test]
    fn ports_first_then_access_ips_hostname_and_nova_addresses() {
        let mut s = server(&[
            ("private", "10.0.0.5", "fixed"),
            ("private", "203.0.113.7", "floating"),
            ("other", "10.1.0.5", "fixed"),
        ]);
        s.access_ipv4 = "198.51.100.1".into();
        s.metadata.insert("hostname".into(), "n1.example".into());
        let ports = [
            port("ACTIVE", &["10.1.0.5", "10.0.0.5"]),
            port("DOWN", &["10.9.9.9"]),
        ];
        assert_eq!(
            show(&node_addresses(&s, &ports, &Networking::default())),
            [
                "InternalIP 10.1.0.5",
                "InternalIP 10.0.0.5",
                "ExternalIP 198.51.100.1",
                "Hostname n1.example",
                "ExternalIP 203.0.113.7",
            ]
        );
    }

    #[test]
    fn internal_and_public_network_names_decide_types() {
        let s = server(&[
            ("int", "10.0.0.5", "fixed"),
            ("pub", "172.24.4.9", "fixed"),
            ("storage", "10.2.0.5", "fixed"),
        ]);
        let ports = [
            port("ACTIVE", &["10.0.0.5"]),
            port("ACTIVE", &["172.24.4.9"]),
            port("ACTIVE", &["10.2.0.5"]),
        ];
        let net = networking(|n| {
            n.internal_network_names = vec!["int".into()];
            n.public_network_names = vec!["pub".into()];
        });
        assert_eq!(
            show(&node_addresses(&s, &ports, &net)),
            ["InternalIP 10.0.0.5", "ExternalIP 172.24.4.9"]
        );
    }

    #[test]
    fn ipv6_can_be_disabled_and_sort_order_groups_addresses() -> Result<(), ipnet::AddrParseError> {
        let s = server(&[
            ("a", "10.0.0.9", "fixed"),
            ("a", "fd00::5", "fixed"),
            ("b", "192.168.1.4", "fixed"),
            ("b", "10.0.0.2", "fixed"),
        ]);
        let off = networking(|n| n.ipv6_support_disabled = true);
        assert!(
            !show(&node_addresses(&s, &[], &off))
                .iter()
                .any(|a| a.contains("fd00"))
        );
        let order = vec!["192.168.0.0/16".parse()?, "10.0.0.0/8".parse()?];
        let sorted = networking(|n| n.address_sort_order = order);
        assert_eq!(
            show(&node_addresses(&s, &[], &sorted)),
            [
                "InternalIP 192.168.1.4",
                "InternalIP 10.0.0.2",
                "InternalIP 10.0.0.9",
                "InternalIP fd00::5"
            ]
        );
        Ok(())
    }

    #[test]
    fn provided_node_ip_comes_first_and_is_the_only_one_of_its_type() -> Result<(), ProvidedIpError>
    {
        let cloud = vec![
            Address::new(AddressType::InternalIp, "10.0.0.5"),
            Address::new(AddressType::InternalIp, "10.1.0.5"),
            Address::new(AddressType::ExternalIp, "203.0.113.7"),
        ];
        let kubelet = vec![Address::new(AddressType::Hostname, "n1")];
        assert_eq!(
            show(&for_node(&cloud, &kubelet, Some("10.1.0.5"))?),
            [
                "InternalIP 10.1.0.5",
                "ExternalIP 203.0.113.7",
                "Hostname n1"
            ]
        );
        assert!(matches!(
            for_node(&cloud, &kubelet, Some("10.9.9.9")),
            Err(ProvidedIpError::NotFound { .. })
        ));
        assert!(parse_provided_node_ip("10.0.0.1,10.0.0.2").is_err());
        assert!(parse_provided_node_ip("10.0.0.1,fd00::1").is_ok());
        assert!(parse_provided_node_ip("node-1").is_err());
        Ok(())
    }
}
