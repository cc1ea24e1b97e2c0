//! Floating IPs: allocation from the external network, and association only where a router connects the
//! port's subnet to that network.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ipam;
use super::*;
use crate::clock::SimTime;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FloatingIp {
    pub m: Meta,
    pub floating_network_id: String,
    pub floating_subnet_id: String,
    pub floating_ip_address: String,
    pub port_id: Option<String>,
    pub fixed_ip_address: Option<String>,
    pub router_id: Option<String>,
    pub dns_name: String,
    pub dns_domain: String,
    /// What the L3 agent last reported (`DOWN` until then). Neutron answers an association with the
    /// old status; the agent flips it about [`L3_AGENT_SECS`] later (see [`agent_report`]).
    #[serde(default)]
    pub status: String,
    /// When the agent reports the current association (cloud seconds).
    #[serde(default)]
    pub agent_due: Option<f64>,
}

/// How long the L3 agent takes to report a floating IP's new status.
pub const L3_AGENT_SECS: f64 = 2.0;

impl FloatingIp {
    pub fn disassociate(&mut self) {
        if self.port_id.is_some() {
            self.port_id = None;
            self.fixed_ip_address = None;
            self.router_id = None;
            // No clock here: the agent reports at the next tick.
            self.agent_due = Some(0.0);
            self.m.touch();
        }
    }

    fn status(&self) -> &str {
        if self.status.is_empty() {
            "DOWN"
        } else {
            &self.status
        }
    }
}

/// The L3 agent's status reports: associated floating IPs become ACTIVE, disassociated ones DOWN.
pub fn agent_report(n: &mut NeutronState, now: SimTime) {
    for f in &mut n.floating_ips {
        if f.agent_due.is_some_and(|due| due <= now.0) {
            f.agent_due = None;
            f.status = if f.port_id.is_some() {
                "ACTIVE"
            } else {
                "DOWN"
            }
            .into();
        }
    }
}

pub fn render(n: &NeutronState, x: &FloatingIp) -> Value {
    let port_details = x
        .port_id
        .as_ref()
        .and_then(|pid| n.ports.iter().find(|p| &p.m.id == pid))
        .map(|p| {
            json!({
                "name": p.m.name, "network_id": p.network_id, "mac_address": p.mac_address,
                "admin_state_up": p.admin_state_up, "status": p.status,
                "device_id": p.device_id, "device_owner": p.device_owner,
            })
        });
    let v = with(
        x.m.json(),
        json!({
            "floating_network_id": x.floating_network_id,
            "floating_ip_address": x.floating_ip_address,
            "port_id": x.port_id,
            "fixed_ip_address": x.fixed_ip_address,
            "router_id": x.router_id,
            "status": x.status(),
            "port_details": port_details,
            "port_forwardings": [],
            "dns_name": x.dns_name,
            "dns_domain": x.dns_domain,
            "qos_policy_id": null,
            "qos_network_policy_id": null,
        }),
    );
    // Floating IPs have no name in Neutron.
    let mut v = v;
    if let Some(o) = v.as_object_mut() {
        o.remove("name");
    }
    v
}

// No `tags`: Neutron's tag extension has them `allow_post: False` except on ports (a 400).
const CREATE: &[&str] = &[
    "floating_network_id",
    "floating_ip_address",
    "subnet_id",
    "port_id",
    "fixed_ip_address",
    "description",
    "dns_name",
    "dns_domain",
    "qos_policy_id",
    "tenant_id",
    "project_id",
];
const UPDATE: &[&str] = &[
    "port_id",
    "fixed_ip_address",
    "description",
    "qos_policy_id",
];

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    floating_network_id: Option<String>,
    floating_ip_address: Option<String>,
    subnet_id: Option<String>,
    #[serde(deserialize_with = "present")]
    port_id: Option<Option<String>>,
    fixed_ip_address: Option<String>,
    description: Option<String>,
    dns_name: Option<String>,
    dns_domain: Option<String>,
    qos_policy_id: Option<String>,
}

