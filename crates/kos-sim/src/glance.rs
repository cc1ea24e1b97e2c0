//! Glance v2 subset: version discovery, images (list with filters and paging, show, create, upload,
//! JSON-patch update, delete), image tags and the image schemas.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::app::{AuthCtx, SharedApp};
use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::ids;
use crate::nova::digest::{hex, md5, sha512};
use crate::query::QueryParams;
use crate::routes::{Routes, Sample};
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::Image;
/// Glance's `limit_param_default` and `api_limit_max`.
const DEFAULT_LIMIT: usize = 25;
const MAX_LIMIT: usize = 1000;
/// Glance's `image_tag_quota`.
const MAX_TAGS: usize = 128;
/// Largest upload the simulator hashes in memory.
const MAX_UPLOAD: usize = 256 << 20;
/// The project that owns the seeded public images (devstack uploads them as admin).
const ADMIN_PROJECT: &str = "8d0b9a4b1c6e4c2f9e7f3a5d2b1c0e9f";

const DISK_FORMATS: &[&str] = &[
    "ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop",
];
const CONTAINER_FORMATS: &[&str] = &[
    "ami",
    "ari",
    "aki",
    "bare",
    "ovf",
    "ova",
    "docker",
    "compressed",
];
const VISIBILITIES: &[&str] = &["public", "private", "shared", "community"];
/// Attributes no request may set.
const READ_ONLY: &[&str] = &[
    "id",
    "status",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "size",
    "virtual_size",
    "created_at",
    "updated_at",
    "self",
    "file",
    "schema",
    "direct_url",
    "locations",
    "owner",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Image {
    pub id: String,
    pub name: Option<String>,
    pub status: String,
    pub visibility: String,
    pub container_format: Option<String>,
    pub disk_format: Option<String>,
    pub min_disk: u64,
    pub min_ram: u64,
    pub size: Option<u64>,
    pub virtual_size: Option<u64>,
    pub checksum: Option<String>,
    pub os_hash_algo: Option<String>,
    pub os_hash_value: Option<String>,
    pub owner: String,
    pub protected: bool,
    pub os_hidden: bool,
    pub tags: Vec<String>,
    /// Free-form string properties (`os_distro`, `hw_*`, ...), rendered at the top level as Glance does.
    pub properties: BTreeMap<String, String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Image {
    fn view(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "visibility": self.visibility,
            "container_format": self.container_format,
            "disk_format": self.disk_format,
            "min_disk": self.min_disk,
            "min_ram": self.min_ram,
            "size": self.size,
            "virtual_size": self.virtual_size,
            "checksum": self.checksum,
            "os_hash_algo": self.os_hash_algo,
            "os_hash_value": self.os_hash_value,
            "owner": self.owner,
            "protected": self.protected,
            "os_hidden": self.os_hidden,
            "tags": self.tags,
            "created_at": ids::iso(self.created_at),
            "updated_at": ids::iso(self.updated_at),
            "self": format!("/v2/images/{}", self.id),
            "file": format!("/v2/images/{}/file", self.id),
            "schema": "/v2/schemas/image",
        });
        for (k, val) in &self.properties {
            v[k] = json!(val);
        }
        v
    }

    /// A core attribute's value as a string, or a property (for list filters).
    fn field(&self, key: &str) -> Option<String> {
        match key {
            "name" => self.name.clone(),
            "status" => Some(self.status.clone()),
            "visibility" => Some(self.visibility.clone()),
            "container_format" => self.container_format.clone(),
            "disk_format" => self.disk_format.clone(),
            "owner" => Some(self.owner.clone()),
            "id" => Some(self.id.clone()),
            "checksum" => self.checksum.clone(),
            "os_hash_value" => self.os_hash_value.clone(),
            "min_disk" => Some(self.min_disk.to_string()),
            "min_ram" => Some(self.min_ram.to_string()),
            "protected" => Some(self.protected.to_string()),
            "os_hidden" => Some(self.os_hidden.to_string()),
            other => self.properties.get(other).cloned(),
        }
    }

    fn visible_to(&self, project_id: &str) -> bool {
        self.owner == project_id || matches!(self.visibility.as_str(), "public" | "community")
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct GlanceState {
    pub images: Vec<Image>,
}

/// What other services need to know about an image.
#[derive(Debug, Clone)]
pub struct ImageView {
    pub id: String,
    pub name: String,
    pub status: String,
    pub min_disk_gb: u64,
    pub min_ram_mb: u64,
    pub size_bytes: u64,
}

pub fn seed(cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {
    let now = Utc::now();
    let image = |name: &str, size: u64, props: &[(&str, &str)], tags: &[&str]| {
        // Stable stand-ins for the data's digests.
        let data = format!("kos-sim image {name}");
        Image {
            id: ids::uuid(),
            name: Some(name.into()),
            status: "active".into(),
            visibility: "public".into(),
            container_format: Some("bare".into()),
            disk_format: Some("qcow2".into()),
            min_disk: 0,
            min_ram: 0,
            size: Some(size),
            virtual_size: None,
            checksum: Some(hex(&md5(data.as_bytes()))),
            os_hash_algo: Some("sha512".into()),
            os_hash_value: Some(hex(&sha512(data.as_bytes()))),
            owner: ADMIN_PROJECT.into(),
            protected: false,
            os_hidden: false,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            properties: props
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            created_at: now,
            updated_at: now,
        }
    };
    cloud.glance.images = vec![
        image(
            "ubuntu-24.04",
            599_785_472,
            &[
                ("os_distro", "ubuntu"),
                ("os_version", "24.04"),
                ("architecture", "x86_64"),
                ("hw_disk_bus", "virtio"),
            ],
            &["kos"],
        ),
        image(
            "cirros-0.6.2",
            21_430_272,
            &[("os_distro", "cirros"), ("architecture", "x86_64")],
            &[],
        ),
    ];
}

pub fn image_view(cloud: &Cloud, image_id: &str) -> Option<ImageView> {
    cloud
        .glance
        .images
        .iter()
        .find(|i| i.id == image_id)
        .map(|i| ImageView {
            id: i.id.clone(),
            name: i.name.clone().unwrap_or_default(),
            status: i.status.clone(),
            min_disk_gb: i.min_disk,
            min_ram_mb: i.min_ram,
            size_bytes: i.size.unwrap_or(0),
        })
}

// ---------------------------------------------------------------------------------------------------------
// Routes

fn version_list(app: &SharedApp) -> Value {
    let href = format!("{}/image/v2/", app.base_url);
    let mut versions =
        vec![json!({"id": "v2.16", "status": "CURRENT", "links": [{"rel": "self", "href": href}]})];
    for minor in (0..16).rev() {
        versions.push(json!({"id": format!("v2.{minor}"), "status": "SUPPORTED", "links": [{"rel": "self", "href": href}]}));
    }
    json!({ "versions": versions })
}

async fn versions_multiple(State(app): State<SharedApp>) -> Response {
    (StatusCode::MULTIPLE_CHOICES, Json(version_list(&app))).into_response()
}

async fn versions_ok(State(app): State<SharedApp>) -> Json<Value> {
    Json(version_list(&app))
}

pub fn versions() -> Routes {
    use Sample::NoBody;
    Routes::new(SVC)
        .get(
            "/image",
            versions_multiple,
            NoBody("300 Multiple Choices; Glance's API reference has no versions sample"),
        )
        .get(
            "/image/",
            versions_multiple,
            NoBody("300 Multiple Choices; Glance's API reference has no versions sample"),
        )
        .get(
            "/image/versions",
            versions_ok,
            NoBody("Glance's API reference has no versions sample"),
        )
}

pub fn routes() -> Routes {
    use Sample::{File, NoBody};
    Routes::new(SVC)
        .get(
            "/image/v2/images",
            list_images,
            File("image/v2/samples/images-list-response.json"),
        )
        .post(
            "/image/v2/images",
            create_image,
            File("image/v2/samples/image-create-response.json"),
        )
        .get(
            "/image/v2/images/{id}",
            show_image,
            File("image/v2/samples/image-show-response.json"),
        )
        .patch(
            "/image/v2/images/{id}",
            update_image,
            File("image/v2/samples/image-update-response.json"),
        )
        .delete("/image/v2/images/{id}", delete_image, NoBody("204"))
        .put("/image/v2/images/{id}/file", upload_image, NoBody("204"))
        .put("/image/v2/images/{id}/tags/{tag}", add_tag, NoBody("204"))
        .delete(
            "/image/v2/images/{id}/tags/{tag}",
            delete_tag,
            NoBody("204"),
        )
        .get(
            "/image/v2/schemas/image",
            schema_image,
            // Served verbatim from Glance's API-reference sample (the key checker reads `properties` as
            // user data, which it is not here).
            NoBody("Glance's schema document, verbatim from schemas-image-show-response.json"),
        )
        .get(
            "/image/v2/schemas/images",
            schema_images,
            NoBody("Glance's schema document, verbatim from schemas-images-list-response.json"),
        )
}

// ---------------------------------------------------------------------------------------------------------
// Handlers

fn bad(msg: impl Into<String>) -> SimError {
    SimError::bad_request(SVC, msg)
}

fn forbidden(msg: impl Into<String>) -> SimError {
    SimError::forbidden(SVC, msg)
}

fn not_found(id: &str) -> SimError {
    SimError::not_found(SVC, format!("No image found with ID {id}"))
}

fn find<'a>(cloud: &'a Cloud, ctx: &AuthCtx, id: &str) -> SimResult<&'a Image> {
    cloud
        .glance
        .images
        .iter()
        .find(|i| i.id == id && (i.visible_to(&ctx.project_id) || ctx.is_admin()))
        .ok_or_else(|| not_found(id))
}

/// The image for a change by the caller: only its owner (or an admin) may modify it.
fn find_owned<'a>(cloud: &'a mut Cloud, ctx: &AuthCtx, id: &str) -> SimResult<&'a mut Image> {
    let img = cloud
        .glance
        .images
        .iter_mut()
        .find(|i| i.id == id && (i.visible_to(&ctx.project_id) || ctx.is_admin()))
        .ok_or_else(|| not_found(id))?;
    if img.owner != ctx.project_id && !ctx.is_admin() {
        return Err(forbidden("You are not permitted to modify this image."));
    }
    Ok(img)
}

