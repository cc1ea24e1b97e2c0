//! Cinder v3 subset: version discovery and microversions, volumes (create/list/show/update/delete, metadata,
//! actions), volume types, availability zones, limits and quota sets, plus the interface Nova uses to
//! create, attach and delete volumes.
//!
//! Volumes follow Cinder's state machine on the simulated clock: `creating` → `available` (→ `attaching`
//! → `in-use` → `detaching` while Nova attaches and detaches it; → `extending` and back) and `deleting` →
//! gone; snapshots (`snapshots.rs`) `creating` → `available`, `deleting` → gone; quotas answer 413
//! exactly as Cinder words them. The rules are Cinder 29's (cinder/volume/api.py,
//! cinder/volume/flows/api/create_volume.py, cinder/api/v3/).

mod snapshots;

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::app::{AuthCtx, SharedApp};
use crate::clock::SimTime;
use crate::config::{Quotas, SimConfig};
use crate::error::{SimError, SimResult};
use crate::ids;
use crate::paging::{MAX_LIMIT, next_links, paginate_at_most};
use crate::query::QueryParams;
use crate::routes::{Routes, Sample};
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::BlockStorage;
/// Microversions served: 3.0 ..= 3.70.
const MIN_MINOR: u32 = 0;
const MAX_MINOR: u32 = 70;
const DEFAULT_TYPE: &str = "__DEFAULT__";
const DELETABLE: &[&str] = &[
    "available",
    "error",
    "error_restoring",
    "error_extending",
    "error_managing",
];
/// Cinder 29's refusal of a volume delete (cinder/volume/api.py `delete`).
const DELETE_REFUSED: &str = "Invalid volume: Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots, awaiting a transfer, or be disassociated from snapshots after volume transfer.";
/// The extra spec that makes a type's volumes multi-attachable; no other value does.
const MULTIATTACH_SPEC: (&str, &str) = ("multiattach", "<is> True");
/// Extra specs every project member sees (Cinder's `USER_VISIBLE_EXTRA_SPECS`); the rest is admin-only.
const USER_VISIBLE_SPECS: &[&str] = &[
    "RESKEY:availability_zones",
    "multiattach",
    "replication_enabled",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeType {
    pub id: String,
    pub name: String,
    pub description: String,
    pub extra_specs: BTreeMap<String, String>,
}

impl VolumeType {
    fn multiattach(&self) -> bool {
        self.extra_specs.get(MULTIATTACH_SPEC.0).map(String::as_str) == Some(MULTIATTACH_SPEC.1)
    }
    fn backend(&self) -> Option<&str> {
        self.extra_specs
            .get("volume_backend_name")
            .map(String::as_str)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attachment {
    pub id: String,
    pub server_id: String,
    pub device: String,
    pub attached_at: String,
    /// False while Nova is still attaching it: Cinder lists only attached ones on the volume.
    #[serde(default = "yes")]
    pub attached: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Volume {
    pub id: String,
    pub project_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub size: u64,
    pub status: String,
    pub volume_type: String,
    pub availability_zone: String,
    pub bootable: bool,
    pub multiattach: bool,
    pub image_id: Option<String>,
    pub source_volid: Option<String>,
    #[serde(default)]
    pub snapshot_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub attachments: Vec<Attachment>,
    pub created_at: String,
    pub updated_at: Option<String>,
    /// When the current transitional status (`creating`, `deleting`, `extending`) began.
    pub since: SimTime,
    /// The size an `extending` volume will have (Cinder changes `size` when the backend is done).
    #[serde(default)]
    pub extend_to: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CinderState {
    pub volumes: Vec<Volume>,
    pub types: Vec<VolumeType>,
    #[serde(default)]
    pub snapshots: Vec<snapshots::Snapshot>,
}

impl CinderState {
    fn volume(&self, id: &str) -> SimResult<&Volume> {
        self.volumes
            .iter()
            .find(|v| v.id == id)
            .ok_or_else(|| volume_not_found(id))
    }
    fn volume_mut(&mut self, id: &str) -> SimResult<&mut Volume> {
        self.volumes
            .iter_mut()
            .find(|v| v.id == id)
            .ok_or_else(|| volume_not_found(id))
    }
    /// By name or id, as `volume_type` is accepted in a create.
    fn volume_type(&self, name_or_id: &str) -> Option<&VolumeType> {
        self.types
            .iter()
            .find(|t| t.name == name_or_id || t.id == name_or_id)
    }
    /// Volumes of a project, and the gigabytes its volumes and snapshots hold (Cinder counts both
    /// against `gigabytes`).
    fn usage(&self, project_id: &str) -> (u64, u64) {
        let mine = self.volumes.iter().filter(|v| v.project_id == project_id);
        let snap_gb: u64 = self
            .snapshots
            .iter()
            .filter(|s| s.project_id == project_id)
            .map(|s| s.size)
            .sum();
        (
            mine.clone().count() as u64,
            // An extend holds its new size from the request on (Cinder's reservation).
            mine.map(|v| v.extend_to.unwrap_or(v.size).max(v.size))
                .sum::<u64>()
                + snap_gb,
        )
    }
    fn snapshot_count(&self, project_id: &str) -> u64 {
        self.snapshots
            .iter()
            .filter(|s| s.project_id == project_id)
            .count() as u64
    }
    fn type_of(&self, v: &Volume) -> Option<&VolumeType> {
        self.types.iter().find(|t| t.name == v.volume_type)
    }
}

/// A volume another service creates (Nova's block_device_mapping_v2 with destination_type=volume).
#[derive(Debug, Clone, Default)]
pub struct InternalVolume {
    pub project_id: String,
    pub name: String,
    pub size_gb: u64,
    pub image_id: Option<String>,
    pub volume_type: Option<String>,
    pub availability_zone: Option<String>,
}

/// Cinder's `__DEFAULT__` type and the types of the config (`volume_types`).
pub fn seed(cloud: &mut Cloud, cfg: &SimConfig, _project_id: &str) {
    cloud.cinder.types.push(VolumeType {
        id: ids::uuid(),
        name: DEFAULT_TYPE.into(),
        description: "Default Volume Type".into(),
        extra_specs: BTreeMap::new(),
    });
    for t in cfg.volume_types.iter().filter(|t| t.name != DEFAULT_TYPE) {
        cloud.cinder.types.push(VolumeType {
            id: ids::uuid(),
            name: t.name.clone(),
            description: t.description.clone(),
            extra_specs: t.extra_specs.clone(),
        });
    }
}

/// `creating` → `available` after volume_create_secs; `deleting` → gone after volume_delete_secs (with
/// its snapshots, which a cascade delete marked `deleting` too); `extending` → back after
/// volume_extend_secs, at the new size; snapshots likewise.
pub fn advance(cloud: &mut Cloud, cfg: &SimConfig) {
    let now = cloud.now;
    let lat = &cfg.latency;
    let st = &mut cloud.cinder;
    st.volumes.retain(|v| {
        !(v.status == "deleting" && now.reached(v.since.after(lat.volume_delete_secs)))
    });
    for v in st.volumes.iter_mut() {
        if v.status == "creating" && now.reached(v.since.after(lat.volume_create_secs)) {
            v.status = "available".into();
            v.updated_at = Some(timestamp());
        }
        if v.status == "extending" && now.reached(v.since.after(lat.volume_extend_secs)) {
            v.size = v.extend_to.take().unwrap_or(v.size);
            v.status = settled_status(v).into();
            v.updated_at = Some(timestamp());
        }
    }
    snapshots::advance(st, now, lat);
}

/// What a volume is when nothing is happening to it: `in-use` with an attachment, else `available`.
fn settled_status(v: &Volume) -> &'static str {
    if v.attachments.is_empty() {
        "available"
    } else {
        "in-use"
    }
}

// ---------------------------------------------------------------------------------------------------------
// Interface for other services

fn timestamp() -> String {
    ids::iso_micro(Utc::now())
}

fn volume_not_found(id: &str) -> SimError {
    SimError::not_found(SVC, format!("Volume {id} could not be found."))
}

fn bad(msg: impl Into<String>) -> SimError {
    SimError::bad_request(SVC, msg)
}

fn over_limit(msg: String) -> SimError {
    SimError::new(SVC, StatusCode::PAYLOAD_TOO_LARGE, "OverQuota", msg)
}

/// The volumes and gigabytes quotas, worded as Cinder words them.
fn check_quota(cloud: &Cloud, project_id: &str, volumes: u64, gigabytes: u64) -> SimResult<()> {
    let q = &cloud.quotas;
    let (count, used) = cloud.cinder.usage(project_id);
    let over = |limit: i64, want: u64| u64::try_from(limit).is_ok_and(|l| want > l);
    if volumes > 0 && over(q.volumes, count + volumes) {
        return Err(over_limit(format!(
            "VolumeLimitExceeded: Maximum number of volumes allowed ({}) exceeded for quota 'volumes'.",
            q.volumes
        )));
    }
    if over(q.gigabytes, used + gigabytes) {
        return Err(over_limit(format!(
            "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested {gigabytes}G, quota is {}G and {used}G has been consumed.",
            q.gigabytes
        )));
    }
    Ok(())
}

/// Checks an image as a volume source: it must exist, be active, and fit.
fn check_image(cloud: &Cloud, image_id: &str, size: u64) -> SimResult<()> {
    let img = crate::glance::image_view(cloud, image_id)
        .filter(|i| i.status == "active")
        .ok_or_else(|| bad("Invalid image identifier or unable to access requested image."))?;
    let image_gb = img.size_bytes.div_ceil(1 << 30);
    if image_gb > size {
        return Err(bad(format!(
            "Invalid input received: Size of specified image {image_gb} GB is larger than volume size {size} GB."
        )));
    }
    if img.min_disk_gb > size {
        return Err(bad(format!(
            "Invalid input received: Volume size {size}GB cannot be smaller than the image minDisk size {}GB.",
            img.min_disk_gb
        )));
    }
    Ok(())
}

/// Quota-checked like POST /volumes; the volume starts `creating`. Errors are Cinder errors.
pub fn create_volume_internal(cloud: &mut Cloud, spec: InternalVolume) -> SimResult<String> {
    let user_id = cloud
        .keystone
        .users
        .first()
        .map(|u| u.id.clone())
        .unwrap_or_default();
    let v = new_volume(
        cloud,
        NewVolume {
            project_id: spec.project_id,
            user_id,
            name: Some(spec.name),
            description: None,
            size: Some(spec.size_gb),
            volume_type: spec.volume_type,
            availability_zone: spec.availability_zone,
            image_id: spec.image_id,
            source_volid: None,
            snapshot_id: None,
            metadata: BTreeMap::new(),
        },
    )?;
    let id = v.id.clone();
    cloud.cinder.volumes.push(v);
    Ok(id)
}

pub fn volume_status(cloud: &Cloud, volume_id: &str) -> Option<String> {
    cloud
        .cinder
        .volume(volume_id)
        .ok()
        .map(|v| v.status.clone())
}

pub fn volume_size(cloud: &Cloud, volume_id: &str) -> Option<u64> {
    cloud.cinder.volume(volume_id).ok().map(|v| v.size)
}

/// What Nova reads of a volume before it attaches it (`volume_api.get`).
#[derive(Debug, Clone)]
pub struct VolumeFacts {
    pub status: String,
    pub availability_zone: String,
    pub multiattach: bool,
}

pub fn volume_facts(cloud: &Cloud, volume_id: &str) -> Option<VolumeFacts> {
    cloud.cinder.volume(volume_id).ok().map(|v| VolumeFacts {
        status: v.status.clone(),
        availability_zone: v.availability_zone.clone(),
        multiattach: v.multiattach,
    })
}

/// Attaches an `available` volume to a server at once: `in-use`, with an attachment record (a boot's
/// block device mapping, whose attach Nova finishes before the server is ACTIVE). Errors (400 for a
/// volume in the wrong state) are Cinder errors.
pub fn attach(
    cloud: &mut Cloud,
    volume_id: &str,
    server_id: &str,
    device: &str,
) -> SimResult<String> {
    let v = cloud.cinder.volume_mut(volume_id)?;
    if v.status != "available" {
        return Err(bad(format!(
            "Invalid volume: volume {volume_id} status must be available"
        )));
    }
    let att = Attachment {
        id: ids::uuid(),
        server_id: server_id.to_owned(),
        device: device.to_owned(),
        attached_at: timestamp(),
        attached: true,
    };
    let id = att.id.clone();
    v.attachments.push(att);
    v.status = "in-use".into();
    v.updated_at = Some(timestamp());
    Ok(id)
}

/// Cinder's `attachment_create` without a connector, as Nova's attach makes it: the volume must be
/// `available` (or `in-use` when multiattach) and goes `reserved`, then `attaching` when the compute
/// host sends its connector ([`attach_connecting`]), until [`attach_complete`]. Errors are Cinder's
/// 400s, worded as Cinder words them.
pub fn reserve(cloud: &mut Cloud, volume_id: &str, server_id: &str) -> SimResult<String> {
    let v = cloud.cinder.volume_mut(volume_id)?;
    if v.status.contains("error") {
        return Err(bad(format!(
            "Invalid volume: Volume attachments can not be created if the volume is in an error state. The Volume {volume_id} currently has a status of: {} ",
            v.status
        )));
    }
    let allowed: &[&str] = if v.multiattach {
        &["available", "in-use", "downloading"]
    } else {
        &["available", "downloading"]
    };
    if !allowed.contains(&v.status.as_str()) {
        return Err(bad(format!(
            "Invalid volume: Volume {volume_id} status must be {} to reserve, but the current status is {}.",
            allowed.join(" or "),
            v.status
        )));
    }
    let att = Attachment {
        id: ids::uuid(),
        server_id: server_id.to_owned(),
        device: String::new(),
        attached_at: String::new(),
        attached: false,
    };
    let id = att.id.clone();
    v.attachments.push(att);
    v.status = "reserved".into();
    v.updated_at = Some(timestamp());
    Ok(id)
}

/// The compute host's `attachment_update` with its connector: `reserved` → `attaching`.
pub fn attach_connecting(cloud: &mut Cloud, volume_id: &str) {
    if let Ok(v) = cloud.cinder.volume_mut(volume_id)
        && v.status == "reserved"
    {
        v.status = "attaching".into();
        v.updated_at = Some(timestamp());
    }
}

/// The compute host attached the volume (`attachment_complete`): `in-use`, the attachment listed with
/// its device.
pub fn attach_complete(cloud: &mut Cloud, volume_id: &str, attachment_id: &str, device: &str) {
    if let Ok(v) = cloud.cinder.volume_mut(volume_id) {
        if let Some(a) = v.attachments.iter_mut().find(|a| a.id == attachment_id) {
            a.attached = true;
            a.device = device.to_owned();
            a.attached_at = timestamp();
        }
        if ["reserved", "attaching"].contains(&v.status.as_str()) {
            v.status = "in-use".into();
        }
        v.updated_at = Some(timestamp());
    }
}

/// Cinder's `begin_detaching`, which Nova's detach calls first: only an `in-use` volume goes
/// `detaching`; otherwise Cinder's 400.
pub fn begin_detaching(cloud: &mut Cloud, volume_id: &str) -> SimResult<()> {
    let v = cloud.cinder.volume_mut(volume_id)?;
    if v.status != "in-use" {
        return Err(bad(
            "Invalid volume: Unable to detach volume. Volume status must be 'in-use' and attach_status must be 'attached' to detach.",
        ));
    }
    v.status = "detaching".into();
    v.updated_at = Some(timestamp());
    Ok(())
}

/// Removes the server's attachment: `available`, or `in-use` while other servers keep theirs.
pub fn detach(cloud: &mut Cloud, volume_id: &str, server_id: &str) {
    if let Ok(v) = cloud.cinder.volume_mut(volume_id) {
        v.attachments.retain(|a| a.server_id != server_id);
        if ["in-use", "reserved", "attaching", "detaching"].contains(&v.status.as_str()) {
            // Another server's attach of a multiattach volume may still be under way.
            v.status = if v.attachments.iter().any(|a| !a.attached) {
                "attaching"
            } else {
                settled_status(v)
            }
            .into();
            v.updated_at = Some(timestamp());
        }
    }
}

/// Deletes a volume regardless of API rules (delete_on_termination).
pub fn delete_volume_internal(cloud: &mut Cloud, volume_id: &str) {
    let now = cloud.now;
    if let Ok(v) = cloud.cinder.volume_mut(volume_id) {
        v.attachments.clear();
        start_delete(v, now);
    }
}

fn start_delete(v: &mut Volume, now: SimTime) {
    v.status = "deleting".into();
    v.since = now;
    v.updated_at = Some(timestamp());
}

struct NewVolume {
    project_id: String,
    user_id: String,
    name: Option<String>,
    description: Option<String>,
    /// `None`: the source's size (a snapshot's or a volume's).
    size: Option<u64>,
    volume_type: Option<String>,
    availability_zone: Option<String>,
    image_id: Option<String>,
    source_volid: Option<String>,
    snapshot_id: Option<String>,
    metadata: BTreeMap<String, String>,
}

fn type_not_found(name_or_id: &str) -> SimError {
    // Cinder looks a UUID up as an id first, and names the id when neither matches.
    let msg = if uuid::Uuid::parse_str(name_or_id).is_ok() {
        format!("Volume type {name_or_id} could not be found.")
    } else {
        format!("Volume type with name {name_or_id} could not be found.")
    };
    SimError::not_found(SVC, msg)
}

/// Whether a volume of type `from` may be copied into type `to` (Cinder's `_retype_is_possible`): always
/// with one backend, else when both name the same `volume_backend_name`.
fn retype_possible(st: &CinderState, from: &VolumeType, to: &VolumeType) -> bool {
    let backends: std::collections::BTreeSet<Option<&str>> =
        st.types.iter().map(VolumeType::backend).collect();
    backends.len() <= 1 || from.backend() == to.backend()
}

/// Validates and quota-checks a new volume (not yet stored), in the order of Cinder's create flow.
fn new_volume(cloud: &Cloud, n: NewVolume) -> SimResult<Volume> {
    let st = &cloud.cinder;
    // The API looks the named objects up first (404s), then the flow checks them.
    let req_type = n
        .volume_type
        .as_deref()
        .map(|t| st.volume_type(t).ok_or_else(|| type_not_found(t)))
        .transpose()?;
    let snapshot = n
        .snapshot_id
        .as_deref()
        .map(|id| st.snapshot(id))
        .transpose()?;
    let source = n
        .source_volid
        .as_deref()
        .map(|id| st.volume(id))
        .transpose()?;
    let given = [n.image_id.is_some(), snapshot.is_some(), source.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(bad(
            "Invalid input received: May specify only one of backup, imageRef, snapshot, source volume",
        ));
    }
    if let Some(s) = snapshot
        && s.status != "available"
    {
        return Err(bad(
            "Invalid snapshot: Originating snapshot status must be one of 'available' values",
        ));
    }
    if let Some(v) = source
        && !["available", "in-use"].contains(&v.status.as_str())
    {
        return Err(bad(
            "Invalid volume: Originating source volume status must be one of 'available, in-use' values",
        ));
    }
    let snap_volume = snapshot.and_then(|s| st.volume(&s.volume_id).ok());
    let size = n
        .size
        .or(source.map(|v| v.size))
        .or(snapshot.map(|s| s.size))
        .unwrap_or(0);
    if size < 1 {
        return Err(bad(format!(
            "Invalid input received: Volume size '{size}' must be an integer and greater than 0"
        )));
    }
    if let Some(v) = source
        && size < v.size
    {
        return Err(bad(format!(
            "Invalid input received: Volume size '{size}'GB cannot be smaller than original volume size  {}GB. They must be >= original volume size.",
            v.size
        )));
    }
    if let Some(s) = snapshot
        && size < s.size
    {
        return Err(bad(format!(
            "Invalid input received: Volume size '{size}'GB cannot be smaller than the snapshot size {}GB. They must be >= original snapshot size.",
            s.size
        )));
    }
    let mut bootable = false;
    if let Some(img) = &n.image_id {
        check_image(cloud, img, size)?;
        bootable = true;
    }
    // Without a type: the source's, else `__DEFAULT__`. A type other than the source's must be one
    // the source could be retyped to.
    let source_type = source
        .and_then(|v| st.type_of(v))
        .or_else(|| snapshot.and_then(|s| st.types.iter().find(|t| t.name == s.volume_type)));
    let vtype = match (req_type, source_type) {
        (Some(t), Some(from)) if t.id != from.id && !retype_possible(st, from, t) => {
            let why = if source.is_some() {
                "either match source volume, or omit type argument"
            } else {
                "recommend omitting the type argument"
            };
            return Err(bad(format!(
                "Invalid input received: Invalid volume_type provided: {} (requested type is not compatible; {why}).",
                t.id
            )));
        }
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => st
            .volume_type(DEFAULT_TYPE)
            .ok_or_else(|| type_not_found(DEFAULT_TYPE))?,
    };
    let source_zone = source
        .map(|v| v.availability_zone.clone())
        .or(snap_volume.map(|v| v.availability_zone.clone()));
    let zone = n
        .availability_zone
        .clone()
        .or(source_zone.clone())
        .unwrap_or_else(|| cloud.default_volume_zone());
    // Cinder's own zones, never Nova's (cinder/volume/flows/api/create_volume.py raises
    // InvalidAvailabilityZone, a 400, without allow_availability_zone_fallback).
    if !cloud.volume_zones().contains(&zone) {
        return Err(bad(format!("Availability zone '{zone}' is invalid.")));
    }
    // `cloned_volume_same_az` (default True): a copy stays in its source's zone.
    if let Some(sz) = &source_zone
        && *sz != zone
    {
        let what = if source.is_some() {
            "source volume"
        } else {
            "snapshot"
        };
        return Err(bad(format!(
            "Invalid input received: Volume must be in the same availability zone as the {what}"
        )));
    }
    if let Some(v) = source {
        bootable = v.bootable;
    }
    if let Some(v) = snap_volume {
        bootable = v.bootable;
    }
    check_quota(cloud, &n.project_id, 1, size)?;
    Ok(Volume {
        id: ids::uuid(),
        project_id: n.project_id,
        user_id: n.user_id,
        name: n.name,
        description: n.description,
        size,
        status: "creating".into(),
        volume_type: vtype.name.clone(),
        availability_zone: zone,
        bootable,
        multiattach: vtype.multiattach(),
        image_id: n.image_id,
        source_volid: n.source_volid,
        snapshot_id: n.snapshot_id,
        metadata: n.metadata,
        attachments: Vec::new(),
        created_at: timestamp(),
        updated_at: None,
        since: cloud.now,
        extend_to: None,
    })
}

// ---------------------------------------------------------------------------------------------------------
// Request context: caller, project in the URL, microversion

/// Who calls under `/volume/v3/{project_id}/…`, and at which microversion (the minor of 3.x).
struct Caller {
    ctx: AuthCtx,
    mv: u32,
}

impl Caller {
    fn at_least(&self, minor: u32) -> bool {
        self.mv >= minor
    }

    /// A JSON response that echoes the microversion, as Cinder does.
    fn reply(&self, status: StatusCode, body: Value) -> Response {
        let mut r = (status, Json(body)).into_response();
        self.stamp(&mut r);
        r
    }

    fn empty(&self, status: StatusCode) -> Response {
        let mut r = status.into_response();
        self.stamp(&mut r);
        r
    }

    fn stamp(&self, r: &mut Response) {
        if let Ok(v) = HeaderValue::from_str(&format!("volume 3.{}", self.mv)) {
            r.headers_mut().insert("openstack-api-version", v);
        }
        r.headers_mut()
            .insert("vary", HeaderValue::from_static("OpenStack-API-Version"));
    }
}

/// `OpenStack-API-Version: volume 3.X` (or `latest`); absent means 3.0. Outside 3.0–3.70 is 406.
fn microversion(parts: &Parts) -> SimResult<u32> {
    let Some(raw) = parts
        .headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(MIN_MINOR);
    };
    let wanted = raw.split(',').map(str::trim).find_map(|entry| {
        let (svc, ver) = entry.split_once(' ')?;
        matches!(svc, "volume" | "block-storage").then(|| ver.trim().to_owned())
    });
    let Some(ver) = wanted else {
        return Ok(MIN_MINOR);
    };
    if ver.eq_ignore_ascii_case("latest") {
        return Ok(MAX_MINOR);
    }
    let minor = ver
        .strip_prefix("3.")
        .and_then(|m| m.parse::<u32>().ok())
        .filter(|m| (MIN_MINOR..=MAX_MINOR).contains(m));
    minor.ok_or_else(|| {
        SimError::new(
            SVC,
            StatusCode::NOT_ACCEPTABLE,
            "VersionNotFound",
            format!(
                "Version {ver} is not supported by the API. Minimum is 3.{MIN_MINOR} and maximum is 3.{MAX_MINOR}."
            ),
        )
    })
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = SimError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let ctx = parts
            .extensions
            .get::<AuthCtx>()
            .cloned()
            .ok_or_else(|| SimError::unauthorized(SVC))?;
        let mv = microversion(parts)?;
        // `/volume/v3/{project_id}/…`: the project must be the token's.
        let project = parts.uri.path().split('/').nth(3).unwrap_or_default();
        if project != ctx.project_id && !ctx.is_admin() {
            return Err(SimError::forbidden(
                SVC,
                format!("Project {project} does not match the token's project."),
            ));
        }
        Ok(Caller { ctx, mv })
    }
}

// ---------------------------------------------------------------------------------------------------------
// Routes

fn version_doc(app: &SharedApp) -> Value {
    json!({
        "id": "v3.0",
        "links": [
            {"href": "https://docs.openstack.org/", "rel": "describedby", "type": "text/html"},
            {"href": format!("{}/volume/v3/", app.base_url), "rel": "self"},
        ],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.volume+json;version=3"}],
        "min_version": format!("3.{MIN_MINOR}"),
        "status": "CURRENT",
        "updated": "2023-08-31T00:00:00Z",
        "version": format!("3.{MAX_MINOR}"),
    })
}

/// The root lists the versions with 300 Multiple Choices, as Cinder does.
async fn versions_root(State(app): State<SharedApp>) -> Response {
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({"versions": [version_doc(&app)]})),
    )
        .into_response()
}

