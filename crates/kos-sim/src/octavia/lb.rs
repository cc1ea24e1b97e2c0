//! Load balancers: CRUD, the fully-populated (graph) create, status tree, stats and failover.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::{Extension, Json};
use serde_json::{Map, Value, json};

use super::children::{self, LISTENER_KEYS, MEMBER_KEYS, MONITOR_KEYS, POOL_KEYS};
use super::*;
use crate::neutron::{self, InternalPort};

const CREATE_KEYS: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "project_id",
    "tenant_id",
    "vip_subnet_id",
    "vip_network_id",
    "vip_port_id",
    "vip_address",
    "vip_qos_policy_id",
    "additional_vips",
    "vip_sg_ids",
    "vip_vnic_type",
    "provider",
    "flavor_id",
    "availability_zone",
    "tags",
    "listeners",
    "pools",
];
const UPDATE_KEYS: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "vip_qos_policy_id",
    "tags",
];
const PROVIDERS: &[&str] = &["amphora", "octavia", "ovn"];

pub(super) fn render(lb: &LoadBalancer, st: &OctaviaState) -> Value {
    let mut m = lb.base.render(lb.base.operating("ONLINE"), true);
    let listeners = st
        .listeners
        .iter()
        .filter(|l| l.loadbalancer_id == lb.base.id)
        .map(|l| &l.base.id);
    let pools = st
        .pools
        .iter()
        .filter(|p| p.loadbalancer_id == lb.base.id)
        .map(|p| &p.base.id);
    m.extend([
        ("vip_address".into(), json!(lb.vip_address)),
        ("vip_subnet_id".into(), json!(lb.vip_subnet_id)),
        ("vip_network_id".into(), json!(lb.vip_network_id)),
        ("vip_port_id".into(), json!(lb.vip_port_id)),
        ("vip_qos_policy_id".into(), json!(lb.vip_qos_policy_id)),
        ("vip_vnic_type".into(), json!("normal")),
        // Octavia 19 sends it (checked against a real one): empty unless the LB was created with
        // VIP security groups.
        ("vip_sg_ids".into(), json!([])),
        ("additional_vips".into(), json!([])),
        ("provider".into(), json!(lb.provider)),
        ("flavor_id".into(), json!(lb.flavor_id)),
        ("availability_zone".into(), json!(lb.availability_zone)),
        ("listeners".into(), refs(listeners)),
        ("pools".into(), refs(pools)),
    ]);
    Value::Object(m)
}

/// The fully-populated create's answer: listeners and pools in full, pools with members and monitor.
fn render_graph(lb: &LoadBalancer, st: &OctaviaState) -> Value {
    let mut v = render(lb, st);
    let listeners: Vec<Value> = st
        .listeners
        .iter()
        .filter(|l| l.loadbalancer_id == lb.base.id)
        .map(|l| {
            let mut j = children::render_listener(l);
            // The graph's listeners still carry the pre-Pike alias of the TLS reference.
            j["default_tls_container_id"] = json!(l.default_tls_container_ref);
            j["default_pool"] = l
                .default_pool_id
                .as_ref()
                .map_or(Value::Null, |id| json!({"id": id}));
            j
        })
        .collect();
    let pools: Vec<Value> = st
        .pools
        .iter()
        .filter(|p| p.loadbalancer_id == lb.base.id)
        .map(|p| {
            let mut j = children::render_pool(p, st);
            j["healthmonitor"] = st
                .pool_monitor(&p.base.id)
                .map_or(Value::Null, children::render_monitor);
            j["members"] = st
                .members
                .iter()
                .filter(|m| m.pool_id == p.base.id)
                .map(|m| children::render_member(m, st))
                .collect();
            j
        })
        .collect();
    v["listeners"] = json!(listeners);
    v["pools"] = json!(pools);
    v
}

