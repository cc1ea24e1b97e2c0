//! Subnets: CIDR/gateway/pool validation, overlap checks, and the DHCP port a DHCP-enabled subnet gets.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ipam::{self, Pool};
use super::*;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRoute {
    pub destination: String,
    pub nexthop: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Subnet {
    pub m: Meta,
    pub network_id: String,
    pub cidr: String,
    pub ip_version: u8,
    pub gateway_ip: Option<String>,
    pub allocation_pools: Vec<Pool>,
    pub dns_nameservers: Vec<String>,
    pub host_routes: Vec<HostRoute>,
    pub enable_dhcp: bool,
    pub ipv6_address_mode: Option<String>,
    pub ipv6_ra_mode: Option<String>,
    pub service_types: Vec<String>,
    pub dns_publish_fixed_ip: bool,
}

/// Own subnets, and those of shared or external networks.
pub fn visible(n: &NeutronState, x: &Subnet, ctx: &AuthCtx) -> bool {
    owns(ctx, &x.m.project_id)
        || n.networks
            .iter()
            .any(|net| net.m.id == x.network_id && (net.shared || net.external))
}

pub fn render(n: &NeutronState, x: &Subnet) -> Value {
    let external = n
        .networks
        .iter()
        .any(|net| net.m.id == x.network_id && net.external);
    with(
        x.m.json(),
        json!({
            "network_id": x.network_id,
            "cidr": x.cidr,
            "ip_version": x.ip_version,
            "gateway_ip": x.gateway_ip,
            "allocation_pools": x.allocation_pools,
            "dns_nameservers": x.dns_nameservers,
            "host_routes": x.host_routes,
            "enable_dhcp": x.enable_dhcp,
            "ipv6_address_mode": x.ipv6_address_mode,
            "ipv6_ra_mode": x.ipv6_ra_mode,
            "service_types": x.service_types,
            "dns_publish_fixed_ip": x.dns_publish_fixed_ip,
            "segment_id": null,
            "subnetpool_id": null,
            "router:external": external,
        }),
    )
}

// No `tags`: Neutron's tag extension has them `allow_post: False` except on ports (a 400).
const CREATE: &[&str] = &[
    "network_id",
    "name",
    "description",
    "cidr",
    "ip_version",
    "gateway_ip",
    "allocation_pools",
    "dns_nameservers",
    "host_routes",
    "enable_dhcp",
    "ipv6_address_mode",
    "ipv6_ra_mode",
    "service_types",
    "dns_publish_fixed_ip",
    "subnetpool_id",
    "prefixlen",
    "segment_id",
    "tenant_id",
    "project_id",
];

const UPDATE: &[&str] = &[
    "name",
    "description",
    "gateway_ip",
    "allocation_pools",
    "dns_nameservers",
    "host_routes",
    "enable_dhcp",
    "service_types",
    "dns_publish_fixed_ip",
    "segment_id",
];

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    network_id: Option<String>,
    name: Option<String>,
    description: Option<String>,
    cidr: Option<String>,
    ip_version: Option<u8>,
    #[serde(deserialize_with = "present")]
    gateway_ip: Option<Option<String>>,
    allocation_pools: Option<Vec<Pool>>,
    dns_nameservers: Option<Vec<String>>,
    host_routes: Option<Vec<HostRoute>>,
    enable_dhcp: Option<bool>,
    ipv6_address_mode: Option<String>,
    ipv6_ra_mode: Option<String>,
    service_types: Option<Vec<String>>,
    dns_publish_fixed_ip: Option<bool>,
    subnetpool_id: Option<String>,
    segment_id: Option<String>,
}

fn check_dns(servers: &[String]) -> SimResult<()> {
    for (i, s) in servers.iter().enumerate() {
        if ipam::parse_ip(s).is_none() {
            return Err(bad(format!(
                "Invalid input for dns_nameservers. Reason: '{s}' is not a valid nameserver."
            )));
        }
        if servers[..i].contains(s) {
            return Err(bad(format!(
                "Invalid input for dns_nameservers. Reason: Duplicate nameserver '{s}'."
            )));
        }
    }
    Ok(())
}

