//! The generic collection API shared by every resource: list (filters, fields, tags, sorting, paging),
//! show, create (single and bulk), update and delete, and the route table.

use std::cmp::Ordering;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use bytes::Bytes;
use serde_json::{Map, Value};

use super::*;
use crate::app::SharedApp;
use crate::paging::{next_links, paginate};
use crate::query::QueryParams;
use crate::routes::Sample::{File, NoBody};

/// Query keys that are not attribute filters.
const RESERVED: &[&str] = &[
    "fields",
    "limit",
    "marker",
    "sort_key",
    "sort_dir",
    "page_reverse",
    "tags",
    "tags-any",
    "not-tags",
    "not-tags-any",
];

/// Rendered rows of `kind` the caller can see (just `id`'s when given).
pub(super) fn rows(n: &NeutronState, kind: Kind, ctx: &AuthCtx, id: Option<&str>) -> Vec<Value> {
    let admin = ctx.is_admin();
    let want = |m: &Meta| id.is_none_or(|i| m.id == i);
    let mine = |m: &Meta| owns(ctx, &m.project_id);
    match kind {
        Kind::Network => n
            .networks
            .iter()
            .filter(|x| want(&x.m) && networks::visible(x, ctx))
            .map(|x| networks::render(n, x, admin))
            .collect(),
        Kind::Subnet => n
            .subnets
            .iter()
            .filter(|x| want(&x.m) && subnets::visible(n, x, ctx))
            .map(|x| subnets::render(n, x))
            .collect(),
        // Neutron's `network_owner` rule: a network's owner also sees the ports other projects (Octavia's
        // amphorae) have on it.
        Kind::Port => n
            .ports
            .iter()
            .filter(|x| want(&x.m) && (mine(&x.m) || owns_network(n, ctx, &x.network_id)))
            .map(|x| ports::render(x, admin))
            .collect(),
        Kind::Router => n
            .routers
            .iter()
            .filter(|x| want(&x.m) && mine(&x.m))
            .map(|x| routers::render(n, x, admin))
            .collect(),
        Kind::SecurityGroup => n
            .security_groups
            .iter()
            .filter(|x| want(&x.m) && mine(&x.m))
            .map(|x| security_groups::render(n, x))
            .collect(),
        Kind::SecurityGroupRule => n
            .security_group_rules
            .iter()
            .filter(|x| want(&x.m) && mine(&x.m))
            .map(|x| security_groups::render_rule(n, x))
            .collect(),
        Kind::FloatingIp => n
            .floating_ips
            .iter()
            .filter(|x| want(&x.m) && mine(&x.m))
            .map(|x| floating_ips::render(n, x))
            .collect(),
    }
}

pub(super) fn meta_mut<'a>(n: &'a mut NeutronState, kind: Kind, id: &str) -> Option<&'a mut Meta> {
    fn find<'a, T>(v: &'a mut [T], id: &str, m: fn(&mut T) -> &mut Meta) -> Option<&'a mut Meta> {
        v.iter_mut().map(m).find(|x| x.id == id)
    }
    match kind {
        Kind::Network => find(&mut n.networks, id, |x| &mut x.m),
        Kind::Subnet => find(&mut n.subnets, id, |x| &mut x.m),
        Kind::Port => find(&mut n.ports, id, |x| &mut x.m),
        Kind::Router => find(&mut n.routers, id, |x| &mut x.m),
        Kind::SecurityGroup => find(&mut n.security_groups, id, |x| &mut x.m),
        Kind::SecurityGroupRule => find(&mut n.security_group_rules, id, |x| &mut x.m),
        Kind::FloatingIp => find(&mut n.floating_ips, id, |x| &mut x.m),
    }
}

fn owns_network(n: &NeutronState, ctx: &AuthCtx, network_id: &str) -> bool {
    n.networks
        .iter()
        .any(|x| x.m.id == network_id && owns(ctx, &x.m.project_id))
}

/// 404 when the caller cannot see the resource, 403 when it sees but does not own it.
pub(super) fn access(
    n: &mut NeutronState,
    kind: Kind,
    ctx: &AuthCtx,
    id: &str,
    action: &str,
) -> SimResult<()> {
    if rows(n, kind, ctx, Some(id)).is_empty() {
        return Err(kind.not_found(id));
    }
    match meta_mut(n, kind, id) {
        Some(m) if owns(ctx, &m.project_id) => Ok(()),
        Some(_) => Err(forbidden(&format!("{action}_{}", kind.singular()))),
        None => Err(kind.not_found(id)),
    }
}

