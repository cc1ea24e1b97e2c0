//! Flavors, keypairs, server groups, limits, quota sets and availability zones.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::digest::{hex, md5};
use super::{
    Ctx, Flavor, Keypair, MAX_LIMIT, Mv, P, ServerGroup, bad, body_object, bookmark, check_limit,
    forbidden, invalid, links, not_found, only_known, over, parse_body, reply,
};
use crate::app::SharedApp;
use crate::error::SimResult;
use crate::ids;
use crate::paging::{next_links, paginate, paginate_at_most};
use crate::query::QueryParams;
use crate::state::Cloud;

// ---------------------------------------------------------------------------------------------------------
// Flavors

fn flavor_summary(app: &SharedApp, f: &Flavor, mv: Mv) -> Value {
    let mut v = json!({"id": f.id, "name": f.name, "links": links(app, "flavors", &f.id)});
    if mv.at_least(55) {
        v["description"] = json!(f.description);
    }
    v
}

fn flavor_detail(app: &SharedApp, f: &Flavor, mv: Mv) -> Value {
    let mut v = flavor_summary(app, f, mv);
    let o = &mut v;
    o["vcpus"] = json!(f.vcpus);
    o["ram"] = json!(f.ram_mb);
    o["disk"] = json!(f.disk_gb);
    o["OS-FLV-EXT-DATA:ephemeral"] = json!(f.ephemeral_gb);
    // Before 2.75 Nova renders "no swap" as an empty string.
    o["swap"] = if f.swap_mb == 0 && !mv.at_least(75) {
        json!("")
    } else {
        json!(f.swap_mb)
    };
    o["rxtx_factor"] = json!(f.rxtx_factor);
    o["os-flavor-access:is_public"] = json!(f.is_public);
    o["OS-FLV-DISABLED:disabled"] = json!(f.disabled);
    if mv.at_least(61) {
        o["extra_specs"] = json!(f.extra_specs);
    }
    v
}

/// minDisk / minRam / is_public filters, flavorid order, limit / marker paging.
fn flavor_page(app: &SharedApp, q: &QueryParams, detail: bool, mv: Mv) -> SimResult<Response> {
    check_limit(q)?;
    let min = |key: &str| -> SimResult<u64> {
        match q.get(key) {
            None => Ok(0),
            Some(v) => v
                .parse()
                .map_err(|_| bad(format!("Invalid {key} filter [{v}]"))),
        }
    };
    let (min_disk, min_ram) = (min("minDisk")?, min("minRam")?);
    let public = match q.get("is_public").map(str::to_ascii_lowercase).as_deref() {
        None | Some("none") => None,
        Some("true" | "1" | "yes" | "t" | "y" | "on") => Some(true),
        Some("false" | "0" | "no" | "f" | "n" | "off") => Some(false),
        Some(other) => return Err(bad(format!("Invalid is_public filter [{other}]"))),
    };
    let cloud = app.cloud();
    let mut flavors: Vec<&Flavor> = cloud
        .nova
        .flavors
        .iter()
        .filter(|f| f.disk_gb >= min_disk && f.ram_mb >= min_ram)
        .filter(|f| public.is_none_or(|p| f.is_public == p))
        .collect();
    flavors.sort_by(|a, b| a.id.cmp(&b.id));
    let page = paginate_at_most(flavors, q, MAX_LIMIT, |f| f.id.clone())
        .map_err(|m| bad(format!("marker [{m}] not found")))?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|f| {
            if detail {
                flavor_detail(app, f, mv)
            } else {
                flavor_summary(app, f, mv)
            }
        })
        .collect();
    let mut body = json!({ "flavors": items });
    let path = if detail {
        format!("{P}/flavors/detail")
    } else {
        format!("{P}/flavors")
    };
    if let Some(l) = next_links(&app.base_url, &path, q, page.next_marker.as_deref()) {
        body["flavors_links"] = l;
    }
    Ok(reply(StatusCode::OK, body))
}

pub async fn list_flavors(
    State(app): State<SharedApp>,
    mv: Mv,
    q: QueryParams,
) -> SimResult<Response> {
    flavor_page(&app, &q, false, mv)
}

