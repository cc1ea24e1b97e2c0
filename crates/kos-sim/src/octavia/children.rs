//! Listeners, pools, members and health monitors: each built and validated in one place (shared by the
//! standalone endpoints and the fully-populated LB create), rendered in one place, and mutated only under
//! the owning LB's lock ([`OctaviaState::lock_lb`]).

use std::collections::HashMap;
use std::net::IpAddr;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::{Extension, Json};
use serde_json::{Map, Value, json};

use super::*;

pub(super) const LISTENER_KEYS: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "project_id",
    "tenant_id",
    "protocol",
    "protocol_port",
    "loadbalancer_id",
    "default_pool_id",
    "connection_limit",
    "allowed_cidrs",
    "insert_headers",
    "default_tls_container_ref",
    "sni_container_refs",
    "timeout_client_data",
    "timeout_member_connect",
    "timeout_member_data",
    "timeout_tcp_inspect",
    "tags",
    "client_ca_tls_container_ref",
    "client_authentication",
    "client_crl_container_ref",
    "tls_ciphers",
    "tls_versions",
    "alpn_protocols",
    "hsts_include_subdomains",
    "hsts_max_age",
    "hsts_preload",
];
/// Echo-only listener attributes and what a listener shows when they were never set.
const LISTENER_ECHO: &[(&str, Value)] = &[
    ("client_ca_tls_container_ref", Value::Null),
    ("client_crl_container_ref", Value::Null),
    ("tls_ciphers", Value::Null),
    ("tls_versions", Value::Null),
    ("alpn_protocols", Value::Null),
    ("hsts_include_subdomains", Value::Bool(false)),
    ("hsts_max_age", Value::Null),
    ("hsts_preload", Value::Bool(false)),
];
const LISTENER_CREATE_ONLY: &[&str] = &[
    "project_id",
    "tenant_id",
    "protocol",
    "protocol_port",
    "loadbalancer_id",
];
const LISTENER_PROTOCOLS: &[&str] = &[
    "HTTP",
    "HTTPS",
    "TCP",
    "UDP",
    "SCTP",
    "TERMINATED_HTTPS",
    "PROMETHEUS",
];

pub(super) const POOL_KEYS: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "project_id",
    "tenant_id",
    "protocol",
    "lb_algorithm",
    "listener_id",
    "loadbalancer_id",
    "session_persistence",
    "tls_enabled",
    "tags",
    "tls_container_ref",
    "ca_tls_container_ref",
    "crl_container_ref",
    "tls_ciphers",
    "tls_versions",
    "alpn_protocols",
];
const POOL_ECHO: &[(&str, Value)] = &[
    ("tls_container_ref", Value::Null),
    ("ca_tls_container_ref", Value::Null),
    ("crl_container_ref", Value::Null),
    ("tls_ciphers", Value::Null),
    ("tls_versions", Value::Null),
    ("alpn_protocols", Value::Null),
];
const POOL_CREATE_ONLY: &[&str] = &[
    "project_id",
    "tenant_id",
    "protocol",
    "listener_id",
    "loadbalancer_id",
];
const POOL_PROTOCOLS: &[&str] = &["HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP", "UDP", "SCTP"];
const ALGORITHMS: &[&str] = &[
    "ROUND_ROBIN",
    "LEAST_CONNECTIONS",
    "SOURCE_IP",
    "SOURCE_IP_PORT",
];

pub(super) const MEMBER_KEYS: &[&str] = &[
    "name",
    "admin_state_up",
    "project_id",
    "tenant_id",
    "address",
    "protocol_port",
    "subnet_id",
    "weight",
    "backup",
    "monitor_address",
    "monitor_port",
    "tags",
    "request_sriov",
];
const MEMBER_CREATE_ONLY: &[&str] = &[
    "project_id",
    "tenant_id",
    "address",
    "protocol_port",
    "subnet_id",
    "request_sriov",
];

pub(super) const MONITOR_KEYS: &[&str] = &[
    "name",
    "admin_state_up",
    "project_id",
    "tenant_id",
    "pool_id",
    "type",
    "delay",
    "timeout",
    "max_retries",
    "max_retries_down",
    "http_method",
    "url_path",
    "expected_codes",
    "http_version",
    "domain_name",
    "tags",
];
const MONITOR_ECHO: &[(&str, Value)] =
    &[("http_version", Value::Null), ("domain_name", Value::Null)];
const MONITOR_CREATE_ONLY: &[&str] = &["project_id", "tenant_id", "pool_id", "type"];
const MONITOR_TYPES: &[&str] = &[
    "HTTP",
    "HTTPS",
    "PING",
    "TCP",
    "TLS-HELLO",
    "UDP-CONNECT",
    "SCTP",
];
const HTTP_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "OPTIONS", "PATCH", "CONNECT",
];

fn update_keys<'a>(all: &[&'a str], create_only: &[&str]) -> Vec<&'a str> {
    all.iter()
        .copied()
        .filter(|k| !create_only.contains(k))
        .collect()
}