fn check_routes(routes: &[HostRoute], what: &str) -> SimResult<()> {
    for r in routes {
        if ipam::net_of(&r.destination).is_none() || ipam::parse_ip(&r.nexthop).is_none() {
            return Err(bad(format!(
                "Invalid input for {what}. Reason: '{{'destination': '{}', 'nexthop': '{}'}}' is not a valid route.",
                r.destination, r.nexthop
            )));
        }
    }
    Ok(())
}

/// The gateway: the given address (which must be assignable in the subnet), `null`, or the first host.
fn gateway(net: &ipnet::IpNet, given: Option<Option<String>>) -> SimResult<Option<String>> {
    match given {
        Some(None) => Ok(None),
        Some(Some(g)) => match ipam::parse_ip(&g) {
            Some(ip) if ipam::assignable(net, ip) => Ok(Some(ip.to_string())),
            _ => Err(bad(format!(
                "Invalid input for gateway_ip. Reason: Gateway IP {g} is not valid on subnet {net}."
            ))),
        },
        None => Ok(Some(
            ipam::from_u128(ipam::host_range(net).0, net.addr().is_ipv6()).to_string(),
        )),
    }
}

pub fn create(cloud: &mut Cloud, ctx: &AuthCtx, obj: &Map<String, Value>) -> SimResult<String> {
    check_attrs(Kind::Subnet, obj, CREATE, true)?;
    let b: Body = typed(obj)?;
    let network_id = b.network_id.ok_or_else(|| {
        bad("Failed to parse request. Required attribute 'network_id' not specified")
    })?;
    let n = &cloud.neutron;
    let net = n
        .networks
        .iter()
        .find(|x| x.m.id == network_id && networks::visible(x, ctx))
        .ok_or_else(|| Kind::Network.not_found(&network_id))?;
    if !owns(ctx, &net.m.project_id) {
        return Err(forbidden("create_subnet"));
    }
    if b.subnetpool_id.is_some() {
        return Err(not_found(
            "SubnetPoolNotFound",
            "Subnet pools are not available on this cloud.",
        ));
    }
    let ip_version = b.ip_version.ok_or_else(|| {
        bad("Failed to parse request. Required attribute 'ip_version' not specified")
    })?;
    if ip_version != 4 && ip_version != 6 {
        return Err(bad(format!(
            "Invalid input for ip_version. Reason: {ip_version} is not in valid_values [4, 6]."
        )));
    }
    let cidr = b.cidr.ok_or_else(|| {
        bad_request(
            "subnets",
            "a subnetpool must be specified in the absence of a cidr",
        )
    })?;
    let cidr_net = ipam::validate_cidr(&cidr, ip_version)?;
    if let Some(other) = n
        .subnets
        .iter()
        .filter(|s| s.network_id == network_id)
        .find(|s| {
            ipam::net_of(&s.cidr).is_some_and(|o| o.contains(&cidr_net) || cidr_net.contains(&o))
        })
    {
        return Err(invalid(format!(
            "Requested subnet with cidr: {cidr_net} for network: {network_id} overlaps with another subnet {}",
            other.m.id
        )));
    }
    let gateway_ip = gateway(&cidr_net, b.gateway_ip)?;
    let gw = gateway_ip.as_deref().and_then(ipam::parse_ip);
    let allocation_pools = match b.allocation_pools {
        Some(p) => {
            ipam::validate_pools(&cidr_net, &p, gw)?;
            p
        }
        None => ipam::default_pools(&cidr_net, gw),
    };
    let dns_nameservers = b.dns_nameservers.unwrap_or_default();
    check_dns(&dns_nameservers)?;
    let host_routes = b.host_routes.unwrap_or_default();
    check_routes(&host_routes, "host_routes")?;
    let project = owner(ctx, obj, "create_subnet")?;
    check_quota(cloud, &project, "subnet", 1)?;
    let sub = Subnet {
        m: Meta::new(
            &project,
            b.name.as_deref().unwrap_or(""),
            b.description.as_deref().unwrap_or(""),
        ),
        network_id,
        cidr: cidr_net.to_string(),
        ip_version,
        gateway_ip,
        allocation_pools,
        dns_nameservers,
        host_routes,
        enable_dhcp: b.enable_dhcp.unwrap_or(true),
        ipv6_address_mode: b.ipv6_address_mode,
        ipv6_ra_mode: b.ipv6_ra_mode,
        service_types: b.service_types.unwrap_or_default(),
        dns_publish_fixed_ip: b.dns_publish_fixed_ip.unwrap_or(false),
    };
    let id = sub.m.id.clone();
    let dhcp = sub.enable_dhcp;
    cloud.neutron.subnets.push(sub);
    if dhcp {
        ports::attach_dhcp(&mut cloud.neutron, &id);
    }
    Ok(id)
}