pub async fn list_flavors_detail(
    State(app): State<SharedApp>,
    mv: Mv,
    q: QueryParams,
) -> SimResult<Response> {
    flavor_page(&app, &q, true, mv)
}

fn find_flavor(cloud: &Cloud, id: &str) -> SimResult<Flavor> {
    cloud
        .nova
        .flavor(id)
        .cloned()
        .ok_or_else(|| not_found(format!("Flavor {id} could not be found.")))
}

pub async fn show_flavor(
    State(app): State<SharedApp>,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let f = find_flavor(&app.cloud(), &id)?;
    Ok(reply(
        StatusCode::OK,
        json!({"flavor": flavor_detail(&app, &f, mv)}),
    ))
}

pub async fn flavor_extra_specs(
    State(app): State<SharedApp>,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let f = find_flavor(&app.cloud(), &id)?;
    Ok(reply(StatusCode::OK, json!({"extra_specs": f.extra_specs})))
}

// ---------------------------------------------------------------------------------------------------------
// Keypairs

const KEY_TYPES: &[&str] = &[
    "ssh-rsa",
    "ssh-dss",
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// Nova's fingerprint of an OpenSSH public key: MD5 of the decoded key blob, colon-separated. The blob
/// must be well-formed: it starts with the length-prefixed key type that the text names.
pub fn ssh_fingerprint(public_key: &str) -> Option<String> {
    let mut parts = public_key.split_whitespace();
    let kind = parts.next()?;
    let blob = base64::engine::general_purpose::STANDARD
        .decode(parts.next()?)
        .ok()?;
    if !KEY_TYPES.contains(&kind) || blob.len() < 4 {
        return None;
    }
    let n = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    if blob.get(4..4 + n)? != kind.as_bytes() || blob.len() <= 4 + n {
        return None;
    }
    let digest = md5(&blob);
    Some(
        hex(&digest)
            .as_bytes()
            .chunks(2)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join(":"),
    )
}

/// x509 certificates (keypair type `x509`, ≥ 2.2): a PEM certificate; fingerprinted over its DER bytes.
fn x509_fingerprint(pem: &str) -> Option<String> {
    let b64: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END CERTIFICATE-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    (!der.is_empty()).then(|| {
        hex(&md5(&der))
            .as_bytes()
            .chunks(2)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join(":")
    })
}

fn keypair_body(k: &Keypair, mv: Mv, full: bool) -> Value {
    let mut v = json!({"name": k.name, "public_key": k.public_key, "fingerprint": k.fingerprint});
    if mv.at_least(2) {
        v["type"] = json!(k.key_type);
    }
    if full {
        v["user_id"] = json!(k.user_id);
        v["deleted"] = json!(false);
        v["created_at"] = json!(ids::iso_micro(k.created_at));
        v["updated_at"] = Value::Null;
        v["deleted_at"] = Value::Null;
        v["id"] = json!(k.id);
    }
    v
}

pub async fn list_keypairs(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    q: QueryParams,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let mut mine: Vec<&Keypair> = cloud
        .nova
        .keypairs
        .iter()
        .filter(|k| k.user_id == ctx.user_id)
        .collect();
    mine.sort_by(|a, b| a.name.cmp(&b.name));
    // limit / marker (by name) exist from 2.35 on.
    let q = if mv.at_least(35) {
        check_limit(&q)?;
        q
    } else {
        QueryParams::default()
    };
    let page = paginate(mine, &q, |k| k.name.clone())
        .map_err(|m| bad(format!("marker [{m}] not found")))?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|k| json!({"keypair": keypair_body(k, mv, false)}))
        .collect();
    let mut body = json!({ "keypairs": items });
    if let Some(l) = next_links(
        &app.base_url,
        &format!("{P}/os-keypairs"),
        &q,
        page.next_marker.as_deref(),
    ) {
        body["keypairs_links"] = l;
    }
    Ok(reply(StatusCode::OK, body))
}

