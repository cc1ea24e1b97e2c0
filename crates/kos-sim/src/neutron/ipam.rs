//! IP address management: CIDR, gateway and allocation-pool validation, and address allocation. Addresses
//! are handled as `u128` so IPv4 and IPv6 share one arithmetic.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub start: String,
    pub end: String,
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

pub fn from_u128(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(v))
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::try_from(v).unwrap_or(u32::MAX)))
    }
}

pub fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse().ok()
}

/// A CIDR as stored on a subnet (always valid once stored).
pub fn net_of(cidr: &str) -> Option<IpNet> {
    cidr.parse().ok()
}

pub fn contains(cidr: &str, ip: &str) -> bool {
    match (net_of(cidr), parse_ip(ip)) {
        (Some(n), Some(i)) => n.contains(&i),
        _ => false,
    }
}

/// First and last assignable addresses: IPv4 excludes the network and broadcast addresses, IPv6 the
/// subnet-router anycast address.
pub fn host_range(net: &IpNet) -> (u128, u128) {
    let first = to_u128(net.network()) + 1;
    let last = match net {
        IpNet::V4(_) => to_u128(net.broadcast()).saturating_sub(1),
        IpNet::V6(_) => to_u128(net.broadcast()),
    };
    (first, last)
}

/// A subnet CIDR as Neutron accepts it: the right version, no host bits, room for a gateway and hosts.
pub fn validate_cidr(cidr: &str, ip_version: u8) -> SimResult<IpNet> {
    let net: IpNet = cidr.parse().map_err(|_| {
        bad(format!(
            "Invalid input for cidr. Reason: '{cidr}' is not a valid IP subnet."
        ))
    })?;
    let version = if net.addr().is_ipv4() { 4 } else { 6 };
    if version != ip_version {
        return Err(bad(format!(
            "Invalid input for operation: cidr '{cidr}' does not match ip_version {ip_version}."
        )));
    }
    if net.addr() != net.network() {
        return Err(bad(format!(
            "Invalid input for cidr. Reason: '{cidr}' isn't a recognized IP subnet cidr, '{}' is recommended.",
            net.trunc()
        )));
    }
    let (min, max) = if version == 4 { (1, 30) } else { (1, 126) };
    if net.prefix_len() < min || net.prefix_len() > max {
        return Err(invalid(format!(
            "Invalid CIDR {cidr} for IP version {version}: prefix length must be between {min} and {max}"
        )));
    }
    Ok(net)
}

/// An address of the subnet that can be assigned (inside, not network/broadcast).
pub fn assignable(net: &IpNet, ip: IpAddr) -> bool {
    let (first, last) = host_range(net);
    let v = to_u128(ip);
    net.contains(&ip) && v >= first && v <= last
}

/// All host addresses minus the gateway, split around it.
pub fn default_pools(net: &IpNet, gateway: Option<IpAddr>) -> Vec<Pool> {
    let (first, last) = host_range(net);
    let v6 = net.addr().is_ipv6();
    let mut ranges = vec![(first, last)];
    if let Some(g) = gateway.map(to_u128).filter(|g| *g >= first && *g <= last) {
        ranges = vec![(first, g.wrapping_sub(1)), (g + 1, last)];
    }
    ranges
        .into_iter()
        .filter(|(s, e)| s <= e && *e >= first && *s <= last)
        .map(|(s, e)| Pool {
            start: from_u128(s, v6).to_string(),
            end: from_u128(e, v6).to_string(),
        })
        .collect()
}

/// Pools given by the client: inside the subnet, ordered, disjoint, and not containing the gateway.
pub fn validate_pools(net: &IpNet, pools: &[Pool], gateway: Option<IpAddr>) -> SimResult<()> {
    let mut ranges: Vec<(u128, u128, &Pool)> = Vec::new();
    for p in pools {
        let (Some(s), Some(e)) = (parse_ip(&p.start), parse_ip(&p.end)) else {
            return Err(bad(format!(
                "Invalid input for allocation_pools. Reason: '{}-{}' is not a valid IP range.",
                p.start, p.end
            )));
        };
        if !assignable(net, s) || !assignable(net, e) {
            return Err(err400(
                "OutOfBoundsAllocationPool",
                format!(
                    "The allocation pool {}-{} spans beyond the subnet cidr {net}.",
                    p.start, p.end
                ),
            ));
        }
        let (s, e) = (to_u128(s), to_u128(e));
        if s > e {
            return Err(err400(
                "InvalidAllocationPool",
                format!("The allocation pool {}-{} is not valid.", p.start, p.end),
            ));
        }
        ranges.push((s, e, p));
    }
    for (i, a) in ranges.iter().enumerate() {
        if let Some(b) = ranges[i + 1..].iter().find(|b| a.0 <= b.1 && b.0 <= a.1) {
            return Err(err400(
                "OverlappingAllocationPools",
                format!(
                    "Found overlapping allocation pools: {}-{} and {}-{} for subnet {net}.",
                    a.2.start, a.2.end, b.2.start, b.2.end
                ),
            ));
        }
    }
    if let Some(g) = gateway
        && let Some(p) = ranges
            .iter()
            .find(|(s, e, _)| (*s..=*e).contains(&to_u128(g)))
    {
        return Err(conflict(
            "GatewayConflictWithAllocationPools",
            format!(
                "Gateway ip {g} conflicts with allocation pool {}-{}",
                p.2.start, p.2.end
            ),
        ));
    }
    Ok(())
}

