//! Ports: fixed-IP allocation, MAC addresses, security groups, allowed address pairs, port security,
//! bindings, and the DHCP ports DHCP-enabled subnets get.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ipam;
use super::*;

pub const DHCP_OWNER: &str = "network:dhcp";
pub const ROUTER_INTERFACE: &str = "network:router_interface";
pub const ROUTER_GATEWAY: &str = "network:router_gateway";
/// Owners whose ports only the L3 API may delete.
const L3_OWNERS: &[&str] = &[
    ROUTER_INTERFACE,
    "network:router_interface_distributed",
    "network:ha_router_replicated_interface",
    ROUTER_GATEWAY,
];
/// Neutron's `max_allowed_address_pair` default.
const MAX_ADDRESS_PAIRS: usize = 10;
/// The (fake) DHCP agent host id in DHCP ports' device_id.
const DHCP_HOST: &str = "dhcp7a5c4b1e-9d0f-5a43-8c1e-3f2b6d8e9a01";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedIp {
    pub subnet_id: String,
    pub ip_address: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressPair {
    pub ip_address: String,
    pub mac_address: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Port {
    pub m: Meta,
    pub network_id: String,
    pub mac_address: String,
    pub fixed_ips: Vec<FixedIp>,
    pub allowed_address_pairs: Vec<AddressPair>,
    pub security_groups: Vec<String>,
    pub port_security_enabled: bool,
    pub device_id: String,
    pub device_owner: String,
    pub admin_state_up: bool,
    pub status: String,
    pub binding_host_id: String,
    pub binding_vif_type: String,
    pub binding_vnic_type: String,
    pub binding_profile: Value,
    pub dns_name: String,
    pub extra_dhcp_opts: Vec<Value>,
    pub propagate_uplink_status: bool,
}

/// What Neutron's DNS integration answers for each fixed IP.
fn dns_assignment(x: &Port) -> Vec<Value> {
    x.fixed_ips
        .iter()
        .map(|f| {
            let host = if x.dns_name.is_empty() {
                format!("host-{}", f.ip_address.replace(['.', ':'], "-"))
            } else {
                x.dns_name.clone()
            };
            json!({"hostname": host, "ip_address": f.ip_address, "fqdn": format!("{host}.openstacklocal.")})
        })
        .collect()
}

pub fn render(x: &Port, admin: bool) -> Value {
    let vif_details = if x.binding_vif_type == "ovs" {
        json!({"port_filter": true, "connectivity": "l2", "bridge_name": "br-int", "datapath_type": "system"})
    } else {
        json!({})
    };
    let v = with(
        x.m.json(),
        json!({
            "network_id": x.network_id,
            "mac_address": x.mac_address,
            "fixed_ips": x.fixed_ips,
            "allowed_address_pairs": x.allowed_address_pairs,
            "security_groups": x.security_groups,
            "port_security_enabled": x.port_security_enabled,
            "device_id": x.device_id,
            "device_owner": x.device_owner,
            "admin_state_up": x.admin_state_up,
            "status": x.status,
            "binding:vnic_type": x.binding_vnic_type,
            "dns_name": x.dns_name,
            "dns_domain": "",
            "dns_assignment": dns_assignment(x),
            "extra_dhcp_opts": x.extra_dhcp_opts,
            "data_plane_status": null,
            "ip_allocation": "immediate",
            "qos_policy_id": null,
            "qos_network_policy_id": null,
            "propagate_uplink_status": x.propagate_uplink_status,
            "pvlan_type": "",
            "pvlan_community": "",
            "hardware_offload_type": "",
            "trusted": null,
        }),
    );
    // Binding details are admin-only in Neutron's default policy (vnic_type is not).
    if admin {
        with(
            v,
            json!({
                "binding:host_id": x.binding_host_id,
                "binding:vif_type": x.binding_vif_type,
                "binding:vif_details": vif_details,
                "binding:profile": x.binding_profile,
            }),
        )
    } else {
        v
    }
}

pub fn port_in_use(p: &Port) -> SimError {
    conflict(
        "PortInUse",
        format!(
            "Unable to complete operation on port {} for network {}. Port already has an attached device {}.",
            p.m.id, p.network_id, p.device_id
        ),
    )
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedIpReq {
    pub subnet_id: Option<String>,
    pub ip_address: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairReq {
    pub ip_address: Option<String>,
    pub mac_address: Option<String>,
}

/// A port to create, from the API or another service.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PortSpec {
    pub network_id: String,
    pub name: String,
    pub description: String,
    pub admin_state_up: Option<bool>,
    pub mac_address: Option<String>,
    pub fixed_ips: Option<Vec<FixedIpReq>>,
    pub device_id: String,
    pub device_owner: String,
    pub security_groups: Option<Vec<String>>,
    pub allowed_address_pairs: Option<Vec<PairReq>>,
    pub port_security_enabled: Option<bool>,
    #[serde(rename = "binding:host_id")]
    pub binding_host_id: Option<String>,
    #[serde(rename = "binding:vnic_type")]
    pub binding_vnic_type: Option<String>,
    #[serde(rename = "binding:profile")]
    pub binding_profile: Option<Value>,
    pub dns_name: String,
    pub extra_dhcp_opts: Vec<Value>,
    pub propagate_uplink_status: Option<bool>,
    pub qos_policy_id: Option<String>,
}

const CREATE: &[&str] = &[
    "network_id",
    "name",
    "description",
    "admin_state_up",
    "mac_address",
    "fixed_ips",
    "device_id",
    "device_owner",
    "security_groups",
    "allowed_address_pairs",
    "port_security_enabled",
    "binding:host_id",
    "binding:vnic_type",
    "binding:profile",
    "dns_name",
    "extra_dhcp_opts",
    "propagate_uplink_status",
    "qos_policy_id",
    "tenant_id",
    "project_id",
    "tags",
];

const UPDATE: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "mac_address",
    "fixed_ips",
    "device_id",
    "device_owner",
    "security_groups",
    "allowed_address_pairs",
    "port_security_enabled",
    "binding:host_id",
    "binding:vnic_type",
    "binding:profile",
    "dns_name",
    "extra_dhcp_opts",
    "propagate_uplink_status",
    "qos_policy_id",
];

const VNIC_TYPES: &[&str] = &[
    "normal",
    "direct",
    "macvtap",
    "baremetal",
    "direct-physical",
    "virtio-forwarder",
    "smart-nic",
    "remote-managed",
    "vdpa",
];

fn valid_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A MAC unique on the network: the requested one, or a fresh `fa:16:3e:…`.
fn pick_mac(n: &NeutronState, network_id: &str, want: Option<&str>) -> SimResult<String> {
    let taken = |m: &str| {
        n.ports
            .iter()
            .any(|p| p.network_id == network_id && p.mac_address.eq_ignore_ascii_case(m))
    };
    match want {
        Some(m) if !valid_mac(m) => Err(bad(format!(
            "Invalid input for mac_address. Reason: '{m}' is not a valid MAC address."
        ))),
        Some(m) if taken(m) => Err(conflict(
            "MacAddressInUse",
            format!(
                "Unable to complete operation for network {network_id}. The mac address {m} is in use."
            ),
        )),
        Some(m) => Ok(m.to_ascii_lowercase()),
        None => Ok(std::iter::repeat_with(ids::mac)
            .find(|m| !taken(m))
            .unwrap_or_else(ids::mac)),
    }
}

/// Resolves requested fixed IPs (or the default allocation) on `network_id`. Addresses held by
/// `except_port` count as free (a port keeping its own addresses on update).
pub fn resolve_fixed_ips(
    n: &NeutronState,
    network_id: &str,
    reqs: Option<&[FixedIpReq]>,
    except_port: Option<&str>,
) -> SimResult<Vec<FixedIp>> {
    let subnets: Vec<&Subnet> = n
        .subnets
        .iter()
        .filter(|s| s.network_id == network_id)
        .collect();
    let mut out: Vec<FixedIp> = Vec::new();
    let used_in = |s: &Subnet, out: &[FixedIp]| -> HashSet<u128> {
        let mut u = ipam::used(n, &s.m.id, except_port);
        u.extend(
            out.iter()
                .filter(|f| f.subnet_id == s.m.id)
                .filter_map(|f| ipam::parse_ip(&f.ip_address))
                .map(ipam::to_u128),
        );
        u
    };
    let Some(reqs) = reqs else {
        // One IPv4 address from the first subnet that has one free, and one from each IPv6 subnet.
        let v4: Vec<&&Subnet> = subnets.iter().filter(|s| s.ip_version == 4).collect();
        if !v4.is_empty() {
            let got = v4
                .iter()
                .find_map(|s| ipam::next_free(s, &used_in(s, &out)).map(|ip| (s.m.id.clone(), ip)))
                .ok_or_else(|| ipam::exhausted(network_id))?;
            out.push(FixedIp {
                subnet_id: got.0,
                ip_address: got.1,
            });
        }
        for s in subnets.iter().filter(|s| s.ip_version == 6) {
            let ip =
                ipam::next_free(s, &used_in(s, &out)).ok_or_else(|| ipam::exhausted(network_id))?;
            out.push(FixedIp {
                subnet_id: s.m.id.clone(),
                ip_address: ip,
            });
        }
        return Ok(out);
    };
    for r in reqs {
        let subnet = match &r.subnet_id {
            Some(sid) => {
                let s = n
                    .subnets
                    .iter()
                    .find(|s| &s.m.id == sid)
                    .ok_or_else(|| Kind::Subnet.not_found(sid))?;
                if s.network_id != network_id {
                    return Err(invalid(format!(
                        "Failed to create port on network {network_id}, because fixed_ips included invalid subnet {sid}"
                    )));
                }
                s
            }
            None => {
                let ip = r.ip_address.as_deref().ok_or_else(|| {
                    bad("Invalid input for fixed_ips. Reason: a fixed IP needs a subnet_id or an ip_address.")
                })?;
                subnets
                    .iter()
                    .copied()
                    .find(|s| ipam::contains(&s.cidr, ip))
                    .ok_or_else(|| {
                        err400(
                            "InvalidIpForNetwork",
                            format!("IP address {ip} is not a valid IP for any of the subnets on the specified network."),
                        )
                    })?
            }
        };
        let ip_address = match &r.ip_address {
            Some(ip) => {
                let addr = ipam::parse_ip(ip).ok_or_else(|| {
                    bad(format!(
                        "Invalid input for fixed_ips. Reason: '{ip}' is not a valid IP address."
                    ))
                })?;
                let net = ipam::net_of(&subnet.cidr)
                    .ok_or_else(|| Kind::Subnet.not_found(&subnet.m.id))?;
                if !ipam::assignable(&net, addr) {
                    return Err(err400(
                        "InvalidIpForSubnet",
                        format!("IP address {ip} is not a valid IP for the specified subnet."),
                    ));
                }
                if used_in(subnet, &out).contains(&ipam::to_u128(addr)) {
                    return Err(ipam::already_allocated(&addr.to_string(), &subnet.m.id));
                }
                addr.to_string()
            }
            None => ipam::next_free(subnet, &used_in(subnet, &out))
                .ok_or_else(|| ipam::exhausted(network_id))?,
        };
        out.push(FixedIp {
            subnet_id: subnet.m.id.clone(),
            ip_address,
        });
    }
    Ok(out)
}

fn resolve_pairs(reqs: &[PairReq], mac: &str) -> SimResult<Vec<AddressPair>> {
    if reqs.len() > MAX_ADDRESS_PAIRS {
        return Err(err400(
            "AllowedAddressPairExhausted",
            format!("The number of allowed address pair exceeds the maximum {MAX_ADDRESS_PAIRS}."),
        ));
    }
    let mut out: Vec<AddressPair> = Vec::new();
    for r in reqs {
        let ip = r
            .ip_address
            .as_deref()
            .ok_or_else(|| bad("Invalid input for allowed_address_pairs. Reason: AllowedAddressPair must contain ip_address."))?;
        if ipam::parse_ip(ip).is_none() && ipam::net_of(ip).is_none() {
            return Err(bad(format!(
                "Invalid input for allowed_address_pairs. Reason: '{ip}' is not a valid IP address or CIDR."
            )));
        }
        let mac = r.mac_address.as_deref().unwrap_or(mac);
        if !valid_mac(mac) {
            return Err(bad(format!(
                "Invalid input for allowed_address_pairs. Reason: '{mac}' is not a valid MAC address."
            )));
        }
        let pair = AddressPair {
            ip_address: ip.to_owned(),
            mac_address: mac.to_ascii_lowercase(),
        };
        if out.contains(&pair) {
            return Err(bad(
                "Invalid input for allowed_address_pairs. Reason: Duplicate address pair found.",
            ));
        }
        out.push(pair);
    }
    Ok(out)
}

/// Security group ids must exist and be the project's (404 otherwise).
fn resolve_sgs(n: &NeutronState, project: &str, ids: &[String]) -> SimResult<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        n.security_groups
            .iter()
            .find(|s| &s.m.id == id && (s.m.project_id == project || s.shared))
            .ok_or_else(|| Kind::SecurityGroup.not_found(id))?;
        if !out.contains(id) {
            out.push(id.clone());
        }
    }
    Ok(out)
}

