//! Cinder's volume snapshots: create (of an `available` volume; of an `in-use` one with `force`, or
//! without it from 3.66 on), list (summary and detail, filters, pagination), show, update, delete,
//! metadata. `creating` → `available` after `snapshot_create_secs`, `deleting` → gone after
//! `snapshot_delete_secs`; a snapshot holds its volume's size against the `snapshots` and `gigabytes`
//! quotas. Rules and words are Cinder 29's (cinder/api/v3/snapshots.py, cinder/volume/api.py).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{
    Caller, CinderState, SVC, bad, element, meta_not_found, metadata_filter, metadata_of,
    over_limit, parse_body, py_repr, schema_error, timestamp, visible,
};
use crate::app::SharedApp;
use crate::clock::SimTime;
use crate::config::LatencyModel;
use crate::error::{SimError, SimResult};
use crate::ids;
use crate::paging::{MAX_LIMIT, next_links, paginate_at_most};
use crate::query::QueryParams;
use crate::routes::{Routes, Sample};
use crate::state::Cloud;

/// From 3.66 a snapshot of an `in-use` volume needs no `force`, and `force: false` is refused.
const SNAPSHOT_IN_USE: u32 = 66;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub id: String,
    pub project_id: String,
    pub user_id: String,
    pub volume_id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    /// The volume's size when the snapshot was taken (Cinder's `volume_size`).
    pub size: u64,
    pub status: String,
    /// The volume's type, by name: a volume made from the snapshot takes it.
    pub volume_type: String,
    pub metadata: BTreeMap<String, String>,
    pub created_at: String,
    pub updated_at: Option<String>,
    /// When the current transitional status (`creating`, `deleting`) began.
    pub since: SimTime,
}

impl CinderState {
    pub(super) fn snapshot(&self, id: &str) -> SimResult<&Snapshot> {
        self.snapshots
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| snapshot_not_found(id))
    }
    fn snapshot_mut(&mut self, id: &str) -> SimResult<&mut Snapshot> {
        self.snapshots
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or_else(|| snapshot_not_found(id))
    }
}

fn snapshot_not_found(id: &str) -> SimError {
    SimError::not_found(SVC, format!("Snapshot {id} could not be found."))
}

/// `creating` → `available`; `deleting` → gone; a snapshot whose volume is gone goes too (a cascade
/// delete takes them with the volume).
pub(super) fn advance(st: &mut CinderState, now: SimTime, lat: &LatencyModel) {
    let volumes: std::collections::BTreeSet<String> =
        st.volumes.iter().map(|v| v.id.clone()).collect();
    st.snapshots.retain(|s| {
        volumes.contains(&s.volume_id)
            && !(s.status == "deleting" && now.reached(s.since.after(lat.snapshot_delete_secs)))
    });
    for s in &mut st.snapshots {
        if s.status == "creating" && now.reached(s.since.after(lat.snapshot_create_secs)) {
            s.status = "available".into();
            s.updated_at = Some(timestamp());
        }
    }
}

/// A snapshot of the caller's project (others do not exist, to a non-admin).
fn mine<'a>(c: &Caller, s: &'a Snapshot) -> SimResult<&'a Snapshot> {
    if c.ctx.is_admin() || s.project_id == c.ctx.project_id {
        Ok(s)
    } else {
        Err(snapshot_not_found(&s.id))
    }
}

/// The summary view (also every list's), plus what later microversions add to the detailed one.
fn render(c: &Caller, s: &Snapshot, detail: bool) -> Value {
    let mut j = json!({
        "id": s.id, "created_at": s.created_at, "updated_at": s.updated_at, "name": s.name,
        "description": s.description, "volume_id": s.volume_id, "status": s.status, "size": s.size,
        "metadata": s.metadata,
    });
    if detail {
        if c.at_least(14) {
            j["group_snapshot_id"] = Value::Null;
        }
        if c.at_least(41) {
            j["user_id"] = json!(s.user_id);
        }
        if c.at_least(65) {
            j["consumes_quota"] = json!(true);
        }
    }
    j
}