async fn version_v3(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"versions": [version_doc(&app)]}))
}

/// `/v3` without the slash: Cinder's router redirects to `/v3/` (302, plain text).
async fn version_v3_redirect(State(app): State<SharedApp>) -> Response {
    (
        StatusCode::FOUND,
        [
            (
                axum::http::header::LOCATION,
                format!("{}/volume/v3/", app.base_url),
            ),
            (
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf8".to_owned(),
            ),
        ],
    )
        .into_response()
}

/// The root lists the versions to anyone.
pub fn versions() -> Routes {
    use Sample::*;
    Routes::new(SVC)
        .get(
            "/volume",
            versions_root,
            File("block-storage/versions/versions-response.json"),
        )
        .get(
            "/volume/",
            versions_root,
            File("block-storage/versions/versions-response.json"),
        )
}

/// The version URL is in Cinder's v3 pipeline, behind keystonemiddleware: a 401 without a token
/// (or for a token whose access rules do not allow it).
pub fn version_docs() -> Routes {
    use Sample::*;
    Routes::new(SVC)
        .get(
            "/volume/v3",
            version_v3_redirect,
            NoBody("a 302 to /volume/v3/, plain text"),
        )
        .get(
            "/volume/v3/",
            version_v3,
            File("block-storage/versions/version-show-response.json"),
        )
}

