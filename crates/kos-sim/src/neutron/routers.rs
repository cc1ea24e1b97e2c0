//! Routers: external gateways (with their gateway port), interfaces, and extra routes.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::api::{access, rows};
use super::ipam;
use super::ports::{FixedIp, FixedIpReq, PortSpec, ROUTER_GATEWAY, ROUTER_INTERFACE};
use super::subnets::HostRoute;
use super::*;
use crate::app::SharedApp;

/// Neutron's `max_routes` default.
const MAX_ROUTES: usize = 30;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Gateway {
    pub network_id: String,
    pub enable_snat: bool,
    pub port_id: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Router {
    pub m: Meta,
    pub admin_state_up: bool,
    pub gateway: Option<Gateway>,
    pub routes: Vec<HostRoute>,
    pub availability_zone_hints: Vec<String>,
    pub distributed: bool,
    pub ha: bool,
}

fn gateway_ips(n: &NeutronState, g: &Gateway) -> Vec<FixedIp> {
    n.ports
        .iter()
        .find(|p| p.m.id == g.port_id)
        .map(|p| p.fixed_ips.clone())
        .unwrap_or_default()
}

pub fn render(n: &NeutronState, x: &Router, admin: bool) -> Value {
    let gw = x.gateway.as_ref().map(|g| {
        json!({"network_id": g.network_id, "enable_snat": g.enable_snat, "external_fixed_ips": gateway_ips(n, g)})
    });
    let v = with(
        x.m.json(),
        json!({
            "admin_state_up": x.admin_state_up,
            "status": "ACTIVE",
            "external_gateway_info": gw,
            "routes": x.routes,
            "availability_zone_hints": x.availability_zone_hints,
            "availability_zones": ["nova"],
            "flavor_id": null,
            "service_type_id": null,
            "conntrack_helpers": [],
            "enable_ndp_proxy": false,
        }),
    );
    // `distributed` and `ha` are admin-only in Neutron's default policy.
    if admin {
        with(v, json!({"distributed": x.distributed, "ha": x.ha}))
    } else {
        v
    }
}

/// Interface ports of a router.
fn interfaces<'a>(n: &'a NeutronState, router_id: &'a str) -> impl Iterator<Item = &'a Port> {
    n.ports
        .iter()
        .filter(move |p| p.device_id == router_id && p.device_owner == ROUTER_INTERFACE)
}

/// Subnets the router is attached to (interfaces and gateway): where its routes' next hops may be.
fn connected_subnets(n: &NeutronState, r: &Router) -> Vec<String> {
    let gw = r.gateway.iter().flat_map(|g| gateway_ips(n, g));
    interfaces(n, &r.m.id)
        .flat_map(|p| p.fixed_ips.clone())
        .chain(gw)
        .map(|f| f.subnet_id)
        .collect()
}

/// Whether some router routes `subnet_id` to external network `ext_net` (floating IP reachability).
pub fn router_for(n: &NeutronState, subnet_id: &str, ext_net: &str) -> Option<String> {
    n.routers
        .iter()
        .filter(|r| r.gateway.as_ref().is_some_and(|g| g.network_id == ext_net))
        .find(|r| {
            interfaces(n, &r.m.id).any(|p| p.fixed_ips.iter().any(|f| f.subnet_id == subnet_id))
        })
        .map(|r| r.m.id.clone())
}

// No `tags`: Neutron's tag extension has them `allow_post: False` except on ports (a 400).
const CREATE: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "external_gateway_info",
    "distributed",
    "ha",
    "availability_zone_hints",
    "flavor_id",
    "enable_ndp_proxy",
    "tenant_id",
    "project_id",
];
const UPDATE: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "external_gateway_info",
    "routes",
    "distributed",
    "ha",
    "enable_ndp_proxy",
];

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    name: Option<String>,
    description: Option<String>,
    admin_state_up: Option<bool>,
    #[serde(deserialize_with = "present")]
    external_gateway_info: Option<Option<Map<String, Value>>>,
    routes: Option<Vec<HostRoute>>,
    distributed: Option<bool>,
    ha: Option<bool>,
    availability_zone_hints: Option<Vec<String>>,
    flavor_id: Option<String>,
    enable_ndp_proxy: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayReq {
    network_id: Option<String>,
    enable_snat: Option<bool>,
    external_fixed_ips: Option<Vec<FixedIpReq>>,
    qos_policy_id: Option<String>,
}

