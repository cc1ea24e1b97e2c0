//! Octavia v2 subset: load balancers (with fully-populated create), listeners, pools, members (with batch
//! update), health monitors, status trees, providers, flavors, availability zones and quotas.
//!
//! The provisioning state machine is what clients trip on, so it is modelled exactly: every mutation locks
//! the owning load balancer (`PENDING_*`), a load balancer that is not `ACTIVE` refuses every mutation with
//! 409, and [`advance`] settles it after the configured latency.

mod children;
mod lb;
mod misc;

pub use lb::fail_over;

use axum::http::StatusCode;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::app::{AuthCtx, SharedApp};
use crate::clock::SimTime;
use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::paging::{MAX_LIMIT, next_links, paginate_at_most};
use crate::query::QueryParams;
use crate::routes::{Routes, Sample};
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::LoadBalancer;

/// A fast, unkeyed hash for the indexes a call builds over every member of the cloud (half a
/// million at 1000 pools of 500): with std's SipHash, hashing the members' pool and load-balancer
/// ids was 45% of `kos bench ccm`'s CPU at 1000 Services / 500 nodes (perf, 2026-11-30). The keys
/// are the simulator's own ids, never chosen to collide. (FxHash's mixing step.)
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

pub const ACTIVE: &str = "ACTIVE";
pub const ERROR: &str = "ERROR";
pub const PENDING_CREATE: &str = "PENDING_CREATE";
pub const PENDING_UPDATE: &str = "PENDING_UPDATE";
pub const PENDING_DELETE: &str = "PENDING_DELETE";

/// Fields every Octavia resource has.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Base {
    pub id: String,
    pub name: String,
    pub description: String,
    pub project_id: String,
    pub admin_state_up: bool,
    pub provisioning_status: String,
    pub created_at: String,
    pub updated_at: Option<String>,
    pub tags: Vec<String>,
}

impl Base {
    fn new(project_id: &str) -> Base {
        Base {
            id: crate::ids::uuid(),
            name: String::new(),
            description: String::new(),
            project_id: project_id.to_owned(),
            admin_state_up: true,
            provisioning_status: PENDING_CREATE.into(),
            created_at: timestamp(),
            updated_at: None,
            tags: Vec::new(),
        }
    }

    /// The common keys; `described` for the resources whose API has a description.
    fn render(&self, operating_status: &str, described: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("name".into(), json!(self.name));
        if described {
            m.insert("description".into(), json!(self.description));
        }
        m.insert("project_id".into(), json!(self.project_id));
        // Deprecated, but Octavia 19 still sends it on every object (checked against a real one).
        m.insert("tenant_id".into(), json!(self.project_id));
        m.insert("admin_state_up".into(), json!(self.admin_state_up));
        m.insert(
            "provisioning_status".into(),
            json!(self.provisioning_status),
        );
        m.insert("operating_status".into(), json!(operating_status));
        m.insert("created_at".into(), json!(self.created_at));
        m.insert("updated_at".into(), json!(self.updated_at));
        m.insert("tags".into(), json!(self.tags));
        m
    }

    /// name, description, admin_state_up and tags from a create or update body.
    fn apply(&mut self, i: &Input) -> SimResult<()> {
        if let Some(v) = i.str("name")? {
            self.name = v;
        }
        if let Some(v) = i.str("description")? {
            self.description = v;
        }
        if let Some(v) = i.bool("admin_state_up")? {
            self.admin_state_up = v;
        }
        if let Some(v) = i.strs("tags")? {
            self.tags = v;
        }
        Ok(())
    }

    fn touch(&mut self, status: &str) {
        self.provisioning_status = status.into();
        self.updated_at = Some(timestamp());
    }