const LIST_PARAMS: &[&str] = &[
    "limit",
    "marker",
    "sort_key",
    "sort_dir",
    "sort",
    "visibility",
    "member_status",
    "tag",
    "size_min",
    "size_max",
    "os_hidden",
];

async fn list_images(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    q: QueryParams,
) -> SimResult<Json<Value>> {
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => {
            let n: i64 = l
                .parse()
                .map_err(|_| bad("limit param must be an integer"))?;
            if n < 0 {
                return Err(bad("limit param must be positive"));
            }
            (n as usize).min(MAX_LIMIT)
        }
    };
    let visibility = q.get("visibility");
    if let Some(v) = visibility
        && !VISIBILITIES.contains(&v)
        && v != "all"
    {
        return Err(bad(format!("Invalid visibility value: {v}")));
    }
    if let Some(m) = q.get("member_status")
        && !["accepted", "pending", "rejected", "all"].contains(&m)
    {
        return Err(bad(format!("Invalid status value: {m}")));
    }
    let size = |k: &str| -> SimResult<Option<u64>> {
        q.get(k)
            .map(|v| {
                v.parse()
                    .map_err(|_| bad(format!("Invalid value for {k}: {v}")))
            })
            .transpose()
    };
    let (size_min, size_max) = (size("size_min")?, size("size_max")?);
    let tags = q.all("tag");
    let show_hidden = q.bool("os_hidden").unwrap_or(false);
    let (sort_key, desc) = match q.get("sort") {
        Some(s) => {
            let first = s.split(',').next().unwrap_or("created_at");
            let (k, d) = first.split_once(':').unwrap_or((first, "desc"));
            (k.to_owned(), d != "asc")
        }
        None => (
            q.get("sort_key").unwrap_or("created_at").to_owned(),
            q.get("sort_dir").unwrap_or("desc") != "asc",
        ),
    };
    if ![
        "name",
        "status",
        "container_format",
        "disk_format",
        "size",
        "id",
        "created_at",
        "updated_at",
        "visibility",
        "min_disk",
        "min_ram",
    ]
    .contains(&sort_key.as_str())
    {
        return Err(bad(format!("Invalid sort key: {sort_key}")));
    }
    // Every other parameter filters on an attribute or property, as Glance does.
    let attr_filters: Vec<(&str, &str)> =
        q.0.iter()
            .filter(|(k, _)| !LIST_PARAMS.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
    let cloud = app.cloud();
    let mut images: Vec<&Image> = cloud
        .glance
        .images
        .iter()
        .filter(|i| match visibility {
            None => {
                i.visible_to(&ctx.project_id) && i.visibility != "community"
                    || i.owner == ctx.project_id
            }
            Some("all") => i.visible_to(&ctx.project_id),
            Some(v) => i.visibility == v && i.visible_to(&ctx.project_id),
        })
        .filter(|i| show_hidden || !i.os_hidden)
        .filter(|i| tags.iter().all(|t| i.tags.iter().any(|x| x == t)))
        .filter(|i| size_min.is_none_or(|m| i.size.unwrap_or(0) >= m))
        .filter(|i| size_max.is_none_or(|m| i.size.unwrap_or(0) <= m))
        .filter(|i| {
            attr_filters.iter().all(|(k, v)| {
                // `in:a,b` is Glance's list operator for name/status/formats.
                let have = i.field(k);
                match v.strip_prefix("in:") {
                    Some(list) => have.is_some_and(|h| list.split(',').any(|x| x == h)),
                    None => have.as_deref() == Some(*v),
                }
            })
        })
        .collect();
    images.sort_by(|a, b| {
        let ord = match sort_key.as_str() {
            "name" => a.name.cmp(&b.name),
            "size" => a.size.cmp(&b.size),
            "updated_at" => a.updated_at.cmp(&b.updated_at),
            "created_at" => a.created_at.cmp(&b.created_at),
            "min_disk" => a.min_disk.cmp(&b.min_disk),
            "min_ram" => a.min_ram.cmp(&b.min_ram),
            k => a.field(k).cmp(&b.field(k)),
        }
        .then(a.id.cmp(&b.id));
        if desc { ord.reverse() } else { ord }
    });
    let start = match q.get("marker") {
        None => 0,
        Some(m) => {
            images
                .iter()
                .position(|i| i.id == m)
                .ok_or_else(|| bad(format!("Invalid marker. Image {m} could not be found.")))?
                + 1
        }
    };
    let page: Vec<&Image> = images.into_iter().skip(start).take(limit).collect();
    let mut body = json!({
        "images": page.iter().map(|i| i.view()).collect::<Vec<_>>(),
        "schema": "/v2/schemas/images",
        "first": first_link(&q),
    });
    // Glance links the next page whenever this one is full.
    if limit > 0
        && page.len() == limit
        && let Some(last) = page.last()
    {
        body["next"] = json!(next_link(&q, &last.id));
    }
    Ok(Json(body))
}