fn sg_needs_security() -> SimError {
    err400(
        "PortSecurityAndIPRequiredForSecurityGroups",
        "Port security must be enabled and port must have an IP address in order to use security groups.",
    )
}

fn pairs_need_security() -> SimError {
    conflict(
        "AddressPairAndPortSecurityRequired",
        "Port Security must be enabled in order to have allowed address pairs on a port.",
    )
}

/// Creates a port for `project` ("" for ports no project owns, like router gateways). The one path every
/// port takes: POST /ports, Nova, Octavia, router interfaces and gateways, DHCP.
pub fn create(cloud: &mut Cloud, project: &str, spec: PortSpec, quota: bool) -> SimResult<String> {
    if quota {
        check_quota(cloud, project, "port", 1)?;
    }
    if !project.is_empty() && spec.security_groups.is_none() {
        security_groups::ensure_default(&mut cloud.neutron, project);
    }
    let n = &cloud.neutron;
    let net = n
        .networks
        .iter()
        .find(|x| x.m.id == spec.network_id)
        .ok_or_else(|| Kind::Network.not_found(&spec.network_id))?;
    if let Some(q) = &spec.qos_policy_id {
        return Err(not_found(
            "QosPolicyNotFound",
            format!("QoS policy {q} could not be found."),
        ));
    }
    let vnic = spec.binding_vnic_type.unwrap_or_else(|| "normal".into());
    if !VNIC_TYPES.contains(&vnic.as_str()) {
        return Err(bad(format!(
            "Invalid input for binding:vnic_type. Reason: '{vnic}' is not in {VNIC_TYPES:?}."
        )));
    }
    let mac = pick_mac(n, &net.m.id, spec.mac_address.as_deref())?;
    let fixed_ips = resolve_fixed_ips(n, &net.m.id, spec.fixed_ips.as_deref(), None)?;
    let network_owned = spec.device_owner.starts_with("network:");
    let port_security = spec
        .port_security_enabled
        .unwrap_or(net.port_security_enabled && !network_owned);
    let security_groups = match &spec.security_groups {
        Some(ids) if !ids.is_empty() && (!port_security || fixed_ips.is_empty()) => {
            return Err(sg_needs_security());
        }
        Some(ids) => resolve_sgs(n, project, ids)?,
        None if port_security && !network_owned && !fixed_ips.is_empty() && !project.is_empty() => {
            security_groups::default_id(n, project)
                .into_iter()
                .collect()
        }
        None => Vec::new(),
    };
    let allowed_address_pairs = match &spec.allowed_address_pairs {
        Some(p) if !p.is_empty() && !port_security => return Err(pairs_need_security()),
        Some(p) => resolve_pairs(p, &mac)?,
        None => Vec::new(),
    };
    let status = if network_owned { "ACTIVE" } else { "DOWN" };
    let port = Port {
        m: Meta::new(project, &spec.name, &spec.description),
        network_id: net.m.id.clone(),
        mac_address: mac,
        fixed_ips,
        allowed_address_pairs,
        security_groups,
        port_security_enabled: port_security,
        device_id: spec.device_id,
        device_owner: spec.device_owner,
        admin_state_up: spec.admin_state_up.unwrap_or(true),
        status: status.into(),
        binding_vif_type: if spec
            .binding_host_id
            .as_deref()
            .is_some_and(|h| !h.is_empty())
        {
            "ovs".into()
        } else {
            "unbound".into()
        },
        binding_host_id: spec.binding_host_id.unwrap_or_default(),
        binding_vnic_type: vnic,
        binding_profile: spec.binding_profile.unwrap_or_else(|| json!({})),
        dns_name: spec.dns_name,
        extra_dhcp_opts: spec.extra_dhcp_opts,
        propagate_uplink_status: spec.propagate_uplink_status.unwrap_or(false),
    };
    let id = port.m.id.clone();
    cloud.neutron.ports.push(port);
    Ok(id)
}

