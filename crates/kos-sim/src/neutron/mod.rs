//! Neutron v2.0 subset: networks, subnets (with IPAM), ports, routers (interfaces, gateways, extra routes),
//! security groups and rules, floating IPs, tags, quotas, extensions and availability zones.
//!
//! Strict where real Neutron is strict: unknown attributes are rejected, IP conflicts, quota overruns and
//! in-use deletions answer Neutron's own error types, and floating IPs only associate to ports whose subnet
//! is routed to the external network.

pub mod amphora;
mod api;
mod floating_ips;
mod ipam;
mod misc;
mod networks;
pub mod ovn_health;
mod ports;
mod routers;
mod security_groups;
mod subnets;

use axum::http::StatusCode;
use chrono::Utc;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use crate::app::AuthCtx;
use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::ids;
use crate::routes::Routes;
use crate::service::Service;
use crate::state::Cloud;

pub use floating_ips::FloatingIp;
pub use networks::Network;
pub use ports::{Port, ROUTER_GATEWAY, ROUTER_INTERFACE};
pub use routers::Router;
pub use security_groups::{SecurityGroup, SgRule};
pub use subnets::Subnet;

const SVC: Service = Service::Network;
const PREFIX: &str = "/network/v2.0";

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct NeutronState {
    pub networks: Vec<Network>,
    pub subnets: Vec<Subnet>,
    pub ports: Vec<Port>,
    pub routers: Vec<Router>,
    pub security_groups: Vec<SecurityGroup>,
    pub security_group_rules: Vec<SgRule>,
    pub floating_ips: Vec<FloatingIp>,
    /// The admin/service project owning the seeded external network.
    pub service_project_id: String,
}

/// The standard attributes every Neutron resource carries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
    pub revision_number: u64,
}

impl Meta {
    fn new(project_id: &str, name: &str, description: &str) -> Meta {
        let now = ids::iso(Utc::now());
        Meta {
            id: ids::uuid(),
            project_id: project_id.to_owned(),
            name: name.to_owned(),
            description: description.to_owned(),
            tags: Vec::new(),
            created_at: now.clone(),
            updated_at: now,
            revision_number: 1,
        }
    }

    /// Every change bumps the revision (clients use it for `If-Match` and change detection).
    fn touch(&mut self) {
        self.revision_number += 1;
        self.updated_at = ids::iso(Utc::now());
    }

    /// The standard attributes as a JSON object; each resource adds its own on top.
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "project_id": self.project_id,
            "tenant_id": self.project_id,
            "tags": self.tags,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "revision_number": self.revision_number,
        })
    }
}

/// Merges `extra`'s keys into `base` (both objects): one resource's rendering on top of its standard ones.
fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// The resource collections, as the API names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Network,
    Subnet,
    Port,
    Router,
    SecurityGroup,
    SecurityGroupRule,
    FloatingIp,
}

impl Kind {
    fn singular(self) -> &'static str {
        match self {
            Kind::Network => "network",
            Kind::Subnet => "subnet",
            Kind::Port => "port",
            Kind::Router => "router",
            Kind::SecurityGroup => "security_group",
            Kind::SecurityGroupRule => "security_group_rule",
            Kind::FloatingIp => "floatingip",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::Network => "networks",
            Kind::Subnet => "subnets",
            Kind::Port => "ports",
            Kind::Router => "routers",
            Kind::SecurityGroup => "security_groups",
            Kind::SecurityGroupRule => "security_group_rules",
            Kind::FloatingIp => "floatingips",
        }
    }

    /// URL segment under `/v2.0/`.
    fn segment(self) -> &'static str {
        match self {
            Kind::SecurityGroup => "security-groups",
            Kind::SecurityGroupRule => "security-group-rules",
            other => other.plural(),
        }
    }

    fn not_found(self, id: &str) -> SimError {
        let (kind, msg) = match self {
            Kind::Network => (
                "NetworkNotFound",
                format!("Network {id} could not be found."),
            ),
            Kind::Subnet => ("SubnetNotFound", format!("Subnet {id} could not be found.")),
            Kind::Port => ("PortNotFound", format!("Port {id} could not be found.")),
            Kind::Router => ("RouterNotFound", format!("Router {id} could not be found.")),
            Kind::SecurityGroup => (
                "SecurityGroupNotFound",
                format!("Security group {id} does not exist"),
            ),
            Kind::SecurityGroupRule => (
                "SecurityGroupRuleNotFound",
                format!("Security group rule {id} does not exist"),
            ),
            Kind::FloatingIp => (
                "FloatingIPNotFound",
                format!("Floating IP {id} could not be found"),
            ),
        };
        SimError::new(SVC, StatusCode::NOT_FOUND, kind, msg)
    }

    /// Every attribute name the resource has (what filters and body checks accept).
    fn attributes(self) -> Vec<String> {
        let n = NeutronState::default();
        let v = match self {
            Kind::Network => networks::render(&n, &Network::default(), true),
            Kind::Subnet => subnets::render(&n, &Subnet::default()),
            Kind::Port => ports::render(&Port::default(), true),
            Kind::Router => routers::render(&n, &Router::default(), true),
            Kind::SecurityGroup => security_groups::render(&n, &SecurityGroup::default()),
            Kind::SecurityGroupRule => security_groups::render_rule(&n, &SgRule::default()),
            Kind::FloatingIp => floating_ips::render(&n, &FloatingIp::default()),
        };
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }
}