fn valid_keypair_name(name: &str, mv: Mv) -> bool {
    let extra: &[char] = if mv.at_least(92) {
        &[' ', '_', '-', '@', '.']
    } else {
        &[' ', '_', '-']
    };
    !name.is_empty()
        && name.chars().count() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
}

pub async fn create_keypair(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let kp = body_object(&body, "keypair")?;
    let mut known = vec!["name", "public_key"];
    if mv.at_least(2) {
        known.push("type");
    }
    if mv.at_least(10) {
        known.push("user_id");
    }
    only_known(kp, &known)?;
    let name_v = kp.get("name").cloned().unwrap_or(Value::Null);
    let name = name_v
        .as_str()
        .ok_or_else(|| invalid("name", &name_v, "'name' is a required property"))?;
    if !valid_keypair_name(name, mv) {
        return Err(if mv.at_least(92) {
            invalid(
                "name",
                &name_v,
                &format!("'{name}' does not match '^[a-zA-Z0-9 @._-]+$'"),
            )
        } else {
            bad("Keypair data is invalid: Keypair name contains unsafe characters")
        });
    }
    let key_type = match kp.get("type") {
        None => "ssh",
        Some(Value::String(t)) if t == "ssh" || t == "x509" => t.as_str(),
        Some(t) => return Err(invalid("type", t, "is not one of ['ssh', 'x509']")),
    };
    if let Some(u) = kp.get("user_id")
        && u.as_str() != Some(ctx.user_id.as_str())
        && !ctx.is_admin()
    {
        return Err(forbidden(
            "Policy doesn't allow os_compute_api:os-keypairs:create to be performed.",
        ));
    }
    // Nova generates a key pair when none is given (below 2.92). The simulator has no key generator, so
    // it asks for the import form with the message Nova gives from 2.92 on.
    let public_key = kp
        .get("public_key")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            invalid(
                "keypair",
                &Value::Object(kp.clone()),
                "'public_key' is a required property",
            )
        })?
        .trim()
        .to_owned();
    let fingerprint = if key_type == "x509" {
        x509_fingerprint(&public_key)
    } else {
        ssh_fingerprint(&public_key)
    }
    .ok_or_else(|| bad("Keypair data is invalid: failed to generate fingerprint"))?;

    let mut cloud = app.cloud();
    let cloud_date = cloud.date();
    let quota = cloud.quotas.key_pairs;
    let nova = &mut cloud.nova;
    let mine = nova
        .keypairs
        .iter()
        .filter(|k| k.user_id == ctx.user_id)
        .count() as i64;
    if nova
        .keypairs
        .iter()
        .any(|k| k.user_id == ctx.user_id && k.name == name)
    {
        return Err(super::conflict(format!(
            "Key pair '{name}' already exists."
        )));
    }
    if over(quota, mine, 1) {
        return Err(forbidden("Quota exceeded, too many key pairs."));
    }
    nova.next_keypair_id += 1;
    let k = Keypair {
        id: nova.next_keypair_id,
        name: name.to_owned(),
        user_id: ctx.user_id.clone(),
        key_type: key_type.to_owned(),
        public_key,
        fingerprint,
        created_at: cloud_date,
    };
    let mut v = keypair_body(&k, mv, false);
    v["user_id"] = json!(k.user_id);
    nova.keypairs.push(k);
    let status = if mv.at_least(2) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(reply(status, json!({ "keypair": v })))
}

fn keypair_not_found(name: &str, user: &str) -> crate::error::SimError {
    not_found(format!("Keypair {name} not found for user {user}"))
}

pub async fn show_keypair(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(name): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let k = cloud
        .nova
        .keypairs
        .iter()
        .find(|k| k.user_id == ctx.user_id && k.name == name)
        .ok_or_else(|| keypair_not_found(&name, &ctx.user_id))?;
    Ok(reply(
        StatusCode::OK,
        json!({"keypair": keypair_body(k, mv, true)}),
    ))
}