fn first_link(q: &QueryParams) -> String {
    let params: Vec<(String, String)> =
        q.0.iter().filter(|(k, _)| k != "marker").cloned().collect();
    encode_link(&params)
}

fn next_link(q: &QueryParams, marker: &str) -> String {
    let mut params: Vec<(String, String)> =
        q.0.iter().filter(|(k, _)| k != "marker").cloned().collect();
    params.push(("marker".into(), marker.into()));
    encode_link(&params)
}

fn encode_link(params: &[(String, String)]) -> String {
    if params.is_empty() {
        return "/v2/images".into();
    }
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        s.append_pair(k, v);
    }
    format!("/v2/images?{}", s.finish())
}

async fn show_image(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    Ok(Json(find(&cloud, &ctx, &id)?.view()))
}

/// Checks and applies one attribute (create body or patch value) to an image.
fn set_attr(img: &mut Image, key: &str, val: &Value, creating: bool) -> SimResult<()> {
    if READ_ONLY.contains(&key) && !(creating && key == "id") {
        return Err(forbidden(format!("Attribute '{key}' is read-only.")));
    }
    let as_str = |v: &Value| -> SimResult<Option<String>> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) if s.chars().count() <= 255 => Ok(Some(s.clone())),
            other => Err(bad(format!("Invalid value for {key}: {other}"))),
        }
    };
    let as_u64 = |v: &Value| -> SimResult<u64> {
        v.as_u64().ok_or_else(|| {
            bad(format!(
                "{v} is not of type 'integer' or is negative ({key})"
            ))
        })
    };
    let as_bool = |v: &Value| -> SimResult<bool> {
        v.as_bool()
            .ok_or_else(|| bad(format!("{v} is not of type 'boolean' ({key})")))
    };
    match key {
        "id" => {
            let id = val
                .as_str()
                .filter(|s| uuid::Uuid::parse_str(s).is_ok())
                .ok_or_else(|| bad(format!("{val} is not a valid uuid")))?;
            img.id = id.to_owned();
        }
        "name" => img.name = as_str(val)?,
        "visibility" => {
            let v = as_str(val)?.unwrap_or_default();
            if !VISIBILITIES.contains(&v.as_str()) {
                return Err(bad(format!("Invalid visibility value: {v}")));
            }
            img.visibility = v;
        }
        "container_format" | "disk_format" => {
            if !creating && img.status != "queued" {
                return Err(forbidden(format!(
                    "Attribute {key} can be only replaced for a queued image."
                )));
            }
            let v = as_str(val)?;
            let allowed = if key == "disk_format" {
                DISK_FORMATS
            } else {
                CONTAINER_FORMATS
            };
            if let Some(f) = &v
                && !allowed.contains(&f.as_str())
            {
                return Err(bad(format!(
                    "Invalid value '{f}' for {key}: expected one of {allowed:?}"
                )));
            }
            if key == "disk_format" {
                img.disk_format = v;
            } else {
                img.container_format = v;
            }
        }
        "min_disk" => img.min_disk = as_u64(val)?,
        "min_ram" => img.min_ram = as_u64(val)?,
        "protected" => img.protected = as_bool(val)?,
        "os_hidden" => img.os_hidden = as_bool(val)?,
        "tags" => {
            let arr = val
                .as_array()
                .ok_or_else(|| bad(format!("{val} is not of type 'array'")))?;
            let mut tags: Vec<String> = Vec::new();
            for t in arr {
                let t = t
                    .as_str()
                    .filter(|t| t.chars().count() <= 255)
                    .ok_or_else(|| bad(format!("Invalid tag {t}")))?;
                if !tags.iter().any(|x| x == t) {
                    tags.push(t.to_owned());
                }
            }
            if tags.len() > MAX_TAGS {
                return Err(SimError::new(
                    SVC,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "OverLimit",
                    format!("Maximum number of tags exceeded: {MAX_TAGS}"),
                ));
            }
            img.tags = tags;
        }
        prop => {
            let v = val
                .as_str()
                .filter(|s| s.chars().count() <= 65535)
                .ok_or_else(|| bad(format!("{val} is not of type 'string' ({prop})")))?;
            img.properties.insert(prop.to_owned(), v.to_owned());
        }
    }
    Ok(())
}