/// Binding attributes only an admin (Nova's service user) may set.
fn authorize_binding(obj: &Map<String, Value>, ctx: &AuthCtx, action: &str) -> SimResult<()> {
    match ["binding:host_id", "binding:profile"]
        .iter()
        .find(|k| obj.contains_key(**k))
    {
        Some(k) if !ctx.is_admin() => Err(forbidden(&format!("{action}_port:{k}"))),
        _ => Ok(()),
    }
}

/// A port POST (single or one item of a bulk one). Its `tags` are validated as Neutron's
/// `type:list_of_unique_strings` (255 characters) always, and kept only with `keep_tags`: the ML2
/// driver `tag_ports_during_bulk_creation` writes them; without it nothing does, and the port has none.
pub fn create_api(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    obj: &Map<String, Value>,
    keep_tags: bool,
) -> SimResult<String> {
    check_attrs(Kind::Port, obj, CREATE, true)?;
    let tags = create_tags(obj.get("tags"))?;
    authorize_binding(obj, ctx, "create")?;
    let spec: PortSpec = typed(obj)?;
    if spec.network_id.is_empty() {
        return Err(bad(
            "Failed to parse request. Required attribute 'network_id' not specified",
        ));
    }
    let visible = cloud
        .neutron
        .networks
        .iter()
        .any(|x| x.m.id == spec.network_id && networks::visible(x, ctx));
    if !visible {
        return Err(Kind::Network.not_found(&spec.network_id));
    }
    let project = owner(ctx, obj, "create_port")?;
    let id = create(cloud, &project, spec, true)?;
    if keep_tags && let Some(m) = cloud.neutron.ports.iter_mut().find(|p| p.m.id == id) {
        m.m.tags = tags;
    }
    Ok(id)
}