impl Body {
    fn authorize(&self, ctx: &AuthCtx, action: &str) -> SimResult<()> {
        let admin_only = [
            ("distributed", self.distributed == Some(true)),
            ("ha", self.ha == Some(true)),
        ];
        match admin_only.iter().find(|(_, set)| *set) {
            Some((attr, _)) if !ctx.is_admin() => {
                Err(forbidden(&format!("{action}_router:{attr}")))
            }
            _ if self.flavor_id.is_some() => Err(not_found(
                "FlavorNotFound",
                "Router flavors are not available on this cloud.",
            )),
            _ => Ok(()),
        }
    }
}

/// Sets, changes or clears (`None` / `{}`) the gateway; a new gateway gets a port on the external network.
fn set_gateway(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    router_id: &str,
    info: Option<&Map<String, Value>>,
) -> SimResult<()> {
    let req: Option<GatewayReq> = match info {
        None => None,
        Some(m) if m.is_empty() => None,
        Some(m) => Some(typed::<GatewayReq>(m).map_err(|e| {
            bad(format!(
                "Invalid input for external_gateway_info. Reason: {}",
                e.message
            ))
        })?),
    };
    if let Some(r) = &req {
        if r.enable_snat.is_some() && !ctx.is_admin() {
            return Err(forbidden("update_router:external_gateway_info:enable_snat"));
        }
        if r.external_fixed_ips.is_some() && !ctx.is_admin() {
            return Err(forbidden(
                "update_router:external_gateway_info:external_fixed_ips",
            ));
        }
        if r.qos_policy_id.is_some() {
            return Err(not_found(
                "QosPolicyNotFound",
                "QoS policies are not available on this cloud.",
            ));
        }
    }
    let n = &cloud.neutron;
    let router = n
        .routers
        .iter()
        .find(|r| r.m.id == router_id)
        .ok_or_else(|| Kind::Router.not_found(router_id))?;
    let current = router.gateway.clone();
    let new_net = match &req {
        Some(r) => Some(r.network_id.clone().ok_or_else(|| bad("Invalid input for external_gateway_info. Reason: Validation of dictionary's keys failed. Expected keys: {'network_id'}"))?),
        None => None,
    };
    // Same network: only SNAT can change.
    if let (Some(cur), Some(net)) = (&current, &new_net)
        && &cur.network_id == net
    {
        let snat = req
            .as_ref()
            .and_then(|r| r.enable_snat)
            .unwrap_or(cur.enable_snat);
        if let Some(r) = cloud
            .neutron
            .routers
            .iter_mut()
            .find(|r| r.m.id == router_id)
            && let Some(g) = r.gateway.as_mut()
        {
            g.enable_snat = snat;
        }
        return Ok(());
    }
    if let Some(cur) = &current
        && n.floating_ips
            .iter()
            .any(|f| f.router_id.as_deref() == Some(router_id))
    {
        return Err(conflict(
            "RouterExternalGatewayInUseByFloatingIp",
            format!(
                "Gateway cannot be updated for router {router_id}, since a gateway to external network {} is required by one or more floating IPs.",
                cur.network_id
            ),
        ));
    }
    let new_gw = match (new_net, req) {
        (Some(net_id), Some(r)) => {
            let net = n
                .networks
                .iter()
                .find(|x| x.m.id == net_id && networks::visible(x, ctx))
                .ok_or_else(|| Kind::Network.not_found(&net_id))?;
            if !net.external {
                return Err(bad_request(
                    "router",
                    format!("Network {net_id} is not an external network"),
                ));
            }
            let spec = PortSpec {
                network_id: net_id.clone(),
                device_id: router_id.to_owned(),
                device_owner: ROUTER_GATEWAY.into(),
                fixed_ips: r.external_fixed_ips,
                port_security_enabled: Some(false),
                security_groups: Some(Vec::new()),
                ..Default::default()
            };
            // Gateway ports belong to no project (and count against no quota).
            let port_id = ports::create(cloud, "", spec, false)?;
            Some(Gateway {
                network_id: net_id,
                enable_snat: r.enable_snat.unwrap_or(true),
                port_id,
            })
        }
        _ => None,
    };
    if let Some(cur) = &current {
        ports::remove(&mut cloud.neutron, &cur.port_id);
    }
    if let Some(r) = cloud
        .neutron
        .routers
        .iter_mut()
        .find(|r| r.m.id == router_id)
    {
        r.gateway = new_gw;
    }
    Ok(())
}