// ---- errors ----------------------------------------------------------------------------------------

/// A body that fails attribute validation (Neutron's `HTTPBadRequest`).
fn bad(msg: impl Into<String>) -> SimError {
    SimError::new(SVC, StatusCode::BAD_REQUEST, "HTTPBadRequest", msg)
}

fn invalid(msg: impl std::fmt::Display) -> SimError {
    SimError::new(
        SVC,
        StatusCode::BAD_REQUEST,
        "InvalidInput",
        format!("Invalid input for operation: {msg}."),
    )
}

/// Neutron's `BadRequest(resource=..., msg=...)`.
fn bad_request(resource: &str, msg: impl std::fmt::Display) -> SimError {
    SimError::new(
        SVC,
        StatusCode::BAD_REQUEST,
        "BadRequest",
        format!("Bad {resource} request: {msg}."),
    )
}

fn err400(kind: &'static str, msg: impl Into<String>) -> SimError {
    SimError::new(SVC, StatusCode::BAD_REQUEST, kind, msg)
}

fn conflict(kind: &'static str, msg: impl Into<String>) -> SimError {
    SimError::conflict(SVC, kind, msg)
}

fn not_found(kind: &'static str, msg: impl Into<String>) -> SimError {
    SimError::new(SVC, StatusCode::NOT_FOUND, kind, msg)
}

fn forbidden(rule: &str) -> SimError {
    SimError::new(
        SVC,
        StatusCode::FORBIDDEN,
        "PolicyNotAuthorized",
        format!("rule:{rule} is disallowed by policy"),
    )
}

// ---- request bodies --------------------------------------------------------------------------------

fn parse_json(bytes: &[u8]) -> SimResult<Value> {
    if bytes.is_empty() {
        return Err(bad("Resource body required"));
    }
    serde_json::from_slice(bytes).map_err(|_| bad("Malformed request body"))
}

/// `{"<key>": {...}}` → the inner object.
fn inner<'a>(body: &'a Value, key: &str) -> SimResult<&'a Map<String, Value>> {
    body.get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| bad(format!("Unable to find '{key}' in request body")))
}

/// Unknown attributes are rejected ("Unrecognized attribute(s)"), known but not settable ones get
/// Neutron's own message for POST or PUT.
fn check_attrs(
    kind: Kind,
    obj: &Map<String, Value>,
    allowed: &[&str],
    post: bool,
) -> SimResult<()> {
    let known = kind.attributes();
    let unknown: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k) && !known.iter().any(|a| a == k))
        .collect();
    if !unknown.is_empty() {
        return Err(bad(format!(
            "Unrecognized attribute(s) '{}'",
            unknown.join(", ")
        )));
    }
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(if post {
            format!("Attribute '{k}' not allowed in POST")
        } else {
            format!("Cannot update read-only attribute {k}")
        }));
    }
    Ok(())
}

/// The typed view of an attribute object (after [`check_attrs`]).
fn typed<T: DeserializeOwned>(obj: &Map<String, Value>) -> SimResult<T> {
    serde_json::from_value(Value::Object(obj.clone())).map_err(invalid)
}

