//! Networks.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::*;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Network {
    pub m: Meta,
    pub admin_state_up: bool,
    pub shared: bool,
    pub external: bool,
    pub mtu: u32,
    pub port_security_enabled: bool,
    pub dns_domain: String,
    pub availability_zone_hints: Vec<String>,
    pub is_default: bool,
    pub network_type: String,
    pub physical_network: Option<String>,
    pub segmentation_id: Option<u32>,
}

/// Geneve overhead on devstack's OVN: tenant networks get 1442.
const TENANT_MTU: u32 = 1442;

pub fn visible(x: &Network, ctx: &AuthCtx) -> bool {
    owns(ctx, &x.m.project_id) || x.shared || x.external
}

pub fn render(n: &NeutronState, x: &Network, admin: bool) -> Value {
    let subnets: Vec<&str> = n
        .subnets
        .iter()
        .filter(|s| s.network_id == x.m.id)
        .map(|s| s.m.id.as_str())
        .collect();
    let mut v = with(
        x.m.json(),
        json!({
            "admin_state_up": x.admin_state_up,
            "availability_zone_hints": x.availability_zone_hints,
            "availability_zones": ["nova"],
            "dns_domain": x.dns_domain,
            "ipv4_address_scope": null,
            "ipv6_address_scope": null,
            "is_default": x.is_default,
            "l2_adjacency": true,
            "mtu": x.mtu,
            "port_security_enabled": x.port_security_enabled,
            "pvlan": false,
            "qinq": false,
            "qos_policy_id": null,
            "router:external": x.external,
            "shared": x.shared,
            "status": "ACTIVE",
            "subnets": subnets,
            "vlan_transparent": false,
        }),
    );
    // Provider attributes are admin-only in Neutron's default policy.
    if admin {
        v = with(
            v,
            json!({
                "provider:network_type": x.network_type,
                "provider:physical_network": x.physical_network,
                "provider:segmentation_id": x.segmentation_id,
            }),
        );
    }
    v
}

// No `tags`: Neutron's tag extension has them `allow_post: False` except on ports (a 400).
const CREATE: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "shared",
    "router:external",
    "mtu",
    "port_security_enabled",
    "dns_domain",
    "availability_zone_hints",
    "is_default",
    "provider:network_type",
    "provider:physical_network",
    "provider:segmentation_id",
    "qos_policy_id",
    "vlan_transparent",
    "tenant_id",
    "project_id",
];

const UPDATE: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "shared",
    "router:external",
    "mtu",
    "port_security_enabled",
    "dns_domain",
    "is_default",
    "qos_policy_id",
];

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    name: Option<String>,
    description: Option<String>,
    admin_state_up: Option<bool>,
    shared: Option<bool>,
    #[serde(rename = "router:external")]
    external: Option<bool>,
    mtu: Option<u32>,
    port_security_enabled: Option<bool>,
    dns_domain: Option<String>,
    availability_zone_hints: Option<Vec<String>>,
    is_default: Option<bool>,
    #[serde(rename = "provider:network_type")]
    network_type: Option<String>,
    #[serde(rename = "provider:physical_network")]
    physical_network: Option<String>,
    #[serde(rename = "provider:segmentation_id")]
    segmentation_id: Option<u32>,
    qos_policy_id: Option<String>,
    vlan_transparent: Option<bool>,
}

impl Body {
    /// Attributes only an admin may set (Neutron's default policy), and features not modelled.
    fn authorize(&self, ctx: &AuthCtx, action: &str) -> SimResult<()> {
        let admin_only = [
            ("shared", self.shared == Some(true)),
            ("router:external", self.external.is_some()),
            ("provider:network_type", self.network_type.is_some()),
            ("provider:physical_network", self.physical_network.is_some()),
            ("provider:segmentation_id", self.segmentation_id.is_some()),
            ("is_default", self.is_default.is_some()),
        ];
        if let Some((attr, _)) = admin_only.iter().find(|(_, set)| *set)
            && !ctx.is_admin()
        {
            return Err(forbidden(&format!("{action}_network:{attr}")));
        }
        if let Some(q) = &self.qos_policy_id {
            return Err(not_found(
                "QosPolicyNotFound",
                format!("QoS policy {q} could not be found."),
            ));
        }
        if self.vlan_transparent == Some(true) {
            return Err(invalid("vlan_transparent is not supported on this cloud"));
        }
        if let Some(mtu) = self.mtu
            && !(68..=TENANT_MTU).contains(&mtu)
        {
            return Err(invalid(format!(
                "Requested MTU is too big, maximum is {TENANT_MTU}"
            )));
        }
        Ok(())
    }
}