pub fn create(cloud: &mut Cloud, ctx: &AuthCtx, obj: &Map<String, Value>) -> SimResult<String> {
    check_attrs(Kind::Router, obj, CREATE, true)?;
    let b: Body = typed(obj)?;
    b.authorize(ctx, "create")?;
    let project = owner(ctx, obj, "create_router")?;
    check_quota(cloud, &project, "router", 1)?;
    let r = Router {
        m: Meta::new(
            &project,
            b.name.as_deref().unwrap_or(""),
            b.description.as_deref().unwrap_or(""),
        ),
        admin_state_up: b.admin_state_up.unwrap_or(true),
        gateway: None,
        routes: Vec::new(),
        availability_zone_hints: b.availability_zone_hints.unwrap_or_default(),
        distributed: b.distributed.unwrap_or(false),
        ha: b.ha.unwrap_or(false),
    };
    let id = r.m.id.clone();
    let saved = cloud.neutron.clone();
    cloud.neutron.routers.push(r);
    if let Some(Some(info)) = &b.external_gateway_info
        && let Err(e) = set_gateway(cloud, ctx, &id, Some(info))
    {
        cloud.neutron = saved;
        return Err(e);
    }
    Ok(id)
}

/// Extra routes: valid destinations and next hops on a subnet the router is attached to.
fn check_routes(n: &NeutronState, r: &Router, routes: &[HostRoute]) -> SimResult<()> {
    if routes.len() > MAX_ROUTES {
        return Err(err400(
            "RoutesExhausted",
            format!(
                "Unable to complete operation for {}. The number of routes exceeds the maximum {MAX_ROUTES}.",
                r.m.id
            ),
        ));
    }
    let connected = connected_subnets(n, r);
    let own_ips: Vec<String> = interfaces(n, &r.m.id)
        .flat_map(|p| p.fixed_ips.iter().map(|f| f.ip_address.clone()))
        .collect();
    for route in routes {
        let invalid_routes = |reason: &str| {
            err400(
                "InvalidRoutes",
                format!(
                    "Invalid format for routes: [{{'destination': '{}', 'nexthop': '{}'}}], {reason}",
                    route.destination, route.nexthop
                ),
            )
        };
        if ipam::net_of(&route.destination).is_none() || ipam::parse_ip(&route.nexthop).is_none() {
            return Err(invalid_routes("the route is not valid"));
        }
        if own_ips.contains(&route.nexthop) {
            return Err(invalid_routes("the nexthop is used by router"));
        }
        let reachable = n
            .subnets
            .iter()
            .any(|s| connected.contains(&s.m.id) && ipam::contains(&s.cidr, &route.nexthop));
        if !reachable {
            return Err(invalid_routes("the nexthop is not connected with router"));
        }
    }
    Ok(())
}

pub fn update(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    id: &str,
    obj: &Map<String, Value>,
) -> SimResult<()> {
    check_attrs(Kind::Router, obj, UPDATE, false)?;
    let b: Body = typed(obj)?;
    b.authorize(ctx, "update")?;
    if let Some(info) = &b.external_gateway_info {
        set_gateway(cloud, ctx, id, info.as_ref())?;
    }
    let n = &cloud.neutron;
    let r = n
        .routers
        .iter()
        .find(|r| r.m.id == id)
        .ok_or_else(|| Kind::Router.not_found(id))?;
    if let Some(routes) = &b.routes {
        check_routes(n, r, routes)?;
    }
    let r = cloud
        .neutron
        .routers
        .iter_mut()
        .find(|r| r.m.id == id)
        .ok_or_else(|| Kind::Router.not_found(id))?;
    if let Some(v) = b.name {
        r.m.name = v;
    }
    if let Some(v) = b.description {
        r.m.description = v;
    }
    if let Some(v) = b.admin_state_up {
        r.admin_state_up = v;
    }
    if let Some(v) = b.routes {
        r.routes = dedup(v);
    }
    if let Some(v) = b.distributed {
        r.distributed = v;
    }
    if let Some(v) = b.ha {
        r.ha = v;
    }
    r.m.touch();
    Ok(())
}