pub fn update(cloud: &mut Cloud, id: &str, obj: &Map<String, Value>) -> SimResult<()> {
    check_attrs(Kind::Subnet, obj, UPDATE, false)?;
    let b: Body = typed(obj)?;
    let n = &mut cloud.neutron;
    let x = n
        .subnets
        .iter()
        .find(|x| x.m.id == id)
        .ok_or_else(|| Kind::Subnet.not_found(id))?;
    let net = ipam::net_of(&x.cidr).ok_or_else(|| Kind::Subnet.not_found(id))?;
    let gateway_ip = match b.gateway_ip {
        Some(g) => gateway(&net, Some(g))?,
        None => x.gateway_ip.clone(),
    };
    let gw = gateway_ip.as_deref().and_then(ipam::parse_ip);
    let pools = b
        .allocation_pools
        .unwrap_or_else(|| x.allocation_pools.clone());
    ipam::validate_pools(&net, &pools, gw)?;
    if let Some(d) = &b.dns_nameservers {
        check_dns(d)?;
    }
    if let Some(r) = &b.host_routes {
        check_routes(r, "host_routes")?;
    }
    let dhcp_before = x.enable_dhcp;
    let x = n
        .subnets
        .iter_mut()
        .find(|x| x.m.id == id)
        .ok_or_else(|| Kind::Subnet.not_found(id))?;
    x.gateway_ip = gateway_ip;
    x.allocation_pools = pools;
    if let Some(v) = b.name {
        x.m.name = v;
    }
    if let Some(v) = b.description {
        x.m.description = v;
    }
    if let Some(v) = b.dns_nameservers {
        x.dns_nameservers = v;
    }
    if let Some(v) = b.host_routes {
        x.host_routes = v;
    }
    if let Some(v) = b.enable_dhcp {
        x.enable_dhcp = v;
    }
    if let Some(v) = b.service_types {
        x.service_types = v;
    }
    if let Some(v) = b.dns_publish_fixed_ip {
        x.dns_publish_fixed_ip = v;
    }
    x.m.touch();
    let dhcp_after = x.enable_dhcp;
    match (dhcp_before, dhcp_after) {
        (false, true) => ports::attach_dhcp(n, id),
        (true, false) => ports::detach_dhcp(n, id),
        _ => {}
    }
    Ok(())
}

/// 409 `SubnetInUse` while any port but the DHCP port (or a floating IP) holds an address of it.
pub fn delete(n: &mut NeutronState, id: &str) -> SimResult<()> {
    let busy = n.ports.iter().any(|p| {
        p.device_owner != ports::DHCP_OWNER && p.fixed_ips.iter().any(|f| f.subnet_id == id)
    }) || n.floating_ips.iter().any(|f| f.floating_subnet_id == id);
    if busy {
        return Err(conflict(
            "SubnetInUse",
            format!(
                "Unable to complete operation on subnet {id}: One or more ports have an IP allocation from this subnet."
            ),
        ));
    }
    ports::detach_dhcp(n, id);
    n.subnets.retain(|s| s.m.id != id);
    Ok(())
}
