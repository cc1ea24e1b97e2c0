//! Version discovery, extensions, availability zones, floating IP pools, quotas and tags.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use bytes::Bytes;
use serde_json::{Value, json};

use super::api::{access, meta_mut, rows};
use super::*;
use crate::app::SharedApp;
use crate::config::Quotas;
use crate::routes::Sample::File;

pub(super) fn versions() -> Routes {
    Routes::new(SVC)
        .get(
            "/network",
            version_list,
            File("network/networks/versions-list-response.json"),
        )
        .get(
            "/network/",
            version_list,
            File("network/networks/versions-list-response.json"),
        )
}

async fn version_list(State(app): State<SharedApp>) -> Json<Value> {
    Json(json!({"versions": [{
        "id": "v2.0",
        "status": "CURRENT",
        "links": [{"href": format!("{}{PREFIX}/", app.base_url), "rel": "self"}],
    }]}))
}

pub(super) async fn version(State(app): State<SharedApp>) -> Json<Value> {
    let resources: Vec<Value> = [
        ("subnet", "subnets"),
        ("network", "networks"),
        ("port", "ports"),
    ]
    .iter()
    .map(|(name, coll)| {
        json!({
            "name": name,
            "collection": coll,
            "links": [{"href": format!("{}{PREFIX}/{coll}", app.base_url), "rel": "self"}],
        })
    })
    .collect();
    Json(json!({ "resources": resources }))
}

/// (alias, name, description): what clients probe before using a feature. `tag-ports-during-bulk-creation`
/// is listed only with [`crate::SimConfig::neutron_port_tags_on_create`] ([`PORT_TAGS_ON_CREATE`]):
/// without its ML2 driver a port POST's tags are ignored, so clients must tag after creating.
const EXTENSIONS: &[(&str, &str, &str)] = &[
    ("agent", "agent", "The agent management extension."),
    (
        "allowed-address-pairs",
        "Allowed Address Pairs",
        "Provides allowed address pairs",
    ),
    (
        "availability_zone",
        "Availability Zone",
        "The availability zone extension.",
    ),
    (
        "binding",
        "Port Binding",
        "Expose port bindings of a virtual port to external application",
    ),
    (
        "dns-integration",
        "DNS Integration",
        "Provides integration with DNS.",
    ),
    (
        "external-net",
        "Neutron external network",
        "Adds external network attribute to network resource.",
    ),
    (
        "ext-gw-mode",
        "Neutron L3 Configurable external gateway mode",
        "Extension of the router abstraction for specifying whether SNAT should occur on the external gateway",
    ),
    (
        "extraroute",
        "Neutron Extra Route",
        "Extra routes configuration for L3 router",
    ),
    (
        "extraroute-atomic",
        "Atomically add/remove extra routes",
        "Edit extra routes of a router on server side by atomically adding/removing extra routes",
    ),
    (
        "filter-validation",
        "Filter parameters validation",
        "Provides validation on filter parameters.",
    ),
    (
        "fip-port-details",
        "Floating IP Port Details Extension",
        "Add port_details attribute to Floating IP resource",
    ),
    (
        "floatingip-pools",
        "Floating IP Pools Extension",
        "Provides a floating IP pools API.",
    ),
    (
        "network_availability_zone",
        "Network Availability Zone",
        "Availability zone support for network.",
    ),
    (
        "net-mtu",
        "Network MTU",
        "Provides MTU attribute for a network resource.",
    ),
    (
        "pagination",
        "Pagination support",
        "Extension that indicates that pagination is enabled.",
    ),
    ("port-security", "Port Security", "Provides port security"),
    (
        "project-id",
        "project_id field enabled",
        "Extension that indicates that project_id field is enabled.",
    ),
    (
        "provider",
        "Provider Network",
        "Expose mapping of virtual networks to physical networks",
    ),
    (
        "quotas",
        "Quota management support",
        "Expose functions for quotas management per project",
    ),
    (
        "quota_details",
        "Quota details management support",
        "Expose functions for quotas usage statistics per project",
    ),
    (
        "router",
        "Neutron L3 Router",
        "Router abstraction for basic L3 forwarding between L2 Neutron networks and access to external networks via a NAT gateway.",
    ),
    (
        "router_availability_zone",
        "Router Availability Zone",
        "Availability zone support for router.",
    ),
    (
        "security-group",
        "security-group",
        "The security groups extension.",
    ),
    (
        "sorting",
        "Sorting support",
        "Extension that indicates that sorting is enabled.",
    ),
    (
        "standard-attr-description",
        "standard-attr-description",
        "Extension to add descriptions to standard attributes",
    ),
    (
        "standard-attr-revisions",
        "Resource revision numbers",
        "This extension will display the revision number of neutron resources.",
    ),
    (
        "standard-attr-tag",
        "Tag support for resources with standard attribute: subnet, trunk, network_segment_range, router, network, policy, subnetpool, port, security_group, floatingip",
        "Enables to set tag on resources with standard attribute.",
    ),
    (
        "standard-attr-timestamp",
        "Resource timestamps",
        "Adds created_at and updated_at fields to all Neutron resources that have Neutron standard attributes.",
    ),
    (
        "stateful-security-group",
        "Stateful security group",
        "Indicates if the security group is stateful or not",
    ),
];