pub fn routes() -> Routes {
    use Sample::*;
    macro_rules! p {
        ($s:literal) => {
            concat!("/volume/v3/{project_id}", $s)
        };
    }
    macro_rules! bs {
        ($s:literal) => {
            File(concat!("block-storage/", $s))
        };
    }
    snapshots::routes(Routes::new(SVC))
        .get(
            p!("/volumes"),
            list_volumes,
            bs!("volumes/volumes-list-response.json"),
        )
        .get(
            p!("/volumes/detail"),
            list_volumes_detail,
            bs!("volumes/v3.69/volumes-list-detailed-response.json"),
        )
        .post(
            p!("/volumes"),
            create_volume,
            bs!("volumes/v3.69/volume-create-response.json"),
        )
        .get(
            p!("/volumes/{id}"),
            show_volume,
            bs!("volumes/v3.69/volume-show-response.json"),
        )
        .put(
            p!("/volumes/{id}"),
            update_volume,
            bs!("volumes/v3.69/volume-update-response.json"),
        )
        .delete(p!("/volumes/{id}"), delete_volume, NoBody("202, no body"))
        .get(
            p!("/volumes/{id}/metadata"),
            show_metadata,
            bs!("volumes/volume-metadata-show-response.json"),
        )
        .post(
            p!("/volumes/{id}/metadata"),
            merge_metadata,
            bs!("volumes/volume-metadata-create-response.json"),
        )
        .put(
            p!("/volumes/{id}/metadata"),
            replace_metadata,
            bs!("volumes/volume-metadata-update-response.json"),
        )
        .get(
            p!("/volumes/{id}/metadata/{key}"),
            show_metadata_key,
            bs!("volumes/volume-metadata-show-key-response.json"),
        )
        .put(
            p!("/volumes/{id}/metadata/{key}"),
            update_metadata_key,
            bs!("volumes/volume-metadata-update-key-response.json"),
        )
        .delete(
            p!("/volumes/{id}/metadata/{key}"),
            delete_metadata_key,
            NoBody("200, empty body"),
        )
        .post(
            p!("/volumes/{id}/action"),
            volume_action,
            NoBody("202 (os-set_bootable: 200), empty body"),
        )
        .get(
            p!("/types"),
            list_types,
            bs!("volume_type/volume-types-list-response.json"),
        )
        .get(
            p!("/types/{id}"),
            show_type,
            bs!("volume_type/volume-type-show-response.json"),
        )
        .get(
            p!("/os-availability-zone"),
            availability_zones,
            bs!("availability-zone-list-response.json"),
        )
        .get(
            p!("/limits"),
            limits,
            bs!("limits/limits-show-response.json"),
        )
        .get(
            p!("/os-quota-sets/{id}"),
            quota_set,
            bs!("quota_sets/quotas-show-response.json"),
        )
        .get(
            p!("/os-quota-sets/{id}/defaults"),
            quota_defaults,
            bs!("quota_sets/quotas-show-defaults-response.json"),
        )
}