/// Show and the detailed list carry the extended attributes (project and progress) too.
fn render_extended(c: &Caller, s: &Snapshot) -> Value {
    let mut j = render(c, s, true);
    j["os-extended-snapshot-attributes:project_id"] = json!(s.project_id);
    j["os-extended-snapshot-attributes:progress"] = json!(if s.status == "available" {
        "100%"
    } else {
        "0%"
    });
    j
}

/// `name`/`display_name` and `description`: strings (or null) of at most 255 characters.
fn text(m: &Map<String, Value>, key: &str) -> SimResult<Option<Option<String>>> {
    match m.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) if s.chars().count() <= 255 => Ok(Some(Some(s.trim().to_owned()))),
        Some(v) => Err(schema_error(
            key,
            v,
            &format!("{} is not of type 'string', 'null'", py_repr(v)),
        )),
    }
}

fn only_keys(m: &Map<String, Value>, allowed: &[&str]) -> SimResult<()> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(schema_error(
            "snapshot",
            &Value::Object(m.clone()),
            &format!("Additional properties are not allowed ('{k}' was unexpected)"),
        )),
        None => Ok(()),
    }
}

fn force_flag(raw: &Value) -> SimResult<bool> {
    let parsed = match raw {
        Value::Bool(b) => Some(*b),
        Value::String(s) => super::bool_param(s),
        _ => None,
    };
    parsed.ok_or_else(|| {
        schema_error(
            "force",
            raw,
            &format!("{} is not one of [True, 'True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes', 'y', 't', False, 'False', 'FALSE', 'false', '0', 'OFF', 'Off', 'off', 'NO', 'No', 'no', 'n', 'f']", py_repr(raw)),
        )
    })
}

/// The `snapshots` then the `gigabytes` quota, worded as Cinder words them (413).
fn check_quota(cloud: &Cloud, project_id: &str, size: u64) -> SimResult<()> {
    let q = &cloud.quotas;
    let count = cloud.cinder.snapshot_count(project_id);
    if u64::try_from(q.snapshots).is_ok_and(|l| count + 1 > l) {
        return Err(over_limit(format!(
            "SnapshotLimitExceeded: Maximum number of snapshots allowed ({}) exceeded",
            q.snapshots
        )));
    }
    let (_, used) = cloud.cinder.usage(project_id);
    if u64::try_from(q.gigabytes).is_ok_and(|l| used + size > l) {
        return Err(over_limit(format!(
            "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested {size}G, quota is {}G and {used}G has been consumed.",
            q.gigabytes
        )));
    }
    Ok(())
}