fn echo_keys(echo: &[(&'static str, Value)]) -> Vec<&'static str> {
    echo.iter().map(|(k, _)| *k).collect()
}

fn render_echo(m: &mut Map<String, Value>, echo: &Map<String, Value>, defaults: &[(&str, Value)]) {
    for (k, d) in defaults {
        m.insert(
            (*k).into(),
            echo.get(*k).cloned().unwrap_or_else(|| d.clone()),
        );
    }
}

/// ovn-octavia-provider raises `UnsupportedOptionError`, which Octavia's API answers with 501
/// (`ProviderUnsupportedOptionError`, octavia/common/exceptions.py).
fn ovn_unsupported(what: String) -> SimError {
    SimError::new(
        SVC,
        axum::http::StatusCode::NOT_IMPLEMENTED,
        "ProviderUnsupportedOptionError",
        format!(
            "Provider 'ovn' does not support a requested option: OVN provider does not support {what}"
        ),
    )
}

/// The OVN provider refuses listener `allowed_cidrs` on create and update (its driver's
/// `_check_for_allowed_cidrs`): source ranges behind OVN are security groups' business.
fn ovn_allowed_cidrs(provider: &str, l: &Listener) -> SimResult<()> {
    if provider == "ovn" && !l.allowed_cidrs.is_empty() {
        return Err(ovn_unsupported("allowed_cidrs option".into()));
    }
    Ok(())
}

/// A body's `project_id` must be the caller's (or the caller an admin).
fn check_project(ctx: &AuthCtx, i: &Input, owner: &str) -> SimResult<()> {
    let given = i.str("project_id")?.or(i.str("tenant_id")?);
    if given.is_some_and(|p| p != owner) && !ctx.is_admin() {
        return Err(SimError::forbidden(
            SVC,
            "Policy does not allow this request to be performed.",
        ));
    }
    Ok(())
}

fn owned<T: Child>(ctx: &AuthCtx, what: &str, c: &T) -> SimResult<()> {
    if visible(ctx, &c.base().project_id) {
        Ok(())
    } else {
        Err(not_found(what, &c.base().id))
    }
}

/// Replaces the stored copy of `new` (same id) and marks it `status`.
fn commit<T: Child + Clone>(items: &mut [T], mut new: T, status: &str) -> T {
    new.base_mut().touch(status);
    if let Some(slot) = items.iter_mut().find(|c| c.base().id == new.base().id) {
        *slot = new.clone();
    }
    new
}

fn mark<T: Child>(items: &mut [T], pred: impl Fn(&T) -> bool, status: &str) {
    for c in items.iter_mut().filter(|c| pred(c)) {
        c.base_mut().touch(status);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Listeners

pub(super) fn render_listener(l: &Listener) -> Value {
    let mut m = l.base.render(l.base.operating("ONLINE"), true);
    m.extend([
        ("protocol".into(), json!(l.protocol)),
        ("protocol_port".into(), json!(l.protocol_port)),
        ("connection_limit".into(), json!(l.connection_limit)),
        ("default_pool_id".into(), json!(l.default_pool_id)),
        (
            "default_tls_container_ref".into(),
            json!(l.default_tls_container_ref),
        ),
        ("sni_container_refs".into(), json!(l.sni_container_refs)),
        ("loadbalancers".into(), json!([{"id": l.loadbalancer_id}])),
        ("l7policies".into(), json!([])),
        (
            "insert_headers".into(),
            Value::Object(l.insert_headers.clone()),
        ),
        ("allowed_cidrs".into(), json!(l.allowed_cidrs)),
        ("timeout_client_data".into(), json!(l.timeouts[0])),
        ("timeout_member_connect".into(), json!(l.timeouts[1])),
        ("timeout_member_data".into(), json!(l.timeouts[2])),
        ("timeout_tcp_inspect".into(), json!(l.timeouts[3])),
        (
            "client_authentication".into(),
            l.echo
                .get("client_authentication")
                .cloned()
                .unwrap_or(json!("NONE")),
        ),
    ]);
    render_echo(&mut m, &l.echo, LISTENER_ECHO);
    Value::Object(m)
}

/// UDP and SCTP listeners may share a port number with a TCP-based one.
fn port_family(protocol: &str) -> &str {
    match protocol {
        "UDP" | "SCTP" => protocol,
        _ => "TCP",
    }
}

/// Which pool protocols a listener protocol can forward to.
pub(super) fn check_pool_protocol(listener: &str, pool: &str) -> SimResult<()> {
    let ok: &[&str] = match listener {
        "HTTP" | "TERMINATED_HTTPS" => &["HTTP", "PROXY", "PROXYV2"],
        "HTTPS" => &["HTTPS", "PROXY", "PROXYV2", "TCP"],
        "TCP" => &["TCP", "HTTP", "HTTPS", "PROXY", "PROXYV2"],
        "UDP" => &["UDP"],
        "SCTP" => &["SCTP"],
        _ => &[],
    };
    if ok.contains(&pool) {
        Ok(())
    } else {
        Err(bad(format!(
            "Validation failure: The pool protocol '{pool}' is invalid while the listener protocol is '{listener}'."
        )))
    }
}

/// Applies the mutable attributes and checks the listener they make.
fn apply_listener(l: &mut Listener, st: &OctaviaState, i: &Input) -> SimResult<()> {
    l.base.apply(i)?;
    if let Some(n) = i.int("connection_limit", -1, i64::from(i32::MAX))? {
        l.connection_limit = n;
    }
    let names = [
        "timeout_client_data",
        "timeout_member_connect",
        "timeout_member_data",
        "timeout_tcp_inspect",
    ];
    for (slot, name) in l.timeouts.iter_mut().zip(names) {
        if let Some(n) = i.int(name, 0, 31_536_000)? {
            *slot = n;
        }
    }
    if let Some(cidrs) = i.strs("allowed_cidrs")? {
        if let Some(b) = cidrs.iter().find(|c| c.parse::<ipnet::IpNet>().is_err()) {
            return Err(invalid(
                "allowed_cidrs",
                &json!(b),
                "Value should be a valid CIDR.",
            ));
        }
        l.allowed_cidrs = cidrs;
    }
    if let Some(h) = i.raw("insert_headers") {
        l.insert_headers = h
            .as_object()
            .cloned()
            .ok_or_else(|| invalid("insert_headers", h, "Wrong type. Expected a dict"))?;
    }
    if i.obj.contains_key("default_tls_container_ref") {
        l.default_tls_container_ref = i.str("default_tls_container_ref")?;
    }
    if let Some(v) = i.strs("sni_container_refs")? {
        l.sni_container_refs = v;
    }
    i.echo_into(&echo_keys(LISTENER_ECHO), &mut l.echo);
    i.echo_into(&["client_authentication"], &mut l.echo);
    if i.obj.contains_key("default_pool_id") {
        l.default_pool_id = i.str("default_pool_id")?;
        if let Some(pid) = &l.default_pool_id {
            let pool = st.pool(pid)?;
            if pool.loadbalancer_id != l.loadbalancer_id {
                return Err(bad(format!(
                    "Validation failure: Pool {pid} is not on load balancer {}.",
                    l.loadbalancer_id
                )));
            }
            check_pool_protocol(&l.protocol, &pool.protocol)?;
        }
    }
    let http = matches!(l.protocol.as_str(), "HTTP" | "TERMINATED_HTTPS");
    if !l.insert_headers.is_empty() && !http {
        let names: Vec<&str> = l.insert_headers.keys().map(String::as_str).collect();
        return Err(bad(format!(
            "Validation failure: The following headers are not supported for the {} protocol: {}",
            l.protocol,
            names.join(", ")
        )));
    }
    if l.protocol == "TERMINATED_HTTPS" {
        if l.default_tls_container_ref.is_none() {
            return Err(bad(
                "Validation failure: An SNI or default certificate container reference must be provided for TERMINATED_HTTPS listeners.",
            ));
        }
    } else if l.default_tls_container_ref.is_some() || !l.sni_container_refs.is_empty() {
        return Err(bad(
            "Validation failure: Certificate container references are only allowed on TERMINATED_HTTPS protocol listeners.",
        ));
    }
    Ok(())
}

/// A new listener of `lb`, validated against its siblings (port uniqueness per protocol family).
pub(super) fn build_listener(
    st: &OctaviaState,
    lb: &LoadBalancer,
    i: &Input,
) -> SimResult<Listener> {
    let protocol = i.one_of("protocol", LISTENER_PROTOCOLS)?.ok_or_else(|| {
        bad("Invalid input for field/attribute protocol. Value: 'None'. Mandatory field missing.")
    })?;
    let port = i
        .int("protocol_port", 1, 65535)?
        .ok_or_else(|| bad("Invalid input for field/attribute protocol_port. Value: 'None'. Mandatory field missing."))?;
    if lb.provider == "ovn" && !matches!(protocol.as_str(), "TCP" | "UDP" | "SCTP") {
        return Err(ovn_unsupported(format!("{protocol} protocol")));
    }
    let taken = st.listeners.iter().any(|l| {
        l.loadbalancer_id == lb.base.id
            && l.protocol_port == port
            && port_family(&l.protocol) == port_family(&protocol)
    });
    if taken {
        return Err(SimError::conflict(
            SVC,
            "DuplicateListenerEntry",
            format!("Another Listener on this Load Balancer is already using protocol_port {port}"),
        ));
    }
    let mut l = Listener {
        base: Base::new(&lb.base.project_id),
        loadbalancer_id: lb.base.id.clone(),
        protocol,
        protocol_port: port,
        default_pool_id: None,
        connection_limit: -1,
        allowed_cidrs: Vec::new(),
        insert_headers: Map::new(),
        default_tls_container_ref: None,
        sni_container_refs: Vec::new(),
        timeouts: [50_000, 5_000, 50_000, 0],
        echo: Map::new(),
    };
    apply_listener(&mut l, st, i)?;
    ovn_allowed_cidrs(&lb.provider, &l)?;
    Ok(l)
}

pub(super) async fn list_listeners(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    q: QueryParams,
    uri: Uri,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let items = cloud
        .octavia
        .listeners
        .iter()
        .map(render_listener)
        .collect();
    list_response(&app, &ctx, &q, uri.path(), "listeners", items).map(Json)
}

pub(super) async fn create_listener(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    body: Bytes,
) -> SimResult<(StatusCode, Json<Value>)> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "listener", LISTENER_KEYS)?;
    let lb_id = i.required_str("loadbalancer_id")?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &cloud.octavia;
    let lb = st.lb(&lb_id)?;
    check_project(&ctx, &i, &lb.base.project_id)?;
    let l = build_listener(st, lb, &i)?;
    let used = st
        .listeners
        .iter()
        .filter(|x| x.base.project_id == l.base.project_id)
        .count();
    check_quota(cloud.quotas.listeners, used, 1, "Listener")?;
    let st = &mut cloud.octavia;
    st.lock_lb(&lb_id, now)?;
    let v = render_listener(&l);
    st.listeners.push(l);
    Ok(wrap(StatusCode::CREATED, "listener", v))
}

pub(super) async fn show_listener(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let l = cloud.octavia.listener(&id)?;
    owned(&ctx, "Listener", l)?;
    Ok(Json(json!({"listener": render_listener(l)})))
}

pub(super) async fn update_listener(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_body(&body)?;
    let i = Input::of(
        &body,
        "listener",
        &update_keys(LISTENER_KEYS, LISTENER_CREATE_ONLY),
    )?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let mut l = st.listener(&id)?.clone();
    owned(&ctx, "Listener", &l)?;
    st.ensure_mutable(&l.loadbalancer_id)?;
    apply_listener(&mut l, st, &i)?;
    let provider = st
        .loadbalancers
        .iter()
        .find(|x| x.base.id == l.loadbalancer_id)
        .map(|x| x.provider.clone())
        .unwrap_or_default();
    ovn_allowed_cidrs(&provider, &l)?;
    st.lock_lb(&l.loadbalancer_id, now)?;
    let l = commit(&mut st.listeners, l, PENDING_UPDATE);
    Ok(Json(json!({"listener": render_listener(&l)})))
}

pub(super) async fn delete_listener(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let l = st.listener(&id)?;
    owned(&ctx, "Listener", l)?;
    let lb_id = l.loadbalancer_id.clone();
    st.lock_lb(&lb_id, now)?;
    mark(&mut st.listeners, |l| l.base.id == id, PENDING_DELETE);
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn listener_stats(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    owned(&ctx, "Listener", app.cloud().octavia.listener(&id)?)?;
    Ok(super::lb::zero_stats())
}

// ---------------------------------------------------------------------------------------------------------
// Pools

pub(super) fn render_pool(p: &Pool, st: &OctaviaState) -> Value {
    render_pool_with(p, &PoolRefs::of(st, Some(&p.base.id)))
}

/// Pool id → the ids of its listeners, members and monitor: one pass over the children, so a list
/// of every pool does not scan every member once per pool.
pub(super) struct PoolRefs<'a> {
    listeners: HashMap<&'a str, Vec<&'a String>>,
    members: HashMap<&'a str, Vec<&'a String>>,
    monitors: HashMap<&'a str, &'a String>,
}

impl<'a> PoolRefs<'a> {
    /// For every pool (`only` None) or one.
    pub(super) fn of(st: &'a OctaviaState, only: Option<&str>) -> PoolRefs<'a> {
        let mut r = Self::without_members(st, only);
        let keep = |id: &str| only.is_none_or(|o| o == id);
        for m in st.members.iter().filter(|m| keep(&m.pool_id)) {
            r.members.entry(&m.pool_id).or_default().push(&m.base.id);
        }
        r
    }

    /// Listeners and monitors only: the members are most of the work, and a paged list needs
    /// those of its page's pools only.
    fn without_members(st: &'a OctaviaState, only: Option<&str>) -> PoolRefs<'a> {
        let keep = |id: &str| only.is_none_or(|o| o == id);
        let mut r = PoolRefs {
            listeners: HashMap::new(),
            members: HashMap::new(),
            monitors: HashMap::new(),
        };
        for l in &st.listeners {
            if let Some(pid) = l.default_pool_id.as_deref().filter(|p| keep(p)) {
                r.listeners.entry(pid).or_default().push(&l.base.id);
            }
        }
        // The first monitor of a pool, as `pool_monitor` finds it.
        for h in st.monitors.iter().filter(|h| keep(&h.pool_id)) {
            r.monitors.entry(&h.pool_id).or_insert(&h.base.id);
        }
        r
    }
}

impl PoolRefs<'_> {
    /// The pool's member references as Octavia shows them.
    fn members(&self, pool_id: &str) -> Value {
        refs(self.members.get(pool_id).into_iter().flatten().copied())
    }
}

fn render_pool_with(p: &Pool, index: &PoolRefs<'_>) -> Value {
    let mut v = render_pool_without_members(p, index);
    if let Value::Object(m) = &mut v {
        m.insert("members".into(), index.members(&p.base.id));
    }
    v
}

/// A pool as shown but for its `members` (see [`list_pools`]).
fn render_pool_without_members(p: &Pool, index: &PoolRefs<'_>) -> Value {
    let mut m = p.base.render(p.base.operating("ONLINE"), true);
    let id = p.base.id.as_str();
    let listeners = index.listeners.get(id).into_iter().flatten().copied();
    m.extend([
        ("protocol".into(), json!(p.protocol)),
        ("lb_algorithm".into(), json!(p.lb_algorithm)),
        ("session_persistence".into(), json!(p.session_persistence)),
        ("loadbalancers".into(), json!([{"id": p.loadbalancer_id}])),
        ("listeners".into(), refs(listeners)),
        ("tls_enabled".into(), json!(p.tls_enabled)),
    ]);
    // Octavia's WSME types leave an unset attribute out: no monitor, no `healthmonitor_id` key.
    if let Some(h) = index.monitors.get(id) {
        m.insert("healthmonitor_id".into(), json!(h));
    }
    render_echo(&mut m, &p.echo, POOL_ECHO);
    Value::Object(m)
}

/// Session persistence, normalised to the four keys Octavia always shows.
fn session_persistence(v: &Value) -> SimResult<Option<Value>> {
    if v.is_null() {
        return Ok(None);
    }
    let sp = Input::object(
        v.as_object()
            .ok_or_else(|| invalid("session_persistence", v, "Wrong type. Expected a dict"))?,
        "session_persistence",
        &[
            "type",
            "cookie_name",
            "persistence_timeout",
            "persistence_granularity",
        ],
    )?;
    let kind = sp
        .one_of("type", &["SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"])?
        .ok_or_else(|| {
            bad("Invalid input for field/attribute type. Value: 'None'. Mandatory field missing.")
        })?;
    let cookie = sp.str("cookie_name")?;
    match (kind.as_str(), &cookie) {
        ("APP_COOKIE", None) => Err(bad(
            "Validation failure: Field 'cookie_name' must be specified when using the APP_COOKIE session persistence type.",
        )),
        (k, Some(_)) if k != "APP_COOKIE" => Err(bad(
            "Validation failure: Field 'cookie_name' can only be specified when using the APP_COOKIE session persistence type.",
        )),
        _ => Ok(Some(json!({
            "type": kind, "cookie_name": cookie,
            "persistence_timeout": sp.int("persistence_timeout", 0, i64::from(i32::MAX))?,
            "persistence_granularity": sp.str("persistence_granularity")?,
        }))),
    }
}

fn apply_pool(p: &mut Pool, provider: &str, i: &Input) -> SimResult<()> {
    p.base.apply(i)?;
    if let Some(a) = i.one_of("lb_algorithm", ALGORITHMS)? {
        p.lb_algorithm = a;
    }
    if provider == "ovn" && p.lb_algorithm != "SOURCE_IP_PORT" {
        return Err(ovn_unsupported(format!("{} algorithm", p.lb_algorithm)));
    }
    if let Some(v) = i.obj.get("session_persistence") {
        p.session_persistence = session_persistence(v)?;
    }
    if let Some(b) = i.bool("tls_enabled")? {
        p.tls_enabled = b;
    }
    i.echo_into(&echo_keys(POOL_ECHO), &mut p.echo);
    Ok(())
}

/// A new pool of `lb_id`, optionally the default pool of `listener_id` (the caller links it).
pub(super) fn build_pool(
    st: &OctaviaState,
    lb_id: &str,
    listener_id: Option<&str>,
    i: &Input,
) -> SimResult<Pool> {
    let lb = st.lb(lb_id)?;
    let protocol = i.one_of("protocol", POOL_PROTOCOLS)?.ok_or_else(|| {
        bad("Invalid input for field/attribute protocol. Value: 'None'. Mandatory field missing.")
    })?;
    if !i.has("lb_algorithm") {
        return Err(bad(
            "Invalid input for field/attribute lb_algorithm. Value: 'None'. Mandatory field missing.",
        ));
    }
    if let Some(lid) = listener_id {
        let l = st.listener(lid)?;
        if l.default_pool_id.is_some() {
            return Err(SimError::conflict(
                SVC,
                "DuplicatePoolEntry",
                "This listener already has a default pool",
            ));
        }
        check_pool_protocol(&l.protocol, &protocol)?;
    }
    let mut p = Pool {
        base: Base::new(&lb.base.project_id),
        loadbalancer_id: lb_id.to_owned(),
        protocol,
        lb_algorithm: String::new(),
        session_persistence: None,
        tls_enabled: false,
        echo: Map::new(),
    };
    apply_pool(&mut p, &lb.provider, i)?;
    Ok(p)
}

pub(super) async fn list_pools(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    q: QueryParams,
    uri: Uri,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let st = &cloud.octavia;
    // The member references (most of a pool list's size: 500 per pool at 500 nodes) are added
    // to the pools of the page only, after filtering and paging; unless a filter names them,
    // then every pool is shown whole first, as the filters see it.
    let late = !q.0.iter().any(|(k, _)| k == "members" || k == "member_id");
    let refs = if late {
        PoolRefs::without_members(st, None)
    } else {
        PoolRefs::of(st, None)
    };
    let items = st
        .pools
        .iter()
        .map(|p| {
            if late {
                render_pool_without_members(p, &refs)
            } else {
                render_pool_with(p, &refs)
            }
        })
        .collect();
    // The page's pools in order, their `members` left empty until the ids are known.
    let mut page_ids: Vec<String> = Vec::new();
    let mut listed = list_response_then(&app, &ctx, &q, uri.path(), "pools", items, |mut v| {
        if late {
            page_ids.push(v["id"].as_str().unwrap_or_default().to_owned());
            if let Value::Object(m) = &mut v {
                m.insert("members".into(), Value::Array(Vec::new()));
            }
        }
        v
    })?;
    drop(refs);
    // Under the cloud's lock only the page's pools' member ids are copied (as strings, in one
    // pass over the members); they become `{"id": …}` objects once the lock is released, so a
    // large list does not hold up every other call.
    let mut ids: HashMap<&str, Vec<String>, IdHash> = page_ids
        .iter()
        .map(|id| (id.as_str(), Vec::new()))
        .collect();
    if !ids.is_empty() {
        for m in &st.members {
            if let Some(v) = ids.get_mut(m.pool_id.as_str()) {
                v.push(m.base.id.clone());
            }
        }
    }
    drop(cloud);
    if let Some(pools) = listed.get_mut("pools").and_then(Value::as_array_mut) {
        for (p, id) in pools.iter_mut().zip(&page_ids) {
            // (A `fields` selection without `members` left them out.)
            if let Some(Value::Array(refs)) = p.get_mut("members") {
                *refs = ids
                    .remove(id.as_str())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|id| json!({"id": id}))
                    .collect();
            }
        }
    }
    Ok(Json(listed))
}

pub(super) async fn create_pool(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    body: Bytes,
) -> SimResult<(StatusCode, Json<Value>)> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "pool", POOL_KEYS)?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &cloud.octavia;
    let listener_id = i.str("listener_id")?;
    let lb_id = match (&listener_id, i.str("loadbalancer_id")?) {
        (None, None) => {
            return Err(bad(
                "Validation failure: loadbalancer_id or listener_id must be specified.",
            ));
        }
        (Some(l), given) => {
            let lb = st.listener(l)?.loadbalancer_id.clone();
            if given.is_some_and(|g| g != lb) {
                return Err(bad(
                    "Validation failure: loadbalancer_id and listener_id don't match.",
                ));
            }
            lb
        }
        (None, Some(lb)) => lb,
    };
    check_project(&ctx, &i, &st.lb(&lb_id)?.base.project_id)?;
    let p = build_pool(st, &lb_id, listener_id.as_deref(), &i)?;
    let used = st
        .pools
        .iter()
        .filter(|x| x.base.project_id == p.base.project_id)
        .count();
    check_quota(cloud.quotas.pools, used, 1, "Pool")?;
    let st = &mut cloud.octavia;
    st.lock_lb(&lb_id, now)?;
    let pool_id = p.base.id.clone();
    st.pools.push(p);
    if let Some(lid) = listener_id {
        mark(&mut st.listeners, |l| l.base.id == lid, PENDING_UPDATE);
        if let Some(l) = st.listeners.iter_mut().find(|l| l.base.id == lid) {
            l.default_pool_id = Some(pool_id.clone());
        }
    }
    let v = render_pool(st.pool(&pool_id)?, st);
    Ok(wrap(StatusCode::CREATED, "pool", v))
}

pub(super) async fn show_pool(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let st = &cloud.octavia;
    let p = st.pool(&id)?;
    owned(&ctx, "Pool", p)?;
    Ok(Json(json!({"pool": render_pool(p, st)})))
}

pub(super) async fn update_pool(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "pool", &update_keys(POOL_KEYS, POOL_CREATE_ONLY))?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let mut p = st.pool(&id)?.clone();
    owned(&ctx, "Pool", &p)?;
    st.ensure_mutable(&p.loadbalancer_id)?;
    let provider = st.lb(&p.loadbalancer_id)?.provider.clone();
    apply_pool(&mut p, &provider, &i)?;
    st.lock_lb(&p.loadbalancer_id, now)?;
    let p = commit(&mut st.pools, p, PENDING_UPDATE);
    Ok(Json(json!({"pool": render_pool(&p, st)})))
}