// ---------------------------------------------------------------------------------------------------------
// Volumes

fn render_volume(app: &SharedApp, c: &Caller, st: &CinderState, v: &Volume) -> Value {
    let link = |prefix: &str| format!("{}{prefix}/{}/volumes/{}", app.base_url, v.project_id, v.id);
    let attachments: Vec<Value> = v
        .attachments
        .iter()
        .filter(|a| a.attached)
        .map(|a| {
            json!({
                "id": v.id, "attachment_id": a.id, "volume_id": v.id, "server_id": a.server_id,
                "device": a.device, "host_name": null, "attached_at": a.attached_at,
            })
        })
        .collect();
    let type_id = st.volume_type(&v.volume_type).map(|t| &t.id);
    let mut j = json!({
        "id": v.id,
        "name": v.name,
        "description": v.description,
        "size": v.size,
        "status": v.status,
        "attachments": attachments,
        "availability_zone": v.availability_zone,
        "bootable": if v.bootable { "true" } else { "false" },
        "encrypted": false,
        "multiattach": v.multiattach,
        "metadata": v.metadata,
        "volume_type": v.volume_type,
        "snapshot_id": v.snapshot_id,
        "source_volid": v.source_volid,
        "consistencygroup_id": null,
        "replication_status": null,
        "os-vol-tenant-attr:tenant_id": v.project_id,
        "user_id": v.user_id,
        "created_at": v.created_at,
        "updated_at": v.updated_at,
        "links": [
            {"href": link("/volume/v3"), "rel": "self"},
            {"href": link("/volume"), "rel": "bookmark"},
        ],
    });
    if let Some(img) = &v.image_id {
        j["volume_image_metadata"] = json!({"image_id": img});
    }
    // Host and migration attributes and provider_id are admin-only (Cinder's view builder and
    // default policy; checked against Cinder 29).
    if c.ctx.is_admin() {
        j["migration_status"] = Value::Null;
        j["os-vol-host-attr:host"] = json!("kos-sim@lvmdriver-1#lvmdriver-1");
        j["os-vol-mig-status-attr:migstat"] = Value::Null;
        j["os-vol-mig-status-attr:name_id"] = Value::Null;
    }
    let by_version: [(u32, &str, Value); 7] = [
        (13, "group_id", Value::Null),
        (21, "provider_id", Value::Null),
        (
            48,
            "service_uuid",
            json!("5d5b8e1c-6d43-4bfc-a2a8-3a6e0c4d4a11"),
        ),
        (48, "shared_targets", json!(false)),
        (61, "cluster_name", Value::Null),
        (63, "volume_type_id", json!(type_id)),
        (65, "consumes_quota", json!(true)),
    ];
    for (minor, key, val) in by_version {
        if c.at_least(minor) && (key != "provider_id" || c.ctx.is_admin()) {
            j[key] = val;
        }
    }
    j
}