fn dedup(routes: Vec<HostRoute>) -> Vec<HostRoute> {
    let mut out: Vec<HostRoute> = Vec::new();
    for r in routes {
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// 409 `RouterInUse` while interfaces are attached; the gateway port goes with the router.
pub fn delete(n: &mut NeutronState, id: &str) -> SimResult<()> {
    if interfaces(n, id).next().is_some() {
        return Err(conflict(
            "RouterInUse",
            format!("Router {id} still has ports"),
        ));
    }
    let gw = n
        .routers
        .iter()
        .find(|r| r.m.id == id)
        .and_then(|r| r.gateway.clone());
    if let Some(g) = gw {
        ports::remove(n, &g.port_id);
    }
    n.routers.retain(|r| r.m.id != id);
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InterfaceReq {
    subnet_id: Option<String>,
    port_id: Option<String>,
}

fn interface_req(body: &[u8]) -> SimResult<InterfaceReq> {
    let v = parse_json(body)?;
    serde_json::from_value(v)
        .map_err(|e| bad_request("router", format!("Invalid router interface request: {e}")))
}

fn interface_info(
    router: &Router,
    port_id: &str,
    subnet_ids: Vec<String>,
    network_id: &str,
) -> Value {
    // Neutron's `_make_router_interface_info`: no `tenant_id` and no `tags`, whatever the API
    // reference's sample shows (checked against Neutron 29).
    json!({
        "id": router.m.id,
        "project_id": router.m.project_id,
        "port_id": port_id,
        "network_id": network_id,
        "subnet_id": subnet_ids.first(),
        "subnet_ids": subnet_ids,
    })
}

/// Neutron's `_check_for_dup_router_subnets`: one interface per subnet, and no overlapping CIDRs.
fn check_overlap(n: &NeutronState, router_id: &str, subnet: &Subnet) -> SimResult<()> {
    let attached: Vec<&Subnet> = interfaces(n, router_id)
        .flat_map(|p| p.fixed_ips.iter())
        .filter_map(|f| n.subnets.iter().find(|s| s.m.id == f.subnet_id))
        .collect();
    let Some(new_net) = ipam::net_of(&subnet.cidr) else {
        return Ok(());
    };
    for s in attached {
        if s.m.id == subnet.m.id {
            return Err(bad_request(
                "router",
                format!("Router already has a port on subnet {}", s.m.id),
            ));
        }
        if ipam::net_of(&s.cidr).is_some_and(|o| o.contains(&new_net) || new_net.contains(&o)) {
            return Err(bad_request(
                "router",
                format!(
                    "Cidr {} of subnet {} overlaps with cidr {} of subnet {}",
                    subnet.cidr, subnet.m.id, s.cidr, s.m.id
                ),
            ));
        }
    }
    Ok(())
}

pub async fn add_interface(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let req = interface_req(&body)?;
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    access(
        &mut cloud.neutron,
        Kind::Router,
        &ctx,
        &id,
        "add_router_interface",
    )?;
    let port_id = match (req.subnet_id, req.port_id) {
        (Some(_), Some(_)) => {
            return Err(bad_request(
                "router",
                "Cannot specify both subnet-id and port-id",
            ));
        }
        (None, None) => {
            return Err(bad_request(
                "router",
                "Either subnet_id or port_id must be specified",
            ));
        }
        (Some(subnet_id), None) => add_subnet_interface(cloud, &ctx, &id, subnet_id)?,
        (None, Some(port_id)) => {
            let n = &cloud.neutron;
            let p = n
                .ports
                .iter()
                .find(|p| p.m.id == port_id && owns(&ctx, &p.m.project_id))
                .ok_or_else(|| Kind::Port.not_found(&port_id))?;
            if !p.device_id.is_empty() {
                return Err(ports::port_in_use(p));
            }
            if p.fixed_ips.is_empty() {
                return Err(bad_request(
                    "router",
                    "Router port must have at least one fixed IP",
                ));
            }
            for f in &p.fixed_ips {
                if let Some(s) = n.subnets.iter().find(|s| s.m.id == f.subnet_id) {
                    check_overlap(n, &id, s)?;
                }
            }
            let p = cloud
                .neutron
                .ports
                .iter_mut()
                .find(|p| p.m.id == port_id)
                .ok_or_else(|| Kind::Port.not_found(&port_id))?;
            p.device_id = id.clone();
            p.device_owner = ROUTER_INTERFACE.into();
            p.status = "ACTIVE".into();
            p.m.touch();
            port_id
        }
    };
    let n = &mut cloud.neutron;
    if let Some(r) = n.routers.iter_mut().find(|r| r.m.id == id) {
        r.m.touch();
    }
    let (router, port) = (
        n.routers
            .iter()
            .find(|r| r.m.id == id)
            .ok_or_else(|| Kind::Router.not_found(&id))?,
        n.ports
            .iter()
            .find(|p| p.m.id == port_id)
            .ok_or_else(|| Kind::Port.not_found(&port_id))?,
    );
    let subnets = port.fixed_ips.iter().map(|f| f.subnet_id.clone()).collect();
    Ok(Json(interface_info(
        router,
        &port_id,
        subnets,
        &port.network_id,
    )))
}

/// Plugs `subnet_id` into router `id` on a new port with the subnet's gateway address.
pub(crate) fn add_subnet_interface(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    id: &str,
    subnet_id: String,
) -> SimResult<String> {
    let n = &cloud.neutron;
    let sub = n
        .subnets
        .iter()
        .find(|s| s.m.id == subnet_id && subnets::visible(n, s, ctx))
        .ok_or_else(|| Kind::Subnet.not_found(&subnet_id))?;
    let gw = sub.gateway_ip.clone().ok_or_else(|| {
        bad_request(
            "router",
            "Subnet for router interface must have a gateway IP",
        )
    })?;
    check_overlap(n, id, sub)?;
    let project = n
        .routers
        .iter()
        .find(|r| r.m.id == id)
        .map(|r| r.m.project_id.clone())
        .unwrap_or_default();
    let spec = PortSpec {
        network_id: sub.network_id.clone(),
        device_id: id.to_owned(),
        device_owner: ROUTER_INTERFACE.into(),
        fixed_ips: Some(vec![FixedIpReq {
            subnet_id: Some(subnet_id),
            ip_address: Some(gw),
        }]),
        port_security_enabled: Some(false),
        security_groups: Some(Vec::new()),
        ..Default::default()
    };
    ports::create(cloud, &project, spec, true)
}

pub async fn remove_interface(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let req = interface_req(&body)?;
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    access(
        &mut cloud.neutron,
        Kind::Router,
        &ctx,
        &id,
        "remove_router_interface",
    )?;
    let n = &cloud.neutron;
    let router = n
        .routers
        .iter()
        .find(|r| r.m.id == id)
        .ok_or_else(|| Kind::Router.not_found(&id))?;
    let (port, subnet_ids) = match (&req.port_id, &req.subnet_id) {
        (Some(pid), _) => {
            let p = interfaces(n, &id).find(|p| &p.m.id == pid).ok_or_else(|| {
                not_found(
                    "RouterInterfaceNotFound",
                    format!("Router {id} does not have an interface with id {pid}"),
                )
            })?;
            (
                p,
                p.fixed_ips
                    .iter()
                    .map(|f| f.subnet_id.clone())
                    .collect::<Vec<_>>(),
            )
        }
        (None, Some(sid)) => {
            n.subnets
                .iter()
                .find(|s| &s.m.id == sid)
                .ok_or_else(|| Kind::Subnet.not_found(sid))?;
            let p = interfaces(n, &id)
                .find(|p| p.fixed_ips.iter().any(|f| &f.subnet_id == sid))
                .ok_or_else(|| {
                    not_found(
                        "RouterInterfaceNotFoundForSubnet",
                        format!("Router {id} has no interface on subnet {sid}"),
                    )
                })?;
            (p, vec![sid.clone()])
        }
        (None, None) => {
            return Err(bad_request(
                "router",
                "Either subnet_id or port_id must be specified",
            ));
        }
    };
    for sid in &subnet_ids {
        let cidr = n
            .subnets
            .iter()
            .find(|s| &s.m.id == sid)
            .map(|s| s.cidr.clone())
            .unwrap_or_default();
        let fip_needs = n
            .floating_ips
            .iter()
            .filter(|f| f.router_id.as_deref() == Some(id.as_str()))
            .any(|f| {
                n.ports.iter().any(|p| {
                    Some(&p.m.id) == f.port_id.as_ref()
                        && p.fixed_ips.iter().any(|x| &x.subnet_id == sid)
                })
            });
        if fip_needs {
            return Err(conflict(
                "RouterInterfaceInUseByFloatingIP",
                format!(
                    "Router interface for subnet {sid} on router {id} cannot be deleted, as it is required by one or more floating IPs."
                ),
            ));
        }
        if router
            .routes
            .iter()
            .any(|r| ipam::contains(&cidr, &r.nexthop))
        {
            return Err(conflict(
                "RouterInterfaceInUseByRoute",
                format!(
                    "Router interface for subnet {sid} on router {id} cannot be deleted, as it is required by one or more routes."
                ),
            ));
        }
    }
    let info = interface_info(router, &port.m.id, subnet_ids.clone(), &port.network_id);
    let port_id = port.m.id.clone();
    let keeps_other_subnets = port
        .fixed_ips
        .iter()
        .any(|f| !subnet_ids.contains(&f.subnet_id));
    let n = &mut cloud.neutron;
    if keeps_other_subnets {
        if let Some(p) = n.ports.iter_mut().find(|p| p.m.id == port_id) {
            p.fixed_ips.retain(|f| !subnet_ids.contains(&f.subnet_id));
            p.m.touch();
        }
    } else {
        ports::remove(n, &port_id);
    }
    if let Some(r) = n.routers.iter_mut().find(|r| r.m.id == id) {
        r.m.touch();
    }
    Ok(Json(info))
}

/// `{"router": {"routes": [...]}}` for add_extraroutes / remove_extraroutes.
fn routes_body(body: &[u8]) -> SimResult<Vec<HostRoute>> {
    let v = parse_json(body)?;
    let obj = inner(&v, "router")?;
    check_attrs(Kind::Router, obj, &["routes"], false)?;
    let routes = obj
        .get("routes")
        .cloned()
        .ok_or_else(|| bad("Invalid input for routes. Reason: routes is required."))?;
    serde_json::from_value(routes)
        .map_err(|e| bad(format!("Invalid input for routes. Reason: {e}")))
}

async fn edit_routes(
    app: SharedApp,
    ctx: AuthCtx,
    id: String,
    body: Bytes,
    add: bool,
) -> SimResult<Json<Value>> {
    let delta = routes_body(&body)?;
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    access(&mut cloud.neutron, Kind::Router, &ctx, &id, "update")?;
    let n = &cloud.neutron;
    let r = n
        .routers
        .iter()
        .find(|r| r.m.id == id)
        .ok_or_else(|| Kind::Router.not_found(&id))?;
    let routes: Vec<HostRoute> = if add {
        dedup(r.routes.iter().cloned().chain(delta).collect())
    } else {
        r.routes
            .iter()
            .filter(|x| !delta.contains(x))
            .cloned()
            .collect()
    };
    if add {
        check_routes(n, r, &routes)?;
    }
    let r = cloud
        .neutron
        .routers
        .iter_mut()
        .find(|r| r.m.id == id)
        .ok_or_else(|| Kind::Router.not_found(&id))?;
    r.routes = routes;
    r.m.touch();
    let v = rows(&cloud.neutron, Kind::Router, &ctx, Some(&id))
        .into_iter()
        .next()
        .ok_or_else(|| Kind::Router.not_found(&id))?;
    Ok(Json(json!({ "router": v })))
}

pub async fn add_extraroutes(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    edit_routes(app, ctx, id, body, true).await
}

pub async fn remove_extraroutes(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    edit_routes(app, ctx, id, body, false).await
}