pub async fn delete_keypair(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(name): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let before = cloud.nova.keypairs.len();
    cloud
        .nova
        .keypairs
        .retain(|k| !(k.user_id == ctx.user_id && k.name == name));
    if cloud.nova.keypairs.len() == before {
        return Err(keypair_not_found(&name, &ctx.user_id));
    }
    Ok(if mv.at_least(2) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    })
}

// ---------------------------------------------------------------------------------------------------------
// Server groups

fn group_body(g: &ServerGroup, mv: Mv) -> Value {
    let mut v = json!({"id": g.id, "name": g.name, "members": g.members});
    if mv.at_least(64) {
        v["policy"] = json!(g.policy);
        v["rules"] = match g.max_server_per_host {
            Some(n) => json!({"max_server_per_host": n}),
            None => json!({}),
        };
    } else {
        v["policies"] = json!([g.policy]);
        v["metadata"] = json!({});
    }
    if mv.at_least(13) {
        v["project_id"] = json!(g.project_id);
        v["user_id"] = json!(g.user_id);
    }
    v
}

pub async fn list_server_groups(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    q: QueryParams,
) -> SimResult<Response> {
    check_limit(&q)?;
    let cloud = app.cloud();
    let groups: Vec<&ServerGroup> = cloud
        .nova
        .server_groups
        .iter()
        .filter(|g| g.project_id == ctx.project_id)
        .collect();
    // Nova pages server groups by offset, not marker.
    let offset: usize = q
        .get("offset")
        .map(|o| o.parse().map_err(|_| bad(format!("Invalid offset [{o}]"))))
        .transpose()?
        .unwrap_or(0);
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(MAX_LIMIT);
    let items: Vec<Value> = groups
        .iter()
        .skip(offset)
        .take(limit)
        .map(|g| group_body(g, mv))
        .collect();
    Ok(reply(StatusCode::OK, json!({ "server_groups": items })))
}

const POLICIES: &[&str] = &[
    "affinity",
    "anti-affinity",
    "soft-affinity",
    "soft-anti-affinity",
];

pub async fn create_server_group(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let sg = body_object(&body, "server_group")?;
    let allowed: &[&str] = if mv.at_least(15) {
        POLICIES
    } else {
        &POLICIES[..2]
    };
    let name_v = sg.get("name").cloned().unwrap_or(Value::Null);
    let name = name_v
        .as_str()
        .filter(|n| !n.trim().is_empty() && n.chars().count() <= 255)
        .ok_or_else(|| invalid("name", &name_v, "'name' is a required property"))?
        .to_owned();
    let (policy, max_per_host) = if mv.at_least(64) {
        only_known(sg, &["name", "policy", "rules"])?;
        let p = sg.get("policy").cloned().unwrap_or(Value::Null);
        let policy = p
            .as_str()
            .filter(|p| allowed.contains(p))
            .ok_or_else(|| invalid("policy", &p, &format!("{p} is not one of {allowed:?}")))?;
        let rules = sg.get("rules").cloned().unwrap_or(json!({}));
        let rules_obj = rules
            .as_object()
            .ok_or_else(|| invalid("rules", &rules, "is not of type 'object'"))?;
        only_known(rules_obj, &["max_server_per_host"])?;
        let max = match rules_obj.get("max_server_per_host") {
            None => None,
            Some(n) => {
                if policy != "anti-affinity" {
                    return Err(bad(
                        "Only anti-affinity policy supports max_server_per_host rule.",
                    ));
                }
                // Nova's schema accepts an integer or a string of one, minimum 1.
                let parsed = n
                    .as_u64()
                    .or_else(|| n.as_str().and_then(|s| s.parse().ok()))
                    .filter(|v| *v >= 1)
                    .ok_or_else(|| {
                        invalid("max_server_per_host", n, "is less than the minimum of 1")
                    })?;
                Some(u32::try_from(parsed).unwrap_or(u32::MAX))
            }
        };
        (policy.to_owned(), max)
    } else {
        only_known(sg, &["name", "policies"])?;
        let p = sg.get("policies").cloned().unwrap_or(Value::Null);
        let list: Vec<&str> = p
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match list.as_slice() {
            [one] if allowed.contains(one) => ((*one).to_owned(), None),
            _ => {
                return Err(invalid(
                    "policies",
                    &p,
                    &format!("must hold exactly one of {allowed:?}"),
                ));
            }
        }
    };
    let mut cloud = app.cloud();
    let used = cloud
        .nova
        .server_groups
        .iter()
        .filter(|g| g.project_id == ctx.project_id)
        .count() as i64;
    if over(cloud.quotas.server_groups, used, 1) {
        return Err(forbidden("Quota exceeded, too many server groups."));
    }
    let g = ServerGroup {
        id: ids::uuid(),
        name,
        policy,
        max_server_per_host: max_per_host,
        members: Vec::new(),
        project_id: ctx.project_id.clone(),
        user_id: ctx.user_id.clone(),
    };
    let v = group_body(&g, mv);
    cloud.nova.server_groups.push(g);
    Ok(reply(StatusCode::OK, json!({ "server_group": v })))
}