/// Addresses of a subnet held by ports (except `except_port`) and floating IPs.
pub fn used(n: &NeutronState, subnet_id: &str, except_port: Option<&str>) -> HashSet<u128> {
    let ports = n
        .ports
        .iter()
        .filter(|p| Some(p.m.id.as_str()) != except_port)
        .flat_map(|p| p.fixed_ips.iter())
        .filter(|f| f.subnet_id == subnet_id)
        .filter_map(|f| parse_ip(&f.ip_address));
    let fips = n
        .floating_ips
        .iter()
        .filter(|f| f.floating_subnet_id == subnet_id)
        .filter_map(|f| parse_ip(&f.floating_ip_address));
    ports.chain(fips).map(to_u128).collect()
}

/// The first free address of the subnet's pools, skipping `taken` as well.
pub fn next_free(sub: &Subnet, used: &HashSet<u128>) -> Option<String> {
    let v6 = sub.ip_version == 6;
    sub.allocation_pools.iter().find_map(|p| {
        let s = to_u128(parse_ip(&p.start)?);
        let e = to_u128(parse_ip(&p.end)?);
        (s..=e)
            .find(|a| !used.contains(a))
            .map(|a| from_u128(a, v6).to_string())
    })
}

pub fn exhausted(network_id: &str) -> SimError {
    conflict(
        "IpAddressGenerationFailure",
        format!("No more IP addresses available on network {network_id}."),
    )
}

pub fn already_allocated(ip: &str, subnet_id: &str) -> SimError {
    conflict(
        "IpAddressAlreadyAllocated",
        format!("IP address {ip} already allocated in subnet {subnet_id}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pools_split_around_the_gateway() {
        let net: IpNet = "10.0.0.0/24".parse().expect("cidr");
        let first = default_pools(&net, parse_ip("10.0.0.1"));
        assert_eq!(
            first,
            vec![Pool {
                start: "10.0.0.2".into(),
                end: "10.0.0.254".into()
            }]
        );
        let mid = default_pools(&net, parse_ip("10.0.0.100"));
        assert_eq!(mid.len(), 2);
        assert_eq!(mid[0].end, "10.0.0.99");
        assert_eq!(mid[1].start, "10.0.0.101");
        assert_eq!(default_pools(&net, None)[0].start, "10.0.0.1");
    }

    #[test]
    fn cidrs_are_validated() {
        assert!(validate_cidr("10.0.0.0/24", 4).is_ok());
        assert!(validate_cidr("10.0.0.5/24", 4).is_err(), "host bits");
        assert!(validate_cidr("10.0.0.0/31", 4).is_err(), "too small");
        assert!(validate_cidr("10.0.0.0/24", 6).is_err(), "version");
        assert!(validate_cidr("nonsense", 4).is_err());
        assert!(validate_cidr("fd00::/64", 6).is_ok());
    }

    #[test]
    fn pools_must_stay_inside_and_avoid_the_gateway() {
        let net: IpNet = "10.0.0.0/24".parse().expect("cidr");
        let p = |s: &str, e: &str| Pool {
            start: s.into(),
            end: e.into(),
        };
        let gw = parse_ip("10.0.0.1");
        assert!(validate_pools(&net, &[p("10.0.0.10", "10.0.0.20")], gw).is_ok());
        assert!(validate_pools(&net, &[p("10.0.0.10", "10.0.1.20")], gw).is_err());
        assert!(validate_pools(&net, &[p("10.0.0.1", "10.0.0.20")], gw).is_err());
        assert!(validate_pools(&net, &[p("10.0.0.20", "10.0.0.10")], gw).is_err());
        assert!(
            validate_pools(
                &net,
                &[p("10.0.0.10", "10.0.0.20"), p("10.0.0.15", "10.0.0.30")],
                gw
            )
            .is_err()
        );
    }
}