fn owned<'a>(ctx: &AuthCtx, lb: &'a LoadBalancer) -> SimResult<&'a LoadBalancer> {
    if visible(ctx, &lb.base.project_id) {
        Ok(lb)
    } else {
        Err(not_found("Load Balancer", &lb.base.id))
    }
}

pub(super) async fn list(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    q: QueryParams,
    uri: Uri,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let st = &cloud.octavia;
    let items = st.loadbalancers.iter().map(|l| render(l, st)).collect();
    list_response(&app, &ctx, &q, uri.path(), "loadbalancers", items).map(Json)
}

pub(super) async fn show(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let lb = owned(&ctx, cloud.octavia.lb(&id)?)?;
    Ok(Json(json!({"loadbalancer": render(lb, &cloud.octavia)})))
}

/// Where the VIP goes: a subnet, a network (Neutron picks the subnet), or an existing port.
enum Vip {
    Subnet { network: String, subnet: String },
    Network(String),
    Port(String),
}

fn vip_of(cloud: &Cloud, i: &Input) -> SimResult<Vip> {
    let (port, net, subnet) = (
        i.str("vip_port_id")?,
        i.str("vip_network_id")?,
        i.str("vip_subnet_id")?,
    );
    match (port, net, subnet) {
        (None, None, None) => Err(bad(
            "Validation failure: VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.",
        )),
        (Some(p), None, None) => {
            if neutron::port_view(cloud, &p).is_none() {
                return Err(bad(format!("Validation failure: Port {p} not found.")));
            }
            Ok(Vip::Port(p))
        }
        (Some(_), _, _) => Err(bad(
            "Validation failure: vip_port_id cannot be combined with vip_network_id or vip_subnet_id.",
        )),
        (None, net, Some(s)) => {
            let network = neutron::subnet_network(cloud, &s)
                .ok_or_else(|| bad(format!("Validation failure: Subnet {s} not found.")))?;
            if net.as_ref().is_some_and(|n| *n != network) {
                return Err(bad(format!(
                    "Validation failure: vip_subnet_id {s} is not in vip_network_id {}.",
                    net.unwrap_or_default()
                )));
            }
            Ok(Vip::Subnet { network, subnet: s })
        }
        (None, Some(n), None) => {
            if neutron::network_name(cloud, &n).is_none() {
                return Err(bad(format!("Validation failure: Network {n} not found.")));
            }
            Ok(Vip::Network(n))
        }
    }
}