/// Deleting a pool takes its members and health monitor with it and unsets it as a default pool.
pub(super) async fn delete_pool(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let p = st.pool(&id)?;
    owned(&ctx, "Pool", p)?;
    let lb_id = p.loadbalancer_id.clone();
    st.lock_lb(&lb_id, now)?;
    mark(&mut st.pools, |p| p.base.id == id, PENDING_DELETE);
    mark(&mut st.members, |m| m.pool_id == id, PENDING_DELETE);
    mark(&mut st.monitors, |m| m.pool_id == id, PENDING_DELETE);
    for l in st
        .listeners
        .iter_mut()
        .filter(|l| l.default_pool_id.as_ref() == Some(&id))
    {
        l.default_pool_id = None;
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------------------
// Members

/// NO_MONITOR without a health monitor on the pool; with one, ONLINE once it is provisioned.
pub(super) fn member_operating(m: &Member, st: &OctaviaState) -> &'static str {
    if !m.base.admin_state_up {
        "OFFLINE"
    } else if st.pool_monitor(&m.pool_id).is_none() {
        "NO_MONITOR"
    } else {
        m.base.operating("ONLINE")
    }
}

pub(super) fn render_member(m: &Member, st: &OctaviaState) -> Value {
    let mut j = m.base.render(member_operating(m, st), false);
    j.extend([
        ("address".into(), json!(m.address)),
        ("protocol_port".into(), json!(m.protocol_port)),
        ("subnet_id".into(), json!(m.subnet_id)),
        ("weight".into(), json!(m.weight)),
        ("backup".into(), json!(m.backup)),
        ("monitor_address".into(), json!(m.monitor_address)),
        ("monitor_port".into(), json!(m.monitor_port)),
        ("vnic_type".into(), json!("normal")),
    ]);
    Value::Object(j)
}

fn apply_member(m: &mut Member, i: &Input) -> SimResult<()> {
    m.base.apply(i)?;
    if let Some(w) = i.int("weight", 0, 256)? {
        m.weight = w;
    }
    if let Some(b) = i.bool("backup")? {
        m.backup = b;
    }
    if i.obj.contains_key("monitor_address") {
        m.monitor_address = i.str("monitor_address")?;
        if let Some(a) = &m.monitor_address {
            parse_ip("monitor_address", a)?;
        }
    }
    if i.obj.contains_key("monitor_port") {
        m.monitor_port = i.int("monitor_port", 1, 65535)?;
    }
    Ok(())
}

fn parse_ip(field: &str, a: &str) -> SimResult<IpAddr> {
    a.parse()
        .map_err(|_| invalid(field, &json!(a), "Value should be IPv4 or IPv6 format"))
}

fn duplicate_member(address: &str, port: i64) -> SimError {
    SimError::conflict(
        SVC,
        "DuplicateMemberEntry",
        format!(
            "Duplicate member: Another member on this pool is already using ip {address} on protocol_port {port}"
        ),
    )
}

/// A new member of `pool`; 409 when the pool already has one at that address and port.
pub(super) fn build_member(cloud: &Cloud, pool: &Pool, i: &Input) -> SimResult<Member> {
    build_member_checked(cloud, pool, i, |address, port| {
        cloud.octavia.members.iter().any(|m| {
            m.pool_id == pool.base.id
                && m.address == address
                && m.protocol_port == port
                && m.base.provisioning_status != PENDING_DELETE
        })
    })
}

/// [`build_member`], with the pool's duplicate check given: a caller that makes many members at
/// once knows the pool's members without a scan of every member of the cloud per new one.
pub(super) fn build_member_checked(
    cloud: &Cloud,
    pool: &Pool,
    i: &Input,
    taken: impl Fn(&str, i64) -> bool,
) -> SimResult<Member> {
    let address = i.required_str("address")?;
    parse_ip("address", &address)?;
    let port = i
        .int("protocol_port", 1, 65535)?
        .ok_or_else(|| bad("Invalid input for field/attribute protocol_port. Value: 'None'. Mandatory field missing."))?;
    let subnet_id = i.str("subnet_id")?;
    if let Some(s) = &subnet_id
        && crate::neutron::subnet_network(cloud, s).is_none()
    {
        return Err(bad(format!("Validation failure: Subnet {s} not found.")));
    }
    if taken(&address, port) {
        return Err(duplicate_member(&address, port));
    }
    let mut m = Member {
        base: Base::new(&pool.base.project_id),
        loadbalancer_id: pool.loadbalancer_id.clone(),
        pool_id: pool.base.id.clone(),
        address,
        protocol_port: port,
        subnet_id,
        weight: 1,
        backup: false,
        monitor_address: None,
        monitor_port: None,
    };
    apply_member(&mut m, i)?;
    Ok(m)
}

pub(super) async fn list_members(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(pool_id): Path<String>,
    q: QueryParams,
    uri: Uri,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let st = &cloud.octavia;
    owned(&ctx, "Pool", st.pool(&pool_id)?)?;
    let items = st
        .members
        .iter()
        .filter(|m| m.pool_id == pool_id)
        .map(|m| render_member(m, st))
        .collect();
    list_response(&app, &ctx, &q, uri.path(), "members", items).map(Json)
}

fn member_quota(cloud: &Cloud, project: &str, adding: usize) -> SimResult<()> {
    // Unlimited (Octavia's default): no scan of every member of the cloud.
    if cloud.quotas.members < 0 {
        return Ok(());
    }
    let used = cloud
        .octavia
        .members
        .iter()
        .filter(|m| m.base.project_id == project)
        .count();
    check_quota(cloud.quotas.members, used, adding, "Member")
}

pub(super) async fn create_member(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(pool_id): Path<String>,
    body: Bytes,
) -> SimResult<(StatusCode, Json<Value>)> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "member", MEMBER_KEYS)?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let pool = cloud.octavia.pool(&pool_id)?;
    owned(&ctx, "Pool", pool)?;
    check_project(&ctx, &i, &pool.base.project_id)?;
    let m = build_member(&cloud, pool, &i)?;
    member_quota(&cloud, &m.base.project_id, 1)?;
    let st = &mut cloud.octavia;
    st.lock_lb(&m.loadbalancer_id, now)?;
    let v = render_member(&m, st);
    st.members.push(m);
    Ok(wrap(StatusCode::CREATED, "member", v))
}

