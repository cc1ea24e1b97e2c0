//! Nova (compute) subset: version discovery with microversions 2.1–2.96, flavors, keypairs, server groups,
//! servers (create with networks / block devices / scheduler hints, a scheduler over simulated hosts, the
//! BUILD → ACTIVE state machine, tags, metadata, actions, volume attachments, interfaces, IPs), limits,
//! quota sets and availability zones. Responses are rendered per microversion in `servers::server_view` and
//! `resources`; every endpoint is registered with the API-reference sample it must match.

mod boot;
pub mod digest;
mod placement;
mod resources;
mod servers;

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::app::{AuthCtx, SharedApp};
use crate::clock::SimTime;
use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::routes::{Routes, Sample};
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::Compute;
/// Path prefix of the v2.1 API (the catalog URL has no project id, as devstack's).
const P: &str = "/compute/v2.1";

// ---------------------------------------------------------------------------------------------------------
// Microversions

/// A compute microversion `2.N` (the major is always 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mv(pub u32);

impl Mv {
    pub const MIN: Mv = Mv(1);
    pub const MAX: Mv = Mv(96);

    pub fn at_least(self, minor: u32) -> bool {
        self.0 >= minor
    }
}

impl std::fmt::Display for Mv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "2.{}", self.0)
    }
}

/// The requested microversion: `OpenStack-API-Version: compute X.Y` wins over the legacy
/// `X-OpenStack-Nova-API-Version`; none means 2.1; `latest` the maximum.
pub fn parse_microversion(headers: &HeaderMap) -> SimResult<Mv> {
    let modern = headers
        .get_all("openstack-api-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|v| {
            let mut it = v.split_whitespace();
            let svc = it.next()?;
            svc.eq_ignore_ascii_case("compute")
                .then(|| it.next().map(str::to_owned))
                .flatten()
        });
    let raw = modern.or_else(|| {
        headers
            .get("x-openstack-nova-api-version")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_owned())
    });
    let Some(raw) = raw else {
        return Ok(Mv::MIN);
    };
    if raw.eq_ignore_ascii_case("latest") {
        return Ok(Mv::MAX);
    }
    let invalid = || {
        SimError::bad_request(
            SVC,
            format!(
                "API Version String {raw} is of invalid format. Must be of format MajorNum.MinorNum."
            ),
        )
    };
    let (major, minor) = raw.split_once('.').ok_or_else(invalid)?;
    let major: u32 = major.parse().map_err(|_| invalid())?;
    let minor: u32 = minor.parse().map_err(|_| invalid())?;
    if major != 2 || !(Mv::MIN.0..=Mv::MAX.0).contains(&minor) {
        return Err(SimError::new(
            SVC,
            StatusCode::NOT_ACCEPTABLE,
            "VersionNotAcceptable",
            format!(
                "Version {raw} is not supported by the API. Minimum is {} and maximum is {}.",
                Mv::MIN,
                Mv::MAX
            ),
        ));
    }
    Ok(Mv(minor))
}

impl<S: Send + Sync> FromRequestParts<S> for Mv {
    type Rejection = SimError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<Mv>() {
            Some(mv) => Ok(*mv),
            None => parse_microversion(&parts.headers),
        }
    }
}

/// Resolves the microversion once (406/400 before the handler runs) and echoes it, as Nova does.
async fn microversion_layer(mut req: Request, next: Next) -> Response {
    let mv = match parse_microversion(req.headers()) {
        Ok(mv) => mv,
        Err(e) => return e.into_response(),
    };
    req.extensions_mut().insert(mv);
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("compute {mv}")) {
        h.insert("openstack-api-version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&mv.to_string()) {
        h.insert("x-openstack-nova-api-version", v);
    }
    h.insert(
        axum::http::header::VARY,
        HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
    );
    resp
}

/// A handler behind the microversion layer.
fn mv<H, T>(h: H) -> impl Handler<T, SharedApp>
where
    H: Handler<T, SharedApp>,
    T: 'static,
{
    h.layer(from_fn(microversion_layer))
}