pub(super) async fn create(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    body: Bytes,
) -> SimResult<(StatusCode, Json<Value>)> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "loadbalancer", CREATE_KEYS)?;
    let mut cloud = app.cloud();
    let project = i
        .str("project_id")?
        .unwrap_or_else(|| ctx.project_id.clone());
    if project != ctx.project_id && !ctx.is_admin() {
        return Err(SimError::forbidden(
            SVC,
            "Policy does not allow this request to be performed.",
        ));
    }
    let provider = i.str("provider")?.unwrap_or_else(|| "amphora".into());
    if !PROVIDERS.contains(&provider.as_str()) {
        return Err(bad(format!("Provider '{provider}' is not enabled.")));
    }
    let flavor_id = i.str("flavor_id")?;
    if let Some(f) = &flavor_id
        && !cloud.octavia.flavors.iter().any(|x| &x.id == f)
    {
        return Err(bad("Validation failure: Invalid flavor_id."));
    }
    if let Some(v) = i.raw("additional_vips")
        && v.as_array().is_some_and(|a| !a.is_empty())
    {
        return Err(bad(
            "Provider 'amphora' does not support a requested option: additional_vips",
        ));
    }
    let vip = vip_of(&cloud, &i)?;
    let vip_address = i.str("vip_address")?;
    if let Some(a) = &vip_address
        && a.parse::<std::net::IpAddr>().is_err()
    {
        return Err(invalid(
            "vip_address",
            &json!(a),
            "Value should be IPv4 or IPv6 format",
        ));
    }
    let count = |p: &str| {
        cloud
            .octavia
            .loadbalancers
            .iter()
            .filter(|l| l.base.project_id == p)
            .count()
    };
    check_quota(
        cloud.quotas.load_balancers,
        count(&project),
        1,
        "Load Balancer",
    )?;

    let mut base = Base::new(&project);
    base.apply(&i)?;
    let lb = LoadBalancer {
        base,
        vip_address: String::new(),
        vip_subnet_id: None,
        vip_network_id: String::new(),
        vip_port_id: String::new(),
        vip_port_owned: false,
        vip_qos_policy_id: i.str("vip_qos_policy_id")?,
        amphora: None,
        provider,
        flavor_id,
        availability_zone: i.str("availability_zone")?,
        since: cloud.now,
    };
    let id = lb.base.id.clone();
    let graph = i.has("listeners") || i.has("pools");
    cloud.octavia.loadbalancers.push(lb);
    // Children and the VIP port are built against the inserted LB; any failure removes it all again.
    let built = build_graph(&mut cloud, &id, &i)
        .and_then(|()| attach_vip(&mut cloud, &id, vip, vip_address));
    if let Err(e) = built {
        cloud.octavia.remove_lb(&id);
        return Err(e);
    }
    replace_amphora(&mut cloud, &id)?;
    let st = &cloud.octavia;
    let lb = st.lb(&id)?;
    let v = if graph {
        render_graph(lb, st)
    } else {
        render(lb, st)
    };
    Ok(wrap(StatusCode::CREATED, "loadbalancer", v))
}

/// Creates the VIP port in Neutron (so that a floating IP can point at it) or adopts the given one.
fn attach_vip(cloud: &mut Cloud, lb_id: &str, vip: Vip, address: Option<String>) -> SimResult<()> {
    let project_id = cloud.octavia.lb(lb_id)?.base.project_id.clone();
    let (port_id, owned) = match vip {
        Vip::Port(p) => (p, false),
        Vip::Subnet { network, subnet } => (
            create_vip_port(cloud, &project_id, lb_id, network, Some(subnet), address)?,
            true,
        ),
        Vip::Network(network) => (
            create_vip_port(cloud, &project_id, lb_id, network, None, address)?,
            true,
        ),
    };
    let view = neutron::port_view(cloud, &port_id).ok_or_else(|| not_found("Port", &port_id))?;
    let (subnet, ip) = view.fixed_ips.first().cloned().unwrap_or_default();
    let lb = cloud.octavia.lb_mut(lb_id)?;
    lb.vip_port_id = port_id;
    lb.vip_port_owned = owned;
    lb.vip_network_id = view.network_id;
    lb.vip_subnet_id = Some(subnet).filter(|s| !s.is_empty());
    lb.vip_address = ip;
    Ok(())
}

fn create_vip_port(
    cloud: &mut Cloud,
    project_id: &str,
    lb_id: &str,
    network_id: String,
    subnet_id: Option<String>,
    ip_address: Option<String>,
) -> SimResult<String> {
    neutron::create_port_internal(
        cloud,
        InternalPort {
            project_id: project_id.to_owned(),
            network_id,
            subnet_id,
            ip_address,
            name: format!("octavia-lb-{lb_id}"),
            device_owner: "Octavia".into(),
            device_id: format!("lb-{lb_id}"),
            security_groups: Some(Vec::new()),
        },
    )
    // Octavia reports Neutron's refusal in its own format.
    .map_err(|e| SimError::new(SVC, e.status, e.kind, e.message))
}

fn objects<'a>(i: &Input<'a>, key: &str) -> SimResult<Vec<&'a Map<String, Value>>> {
    match i.raw(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_object()
                    .ok_or_else(|| invalid(key, v, "Wrong type. Expected an object"))
            })
            .collect(),
        Some(v) => Err(invalid(key, v, "Wrong type. Expected a list")),
    }
}