/// `PUT /pools/{id}/members`: makes the pool's members the given list (matched by address and port),
/// creating, updating and deleting in one PENDING_UPDATE cycle. 202 with an empty body.
pub(super) async fn batch_members(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(pool_id): Path<String>,
    q: QueryParams,
    body: Bytes,
) -> SimResult<StatusCode> {
    let body = parse_body(&body)?;
    let specs = body
        .get("members")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("Missing mandatory field/attribute: members"))?;
    let additive_only = q.bool("additive_only").unwrap_or(false);
    let mut cloud = app.cloud();
    let now = cloud.now;
    let pool = cloud.octavia.pool(&pool_id)?.clone();
    owned(&ctx, "Pool", &pool)?;
    cloud.octavia.ensure_mutable(&pool.loadbalancer_id)?;
    let live: Vec<Member> = cloud
        .octavia
        .members
        .iter()
        .filter(|m| m.pool_id == pool_id && m.base.provisioning_status != PENDING_DELETE)
        .cloned()
        .collect();
    let (mut updates, mut creates, mut seen) = (Vec::new(), Vec::new(), Vec::new());
    for spec in specs {
        let obj = spec
            .as_object()
            .ok_or_else(|| invalid("members", spec, "Wrong type. Expected an object"))?;
        let i = Input::object(obj, "member", MEMBER_KEYS)?;
        let address = i.required_str("address")?;
        let port = i.int("protocol_port", 1, 65535)?.unwrap_or(0);
        if seen.contains(&(address.clone(), port)) {
            return Err(bad(format!(
                "Validation failure: Duplicate member entries for address {address} and port {port}."
            )));
        }
        seen.push((address.clone(), port));
        match live
            .iter()
            .find(|m| m.address == address && m.protocol_port == port)
        {
            Some(existing) => {
                let mut m = existing.clone();
                apply_member(
                    &mut m,
                    &Input::object(obj, "member", &update_keys(MEMBER_KEYS, &[]))?,
                )?;
                updates.push(m);
            }
            // Not among the pool's live members (`live`), and not repeated in the request (`seen`).
            None => creates.push(build_member_checked(&cloud, &pool, &i, |_, _| false)?),
        }
    }
    member_quota(&cloud, &pool.base.project_id, creates.len())?;
    let st = &mut cloud.octavia;
    st.lock_lb(&pool.loadbalancer_id, now)?;
    // One pass over the cloud's members for the whole batch, not one per updated member.
    let mut updates: HashMap<String, Member> = updates
        .into_iter()
        .map(|m| (m.base.id.clone(), m))
        .collect();
    for slot in st.members.iter_mut() {
        if let Some(mut m) = updates.remove(&slot.base.id) {
            m.base.touch(PENDING_UPDATE);
            *slot = m;
        }
    }
    if !additive_only {
        let keep = |m: &Member| seen.contains(&(m.address.clone(), m.protocol_port));
        mark(
            &mut st.members,
            |m| m.pool_id == pool_id && m.base.provisioning_status != PENDING_DELETE && !keep(m),
            PENDING_DELETE,
        );
    }
    st.members.extend(creates);
    Ok(StatusCode::ACCEPTED)
}