async fn create(State(app): State<SharedApp>, c: Caller, body: Bytes) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let m = element(&body, "snapshot")?;
    only_keys(
        m,
        &[
            "name",
            "display_name",
            "description",
            "volume_id",
            "force",
            "metadata",
        ],
    )?;
    let volume_id = match m.get("volume_id") {
        Some(Value::String(s)) if uuid::Uuid::parse_str(s).is_ok() => s.clone(),
        Some(v) => {
            return Err(schema_error(
                "volume_id",
                v,
                &format!("{} is not valid under any of the given schemas", py_repr(v)),
            ));
        }
        None => {
            return Err(schema_error(
                "snapshot",
                &Value::Object(m.clone()),
                "'volume_id' is a required property",
            ));
        }
    };
    let name = match text(m, "name")? {
        Some(n) => n,
        None => text(m, "display_name")?.flatten(),
    };
    let description = text(m, "description")?.flatten();
    let metadata = match m.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => metadata_of(v)?,
    };
    let force = m.get("force").map(force_flag).transpose()?;
    let mut cloud = app.cloud();
    let v = visible(&c, cloud.cinder.volume(&volume_id)?)?;
    if c.at_least(SNAPSHOT_IN_USE) && force == Some(false) {
        return Err(bad(
            "Since microversion 3.66 the 'force' flag is invalid for this request.  For backward compatability, however, when the 'force' flag is passed with a value evaluating to True, it is silently ignored.",
        ));
    }
    if v.status == "error" {
        return Err(bad(
            "Invalid volume: The snapshot cannot be created when the volume is in error status.",
        ));
    }
    let valid: &[&str] = if force == Some(true) || c.at_least(SNAPSHOT_IN_USE) {
        &["available", "in-use"]
    } else {
        &["available"]
    };
    if !valid.contains(&v.status.as_str()) {
        return Err(bad(format!(
            "Invalid volume: Volume {volume_id} status must be {}, but current status is: {}.",
            valid.join(", "),
            v.status
        )));
    }
    let (size, volume_type) = (v.size, v.volume_type.clone());
    check_quota(&cloud, &c.ctx.project_id, size)?;
    let s = Snapshot {
        id: ids::uuid(),
        project_id: c.ctx.project_id.clone(),
        user_id: c.ctx.user_id.clone(),
        volume_id,
        name,
        description,
        size,
        status: "creating".into(),
        volume_type,
        metadata,
        created_at: timestamp(),
        updated_at: None,
        since: cloud.now,
    };
    let out = render(&c, &s, true);
    cloud.cinder.snapshots.push(s);
    Ok(c.reply(StatusCode::ACCEPTED, json!({ "snapshot": out })))
}

/// `sort=key:dir,…` or `sort_key`/`sort_dir` over the snapshot's columns; newest first by default.
fn sort_keys(c: &Caller, q: &QueryParams) -> SimResult<Vec<(String, bool)>> {
    let mut keys = vec!["id", "status", "volume_id", "created_at", "updated_at"];
    // `name` sorts by the display name from 3.30 on.
    if c.at_least(30) {
        keys.push("name");
    }
    let raw: Vec<(String, String)> = match (q.get("sort"), q.get("sort_key")) {
        (Some(s), _) => s
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once(':') {
                Some((k, d)) => (k.to_owned(), d.to_owned()),
                None => (p.to_owned(), "desc".to_owned()),
            })
            .collect(),
        (None, Some(k)) => vec![(k.to_owned(), q.get("sort_dir").unwrap_or("desc").to_owned())],
        (None, None) => vec![("created_at".into(), "desc".into())],
    };
    raw.into_iter()
        .map(|(k, d)| {
            if !keys.contains(&k.as_str()) {
                return Err(bad(format!("Invalid input received: Invalid sort key {k}")));
            }
            match d.as_str() {
                "asc" => Ok((k, true)),
                "desc" => Ok((k, false)),
                _ => Err(bad(format!(
                    "Invalid input received: Unknown sort direction, must be 'desc' or 'asc'. Got {d}"
                ))),
            }
        })
        .collect()
}