async fn create_image(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    body: Bytes,
) -> SimResult<Response> {
    let body: Value =
        serde_json::from_slice(&body).map_err(|_| bad("Malformed JSON in request body."))?;
    let obj = body
        .as_object()
        .ok_or_else(|| bad("Request body must be a JSON object."))?;
    let now = Utc::now();
    let mut img = Image {
        id: ids::uuid(),
        name: None,
        status: "queued".into(),
        visibility: "shared".into(),
        container_format: None,
        disk_format: None,
        min_disk: 0,
        min_ram: 0,
        size: None,
        virtual_size: None,
        checksum: None,
        os_hash_algo: None,
        os_hash_value: None,
        owner: ctx.project_id.clone(),
        protected: false,
        os_hidden: false,
        tags: Vec::new(),
        properties: BTreeMap::new(),
        created_at: now,
        updated_at: now,
    };
    for (k, v) in obj {
        set_attr(&mut img, k, v, true)?;
    }
    let mut cloud = app.cloud();
    if cloud.glance.images.iter().any(|i| i.id == img.id) {
        return Err(SimError::conflict(
            SVC,
            "Duplicate",
            format!("Image with identifier {} already exists!", img.id),
        ));
    }
    let view = img.view();
    let location = format!("{}/image/v2/images/{}", app.base_url, img.id);
    cloud.glance.images.push(img);
    let mut r = (StatusCode::CREATED, Json(view)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

async fn update_image(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/openstack-images-v2.1-json-patch")
        && !ct.starts_with("application/openstack-images-v2.0-json-patch")
    {
        return Err(SimError::new(
            SVC,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "Content-Type {ct} is not supported. Use application/openstack-images-v2.1-json-patch"
            ),
        ));
    }
    let ops: Vec<Value> =
        serde_json::from_slice(&body).map_err(|_| bad("Malformed JSON in request body."))?;
    let mut cloud = app.cloud();
    let img = find_owned(&mut cloud, &ctx, &id)?;
    // Work on a copy so that a failing op leaves the image unchanged (the patch is atomic).
    let mut new = img.clone();
    for op in &ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .and_then(|p| p.strip_prefix('/'))
            .filter(|p| !p.is_empty() && !p.contains('/'))
            .ok_or_else(|| bad(format!("Invalid JSON pointer for this resource: {op}")))?;
        match kind {
            "add" | "replace" => {
                let value = op
                    .get("value")
                    .ok_or_else(|| bad("Operation objects must contain a 'value' member."))?;
                let core = new.view().get(path).is_some() && !new.properties.contains_key(path);
                if kind == "replace" && !core && !new.properties.contains_key(path) {
                    return Err(SimError::conflict(
                        SVC,
                        "Conflict",
                        format!("Property {path} does not exist."),
                    ));
                }
                set_attr(&mut new, path, value, false)?;
            }
            "remove" => {
                if READ_ONLY.contains(&path) {
                    return Err(forbidden(format!("Attribute '{path}' is read-only.")));
                }
                if new.properties.remove(path).is_none() {
                    if new.view().get(path).is_some() {
                        return Err(forbidden(format!("Attribute '{path}' is reserved.")));
                    }
                    return Err(SimError::conflict(
                        SVC,
                        "Conflict",
                        format!("Property {path} does not exist."),
                    ));
                }
            }
            other => {
                return Err(bad(format!(
                    "Invalid operation: `{other}`. It must be one of: add, remove, replace."
                )));
            }
        }
    }
    new.updated_at = Utc::now();
    *img = new;
    Ok(Json(img.view()))
}

