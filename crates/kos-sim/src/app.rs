//! The shared state of one simulator and the middleware every request passes: request log and counters,
//! per-call latency, rate limits, fault injection and token validation.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, SimTime};
use crate::config::{LatencyModel, SimConfig};
use crate::error::SimError;
use crate::faults::FaultEngine;
use crate::guests::GuestRuntime;
use crate::service::Service;
use crate::state::Cloud;

/// Everything one running simulator holds. Locks are never held across an `.await`.
pub struct App {
    pub cfg: SimConfig,
    pub clock: Clock,
    /// `http://127.0.0.1:<port>`: used for catalog URLs and links.
    pub base_url: String,
    /// `http://127.0.0.1:<port>`: the CONNECT proxy into the clusters' API endpoints ([`crate::proxy`]).
    pub proxy_url: String,
    cloud: Mutex<Cloud>,
    pub faults: Mutex<FaultEngine>,
    pub obs: Mutex<Observations>,
    /// The latency model in force: the config's until `PUT /_sim/latency` changes it.
    latency: Mutex<LatencyModel>,
    /// What runs inside the servers, when attached ([`crate::Sim::attach_guests`]).
    guests: OnceLock<Arc<dyn GuestRuntime>>,
}

pub type SharedApp = Arc<App>;

impl App {
    pub fn new(cfg: SimConfig, base_url: String, proxy_url: String, mut cloud: Cloud) -> Self {
        let clock = Clock::resumed(cfg.time_scale, cloud.now);
        cloud.epoch = Some(clock.epoch().into());
        let mut faults = FaultEngine::new(cfg.seed);
        for (svc, rate) in &cfg.rate_limits {
            faults.set_rate_limit(*svc, Some(*rate));
        }
        let mut bad = Vec::new();
        for rule in cfg.faults.clone() {
            if let Err(e) = faults.add(rule) {
                bad.push(e.to_string());
            }
        }
        for e in bad {
            tracing::warn!("ignoring fault rule: {e}");
        }
        App {
            latency: Mutex::new(cfg.latency),
            cfg,
            clock,
            base_url,
            proxy_url,
            cloud: Mutex::new(cloud),
            faults: Mutex::new(faults),
            obs: Mutex::new(Observations::default()),
            guests: OnceLock::new(),
        }
    }

    /// Attaches a guest runtime: from now on servers boot through it (see [`crate::guests`]).
    /// Servers that are already ACTIVE keep whatever the runtime restored for them. Returns `false`
    /// when one was attached before.
    pub fn attach_guests(&self, rt: Arc<dyn GuestRuntime>) -> bool {
        if self.guests.set(rt).is_err() {
            return false;
        }
        let mut guard = self.cloud.lock().unwrap_or_else(|p| p.into_inner());
        guard.guests.attached = true;
        true
    }

    /// The attached guest runtime.
    pub fn guests(&self) -> Option<&Arc<dyn GuestRuntime>> {
        self.guests.get()
    }