fn wrap(key: &str, v: Value) -> Value {
    let mut m = Map::new();
    m.insert(key.to_owned(), v);
    Value::Object(m)
}

/// `fields=a&fields=b`: only those attributes.
fn project(v: Value, fields: &[&str]) -> Value {
    match v {
        Value::Object(o) if !fields.is_empty() => Value::Object(
            o.into_iter()
                .filter(|(k, _)| fields.contains(&k.as_str()))
                .collect(),
        ),
        other => other,
    }
}

/// One filter value against one attribute: scalars by their string form, lists by membership, lists of
/// objects by `key=value` (`fixed_ips=ip_address=10.0.0.5`).
fn matches(have: &Value, want: &str) -> bool {
    match have {
        Value::String(s) => s == want,
        Value::Bool(b) => want.eq_ignore_ascii_case(if *b { "true" } else { "false" }),
        Value::Number(n) => n.to_string() == want,
        Value::Null => want.is_empty() || want == "None",
        Value::Array(items) => items.iter().any(|i| match i {
            Value::Object(o) => want
                .split_once('=')
                .is_some_and(|(k, w)| o.get(k).is_some_and(|x| matches(x, w))),
            other => matches(other, want),
        }),
        Value::Object(_) => false,
    }
}

fn filter_rows(kind: Kind, rows: Vec<Value>, q: &QueryParams) -> SimResult<Vec<Value>> {
    let attrs = kind.attributes();
    let mut filters: Vec<(&str, Vec<&str>)> = Vec::new();
    for (k, _) in &q.0 {
        if RESERVED.contains(&k.as_str()) || filters.iter().any(|(f, _)| f == k) {
            continue;
        }
        if !attrs.contains(k) {
            return Err(bad(format!("['{k}'] is invalid attribute for filtering")));
        }
        filters.push((k, q.all(k)));
    }
    let tf = q.tag_filter();
    Ok(rows
        .into_iter()
        .filter(|v| {
            let tags: Vec<&str> = v["tags"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            tf.matches(&tags)
                && filters
                    .iter()
                    .all(|(k, wants)| wants.iter().any(|w| matches(&v[*k], w)))
        })
        .collect())
}

fn cmp_json(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// `sort_key`/`sort_dir` pairs; without them the creation order.
fn sort_rows(kind: Kind, mut rows: Vec<Value>, q: &QueryParams) -> SimResult<Vec<Value>> {
    let keys = q.all("sort_key");
    if keys.is_empty() {
        return Ok(rows);
    }
    let dirs = q.all("sort_dir");
    let attrs = kind.attributes();
    let mut spec = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        if !attrs.iter().any(|a| a == k) {
            return Err(bad(format!("{k} is an invalid attribute for sort_key")));
        }
        let desc = match dirs.get(i).copied().unwrap_or("asc") {
            "asc" => false,
            "desc" => true,
            other => return Err(bad(format!("{other} is an invalid value for sort_dir"))),
        };
        spec.push((*k, desc));
    }
    rows.sort_by(|a, b| {
        spec.iter()
            .map(|(k, desc)| {
                let o = cmp_json(&a[*k], &b[*k]);
                if *desc { o.reverse() } else { o }
            })
            .find(|o| *o != Ordering::Equal)
            .unwrap_or_else(|| cmp_json(&a["id"], &b["id"]))
    });
    Ok(rows)
}

async fn list(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    q: QueryParams,
) -> SimResult<Json<Value>> {
    let rows = {
        let mut cloud = app.cloud();
        if matches!(kind, Kind::SecurityGroup | Kind::SecurityGroupRule) {
            security_groups::ensure_default(&mut cloud.neutron, &ctx.project_id);
        }
        rows(&cloud.neutron, kind, &ctx, None)
    };
    let rows = sort_rows(kind, filter_rows(kind, rows, &q)?, &q)?;
    let page = paginate(rows, &q, |v| {
        v["id"].as_str().unwrap_or_default().to_owned()
    })
    .map_err(|m| kind.not_found(&m))?;
    let fields = q.all("fields");
    let items = page
        .items
        .into_iter()
        .map(|v| project(v, &fields))
        .collect();
    let mut body = wrap(kind.plural(), Value::Array(items));
    let path = format!("{PREFIX}/{}", kind.segment());
    if let Some(links) = next_links(&app.base_url, &path, &q, page.next_marker.as_deref()) {
        body[format!("{}_links", kind.plural())] = links;
    }
    Ok(Json(body))
}

async fn show(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    q: QueryParams,
) -> SimResult<Json<Value>> {
    let cloud = app.cloud();
    let v = rows(&cloud.neutron, kind, &ctx, Some(&id))
        .into_iter()
        .next()
        .ok_or_else(|| kind.not_found(&id))?;
    Ok(Json(wrap(kind.singular(), project(v, &q.all("fields")))))
}

fn create_one(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    kind: Kind,
    obj: &Map<String, Value>,
    port_tags: bool,
) -> SimResult<String> {
    match kind {
        Kind::Network => networks::create(cloud, ctx, obj),
        Kind::Subnet => subnets::create(cloud, ctx, obj),
        Kind::Port => ports::create_api(cloud, ctx, obj, port_tags),
        Kind::Router => routers::create(cloud, ctx, obj),
        Kind::SecurityGroup => security_groups::create(cloud, ctx, obj),
        Kind::SecurityGroupRule => security_groups::create_rule(cloud, ctx, obj),
        Kind::FloatingIp => floating_ips::create(cloud, ctx, obj),
    }
}

/// POST `{"<singular>": {...}}`, or the bulk form `{"<plural>": [{...}, ...]}` (all or nothing).
async fn create(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    body: Bytes,
) -> SimResult<(StatusCode, Json<Value>)> {
    let body = parse_json(&body)?;
    let port_tags = app.cfg.neutron_port_tags_on_create;
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    let render = |n: &NeutronState, id: &str| {
        rows(n, kind, &ctx, Some(id))
            .into_iter()
            .next()
            .ok_or_else(|| kind.not_found(id))
    };
    if let Some(items) = body.get(kind.plural()) {
        let items = items
            .as_array()
            .ok_or_else(|| bad(format!("Invalid input for {}: not a list", kind.plural())))?;
        let saved = cloud.neutron.clone();
        let mut out = Vec::new();
        for item in items {
            let made = item
                .as_object()
                .ok_or_else(|| bad("Invalid input: bulk item is not an object"))
                .and_then(|obj| create_one(cloud, &ctx, kind, obj, port_tags));
            match made {
                Ok(id) => out.push(id),
                Err(e) => {
                    cloud.neutron = saved;
                    return Err(e);
                }
            }
        }
        let rendered = out
            .iter()
            .map(|id| render(&cloud.neutron, id))
            .collect::<SimResult<Vec<_>>>()?;
        return Ok((
            StatusCode::CREATED,
            Json(wrap(kind.plural(), Value::Array(rendered))),
        ));
    }
    let id = create_one(cloud, &ctx, kind, inner(&body, kind.singular())?, port_tags)?;
    Ok((
        StatusCode::CREATED,
        Json(wrap(kind.singular(), render(&cloud.neutron, &id)?)),
    ))
}

async fn update(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Json<Value>> {
    let body = parse_json(&body)?;
    let obj = inner(&body, kind.singular())?;
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    access(&mut cloud.neutron, kind, &ctx, &id, "update")?;
    match kind {
        Kind::Network => networks::update(cloud, &ctx, &id, obj),
        Kind::Subnet => subnets::update(cloud, &id, obj),
        Kind::Port => ports::update(cloud, &ctx, &id, obj),
        Kind::Router => routers::update(cloud, &ctx, &id, obj),
        Kind::SecurityGroup => security_groups::update(cloud, &id, obj),
        Kind::FloatingIp => floating_ips::update(cloud, &ctx, &id, obj),
        Kind::SecurityGroupRule => Err(bad("Security group rules cannot be updated")),
    }?;
    let v = rows(&cloud.neutron, kind, &ctx, Some(&id))
        .into_iter()
        .next()
        .ok_or_else(|| kind.not_found(&id))?;
    Ok(Json(wrap(kind.singular(), v)))
}

async fn delete(
    kind: Kind,
    State(app): State<SharedApp>,
    Extension(ctx): Extension<AuthCtx>,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    access(&mut cloud.neutron, kind, &ctx, &id, "delete")?;
    match kind {
        Kind::Network => networks::delete(&mut cloud.neutron, &id),
        Kind::Subnet => subnets::delete(&mut cloud.neutron, &id),
        Kind::Port => ports::delete(&mut cloud.neutron, &id),
        Kind::Router => routers::delete(&mut cloud.neutron, &id),
        Kind::SecurityGroup => security_groups::delete(&mut cloud.neutron, &id),
        Kind::SecurityGroupRule => security_groups::delete_rule(&mut cloud.neutron, &id),
        Kind::FloatingIp => floating_ips::delete(&mut cloud.neutron, &id),
    }?;
    Ok(StatusCode::NO_CONTENT)
}

type St = State<SharedApp>;
type Cx = Extension<AuthCtx>;

/// list, create, show and delete of one collection (update is added separately: rules have none).
macro_rules! collection {
    ($r:expr, $kind:expr, $seg:literal, $list:literal, $create:literal, $show:literal) => {{
        const K: Kind = $kind;
        $r.get(
            concat!("/network/v2.0/", $seg),
            |s: St, c: Cx, q: QueryParams| list(K, s, c, q),
            File($list),
        )
        .post(
            concat!("/network/v2.0/", $seg),
            |s: St, c: Cx, b: Bytes| create(K, s, c, b),
            File($create),
        )
        .get(
            concat!("/network/v2.0/", $seg, "/{id}"),
            |s: St, c: Cx, p: Path<String>, q: QueryParams| show(K, s, c, p, q),
            File($show),
        )
        .delete(
            concat!("/network/v2.0/", $seg, "/{id}"),
            |s: St, c: Cx, p: Path<String>| delete(K, s, c, p),
            NoBody("204"),
        )
    }};
}

macro_rules! updatable {
    ($r:expr, $kind:expr, $seg:literal, $update:literal) => {{
        const K: Kind = $kind;
        $r.put(
            concat!("/network/v2.0/", $seg, "/{id}"),
            |s: St, c: Cx, p: Path<String>, b: Bytes| update(K, s, c, p, b),
            File($update),
        )
    }};
}

/// The six tag endpoints of one collection.
macro_rules! tags {
    ($r:expr, $kind:expr, $seg:literal) => {{
        const K: Kind = $kind;
        $r.get(
            concat!("/network/v2.0/", $seg, "/{id}/tags"),
            |s: St, c: Cx, p: Path<String>| misc::tags_list(K, s, c, p),
            File("network/tag/tag-obtain-response.json"),
        )
        .put(
            concat!("/network/v2.0/", $seg, "/{id}/tags"),
            |s: St, c: Cx, p: Path<String>, b: Bytes| misc::tags_replace(K, s, c, p, b),
            File("network/tag/tag-update-response.json"),
        )
        .delete(
            concat!("/network/v2.0/", $seg, "/{id}/tags"),
            |s: St, c: Cx, p: Path<String>| misc::tags_clear(K, s, c, p),
            NoBody("204"),
        )
        .get(
            concat!("/network/v2.0/", $seg, "/{id}/tags/{tag}"),
            |s: St, c: Cx, p: Path<(String, String)>| misc::tag_check(K, s, c, p),
            NoBody("204 when the tag is set"),
        )
        .put(
            concat!("/network/v2.0/", $seg, "/{id}/tags/{tag}"),
            |s: St, c: Cx, p: Path<(String, String)>| misc::tag_add(K, s, c, p),
            NoBody("201 with an empty body"),
        )
        .delete(
            concat!("/network/v2.0/", $seg, "/{id}/tags/{tag}"),
            |s: St, c: Cx, p: Path<(String, String)>| misc::tag_remove(K, s, c, p),
            NoBody("204"),
        )
    }};
}

pub(super) fn routes() -> Routes {
    let r = Routes::new(SVC)
        .get(
            "/network/v2.0",
            misc::version,
            File("network/networks/version-show-response.json"),
        )
        .get(
            "/network/v2.0/",
            misc::version,
            File("network/networks/version-show-response.json"),
        )
        .get(
            "/network/v2.0/extensions",
            misc::extensions,
            File("network/extensions/extensions-list-response.json"),
        )
        .get(
            "/network/v2.0/extensions/{alias}",
            misc::extension,
            File("network/extensions/extension-show-response.json"),
        )
        .get(
            "/network/v2.0/availability_zones",
            misc::availability_zones,
            File("network/availability-zones/azs-list-response.json"),
        )
        .get(
            "/network/v2.0/floatingip_pools",
            misc::floatingip_pools,
            File("network/floatingips/floating-ip-pools-list-response.json"),
        )
        .get(
            "/network/v2.0/quotas",
            misc::quotas_list,
            File("network/quotas/quotas-list-response.json"),
        )
        .get(
            "/network/v2.0/quotas/{project_id}",
            misc::quota_show,
            File("network/quotas/quotas-list-for-project-response.json"),
        )
        .get(
            "/network/v2.0/quotas/{project_id}/default",
            misc::quota_default,
            File("network/quotas/quotas-list-for-project-response.json"),
        )
        .get(
            "/network/v2.0/quotas/{project_id}/details",
            misc::quota_details,
            File("network/quota_details/quota-details-show-for-project-response.json"),
        )
        .put(
            "/network/v2.0/routers/{id}/add_router_interface",
            routers::add_interface,
            File("network/routers/router-add-interface-response.json"),
        )
        .put(
            "/network/v2.0/routers/{id}/remove_router_interface",
            routers::remove_interface,
            File("network/routers/router-remove-interface-response.json"),
        )
        .put(
            "/network/v2.0/routers/{id}/add_extraroutes",
            routers::add_extraroutes,
            File("network/routers/router-add-extraroutes-response.json"),
        )
        .put(
            "/network/v2.0/routers/{id}/remove_extraroutes",
            routers::remove_extraroutes,
            File("network/routers/router-remove-extraroutes-response.json"),
        );
    let r = collection!(
        r,
        Kind::Network,
        "networks",
        "network/networks/networks-list-response.json",
        "network/networks/network-create-response.json",
        "network/networks/network-show-response.json"
    );
    let r = updatable!(
        r,
        Kind::Network,
        "networks",
        "network/networks/network-update-response.json"
    );
    let r = collection!(
        r,
        Kind::Subnet,
        "subnets",
        "network/subnets/subnets-list-response.json",
        "network/subnets/subnet-create-response.json",
        "network/subnets/subnet-show-response.json"
    );
    let r = updatable!(
        r,
        Kind::Subnet,
        "subnets",
        "network/subnets/subnet-update-response.json"
    );
    let r = collection!(
        r,
        Kind::Port,
        "ports",
        "network/ports/ports-list-response.json",
        "network/ports/port-create-response.json",
        "network/ports/port-show-response.json"
    );
    let r = updatable!(
        r,
        Kind::Port,
        "ports",
        "network/ports/port-update-response.json"
    );
    let r = collection!(
        r,
        Kind::Router,
        "routers",
        "network/routers/routers-list-response.json",
        "network/routers/router-create-response.json",
        "network/routers/router-show-response.json"
    );
    let r = updatable!(
        r,
        Kind::Router,
        "routers",
        "network/routers/router-update-response.json"
    );
    let r = collection!(
        r,
        Kind::SecurityGroup,
        "security-groups",
        "network/security-groups/security-groups-list-response.json",
        "network/security-groups/security-group-create-response.json",
        "network/security-groups/security-group-show-response.json"
    );
    let r = updatable!(
        r,
        Kind::SecurityGroup,
        "security-groups",
        "network/security-groups/security-group-update-response.json"
    );
    let r = collection!(
        r,
        Kind::SecurityGroupRule,
        "security-group-rules",
        "network/security-groups/security-group-rules-list-response.json",
        "network/security-groups/security-group-rule-create-response.json",
        "network/security-groups/security-group-rule-show-response.json"
    );
    let r = collection!(
        r,
        Kind::FloatingIp,
        "floatingips",
        "network/floatingips/floating-ips-list-response.json",
        "network/floatingips/floatingip-create-response.json",
        "network/floatingips/floatingip-show-response.json"
    );
    let r = updatable!(
        r,
        Kind::FloatingIp,
        "floatingips",
        "network/floatingips/floatingip-update-response.json"
    );
    let r = tags!(r, Kind::Network, "networks");
    let r = tags!(r, Kind::Subnet, "subnets");
    let r = tags!(r, Kind::Port, "ports");
    let r = tags!(r, Kind::Router, "routers");
    let r = tags!(r, Kind::SecurityGroup, "security-groups");
    tags!(r, Kind::FloatingIp, "floatingips")
}