fn group_not_found(id: &str) -> crate::error::SimError {
    not_found(format!("Instance group {id} could not be found."))
}

pub async fn show_server_group(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let g = cloud
        .nova
        .server_groups
        .iter()
        .find(|g| g.id == id && g.project_id == ctx.project_id)
        .ok_or_else(|| group_not_found(&id))?;
    Ok(reply(
        StatusCode::OK,
        json!({"server_group": group_body(g, mv)}),
    ))
}

pub async fn delete_server_group(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let before = cloud.nova.server_groups.len();
    cloud
        .nova
        .server_groups
        .retain(|g| !(g.id == id && g.project_id == ctx.project_id));
    if cloud.nova.server_groups.len() == before {
        return Err(group_not_found(&id));
    }
    for s in &mut cloud.nova.servers {
        s.server_groups.retain(|g| g != &id);
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------------------
// Limits, quota sets, availability zones

/// Server metadata items allowed (Nova's `metadata_items` quota default).
pub const METADATA_ITEMS: i64 = 128;

/// (instances, cores, ram) in use by a project: every server not yet gone counts, ERROR ones included.
pub fn usage(cloud: &Cloud, project_id: &str) -> (i64, i64, i64) {
    cloud
        .nova
        .servers
        .iter()
        .filter(|s| s.project_id == project_id)
        .fold((0, 0, 0), |(n, c, r), s| {
            (n + 1, c + s.flavor.vcpus as i64, r + s.flavor.ram_mb as i64)
        })
}

pub async fn limits(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let q = &cloud.quotas;
    let (n, c, r) = usage(&cloud, &ctx.project_id);
    let groups = cloud
        .nova
        .server_groups
        .iter()
        .filter(|g| g.project_id == ctx.project_id)
        .count();
    let mut abs = json!({
        "maxServerMeta": METADATA_ITEMS,
        "maxTotalCores": q.cores,
        "maxTotalInstances": q.instances,
        "maxTotalKeypairs": q.key_pairs,
        "maxTotalRAMSize": q.ram_mb,
        "maxServerGroups": q.server_groups,
        "maxServerGroupMembers": q.server_group_members,
        "totalCoresUsed": c,
        "totalInstancesUsed": n,
        "totalRAMUsed": r,
        "totalServerGroupsUsed": groups,
    });
    if !mv.at_least(57) {
        abs["maxPersonality"] = json!(5);
        abs["maxPersonalitySize"] = json!(10240);
    }
    if !mv.at_least(39) {
        abs["maxImageMeta"] = json!(128);
    }
    if !mv.at_least(36) {
        abs["maxSecurityGroups"] = json!(q.security_groups);
        abs["maxSecurityGroupRules"] = json!(q.security_group_rules);
        abs["maxTotalFloatingIps"] = json!(q.floating_ips);
        abs["totalFloatingIpsUsed"] = json!(0);
        abs["totalSecurityGroupsUsed"] = json!(0);
    }
    Ok(reply(
        StatusCode::OK,
        json!({"limits": {"absolute": abs, "rate": []}}),
    ))
}

/// (name, limit, in_use) of each compute quota, for the quota-set views.
fn quota_rows(
    cloud: &Cloud,
    project_id: &str,
    user_id: &str,
    mv: Mv,
) -> Vec<(&'static str, i64, i64)> {
    let q = &cloud.quotas;
    let ours = project_id == cloud.keystone.project_id();
    let (n, c, r) = usage(cloud, project_id);
    let keypairs = cloud
        .nova
        .keypairs
        .iter()
        .filter(|k| k.user_id == user_id)
        .count() as i64;
    let groups = cloud
        .nova
        .server_groups
        .iter()
        .filter(|g| g.project_id == project_id)
        .count() as i64;
    let d = crate::config::Quotas::default();
    // Another project id gets the defaults, as Nova answers for any project.
    let q = if ours { q } else { &d };
    let mut rows = vec![
        ("cores", q.cores, c),
        ("instances", q.instances, n),
        ("key_pairs", q.key_pairs, keypairs),
        ("metadata_items", METADATA_ITEMS, 0),
        ("ram", q.ram_mb, r),
        ("server_groups", q.server_groups, groups),
        ("server_group_members", q.server_group_members, 0),
    ];
    if !mv.at_least(57) {
        rows.extend([
            ("injected_file_content_bytes", 10240, 0),
            ("injected_file_path_bytes", 255, 0),
            ("injected_files", 5, 0),
        ]);
    }
    if !mv.at_least(36) {
        rows.extend([
            ("fixed_ips", -1, 0),
            ("floating_ips", q.floating_ips, 0),
            ("security_group_rules", q.security_group_rules, 0),
            ("security_groups", q.security_groups, 0),
        ]);
    }
    rows
}

pub async fn quota_set(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(project_id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let mut v = json!({"id": project_id});
    for (k, limit, _) in quota_rows(&cloud, &project_id, &ctx.user_id, mv) {
        v[k] = json!(limit);
    }
    Ok(reply(StatusCode::OK, json!({ "quota_set": v })))
}

pub async fn quota_set_detail(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(project_id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let mut v = json!({"id": project_id});
    for (k, limit, in_use) in quota_rows(&cloud, &project_id, &ctx.user_id, mv) {
        v[k] = json!({"in_use": in_use, "limit": limit, "reserved": 0});
    }
    Ok(reply(StatusCode::OK, json!({ "quota_set": v })))
}

pub async fn availability_zones(State(app): State<SharedApp>) -> SimResult<Response> {
    let zones: Vec<Value> = app
        .cloud()
        .zones
        .iter()
        .map(|z| json!({"zoneName": z, "zoneState": {"available": true}, "hosts": null}))
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({ "availabilityZoneInfo": zones }),
    ))
}

/// The image reference Nova shows for a server booted from an image.
pub fn image_ref(app: &SharedApp, image_id: &str) -> Value {
    json!({"id": image_id, "links": bookmark(app, "images", image_id)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_matches_novas_sample() {
        let key = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDx8nkQv/zgGgB4rMYmIf+6A4l6Rr+o/6lHBQdW5aYd44bd8JttDCE/F/pNRr0lRE+PiqSPO8nDPHw0010JeMH9gYgnnFlyY3/OcJ02RhIPyyxYpv9FhY+2YiUkpwFOcLImyrxEsYXpD/0d3ac30bNH6Sw9JD9UZHYcpSxsIbECHw== Generated-by-Nova";
        assert_eq!(
            ssh_fingerprint(key).as_deref(),
            Some("1e:2c:9b:56:79:4b:45:77:f9:ca:7a:98:2c:b0:d5:3c")
        );
        assert!(ssh_fingerprint("ssh-rsa notbase64!").is_none());
        // A valid blob of another type than the text claims.
        assert!(
            ssh_fingerprint(&key.replacen("ssh-rsa", "ssh-ed25519", 1)).is_none(),
            "type must match the blob"
        );
        assert!(valid_keypair_name("my key_1-a", Mv(1)));
        assert!(!valid_keypair_name("a.b", Mv(91)));
        assert!(valid_keypair_name("a.b@c", Mv(92)));
    }
}