/// For `Option<Option<T>>` fields: absent → `None`, `null` → `Some(None)`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The project a POST creates for: the caller's, unless an admin names another.
fn owner(ctx: &AuthCtx, obj: &Map<String, Value>, rule: &str) -> SimResult<String> {
    let named: Vec<&str> = ["project_id", "tenant_id"]
        .iter()
        .filter_map(|k| obj.get(*k).and_then(Value::as_str))
        .collect();
    if named.windows(2).any(|w| w[0] != w[1]) {
        return Err(bad("'project_id' and 'tenant_id' do not match"));
    }
    match named.first() {
        Some(p) if *p != ctx.project_id && !ctx.is_admin() => Err(forbidden(rule)),
        Some(p) => Ok((*p).to_owned()),
        None => Ok(ctx.project_id.clone()),
    }
}

fn owns(ctx: &AuthCtx, project_id: &str) -> bool {
    ctx.is_admin() || ctx.project_id == project_id
}

fn valid_tag(tag: &str) -> SimResult<()> {
    if tag.is_empty() || tag.chars().count() > 255 {
        return Err(bad(format!(
            "Invalid input for tags. Reason: '{tag}' is not a valid tag (1 to 255 characters)."
        )));
    }
    if tag.contains(',') {
        return Err(bad(format!(
            "Invalid input for tags. Reason: '{tag}' contains a comma, which is not allowed in a tag."
        )));
    }
    Ok(())
}

// ---- quotas ----------------------------------------------------------------------------------------

/// Neutron's quota resources: (API name, how many the project uses, limit).
fn quota_usage(cloud: &Cloud, project: &str) -> Vec<(&'static str, i64, i64)> {
    let n = &cloud.neutron;
    let q = &cloud.quotas;
    let count = |it: &mut dyn Iterator<Item = &Meta>| -> i64 {
        it.filter(|m| m.project_id == project).count() as i64
    };
    vec![
        (
            "network",
            count(&mut n.networks.iter().map(|x| &x.m)),
            q.networks,
        ),
        (
            "subnet",
            count(&mut n.subnets.iter().map(|x| &x.m)),
            q.subnets,
        ),
        ("port", count(&mut n.ports.iter().map(|x| &x.m)), q.ports),
        (
            "router",
            count(&mut n.routers.iter().map(|x| &x.m)),
            q.routers,
        ),
        (
            "floatingip",
            count(&mut n.floating_ips.iter().map(|x| &x.m)),
            q.floating_ips,
        ),
        (
            "security_group",
            count(&mut n.security_groups.iter().map(|x| &x.m)),
            q.security_groups,
        ),
        (
            "security_group_rule",
            count(&mut n.security_group_rules.iter().map(|x| &x.m)),
            q.security_group_rules,
        ),
    ]
}

/// 409 `OverQuota` when `project` cannot have `more` additional `resource`s (−1 is unlimited).
fn check_quota(cloud: &Cloud, project: &str, resource: &str, more: i64) -> SimResult<()> {
    if project.is_empty() {
        return Ok(());
    }
    let over = quota_usage(cloud, project)
        .into_iter()
        .any(|(r, used, limit)| r == resource && limit >= 0 && used + more > limit);
    if over {
        return Err(conflict(
            "OverQuota",
            format!("Quota exceeded for resources: ['{resource}']."),
        ));
    }
    Ok(())
}

// ---- routes ----------------------------------------------------------------------------------------

pub fn versions() -> Routes {
    misc::versions()
}

pub fn routes() -> Routes {
    api::routes()
}

// ---- seed / clock ----------------------------------------------------------------------------------

/// The external network every devstack has: `public` with `public-subnet` 172.24.4.0/24, owned by the
/// service project (visible to everyone because it is `router:external`).
pub fn seed(cloud: &mut Cloud, cfg: &SimConfig, project_id: &str) {
    seed_external(cloud);
    if cfg.project_network {
        let user_id = cloud
            .keystone
            .users
            .first()
            .map(|u| u.id.clone())
            .unwrap_or_default();
        let ctx = AuthCtx {
            user_id,
            project_id: project_id.to_owned(),
            roles: vec!["member".into()],
        };
        if let Err(e) = seed_project_network(cloud, &ctx) {
            tracing::error!("kos-sim: cannot seed the project network: {}", e.message);
        }
    }
}