/// A pool of the graph with its members and health monitor (`listener_protocol` when it is a listener's
/// default pool).
fn build_graph_pool(
    cloud: &mut Cloud,
    lb_id: &str,
    spec: &Map<String, Value>,
    listener: Option<&str>,
) -> SimResult<String> {
    let keys: Vec<&str> = POOL_KEYS
        .iter()
        .copied()
        .chain(["members", "healthmonitor"])
        .collect();
    let pi = Input::object(spec, "pool", &keys)?;
    let pool = children::build_pool(&cloud.octavia, lb_id, listener, &pi)?;
    let pool_id = pool.base.id.clone();
    cloud.octavia.pools.push(pool);
    if let Some(l) = listener {
        set_default_pool(cloud, l, &pool_id)?;
    }
    // The pool is new: its only members are the ones made here.
    let mut made: std::collections::HashSet<(String, i64)> = std::collections::HashSet::new();
    for m in objects(&pi, "members")? {
        let mi = Input::object(m, "member", MEMBER_KEYS)?;
        let pool = cloud.octavia.pool(&pool_id)?;
        let member = children::build_member_checked(cloud, pool, &mi, |a, p| {
            made.contains(&(a.to_owned(), p))
        })?;
        made.insert((member.address.clone(), member.protocol_port));
        cloud.octavia.members.push(member);
    }
    if let Some(h) = pi.raw("healthmonitor") {
        let h = h
            .as_object()
            .ok_or_else(|| invalid("healthmonitor", h, "Wrong type. Expected an object"))?;
        let hi = Input::object(h, "healthmonitor", MONITOR_KEYS)?;
        let pool = cloud.octavia.pool(&pool_id)?;
        let monitor = children::build_monitor(&cloud.octavia, pool, &hi)?;
        cloud.octavia.monitors.push(monitor);
    }
    Ok(pool_id)
}

fn set_default_pool(cloud: &mut Cloud, listener_id: &str, pool_id: &str) -> SimResult<()> {
    let st = &mut cloud.octavia;
    let l = st
        .listeners
        .iter_mut()
        .find(|l| l.base.id == listener_id)
        .ok_or_else(|| not_found("Listener", listener_id))?;
    l.default_pool_id = Some(pool_id.to_owned());
    Ok(())
}