pub fn create(cloud: &mut Cloud, ctx: &AuthCtx, obj: &Map<String, Value>) -> SimResult<String> {
    check_attrs(Kind::Network, obj, CREATE, true)?;
    let b: Body = typed(obj)?;
    b.authorize(ctx, "create")?;
    let project = owner(ctx, obj, "create_network")?;
    check_quota(cloud, &project, "network", 1)?;
    let external = b.external.unwrap_or(false);
    let net = Network {
        m: Meta::new(
            &project,
            b.name.as_deref().unwrap_or(""),
            b.description.as_deref().unwrap_or(""),
        ),
        admin_state_up: b.admin_state_up.unwrap_or(true),
        shared: b.shared.unwrap_or(false),
        external,
        mtu: b.mtu.unwrap_or(TENANT_MTU),
        port_security_enabled: b.port_security_enabled.unwrap_or(true),
        dns_domain: b.dns_domain.unwrap_or_default(),
        availability_zone_hints: b.availability_zone_hints.unwrap_or_default(),
        is_default: b.is_default.unwrap_or(false),
        network_type: b.network_type.unwrap_or_else(|| "geneve".into()),
        physical_network: b.physical_network,
        segmentation_id: b.segmentation_id.or(Some(rand::random_range(1..16_000))),
    };
    let id = net.m.id.clone();
    cloud.neutron.networks.push(net);
    Ok(id)
}

pub fn update(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    id: &str,
    obj: &Map<String, Value>,
) -> SimResult<()> {
    check_attrs(Kind::Network, obj, UPDATE, false)?;
    let b: Body = typed(obj)?;
    b.authorize(ctx, "update")?;
    let n = &mut cloud.neutron;
    if b.external == Some(false)
        && n.routers
            .iter()
            .any(|r| r.gateway.as_ref().is_some_and(|g| g.network_id == id))
    {
        return Err(conflict(
            "ExternalNetworkInUse",
            format!(
                "External network {id} cannot be updated to be made non-external, since it has existing gateway ports."
            ),
        ));
    }
    let x = n
        .networks
        .iter_mut()
        .find(|x| x.m.id == id)
        .ok_or_else(|| Kind::Network.not_found(id))?;
    if let Some(v) = b.name {
        x.m.name = v;
    }
    if let Some(v) = b.description {
        x.m.description = v;
    }
    if let Some(v) = b.admin_state_up {
        x.admin_state_up = v;
    }
    if let Some(v) = b.shared {
        x.shared = v;
    }
    if let Some(v) = b.external {
        x.external = v;
    }
    if let Some(v) = b.mtu {
        x.mtu = v;
    }
    if let Some(v) = b.port_security_enabled {
        x.port_security_enabled = v;
    }
    if let Some(v) = b.dns_domain {
        x.dns_domain = v;
    }
    if let Some(v) = b.is_default {
        x.is_default = v;
    }
    x.m.touch();
    Ok(())
}

/// 409 `NetworkInUse` while ports other than DHCP ports (or floating IPs) use it; its subnets and DHCP
/// ports go with it.
pub fn delete(n: &mut NeutronState, id: &str) -> SimResult<()> {
    let busy = n
        .ports
        .iter()
        .any(|p| p.network_id == id && p.device_owner != ports::DHCP_OWNER)
        || n.floating_ips.iter().any(|f| f.floating_network_id == id);
    if busy {
        return Err(conflict(
            "NetworkInUse",
            format!(
                "Unable to complete operation on network {id}. There are one or more ports still in use on the network."
            ),
        ));
    }
    n.ports.retain(|p| p.network_id != id);
    n.subnets.retain(|s| s.network_id != id);
    n.networks.retain(|x| x.m.id != id);
    Ok(())
}