/// devstack's project network: `private` with `private-subnet` behind `router1`, whose gateway is on
/// the external network. Made through the same paths as the API, as the project's user.
fn seed_project_network(cloud: &mut Cloud, ctx: &AuthCtx) -> SimResult<()> {
    let obj = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
    let public = cloud
        .neutron
        .networks
        .iter()
        .find(|n| n.external)
        .map(|n| n.m.id.clone())
        .unwrap_or_default();
    let net = networks::create(cloud, ctx, &obj(serde_json::json!({"name": "private"})))?;
    let subnet = subnets::create(
        cloud,
        ctx,
        &obj(serde_json::json!({
            "name": "private-subnet", "network_id": net, "ip_version": 4, "cidr": "10.10.0.0/24"
        })),
    )?;
    let router = routers::create(
        cloud,
        ctx,
        &obj(serde_json::json!({
            "name": "router1", "external_gateway_info": {"network_id": public}
        })),
    )?;
    routers::add_subnet_interface(cloud, ctx, &router, subnet)?;
    Ok(())
}

fn seed_external(cloud: &mut Cloud) {
    let service_project = ids::hex_id();
    let n = &mut cloud.neutron;
    n.service_project_id = service_project.clone();
    let net = Network {
        m: Meta::new(&service_project, "public", ""),
        admin_state_up: true,
        external: true,
        mtu: 1500,
        port_security_enabled: true,
        network_type: "flat".into(),
        physical_network: Some("public".into()),
        is_default: true,
        ..Default::default()
    };
    let mut sub = Subnet {
        m: Meta::new(&service_project, "public-subnet", ""),
        network_id: net.m.id.clone(),
        cidr: "172.24.4.0/24".into(),
        ip_version: 4,
        gateway_ip: Some("172.24.4.1".into()),
        allocation_pools: vec![ipam::Pool {
            start: "172.24.4.2".into(),
            end: "172.24.4.254".into(),
        }],
        enable_dhcp: false,
        ..Default::default()
    };
    sub.m.revision_number = 1;
    n.networks.push(net);
    n.subnets.push(sub);
}

/// Neutron has no timed state machines in this model: ports go ACTIVE when Nova says so.
pub fn advance(cloud: &mut Cloud, _cfg: &SimConfig) {
    floating_ips::agent_report(&mut cloud.neutron, cloud.now);
}

// ---- the cross-service interface -------------------------------------------------------------------

/// What other services need to know about a port.
#[derive(Debug, Clone)]
pub struct PortView {
    pub id: String,
    pub network_id: String,
    pub mac_address: String,
    /// (subnet_id, ip_address)
    pub fixed_ips: Vec<(String, String)>,
    pub security_group_ids: Vec<String>,
    pub status: String,
    pub device_id: String,
    pub device_owner: String,
}

/// A port another service creates (Nova for `networks: [{"uuid": ..}]`, Octavia for a VIP).
#[derive(Debug, Clone, Default)]
pub struct InternalPort {
    pub project_id: String,
    pub network_id: String,
    pub subnet_id: Option<String>,
    pub ip_address: Option<String>,
    pub name: String,
    pub device_owner: String,
    pub device_id: String,
    /// `None`: the project's default security group; `Some(vec![])`: none.
    pub security_groups: Option<Vec<String>>,
}

pub fn port_view(cloud: &Cloud, port_id: &str) -> Option<PortView> {
    let p = cloud.neutron.ports.iter().find(|p| p.m.id == port_id)?;
    Some(PortView {
        id: p.m.id.clone(),
        network_id: p.network_id.clone(),
        mac_address: p.mac_address.clone(),
        fixed_ips: p
            .fixed_ips
            .iter()
            .map(|f| (f.subnet_id.clone(), f.ip_address.clone()))
            .collect(),
        security_group_ids: p.security_groups.clone(),
        status: p.status.clone(),
        device_id: p.device_id.clone(),
        device_owner: p.device_owner.clone(),
    })
}

pub fn network_name(cloud: &Cloud, network_id: &str) -> Option<String> {
    cloud
        .neutron
        .networks
        .iter()
        .find(|n| n.m.id == network_id)
        .map(|n| n.m.name.clone())
}

/// Network id of a subnet.
pub fn subnet_network(cloud: &Cloud, subnet_id: &str) -> Option<String> {
    cloud
        .neutron
        .subnets
        .iter()
        .find(|s| s.m.id == subnet_id)
        .map(|s| s.network_id.clone())
}