/// The fully-populated create: top-level pools first (listeners may name them as default pool), then
/// listeners with their inline default pools, then the graph's quota.
fn build_graph(cloud: &mut Cloud, lb_id: &str, i: &Input) -> SimResult<()> {
    let mut named = Vec::new();
    for p in objects(i, "pools")? {
        let id = build_graph_pool(cloud, lb_id, p, None)?;
        named.push((p.get("name").cloned(), id));
    }
    let keys: Vec<&str> = LISTENER_KEYS
        .iter()
        .copied()
        .filter(|k| *k != "loadbalancer_id")
        .chain(["default_pool", "l7policies"])
        .collect();
    for l in objects(i, "listeners")? {
        let li = Input::object(l, "listener", &keys)?;
        if li
            .raw("l7policies")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            return Err(bad("kos-sim does not implement L7 policies."));
        }
        let listener = children::build_listener(&cloud.octavia, cloud.octavia.lb(lb_id)?, &li)?;
        let listener_id = listener.base.id.clone();
        cloud.octavia.listeners.push(listener);
        let Some(dp) = li.raw("default_pool") else {
            continue;
        };
        let dp = dp
            .as_object()
            .ok_or_else(|| invalid("default_pool", dp, "Wrong type. Expected an object"))?;
        // `{"name": "x"}` alone names a top-level pool of the graph.
        let by_name = (dp.len() == 1)
            .then(|| named.iter().find(|(n, _)| n.as_ref() == dp.get("name")))
            .flatten();
        match by_name {
            Some((_, pool_id)) => {
                let st = &cloud.octavia;
                children::check_pool_protocol(
                    &st.listener(&listener_id)?.protocol,
                    &st.pool(pool_id)?.protocol,
                )?;
                set_default_pool(cloud, &listener_id, &pool_id.clone())?;
            }
            None => {
                build_graph_pool(cloud, lb_id, dp, Some(&listener_id))?;
            }
        }
    }
    let st = &cloud.octavia;
    let project = &st.lb(lb_id)?.base.project_id;
    let q = &cloud.quotas;
    fn split<T: Child>(items: &[T], lb_id: &str, project: &str) -> (usize, usize) {
        let mine = items.iter().filter(|c| c.base().project_id == project);
        let new = mine.clone().filter(|c| c.lb_id() == lb_id).count();
        (mine.count() - new, new)
    }
    /// A quota, how to count what it holds (elsewhere, on this load balancer), its name.
    type Count<'a> = (i64, &'a dyn Fn() -> (usize, usize), &'a str);
    let counts: [Count<'_>; 4] = [
        (
            q.listeners,
            &|| split(&st.listeners, lb_id, project),
            "Listener",
        ),
        (q.pools, &|| split(&st.pools, lb_id, project), "Pool"),
        (q.members, &|| split(&st.members, lb_id, project), "Member"),
        (
            q.health_monitors,
            &|| split(&st.monitors, lb_id, project),
            "Health Monitor",
        ),
    ];
    for (limit, count, what) in counts {
        // Unlimited (Octavia's default for members): nothing to count, where counting is a scan
        // of every member of the cloud per create.
        if limit < 0 {
            continue;
        }
        let (used, new) = count();
        check_quota(limit, used, new, what)?;
    }
    Ok(())
}

pub(super) async fn update(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "loadbalancer", UPDATE_KEYS)?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let mut lb = owned(&ctx, st.lb(&id)?)?.clone();
    lb.base.apply(&i)?;
    if i.obj.contains_key("vip_qos_policy_id") {
        lb.vip_qos_policy_id = i.str("vip_qos_policy_id")?;
    }
    st.lock_lb(&id, now)?;
    let slot = st.lb_mut(&id)?;
    lb.base.provisioning_status = slot.base.provisioning_status.clone();
    lb.base.updated_at = slot.base.updated_at.clone();
    lb.since = now;
    *slot = lb;
    Ok(Json(json!({"loadbalancer": render(st.lb(&id)?, st)})))
}

pub(super) async fn delete(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    q: QueryParams,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let lb = owned(&ctx, st.lb(&id)?)?;
    // ERROR is deletable: that is how a failed LB is cleaned up.
    if lb.base.provisioning_status != ACTIVE && lb.base.provisioning_status != ERROR {
        return Err(immutable(&id));
    }
    let cascade = q.bool("cascade").unwrap_or(false);
    if st.has_children(&id) && !cascade {
        return Err(SimError::conflict(
            SVC,
            "ValidationException",
            format!("Cannot delete Load Balancer {id} - it has children"),
        ));
    }
    st.mark_all_children(&id, PENDING_DELETE);
    let lb = st.lb_mut(&id)?;
    lb.base.touch(PENDING_DELETE);
    lb.since = now;
    Ok(StatusCode::NO_CONTENT)
}

fn status_member(m: &Member, st: &OctaviaState) -> Value {
    json!({
        "id": m.base.id, "name": m.base.name, "address": m.address, "protocol_port": m.protocol_port,
        "provisioning_status": m.base.provisioning_status,
        "operating_status": children::member_operating(m, st),
    })
}