/// The `tags` of a port POST, validated as Neutron validates `type:list_of_unique_strings`.
fn create_tags(v: Option<&Value>) -> SimResult<Vec<String>> {
    let reason = |r: String| bad(format!("Invalid input for tags. Reason: {r}."));
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    // Neutron quotes the value as Python prints it: a string bare, anything else as JSON here.
    let shown = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let items = v
        .as_array()
        .ok_or_else(|| reason(format!("'{}' is not a list", shown(v))))?;
    let mut tags: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let t = item
            .as_str()
            .ok_or_else(|| reason(format!("'{}' is not a valid string", shown(item))))?;
        if t.chars().count() > 255 {
            return Err(reason(format!("'{t}' exceeds maximum length of 255")));
        }
        if tags.iter().any(|x| x == t) {
            return Err(reason(format!("Duplicate items in the list: '{t}'")));
        }
        tags.push(t.to_owned());
    }
    Ok(tags)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Update {
    name: Option<String>,
    description: Option<String>,
    admin_state_up: Option<bool>,
    mac_address: Option<String>,
    fixed_ips: Option<Vec<FixedIpReq>>,
    device_id: Option<String>,
    device_owner: Option<String>,
    security_groups: Option<Vec<String>>,
    allowed_address_pairs: Option<Vec<PairReq>>,
    port_security_enabled: Option<bool>,
    #[serde(rename = "binding:host_id")]
    binding_host_id: Option<String>,
    #[serde(rename = "binding:vnic_type")]
    binding_vnic_type: Option<String>,
    #[serde(rename = "binding:profile")]
    binding_profile: Option<Value>,
    dns_name: Option<String>,
    extra_dhcp_opts: Option<Vec<Value>>,
    propagate_uplink_status: Option<bool>,
    #[serde(deserialize_with = "present")]
    qos_policy_id: Option<Option<String>>,
}