/// Where `fip_id` would attach on `port_id`: (fixed IP, router). Neutron's checks, in its order.
fn association(
    n: &NeutronState,
    ctx: &AuthCtx,
    fip: &FloatingIp,
    port_id: &str,
    fixed: Option<&str>,
) -> SimResult<(String, String)> {
    let port = n
        .ports
        .iter()
        .find(|p| p.m.id == port_id && owns(ctx, &p.m.project_id))
        .ok_or_else(|| Kind::Port.not_found(port_id))?;
    let v4: Vec<&ports::FixedIp> = port
        .fixed_ips
        .iter()
        .filter(|f| ipam::parse_ip(&f.ip_address).is_some_and(|a| a.is_ipv4()))
        .collect();
    let chosen = match fixed {
        Some(ip) => port
            .fixed_ips
            .iter()
            .find(|f| f.ip_address == ip)
            .ok_or_else(|| {
                bad_request(
                    "floatingip",
                    format!("Port {port_id} does not have fixed ip {ip}"),
                )
            })?,
        None if v4.is_empty() => {
            return Err(bad_request(
                "floatingip",
                format!("Port {port_id} does not have any fixed IPv4 address"),
            ));
        }
        None if v4.len() > 1 => {
            return Err(bad_request(
                "floatingip",
                format!(
                    "Port {port_id} has multiple fixed IPv4 addresses.  Must provide a specific IPv4 address when assigning a floating IP"
                ),
            ));
        }
        None => v4[0],
    };
    if !v4.iter().any(|f| f.ip_address == chosen.ip_address) {
        return Err(bad_request(
            "floatingip",
            format!("Cannot add floating IP to port {port_id} that has no fixed IPv4 addresses"),
        ));
    }
    let router = routers::router_for(n, &chosen.subnet_id, &fip.floating_network_id).ok_or_else(|| {
        not_found(
            "ExternalGatewayForFloatingIPNotFound",
            format!(
                "External network {} is not reachable from subnet {}.  Therefore, cannot associate Port {port_id} with a Floating IP.",
                fip.floating_network_id, chosen.subnet_id
            ),
        )
    })?;
    if let Some(other) = n.floating_ips.iter().find(|f| {
        f.m.id != fip.m.id
            && f.port_id.as_deref() == Some(port_id)
            && f.fixed_ip_address.as_deref() == Some(chosen.ip_address.as_str())
            && f.floating_network_id == fip.floating_network_id
    }) {
        return Err(conflict(
            "FloatingIPPortAlreadyAssociated",
            format!(
                "Cannot associate floating IP {} ({}) with port {port_id} using fixed IP {}, as that fixed IP already has a floating IP on external network {}.",
                fip.floating_ip_address, fip.m.id, chosen.ip_address, other.floating_network_id
            ),
        ));
    }
    Ok((chosen.ip_address.clone(), router))
}

fn no_qos(q: &Option<String>) -> SimResult<()> {
    match q {
        Some(q) => Err(not_found(
            "QosPolicyNotFound",
            format!("QoS policy {q} could not be found."),
        )),
        None => Ok(()),
    }
}