/// A JSON value as Python's `repr` shows it, as Cinder's schema errors quote values (`{'size': 9}`).
fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{s}'"),
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("'{k}': {}", py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Cinder's schema error: `Invalid input for field/attribute F. Value: V. <detail>` (the value as
/// Python's `str`: a string bare, anything else as its `repr`).
fn schema_error(field: &str, v: &Value, detail: &str) -> SimError {
    let shown = match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    };
    bad(format!(
        "Invalid input for field/attribute {field}. Value: {shown}. {detail}"
    ))
}

/// A size by Cinder's `volume_size` schema: an integer ≥ 1 or a string of digits.
fn schema_size(field: &str, raw: &Value) -> SimResult<u64> {
    let r = py_repr(raw);
    match raw {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= 1 => Ok(i.unsigned_abs()),
            Some(_) => Err(schema_error(
                field,
                raw,
                &format!("{r} is less than the minimum of 1"),
            )),
            None => Err(schema_error(
                field,
                raw,
                &format!("{r} is not of type 'integer', 'string'"),
            )),
        },
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                schema_error(field, raw, &format!("{r} is less than the minimum of 1"))
            })
        }
        Value::String(_) => Err(schema_error(
            field,
            raw,
            &format!("{r} does not match '^[0-9]+$'"),
        )),
        _ => Err(schema_error(
            field,
            raw,
            &format!("{r} is not of type 'integer', 'string'"),
        )),
    }
}

fn parse_body(bytes: &[u8]) -> SimResult<Value> {
    serde_json::from_slice(bytes).map_err(|_| bad("Malformed request body"))
}

fn element<'a>(body: &'a Value, key: &str) -> SimResult<&'a Map<String, Value>> {
    body.get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| bad(format!("Missing required element '{key}' in request body.")))
}

fn opt_str(m: &Map<String, Value>, key: &str) -> SimResult<Option<String>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(bad(format!(
            "Invalid input for field/attribute {key}. Value: {v}. {v} is not of type 'string'"
        ))),
    }
}

/// Metadata is a flat map of strings (keys 1–255 characters).
fn metadata_of(v: &Value) -> SimResult<BTreeMap<String, String>> {
    let m = v
        .as_object()
        .ok_or_else(|| bad("Invalid input received: Metadata must be a dict."))?;
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) if !k.is_empty() && k.len() <= 255 && s.len() <= 255 => {
                Ok((k.clone(), s.clone()))
            }
            _ => Err(bad(format!(
                "Invalid input for field/attribute metadata. Value: {{\"{k}\": {v}}}. Metadata keys and values must be strings of at most 255 characters."
            ))),
        })
        .collect()
}