    /// Octavia's operating status as seen through the provisioning state: nothing is serving until it
    /// has been created, and an administratively down object is OFFLINE.
    fn operating(&self, serving: &'static str) -> &'static str {
        match self.provisioning_status.as_str() {
            _ if !self.admin_state_up => "OFFLINE",
            PENDING_CREATE => "OFFLINE",
            ERROR => "ERROR",
            _ => serving,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadBalancer {
    pub base: Base,
    pub vip_address: String,
    pub vip_subnet_id: Option<String>,
    pub vip_network_id: String,
    pub vip_port_id: String,
    /// Octavia created the VIP port (and deletes it with the LB); a user-supplied vip_port_id is kept.
    pub vip_port_owned: bool,
    pub vip_qos_policy_id: Option<String>,
    /// The amphora's port and the VIP's security group (provider `amphora` only).
    #[serde(default)]
    pub amphora: Option<crate::neutron::amphora::AmphoraPlumbing>,
    pub provider: String,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
    /// When the current PENDING_* state began ([`advance`] adds the configured latency).
    pub since: SimTime,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listener {
    pub base: Base,
    pub loadbalancer_id: String,
    pub protocol: String,
    pub protocol_port: i64,
    pub default_pool_id: Option<String>,
    pub connection_limit: i64,
    pub allowed_cidrs: Vec<String>,
    pub insert_headers: Map<String, Value>,
    pub default_tls_container_ref: Option<String>,
    pub sni_container_refs: Vec<String>,
    pub timeouts: [i64; 4],
    /// Attributes the simulator stores and echoes without giving them meaning (TLS options, HSTS …).
    pub echo: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pool {
    pub base: Base,
    pub loadbalancer_id: String,
    pub protocol: String,
    pub lb_algorithm: String,
    pub session_persistence: Option<Value>,
    pub tls_enabled: bool,
    pub echo: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Member {
    pub base: Base,
    pub loadbalancer_id: String,
    pub pool_id: String,
    pub address: String,
    pub protocol_port: i64,
    pub subnet_id: Option<String>,
    pub weight: i64,
    pub backup: bool,
    pub monitor_address: Option<String>,
    pub monitor_port: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Monitor {
    pub base: Base,
    pub loadbalancer_id: String,
    pub pool_id: String,
    pub kind: String,
    pub delay: i64,
    pub timeout: i64,
    pub max_retries: i64,
    pub max_retries_down: i64,
    pub http_method: Option<String>,
    pub url_path: Option<String>,
    pub expected_codes: Option<String>,
    pub echo: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub description: String,
    pub flavor_profile_id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct OctaviaState {
    pub loadbalancers: Vec<LoadBalancer>,
    pub listeners: Vec<Listener>,
    pub pools: Vec<Pool>,
    pub members: Vec<Member>,
    pub monitors: Vec<Monitor>,
    pub flavors: Vec<Flavor>,
}

/// What the state machine needs of every child of a load balancer.
trait Child {
    fn base(&self) -> &Base;
    fn base_mut(&mut self) -> &mut Base;
    fn lb_id(&self) -> &str;
}

macro_rules! child {
    ($($t:ty),*) => {$(
        impl Child for $t {
            fn base(&self) -> &Base { &self.base }
            fn base_mut(&mut self) -> &mut Base { &mut self.base }
            fn lb_id(&self) -> &str { &self.loadbalancer_id }
        }
    )*};
}
child!(Listener, Pool, Member, Monitor);

/// The children of `lb_id` leave their PENDING_* state: deleted ones disappear, the rest become ACTIVE.
/// The children of the load balancers `lb_ids` once their change is through: one pass over the
/// list whatever the number of load balancers settling at once.
fn settle<T: Child>(items: &mut Vec<T>, lb_ids: &std::collections::HashSet<&str, IdHash>) {
    items.retain(|c| !lb_ids.contains(c.lb_id()) || c.base().provisioning_status != PENDING_DELETE);
    for c in items.iter_mut().filter(|c| lb_ids.contains(c.lb_id())) {
        if c.base().provisioning_status.starts_with("PENDING_") {
            c.base_mut().provisioning_status = ACTIVE.into();
        }
    }
}

fn mark_children<T: Child>(items: &mut [T], lb_id: &str, status: &str) {
    for c in items.iter_mut().filter(|c| c.lb_id() == lb_id) {
        c.base_mut().touch(status);
    }
}

impl OctaviaState {
    pub fn lb(&self, id: &str) -> SimResult<&LoadBalancer> {
        self.loadbalancers
            .iter()
            .find(|l| l.base.id == id)
            .ok_or_else(|| not_found("Load Balancer", id))
    }
    fn lb_mut(&mut self, id: &str) -> SimResult<&mut LoadBalancer> {
        self.loadbalancers
            .iter_mut()
            .find(|l| l.base.id == id)
            .ok_or_else(|| not_found("Load Balancer", id))
    }
    fn listener(&self, id: &str) -> SimResult<&Listener> {
        self.listeners
            .iter()
            .find(|l| l.base.id == id)
            .ok_or_else(|| not_found("Listener", id))
    }
    fn pool(&self, id: &str) -> SimResult<&Pool> {
        self.pools
            .iter()
            .find(|l| l.base.id == id)
            .ok_or_else(|| not_found("Pool", id))
    }
    fn member(&self, pool_id: &str, id: &str) -> SimResult<&Member> {
        self.members
            .iter()
            .find(|m| m.base.id == id && m.pool_id == pool_id)
            .ok_or_else(|| not_found("Member", id))
    }
    fn monitor(&self, id: &str) -> SimResult<&Monitor> {
        self.monitors
            .iter()
            .find(|l| l.base.id == id)
            .ok_or_else(|| not_found("Health Monitor", id))
    }
    fn pool_monitor(&self, pool_id: &str) -> Option<&Monitor> {
        self.monitors.iter().find(|m| m.pool_id == pool_id)
    }

    /// The shared lock of every mutation: the LB must be ACTIVE (anything else is immutable), and then is
    /// PENDING_UPDATE until [`advance`] settles it. Call after all validation, right before changing state.
    fn lock_lb(&mut self, lb_id: &str, now: SimTime) -> SimResult<()> {
        let lb = self.lb_mut(lb_id)?;
        if lb.base.provisioning_status != ACTIVE {
            return Err(immutable(lb_id));
        }
        lb.base.touch(PENDING_UPDATE);
        lb.since = now;
        Ok(())
    }

    /// The LB must be mutable, without locking it (for checks before a validation that may still fail).
    fn ensure_mutable(&self, lb_id: &str) -> SimResult<()> {
        if self.lb(lb_id)?.base.provisioning_status != ACTIVE {
            return Err(immutable(lb_id));
        }
        Ok(())
    }

    fn has_children(&self, lb_id: &str) -> bool {
        self.listeners.iter().any(|c| c.loadbalancer_id == lb_id)
            || self.pools.iter().any(|c| c.loadbalancer_id == lb_id)
    }

    fn remove_lb(&mut self, lb_id: &str) -> Option<LoadBalancer> {
        let pos = self.loadbalancers.iter().position(|l| l.base.id == lb_id)?;
        self.listeners.retain(|c| c.loadbalancer_id != lb_id);
        self.pools.retain(|c| c.loadbalancer_id != lb_id);
        self.members.retain(|c| c.loadbalancer_id != lb_id);
        self.monitors.retain(|c| c.loadbalancer_id != lb_id);
        Some(self.loadbalancers.remove(pos))
    }

    fn mark_all_children(&mut self, lb_id: &str, status: &str) {
        mark_children(&mut self.listeners, lb_id, status);
        mark_children(&mut self.pools, lb_id, status);
        mark_children(&mut self.members, lb_id, status);
        mark_children(&mut self.monitors, lb_id, status);
    }
}

pub fn seed(cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {
    cloud.octavia.flavors.push(Flavor {
        id: crate::ids::uuid(),
        name: "small".into(),
        description: "A standalone amphora load balancer.".into(),
        flavor_profile_id: crate::ids::uuid(),
    });
}

/// Settles every load balancer whose PENDING_* latency has elapsed (and its children with it).
pub fn advance(cloud: &mut Cloud, cfg: &SimConfig) {
    let now = cloud.now;
    let lat = &cfg.latency;
    let due: Vec<(String, bool)> = cloud
        .octavia
        .loadbalancers
        .iter()
        .filter_map(|lb| {
            let wait = match lb.base.provisioning_status.as_str() {
                PENDING_CREATE => lat.lb_create_secs,
                PENDING_UPDATE => lat.lb_update_secs,
                PENDING_DELETE => lat.lb_delete_secs,
                _ => return None,
            };
            now.reached(lb.since.after(wait)).then(|| {
                (
                    lb.base.id.clone(),
                    lb.base.provisioning_status == PENDING_DELETE,
                )
            })
        })
        .collect();
    let settled = !due.is_empty();
    let mut done: Vec<String> = Vec::new();
    for (id, deleting) in due {
        if !deleting {
            done.push(id);
        } else if let Some(lb) = cloud.octavia.remove_lb(&id) {
            if let Some(amphora) = &lb.amphora {
                crate::neutron::amphora::unplug(cloud, amphora);
            }
            if lb.vip_port_owned {
                crate::neutron::delete_port_internal(cloud, &lb.vip_port_id);
            }
        }
    }
    if !done.is_empty() {
        let st = &mut cloud.octavia;
        let ids: std::collections::HashSet<&str, IdHash> =
            done.iter().map(String::as_str).collect();
        settle(&mut st.listeners, &ids);
        settle(&mut st.pools, &ids);
        settle(&mut st.members, &ids);
        settle(&mut st.monitors, &ids);
        for lb in st
            .loadbalancers
            .iter_mut()
            .filter(|l| ids.contains(l.base.id.as_str()))
        {
            // Octavia's worker marks it ACTIVE with a row update: `updated_at` moves again.
            lb.base.touch(ACTIVE);
        }
    }
    if settled {
        // What the OVN provider's worker does once a change is through: health-check ports follow the
        // monitors.
        crate::neutron::ovn_health::sync(cloud);
    }
}

/// Puts a load balancer in ERROR (fault campaigns: a failed amphora). Only DELETE works on it then.
pub fn force_lb_error(cloud: &mut Cloud, lb_id: &str) -> bool {
    match cloud.octavia.lb_mut(lb_id) {
        Ok(lb) => {
            lb.base.touch(ERROR);
            true
        }
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------------------------------------
// Routes

pub fn versions() -> Routes {
    use Sample::*;
    let doc = File("load-balancer/examples/versions-get-resp.json");
    // Clients discover at the catalog URL and at the version URL: both answer with the versions list.
    Routes::new(SVC)
        .get("/load-balancer", misc::versions, doc)
        .get("/load-balancer/", misc::versions, doc)
}

/// The version URLs: behind keystonemiddleware, as in Octavia (a 401 without a token, where the
/// root answers anyone).
pub fn version_docs() -> Routes {
    use Sample::*;
    let doc = File("load-balancer/examples/versions-get-resp.json");
    Routes::new(SVC)
        .get("/load-balancer/v2", misc::versions, doc)
        .get("/load-balancer/v2/", misc::versions, doc)
        .get("/load-balancer/v2.0/", misc::versions, doc)
}

/// Registers each endpoint under both `/v2/lbaas` and `/v2.0/lbaas`, as Octavia serves both.
macro_rules! lbaas {
    ($r:expr; $($m:ident $p:literal => $h:expr, $s:expr;)*) => {{
        let r = $r;
        $(let r = r
            .$m(concat!("/load-balancer/v2/lbaas", $p), $h, $s)
            .$m(concat!("/load-balancer/v2.0/lbaas", $p), $h, $s);)*
        r
    }};
}

pub fn routes() -> Routes {
    use Sample::*;
    use children as c;
    macro_rules! ex {
        ($f:literal) => {
            File(concat!("load-balancer/v2/examples/", $f))
        };
    }
    lbaas!(Routes::new(SVC);
        get "/loadbalancers" => lb::list, ex!("loadbalancers-list-response.json");
        post "/loadbalancers" => lb::create, ex!("loadbalancer-create-response.json");
        get "/loadbalancers/{id}" => lb::show, ex!("loadbalancer-show-response.json");
        put "/loadbalancers/{id}" => lb::update, ex!("loadbalancer-update-response.json");
        delete "/loadbalancers/{id}" => lb::delete, NoBody("204");
        get "/loadbalancers/{id}/status" => lb::status, ex!("loadbalancer-status-response.json");
        get "/loadbalancers/{id}/stats" => lb::stats, ex!("loadbalancer-stats-response.json");
        put "/loadbalancers/{id}/failover" => lb::failover, NoBody("202, no body");
        get "/listeners" => c::list_listeners, ex!("listeners-list-response.json");
        post "/listeners" => c::create_listener, ex!("listener-create-response.json");
        get "/listeners/{id}" => c::show_listener, ex!("listener-show-response.json");
        put "/listeners/{id}" => c::update_listener, ex!("listener-update-response.json");
        delete "/listeners/{id}" => c::delete_listener, NoBody("204");
        get "/listeners/{id}/stats" => c::listener_stats, ex!("listener-stats-response.json");
        get "/pools" => c::list_pools, ex!("pools-list-response.json");
        post "/pools" => c::create_pool, ex!("pool-create-response.json");
        get "/pools/{id}" => c::show_pool, ex!("pool-show-response.json");
        put "/pools/{id}" => c::update_pool, ex!("pool-update-response.json");
        delete "/pools/{id}" => c::delete_pool, NoBody("204");
        get "/pools/{id}/members" => c::list_members, ex!("members-list-response.json");
        post "/pools/{id}/members" => c::create_member, ex!("member-create-response.json");
        put "/pools/{id}/members" => c::batch_members, NoBody("202, empty body");
        get "/pools/{id}/members/{member}" => c::show_member, ex!("member-show-response.json");
        put "/pools/{id}/members/{member}" => c::update_member, ex!("member-update-response.json");
        delete "/pools/{id}/members/{member}" => c::delete_member, NoBody("204");
        get "/healthmonitors" => c::list_monitors, ex!("healthmonitors-list-response.json");
        post "/healthmonitors" => c::create_monitor, ex!("healthmonitor-create-response.json");
        get "/healthmonitors/{id}" => c::show_monitor, ex!("healthmonitor-show-response.json");
        put "/healthmonitors/{id}" => c::update_monitor, ex!("healthmonitor-update-response.json");
        delete "/healthmonitors/{id}" => c::delete_monitor, NoBody("204");
        get "/providers" => misc::providers, ex!("provider-list-response.json");
        get "/flavors" => misc::flavors, ex!("flavors-list-response.json");
        get "/flavors/{id}" => misc::flavor, ex!("flavor-show-response.json");
        get "/availabilityzones" => misc::availability_zones, ex!("availabilityzone-list-response.json");
        get "/quotas" => misc::quotas, ex!("quotas-list-response.json");
        get "/quotas/defaults" => misc::quota_defaults, ex!("quotas-defaults-response.json");
        get "/quotas/{project_id}" => misc::quota, ex!("quotas-show-response.json");
    )
}

// ---------------------------------------------------------------------------------------------------------
// Shared helpers

/// Octavia's timestamps: seconds, no zone (`2017-02-28T00:41:44`).
fn timestamp() -> String {
    Utc::now().format("%Y-%m-%dT%H:%M:%S").to_string()
}

fn not_found(resource: &str, id: &str) -> SimError {
    SimError::not_found(SVC, format!("{resource} {id} not found."))
}

fn immutable(lb_id: &str) -> SimError {
    SimError::conflict(
        SVC,
        "ImmutableObject",
        format!("Load Balancer {lb_id} is immutable and cannot be updated."),
    )
}

fn bad(msg: impl Into<String>) -> SimError {
    SimError::bad_request(SVC, msg)
}

fn invalid(field: &str, value: &Value, why: &str) -> SimError {
    let shown = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    bad(format!(
        "Invalid input for field/attribute {field}. Value: '{shown}'. {why}"
    ))
}

fn quota_met(resource: &str) -> SimError {
    SimError::forbidden(SVC, format!("Quota has been met for resources: {resource}"))
}

/// `limit` is the quota (−1 unlimited); `used` how many the project has.
fn check_quota(limit: i64, used: usize, adding: usize, resource: &str) -> SimResult<()> {
    if limit >= 0 && used + adding > usize::try_from(limit).unwrap_or(0) {
        return Err(quota_met(resource));
    }
    Ok(())
}

/// Parses a JSON body into Octavia's 400 rather than axum's plain-text rejection.
fn parse_body(bytes: &[u8]) -> SimResult<Value> {
    serde_json::from_slice(bytes).map_err(|e| bad(format!("Invalid JSON body: {e}")))
}

/// One request object (`{"listener": {...}}`). Octavia's wsme types accept numbers and booleans given as
/// strings (`"protocol_port": "443"`), and reject unknown attributes.
struct Input<'a> {
    obj: &'a Map<String, Value>,
}

impl<'a> Input<'a> {
    fn of(body: &'a Value, key: &str, known: &[&str]) -> SimResult<Input<'a>> {
        let obj = body
            .get(key)
            .and_then(Value::as_object)
            .ok_or_else(|| bad(format!("Missing mandatory field/attribute: {key}")))?;
        Input::object(obj, key, known)
    }

    fn object(obj: &'a Map<String, Value>, key: &str, known: &[&str]) -> SimResult<Input<'a>> {
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(invalid(
                key,
                &Value::Object(obj.clone()),
                &format!("Unknown attribute for argument {key}: {k}"),
            ));
        }
        Ok(Input { obj })
    }

    fn raw(&self, k: &str) -> Option<&'a Value> {
        self.obj.get(k).filter(|v| !v.is_null())
    }

    fn has(&self, k: &str) -> bool {
        self.raw(k).is_some()
    }

    fn str(&self, k: &str) -> SimResult<Option<String>> {
        match self.raw(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(invalid(k, v, "Wrong type. Expected '<class 'str'>'")),
        }
    }

    fn required_str(&self, k: &str) -> SimResult<String> {
        self.str(k)?.ok_or_else(|| {
            bad(format!(
                "Invalid input for field/attribute {k}. Value: 'None'. Mandatory field missing."
            ))
        })
    }

    fn int(&self, k: &str, min: i64, max: i64) -> SimResult<Option<i64>> {
        let Some(v) = self.raw(k) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
        .ok_or_else(|| invalid(k, v, "Wrong type. Expected '<class 'int'>'"))?;
        if n < min {
            return Err(invalid(
                k,
                v,
                &format!("Value should be greater or equal to {min}"),
            ));
        }
        if n > max {
            return Err(invalid(
                k,
                v,
                &format!("Value should be lower or equal to {max}"),
            ));
        }
        Ok(Some(n))
    }

    fn bool(&self, k: &str) -> SimResult<Option<bool>> {
        match self.raw(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v @ Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(Some(true)),
                "false" | "0" | "no" | "off" => Ok(Some(false)),
                _ => Err(invalid(k, v, "Wrong type. Expected '<class 'bool'>'")),
            },
            Some(v) => Err(invalid(k, v, "Wrong type. Expected '<class 'bool'>'")),
        }
    }

    fn strs(&self, k: &str) -> SimResult<Option<Vec<String>>> {
        let Some(v) = self.raw(k) else {
            return Ok(None);
        };
        v.as_array()
            .and_then(|a| {
                a.iter()
                    .map(|x| x.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .map(Some)
            .ok_or_else(|| invalid(k, v, "Wrong type. Expected a list of strings"))
    }

    fn one_of(&self, k: &str, allowed: &[&str]) -> SimResult<Option<String>> {
        match self.str(k)? {
            Some(s) if !allowed.contains(&s.as_str()) => Err(invalid(
                k,
                &json!(s),
                &format!("Value should be one of: {}", allowed.join(", ")),
            )),
            other => Ok(other),
        }
    }

    /// Copies the listed echo-only attributes that are present.
    fn echo_into(&self, keys: &[&str], into: &mut Map<String, Value>) {
        for k in keys {
            if let Some(v) = self.obj.get(*k) {
                into.insert((*k).into(), v.clone());
            }
        }
    }
}

/// The caller sees its own project's objects; an admin sees all.
fn visible(ctx: &AuthCtx, project_id: &str) -> bool {
    ctx.is_admin() || ctx.project_id == project_id
}

/// Query keys that are not attribute filters.
const NOT_FILTERS: &[&str] = &[
    "limit",
    "marker",
    "page_reverse",
    "fields",
    "sort",
    "sort_key",
    "sort_dir",
    "tags",
    "tags-any",
    "not-tags",
    "not-tags-any",
];

/// Does a rendered object match the attribute filters of `q`? `loadbalancer_id` / `pool_id` /
/// `listener_id` also match the `loadbalancers` / `pools` / `listeners` reference lists.
fn matches_filters(q: &QueryParams, v: &Value) -> bool {
    q.0.iter()
        .filter(|(k, _)| !NOT_FILTERS.contains(&k.as_str()))
        .all(|(k, want)| match v.get(k) {
            Some(Value::String(s)) => s == want,
            Some(Value::Bool(b)) => want.eq_ignore_ascii_case(&b.to_string()),
            Some(Value::Number(n)) => n.to_string() == *want,
            Some(Value::Null) => want.is_empty(),
            Some(_) => true,
            None => match k.strip_suffix("_id").and_then(|s| v.get(format!("{s}s"))) {
                Some(Value::Array(refs)) => refs.iter().any(|r| r["id"] == json!(want)),
                _ => true,
            },
        })
}

/// `?fields=id&fields=name` or `?fields=id,name`: only those keys.
fn select_fields(q: &QueryParams, v: Value) -> Value {
    let fields: Vec<&str> = q
        .all("fields")
        .into_iter()
        .flat_map(|f| f.split(','))
        .filter(|f| !f.is_empty())
        .collect();
    match v {
        Value::Object(m) if !fields.is_empty() => Value::Object(
            m.into_iter()
                .filter(|(k, _)| fields.contains(&k.as_str()))
                .collect(),
        ),
        other => other,
    }
}

/// A filtered, paginated collection: `{"<plural>": [...], "<plural>_links": [...]}`.
fn list_response(
    app: &SharedApp,
    ctx: &AuthCtx,
    q: &QueryParams,
    path: &str,
    plural: &str,
    items: Vec<Value>,
) -> SimResult<Value> {
    list_response_then(app, ctx, q, path, plural, items, |v| v)
}

/// [`list_response`], with `finish` applied only to the items of the page, before `fields` picks
/// keys: the costly part of an item (a pool's member references) is rendered for the page asked
/// for, not for the whole collection. What `finish` adds must not be what a filter reads.
fn list_response_then(
    app: &SharedApp,
    ctx: &AuthCtx,
    q: &QueryParams,
    path: &str,
    plural: &str,
    items: Vec<Value>,
    finish: impl FnMut(Value) -> Value,
) -> SimResult<Value> {
    let tags = q.tag_filter();
    let items: Vec<Value> = items
        .into_iter()
        .filter(|v| visible(ctx, v["project_id"].as_str().unwrap_or_default()))
        .filter(|v| matches_filters(q, v))
        .filter(|v| {
            let have: Vec<&str> = v["tags"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            tags.matches(&have)
        })
        .collect();
    let page = paginate_at_most(items, q, MAX_LIMIT, |v| {
        v["id"].as_str().unwrap_or_default().to_owned()
    })
    // Octavia's `InvalidMarker`: a 400 (a marker whose object was deleted between two pages).
    .map_err(|m| bad(format!("Supplied pagination marker '{m}' is not valid.")))?;
    let links = next_links(&app.base_url, path, q, page.next_marker.as_deref())
        .unwrap_or_else(|| json!([]));
    let items: Vec<Value> = page
        .items
        .into_iter()
        .map(finish)
        .map(|v| select_fields(q, v))
        .collect();
    Ok(json!({ plural: items, format!("{plural}_links"): links }))
}

/// `(201, {"<key>": obj})` and friends.
fn wrap(status: StatusCode, key: &str, v: Value) -> (StatusCode, axum::Json<Value>) {
    (status, axum::Json(json!({ key: v })))
}

fn refs<'a>(ids: impl IntoIterator<Item = &'a String>) -> Value {
    Value::Array(ids.into_iter().map(|id| json!({"id": id})).collect())
}