pub fn update(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    id: &str,
    obj: &Map<String, Value>,
) -> SimResult<()> {
    check_attrs(Kind::Port, obj, UPDATE, false)?;
    authorize_binding(obj, ctx, "update")?;
    let b: Update = typed(obj)?;
    if let Some(Some(q)) = &b.qos_policy_id {
        return Err(not_found(
            "QosPolicyNotFound",
            format!("QoS policy {q} could not be found."),
        ));
    }
    let n = &cloud.neutron;
    let cur = n
        .ports
        .iter()
        .find(|p| p.m.id == id)
        .ok_or_else(|| Kind::Port.not_found(id))?;
    let mac = match &b.mac_address {
        Some(m) if m.eq_ignore_ascii_case(&cur.mac_address) => cur.mac_address.clone(),
        Some(_) if !cur.binding_host_id.is_empty() => {
            return Err(conflict(
                "PortBound",
                format!(
                    "Unable to complete operation on port {id}, port is already bound, port type: ovs, old_mac {}, new_mac {}.",
                    cur.mac_address,
                    b.mac_address.as_deref().unwrap_or("")
                ),
            ));
        }
        Some(m) => pick_mac(n, &cur.network_id, Some(m))?,
        None => cur.mac_address.clone(),
    };
    let fixed_ips = match &b.fixed_ips {
        Some(reqs) => resolve_fixed_ips(n, &cur.network_id, Some(reqs), Some(id))?,
        None => cur.fixed_ips.clone(),
    };
    let port_security = b.port_security_enabled.unwrap_or(cur.port_security_enabled);
    let security_groups = match &b.security_groups {
        Some(ids) if !ids.is_empty() && (!port_security || fixed_ips.is_empty()) => {
            return Err(sg_needs_security());
        }
        Some(ids) => resolve_sgs(n, &cur.m.project_id, ids)?,
        None if !port_security && !cur.security_groups.is_empty() => {
            return Err(conflict(
                "PortSecurityPortHasSecurityGroup",
                "Port has security group associated. Cannot disable port security or ip address until security group is removed",
            ));
        }
        None => cur.security_groups.clone(),
    };
    let allowed_address_pairs = match &b.allowed_address_pairs {
        Some(p) if !p.is_empty() && !port_security => return Err(pairs_need_security()),
        Some(p) => resolve_pairs(p, &mac)?,
        None if !port_security && !cur.allowed_address_pairs.is_empty() => {
            return Err(pairs_need_security());
        }
        None => cur.allowed_address_pairs.clone(),
    };
    if let Some(v) = &b.binding_vnic_type
        && !VNIC_TYPES.contains(&v.as_str())
    {
        return Err(bad(format!(
            "Invalid input for binding:vnic_type. Reason: '{v}' is not in {VNIC_TYPES:?}."
        )));
    }
    let p = cloud
        .neutron
        .ports
        .iter_mut()
        .find(|p| p.m.id == id)
        .ok_or_else(|| Kind::Port.not_found(id))?;
    p.mac_address = mac;
    p.fixed_ips = fixed_ips;
    p.port_security_enabled = port_security;
    p.security_groups = security_groups;
    p.allowed_address_pairs = allowed_address_pairs;
    if let Some(v) = b.name {
        p.m.name = v;
    }
    if let Some(v) = b.description {
        p.m.description = v;
    }
    if let Some(v) = b.admin_state_up {
        p.admin_state_up = v;
    }
    if let Some(v) = b.device_id {
        p.device_id = v;
    }
    if let Some(v) = b.device_owner {
        p.device_owner = v;
    }
    if let Some(v) = b.binding_host_id {
        p.binding_vif_type = if v.is_empty() { "unbound" } else { "ovs" }.into();
        p.binding_host_id = v;
    }
    if let Some(v) = b.binding_vnic_type {
        p.binding_vnic_type = v;
    }
    if let Some(v) = b.binding_profile {
        p.binding_profile = v;
    }
    if let Some(v) = b.dns_name {
        p.dns_name = v;
    }
    if let Some(v) = b.extra_dhcp_opts {
        p.extra_dhcp_opts = v;
    }
    if let Some(v) = b.propagate_uplink_status {
        p.propagate_uplink_status = v;
    }
    p.m.touch();
    Ok(())
}