/// A volume of the caller's project (others do not exist, to a non-admin).
fn visible<'a>(c: &Caller, v: &'a Volume) -> SimResult<&'a Volume> {
    if c.ctx.is_admin() || v.project_id == c.ctx.project_id {
        Ok(v)
    } else {
        Err(volume_not_found(&v.id))
    }
}

async fn create_volume(
    State(app): State<SharedApp>,
    c: Caller,
    body: Bytes,
) -> SimResult<Response> {
    let answer = create_volume_now(&app, &c, &body)?;
    hold_answer(&app).await;
    Ok(answer)
}

fn create_volume_now(app: &SharedApp, c: &Caller, body: &Bytes) -> SimResult<Response> {
    let body = parse_body(body)?;
    let m = element(&body, "volume")?;
    let snapshot_id = opt_str(m, "snapshot_id")?;
    let source_volid = opt_str(m, "source_volid")?;
    // Without a size, a copy takes its source's; with neither, the size is missing.
    let size = match m.get("size") {
        None | Some(Value::Null) if snapshot_id.is_some() || source_volid.is_some() => None,
        None | Some(Value::Null) => {
            return Err(bad(
                "Invalid input received: Volume size 'None' must be an integer and greater than 0",
            ));
        }
        Some(raw) => Some(schema_size("size", raw)?),
    };
    // Cinder removed the parameter: multiattach comes from the volume type only.
    let multiattach = match m.get("multiattach") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => {
            matches!(
                s.to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "y" | "t"
            )
        }
        _ => false,
    };
    if multiattach {
        return Err(bad(
            "multiattach parameter has been removed. The default behavior is to use multiattach enabled volume types. Contact your administrator to create a multiattach enabled volume type and use it to create multiattach volumes.",
        ));
    }
    let mut cloud = app.cloud();
    // No backups exist in the simulator, so any reference to one is unknown.
    if let Some(b) = opt_str(m, "backup_id")? {
        return Err(SimError::not_found(
            SVC,
            format!("Backup {b} could not be found."),
        ));
    }
    let metadata = match m.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => metadata_of(v)?,
    };
    let v = new_volume(
        &cloud,
        NewVolume {
            project_id: c.ctx.project_id.clone(),
            user_id: c.ctx.user_id.clone(),
            name: opt_str(m, "name")?,
            description: opt_str(m, "description")?,
            size,
            volume_type: opt_str(m, "volume_type")?,
            availability_zone: opt_str(m, "availability_zone")?,
            image_id: opt_str(m, "imageRef")?,
            source_volid,
            snapshot_id,
            metadata,
        },
    )?;
    let mut out = render_volume(app, c, &cloud.cinder, &v);
    // The tenant attribute extends show and detail only, not the create's answer.
    if let Some(o) = out.as_object_mut() {
        o.remove("os-vol-tenant-attr:tenant_id");
    }
    cloud.cinder.volumes.push(v);
    Ok(c.reply(StatusCode::ACCEPTED, json!({"volume": out})))
}

/// Waits `volume_create_answer_secs` of cloud time from now, reading the model as it goes (so a
/// test that lowers it releases an answer already held).
async fn hold_answer(app: &SharedApp) {
    let made = app.now();
    loop {
        let hold = app.latency().volume_create_answer_secs;
        let left = made.0 + hold - app.now().0;
        if hold <= 0.0 || left <= 0.0 {
            return;
        }
        tokio::time::sleep(app.clock.real(left).min(Duration::from_millis(20))).await;
    }
}

/// `sort=name:asc,size` or `sort_key`/`sort_dir`; Cinder's default is newest first.
fn sort_keys(q: &QueryParams) -> SimResult<Vec<(String, bool)>> {
    const KEYS: &[&str] = &[
        "id",
        "name",
        "status",
        "size",
        "created_at",
        "updated_at",
        "availability_zone",
        "bootable",
    ];
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
            if !KEYS.contains(&k.as_str()) {
                return Err(bad(format!("Invalid input received: Invalid sort key {k}")));
            }
            match d.as_str() {
                "asc" => Ok((k, true)),
                "desc" => Ok((k, false)),
                _ => Err(bad(format!("Invalid input received: Unknown sort direction, must be 'desc' or 'asc'. Got {d}"))),
            }
        })
        .collect()
}

/// `metadata={"k": "v"}`: JSON as openstacksdk sends it, or a Python dict literal as cinderclient does.
fn metadata_filter(raw: &str) -> SimResult<BTreeMap<String, String>> {
    let parsed = serde_json::from_str::<Value>(raw)
        .or_else(|_| serde_json::from_str::<Value>(&raw.replace('\'', "\"")))
        .map_err(|_| {
            bad(format!(
                "Invalid input received: Invalid metadata filter {raw}"
            ))
        })?;
    metadata_of(&parsed)
}

async fn list(
    app: SharedApp,
    c: Caller,
    q: QueryParams,
    path: &str,
    detail: bool,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let st = &cloud.cinder;
    let all_tenants = c.ctx.is_admin() && q.bool("all_tenants").unwrap_or(false);
    let meta = q.get("metadata").map(metadata_filter).transpose()?;
    let bootable = q.bool("bootable");
    let sorts = sort_keys(&q)?;
    let mut vols: Vec<(usize, &Volume)> = st
        .volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| all_tenants || v.project_id == c.ctx.project_id)
        .filter(|(_, v)| q.get("name").is_none_or(|n| v.name.as_deref() == Some(n)))
        .filter(|(_, v)| q.get("status").is_none_or(|s| v.status == s))
        .filter(|(_, v)| {
            q.get("availability_zone")
                .is_none_or(|z| v.availability_zone == z)
        })
        .filter(|(_, v)| bootable.is_none_or(|b| v.bootable == b))
        .filter(|(_, v)| {
            meta.as_ref()
                .is_none_or(|m| m.iter().all(|(k, val)| v.metadata.get(k) == Some(val)))
        })
        .collect();
    let key = |(i, v): &(usize, &Volume), k: &str| -> (u64, String) {
        match k {
            "size" => (v.size, String::new()),
            "created_at" => (*i as u64, String::new()),
            "id" => (0, v.id.clone()),
            "name" => (0, v.name.clone().unwrap_or_default()),
            "status" => (0, v.status.clone()),
            "updated_at" => (0, v.updated_at.clone().unwrap_or_default()),
            "availability_zone" => (0, v.availability_zone.clone()),
            _ => (u64::from(v.bootable), String::new()),
        }
    };
    vols.sort_by(|a, b| {
        sorts
            .iter()
            .map(|(k, asc)| {
                let o = key(a, k).cmp(&key(b, k));
                if *asc { o } else { o.reverse() }
            })
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let page = paginate_at_most(vols, &q, MAX_LIMIT, |(_, v)| v.id.clone())
        .map_err(|m| bad(format!("Invalid input received: marker [{m}] not found")))?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|(_, v)| {
            let full = render_volume(&app, &c, st, v);
            if detail {
                full
            } else {
                json!({"id": full["id"], "name": full["name"], "links": full["links"]})
            }
        })
        .collect();
    let mut body = json!({ "volumes": items });
    if let Some(links) = next_links(&app.base_url, path, &q, page.next_marker.as_deref()) {
        body["volumes_links"] = links;
    }
    Ok(c.reply(StatusCode::OK, body))
}

