//! Version discovery, providers, flavors, availability zones and quotas.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::*;
use crate::config::Quotas;

/// The newest Octavia API minor version the simulator claims.
const MAX_MINOR: u32 = 30;

pub(super) async fn versions(State(app): State<SharedApp>) -> Json<Value> {
    let href = format!("{}/load-balancer/v2", app.base_url);
    let versions: Vec<Value> = (0..=MAX_MINOR)
        .map(|minor| {
            json!({
                "id": format!("v2.{minor}"),
                "status": if minor == MAX_MINOR { "CURRENT" } else { "SUPPORTED" },
                "updated": "2024-03-01T00:00:00Z",
                "links": [{"href": href, "rel": "self"}],
            })
        })
        .collect();
    Json(json!({ "versions": versions }))
}

pub(super) async fn providers() -> Json<Value> {
    Json(json!({"providers": [
        {"name": "amphora", "description": "The Octavia Amphora driver."},
        {"name": "octavia", "description": "Deprecated alias of the Octavia Amphora driver."},
        {"name": "ovn", "description": "Octavia OVN driver."},
    ]}))
}

fn render_flavor(f: &Flavor) -> Value {
    json!({
        "id": f.id, "name": f.name, "description": f.description, "enabled": true,
        "flavor_profile_id": f.flavor_profile_id,
    })
}

pub(super) async fn flavors(State(app): State<SharedApp>) -> Json<Value> {
    let cloud = app.cloud();
    let items: Vec<Value> = cloud.octavia.flavors.iter().map(render_flavor).collect();
    Json(json!({"flavors": items, "flavors_links": []}))
}

pub(super) async fn flavor(
    State(app): State<SharedApp>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let f = cloud
        .octavia
        .flavors
        .iter()
        .find(|f| f.id == id)
        .ok_or_else(|| not_found("Flavor", &id))?;
    Ok(Json(json!({"flavor": render_flavor(f)})))
}

/// No availability zones are defined (as on a default deployment).
pub(super) async fn availability_zones() -> Json<Value> {
    Json(json!({"availability_zones": [], "availability_zones_links": []}))
}

fn quota_doc(q: &Quotas) -> Value {
    // The old names (load_balancer, health_monitor) are still returned next to the current ones.
    json!({
        "loadbalancer": q.load_balancers, "load_balancer": q.load_balancers,
        "listener": q.listeners, "pool": q.pools, "member": q.members,
        "healthmonitor": q.health_monitors, "health_monitor": q.health_monitors,
        "l7policy": -1, "l7rule": -1,
    })
}

pub(super) async fn quotas(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
) -> Json<Value> {
    let cloud = app.cloud();
    let mut q = quota_doc(&cloud.quotas);
    q["project_id"] = json!(ctx.project_id);
    Json(json!({"quotas": [q], "quotas_links": []}))
}

pub(super) async fn quota_defaults(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"quota": quota_doc(&app.cfg.quotas)}))
}

pub(super) async fn quota(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(project_id): Path<String>,
) -> SimResult<Json<Value>> {
    if project_id != ctx.project_id && !ctx.is_admin() {
        return Err(SimError::forbidden(
            SVC,
            "Policy does not allow this request to be performed.",
        ));
    }
    Ok(Json(json!({"quota": quota_doc(&app.cloud().quotas)})))
}