/// The extension Neutron's ML2 driver `tag_ports_during_bulk_creation` advertises.
pub(super) const PORT_TAGS_ON_CREATE: (&str, &str, &str) = (
    "tag-ports-during-bulk-creation",
    "Tag Ports During Bulk Creation",
    "Allow to tag ports during bulk creation",
);

/// The extensions this Neutron has, as configured.
fn enabled(app: &SharedApp) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut all = EXTENSIONS.to_vec();
    if app.cfg.neutron_port_tags_on_create {
        all.push(PORT_TAGS_ON_CREATE);
    }
    all
}

fn extension_json(&(alias, name, description): &(&str, &str, &str)) -> Value {
    json!({
        "alias": alias,
        "name": name,
        "description": description,
        "updated": "2013-02-03T10:00:00-00:00",
        "links": [],
    })
}

pub(super) async fn extensions(State(app): State<SharedApp>) -> Json<Value> {
    let all: Vec<Value> = enabled(&app).iter().map(extension_json).collect();
    Json(json!({ "extensions": all }))
}

pub(super) async fn extension(
    State(app): State<SharedApp>,
    Path(alias): Path<String>,
) -> SimResult<Json<Value>> {
    enabled(&app)
        .iter()
        .find(|e| e.0 == alias)
        .map(|e| Json(json!({"extension": extension_json(e)})))
        .ok_or_else(|| {
            not_found(
                "ExtensionNotFound",
                format!("Extension with alias {alias} does not exist"),
            )
        })
}

pub(super) async fn availability_zones() -> Json<Value> {
    Json(json!({"availability_zones": [
        {"name": "nova", "resource": "network", "state": "available"},
        {"name": "nova", "resource": "router", "state": "available"},
    ]}))
}

/// The IPv4 subnets of the external networks the caller can use for floating IPs.
pub(super) async fn floatingip_pools(State(app): State<SharedApp>) -> Json<Value> {
    let cloud = app.cloud();
    let n = &cloud.neutron;
    let pools: Vec<Value> = n
        .subnets
        .iter()
        .filter(|s| s.ip_version == 4 && n.networks.iter().any(|x| x.m.id == s.network_id && x.external))
        .map(|s| {
            json!({
                "subnet_id": s.m.id, "subnet_name": s.m.name, "cidr": s.cidr, "network_id": s.network_id,
                "project_id": s.m.project_id, "tenant_id": s.m.project_id,
            })
        })
        .collect();
    Json(json!({ "floatingip_pools": pools }))
}

// ---- quotas ----------------------------------------------------------------------------------------

/// Resources Neutron reports that the simulator does not model, at devstack's defaults.
const UNMODELLED: &[(&str, i64)] = &[("rbac_policy", 10), ("subnetpool", -1)];

fn limits(q: &Quotas) -> Value {
    let mut v = json!({
        "network": q.networks, "subnet": q.subnets, "port": q.ports, "router": q.routers,
        "floatingip": q.floating_ips, "security_group": q.security_groups,
        "security_group_rule": q.security_group_rules,
    });
    for (k, l) in UNMODELLED {
        v[*k] = json!(l);
    }
    v
}

fn quota_access(ctx: &AuthCtx, project: &str) -> SimResult<()> {
    if owns(ctx, project) {
        Ok(())
    } else {
        Err(forbidden("get_quota"))
    }
}

pub(super) async fn quota_show(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(project): Path<String>,
) -> SimResult<Json<Value>> {
    quota_access(&ctx, &project)?;
    let cloud = app.cloud();
    Ok(Json(json!({"quota": limits(&cloud.quotas)})))
}

pub(super) async fn quota_default(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(project): Path<String>,
) -> SimResult<Json<Value>> {
    quota_access(&ctx, &project)?;
    Ok(Json(json!({"quota": limits(&app.cfg.quotas)})))
}