// ---------------------------------------------------------------------------------------------------------
// State

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    pub ram_mb: u64,
    pub disk_gb: u64,
    pub ephemeral_gb: u64,
    pub swap_mb: u64,
    pub rxtx_factor: f64,
    pub is_public: bool,
    pub disabled: bool,
    pub description: Option<String>,
    pub extra_specs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Keypair {
    /// Nova's integer database id (shown by GET at ≥ 2.10).
    pub id: u64,
    pub name: String,
    pub user_id: String,
    pub key_type: String,
    pub public_key: String,
    pub fingerprint: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerGroup {
    pub id: String,
    pub name: String,
    /// affinity, anti-affinity, soft-affinity, soft-anti-affinity
    pub policy: String,
    pub max_server_per_host: Option<u32>,
    pub members: Vec<String>,
    pub project_id: String,
    pub user_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    pub code: u16,
    pub message: String,
    pub created: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerPort {
    pub port_id: String,
    /// Nova created it (from a `uuid` network request) and deletes it with the server; a port the user
    /// passed is only unbound.
    pub created_by_nova: bool,
    pub tag: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeAttachment {
    pub volume_id: String,
    pub device: String,
    pub attachment_id: String,
    pub bdm_uuid: String,
    pub delete_on_termination: bool,
    pub tag: Option<String>,
    /// The root disk of a boot-from-volume server.
    pub boot: bool,
    /// False while a volume Nova created for the server is still `creating`.
    pub attached: bool,
    /// An attach or detach the compute host has not finished (the volume is `attaching` or
    /// `detaching` in Cinder until then).
    #[serde(default)]
    pub pending: Option<PendingAttach>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttachPhase {
    Attaching,
    Detaching,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PendingAttach {
    pub phase: AttachPhase,
    pub until: SimTime,
    /// When the compute host sends its connector (Cinder's `reserved` → `attaching`).
    #[serde(default)]
    pub connect_at: Option<SimTime>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub hostname: String,
    pub project_id: String,
    pub user_id: String,
    /// `None`: booted from volume (Nova shows `"image": ""`).
    pub image_id: Option<String>,
    /// The flavor as it was at boot (Nova embeds this copy at ≥ 2.47).
    pub flavor: Flavor,
    pub key_name: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub tags: Vec<String>,
    /// As sent (base64).
    pub user_data: Option<String>,
    /// Decoded, for later work that inspects what a server was told to run.
    pub user_data_decoded: Option<String>,
    pub access_ipv4: String,
    pub access_ipv6: String,
    pub disk_config: String,
    pub config_drive: bool,
    pub vm_state: String,
    pub task_state: Option<String>,
    pub power_state: u8,
    pub host: Option<String>,
    pub availability_zone: String,
    /// The zone the user asked for (2.96 `pinned_availability_zone`).
    pub pinned_az: Option<String>,
    /// Names asked for at create (shown when the server has no ports to read them from).
    pub security_groups: Vec<String>,
    pub ports: Vec<ServerPort>,
    pub volumes: Vec<VolumeAttachment>,
    pub server_groups: Vec<String>,
    pub fault: Option<Fault>,
    pub locked: bool,
    pub locked_reason: Option<String>,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
    pub launched_at: Option<DateTime<Utc>>,
    /// When BUILD may become ACTIVE (volumes permitting).
    pub boot_at: SimTime,
    /// When the running task (stop, start, reboot) completes.
    pub task_until: Option<SimTime>,
    /// Set by DELETE: when the server disappears.
    pub delete_at: Option<SimTime>,
    pub console: Vec<String>,
    /// Console lines the guest will write, by when (the simulated bootstrap; see `boot`).
    #[serde(default)]
    pub pending_console: Vec<(SimTime, String)>,
    pub instance_seq: u64,
    /// A boot into an anti-affinity group whose host has not passed Nova's late policy check yet
    /// (only with a scheduler claim delay; see `placement`).
    #[serde(default)]
    pub placement: Option<placement::Placement>,
}

impl Server {
    /// Nova's status from vm_state and task_state.
    pub fn status(&self) -> &'static str {
        match (self.vm_state.as_str(), self.task_state.as_deref()) {
            ("building", _) => "BUILD",
            ("active", Some("rebooting")) => "REBOOT",
            ("active", Some("rebooting_hard")) => "HARD_REBOOT",
            ("active", _) => "ACTIVE",
            ("stopped", _) => "SHUTOFF",
            ("error", _) => "ERROR",
            ("deleted", _) => "DELETED",
            _ => "UNKNOWN",
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NovaState {
    pub flavors: Vec<Flavor>,
    pub keypairs: Vec<Keypair>,
    pub server_groups: Vec<ServerGroup>,
    /// In creation order; lists sort newest first, as Nova's default `created_at desc`.
    pub servers: Vec<Server>,
    pub next_keypair_id: u64,
    pub next_instance_seq: u64,
}

impl NovaState {
    pub fn server(&self, id: &str) -> Option<&Server> {
        self.servers.iter().find(|s| s.id == id)
    }
    pub fn server_mut(&mut self, id: &str) -> Option<&mut Server> {
        self.servers.iter_mut().find(|s| s.id == id)
    }
    pub fn flavor(&self, id: &str) -> Option<&Flavor> {
        self.flavors.iter().find(|f| f.id == id)
    }
}

pub fn seed(cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {
    // devstack's flavors, with its ids.
    let flavors = [
        ("1", "m1.tiny", 1, 512, 1),
        ("2", "m1.small", 1, 2048, 20),
        ("3", "m1.medium", 2, 4096, 40),
        ("4", "m1.large", 4, 8192, 80),
        ("5", "m1.xlarge", 8, 16384, 160),
    ];
    cloud.nova.flavors = flavors
        .into_iter()
        .map(|(id, name, vcpus, ram_mb, disk_gb)| Flavor {
            id: id.into(),
            name: name.into(),
            vcpus,
            ram_mb,
            disk_gb,
            ephemeral_gb: 0,
            swap_mb: 0,
            rxtx_factor: 1.0,
            is_public: true,
            disabled: false,
            description: None,
            extra_specs: BTreeMap::new(),
        })
        .collect();
}

/// Moves servers whose deadlines passed: BUILD → ACTIVE (once their volumes exist), task completion,
/// and removal of deleted servers.
pub fn advance(cloud: &mut Cloud, _cfg: &SimConfig) {
    servers::advance(cloud);
}

/// Server → ERROR with `message` as its fault (the admin API's "break this server").
pub fn force_server_error(cloud: &mut Cloud, server_id: &str, message: &str) -> bool {
    let date = cloud.date();
    match cloud.nova.server_mut(server_id) {
        Some(s) if s.delete_at.is_none() => {
            servers::set_error(s, 500, message, date);
            let now = cloud.now;
            crate::guests::raise(cloud, now, server_id, crate::guests::GuestEvent::Shutdown);
            true
        }
        _ => false,
    }
}

/// A build that fails after Nova accepted it (NoValidHost, exhausted reschedules): the server goes to
/// ERROR on no host, its ports are released (pre-created ones unbound and kept, as Nova does) and it
/// stays a member of its server groups.
pub fn fail_build(cloud: &mut Cloud, server_id: &str, code: u16, message: &str) {
    let date = cloud.date();
    let Some(s) = cloud.nova.server_mut(server_id) else {
        return;
    };
    servers::set_error(s, code, message, date);
    s.host = None;
    s.pending_console.clear();
    let s = s.clone();
    servers::release_ports(cloud, &s);
    if let Some(s) = cloud.nova.server_mut(server_id) {
        s.ports.clear();
    }
}

/// Appends a line to a server's console log (what `os-getConsoleOutput` returns).
pub fn console_append(cloud: &mut Cloud, server_id: &str, line: &str) -> bool {
    match cloud.nova.server_mut(server_id) {
        Some(s) => {
            s.console.push(line.to_owned());
            true
        }
        None => false,
    }
}

// ---------------------------------------------------------------------------------------------------------
// Shared helpers

pub(crate) fn bad(msg: impl Into<String>) -> SimError {
    SimError::bad_request(SVC, msg)
}

pub(crate) fn not_found(msg: impl Into<String>) -> SimError {
    SimError::not_found(SVC, msg)
}

pub(crate) fn conflict(msg: impl Into<String>) -> SimError {
    SimError::conflict(SVC, "Conflict", msg)
}

pub(crate) fn forbidden(msg: impl Into<String>) -> SimError {
    SimError::forbidden(SVC, msg)
}

/// Nova's JSON-schema validation message.
pub(crate) fn invalid(field: &str, value: &Value, detail: &str) -> SimError {
    bad(format!(
        "Invalid input for field/attribute {field}. Value: {value}. {detail}"
    ))
}

/// Request bodies are parsed here so that malformed JSON gets Nova's 400, not axum's plain-text one.
pub(crate) fn parse_body(body: &Bytes) -> SimResult<Value> {
    serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))
}

/// The object under `key` of a request body, or Nova's "required property" 400.
pub(crate) fn body_object<'a>(
    body: &'a Value,
    key: &str,
) -> SimResult<&'a serde_json::Map<String, Value>> {
    body.get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| invalid(key, body, &format!("'{key}' is a required property")))
}

/// Rejects properties the request schema does not know (Nova's schemas set additionalProperties false).
pub(crate) fn only_known(obj: &serde_json::Map<String, Value>, known: &[&str]) -> SimResult<()> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        ))),
        None => Ok(()),
    }
}