    /// The cloud's state, advanced to the current simulated time (resources whose deadline passed change
    /// state now: BUILD → ACTIVE, PENDING_CREATE → ACTIVE, creating → available, ...).
    pub fn cloud(&self) -> MutexGuard<'_, Cloud> {
        let mut guard = self.cloud.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now();
        let latency = self.latency();
        if latency == self.cfg.latency {
            guard.advance(now, &self.cfg);
        } else {
            // Only while `/_sim/latency` holds a change: the state machines read the config's.
            let cfg = SimConfig {
                latency,
                ..self.cfg.clone()
            };
            guard.advance(now, &cfg);
        }
        if let Some(rt) = self.guests.get() {
            crate::guests::drive(rt.as_ref(), &mut guard, now, &self.cfg.region);
        }
        guard
    }

    pub fn now(&self) -> SimTime {
        self.clock.now()
    }

    /// Catalog URL of a service (what clients are told to use).
    pub fn endpoint_url(&self, svc: Service, project_id: &str) -> String {
        let b = &self.base_url;
        match svc {
            Service::Identity => format!("{b}/identity"),
            Service::Compute => format!("{b}/compute/v2.1"),
            Service::BlockStorage => format!("{b}/volume/v3/{project_id}"),
            other => format!("{b}{}", other.prefix()),
        }
    }

    pub fn observations(&self) -> MutexGuard<'_, Observations> {
        self.obs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The latency model in force (see `/_sim/latency`).
    pub fn latency(&self) -> LatencyModel {
        *self.latency.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `model` in force from now on; pending resources settle after its durations.
    pub fn set_latency(&self, model: LatencyModel) {
        *self.latency.lock().unwrap_or_else(|p| p.into_inner()) = model;
    }

    pub fn fault_engine(&self) -> MutexGuard<'_, FaultEngine> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Who is calling: put into request extensions by [`authenticate`] for every cloud service but Keystone.
#[derive(Debug, Clone)]
pub struct AuthCtx {
    pub user_id: String,
    pub project_id: String,
    pub roles: Vec<String>,
}

impl AuthCtx {
    pub fn is_admin(&self) -> bool {
        self.roles.iter().any(|r| r == "admin")
    }
}

/// One logged request. Bodies are never logged: they carry passwords and user_data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    pub at: f64,
    pub service: Option<Service>,
    pub method: String,
    pub path: String,
    /// `GET /network/v2.0/ports/{id}`: the path with ids replaced, for per-operation counters.
    pub operation: String,
    /// The raw query string (`fields=id&fields=provisioning_status`): list filters and field
    /// selections, never a secret (credentials travel in bodies and headers).
    #[serde(default)]
    pub query: String,
    pub status: u16,
    pub fault_rule: Option<u64>,
    pub real_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServiceCounters {
    pub calls: u64,
    pub by_status: BTreeMap<u16, u64>,
    pub by_operation: BTreeMap<String, u64>,
    pub faults_injected: u64,
    pub rate_limited: u64,
}

#[derive(Debug, Default)]
pub struct Observations {
    pub log: VecDeque<LogEntry>,
    pub counters: BTreeMap<Service, ServiceCounters>,
    /// Every request by a token of an application credential with access rules, by credential id,
    /// with the rules that allowed it: what a test of a credential's rules reads to prove each
    /// rule needed and each request allowed. The newest [`LOG_CAPACITY`] per credential.
    pub rule_checks: BTreeMap<String, VecDeque<crate::keystone::RuleCheck>>,
    seq: u64,
}

const LOG_CAPACITY: usize = 20_000;

impl Observations {
    fn record(&mut self, mut e: LogEntry, rate_limited: bool) {
        self.seq += 1;
        e.seq = self.seq;
        // The admin API is the test's own channel, not a cloud call: logged, never counted.
        if let Some(svc) = e.service.filter(|s| *s != Service::Admin) {
            let c = self.counters.entry(svc).or_default();
            c.calls += 1;
            *c.by_status.entry(e.status).or_default() += 1;
            *c.by_operation.entry(e.operation.clone()).or_default() += 1;
            if e.fault_rule.is_some() {
                c.faults_injected += 1;
            }
            if rate_limited {
                c.rate_limited += 1;
            }
        }
        if self.log.len() >= LOG_CAPACITY {
            self.log.pop_front();
        }
        self.log.push_back(e);
    }

    pub fn record_rule_check(&mut self, c: crate::keystone::RuleCheck) {
        let checks = self.rule_checks.entry(c.credential.clone()).or_default();
        if checks.len() >= LOG_CAPACITY {
            checks.pop_front();
        }
        checks.push_back(c);
    }

    pub fn reset(&mut self) {
        self.log.clear();
        self.counters.clear();
        self.rule_checks.clear();
    }
}

/// A call that selects a few `fields` is another, lighter operation than the whole list (a poll of
/// many load balancers' states against an observation of them): `?fields` is added to count it
/// apart.
fn operation_with_fields(mut operation: String, query: &str) -> String {
    if query.split('&').any(|kv| kv.starts_with("fields=")) {
        operation.push_str("?fields");
    }
    operation
}

/// `/network/v2.0/ports/3f1c…/tags/x` → `/network/v2.0/ports/{id}/tags/x`. Ids are UUIDs, 32-hex
/// Keystone ids, or the Cinder project segment.
pub fn operation_of(method: &str, path: &str) -> String {
    let templ: Vec<String> = path
        .split('/')
        .map(|seg| {
            let hexish = seg.len() >= 32 && seg.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
            if hexish {
                "{id}".to_owned()
            } else {
                seg.to_owned()
            }
        })
        .collect();
    format!("{method} {}", templ.join("/"))
}

/// Outermost middleware: latency, rate limit, faults, and the log entry for every request.
pub async fn gate(State(app): State<SharedApp>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let service = Service::from_path(&path);
    let cloud_service = service.filter(|s| *s != Service::Admin);

    if cloud_service.is_some() {
        let lat = app.latency().per_call_secs;
        if lat > 0.0 {
            tokio::time::sleep(app.clock.real(lat)).await;
        }
    }

    // A rule may match the body: read it first (requests are small JSON documents).
    let (req, body) = if cloud_service.is_some() && app.fault_engine().needs_body() {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, 16 << 20)
            .await
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        (Request::from_parts(parts, Body::from(bytes)), Some(text))
    } else {
        (req, None)
    };
    let mut fault_rule = None;
    let mut rate_limited = false;
    let decision = cloud_service.and_then(|svc| {
        let mut f = app.fault_engine();
        if let Some(retry) = f.rate_limited(svc, app.now()) {
            rate_limited = true;
            return Some(Err(SimError::new(
                svc,
                StatusCode::TOO_MANY_REQUESTS,
                "RateLimited",
                "Rate limit exceeded",
            )
            .with_retry_after(retry)));
        }
        f.check_with_body(&method, &path, body.as_deref()).map(Ok)
    });

    let resp = match decision {
        Some(Err(limited)) => limited.into_response(),
        Some(Ok(hit)) if hit.build_error => {
            fault_rule = Some(hit.rule_id);
            fail_build(&app, next.run(req).await, hit.status, &hit.message).await
        }
        Some(Ok(hit)) => {
            fault_rule = Some(hit.rule_id);
            let svc = cloud_service.unwrap_or(Service::Admin);
            let status =
                StatusCode::from_u16(hit.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut err = SimError::new(svc, status, "InjectedFault", hit.message.clone());
            if let Some(r) = hit.retry_after {
                err = err.with_retry_after(r);
            }
            if hit.after_side_effect {
                // The cloud did the work; the client never hears about it.
                let _ = next.run(req).await;
            }
            err.into_response()
        }
        None => next.run(req).await,
    };

    let entry = LogEntry {
        seq: 0,
        at: app.now().0,
        service,
        operation: operation_with_fields(operation_of(&method, &path), &query),
        method,
        path,
        query,
        status: resp.status().as_u16(),
        fault_rule,
        real_ms: started.elapsed().as_secs_f64() * 1000.0,
    };
    tracing::debug!(target: "kos_sim::request", method = %entry.method, path = %entry.path, status = entry.status, "request");
    app.observations().record(entry, rate_limited);
    let mut resp = resp;
    // The cloud's clock, as a real cloud's web server sends it: this one runs at the time scale, so
    // a client that times its waits by the cloud's clock sees it run fast.
    let date = chrono::DateTime::<chrono::Utc>::from(app.clock.wall())
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    if let Ok(v) = axum::http::HeaderValue::from_str(&date) {
        resp.headers_mut().insert(axum::http::header::DATE, v);
    }
    resp
}

/// A server create that Nova accepted and whose build then fails: the server in the response goes to
/// ERROR with `message` as its fault. Any other response passes unchanged.
async fn fail_build(app: &SharedApp, resp: Response, code: u16, message: &str) -> Response {
    if !resp.status().is_success() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let id = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["server"]["id"].as_str().map(str::to_owned));
    if let Some(id) = id {
        let message = message.replace("{id}", &id);
        crate::nova::fail_build(&mut app.cloud(), &id, code, &message);
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// Per-service middleware, the service's keystonemiddleware: a valid, unexpired `X-Auth-Token`
/// whose application credential's access rules (if any) allow this request, or the service's own
/// 401.
pub async fn authenticate(
    State((app, svc)): State<(SharedApp, Service)>,
    mut req: Request,
    next: Next,
) -> Response {
    match caller(&app, svc, &req) {
        Some(ctx) => {
            req.extensions_mut().insert(ctx);
            next.run(req).await
        }
        None => SimError::unauthorized(svc).into_response(),
    }
}

/// Who `req` comes from, as `svc`'s keystonemiddleware says: `None` for no token, a token that is
/// invalid or expired, or one whose application credential's access rules do not allow the request
/// (each check recorded).
pub(crate) fn caller(app: &SharedApp, svc: Service, req: &Request) -> Option<AuthCtx> {
    let token = req
        .headers()
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())?;
    let service_type = (!app.cfg.no_service_type.contains(&svc)).then(|| svc.catalog_type());
    let now = app.now();
    let cloud = app.cloud();
    let (method, path) = (req.method().as_str(), req.uri().path());
    let ctx = cloud
        .keystone
        .authorize(token, now, service_type, method, path);
    let check = cloud
        .keystone
        .rule_check(token, now, service_type, method, path);
    drop(cloud);
    if let Some(c) = check {
        app.observations().record_rule_check(c);
    }
    ctx
}

/// Adds `x-openstack-request-id` (and Nova's `x-compute-request-id`) to every response, as the real
/// services do; clients log it.
pub async fn request_id(req: Request<Body>, next: Next) -> Response {
    let compute = req.uri().path().starts_with("/compute");
    let mut resp = next.run(req).await;
    let id = format!("req-{}", crate::ids::uuid());
    if let Ok(v) = HeaderValue::from_str(&id) {
        if compute {
            resp.headers_mut().insert("x-compute-request-id", v.clone());
        }
        resp.headers_mut().insert("x-openstack-request-id", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_template_ids() {
        assert_eq!(
            operation_of(
                "GET",
                "/network/v2.0/ports/3f1c2d4e-0000-4000-8000-000000000001/tags"
            ),
            "GET /network/v2.0/ports/{id}/tags"
        );
        assert_eq!(
            operation_of("GET", "/volume/v3/0123456789abcdef0123456789abcdef/volumes"),
            "GET /volume/v3/{id}/volumes"
        );
    }
}