/// DELETE /ports/{id}: router ports belong to the L3 API (409 `L3PortInUse` while their router exists).
pub fn delete(n: &mut NeutronState, id: &str) -> SimResult<()> {
    let p = n
        .ports
        .iter()
        .find(|p| p.m.id == id)
        .ok_or_else(|| Kind::Port.not_found(id))?;
    if L3_OWNERS.contains(&p.device_owner.as_str())
        && n.routers.iter().any(|r| r.m.id == p.device_id)
    {
        return Err(conflict(
            "L3PortInUse",
            format!(
                "Port {id} has owner {} and therefore cannot be deleted directly via the port API.",
                p.device_owner
            ),
        ));
    }
    remove(n, id);
    Ok(())
}

/// Removes a port, disassociating its floating IPs.
pub fn remove(n: &mut NeutronState, id: &str) {
    for f in n
        .floating_ips
        .iter_mut()
        .filter(|f| f.port_id.as_deref() == Some(id))
    {
        f.disassociate();
    }
    n.ports.retain(|p| p.m.id != id);
}

/// Gives the network's DHCP port an address on a DHCP-enabled subnet (creating the port if needed), as
/// the DHCP agent does: it is why a new network's first VM port does not get the pool's first address.
pub fn attach_dhcp(n: &mut NeutronState, subnet_id: &str) {
    let Some(sub) = n.subnets.iter().find(|s| s.m.id == subnet_id) else {
        return;
    };
    let Some(ip) = ipam::next_free(sub, &ipam::used(n, subnet_id, None)) else {
        return;
    };
    let fixed = FixedIp {
        subnet_id: subnet_id.to_owned(),
        ip_address: ip,
    };
    let (network_id, project) = (sub.network_id.clone(), sub.m.project_id.clone());
    if let Some(p) = n
        .ports
        .iter_mut()
        .find(|p| p.network_id == network_id && p.device_owner == DHCP_OWNER)
    {
        p.fixed_ips.push(fixed);
        p.m.touch();
        return;
    }
    let mac = pick_mac(n, &network_id, None).unwrap_or_else(|_| ids::mac());
    n.ports.push(Port {
        m: Meta::new(&project, "", ""),
        device_id: format!("{DHCP_HOST}-{network_id}"),
        device_owner: DHCP_OWNER.into(),
        network_id,
        mac_address: mac,
        fixed_ips: vec![fixed],
        admin_state_up: true,
        status: "ACTIVE".into(),
        binding_host_id: "kos-sim-network".into(),
        binding_vif_type: "ovs".into(),
        binding_vnic_type: "normal".into(),
        binding_profile: json!({}),
        ..Default::default()
    });
}

/// Releases the DHCP port's address on a subnet; the port goes when it has none left.
pub fn detach_dhcp(n: &mut NeutronState, subnet_id: &str) {
    for p in n.ports.iter_mut().filter(|p| p.device_owner == DHCP_OWNER) {
        p.fixed_ips.retain(|f| f.subnet_id != subnet_id);
    }
    n.ports
        .retain(|p| p.device_owner != DHCP_OWNER || !p.fixed_ips.is_empty());
}