pub(super) async fn show_member(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((pool_id, id)): Path<(String, String)>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let st = &cloud.octavia;
    let m = st.member(&pool_id, &id)?;
    owned(&ctx, "Member", m)?;
    Ok(Json(json!({"member": render_member(m, st)})))
}

pub(super) async fn update_member(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((pool_id, id)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_body(&body)?;
    let i = Input::of(
        &body,
        "member",
        &update_keys(MEMBER_KEYS, MEMBER_CREATE_ONLY),
    )?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let mut m = st.member(&pool_id, &id)?.clone();
    owned(&ctx, "Member", &m)?;
    st.ensure_mutable(&m.loadbalancer_id)?;
    apply_member(&mut m, &i)?;
    st.lock_lb(&m.loadbalancer_id, now)?;
    let m = commit(&mut st.members, m, PENDING_UPDATE);
    Ok(Json(json!({"member": render_member(&m, st)})))
}

pub(super) async fn delete_member(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((pool_id, id)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let m = st.member(&pool_id, &id)?;
    owned(&ctx, "Member", m)?;
    let lb_id = m.loadbalancer_id.clone();
    st.lock_lb(&lb_id, now)?;
    mark(&mut st.members, |m| m.base.id == id, PENDING_DELETE);
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------------------
// Health monitors

pub(super) fn render_monitor(h: &Monitor) -> Value {
    let mut m = h.base.render(h.base.operating("ONLINE"), false);
    m.extend([
        ("type".into(), json!(h.kind)),
        ("delay".into(), json!(h.delay)),
        ("timeout".into(), json!(h.timeout)),
        ("max_retries".into(), json!(h.max_retries)),
        ("max_retries_down".into(), json!(h.max_retries_down)),
        ("http_method".into(), json!(h.http_method)),
        ("url_path".into(), json!(h.url_path)),
        ("expected_codes".into(), json!(h.expected_codes)),
        ("pools".into(), json!([{"id": h.pool_id}])),
    ]);
    render_echo(&mut m, &h.echo, MONITOR_ECHO);
    Value::Object(m)
}

fn expected_codes_ok(s: &str) -> bool {
    let code = |c: &str| c.len() == 3 && c.chars().all(|x| x.is_ascii_digit());
    s.split(',').all(|part| match part.split_once('-') {
        Some((a, b)) => code(a) && code(b) && a <= b,
        None => code(part),
    })
}

fn apply_monitor(h: &mut Monitor, i: &Input) -> SimResult<()> {
    h.base.apply(i)?;
    let max = i64::from(i32::MAX);
    if let Some(n) = i.int("delay", 0, max)? {
        h.delay = n;
    }
    if let Some(n) = i.int("timeout", 0, max)? {
        h.timeout = n;
    }
    if let Some(n) = i.int("max_retries", 1, 10)? {
        h.max_retries = n;
    }
    if let Some(n) = i.int("max_retries_down", 1, 10)? {
        h.max_retries_down = n;
    }
    let http = matches!(h.kind.as_str(), "HTTP" | "HTTPS");
    for key in ["http_method", "url_path", "expected_codes"] {
        if i.has(key) && !http {
            return Err(bad(format!(
                "Validation failure: {key} is not a valid option for health monitors of type {}",
                h.kind
            )));
        }
    }
    if let Some(v) = i.one_of("http_method", HTTP_METHODS)? {
        h.http_method = Some(v);
    }
    if let Some(v) = i.str("url_path")? {
        if !v.starts_with('/') {
            return Err(invalid(
                "url_path",
                &json!(v),
                "Value should be a valid URL path",
            ));
        }
        h.url_path = Some(v);
    }
    if let Some(v) = i.str("expected_codes")? {
        if !expected_codes_ok(&v) {
            return Err(invalid(
                "expected_codes",
                &json!(v),
                "Value should match the pattern ^(\\d{3}(\\s*,\\s*\\d{3})*)$|^(\\d{3}-\\d{3})$",
            ));
        }
        h.expected_codes = Some(v);
    }
    i.echo_into(&echo_keys(MONITOR_ECHO), &mut h.echo);
    if h.timeout > h.delay {
        return Err(bad(
            "Validation failure: The timeout value must be less than or equal to the delay value.",
        ));
    }
    Ok(())
}

/// A new health monitor of `pool` (one per pool).
pub(super) fn build_monitor(st: &OctaviaState, pool: &Pool, i: &Input) -> SimResult<Monitor> {
    let kind = i.one_of("type", MONITOR_TYPES)?.ok_or_else(|| {
        bad("Invalid input for field/attribute type. Value: 'None'. Mandatory field missing.")
    })?;
    for key in ["delay", "timeout", "max_retries"] {
        if !i.has(key) {
            return Err(bad(format!(
                "Invalid input for field/attribute {key}. Value: 'None'. Mandatory field missing."
            )));
        }
    }
    if st.pool_monitor(&pool.base.id).is_some() {
        return Err(SimError::conflict(
            SVC,
            "DuplicateHealthMonitor",
            "This pool already has a health monitor",
        ));
    }
    let udp_ok = matches!(kind.as_str(), "UDP-CONNECT" | "SCTP" | "HTTP" | "TCP");
    if pool.protocol == "UDP" && !udp_ok {
        return Err(bad(format!(
            "Validation failure: The associated pool protocol is UDP, so only a UDP-CONNECT, SCTP, HTTP or TCP type health monitor is supported, not {kind}."
        )));
    }
    if kind == "UDP-CONNECT" && pool.protocol != "UDP" {
        return Err(bad(
            "Validation failure: The UDP-CONNECT type is only supported for pools of type UDP.",
        ));
    }
    let http = matches!(kind.as_str(), "HTTP" | "HTTPS");
    let mut h = Monitor {
        base: Base::new(&pool.base.project_id),
        loadbalancer_id: pool.loadbalancer_id.clone(),
        pool_id: pool.base.id.clone(),
        kind,
        delay: 0,
        timeout: 0,
        max_retries: 1,
        max_retries_down: 3,
        http_method: http.then(|| "GET".into()),
        url_path: http.then(|| "/".into()),
        expected_codes: http.then(|| "200".into()),
        echo: Map::new(),
    };
    apply_monitor(&mut h, i)?;
    Ok(h)
}

pub(super) async fn list_monitors(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    q: QueryParams,
    uri: Uri,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let items = cloud.octavia.monitors.iter().map(render_monitor).collect();
    list_response(&app, &ctx, &q, uri.path(), "healthmonitors", items).map(Json)
}

pub(super) async fn create_monitor(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    body: Bytes,
) -> SimResult<(StatusCode, Json<Value>)> {
    let body = parse_body(&body)?;
    let i = Input::of(&body, "healthmonitor", MONITOR_KEYS)?;
    let pool_id = i.required_str("pool_id")?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &cloud.octavia;
    let pool = st.pool(&pool_id)?;
    check_project(&ctx, &i, &pool.base.project_id)?;
    let h = build_monitor(st, pool, &i)?;
    let used = st
        .monitors
        .iter()
        .filter(|x| x.base.project_id == h.base.project_id)
        .count();
    check_quota(cloud.quotas.health_monitors, used, 1, "Health Monitor")?;
    let st = &mut cloud.octavia;
    st.lock_lb(&h.loadbalancer_id, now)?;
    let v = render_monitor(&h);
    st.monitors.push(h);
    Ok(wrap(StatusCode::CREATED, "healthmonitor", v))
}

pub(super) async fn show_monitor(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let h = cloud.octavia.monitor(&id)?;
    owned(&ctx, "Health Monitor", h)?;
    Ok(Json(json!({"healthmonitor": render_monitor(h)})))
}

pub(super) async fn update_monitor(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_body(&body)?;
    let i = Input::of(
        &body,
        "healthmonitor",
        &update_keys(MONITOR_KEYS, MONITOR_CREATE_ONLY),
    )?;
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let mut h = st.monitor(&id)?.clone();
    owned(&ctx, "Health Monitor", &h)?;
    st.ensure_mutable(&h.loadbalancer_id)?;
    apply_monitor(&mut h, &i)?;
    st.lock_lb(&h.loadbalancer_id, now)?;
    let h = commit(&mut st.monitors, h, PENDING_UPDATE);
    Ok(Json(json!({"healthmonitor": render_monitor(&h)})))
}

pub(super) async fn delete_monitor(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let now = cloud.now;
    let st = &mut cloud.octavia;
    let h = st.monitor(&id)?;
    owned(&ctx, "Health Monitor", h)?;
    let lb_id = h.loadbalancer_id.clone();
    st.lock_lb(&lb_id, now)?;
    mark(&mut st.monitors, |h| h.base.id == id, PENDING_DELETE);
    Ok(StatusCode::NO_CONTENT)
}
