//! `GET /_sim/clusters`: what the attached guest runtime knows of the simulated clusters (nodes,
//! etcd members and quorum, and the invariant violations it recorded with their simulated time),
//! so tests through the real binaries can check day-two operations against the cluster's truth.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::app::SharedApp;

/// `GET /_sim/metadata`: per server, whether a pod, a hostNetwork pod and root reach the metadata
/// service (and so its user_data) by the rules its bootstrap set, and whether it has a config drive.
pub(crate) async fn metadata(State(app): State<SharedApp>) -> Json<Value> {
    drop(app.cloud());
    Json(app.guests().map_or_else(|| json!([]), |rt| rt.metadata()))
}

pub(crate) async fn clusters(State(app): State<SharedApp>) -> Json<Value> {
    // Driven first, so that what the runtime reports is as of now.
    drop(app.cloud());
    let now = app.now();
    Json(
        app.guests()
            .map_or_else(|| json!([]), |rt| rt.clusters(now)),
    )
}

/// `GET /_sim/at-rest`: the bytes each simulated cluster's store holds for its Secrets and the key
/// names each API server runs with (never key material).
pub(crate) async fn at_rest(State(app): State<SharedApp>) -> Json<Value> {
    drop(app.cloud());
    Json(app.guests().map_or_else(|| json!([]), |rt| rt.at_rest()))
}