/// IPAM, quota and fixed-IP conflict checks as for a POST /v2.0/ports. Errors are Neutron errors.
pub fn create_port_internal(cloud: &mut Cloud, spec: InternalPort) -> SimResult<String> {
    if !cloud
        .neutron
        .networks
        .iter()
        .any(|n| n.m.id == spec.network_id)
    {
        return Err(Kind::Network.not_found(&spec.network_id));
    }
    let fixed_ips = match (spec.subnet_id, spec.ip_address) {
        (None, None) => None,
        (subnet_id, ip_address) => Some(vec![ports::FixedIpReq {
            subnet_id,
            ip_address,
        }]),
    };
    let security_groups = match spec.security_groups {
        None => None,
        Some(names) => Some(
            names
                .iter()
                .map(|s| {
                    security_group_id(cloud, &spec.project_id, s)
                        .ok_or_else(|| Kind::SecurityGroup.not_found(s))
                })
                .collect::<SimResult<Vec<_>>>()?,
        ),
    };
    let req = ports::PortSpec {
        network_id: spec.network_id,
        name: spec.name,
        device_owner: spec.device_owner,
        device_id: spec.device_id,
        fixed_ips,
        security_groups,
        ..Default::default()
    };
    ports::create(cloud, &spec.project_id, req, true)
}

/// Binds a port to a device on a host (status stays DOWN until the device is up). 409 `PortInUse` when
/// another device holds it.
pub fn bind_port(
    cloud: &mut Cloud,
    port_id: &str,
    device_id: &str,
    device_owner: &str,
    host: &str,
) -> SimResult<()> {
    let p = cloud
        .neutron
        .ports
        .iter_mut()
        .find(|p| p.m.id == port_id)
        .ok_or_else(|| Kind::Port.not_found(port_id))?;
    if !p.device_id.is_empty() && p.device_id != device_id {
        return Err(ports::port_in_use(p));
    }
    p.device_id = device_id.to_owned();
    p.device_owner = device_owner.to_owned();
    p.binding_host_id = host.to_owned();
    p.binding_vif_type = "ovs".into();
    p.m.touch();
    Ok(())
}

/// "ACTIVE" once the server runs, "DOWN" otherwise.
pub fn set_port_status(cloud: &mut Cloud, port_id: &str, status: &str) {
    if let Some(p) = cloud.neutron.ports.iter_mut().find(|p| p.m.id == port_id)
        && p.status != status
    {
        p.status = status.to_owned();
        p.m.touch();
    }
}

/// Clears device_id, device_owner and the binding (server deleted, port kept).
pub fn unbind_port(cloud: &mut Cloud, port_id: &str) {
    if let Some(p) = cloud.neutron.ports.iter_mut().find(|p| p.m.id == port_id) {
        p.device_id.clear();
        p.device_owner.clear();
        p.binding_host_id.clear();
        p.binding_vif_type = "unbound".into();
        p.status = "DOWN".into();
        p.m.touch();
    }
}

/// Removes a port and disassociates its floating IPs (server deleted with a port Nova created, LB deleted).
pub fn delete_port_internal(cloud: &mut Cloud, port_id: &str) {
    ports::remove(&mut cloud.neutron, port_id);
}

/// Floating IP addresses associated to a port.
pub fn floating_ips_of_port(cloud: &Cloud, port_id: &str) -> Vec<String> {
    cloud
        .neutron
        .floating_ips
        .iter()
        .filter(|f| f.port_id.as_deref() == Some(port_id))
        .map(|f| f.floating_ip_address.clone())
        .collect()
}

/// Id of a security group of the project, by id or by name (Nova accepts either).
pub fn security_group_id(cloud: &mut Cloud, project_id: &str, name_or_id: &str) -> Option<String> {
    security_groups::ensure_default(&mut cloud.neutron, project_id);
    let sgs = &cloud.neutron.security_groups;
    sgs.iter()
        .find(|s| s.m.id == name_or_id)
        .or_else(|| {
            sgs.iter()
                .find(|s| s.m.project_id == project_id && s.m.name == name_or_id)
        })
        .map(|s| s.m.id.clone())
}

pub fn security_group_name(cloud: &Cloud, id: &str) -> Option<String> {
    cloud
        .neutron
        .security_groups
        .iter()
        .find(|s| s.m.id == id)
        .map(|s| s.m.name.clone())
}