async fn list(
    app: SharedApp,
    c: Caller,
    q: QueryParams,
    path: &str,
    detail: bool,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let all_tenants = c.ctx.is_admin() && q.bool("all_tenants").unwrap_or(false);
    // The metadata filter exists from 3.22; before, Cinder drops it.
    let meta = if c.at_least(22) {
        q.get("metadata").map(metadata_filter).transpose()?
    } else {
        None
    };
    let sorts = sort_keys(&c, &q)?;
    let mut snaps: Vec<(usize, &Snapshot)> = cloud
        .cinder
        .snapshots
        .iter()
        .enumerate()
        .filter(|(_, s)| all_tenants || s.project_id == c.ctx.project_id)
        .filter(|(_, s)| q.get("name").is_none_or(|n| s.name.as_deref() == Some(n)))
        .filter(|(_, s)| q.get("status").is_none_or(|v| s.status == v))
        .filter(|(_, s)| q.get("volume_id").is_none_or(|v| s.volume_id == v))
        .filter(|(_, s)| {
            meta.as_ref()
                .is_none_or(|m| m.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        })
        .collect();
    let key = |(i, s): &(usize, &Snapshot), k: &str| -> (u64, String) {
        match k {
            "created_at" => (*i as u64, String::new()),
            "id" => (0, s.id.clone()),
            "name" => (0, s.name.clone().unwrap_or_default()),
            "status" => (0, s.status.clone()),
            "volume_id" => (0, s.volume_id.clone()),
            _ => (0, s.updated_at.clone().unwrap_or_default()),
        }
    };
    snaps.sort_by(|a, b| {
        sorts
            .iter()
            .map(|(k, asc)| {
                let o = key(a, k).cmp(&key(b, k));
                if *asc { o } else { o.reverse() }
            })
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let page = paginate_at_most(snaps, &q, MAX_LIMIT, |(_, s)| s.id.clone())
        .map_err(|m| snapshot_not_found(&m))?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|(_, s)| {
            if detail {
                render_extended(&c, s)
            } else {
                render(&c, s, false)
            }
        })
        .collect();
    let mut body = json!({ "snapshots": items });
    if let Some(links) = next_links(&app.base_url, path, &q, page.next_marker.as_deref()) {
        body["snapshots_links"] = links;
    }
    Ok(c.reply(StatusCode::OK, body))
}

async fn list_summary(
    State(app): State<SharedApp>,
    c: Caller,
    q: QueryParams,
    uri: axum::http::Uri,
) -> SimResult<Response> {
    list(app, c, q, uri.path(), false).await
}

async fn list_detail(
    State(app): State<SharedApp>,
    c: Caller,
    q: QueryParams,
    uri: axum::http::Uri,
) -> SimResult<Response> {
    list(app, c, q, uri.path(), true).await
}

async fn show(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = mine(&c, cloud.cinder.snapshot(&id)?)?;
    Ok(c.reply(StatusCode::OK, json!({"snapshot": render_extended(&c, s)})))
}

async fn update(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let m = element(&body, "snapshot")?;
    const FIELDS: [&str; 4] = ["name", "description", "display_name", "display_description"];
    only_keys(m, &FIELDS)?;
    if !FIELDS.iter().any(|k| m.contains_key(*k)) {
        let v = Value::Object(m.clone());
        return Err(schema_error(
            "snapshot",
            &v,
            &format!(
                "{} is not valid under any of the given schemas",
                py_repr(&v)
            ),
        ));
    }
    let name = match text(m, "name")? {
        Some(n) => Some(n),
        None => text(m, "display_name")?,
    };
    let description = match text(m, "description")? {
        Some(d) => Some(d),
        None => text(m, "display_description")?,
    };
    let mut cloud = app.cloud();
    mine(&c, cloud.cinder.snapshot(&id)?)?;
    let s = cloud.cinder.snapshot_mut(&id)?;
    if let Some(n) = name {
        s.name = n;
    }
    if let Some(d) = description {
        s.description = d;
    }
    s.updated_at = Some(timestamp());
    Ok(c.reply(StatusCode::OK, json!({"snapshot": render(&c, s, true)})))
}

async fn delete(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
) -> SimResult<Response> {
    let mut cloud = app.cloud();
    let now = cloud.now;
    let s = mine(&c, cloud.cinder.snapshot(&id)?)?;
    if !["available", "error"].contains(&s.status.as_str()) {
        return Err(bad(
            "Invalid snapshot: Snapshot status must be available or error and must not be part of a group.",
        ));
    }
    let s = cloud.cinder.snapshot_mut(&id)?;
    s.status = "deleting".into();
    s.since = now;
    s.updated_at = Some(timestamp());
    Ok(c.empty(StatusCode::ACCEPTED))
}

// ---------------------------------------------------------------------------------------------------------
// Metadata

fn with_metadata(
    app: &SharedApp,
    c: &Caller,
    id: &str,
    f: impl FnOnce(&mut BTreeMap<String, String>),
) -> SimResult<Response> {
    let mut cloud = app.cloud();
    mine(c, cloud.cinder.snapshot(id)?)?;
    let s = cloud.cinder.snapshot_mut(id)?;
    f(&mut s.metadata);
    Ok(c.reply(StatusCode::OK, json!({"metadata": s.metadata})))
}

async fn show_metadata(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
) -> SimResult<Response> {
    with_metadata(&app, &c, &id, |_| {})
}

async fn merge_metadata(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let new = metadata_of(&Value::Object(element(&body, "metadata")?.clone()))?;
    with_metadata(&app, &c, &id, |m| m.extend(new))
}

async fn replace_metadata(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let new = metadata_of(&Value::Object(element(&body, "metadata")?.clone()))?;
    with_metadata(&app, &c, &id, |m| *m = new)
}

async fn show_metadata_key(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id, key)): Path<(String, String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = mine(&c, cloud.cinder.snapshot(&id)?)?;
    let val = s.metadata.get(&key).ok_or_else(meta_not_found)?;
    Ok(c.reply(StatusCode::OK, json!({"meta": {key: val}})))
}

async fn update_metadata_key(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id, key)): Path<(String, String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let meta = metadata_of(&Value::Object(element(&body, "meta")?.clone()))?;
    if meta.len() > 1 {
        return Err(bad("Request body contains too many items."));
    }
    let val = meta
        .get(&key)
        .cloned()
        .ok_or_else(|| bad("Request body and URI mismatch"))?;
    let mut cloud = app.cloud();
    mine(&c, cloud.cinder.snapshot(&id)?)?;
    cloud
        .cinder
        .snapshot_mut(&id)?
        .metadata
        .insert(key.clone(), val.clone());
    Ok(c.reply(StatusCode::OK, json!({"meta": {key: val}})))
}