async fn list_volumes(
    State(app): State<SharedApp>,
    c: Caller,
    q: QueryParams,
    uri: axum::http::Uri,
) -> SimResult<Response> {
    list(app, c, q, uri.path(), false).await
}

async fn list_volumes_detail(
    State(app): State<SharedApp>,
    c: Caller,
    q: QueryParams,
    uri: axum::http::Uri,
) -> SimResult<Response> {
    list(app, c, q, uri.path(), true).await
}

async fn show_volume(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let v = visible(&c, cloud.cinder.volume(&id)?)?;
    Ok(c.reply(
        StatusCode::OK,
        json!({"volume": render_volume(&app, &c, &cloud.cinder, v)}),
    ))
}

async fn update_volume(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let m = element(&body, "volume")?;
    let name = opt_str(m, "name")?;
    let description = opt_str(m, "description")?;
    let metadata = m.get("metadata").map(metadata_of).transpose()?;
    let mut cloud = app.cloud();
    visible(&c, cloud.cinder.volume(&id)?)?;
    let v = cloud.cinder.volume_mut(&id)?;
    if m.contains_key("name") {
        v.name = name;
    }
    if m.contains_key("description") {
        v.description = description;
    }
    if let Some(md) = metadata {
        v.metadata = md;
    }
    v.updated_at = Some(timestamp());
    let v = cloud.cinder.volume(&id)?;
    Ok(c.reply(
        StatusCode::OK,
        json!({"volume": render_volume(&app, &c, &cloud.cinder, v)}),
    ))
}

/// `?cascade=true` deletes the volume's snapshots with it, when each is `available` or `error` (a
/// non-admin's also only when all are of its project); without it a volume with snapshots stays.
async fn delete_volume(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
    q: QueryParams,
) -> SimResult<Response> {
    let cascade = match q.get("cascade") {
        None => false,
        Some(raw) => bool_param(raw)
            .ok_or_else(|| bad(format!("Value '{raw}' for 'cascade' is not a boolean.")))?,
    };
    let mut cloud = app.cloud();
    let now = cloud.now;
    let v = visible(&c, cloud.cinder.volume(&id)?)?;
    let snaps: Vec<&snapshots::Snapshot> = cloud
        .cinder
        .snapshots
        .iter()
        .filter(|s| s.volume_id == id)
        .collect();
    let snapshots_block = if cascade {
        snaps.iter().any(|s| {
            !["available", "error"].contains(&s.status.as_str())
                || (!c.ctx.is_admin() && s.project_id != c.ctx.project_id)
        })
    } else {
        !snaps.is_empty()
    };
    if !DELETABLE.contains(&v.status.as_str()) || !v.attachments.is_empty() || snapshots_block {
        return Err(bad(DELETE_REFUSED));
    }
    start_delete(cloud.cinder.volume_mut(&id)?, now);
    for s in cloud
        .cinder
        .snapshots
        .iter_mut()
        .filter(|s| s.volume_id == id)
    {
        s.status = "deleting".into();
        s.since = now;
        s.updated_at = Some(timestamp());
    }
    Ok(c.empty(StatusCode::ACCEPTED))
}

/// A boolean query or body value as oslo's `bool_from_string(strict=True)` reads it.
fn bool_param(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------------------
// Metadata

/// Runs `f` on the metadata of a visible volume and answers `{"metadata": …}` with the result.
fn with_metadata(
    app: &SharedApp,
    c: &Caller,
    id: &str,
    f: impl FnOnce(&mut BTreeMap<String, String>),
) -> SimResult<Response> {
    let mut cloud = app.cloud();
    visible(c, cloud.cinder.volume(id)?)?;
    let v = cloud.cinder.volume_mut(id)?;
    f(&mut v.metadata);
    Ok(c.reply(StatusCode::OK, json!({"metadata": v.metadata})))
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

fn meta_not_found() -> SimError {
    SimError::not_found(SVC, "Metadata item was not found")
}

async fn show_metadata_key(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id, key)): Path<(String, String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let v = visible(&c, cloud.cinder.volume(&id)?)?;
    let val = v.metadata.get(&key).ok_or_else(meta_not_found)?;
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
    visible(&c, cloud.cinder.volume(&id)?)?;
    cloud
        .cinder
        .volume_mut(&id)?
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
    visible(&c, cloud.cinder.volume(&id)?)?;
    cloud
        .cinder
        .volume_mut(&id)?
        .metadata
        .remove(&key)
        .ok_or_else(meta_not_found)?;
    Ok(c.empty(StatusCode::OK))
}

// ---------------------------------------------------------------------------------------------------------
// Actions

/// `{"new_size": N}` by Cinder's schema: an integer ≥ 1, or a string of digits, and nothing else.
fn extend_size(args: &Value) -> SimResult<u64> {
    let obj = args.as_object().ok_or_else(|| {
        schema_error(
            "os-extend",
            args,
            &format!("{} is not of type 'object'", py_repr(args)),
        )
    })?;
    if let Some(extra) = obj.keys().find(|k| *k != "new_size") {
        return Err(schema_error(
            "os-extend",
            args,
            &format!("Additional properties are not allowed ('{extra}' was unexpected)"),
        ));
    }
    let raw = obj
        .get("new_size")
        .ok_or_else(|| schema_error("os-extend", args, "'new_size' is a required property"))?;
    schema_size("new_size", raw)
}

/// An extend reserves only the added gigabytes (Cinder's `VolumeSizeExceedsAvailableQuota`, 413).
fn check_extend_quota(cloud: &Cloud, project_id: &str, grow: u64) -> SimResult<()> {
    let limit = cloud.quotas.gigabytes;
    let (_, used) = cloud.cinder.usage(project_id);
    if u64::try_from(limit).is_ok_and(|l| used + grow > l) {
        return Err(over_limit(format!(
            "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested {grow}G, quota is {limit}G and {used}G has been consumed."
        )));
    }
    Ok(())
}

async fn volume_action(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let (action, args) = body
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .ok_or_else(|| bad("Malformed request body"))?;
    let mut cloud = app.cloud();
    visible(&c, cloud.cinder.volume(&id)?)?;
    match action.as_str() {
        "os-extend" => {
            let new_size = extend_size(args)?;
            let now = cloud.now;
            let v = cloud.cinder.volume(&id)?;
            if new_size <= v.size {
                return Err(bad(format!(
                    "Invalid input received: New size for extend must be greater than current size. (current: {}, extended: {new_size}).",
                    v.size
                )));
            }
            // An attached volume grows only from 3.42 on; before, it must be `available`.
            let expected = if c.at_least(42) && v.status == "in-use" {
                "in-use"
            } else {
                "available"
            };
            if v.status != expected {
                return Err(bad(format!(
                    "Invalid volume: Volume {id} status must be '{{'status': '{expected}'}}' to extend, currently {}.",
                    v.status
                )));
            }
            let (project, grow) = (v.project_id.clone(), new_size - v.size);
            check_extend_quota(&cloud, &project, grow)?;
            let v = cloud.cinder.volume_mut(&id)?;
            v.status = "extending".into();
            v.extend_to = Some(new_size);
            v.since = now;
            v.updated_at = Some(timestamp());
            Ok(c.empty(StatusCode::ACCEPTED))
        }
        "os-reset_status" => {
            if !c.ctx.is_admin() {
                return Err(SimError::forbidden(
                    SVC,
                    "Policy doesn't allow volume_extension:volume_admin_actions:reset_status to be performed.",
                ));
            }
            let status = args
                .get("status")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("Must specify 'status'"))?;
            let v = cloud.cinder.volume_mut(&id)?;
            v.status = status.to_owned();
            v.updated_at = Some(timestamp());
            Ok(c.empty(StatusCode::ACCEPTED))
        }
        "os-set_bootable" => {
            let bootable = match args.get("bootable") {
                Some(Value::Bool(b)) => Some(*b),
                Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                    "true" | "1" | "yes" | "on" => Some(true),
                    "false" | "0" | "no" | "off" => Some(false),
                    _ => None,
                },
                _ => None,
            }
            .ok_or_else(|| bad("Invalid input received: Must specify bootable in request."))?;
            let v = cloud.cinder.volume_mut(&id)?;
            v.bootable = bootable;
            v.updated_at = Some(timestamp());
            Ok(c.empty(StatusCode::OK))
        }
        other => Err(bad(format!("There is no such action: {other}"))),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Types, zones, limits, quotas

fn render_type(c: &Caller, t: &VolumeType) -> Value {
    // Cinder's default policy: members see the user-visible extra specs (`multiattach`, …), admins
    // all of them (the backend name too) and the QoS specs id.
    let specs: BTreeMap<&String, &String> = t
        .extra_specs
        .iter()
        .filter(|(k, _)| c.ctx.is_admin() || USER_VISIBLE_SPECS.contains(&k.as_str()))
        .collect();
    // A type made without a description has none (null), as minicloud shows.
    let description = Some(&t.description).filter(|d| !d.is_empty());
    let mut j = json!({
        "id": t.id, "name": t.name, "description": description, "is_public": true,
        "os-volume-type-access:is_public": true, "extra_specs": specs,
    });
    if c.ctx.is_admin() {
        j["qos_specs_id"] = Value::Null;
    }
    j
}

async fn list_types(State(app): State<SharedApp>, c: Caller) -> Response {
    let cloud = app.cloud();
    let types: Vec<Value> = cloud
        .cinder
        .types
        .iter()
        .map(|t| render_type(&c, t))
        .collect();
    c.reply(StatusCode::OK, json!({ "volume_types": types }))
}

async fn show_type(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, id)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let wanted = if id == "default" {
        DEFAULT_TYPE
    } else {
        id.as_str()
    };
    let t = cloud
        .cinder
        .types
        .iter()
        .find(|t| t.id == wanted || (id == "default" && t.name == wanted))
        .ok_or_else(|| SimError::not_found(SVC, format!("Volume type {id} could not be found.")))?;
    Ok(c.reply(StatusCode::OK, json!({"volume_type": render_type(&c, t)})))
}