fn status_pool(p: &Pool, st: &OctaviaState) -> Value {
    let hm = st.pool_monitor(&p.base.id).map_or_else(
        || json!({}),
        |h| json!({"id": h.base.id, "name": h.base.name, "type": h.kind, "provisioning_status": h.base.provisioning_status}),
    );
    let members: Vec<Value> = st
        .members
        .iter()
        .filter(|m| m.pool_id == p.base.id)
        .map(|m| status_member(m, st))
        .collect();
    json!({
        "id": p.base.id, "name": p.base.name, "provisioning_status": p.base.provisioning_status,
        "operating_status": p.base.operating("ONLINE"), "healthmonitor": hm, "members": members,
    })
}

/// The status tree (`GET /loadbalancers/{id}/status`).
pub(super) async fn status(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let st = &cloud.octavia;
    let lb = owned(&ctx, st.lb(&id)?)?;
    let listeners: Vec<Value> = st
        .listeners
        .iter()
        .filter(|l| l.loadbalancer_id == id)
        .map(|l| {
            let pools: Vec<Value> = l
                .default_pool_id
                .iter()
                .filter_map(|p| st.pool(p).ok())
                .map(|p| status_pool(p, st))
                .collect();
            json!({
                "id": l.base.id, "name": l.base.name, "provisioning_status": l.base.provisioning_status,
                "operating_status": l.base.operating("ONLINE"), "pools": pools, "l7policies": [],
            })
        })
        .collect();
    let pools: Vec<Value> = st
        .pools
        .iter()
        .filter(|p| p.loadbalancer_id == id)
        .map(|p| status_pool(p, st))
        .collect();
    Ok(Json(json!({"statuses": {"loadbalancer": {
        "id": lb.base.id, "name": lb.base.name, "provisioning_status": lb.base.provisioning_status,
        "operating_status": lb.base.operating("ONLINE"), "listeners": listeners, "pools": pools,
    }}})))
}

/// No traffic flows through a simulated LB: all counters are zero.
pub(super) fn zero_stats() -> Json<Value> {
    Json(json!({"stats": {
        "bytes_in": 0, "bytes_out": 0, "active_connections": 0, "total_connections": 0, "request_errors": 0,
    }}))
}

pub(super) async fn stats(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    owned(&ctx, app.cloud().octavia.lb(&id)?)?;
    Ok(zero_stats())
}

/// Failover rebuilds the amphorae: the LB goes through PENDING_UPDATE. Octavia's default policy keeps it
/// for admins (a project member gets 403, as on minicloud).
pub(super) async fn failover(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    owned(&ctx, cloud.octavia.lb(&id)?)?;
    if !ctx.is_admin() {
        return Err(SimError::forbidden(
            SVC,
            "Policy does not allow this request to be performed.",
        ));
    }
    fail_over(&mut cloud, &id)?;
    Ok(StatusCode::ACCEPTED)
}

/// What an admin's failover does (also for tests, as no simulated user is an admin).
pub fn fail_over(cloud: &mut Cloud, lb_id: &str) -> SimResult<()> {
    let now = cloud.now;
    cloud.octavia.lock_lb(lb_id, now)?;
    replace_amphora(cloud, lb_id)
}

/// Boots the amphora of an `amphora` load balancer (create), or a new one in place of the old
/// (failover): a new port on the VIP network. When Neutron refuses the port (the subnet is full), the
/// load balancer goes to ERROR, as when a real amphora fails to build.
fn replace_amphora(cloud: &mut Cloud, lb_id: &str) -> SimResult<()> {
    let lb = cloud.octavia.lb(lb_id)?;
    if lb.provider != "amphora" {
        return Ok(());
    }
    let (old, vip_port_id) = (lb.amphora.clone(), lb.vip_port_id.clone());
    if let Some(old) = &old {
        neutron::amphora::unplug(cloud, old);
    }
    let plugged = neutron::amphora::plug(cloud, lb_id, &vip_port_id);
    let lb = cloud.octavia.lb_mut(lb_id)?;
    match plugged {
        Ok(p) => lb.amphora = Some(p),
        Err(_) => {
            lb.amphora = None;
            lb.base.touch(ERROR);
        }
    }
    Ok(())
}