async fn delete_metadata_key(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id, key)): Path<(String, String, String)>,
) -> SimResult<Response> {
    let mut cloud = app.cloud();
    mine(&c, cloud.cinder.snapshot(&id)?)?;
    cloud
        .cinder
        .snapshot_mut(&id)?
        .metadata
        .remove(&key)
        .ok_or_else(meta_not_found)?;
    Ok(c.empty(StatusCode::OK))
}

pub(super) fn routes(r: Routes) -> Routes {
    use Sample::*;
    macro_rules! p {
        ($s:literal) => {
            concat!("/volume/v3/{project_id}", $s)
        };
    }
    macro_rules! bs {
        ($s:literal) => {
            File(concat!("block-storage/snapshots/", $s))
        };
    }
    r.get(
        p!("/snapshots"),
        list_summary,
        bs!("snapshots-list-response.json"),
    )
    .get(
        p!("/snapshots/detail"),
        list_detail,
        bs!("v3.65/snapshots-list-detailed-response.json"),
    )
    .post(
        p!("/snapshots"),
        create,
        bs!("v3.65/snapshot-create-response.json"),
    )
    .get(
        p!("/snapshots/{id}"),
        show,
        bs!("v3.65/snapshot-show-response.json"),
    )
    .put(
        p!("/snapshots/{id}"),
        update,
        bs!("v3.65/snapshot-update-response.json"),
    )
    .delete(p!("/snapshots/{id}"), delete, NoBody("202, no body"))
    .get(
        p!("/snapshots/{id}/metadata"),
        show_metadata,
        bs!("snapshot-metadata-show-response.json"),
    )
    .post(
        p!("/snapshots/{id}/metadata"),
        merge_metadata,
        bs!("snapshot-metadata-create-response.json"),
    )
    .put(
        p!("/snapshots/{id}/metadata"),
        replace_metadata,
        bs!("snapshot-metadata-update-response.json"),
    )
    .get(
        p!("/snapshots/{id}/metadata/{key}"),
        show_metadata_key,
        bs!("snapshot-metadata-show-key-response.json"),
    )
    .put(
        p!("/snapshots/{id}/metadata/{key}"),
        update_metadata_key,
        bs!("snapshot-metadata-update-key-response.json"),
    )
    .delete(
        p!("/snapshots/{id}/metadata/{key}"),
        delete_metadata_key,
        NoBody("200, empty body"),
    )
}