async fn availability_zones(State(app): State<SharedApp>, c: Caller) -> Response {
    let zones: Vec<Value> = app
        .cloud()
        .volume_zones()
        .iter()
        .map(|z| json!({"zoneName": z, "zoneState": {"available": true}}))
        .collect();
    c.reply(StatusCode::OK, json!({ "availabilityZoneInfo": zones }))
}

async fn limits(State(app): State<SharedApp>, c: Caller) -> Response {
    let cloud = app.cloud();
    let q = &cloud.quotas;
    let (count, used) = cloud.cinder.usage(&c.ctx.project_id);
    c.reply(
        StatusCode::OK,
        json!({"limits": {"rate": [], "absolute": {
            "maxTotalVolumes": q.volumes, "maxTotalVolumeGigabytes": q.gigabytes,
            "maxTotalSnapshots": q.snapshots, "maxTotalBackups": 10, "maxTotalBackupGigabytes": 1000,
            "totalVolumesUsed": count, "totalGigabytesUsed": used,
            "totalSnapshotsUsed": cloud.cinder.snapshot_count(&c.ctx.project_id),
            "totalBackupsUsed": 0, "totalBackupGigabytesUsed": 0,
        }}}),
    )
}

/// Every quota of the set with its limit and usage (`None`: no usage, as in `/defaults`).
fn quota_entries(
    q: &Quotas,
    st: &CinderState,
    usage: Option<(u64, u64, u64)>,
) -> Vec<(String, i64, u64)> {
    let (count, used, snaps) = usage.unwrap_or_default();
    let mut out = vec![
        ("volumes".to_owned(), q.volumes, count),
        ("gigabytes".to_owned(), q.gigabytes, used),
        ("snapshots".to_owned(), q.snapshots, snaps),
        ("backups".to_owned(), 10, 0),
        ("backup_gigabytes".to_owned(), 1000, 0),
        ("groups".to_owned(), 10, 0),
        ("per_volume_gigabytes".to_owned(), -1, 0),
    ];
    for t in &st.types {
        let of_type = st.volumes.iter().filter(|v| v.volume_type == t.name);
        let snaps = st.snapshots.iter().filter(|s| s.volume_type == t.name);
        // A snapshot holds its gigabytes against its volume type's quota too.
        let (n, gb, sn) = if usage.is_some() {
            (
                of_type.clone().count() as u64,
                of_type.map(|v| v.size).sum::<u64>() + snaps.clone().map(|s| s.size).sum::<u64>(),
                snaps.count() as u64,
            )
        } else {
            (0, 0, 0)
        };
        out.push((format!("volumes_{}", t.name), -1, n));
        out.push((format!("gigabytes_{}", t.name), -1, gb));
        out.push((format!("snapshots_{}", t.name), -1, sn));
    }
    out
}

fn check_quota_project(c: &Caller, project_id: &str) -> SimResult<()> {
    if project_id != c.ctx.project_id && !c.ctx.is_admin() {
        return Err(SimError::forbidden(
            SVC,
            "Policy doesn't allow volume_extension:quotas:show to be performed.",
        ));
    }
    Ok(())
}

async fn quota_set(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, project_id)): Path<(String, String)>,
    q: QueryParams,
) -> SimResult<Response> {
    check_quota_project(&c, &project_id)?;
    let cloud = app.cloud();
    let usage = q.bool("usage").unwrap_or(false);
    let mut set = Map::new();
    set.insert("id".into(), json!(project_id));
    let st = &cloud.cinder;
    let (count, used) = st.usage(&project_id);
    let counts = (count, used, st.snapshot_count(&project_id));
    for (k, limit, in_use) in quota_entries(&cloud.quotas, st, Some(counts)) {
        let v = if usage {
            json!({"limit": limit, "in_use": in_use, "reserved": 0, "allocated": 0})
        } else {
            json!(limit)
        };
        set.insert(k, v);
    }
    Ok(c.reply(StatusCode::OK, json!({ "quota_set": set })))
}

async fn quota_defaults(
    State(app): State<SharedApp>,
    c: Caller,
    Path((_, project_id)): Path<(String, String)>,
) -> SimResult<Response> {
    check_quota_project(&c, &project_id)?;
    let cloud = app.cloud();
    let mut set = Map::new();
    set.insert("id".into(), json!(project_id));
    for (k, limit, _) in quota_entries(&app.cfg.quotas, &cloud.cinder, None) {
        set.insert(k, json!(limit));
    }
    Ok(c.reply(StatusCode::OK, json!({ "quota_set": set })))
}