pub(crate) fn reply(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

pub(crate) fn links(app: &SharedApp, collection: &str, id: &str) -> Value {
    json!([
        {"rel": "self", "href": format!("{}{P}/{collection}/{id}", app.base_url)},
        {"rel": "bookmark", "href": format!("{}/compute/{collection}/{id}", app.base_url)},
    ])
}

pub(crate) fn bookmark(app: &SharedApp, collection: &str, id: &str) -> Value {
    json!([{"rel": "bookmark", "href": format!("{}/compute/{collection}/{id}", app.base_url)}])
}

/// Nova's default page size cap (`[api] max_limit`).
pub(crate) use crate::paging::MAX_LIMIT;

/// Validates `limit` (a non-negative integer) before paging.
pub(crate) fn check_limit(q: &crate::query::QueryParams) -> SimResult<()> {
    match q.get("limit") {
        Some(l) if l.parse::<usize>().is_err() => Err(bad(format!(
            "Invalid input for query parameters limit. Value: {l}. '{l}' does not match '^[0-9]*$'"
        ))),
        _ => Ok(()),
    }
}

/// `Some(count)` of quota `limit` (-1 = unlimited) would be exceeded by `used + requested`.
pub(crate) fn over(limit: i64, used: i64, requested: i64) -> bool {
    limit >= 0 && used + requested > limit
}

type Ctx = Extension<AuthCtx>;

// ---------------------------------------------------------------------------------------------------------
// Routes

fn version_doc(app: &SharedApp, full: bool) -> Value {
    let mut v = json!({
        "id": "v2.1",
        "status": "CURRENT",
        "version": Mv::MAX.to_string(),
        "min_version": Mv::MIN.to_string(),
        "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{}{P}/", app.base_url)}],
    });
    if full {
        if let Some(l) = v["links"].as_array_mut() {
            l.push(json!({"rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/"}));
        }
        v["media-types"] = json!([{"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}]);
    }
    v
}

async fn versions_list(State(app): State<SharedApp>) -> Json<Value> {
    // v2.0 is listed (as devstack does) so clients see the deprecated legacy API and pick v2.1.
    Json(json!({"versions": [
        {"id": "v2.0", "status": "DEPRECATED", "version": "", "min_version": "",
         "updated": "2025-07-04T12:00:00Z",
         "links": [{"rel": "self", "href": format!("{}/compute/v2/", app.base_url)}]},
        version_doc(&app, false),
    ]}))
}

async fn version_show(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"version": version_doc(&app, true)}))
}