pub(super) async fn quota_details(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(project): Path<String>,
) -> SimResult<Json<Value>> {
    quota_access(&ctx, &project)?;
    let mut cloud = app.cloud();
    security_groups::ensure_default(&mut cloud.neutron, &project);
    let mut out = serde_json::Map::new();
    for (res, used, limit) in quota_usage(&cloud, &project) {
        out.insert(
            res.into(),
            json!({"used": used, "limit": limit, "reserved": 0}),
        );
    }
    for (res, limit) in UNMODELLED {
        out.insert(
            (*res).into(),
            json!({"used": 0, "limit": limit, "reserved": 0}),
        );
    }
    Ok(Json(json!({ "quota": out })))
}

/// Admin only, as in Neutron ("Only admin can view or configure quota").
pub(super) async fn quotas_list(
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
) -> SimResult<Json<Value>> {
    if !ctx.is_admin() {
        return Err(SimError::new(
            SVC,
            StatusCode::FORBIDDEN,
            "AdminRequired",
            "User does not have admin privileges: Only admin can view or configure quota.",
        ));
    }
    let cloud = app.cloud();
    let all: Vec<Value> = cloud
        .keystone
        .projects
        .iter()
        .map(|p| {
            let mut v = limits(&cloud.quotas);
            v["project_id"] = json!(p.id);
            v["tenant_id"] = json!(p.id);
            v
        })
        .collect();
    Ok(Json(json!({ "quotas": all })))
}

// ---- tags ------------------------------------------------------------------------------------------

fn visible_tags(n: &NeutronState, kind: Kind, ctx: &AuthCtx, id: &str) -> SimResult<Vec<String>> {
    rows(n, kind, ctx, Some(id))
        .into_iter()
        .next()
        .and_then(|v| serde_json::from_value(v["tags"].clone()).ok())
        .ok_or_else(|| kind.not_found(id))
}

fn tag_not_found(kind: Kind, id: &str, tag: &str) -> SimError {
    not_found(
        "TagNotFound",
        format!("Tag {tag} could not be found for {} {id}.", kind.singular()),
    )
}

pub(super) async fn tags_list(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    Ok(Json(
        json!({"tags": visible_tags(&cloud.neutron, kind, &ctx, &id)?}),
    ))
}

/// Applies `f` to the tags of a resource the caller owns; bumps the revision when they changed.
fn edit_tags(
    app: &SharedApp,
    kind: Kind,
    ctx: &AuthCtx,
    id: &str,
    f: impl FnOnce(&mut Vec<String>) -> SimResult<()>,
) -> SimResult<Vec<String>> {
    let mut cloud = app.cloud();
    access(&mut cloud.neutron, kind, ctx, id, "update")?;
    let m = meta_mut(&mut cloud.neutron, kind, id).ok_or_else(|| kind.not_found(id))?;
    let mut tags = m.tags.clone();
    f(&mut tags)?;
    if tags != m.tags {
        m.tags = tags;
        m.touch();
    }
    Ok(m.tags.clone())
}

pub(super) async fn tags_replace(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_json(&body)?;
    let list = body
        .get("tags")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("Invalid input for tags. Reason: 'None' is not a list."))?;
    let mut new: Vec<String> = Vec::new();
    for t in list {
        let t = t.as_str().ok_or_else(|| {
            bad(format!(
                "Invalid input for tags. Reason: '{t}' is not a string."
            ))
        })?;
        valid_tag(t)?;
        if !new.iter().any(|x| x == t) {
            new.push(t.to_owned());
        }
    }
    let tags = edit_tags(&app, kind, &ctx, &id, |tags| {
        *tags = new;
        Ok(())
    })?;
    Ok(Json(json!({ "tags": tags })))
}

pub(super) async fn tags_clear(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    edit_tags(&app, kind, &ctx, &id, |tags| {
        tags.clear();
        Ok(())
    })?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn tag_check(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    let cloud = app.cloud();
    if visible_tags(&cloud.neutron, kind, &ctx, &id)?.contains(&tag) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(tag_not_found(kind, &id, &tag))
    }
}

pub(super) async fn tag_add(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    valid_tag(&tag)?;
    edit_tags(&app, kind, &ctx, &id, |tags| {
        if !tags.contains(&tag) {
            tags.push(tag.clone());
        }
        Ok(())
    })?;
    Ok(StatusCode::CREATED)
}

pub(super) async fn tag_remove(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    edit_tags(&app, kind, &ctx, &id, |tags| {
        let before = tags.len();
        tags.retain(|t| t != &tag);
        if tags.len() == before {
            return Err(tag_not_found(kind, &id, &tag));
        }
        Ok(())
    })?;
    Ok(StatusCode::NO_CONTENT)
}
