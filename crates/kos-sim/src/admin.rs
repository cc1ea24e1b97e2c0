//! `/_sim/…`: the simulator's own admin API (not OpenStack): request log, counters, fault rules, rate
//! limits, token expiry, quotas, state snapshot, the simulated clusters' API endpoints and the proxy into them. Unauthenticated: the simulator listens on loopback only.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::SharedApp;
use crate::config::{LatencyModel, Quotas};
use crate::error::{SimError, SimResult};
use crate::faults::FaultRule;
use crate::query::QueryParams;
use crate::service::Service;

pub fn router() -> Router<SharedApp> {
    Router::new()
        .route("/_sim/log", get(log))
        .route("/_sim/counters", get(counters).delete(reset_counters))
        .route(
            "/_sim/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route("/_sim/faults/{id}", delete(remove_fault))
        .route("/_sim/rate-limits", get(rate_limits).put(set_rate_limits))
        .route("/_sim/tokens/expire", post(expire_tokens))
        .route(
            "/_sim/internet",
            get(get_internet).put(put_internet).delete(clear_internet),
        )
        .route(
            "/_sim/latency",
            get(get_latency).put(put_latency).delete(reset_latency),
        )
        .route("/_sim/quotas", get(get_quotas).put(put_quotas))
        .route("/_sim/state", get(state))
        .route("/_sim/clock", get(clock))
        .route("/_sim/kube-endpoints", get(kube_endpoints))
        .route("/_sim/proxy", get(proxy))
        .route("/_sim/clusters", get(crate::admin_clusters::clusters))
        .route("/_sim/metadata", get(crate::admin_clusters::metadata))
        .route("/_sim/at-rest", get(crate::admin_clusters::at_rest))
        .route("/_sim/servers/{id}/error", post(server_error))
        .route("/_sim/servers/{id}/console", post(console_line))
        .route("/_sim/loadbalancers/{id}/error", post(lb_error))
        .route("/_sim/app-credentials/{id}/expiry", post(app_cred_expiry))
}

fn bad(msg: impl Into<String>) -> SimError {
    SimError::bad_request(Service::Admin, msg)
}

/// `?since=<seq>` returns only newer entries; `?service=network` filters.
async fn log(State(app): State<SharedApp>, q: QueryParams) -> Json<Value> {
    let since: u64 = q.get("since").and_then(|v| v.parse().ok()).unwrap_or(0);
    let svc = q.get("service").and_then(Service::parse);
    let obs = app.observations();
    let entries: Vec<_> = obs
        .log
        .iter()
        .filter(|e| e.seq > since && (svc.is_none() || e.service == svc))
        .cloned()
        .collect();
    Json(json!({"entries": entries}))
}

async fn counters(State(app): State<SharedApp>) -> Json<Value> {
    let obs = app.observations();
    Json(json!({"services": obs.counters}))
}

async fn reset_counters(State(app): State<SharedApp>) -> StatusCode {
    app.observations().reset();
    StatusCode::NO_CONTENT
}

async fn list_faults(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"faults": app.fault_engine().rules()}))
}

async fn add_fault(
    State(app): State<SharedApp>,
    Json(rule): Json<FaultRule>,
) -> SimResult<(StatusCode, Json<Value>)> {
    let id = app
        .fault_engine()
        .add(rule)
        .map_err(|e| bad(e.to_string()))?;
    Ok((StatusCode::CREATED, Json(json!({"id": id}))))
}

async fn clear_faults(State(app): State<SharedApp>) -> StatusCode {
    app.fault_engine().clear();
    StatusCode::NO_CONTENT
}

async fn remove_fault(State(app): State<SharedApp>, Path(id): Path<u64>) -> SimResult<StatusCode> {
    if app.fault_engine().remove(id) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(SimError::not_found(
            Service::Admin,
            format!("no fault rule {id}"),
        ))
    }
}

async fn rate_limits(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"rate_limits": app.fault_engine().rate_limits()}))
}