async fn delete_image(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let img = find_owned(&mut cloud, &ctx, &id).map_err(|e| {
        if e.status == StatusCode::FORBIDDEN {
            forbidden("You are not permitted to delete this image.")
        } else {
            e
        }
    })?;
    if img.protected {
        return Err(forbidden(format!(
            "Image {id} is protected and cannot be deleted."
        )));
    }
    cloud.glance.images.retain(|i| i.id != id);
    Ok(StatusCode::NO_CONTENT)
}

async fn upload_image(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> SimResult<StatusCode> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/octet-stream") {
        return Err(SimError::new(
            SVC,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "Content-Type {ct} is not supported for image data. Use application/octet-stream"
            ),
        ));
    }
    {
        let mut cloud = app.cloud();
        let img = find_owned(&mut cloud, &ctx, &id)?;
        if img.status != "queued" {
            return Err(SimError::conflict(
                SVC,
                "Conflict",
                format!(
                    "Image status transition from {} to saving is not allowed",
                    img.status
                ),
            ));
        }
        if img.disk_format.is_none() || img.container_format.is_none() {
            return Err(bad(
                "Properties disk_format, container_format must be set prior to saving data.",
            ));
        }
        img.status = "saving".into();
    }
    // The lock is not held while the body streams in.
    let data = axum::body::to_bytes(body, MAX_UPLOAD).await;
    let mut cloud = app.cloud();
    let img = find_owned(&mut cloud, &ctx, &id)?;
    match data {
        Ok(data) => {
            img.size = Some(data.len() as u64);
            img.checksum = Some(hex(&md5(&data)));
            img.os_hash_algo = Some("sha512".into());
            img.os_hash_value = Some(hex(&sha512(&data)));
            img.status = "active".into();
            img.updated_at = Utc::now();
            Ok(StatusCode::NO_CONTENT)
        }
        Err(_) => {
            img.status = "queued".into();
            Err(SimError::new(
                SVC,
                StatusCode::PAYLOAD_TOO_LARGE,
                "OverLimit",
                format!(
                    "Image exceeds the storage quota: the simulator accepts up to {MAX_UPLOAD} bytes"
                ),
            ))
        }
    }
}