pub fn create(cloud: &mut Cloud, ctx: &AuthCtx, obj: &Map<String, Value>) -> SimResult<String> {
    check_attrs(Kind::FloatingIp, obj, CREATE, true)?;
    let b: Body = typed(obj)?;
    no_qos(&b.qos_policy_id)?;
    if b.floating_ip_address.is_some() && !ctx.is_admin() {
        return Err(forbidden("create_floatingip:floating_ip_address"));
    }
    let net_id = b.floating_network_id.ok_or_else(|| {
        bad("Failed to parse request. Required attribute 'floating_network_id' not specified")
    })?;
    let project = owner(ctx, obj, "create_floatingip")?;
    check_quota(cloud, &project, "floatingip", 1)?;
    let n = &cloud.neutron;
    let net = n
        .networks
        .iter()
        .find(|x| x.m.id == net_id && networks::visible(x, ctx))
        .ok_or_else(|| Kind::Network.not_found(&net_id))?;
    if !net.external {
        return Err(bad_request(
            "floatingip",
            format!("Network {net_id} is not a valid external network"),
        ));
    }
    let candidates: Vec<&Subnet> = n
        .subnets
        .iter()
        .filter(|s| s.network_id == net_id && s.ip_version == 4)
        .filter(|s| b.subnet_id.as_ref().is_none_or(|want| &s.m.id == want))
        .collect();
    if let Some(sid) = &b.subnet_id
        && candidates.is_empty()
    {
        return Err(bad_request(
            "floatingip",
            format!("Subnet {sid} is not on external network {net_id}"),
        ));
    }
    let (subnet_id, address) = match &b.floating_ip_address {
        Some(ip) => {
            let s = candidates
                .iter()
                .find(|s| ipam::contains(&s.cidr, ip))
                .ok_or_else(|| err400("InvalidIpForNetwork", format!("IP address {ip} is not a valid IP for any of the subnets on the specified network.")))?;
            if ipam::used(n, &s.m.id, None)
                .contains(&ipam::parse_ip(ip).map(ipam::to_u128).unwrap_or_default())
            {
                return Err(ipam::already_allocated(ip, &s.m.id));
            }
            (s.m.id.clone(), ip.clone())
        }
        None => candidates
            .iter()
            .find_map(|s| {
                ipam::next_free(s, &ipam::used(n, &s.m.id, None)).map(|ip| (s.m.id.clone(), ip))
            })
            .ok_or_else(|| ipam::exhausted(&net_id))?,
    };
    let mut fip = FloatingIp {
        m: Meta::new(&project, "", b.description.as_deref().unwrap_or("")),
        floating_network_id: net_id,
        floating_subnet_id: subnet_id,
        floating_ip_address: address,
        dns_name: b.dns_name.unwrap_or_default(),
        dns_domain: b.dns_domain.unwrap_or_default(),
        ..Default::default()
    };
    if let Some(Some(port_id)) = &b.port_id {
        let (fixed, router) = association(n, ctx, &fip, port_id, b.fixed_ip_address.as_deref())?;
        fip.port_id = Some(port_id.clone());
        fip.fixed_ip_address = Some(fixed);
        fip.router_id = Some(router);
        fip.agent_due = Some(cloud.now.after(L3_AGENT_SECS).0);
    } else if b.fixed_ip_address.is_some() {
        return Err(bad_request(
            "floatingip",
            "fixed_ip_address cannot be specified without a port_id",
        ));
    }
    let id = fip.m.id.clone();
    cloud.neutron.floating_ips.push(fip);
    Ok(id)
}

pub fn update(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    id: &str,
    obj: &Map<String, Value>,
) -> SimResult<()> {
    check_attrs(Kind::FloatingIp, obj, UPDATE, false)?;
    let b: Body = typed(obj)?;
    no_qos(&b.qos_policy_id)?;
    let n = &cloud.neutron;
    let fip = n
        .floating_ips
        .iter()
        .find(|f| f.m.id == id)
        .ok_or_else(|| Kind::FloatingIp.not_found(id))?;
    let target = match &b.port_id {
        Some(Some(port_id)) => Some((
            port_id.clone(),
            association(n, ctx, fip, port_id, b.fixed_ip_address.as_deref())?,
        )),
        _ => None,
    };
    let fip = cloud
        .neutron
        .floating_ips
        .iter_mut()
        .find(|f| f.m.id == id)
        .ok_or_else(|| Kind::FloatingIp.not_found(id))?;
    let due = cloud.now.after(L3_AGENT_SECS).0;
    match (b.port_id, target) {
        (Some(Some(_)), Some((port_id, (fixed, router)))) => {
            fip.port_id = Some(port_id);
            fip.fixed_ip_address = Some(fixed);
            fip.router_id = Some(router);
            fip.agent_due = Some(due);
        }
        (Some(None), _) => {
            fip.disassociate();
            fip.agent_due = Some(due);
        }
        _ => {}
    }
    if let Some(d) = b.description {
        fip.m.description = d;
    }
    fip.m.touch();
    Ok(())
}

pub fn delete(n: &mut NeutronState, id: &str) -> SimResult<()> {
    n.floating_ips.retain(|f| f.m.id != id);
    Ok(())
}