/// `{"network": 50, "compute": null}`: requests per cloud second, `null` removes the limit.
async fn set_rate_limits(
    State(app): State<SharedApp>,
    Json(body): Json<BTreeMap<String, Option<f64>>>,
) -> SimResult<StatusCode> {
    let mut f = app.fault_engine();
    for (name, rate) in body {
        let svc = Service::parse(&name).ok_or_else(|| bad(format!("unknown service {name:?}")))?;
        f.set_rate_limit(svc, rate);
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn expire_tokens(State(app): State<SharedApp>) -> StatusCode {
    app.cloud().keystone.expire_all_tokens();
    StatusCode::NO_CONTENT
}

async fn get_internet(State(app): State<SharedApp>) -> Json<crate::state::Internet> {
    Json(app.cloud().internet.clone())
}

/// `{"unreachable": ["^https://raw\\.githubusercontent\\.com/"]}`: the servers' downloads of matching
/// URLs fail until the list changes (an outage of a mirror, a proxy, the uplink); `"down": […]`
/// makes the host fail a proxy's request too.
async fn put_internet(
    State(app): State<SharedApp>,
    Json(internet): Json<crate::state::Internet>,
) -> SimResult<Json<crate::state::Internet>> {
    for r in internet.unreachable.iter().chain(&internet.down) {
        regex::Regex::new(r).map_err(|e| bad(format!("invalid URL regex {r:?}: {e}")))?;
    }
    app.cloud().internet = internet.clone();
    Ok(Json(internet))
}

async fn clear_internet(State(app): State<SharedApp>) -> StatusCode {
    app.cloud().internet = crate::state::Internet::default();
    StatusCode::NO_CONTENT
}

async fn get_latency(State(app): State<SharedApp>) -> Json<LatencyModel> {
    Json(app.latency())
}

/// Partial update of the latency model in force: `{"lb_create_secs": 600}` makes Octavia slow from now
/// on (a load balancer already pending settles 600 s after it began). Durations are cloud seconds.
async fn put_latency(
    State(app): State<SharedApp>,
    Json(patch): Json<serde_json::Map<String, Value>>,
) -> SimResult<Json<LatencyModel>> {
    let mut v = serde_json::to_value(app.latency()).map_err(|e| bad(e.to_string()))?;
    for (k, n) in patch {
        let ok = n.as_f64().is_some_and(|f| f.is_finite() && f >= 0.0);
        if !ok {
            return Err(bad(format!(
                "latency {k}: {n} is not a duration (cloud seconds, >= 0)"
            )));
        }
        if let Some(obj) = v.as_object_mut() {
            obj.insert(k, n);
        }
    }
    let model: LatencyModel =
        serde_json::from_value(v).map_err(|e| bad(format!("latency: {e}")))?;
    app.set_latency(model);
    Ok(Json(model))
}

/// Back to the configured latency model.
async fn reset_latency(State(app): State<SharedApp>) -> StatusCode {
    app.set_latency(app.cfg.latency);
    StatusCode::NO_CONTENT
}

async fn get_quotas(State(app): State<SharedApp>) -> Json<Quotas> {
    Json(app.cloud().quotas.clone())
}

#[derive(Deserialize)]
struct QuotaPatch(BTreeMap<String, i64>);

/// Partial update: `{"instances": 2, "floating_ips": 0}`.
async fn put_quotas(
    State(app): State<SharedApp>,
    Json(QuotaPatch(patch)): Json<QuotaPatch>,
) -> SimResult<Json<Quotas>> {
    let mut cloud = app.cloud();
    let mut v = serde_json::to_value(&cloud.quotas).map_err(|e| bad(e.to_string()))?;
    for (k, n) in patch {
        if v.get(&k).is_none() {
            return Err(bad(format!("unknown quota {k:?}")));
        }
        v[&k] = json!(n);
    }
    cloud.quotas = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
    Ok(Json(cloud.quotas.clone()))
}

async fn state(State(app): State<SharedApp>) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    serde_json::to_value(&*cloud)
        .map(Json)
        .map_err(|e| bad(e.to_string()))
}

/// The simulated clusters' API endpoints and the local addresses that reach them from this
/// machine: `[{"endpoint": "172.24.4.10:6443", "local": "127.0.0.1:41234"}]` (empty without a guest
/// runtime).
async fn kube_endpoints(State(app): State<SharedApp>) -> Json<Value> {
    // Driven first, so that what the runtime lists is as of now.
    drop(app.cloud());
    let list = app
        .guests()
        .map(|rt| rt.kube_endpoints())
        .unwrap_or_default();
    Json(json!(list))
}

/// The CONNECT proxy into the clusters' API endpoints (see [`crate::proxy`]):
/// `{"url": "http://127.0.0.1:41235"}`, for a test that only has the base URL.
async fn proxy(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"url": app.proxy_url}))
}

async fn clock(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"now": app.now().0, "time_scale": app.clock.scale()}))
}

#[derive(Deserialize)]
struct Message {
    message: String,
}

/// Puts a server into ERROR with this fault message (a hypervisor failure, as Nova would report it).
async fn server_error(
    State(app): State<SharedApp>,
    Path(id): Path<String>,
    Json(m): Json<Message>,
) -> SimResult<StatusCode> {
    if crate::nova::force_server_error(&mut app.cloud(), &id, &m.message) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(SimError::not_found(
            Service::Admin,
            format!("no server {id}"),
        ))
    }
}

/// Appends a line to a server's console log (what the guest would print).
async fn console_line(
    State(app): State<SharedApp>,
    Path(id): Path<String>,
    Json(m): Json<Message>,
) -> SimResult<StatusCode> {
    if crate::nova::console_append(&mut app.cloud(), &id, &m.message) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(SimError::not_found(
            Service::Admin,
            format!("no server {id}"),
        ))
    }
}

/// Puts a load balancer into provisioning_status ERROR (a failed amphora, as Octavia would report it).
async fn lb_error(State(app): State<SharedApp>, Path(id): Path<String>) -> SimResult<StatusCode> {
    if crate::octavia::force_lb_error(&mut app.cloud(), &id) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(SimError::not_found(
            Service::Admin,
            format!("no load balancer {id}"),
        ))
    }
}

/// `{"expires_at": "2030-01-01T00:00:00Z" | null}`: the application credential expires then, as if
/// time had passed (Keystone has no call that changes it). A time in the past expires it now: it no
/// longer authenticates, and its tokens end.
async fn app_cred_expiry(
    State(app): State<SharedApp>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> SimResult<StatusCode> {
    let at = match body.get("expires_at") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .ok_or_else(|| bad("expires_at: an RFC 3339 time or null"))?,
        ),
    };
    let (now, scale) = (app.now(), app.clock.scale());
    if app
        .cloud()
        .keystone
        .set_app_cred_expiry(&id, at, now, scale)
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(SimError::not_found(
            Service::Admin,
            format!("no application credential {id}"),
        ))
    }
}