async fn add_tag(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    if tag.chars().count() > 255 {
        return Err(bad(format!("Tag {tag} is too long (max 255 characters)")));
    }
    let mut cloud = app.cloud();
    let img = find_owned(&mut cloud, &ctx, &id)?;
    if !img.tags.contains(&tag) {
        if img.tags.len() >= MAX_TAGS {
            return Err(SimError::new(
                SVC,
                StatusCode::PAYLOAD_TOO_LARGE,
                "OverLimit",
                format!("Maximum number of tags exceeded: {MAX_TAGS}"),
            ));
        }
        img.tags.push(tag);
        img.updated_at = Utc::now();
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_tag(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let img = find_owned(&mut cloud, &ctx, &id)?;
    let before = img.tags.len();
    img.tags.retain(|t| t != &tag);
    if img.tags.len() == before {
        return Err(SimError::not_found(SVC, format!("Tag {tag} not found")));
    }
    img.updated_at = Utc::now();
    Ok(StatusCode::NO_CONTENT)
}

/// Glance's own schema documents (as its API reference records them).
async fn schema_image() -> SimResult<Json<Value>> {
    schema(include_str!(
        "../../../testdata/api-samples/image/v2/samples/schemas-image-show-response.json"
    ))
}

async fn schema_images() -> SimResult<Json<Value>> {
    schema(include_str!(
        "../../../testdata/api-samples/image/v2/samples/schemas-images-list-response.json"
    ))
}

fn schema(text: &str) -> SimResult<Json<Value>> {
    serde_json::from_str::<Map<String, Value>>(text)
        .map(|m| Json(Value::Object(m)))
        .map_err(|e| {
            SimError::new(
                SVC,
                StatusCode::INTERNAL_SERVER_ERROR,
                "Schema",
                e.to_string(),
            )
        })
}