pub fn versions() -> Routes {
    use Sample::File;
    Routes::new(SVC)
        .get(
            "/compute",
            versions_list,
            File("compute/versions/versions-get-resp.json"),
        )
        .get(
            "/compute/",
            versions_list,
            File("compute/versions/versions-get-resp.json"),
        )
        .get(
            P,
            version_show,
            File("compute/versions/v21-version-get-resp.json"),
        )
        .get(
            "/compute/v2.1/",
            version_show,
            File("compute/versions/v21-version-get-resp.json"),
        )
}

pub fn routes() -> Routes {
    use Sample::{File, NoBody};
    use resources as r;
    use servers as s;
    Routes::new(SVC)
        // flavors
        .get(
            "/compute/v2.1/flavors",
            mv(r::list_flavors),
            File("compute/flavors/v2.75/flavors-list-resp.json"),
        )
        .get(
            "/compute/v2.1/flavors/detail",
            mv(r::list_flavors_detail),
            File("compute/flavors/v2.75/flavors-detail-resp.json"),
        )
        .get(
            "/compute/v2.1/flavors/{id}",
            mv(r::show_flavor),
            File("compute/flavors/v2.75/flavor-get-resp.json"),
        )
        .get(
            "/compute/v2.1/flavors/{id}/os-extra_specs",
            mv(r::flavor_extra_specs),
            NoBody(
                "Nova's flavor-extra-specs samples are not in testdata; the body is {\"extra_specs\": {...}}",
            ),
        )
        // keypairs
        .get(
            "/compute/v2.1/os-keypairs",
            mv(r::list_keypairs),
            File("compute/os-keypairs/v2.35/keypairs-list-resp.json"),
        )
        .post(
            "/compute/v2.1/os-keypairs",
            mv(r::create_keypair),
            File("compute/os-keypairs/v2.92/keypairs-import-post-resp.json"),
        )
        .get(
            "/compute/v2.1/os-keypairs/{name}",
            mv(r::show_keypair),
            File("compute/os-keypairs/v2.10/keypairs-get-resp.json"),
        )
        .delete(
            "/compute/v2.1/os-keypairs/{name}",
            mv(r::delete_keypair),
            NoBody("204 (202 before 2.2)"),
        )
        // server groups
        .get(
            "/compute/v2.1/os-server-groups",
            mv(r::list_server_groups),
            File("compute/os-server-groups/v2.64/server-groups-list-resp.json"),
        )
        .post(
            "/compute/v2.1/os-server-groups",
            mv(r::create_server_group),
            File("compute/os-server-groups/v2.64/server-groups-post-resp.json"),
        )
        .get(
            "/compute/v2.1/os-server-groups/{id}",
            mv(r::show_server_group),
            File("compute/os-server-groups/v2.64/server-groups-get-resp.json"),
        )
        .delete(
            "/compute/v2.1/os-server-groups/{id}",
            mv(r::delete_server_group),
            NoBody("204"),
        )
        // limits, quotas, zones
        .get(
            "/compute/v2.1/limits",
            mv(r::limits),
            File("compute/limits/v2.57/limit-get-resp.json"),
        )
        .get(
            "/compute/v2.1/os-quota-sets/{project_id}",
            mv(r::quota_set),
            File("compute/os-quota-sets/v2.57/quotas-show-get-resp.json"),
        )
        .get(
            "/compute/v2.1/os-quota-sets/{project_id}/detail",
            mv(r::quota_set_detail),
            File("compute/os-quota-sets/v2.57/quotas-show-detail-get-resp.json"),
        )
        .get(
            "/compute/v2.1/os-availability-zone",
            mv(r::availability_zones),
            File("compute/os-availability-zone/availability-zone-list-resp.json"),
        )
        // servers
        .post(
            "/compute/v2.1/servers",
            mv(s::create),
            File("compute/servers/v2.94/server-create-resp.json"),
        )
        .get(
            "/compute/v2.1/servers",
            mv(s::list),
            File("compute/servers/v2.96/servers-list-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/detail",
            mv(s::list_detail),
            File("compute/servers/v2.96/servers-details-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}",
            mv(s::show),
            File("compute/servers/v2.96/server-get-resp.json"),
        )
        .put(
            "/compute/v2.1/servers/{id}",
            mv(s::update),
            File("compute/servers/v2.96/server-update-resp.json"),
        )
        .delete("/compute/v2.1/servers/{id}", mv(s::delete), NoBody("204"))
        .post(
            "/compute/v2.1/servers/{id}/action",
            mv(s::action),
            // os-stop, os-start, reboot, lock and unlock answer 202 without a body.
            File("compute/os-console-output/console-output-post-resp.json"),
        )
        // tags (≥ 2.26)
        .get(
            "/compute/v2.1/servers/{id}/tags",
            mv(s::list_tags),
            File("compute/os-server-tags/v2.26/server-tags-index-resp.json"),
        )
        .put(
            "/compute/v2.1/servers/{id}/tags",
            mv(s::replace_tags),
            File("compute/os-server-tags/v2.26/server-tags-put-all-resp.json"),
        )
        .delete(
            "/compute/v2.1/servers/{id}/tags",
            mv(s::delete_tags),
            NoBody("204"),
        )
        .get(
            "/compute/v2.1/servers/{id}/tags/{tag}",
            mv(s::check_tag_exists),
            NoBody("204 when present, 404 otherwise"),
        )
        .put(
            "/compute/v2.1/servers/{id}/tags/{tag}",
            mv(s::add_tag),
            NoBody("201 when added, 204 when present"),
        )
        .delete(
            "/compute/v2.1/servers/{id}/tags/{tag}",
            mv(s::delete_tag),
            NoBody("204"),
        )
        // metadata
        .get(
            "/compute/v2.1/servers/{id}/metadata",
            mv(s::list_metadata),
            File("compute/server-metadata/server-metadata-all-resp.json"),
        )
        .post(
            "/compute/v2.1/servers/{id}/metadata",
            mv(s::merge_metadata),
            File("compute/server-metadata/server-metadata-all-resp.json"),
        )
        .put(
            "/compute/v2.1/servers/{id}/metadata",
            mv(s::replace_metadata),
            File("compute/server-metadata/server-metadata-all-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}/metadata/{key}",
            mv(s::show_metadata_item),
            File("compute/server-metadata/server-metadata-resp.json"),
        )
        .put(
            "/compute/v2.1/servers/{id}/metadata/{key}",
            mv(s::set_metadata_item),
            File("compute/server-metadata/server-metadata-resp.json"),
        )
        .delete(
            "/compute/v2.1/servers/{id}/metadata/{key}",
            mv(s::delete_metadata_item),
            NoBody("204"),
        )
        // addresses, interfaces, volumes
        .get(
            "/compute/v2.1/servers/{id}/ips",
            mv(s::ips),
            File("compute/server-ips/server-ips-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}/ips/{network}",
            mv(s::ips_of_network),
            File("compute/server-ips/server-ips-network-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}/os-interface",
            mv(s::list_interfaces),
            File("compute/os-attach-interfaces/v2.70/attach-interfaces-list-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}/os-interface/{port_id}",
            mv(s::show_interface),
            File("compute/os-attach-interfaces/v2.70/attach-interfaces-show-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}/os-volume_attachments",
            mv(s::list_volume_attachments),
            File("compute/os-volume_attachments/v2.89/list-volume-attachments-resp.json"),
        )
        .post(
            "/compute/v2.1/servers/{id}/os-volume_attachments",
            mv(s::attach_volume),
            File("compute/os-volume_attachments/v2.89/attach-volume-to-server-resp.json"),
        )
        .get(
            "/compute/v2.1/servers/{id}/os-volume_attachments/{volume_id}",
            mv(s::show_volume_attachment),
            File("compute/os-volume_attachments/v2.89/volume-attachment-detail-resp.json"),
        )
        .delete(
            "/compute/v2.1/servers/{id}/os-volume_attachments/{volume_id}",
            mv(s::detach_volume),
            NoBody("202"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn microversion_negotiation() {
        assert_eq!(parse_microversion(&headers(&[])).ok(), Some(Mv(1)));
        let h = headers(&[("openstack-api-version", "compute 2.47")]);
        assert_eq!(parse_microversion(&h).ok(), Some(Mv(47)));
        let h = headers(&[("x-openstack-nova-api-version", "latest")]);
        assert_eq!(parse_microversion(&h).ok(), Some(Mv::MAX));
        let h = headers(&[
            ("openstack-api-version", "volume 3.60"),
            ("x-openstack-nova-api-version", "2.10"),
        ]);
        assert_eq!(parse_microversion(&h).ok(), Some(Mv(10)));
        let h = headers(&[("openstack-api-version", "compute 2.200")]);
        assert_eq!(
            parse_microversion(&h).err().map(|e| e.status),
            Some(StatusCode::NOT_ACCEPTABLE)
        );
        let h = headers(&[("openstack-api-version", "compute two")]);
        assert_eq!(
            parse_microversion(&h).err().map(|e| e.status),
            Some(StatusCode::BAD_REQUEST)
        );
    }
}
