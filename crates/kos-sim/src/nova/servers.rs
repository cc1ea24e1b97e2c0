//! Servers: create (validation, quotas, scheduling, ports, boot volumes), the state machine driven by
//! `advance`, the per-microversion view, list filters, update/delete, actions, tags, metadata, addresses,
//! interfaces and volume attachments.

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::{Map, Value, json};

use super::digest::{hex, sha512};
use super::placement;
use super::resources::{METADATA_ITEMS, image_ref, usage};
use super::{
    AttachPhase, Ctx, Fault, MAX_LIMIT, Mv, P, PendingAttach, Server, ServerPort, VolumeAttachment,
    bad, body_object, bookmark, check_limit, conflict, forbidden, invalid, links, not_found,
    only_known, over, parse_body, reply,
};
use crate::app::{AuthCtx, SharedApp};
use crate::clock::SimTime;
use crate::error::{SimError, SimResult};
use crate::guests::GuestEvent;
use crate::paging::{next_links, paginate_at_most};
use crate::query::QueryParams;
use crate::state::Cloud;
use crate::{cinder, glance, ids, neutron};

/// Cloud seconds a stop, start or reboot takes.
const ACTION_SECS: f64 = 3.0;
const MAX_USER_DATA: usize = 65535;
const MAX_TAGS: usize = 50;
const NO_VALID_HOST: &str = "No valid host was found. There are not enough hosts available.";

// ---------------------------------------------------------------------------------------------------------
// Create: request parsing (schema-level checks, no state)

#[derive(Debug)]
struct NetReq {
    uuid: Option<String>,
    port: Option<String>,
    fixed_ip: Option<String>,
    tag: Option<String>,
}

#[derive(Debug)]
enum Networks {
    Auto,
    None,
    List(Vec<NetReq>),
}

#[derive(Debug)]
struct BdmReq {
    source: String,
    dest: String,
    boot_index: Option<i64>,
    uuid: Option<String>,
    volume_size: Option<u64>,
    volume_type: Option<String>,
    delete_on_termination: bool,
    tag: Option<String>,
}

#[derive(Debug)]
struct CreateReq {
    name: String,
    description: Option<String>,
    image_ref: Option<String>,
    flavor_ref: String,
    networks: Networks,
    key_name: Option<String>,
    /// (base64 as sent, decoded)
    user_data: Option<(String, String)>,
    metadata: BTreeMap<String, String>,
    tags: Vec<String>,
    bdms: Vec<BdmReq>,
    security_groups: Vec<String>,
    availability_zone: Option<String>,
    group: Option<String>,
    access_ipv4: String,
    access_ipv6: String,
    disk_config: String,
    config_drive: bool,
    hostname: Option<String>,
}

fn opt_str(obj: &Map<String, Value>, key: &str) -> SimResult<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid(key, v, &format!("{v} is not of type 'string'"))),
    }
}

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

/// `imageRef` / `flavorRef` may be an id or a link ending in one.
fn ref_id(s: &str) -> String {
    s.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(s)
        .to_owned()
}

fn check_name(v: &Value) -> SimResult<String> {
    let s = v
        .as_str()
        .ok_or_else(|| invalid("name", v, &format!("{v} is not of type 'string'")))?;
    if s.is_empty() || s.chars().count() > 255 {
        return Err(invalid("name", v, "must be 1 to 255 characters long"));
    }
    if s.trim() != s || s.chars().any(char::is_control) {
        return Err(invalid(
            "name",
            v,
            "leading/trailing whitespace and control characters are not allowed",
        ));
    }
    Ok(s.to_owned())
}

/// Nova's tag schema: 1–60 characters without `/` or `,`; at most 50 per server.
fn check_tag(tag: &str) -> SimResult<()> {
    if tag.is_empty() || tag.chars().count() > 60 {
        return Err(invalid(
            "tags",
            &json!(tag),
            &format!("'{tag}' must be 1 to 60 characters long"),
        ));
    }
    if tag.contains('/') || tag.contains(',') {
        return Err(invalid(
            "tags",
            &json!(tag),
            &format!("'{tag}' does not match '^[^,/]*$'"),
        ));
    }
    Ok(())
}

fn check_tags(v: &Value) -> SimResult<Vec<String>> {
    let arr = v
        .as_array()
        .ok_or_else(|| invalid("tags", v, &format!("{v} is not of type 'array'")))?;
    if arr.len() > MAX_TAGS {
        return Err(invalid("tags", v, &format!("{v} is too long")));
    }
    let mut out: Vec<String> = Vec::new();
    for t in arr {
        let s = t
            .as_str()
            .ok_or_else(|| invalid("tags", t, &format!("{t} is not of type 'string'")))?;
        check_tag(s)?;
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    Ok(out)
}

/// Keys 1–255, values ≤ 255 characters, at most 128 items (a 403, as Nova's quota check).
fn check_metadata(v: &Value) -> SimResult<BTreeMap<String, String>> {
    let obj = v
        .as_object()
        .ok_or_else(|| invalid("metadata", v, &format!("{v} is not of type 'object'")))?;
    let mut out = BTreeMap::new();
    for (k, val) in obj {
        if k.is_empty() || k.chars().count() > 255 {
            return Err(invalid(
                "metadata",
                v,
                &format!("'{k}' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{{1,255}}$'"),
            ));
        }
        let s = val
            .as_str()
            .ok_or_else(|| invalid("metadata", val, &format!("{val} is not of type 'string'")))?;
        if s.chars().count() > 255 {
            return Err(invalid("metadata", val, &format!("'{s}' is too long")));
        }
        out.insert(k.clone(), s.to_owned());
    }
    check_metadata_count(out.len())?;
    Ok(out)
}

fn check_metadata_count(n: usize) -> SimResult<()> {
    if n as i64 > METADATA_ITEMS {
        return Err(forbidden(format!(
            "Quota exceeded for metadata_items: Requested {n}, but the limit is {METADATA_ITEMS} metadata_items. Maximum number of metadata items exceeds {METADATA_ITEMS}"
        )));
    }
    Ok(())
}

/// Nova checks only the base64; the text kept is what cloud-init sees (gzip inflated).
fn decode_user_data(raw: &str) -> SimResult<String> {
    if raw.len() > MAX_USER_DATA {
        return Err(bad(
            "User data too large. User data must be no larger than 65535 bytes once base64 encoded.",
        ));
    }
    let compact: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| bad("User data needs to be valid base 64."))?;
    Ok(super::boot::inflate(&bytes))
}

fn parse_networks(v: Option<&Value>, mv: Mv) -> SimResult<Networks> {
    let v = match v {
        None if mv.at_least(37) => {
            return Err(bad(
                "Invalid input for field/attribute server. 'networks' is a required property",
            ));
        }
        // Before 2.37 a server without networks gets none here (the simulator does not pick a network).
        None => return Ok(Networks::None),
        Some(v) => v,
    };
    match v {
        Value::String(s) if mv.at_least(37) && s == "auto" => Ok(Networks::Auto),
        Value::String(s) if mv.at_least(37) && s == "none" => Ok(Networks::None),
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                let o = item.as_object().ok_or_else(|| {
                    invalid("networks", item, &format!("{item} is not of type 'object'"))
                })?;
                let mut known = vec!["uuid", "port", "fixed_ip"];
                if mv.at_least(32) {
                    known.push("tag");
                }
                only_known(o, &known)?;
                let req = NetReq {
                    uuid: opt_str(o, "uuid")?,
                    port: opt_str(o, "port")?,
                    fixed_ip: opt_str(o, "fixed_ip")?,
                    tag: opt_str(o, "tag")?,
                };
                for id in req.uuid.iter().chain(req.port.iter()) {
                    if !is_uuid(id) {
                        return Err(bad(format!(
                            "Bad networks format: network uuid is not in proper format ({id})"
                        )));
                    }
                }
                if let Some(ip) = &req.fixed_ip
                    && ip.parse::<IpAddr>().is_err()
                {
                    return Err(bad(format!("Invalid fixed IP address ({ip})")));
                }
                if req.uuid.is_none() && req.port.is_none() {
                    return Err(bad(
                        "Bad networks format: network uuid is not in proper format",
                    ));
                }
                out.push(req);
            }
            Ok(Networks::List(out))
        }
        other => Err(invalid(
            "networks",
            other,
            if mv.at_least(37) {
                "is not valid under any of the given schemas ('auto', 'none' or a list)"
            } else {
                "is not of type 'array'"
            },
        )),
    }
}

fn parse_bdms(v: &Value) -> SimResult<Vec<BdmReq>> {
    let arr = v.as_array().ok_or_else(|| {
        invalid(
            "block_device_mapping_v2",
            v,
            &format!("{v} is not of type 'array'"),
        )
    })?;
    let mut out = Vec::new();
    for b in arr {
        let o = b
            .as_object()
            .ok_or_else(|| invalid("block_device_mapping_v2", b, "is not of type 'object'"))?;
        let source = opt_str(o, "source_type")?.unwrap_or_default();
        if !["image", "volume", "blank", "snapshot"].contains(&source.as_str()) {
            return Err(invalid(
                "source_type",
                &json!(source),
                "is not one of ['volume', 'image', 'snapshot', 'blank']",
            ));
        }
        let dest = opt_str(o, "destination_type")?.unwrap_or_else(|| "local".into());
        if !["local", "volume"].contains(&dest.as_str()) {
            return Err(invalid(
                "destination_type",
                &json!(dest),
                "is not one of ['local', 'volume']",
            ));
        }
        let int = |key: &str| -> SimResult<Option<i64>> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| invalid(key, &json!(n), "is not an integer")),
                Some(Value::String(s)) => s
                    .parse()
                    .map(Some)
                    .map_err(|_| invalid(key, &json!(s), "is not an integer")),
                Some(other) => Err(invalid(key, other, "is not an integer")),
            }
        };
        let volume_size = match int("volume_size")? {
            Some(n) if n < 1 => {
                return Err(invalid(
                    "volume_size",
                    &json!(n),
                    "is less than the minimum of 1",
                ));
            }
            other => other.map(|n| n as u64),
        };
        let uuid = opt_str(o, "uuid")?;
        if let Some(u) = &uuid
            && !is_uuid(u)
        {
            return Err(invalid("uuid", &json!(u), "is not a valid uuid"));
        }
        let delete_on_termination = match o.get("delete_on_termination") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => matches!(s.to_ascii_lowercase().as_str(), "true" | "1"),
            Some(other) => return Err(invalid("delete_on_termination", other, "is not a boolean")),
        };
        out.push(BdmReq {
            source,
            dest,
            boot_index: int("boot_index")?.filter(|i| *i >= 0),
            uuid,
            volume_size,
            volume_type: opt_str(o, "volume_type")?,
            delete_on_termination,
            tag: opt_str(o, "tag")?,
        });
    }
    Ok(out)
}

fn parse_create(body: &Value, mv: Mv) -> SimResult<CreateReq> {
    let s = body_object(body, "server")?;
    let mut known = vec![
        "name",
        "imageRef",
        "flavorRef",
        "adminPass",
        "metadata",
        "networks",
        "OS-DCF:diskConfig",
        "accessIPv4",
        "accessIPv6",
        "availability_zone",
        "block_device_mapping",
        "block_device_mapping_v2",
        "config_drive",
        "key_name",
        "min_count",
        "max_count",
        "return_reservation_id",
        "security_groups",
        "user_data",
    ];
    for (min, key) in [
        (19, "description"),
        (52, "tags"),
        (63, "trusted_image_certificates"),
        (74, "host"),
        (74, "hypervisor_hostname"),
        (90, "hostname"),
    ] {
        if mv.at_least(min) {
            known.push(key);
        }
    }
    if !mv.at_least(57) {
        known.push("personality");
    }
    only_known(s, &known)?;
    let top = body.as_object().cloned().unwrap_or_default();
    only_known(
        &top,
        &["server", "os:scheduler_hints", "OS-SCH-HNT:scheduler_hints"],
    )?;

    let name = check_name(s.get("name").unwrap_or(&Value::Null))?;
    for key in ["min_count", "max_count"] {
        if let Some(n) = s.get(key) {
            let n = n
                .as_u64()
                .or_else(|| n.as_str().and_then(|x| x.parse().ok()))
                .ok_or_else(|| invalid(key, n, "is not an integer"))?;
            if n != 1 {
                return Err(bad(format!(
                    "{key}={n}: the simulator creates one server per request"
                )));
            }
        }
    }
    let flavor_v = s.get("flavorRef").cloned().unwrap_or(Value::Null);
    let flavor_ref = match &flavor_v {
        Value::String(f) if !f.is_empty() => ref_id(f),
        Value::Number(n) => n.to_string(),
        _ => {
            return Err(invalid(
                "flavorRef",
                &flavor_v,
                "'flavorRef' is a required property",
            ));
        }
    };
    let image_ref = opt_str(s, "imageRef")?
        .filter(|i| !i.is_empty())
        .map(|i| ref_id(&i));
    let user_data = opt_str(s, "user_data")?
        .map(|raw| decode_user_data(&raw).map(|d| (raw, d)))
        .transpose()?;
    let metadata = s
        .get("metadata")
        .map(check_metadata)
        .transpose()?
        .unwrap_or_default();
    let tags = s
        .get("tags")
        .map(check_tags)
        .transpose()?
        .unwrap_or_default();
    let bdms = s
        .get("block_device_mapping_v2")
        .map(parse_bdms)
        .transpose()?
        .unwrap_or_default();
    if s.contains_key("block_device_mapping") {
        return Err(bad(
            "block_device_mapping (v1) is not supported by the simulator; use block_device_mapping_v2",
        ));
    }
    let security_groups = match s.get("security_groups") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|g| {
                g.get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| invalid("security_groups", g, "'name' is a required property"))
            })
            .collect::<SimResult<_>>()?,
        Some(other) => return Err(invalid("security_groups", other, "is not of type 'array'")),
    };
    let description = match s.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) if d.chars().count() <= 255 => Some(d.clone()),
        Some(other) => return Err(invalid("description", other, "is not a valid description")),
    };
    let hints = top
        .get("os:scheduler_hints")
        .or_else(|| top.get("OS-SCH-HNT:scheduler_hints"));
    let group = match hints.and_then(|h| h.get("group")) {
        None | Some(Value::Null) => None,
        Some(Value::String(g)) if is_uuid(g) => Some(g.clone()),
        Some(other) => return Err(invalid("group", other, "is not a 'uuid'")),
    };
    let disk_config = match opt_str(s, "OS-DCF:diskConfig")?.as_deref() {
        None | Some("AUTO") => "AUTO".to_owned(),
        Some("MANUAL") => "MANUAL".to_owned(),
        Some(other) => {
            return Err(invalid(
                "OS-DCF:diskConfig",
                &json!(other),
                "is not one of ['AUTO', 'MANUAL']",
            ));
        }
    };
    let config_drive = match s.get("config_drive") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(v)) => matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"),
        Some(other) => return Err(invalid("config_drive", other, "is not a boolean")),
    };
    let mut ips = [String::new(), String::new()];
    for (i, key) in ["accessIPv4", "accessIPv6"].iter().enumerate() {
        if let Some(ip) = opt_str(s, key)?.filter(|x| !x.is_empty()) {
            let ok = match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => i == 0,
                Ok(IpAddr::V6(_)) => i == 1,
                Err(_) => false,
            };
            if !ok {
                return Err(invalid(key, &json!(ip), "is not a valid address"));
            }
            ips[i] = ip;
        }
    }
    let [access_ipv4, access_ipv6] = ips;
    Ok(CreateReq {
        name,
        description,
        image_ref,
        flavor_ref,
        networks: parse_networks(s.get("networks"), mv)?,
        key_name: opt_str(s, "key_name")?,
        user_data,
        metadata,
        tags,
        bdms,
        security_groups,
        availability_zone: opt_str(s, "availability_zone")?.filter(|z| !z.is_empty()),
        group,
        access_ipv4,
        access_ipv6,
        disk_config,
        config_drive,
        hostname: opt_str(s, "hostname")?,
    })
}

/// Nova's hostname from a display name: lower case, `[a-z0-9-]`, at most 63 characters.
fn sanitize_hostname(name: &str) -> String {
    let mut h: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    h = h.trim_matches('-').chars().take(63).collect();
    if h.is_empty() { "server".into() } else { h }
}

// ---------------------------------------------------------------------------------------------------------
// Create: against the cloud

/// A Neutron error as Nova reports it to its own client.
fn from_neutron(e: SimError) -> SimError {
    let status = if e.kind.contains("OverQuota") {
        StatusCode::FORBIDDEN
    } else if e.status == StatusCode::CONFLICT && e.kind.contains("PortInUse") {
        StatusCode::CONFLICT
    } else {
        StatusCode::BAD_REQUEST
    };
    SimError::new(super::SVC, status, e.kind, e.message)
}

/// The hosts for a server of `vcpus`/`ram` in zone `az` (any when `None`) honouring its group's
/// policy, best first: the emptiest host (most free RAM, like Nova's default RAM weigher) among those
/// with room. The scheduler sees the servers that have claimed their host (see `placement`).
fn schedule(
    cloud: &Cloud,
    cfg: &crate::config::SimConfig,
    vcpus: u32,
    ram: u64,
    group: Option<&super::ServerGroup>,
    az: Option<&str>,
) -> Vec<String> {
    let mut hosts: Vec<(String, u64, u64, usize)> = (1..=cfg.compute_hosts)
        .map(|i| {
            let h = format!("compute{i}");
            let on: Vec<&Server> = cloud
                .nova
                .servers
                .iter()
                .filter(|s| {
                    s.host.as_deref() == Some(h.as_str()) && placement::claimed(s, cloud.now)
                })
                .collect();
            let used_cpu: u64 = on.iter().map(|s| s.flavor.vcpus as u64).sum();
            let used_ram: u64 = on.iter().map(|s| s.flavor.ram_mb).sum();
            let members = group.map_or(0, |g| {
                on.iter().filter(|s| g.members.contains(&s.id)).count()
            });
            (
                h,
                (cfg.host_vcpus as u64).saturating_sub(used_cpu),
                cfg.host_ram_mb.saturating_sub(used_ram),
                members,
            )
        })
        .filter(|(_, cpu, mem, _)| *cpu >= vcpus as u64 && *mem >= ram)
        .filter(|(h, ..)| az.is_none_or(|z| cloud.zone_of_host(h) == z))
        .collect();
    let policy = group.map(|g| g.policy.as_str());
    let group_has_host = hosts.iter().any(|h| h.3 > 0)
        || group.is_some_and(|g| {
            cloud.nova.servers.iter().any(|s| {
                g.members.contains(&s.id) && s.host.is_some() && placement::claimed(s, cloud.now)
            })
        });
    match policy {
        Some("anti-affinity") => {
            let max = group.and_then(|g| g.max_server_per_host).unwrap_or(1) as usize;
            hosts.retain(|h| h.3 < max);
        }
        Some("affinity") if group_has_host => hosts.retain(|h| h.3 > 0),
        _ => {}
    }
    // Soft policies only weigh: fewer members first for soft-anti-affinity, more for soft-affinity.
    hosts.sort_by(|a, b| {
        let pref = match policy {
            Some("soft-anti-affinity") => a.3.cmp(&b.3),
            Some("soft-affinity") => b.3.cmp(&a.3),
            _ => std::cmp::Ordering::Equal,
        };
        pref.then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0))
    });
    hosts.into_iter().map(|h| h.0).collect()
}

fn host_id(project_id: &str, host: Option<&str>) -> String {
    match host {
        Some(h) => hex(&sha512(format!("{project_id}{h}").as_bytes()))[..56].to_owned(),
        None => String::new(),
    }
}

pub(super) fn set_error(s: &mut Server, code: u16, message: &str, date: DateTime<Utc>) {
    s.vm_state = "error".into();
    s.task_state = None;
    s.power_state = 0;
    s.task_until = None;
    s.fault = Some(Fault {
        code,
        message: message.to_owned(),
        created: date,
    });
    s.updated = date;
}

fn kernel_log(s: &Server) -> Vec<String> {
    let blocks = s.flavor.disk_gb.max(1) * 2_097_152;
    vec![
        "[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024 (Ubuntu 6.8.0-45.45-generic 6.8.12)".into(),
        "[    0.000000] Command line: BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=LABEL=cloudimg-rootfs ro console=tty1 console=ttyS0".into(),
        "[    0.000000] DMI: OpenStack Foundation OpenStack Nova, BIOS 1.16.3-debian-1.16.3-2 04/01/2014".into(),
        "[    0.000000] Hypervisor detected: KVM".into(),
        format!("[    0.000000] Memory: {}K available", s.flavor.ram_mb * 1024 * 95 / 100),
        format!("[    0.412345] virtio_blk virtio1: [vda] {blocks} 512-byte logical blocks"),
        "[    1.234567] EXT4-fs (vda1): mounted filesystem with ordered data mode. Quota mode: none.".into(),
        format!("[    2.101010] systemd[1]: Hostname set to <{}>.", s.hostname),
    ]
}

fn cloud_init_log(cloud: &Cloud, s: &Server) -> Vec<String> {
    let date = cloud.date();
    let ts = date.format("%a, %d %b %Y %H:%M:%S +0000").to_string();
    let ver = "Cloud-init v. 24.1.3-0ubuntu3.3";
    let mut out = vec![
        format!("[    4.512345] cloud-init[512]: {ver} running 'init-local' at {ts}. Up 4.51 seconds."),
        format!("[    6.023456] cloud-init[590]: {ver} running 'init' at {ts}. Up 6.02 seconds."),
        "ci-info: ++++++++++++++++++++++++++++++++++++++Net device info+++++++++++++++++++++++++++++++++++++++".into(),
    ];
    for (i, p) in s.ports.iter().enumerate() {
        if let Some(v) = neutron::port_view(cloud, &p.port_id) {
            for (_, ip) in &v.fixed_ips {
                out.push(format!(
                    "ci-info: | ens{} | True | {ip} | . | global | {} |",
                    3 + i,
                    v.mac_address
                ));
            }
        }
    }
    if s.user_data.is_some() {
        out.push(format!(
            "[    9.345678] cloud-init[700]: {ver} running 'modules:config' at {ts}. Up 9.34 seconds."
        ));
    }
    out.extend([
        format!("[   11.456789] cloud-init[760]: {ver} running 'modules:final' at {ts}. Up 11.45 seconds."),
        format!("[   12.567890] cloud-init[760]: {ver} finished at {ts}. Datasource DataSourceOpenStackLocal [net,ver=2].  Up 12.56 seconds"),
        String::new(),
        format!("Ubuntu 24.04.1 LTS {} ttyS0", s.hostname),
        String::new(),
        format!("{} login: ", s.hostname),
    ]);
    out
}

fn admin_pass() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..12)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

pub async fn create(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let mut req = parse_create(&body, mv)?;
    let mut guard = app.cloud();
    let cloud = &mut *guard;
    let date = cloud.date();
    let project = ctx.project_id.clone();

    let flavor = cloud
        .nova
        .flavor(&req.flavor_ref)
        .cloned()
        .ok_or_else(|| bad(format!("Flavor {} could not be found.", req.flavor_ref)))?;
    if let Some(az) = &req.availability_zone
        && !cloud.zones.contains(az)
    {
        return Err(bad(format!(
            "The requested availability zone is not available: {az}"
        )));
    }
    let image = match &req.image_ref {
        Some(id) => {
            let img = glance::image_view(cloud, id)
                .ok_or_else(|| bad(format!("Image {id} could not be found.")))?;
            if img.status != "active" {
                return Err(bad(format!("Image {id} is not active.")));
            }
            Some(img)
        }
        None => None,
    };
    // Block devices: a boot volume (boot_index 0 → volume) makes this a boot-from-volume server.
    let boot_bdm = req.bdms.iter().find(|b| b.boot_index == Some(0));
    let from_volume = boot_bdm.is_some_and(|b| b.dest == "volume");
    for b in &req.bdms {
        if b.source == "snapshot" {
            return Err(bad(
                "Block Device Mapping is Invalid: snapshot sources are not simulated.",
            ));
        }
        if b.dest == "volume" {
            match b.source.as_str() {
                "image" | "blank" if b.volume_size.is_none() => {
                    return Err(bad(format!(
                        "Block Device Mapping is Invalid: Images with destination_type 'volume' need to have a non-zero size specified (source {}).",
                        b.source
                    )));
                }
                "image" => {
                    let id = b.uuid.as_deref().unwrap_or("");
                    let img = glance::image_view(cloud, id)
                        .ok_or_else(|| bad(format!("Image {id} could not be found.")))?;
                    if b.volume_size.unwrap_or(0) < img.min_disk_gb {
                        return Err(bad(format!(
                            "Volume is smaller than the minimum size specified in image metadata. Volume size is {} bytes, minimum size is {} bytes.",
                            b.volume_size.unwrap_or(0) << 30,
                            img.min_disk_gb << 30
                        )));
                    }
                }
                "volume" => {
                    let id = b.uuid.as_deref().unwrap_or("");
                    match cinder::volume_status(cloud, id) {
                        None => return Err(bad(format!("Volume {id} could not be found."))),
                        Some(st) if st != "available" => {
                            return Err(bad(format!(
                                "Invalid volume: volume '{id}' status must be 'available'. Currently in '{st}'"
                            )));
                        }
                        Some(_) => {}
                    }
                }
                _ => {}
            }
        }
    }
    if boot_bdm.is_some_and(|b| b.source == "blank") {
        return Err(bad(
            "Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping combination is not valid.",
        ));
    }
    if !from_volume {
        let Some(img) = &image else {
            return Err(bad(
                "Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping combination is not valid.",
            ));
        };
        if flavor.disk_gb > 0 {
            if img.size_bytes > flavor.disk_gb << 30 {
                return Err(bad(format!(
                    "Flavor's disk is too small for requested image. Flavor disk is {} bytes, image is {} bytes.",
                    flavor.disk_gb << 30,
                    img.size_bytes
                )));
            }
            if img.min_disk_gb > flavor.disk_gb {
                return Err(bad(
                    "Flavor's disk is too small for requested image. Flavor disk is smaller than the minimum size specified in image metadata.",
                ));
            }
        }
        if img.min_ram_mb > flavor.ram_mb {
            return Err(bad("Flavor's memory is too small for requested image."));
        }
    }
    if let Some(k) = &req.key_name
        && !cloud
            .nova
            .keypairs
            .iter()
            .any(|kp| &kp.name == k && kp.user_id == ctx.user_id)
    {
        return Err(bad("Invalid key_name provided."));
    }
    let mut sg_ids = Vec::new();
    for name in &req.security_groups {
        let id = neutron::security_group_id(cloud, &project, name)
            .ok_or_else(|| bad(format!("Security group {name} not found.")))?;
        sg_ids.push(id);
    }
    let nets = match &req.networks {
        Networks::Auto => {
            return Err(bad(format!(
                "Unable to automatically allocate a network for project {project}"
            )));
        }
        Networks::None => &[][..],
        Networks::List(l) => l.as_slice(),
    };
    for n in nets {
        if let Some(port) = &n.port {
            let v = neutron::port_view(cloud, port)
                .ok_or_else(|| bad(format!("Port id {port} could not be found.")))?;
            if !v.device_id.is_empty() {
                return Err(conflict(format!("Port {port} is still in use.")));
            }
        } else if let Some(net) = &n.uuid
            && neutron::network_name(cloud, net).is_none()
        {
            return Err(bad(format!("Network {net} could not be found.")));
        }
    }
    let group = match &req.group {
        Some(g) => {
            let grp = cloud
                .nova
                .server_groups
                .iter()
                .find(|x| &x.id == g && x.project_id == project)
                .cloned()
                .ok_or_else(|| {
                    bad(format!(
                        "Invalid server group: instance group {g} could not be found."
                    ))
                })?;
            if over(
                cloud.quotas.server_group_members,
                grp.members.len() as i64,
                1,
            ) {
                return Err(forbidden("Quota exceeded, too many servers in group"));
            }
            Some(grp)
        }
        None => None,
    };
    let (n, c, r) = usage(cloud, &project);
    let q = cloud.quotas.clone();
    for (what, limit, used, want) in [
        ("instances", q.instances, n, 1),
        ("cores", q.cores, c, flavor.vcpus as i64),
        ("ram", q.ram_mb, r, flavor.ram_mb as i64),
    ] {
        if over(limit, used, want) {
            return Err(forbidden(format!(
                "Quota exceeded for {what}: Requested {want}, but already used {used} of {limit} {what}"
            )));
        }
    }

    if !app.cfg.cross_az_attach {
        req.availability_zone = volume_zone_for_create(cloud, &req)?;
    }

    // Validation done: from here on the server exists.
    let id = ids::uuid();
    let now = cloud.now;
    cloud.nova.next_instance_seq += 1;
    let hosts = schedule(
        cloud,
        &app.cfg,
        flavor.vcpus,
        flavor.ram_mb,
        group.as_ref(),
        req.availability_zone.as_deref(),
    );
    let host = hosts.first().cloned();
    // With a claim delay, a boot into an anti-affinity group proves its host later (Nova's late
    // check), with the alternates the scheduler chose now.
    let sched = &app.cfg.scheduler;
    let pending = match &group {
        Some(g) if g.policy == "anti-affinity" && sched.claim_delay_secs > 0.0 => {
            let tries = sched.max_attempts.max(1) as usize;
            placement::start(
                &g.id,
                g.members.len(),
                &hosts[..hosts.len().min(tries)],
                now,
                sched,
            )
        }
        _ => None,
    };
    if let Some(g) = &group
        && let Some(grp) = cloud.nova.server_groups.iter_mut().find(|x| x.id == g.id)
    {
        grp.members.push(id.clone());
    }
    let stamp = date;
    let mut server = Server {
        id: id.clone(),
        hostname: req
            .hostname
            .clone()
            .unwrap_or_else(|| sanitize_hostname(&req.name)),
        name: req.name,
        description: req.description,
        project_id: project.clone(),
        user_id: ctx.user_id.clone(),
        image_id: if from_volume { None } else { req.image_ref },
        flavor: flavor.clone(),
        key_name: req.key_name,
        metadata: req.metadata,
        tags: req.tags,
        user_data_decoded: req.user_data.as_ref().map(|u| u.1.clone()),
        user_data: req.user_data.map(|u| u.0),
        access_ipv4: req.access_ipv4,
        access_ipv6: req.access_ipv6,
        disk_config: req.disk_config,
        config_drive: req.config_drive,
        vm_state: "building".into(),
        task_state: Some("scheduling".into()),
        power_state: 0,
        availability_zone: host
            .as_deref()
            .map(|h| cloud.zone_of_host(h))
            .or_else(|| req.availability_zone.clone())
            .unwrap_or_else(|| cloud.default_zone()),
        host: host.clone(),
        pinned_az: req.availability_zone,
        security_groups: if req.security_groups.is_empty() {
            vec!["default".into()]
        } else {
            req.security_groups
        },
        ports: Vec::new(),
        volumes: Vec::new(),
        server_groups: group.iter().map(|g| g.id.clone()).collect(),
        fault: None,
        locked: false,
        locked_reason: None,
        created: stamp,
        updated: stamp,
        launched_at: None,
        boot_at: now.after(app.latency().server_boot_secs),
        task_until: None,
        delete_at: None,
        console: Vec::new(),
        pending_console: Vec::new(),
        instance_seq: cloud.nova.next_instance_seq,
        placement: pending,
    };
    match &host {
        None => set_error(&mut server, 500, NO_VALID_HOST, date),
        Some(host) => {
            // Still scheduling while its host is to pass Nova's late check (`placement`).
            if server.placement.is_none() {
                server.task_state = Some("spawning".into());
            }
            if let Err(e) = allocate_ports(cloud, &mut server, nets, &sg_ids, host) {
                release_ports(cloud, &server);
                if let Some(g) = &group
                    && let Some(grp) = cloud.nova.server_groups.iter_mut().find(|x| x.id == g.id)
                {
                    grp.members.retain(|m| m != &id);
                }
                return Err(e);
            }
            if let Err(msg) = allocate_volumes(cloud, &mut server, &req.bdms, &app.cfg) {
                // Nova creates volumes on the compute host: a failure aborts the build, not the request.
                release_ports(cloud, &server);
                server.ports.clear();
                set_error(
                    &mut server,
                    500,
                    &format!("Build of instance {id} aborted: {msg}"),
                    date,
                );
            } else {
                server.console = kernel_log(&server);
            }
        }
    }
    let resp = json!({"server": {
        "id": id,
        "links": links(&app, "servers", &id),
        "OS-DCF:diskConfig": server.disk_config,
        "security_groups": server.security_groups.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
        "adminPass": admin_pass(),
    }});
    cloud.nova.servers.push(server);
    let mut r = reply(StatusCode::ACCEPTED, resp);
    if let Ok(v) = HeaderValue::from_str(&format!("{}{P}/servers/{id}", app.base_url)) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

fn allocate_ports(
    cloud: &mut Cloud,
    s: &mut Server,
    nets: &[NetReq],
    sg_ids: &[String],
    host: &str,
) -> SimResult<()> {
    for n in nets {
        let (port_id, created) = match (&n.port, &n.uuid) {
            (Some(p), _) => (p.clone(), false),
            (None, Some(net)) => {
                let spec = neutron::InternalPort {
                    project_id: s.project_id.clone(),
                    network_id: net.clone(),
                    subnet_id: None,
                    ip_address: n.fixed_ip.clone(),
                    name: String::new(),
                    device_owner: "compute:nova".into(),
                    device_id: s.id.clone(),
                    security_groups: (!sg_ids.is_empty()).then(|| sg_ids.to_vec()),
                };
                let id = neutron::create_port_internal(cloud, spec).map_err(from_neutron)?;
                (id, true)
            }
            (None, None) => continue,
        };
        let entry = ServerPort {
            port_id: port_id.clone(),
            created_by_nova: created,
            tag: n.tag.clone(),
        };
        // A port Nova made is recorded first so that a failure deletes it; a user's port only once
        // bound, so that a failure never unbinds it from whoever holds it.
        if created {
            s.ports.push(entry.clone());
        }
        neutron::bind_port(cloud, &port_id, &s.id, "compute:nova", host).map_err(from_neutron)?;
        if !created {
            s.ports.push(entry);
        }
    }
    Ok(())
}

/// Deletes the ports Nova created and unbinds the ones the user passed.
pub(super) fn release_ports(cloud: &mut Cloud, s: &Server) {
    for p in &s.ports {
        if p.created_by_nova {
            neutron::delete_port_internal(cloud, &p.port_id);
        } else {
            neutron::unbind_port(cloud, &p.port_id);
        }
    }
}

/// With `cross_az_attach` False, Nova's `_validate_vol_az_for_create`: the existing volumes a server
/// boots with share one zone, the server's; a server asking for no zone goes to theirs (unless it is
/// Nova's default `nova`). Returns the zone the server is to be scheduled in.
fn volume_zone_for_create(cloud: &Cloud, req: &CreateReq) -> SimResult<Option<String>> {
    let zones: Vec<String> = req
        .bdms
        .iter()
        .filter(|b| b.source == "volume" && b.dest == "volume")
        .filter_map(|b| b.uuid.as_deref())
        .filter_map(|id| cinder::volume_facts(cloud, id))
        .map(|v| v.availability_zone)
        .collect();
    let mismatch = |reason: String| {
        bad(format!(
            "The availability zone between the server and its attached volumes do not match: {reason}."
        ))
    };
    let Some(volume_az) = zones.first() else {
        return Ok(req.availability_zone.clone());
    };
    if zones.iter().any(|z| z != volume_az) {
        return Err(mismatch(format!(
            "Volumes are in different availability zones: {}",
            zones.join(",")
        )));
    }
    match &req.availability_zone {
        None if volume_az != "nova" => Ok(Some(volume_az.clone())),
        None => Ok(None),
        Some(az) if az != volume_az => Err(mismatch(format!(
            "Server and volumes are not in the same availability zone. Server is in: {az}. Volumes are in: {volume_az}"
        ))),
        Some(az) => Ok(Some(az.clone())),
    }
}

/// Volumes of `destination_type: volume`: existing ones attach now; new ones (from an image or blank) are
/// created and attach once available (the server stays BUILD until then).
fn allocate_volumes(
    cloud: &mut Cloud,
    s: &mut Server,
    bdms: &[BdmReq],
    cfg: &crate::config::SimConfig,
) -> Result<(), String> {
    // The compute host names every disk before it makes a volume; more than
    // `max_disk_devices_to_attach` (the image's root disk counted) aborts the build.
    let image_root = usize::from(s.image_id.is_some());
    let disks = image_root
        + bdms
            .iter()
            .filter(|b| b.source != "image" || b.dest == "volume")
            .count();
    let max = cfg.max_disk_devices_to_attach;
    if max >= 0 && i64::try_from(disks).unwrap_or(i64::MAX) > max {
        return Err(format!(
            "The maximum allowed number of disk devices ({max}) to attach to a single instance has been exceeded."
        ));
    }
    let cross_az_attach = cfg.cross_az_attach;
    let mut order: Vec<&BdmReq> = bdms.iter().filter(|b| b.dest == "volume").collect();
    order.sort_by_key(|b| b.boot_index.unwrap_or(i64::MAX));
    for (i, b) in order.into_iter().enumerate() {
        let boot = b.boot_index == Some(0);
        let device = format!("/dev/vd{}", (b'a' + (i as u8).min(25)) as char);
        let (volume_id, attached, attachment_id) = if b.source == "volume" {
            let vid = b.uuid.clone().unwrap_or_default();
            let att = cinder::attach(cloud, &vid, &s.id, &device).map_err(|e| e.message)?;
            (vid, true, att)
        } else {
            let spec = cinder::InternalVolume {
                project_id: s.project_id.clone(),
                name: String::new(),
                size_gb: b.volume_size.unwrap_or(1),
                image_id: (b.source == "image").then(|| b.uuid.clone()).flatten(),
                volume_type: b.volume_type.clone(),
                // Nova's `[cinder] cross_az_attach` is True by default: it then names no zone and
                // Cinder uses its default; False names the server's zone, which Cinder may lack
                // (nova/virt/block_device.py `_get_volume_create_az_value`).
                availability_zone: (!cross_az_attach).then(|| s.availability_zone.clone()),
            };
            let vid = cinder::create_volume_internal(cloud, spec).map_err(|e| e.message)?;
            (vid, false, String::new())
        };
        s.volumes.push(VolumeAttachment {
            volume_id,
            device,
            attachment_id,
            bdm_uuid: ids::uuid(),
            delete_on_termination: b.delete_on_termination,
            tag: b.tag.clone(),
            boot,
            attached,
            pending: None,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------
// State machine

pub(super) fn advance(cloud: &mut Cloud) {
    let now = cloud.now;
    let gone: Vec<String> = cloud
        .nova
        .servers
        .iter()
        .filter(|s| s.delete_at.is_some_and(|t| now.reached(t)))
        .map(|s| s.id.clone())
        .collect();
    for id in gone {
        finish_delete(cloud, &id);
    }
    placement::settle(cloud);
    let due: Vec<String> = cloud
        .nova
        .servers
        .iter()
        .filter(|s| {
            s.vm_state == "building"
                && s.delete_at.is_none()
                && s.placement.is_none()
                && now.reached(s.boot_at)
        })
        .map(|s| s.id.clone())
        .collect();
    for id in due {
        try_activate(cloud, &id);
    }
    let tasks: Vec<String> = cloud
        .nova
        .servers
        .iter()
        .filter(|s| s.delete_at.is_none() && s.task_until.is_some_and(|t| now.reached(t)))
        .map(|s| s.id.clone())
        .collect();
    for id in tasks {
        finish_task(cloud, &id);
    }
    for s in &mut cloud.nova.servers {
        super::boot::flush(s, now);
    }
    settle_attachments(cloud);
}

/// Finishes the attaches and detaches whose time has come: the volume `in-use` with its attachment
/// listed, or detached and the block device mapping gone.
fn settle_attachments(cloud: &mut Cloud) {
    let date = cloud.date();
    let now = cloud.now;
    let mut due = Vec::new();
    let mut connecting = Vec::new();
    for s in &mut cloud.nova.servers {
        for a in &mut s.volumes {
            if let Some(p) = a.pending.filter(|p| now.reached(p.until)) {
                a.pending = None;
                due.push((s.id.clone(), a.clone(), p.phase));
            } else if let Some(p) = &mut a.pending
                && p.connect_at.is_some_and(|t| now.reached(t))
            {
                p.connect_at = None;
                connecting.push(a.volume_id.clone());
            }
        }
    }
    for vid in connecting {
        cinder::attach_connecting(cloud, &vid);
    }
    for (server_id, a, phase) in due {
        match phase {
            AttachPhase::Attaching => {
                cinder::attach_complete(cloud, &a.volume_id, &a.attachment_id, &a.device)
            }
            AttachPhase::Detaching => {
                cinder::detach(cloud, &a.volume_id, &server_id);
                if let Some(s) = cloud.nova.server_mut(&server_id) {
                    s.volumes.retain(|v| v.volume_id != a.volume_id);
                    s.updated = date;
                }
            }
        }
    }
}

fn try_activate(cloud: &mut Cloud, id: &str) {
    let date = cloud.date();
    let Some(s) = cloud.nova.server(id) else {
        return;
    };
    let pending: Vec<(String, String)> = s
        .volumes
        .iter()
        .filter(|v| !v.attached)
        .map(|v| (v.volume_id.clone(), v.device.clone()))
        .collect();
    let boot_at = s.boot_at;
    let mut attached = Vec::new();
    for (vid, _) in &pending {
        match cinder::volume_status(cloud, vid).as_deref() {
            Some("available") => {}
            Some("creating" | "downloading") => return,
            other => {
                let msg = format!(
                    "Build of instance {id} aborted: Volume {vid} did not finish being created even after we waited. Status of the volume is {}.",
                    other.unwrap_or("missing")
                );
                fail_build(cloud, id, &msg);
                return;
            }
        }
    }
    for (vid, device) in &pending {
        match cinder::attach(cloud, vid, id, device) {
            Ok(att) => attached.push((vid.clone(), att)),
            Err(e) => {
                let msg = format!("Build of instance {id} aborted: {}", e.message);
                fail_build(cloud, id, &msg);
                return;
            }
        }
    }
    // ACTIVE when it could boot, unless it waited for its volumes (then now).
    let at = if pending.is_empty() {
        boot_at
    } else {
        cloud.now
    };
    let ports: Vec<String> = s_ports(cloud, id);
    for p in &ports {
        neutron::set_port_status(cloud, p, "ACTIVE");
    }
    let log = cloud
        .nova
        .server(id)
        .map(|s| cloud_init_log(cloud, s))
        .unwrap_or_default();
    if let Some(s) = cloud.nova.server_mut(id) {
        for (vid, att) in attached {
            if let Some(v) = s.volumes.iter_mut().find(|v| v.volume_id == vid) {
                v.attached = true;
                v.attachment_id = att;
            }
        }
        s.vm_state = "active".into();
        s.task_state = None;
        s.power_state = 1;
        let t = date;
        s.launched_at = Some(t);
        s.updated = t;
        s.console.extend(log);
    }
    if !crate::guests::boot(cloud, at, id)
        && let Some(s) = cloud.nova.server_mut(id)
    {
        super::boot::schedule(s, cloud.now);
    }
}

fn s_ports(cloud: &Cloud, id: &str) -> Vec<String> {
    cloud
        .nova
        .server(id)
        .map(|s| s.ports.iter().map(|p| p.port_id.clone()).collect())
        .unwrap_or_default()
}

fn fail_build(cloud: &mut Cloud, id: &str, msg: &str) {
    let date = cloud.date();
    if let Some(s) = cloud.nova.server_mut(id) {
        set_error(s, 500, msg, date);
    }
}

fn finish_task(cloud: &mut Cloud, id: &str) {
    let date = cloud.date();
    let Some(s) = cloud.nova.server_mut(id) else {
        return;
    };
    let task = s.task_state.take();
    let at = s.task_until.take().unwrap_or(cloud.now);
    s.updated = date;
    let port_status = match task.as_deref() {
        Some("powering-off") => {
            s.vm_state = "stopped".into();
            s.power_state = 4;
            s.console
                .push("[  OK  ] Reached target poweroff.target - System Power Off.".into());
            s.console.push("[   60.000000] reboot: Power down".into());
            "DOWN"
        }
        Some("powering-on" | "rebooting" | "rebooting_hard") => {
            s.vm_state = "active".into();
            s.power_state = 1;
            let mut log = kernel_log(s);
            s.console.append(&mut log);
            "ACTIVE"
        }
        _ => return,
    };
    let lines = cloud
        .nova
        .server(id)
        .filter(|_| port_status == "ACTIVE")
        .map(|s| cloud_init_log(cloud, s))
        .unwrap_or_default();
    for p in s_ports(cloud, id) {
        neutron::set_port_status(cloud, &p, port_status);
    }
    if let Some(s) = cloud.nova.server_mut(id) {
        s.console.extend(lines);
    }
    let event = match task.as_deref() {
        Some("powering-off") => GuestEvent::Shutdown,
        Some("powering-on") => GuestEvent::Start,
        _ => GuestEvent::Reboot,
    };
    crate::guests::raise(cloud, at, id, event);
}

fn finish_delete(cloud: &mut Cloud, id: &str) {
    let Some(pos) = cloud.nova.servers.iter().position(|s| s.id == id) else {
        return;
    };
    let s = cloud.nova.servers.remove(pos);
    let at = s.delete_at.unwrap_or(cloud.now);
    crate::guests::raise(cloud, at, id, GuestEvent::Delete);
    release_ports(cloud, &s);
    for v in &s.volumes {
        if v.attached {
            cinder::detach(cloud, &v.volume_id, &s.id);
        }
        if v.delete_on_termination {
            cinder::delete_volume_internal(cloud, &v.volume_id);
        }
    }
    for g in &mut cloud.nova.server_groups {
        g.members.retain(|m| m != id);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Views

fn port_views(cloud: &Cloud, s: &Server) -> Vec<(ServerPort, neutron::PortView)> {
    s.ports
        .iter()
        .filter_map(|p| neutron::port_view(cloud, &p.port_id).map(|v| (p.clone(), v)))
        .collect()
}

/// `{network_name: [{addr, version, ...}]}` from the server's ports and their floating IPs.
fn addresses(cloud: &Cloud, s: &Server, extended: bool) -> Map<String, Value> {
    let mut out = Map::new();
    for (p, v) in port_views(cloud, s) {
        let net = neutron::network_name(cloud, &v.network_id).unwrap_or(v.network_id.clone());
        let entry = |addr: &str, kind: &str| {
            let version = if addr.contains(':') { 6 } else { 4 };
            let mut e = json!({"addr": addr, "version": version});
            if extended {
                e["OS-EXT-IPS:type"] = json!(kind);
                e["OS-EXT-IPS-MAC:mac_addr"] = json!(v.mac_address);
            }
            e
        };
        let mut list: Vec<Value> = v
            .fixed_ips
            .iter()
            .map(|(_, ip)| entry(ip, "fixed"))
            .collect();
        list.extend(
            neutron::floating_ips_of_port(cloud, &p.port_id)
                .iter()
                .map(|ip| entry(ip, "floating")),
        );
        if let Some(Value::Array(a)) = out.get_mut(&net) {
            a.extend(list);
        } else {
            out.insert(net, Value::Array(list));
        }
    }
    out
}

fn security_groups_of(cloud: &Cloud, s: &Server) -> Vec<Value> {
    let views = port_views(cloud, s);
    let mut names: Vec<String> = Vec::new();
    if views.is_empty() {
        names = s.security_groups.clone();
    }
    for (_, v) in views {
        for id in &v.security_group_ids {
            let n = neutron::security_group_name(cloud, id).unwrap_or(id.clone());
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    names.into_iter().map(|n| json!({"name": n})).collect()
}

/// The server as GET /servers/{id} (show = true) or an item of /servers/detail renders it at `mv`.
fn server_view(
    app: &SharedApp,
    cloud: &Cloud,
    s: &Server,
    mv: Mv,
    ctx: &AuthCtx,
    show: bool,
) -> Value {
    let status = s.status();
    let flavor = if mv.at_least(47) {
        json!({
            "vcpus": s.flavor.vcpus, "ram": s.flavor.ram_mb, "disk": s.flavor.disk_gb,
            "ephemeral": s.flavor.ephemeral_gb, "swap": s.flavor.swap_mb,
            "original_name": s.flavor.name, "extra_specs": s.flavor.extra_specs,
        })
    } else {
        json!({"id": s.flavor.id, "links": bookmark(app, "flavors", &s.flavor.id)})
    };
    let mut v = json!({
        "id": s.id,
        "name": s.name,
        "status": status,
        "tenant_id": s.project_id,
        "user_id": s.user_id,
        "metadata": s.metadata,
        "hostId": host_id(&s.project_id, s.host.as_deref()),
        "image": s.image_id.as_deref().map_or(json!(""), |i| image_ref(app, i)),
        "flavor": flavor,
        "created": ids::iso(s.created),
        "updated": ids::iso(s.updated),
        "addresses": addresses(cloud, s, true),
        "accessIPv4": s.access_ipv4,
        "accessIPv6": s.access_ipv6,
        "links": links(app, "servers", &s.id),
        "OS-DCF:diskConfig": s.disk_config,
        "key_name": s.key_name,
        "config_drive": if s.config_drive { "True" } else { "" },
        "OS-EXT-AZ:availability_zone": if s.host.is_some() { s.availability_zone.as_str() } else { "" },
        "OS-EXT-STS:power_state": s.power_state,
        "OS-EXT-STS:task_state": s.task_state,
        "OS-EXT-STS:vm_state": s.vm_state,
        "OS-SRV-USG:launched_at": s.launched_at.map(ids::iso_micro),
        "OS-SRV-USG:terminated_at": null,
        "security_groups": security_groups_of(cloud, s),
    });
    // Nova shows progress only for these statuses.
    if [
        "ACTIVE",
        "BUILD",
        "REBUILD",
        "RESIZE",
        "VERIFY_RESIZE",
        "MIGRATING",
    ]
    .contains(&status)
    {
        // Nova's libvirt driver leaves progress at 0 once a boot completes.
        v["progress"] = json!(0);
    }
    v["os-extended-volumes:volumes_attached"] = s
        .volumes
        .iter()
        .filter(|a| a.attached)
        .map(|a| {
            if mv.at_least(3) {
                json!({"id": a.volume_id, "delete_on_termination": a.delete_on_termination})
            } else {
                json!({"id": a.volume_id})
            }
        })
        .collect();
    if let Some(f) = &s.fault {
        v["fault"] = json!({"code": f.code, "message": f.message, "created": ids::iso(f.created)});
        if ctx.is_admin() {
            v["fault"]["details"] = json!("");
        }
    }
    if ctx.is_admin() {
        v["OS-EXT-SRV-ATTR:host"] = json!(s.host);
        v["OS-EXT-SRV-ATTR:hypervisor_hostname"] = json!(s.host);
        v["OS-EXT-SRV-ATTR:instance_name"] = json!(format!("instance-{:08x}", s.instance_seq));
        if mv.at_least(3) {
            v["OS-EXT-SRV-ATTR:reservation_id"] = json!(format!("r-{:08x}", s.instance_seq));
            v["OS-EXT-SRV-ATTR:launch_index"] = json!(0);
            v["OS-EXT-SRV-ATTR:kernel_id"] = json!("");
            v["OS-EXT-SRV-ATTR:ramdisk_id"] = json!("");
            v["OS-EXT-SRV-ATTR:hostname"] = json!(s.hostname);
            v["OS-EXT-SRV-ATTR:root_device_name"] = json!("/dev/vda");
            v["OS-EXT-SRV-ATTR:user_data"] = json!(s.user_data);
        }
        if mv.at_least(16) {
            v["host_status"] = json!(if s.host.is_some() { "UP" } else { "" });
        }
    }
    if mv.at_least(90) {
        v["OS-EXT-SRV-ATTR:hostname"] = json!(s.hostname);
    }
    if mv.at_least(9) {
        v["locked"] = json!(s.locked);
    }
    if mv.at_least(19) {
        v["description"] = json!(s.description);
    }
    if mv.at_least(26) {
        v["tags"] = json!(s.tags);
    }
    if mv.at_least(63) {
        v["trusted_image_certificates"] = Value::Null;
    }
    if mv.at_least(71) && show {
        v["server_groups"] = json!(s.server_groups);
    }
    if mv.at_least(73) {
        v["locked_reason"] = json!(s.locked_reason);
    }
    if mv.at_least(96) {
        v["pinned_availability_zone"] = json!(s.pinned_az);
    }
    v
}

// ---------------------------------------------------------------------------------------------------------
// List, show, update, delete

fn parse_time(raw: &str, field: &str) -> SimResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| {
            NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S%.f").map(|t| t.and_utc())
        })
        .or_else(|_| NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S").map(|t| t.and_utc()))
        .map_err(|_| bad(format!("Invalid filter field: {field}.")))
}

fn fixed_ips(cloud: &Cloud, s: &Server) -> Vec<String> {
    port_views(cloud, s)
        .into_iter()
        .flat_map(|(_, v)| v.fixed_ips.into_iter().map(|(_, ip)| ip))
        .collect()
}

/// Nova's regex filters are searches (`re.search`); a pattern that does not compile matches literally.
fn regex_match(pattern: &str, value: &str) -> bool {
    match regex::Regex::new(pattern) {
        Ok(re) => re.is_match(value),
        Err(_) => value.contains(pattern),
    }
}

async fn list_common(
    app: SharedApp,
    ctx: AuthCtx,
    mv: Mv,
    q: QueryParams,
    detail: bool,
) -> SimResult<Response> {
    check_limit(&q)?;
    let changes_since = q
        .get("changes-since")
        .map(|t| parse_time(t, "changes-since"))
        .transpose()?;
    let changes_before = if mv.at_least(66) {
        q.get("changes-before")
            .map(|t| parse_time(t, "changes-before"))
            .transpose()?
    } else {
        None
    };
    if let (Some(a), Some(b)) = (changes_since, changes_before)
        && a > b
    {
        return Err(bad(
            "The value of changes-since must be less than or equal to changes-before.",
        ));
    }
    let tags = if mv.at_least(26) {
        q.tag_filter()
    } else {
        Default::default()
    };
    let statuses: Vec<String> = q
        .all("status")
        .iter()
        .map(|s| s.to_ascii_uppercase())
        .collect();
    let locked = if mv.at_least(73) {
        q.bool("locked")
    } else {
        None
    };
    let cloud = app.cloud();
    let mut list: Vec<&Server> = cloud
        .nova
        .servers
        .iter()
        .filter(|s| s.project_id == ctx.project_id)
        .filter(|s| q.get("name").is_none_or(|n| regex_match(n, &s.name)))
        .filter(|s| statuses.is_empty() || statuses.iter().any(|st| st == s.status()))
        .filter(|s| q.get("flavor").is_none_or(|f| ref_id(f) == s.flavor.id))
        .filter(|s| {
            q.get("image")
                .is_none_or(|i| s.image_id.as_deref() == Some(ref_id(i).as_str()))
        })
        .filter(|s| changes_since.is_none_or(|t| s.updated >= t))
        .filter(|s| changes_before.is_none_or(|t| s.updated <= t))
        .filter(|s| tags.is_empty() || tags.matches(&s.tags))
        .filter(|s| locked.is_none_or(|l| s.locked == l))
        .filter(|s| {
            let want: Vec<&str> = ["ip", "ip6"].iter().filter_map(|k| q.get(k)).collect();
            want.is_empty() || {
                let ips = fixed_ips(&cloud, s);
                want.iter().all(|p| ips.iter().any(|ip| regex_match(p, ip)))
            }
        })
        .collect();
    list.sort_by(|a, b| b.created.cmp(&a.created).then(b.id.cmp(&a.id)));
    let page = paginate_at_most(list, &q, MAX_LIMIT, |s| s.id.clone())
        .map_err(|m| bad(format!("marker [{m}] not found")))?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|s| {
            if detail {
                server_view(&app, &cloud, s, mv, &ctx, false)
            } else {
                json!({"id": s.id, "name": s.name, "links": links(&app, "servers", &s.id)})
            }
        })
        .collect();
    let mut body = json!({ "servers": items });
    let path = if detail {
        format!("{P}/servers/detail")
    } else {
        format!("{P}/servers")
    };
    if let Some(l) = next_links(&app.base_url, &path, &q, page.next_marker.as_deref()) {
        body["servers_links"] = l;
    }
    Ok(reply(StatusCode::OK, body))
}

pub async fn list(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    q: QueryParams,
) -> SimResult<Response> {
    list_common(app, ctx, mv, q, false).await
}

pub async fn list_detail(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    q: QueryParams,
) -> SimResult<Response> {
    list_common(app, ctx, mv, q, true).await
}

fn server_not_found(id: &str) -> SimError {
    not_found(format!("Instance {id} could not be found."))
}

fn find<'a>(cloud: &'a Cloud, ctx: &AuthCtx, id: &str) -> SimResult<&'a Server> {
    cloud
        .nova
        .server(id)
        .filter(|s| s.project_id == ctx.project_id || ctx.is_admin())
        .ok_or_else(|| server_not_found(id))
}

fn find_mut<'a>(cloud: &'a mut Cloud, ctx: &AuthCtx, id: &str) -> SimResult<&'a mut Server> {
    cloud
        .nova
        .server_mut(id)
        .filter(|s| s.project_id == ctx.project_id || ctx.is_admin())
        .ok_or_else(|| server_not_found(id))
}

pub async fn show(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    Ok(reply(
        StatusCode::OK,
        json!({"server": server_view(&app, &cloud, s, mv, &ctx, true)}),
    ))
}

pub async fn update(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let u = body_object(&body, "server")?;
    let mut known = vec!["name", "accessIPv4", "accessIPv6", "OS-DCF:diskConfig"];
    if mv.at_least(19) {
        known.push("description");
    }
    if mv.at_least(90) {
        known.push("hostname");
    }
    only_known(u, &known)?;
    let name = u.get("name").map(check_name).transpose()?;
    let description = match u.get("description") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(d)) if d.chars().count() <= 255 => Some(Some(d.clone())),
        Some(other) => return Err(invalid("description", other, "is not a valid description")),
    };
    let hostname = opt_str(u, "hostname")?;
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    if let Some(n) = name {
        s.name = n;
    }
    if let Some(d) = description {
        s.description = d;
    }
    if let Some(h) = hostname {
        s.hostname = h;
    }
    for (key, slot) in [
        ("accessIPv4", &mut s.access_ipv4),
        ("accessIPv6", &mut s.access_ipv6),
    ] {
        if let Some(ip) = opt_str(u, key)? {
            *slot = ip;
        }
    }
    if let Some(dc) = opt_str(u, "OS-DCF:diskConfig")? {
        s.disk_config = dc;
    }
    s.updated = date;
    let s = find(&cloud, &ctx, &id)?;
    Ok(reply(
        StatusCode::OK,
        json!({"server": server_view(&app, &cloud, s, mv, &ctx, true)}),
    ))
}

pub async fn delete(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    let delete_secs = app.latency().server_delete_secs;
    let mut cloud = app.cloud();
    let date = cloud.date();
    let now = cloud.now;
    let s = find_mut(&mut cloud, &ctx, &id)?;
    if s.locked && !ctx.is_admin() {
        return Err(conflict(format!("Instance {id} is locked")));
    }
    if s.delete_at.is_none() {
        s.task_state = Some("deleting".into());
        s.task_until = None;
        s.delete_at = Some(now.after(delete_secs));
        s.updated = date;
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------------------
// Actions

fn invalid_state(action: &str, s: &Server) -> SimError {
    match &s.task_state {
        Some(t) => conflict(format!(
            "Cannot '{action}' instance {} while it is in task_state {t}",
            s.id
        )),
        None => conflict(format!(
            "Cannot '{action}' instance {} while it is in vm_state {}",
            s.id, s.vm_state
        )),
    }
}

/// Fails unless the server is in one of `vm_states` with no task running.
fn require_state(s: &Server, action: &str, vm_states: &[&str]) -> SimResult<()> {
    if !vm_states.contains(&s.vm_state.as_str()) || s.task_state.is_some() {
        return Err(invalid_state(action, s));
    }
    Ok(())
}

fn start_task(s: &mut Server, task: &str, until: SimTime, date: DateTime<Utc>) {
    s.task_state = Some(task.to_owned());
    s.task_until = Some(until);
    s.updated = date;
}

pub async fn action(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let obj = body.as_object().cloned().unwrap_or_default();
    let (name, args) = match obj.iter().next() {
        Some((k, v)) if obj.len() == 1 => (k.clone(), v.clone()),
        _ => return Err(bad("Malformed request body")),
    };
    let mut cloud = app.cloud();
    let until = cloud.now.after(ACTION_SECS);
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    let locked_out = s.locked && !ctx.is_admin();
    match name.as_str() {
        "os-getConsoleOutput" => {
            let length = match args.get("length") {
                None | Some(Value::Null) => None,
                Some(l) => {
                    let n = l
                        .as_i64()
                        .or_else(|| l.as_str().and_then(|x| x.parse().ok()))
                        .filter(|n| *n >= -1)
                        .ok_or_else(|| invalid("length", l, "is not a valid integer ≥ -1"))?;
                    (n >= 0).then_some(n as usize)
                }
            };
            if s.host.is_none() {
                return Err(conflict(format!("Instance {id} is not ready")));
            }
            let lines = &s.console;
            let from = length.map_or(0, |n| lines.len().saturating_sub(n));
            Ok(reply(
                StatusCode::OK,
                json!({"output": lines[from..].join("\n")}),
            ))
        }
        "os-stop" | "os-start" | "reboot" if locked_out => {
            Err(conflict(format!("Instance {id} is locked")))
        }
        "os-stop" => {
            require_state(s, "stop", &["active", "error"])?;
            start_task(s, "powering-off", until, date);
            Ok(StatusCode::ACCEPTED.into_response())
        }
        "os-start" => {
            require_state(s, "start", &["stopped"])?;
            start_task(s, "powering-on", until, date);
            Ok(StatusCode::ACCEPTED.into_response())
        }
        "reboot" => {
            let kind = args.get("type").and_then(Value::as_str).unwrap_or("");
            match kind.to_ascii_uppercase().as_str() {
                "SOFT" => {
                    require_state(s, "reboot", &["active"])?;
                    start_task(s, "rebooting", until, date);
                }
                "HARD" => {
                    if !["active", "stopped", "error"].contains(&s.vm_state.as_str())
                        || s.task_state.as_deref().is_some_and(|t| t != "rebooting")
                    {
                        return Err(invalid_state("reboot", s));
                    }
                    start_task(s, "rebooting_hard", until, date);
                }
                _ => {
                    return Err(invalid(
                        "type",
                        &args,
                        "is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']",
                    ));
                }
            }
            Ok(StatusCode::ACCEPTED.into_response())
        }
        "lock" => {
            let reason = match args.get("locked_reason") {
                Some(r) if mv.at_least(73) => Some(
                    r.as_str()
                        .filter(|r| r.chars().count() <= 255)
                        .ok_or_else(|| invalid("locked_reason", r, "is not a valid reason"))?
                        .to_owned(),
                ),
                Some(_) => {
                    return Err(bad(
                        "Additional properties are not allowed ('locked_reason' was unexpected)",
                    ));
                }
                None => None,
            };
            s.locked = true;
            s.locked_reason = reason;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        "unlock" => {
            s.locked = false;
            s.locked_reason = None;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        other => Err(bad(format!("There is no such action: {other}"))),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Tags (≥ 2.26)

fn tags_api(mv: Mv) -> SimResult<()> {
    if mv.at_least(26) {
        Ok(())
    } else {
        Err(not_found("The resource could not be found."))
    }
}

/// Tag changes need a settled server: Nova's `ServerTagsController._check_instance_in_valid_state`
/// takes vm_state active, paused, suspended, stopped (and since 2023, shelved ones) and answers 409
/// otherwise: while it is built, once its build failed, while it is deleted.
fn taggable(s: &Server, action: &str) -> SimResult<()> {
    let settled = matches!(
        s.vm_state.as_str(),
        "active" | "paused" | "suspended" | "stopped" | "shelved" | "shelved_offloaded"
    );
    if s.delete_at.is_some() {
        return Err(invalid_state(action, s));
    }
    if !settled {
        // Nova names the vm_state here, whatever the task.
        return Err(conflict(format!(
            "Cannot '{action}' instance {} while it is in vm_state {}",
            s.id, s.vm_state
        )));
    }
    Ok(())
}

pub async fn list_tags(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<Response> {
    tags_api(mv)?;
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    Ok(reply(StatusCode::OK, json!({"tags": s.tags})))
}

pub async fn replace_tags(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Response> {
    tags_api(mv)?;
    let body = parse_body(&body)?;
    let tags = check_tags(body.get("tags").unwrap_or(&Value::Null))?;
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    taggable(s, "update tags")?;
    s.tags = tags;
    s.updated = date;
    Ok(reply(StatusCode::OK, json!({"tags": s.tags})))
}

pub async fn delete_tags(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<StatusCode> {
    tags_api(mv)?;
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    taggable(s, "delete tags")?;
    s.tags.clear();
    s.updated = date;
    Ok(StatusCode::NO_CONTENT)
}

fn tag_not_found(tag: &str, id: &str) -> SimError {
    not_found(format!("Tag {tag} could not be found for resource {id}."))
}

pub async fn check_tag_exists(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    tags_api(mv)?;
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    if s.tags.contains(&tag) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(tag_not_found(&tag, &id))
    }
}

pub async fn add_tag(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<Response> {
    tags_api(mv)?;
    check_tag(&tag)?;
    let base = app.base_url.clone();
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    taggable(s, "update tag")?;
    if s.tags.contains(&tag) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if s.tags.len() >= MAX_TAGS {
        return Err(bad(format!(
            "The number of tags exceeded the per-server limit {MAX_TAGS}"
        )));
    }
    s.tags.push(tag.clone());
    s.updated = date;
    let mut r = StatusCode::CREATED.into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("{base}{P}/servers/{id}/tags/{tag}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

pub async fn delete_tag(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path((id, tag)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    tags_api(mv)?;
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    taggable(s, "delete tag")?;
    let before = s.tags.len();
    s.tags.retain(|t| t != &tag);
    if s.tags.len() == before {
        return Err(tag_not_found(&tag, &id));
    }
    s.updated = date;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------------------
// Metadata

pub async fn list_metadata(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    Ok(reply(StatusCode::OK, json!({"metadata": s.metadata})))
}

async fn write_metadata(
    app: SharedApp,
    ctx: AuthCtx,
    id: String,
    body: Bytes,
    replace: bool,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let new = check_metadata(body.get("metadata").unwrap_or(&Value::Null))?;
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    let mut merged = if replace {
        BTreeMap::new()
    } else {
        s.metadata.clone()
    };
    merged.extend(new);
    check_metadata_count(merged.len())?;
    s.metadata = merged;
    s.updated = date;
    Ok(reply(StatusCode::OK, json!({"metadata": s.metadata})))
}

pub async fn merge_metadata(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Response> {
    write_metadata(app, ctx, id, body, false).await
}

pub async fn replace_metadata(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Response> {
    write_metadata(app, ctx, id, body, true).await
}

fn meta_not_found() -> SimError {
    not_found("Metadata item was not found")
}

pub async fn show_metadata_item(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path((id, key)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    let v = s.metadata.get(&key).ok_or_else(meta_not_found)?;
    Ok(reply(StatusCode::OK, json!({"meta": {key: v}})))
}

pub async fn set_metadata_item(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path((id, key)): Path<(String, String)>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let meta = check_metadata(body.get("meta").unwrap_or(&Value::Null))?;
    if meta.len() > 1 {
        return Err(bad("Request body contains too many items"));
    }
    let value = meta
        .get(&key)
        .ok_or_else(|| bad("Request body and URI mismatch"))?
        .clone();
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    if !s.metadata.contains_key(&key) {
        check_metadata_count(s.metadata.len() + 1)?;
    }
    s.metadata.insert(key.clone(), value.clone());
    s.updated = date;
    Ok(reply(StatusCode::OK, json!({"meta": {key: value}})))
}

pub async fn delete_metadata_item(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path((id, key)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    let mut cloud = app.cloud();
    let date = cloud.date();
    let s = find_mut(&mut cloud, &ctx, &id)?;
    s.metadata.remove(&key).ok_or_else(meta_not_found)?;
    s.updated = date;
    Ok(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------------------------------
// Addresses and interfaces

pub async fn ips(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    Ok(reply(
        StatusCode::OK,
        json!({"addresses": addresses(&cloud, s, false)}),
    ))
}

pub async fn ips_of_network(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path((id, network)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    let all = addresses(&cloud, s, false);
    let list = all
        .get(&network)
        .ok_or_else(|| not_found("Instance is not a member of specified network"))?;
    Ok(reply(StatusCode::OK, json!({ network: list })))
}

fn interface_view(p: &ServerPort, v: &neutron::PortView, mv: Mv) -> Value {
    let mut out = json!({
        "fixed_ips": v.fixed_ips.iter().map(|(subnet, ip)| json!({"subnet_id": subnet, "ip_address": ip})).collect::<Vec<_>>(),
        "mac_addr": v.mac_address,
        "net_id": v.network_id,
        "port_id": v.id,
        "port_state": v.status,
    });
    if mv.at_least(70) {
        out["tag"] = json!(p.tag);
    }
    out
}

pub async fn list_interfaces(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    let items: Vec<Value> = port_views(&cloud, s)
        .iter()
        .map(|(p, v)| interface_view(p, v, mv))
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({"interfaceAttachments": items}),
    ))
}

pub async fn show_interface(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path((id, port_id)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    let (p, v) = port_views(&cloud, s)
        .into_iter()
        .find(|(p, _)| p.port_id == port_id)
        .ok_or_else(|| not_found(format!("Port id {port_id} could not be found.")))?;
    Ok(reply(
        StatusCode::OK,
        json!({"interfaceAttachment": interface_view(&p, &v, mv)}),
    ))
}

// ---------------------------------------------------------------------------------------------------------
// Volume attachments

fn attachment_view(s: &Server, a: &VolumeAttachment, mv: Mv) -> Value {
    let mut v = json!({"device": a.device, "serverId": s.id, "volumeId": a.volume_id});
    if !mv.at_least(89) {
        v["id"] = json!(a.volume_id);
    }
    if mv.at_least(70) {
        v["tag"] = json!(a.tag);
    }
    if mv.at_least(79) {
        v["delete_on_termination"] = json!(a.delete_on_termination);
    }
    if mv.at_least(89) {
        v["attachment_id"] = json!(a.attachment_id);
        v["bdm_uuid"] = json!(a.bdm_uuid);
    }
    v
}

pub async fn list_volume_attachments(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    let items: Vec<Value> = s
        .volumes
        .iter()
        .filter(|a| a.attached)
        .map(|a| attachment_view(s, a, mv))
        .collect();
    Ok(reply(StatusCode::OK, json!({"volumeAttachments": items})))
}

fn attachment_not_found(volume_id: &str) -> SimError {
    not_found(format!(
        "No volume Block Device Mapping with id {volume_id}."
    ))
}

pub async fn show_volume_attachment(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path((id, volume_id)): Path<(String, String)>,
) -> SimResult<Response> {
    let cloud = app.cloud();
    let s = find(&cloud, &ctx, &id)?;
    let a = s
        .volumes
        .iter()
        .find(|a| a.attached && a.volume_id == volume_id)
        .ok_or_else(|| attachment_not_found(&volume_id))?;
    Ok(reply(
        StatusCode::OK,
        json!({"volumeAttachment": attachment_view(s, a, mv)}),
    ))
}

/// Nova's attach, in its order: the server's state, the device path's form, the volume (404), no
/// second attachment of a volume that is not multiattach, the disk limit (`max_disk_devices_to_attach`,
/// 403), the zones (`cross_az_attach`), multiattach only from 2.60, then Cinder's reservation (its 400
/// wrapped as Nova wraps it). The volume is `attaching` until the compute host is done.
pub async fn attach_volume(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    mv: Mv,
    Path(id): Path<String>,
    body: Bytes,
) -> SimResult<Response> {
    let body = parse_body(&body)?;
    let a = body_object(&body, "volumeAttachment")?;
    let mut known = vec!["volumeId", "device"];
    if mv.at_least(49) {
        known.push("tag");
    }
    if mv.at_least(79) {
        known.push("delete_on_termination");
    }
    only_known(a, &known)?;
    let volume_id = opt_str(a, "volumeId")?
        .filter(|v| is_uuid(v))
        .ok_or_else(|| {
            invalid(
                "volumeId",
                &Value::Object(a.clone()),
                "'volumeId' is a required property",
            )
        })?;
    let tag = opt_str(a, "tag")?;
    // The libvirt driver picks the name itself, but the schema refuses a malformed one (as
    // minicloud's Nova 34 answers).
    if let Some(d) = opt_str(a, "device")?
        && !device_path_ok(&d)
    {
        return Err(bad(format!(
            "Invalid input for field/attribute device. Value: {d}. '{d}' does not match '(^/dev/x{{0,1}}[a-z]{{0,1}}d{{0,1}})([a-z]+)[0-9]*$'"
        )));
    }
    let delete_on_termination = a
        .get("delete_on_termination")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let cfg = &app.cfg;
    let attach_secs = app.latency().volume_attach_secs;
    let mut guard = app.cloud();
    let date = guard.date();
    let cloud = &mut *guard;
    let s = find(cloud, &ctx, &id)?;
    if s.delete_at.is_some() || !["active", "stopped"].contains(&s.vm_state.as_str()) {
        return Err(invalid_state("attach_volume", s));
    }
    let vol = cinder::volume_facts(cloud, &volume_id)
        .ok_or_else(|| not_found(format!("Volume {volume_id} could not be found.")))?;
    let holders: Vec<&str> = cloud
        .nova
        .servers
        .iter()
        .filter(|o| o.volumes.iter().any(|v| v.volume_id == volume_id))
        .map(|o| o.id.as_str())
        .collect();
    if !holders.is_empty() && !vol.multiattach {
        return Err(bad(format!(
            "Invalid volume: volume {volume_id} is already attached to instances: {}",
            holders.join(" ")
        )));
    }
    if holders.contains(&id.as_str()) {
        return Err(bad(format!(
            "Invalid volume: volume {volume_id} already attached"
        )));
    }
    // The root disk counts (`/dev/vda`), then every volume's letter.
    let used: Vec<&str> = s.volumes.iter().map(|v| v.device.as_str()).collect();
    let letters = used.iter().filter(|d| **d != "/dev/vda").count() + 1;
    let max = cfg.max_disk_devices_to_attach;
    if max >= 0 && i64::try_from(letters + 1).unwrap_or(i64::MAX) > max {
        return Err(forbidden(format!(
            "The maximum allowed number of disk devices ({max}) to attach to a single instance has been exceeded."
        )));
    }
    let device = (b'b'..=b'z')
        .map(|c| format!("/dev/vd{}", c as char))
        .find(|d| !used.contains(&d.as_str()))
        .ok_or_else(|| bad("No free disk device names for prefix 'vd'"))?;
    if !cfg.cross_az_attach && s.availability_zone != vol.availability_zone {
        return Err(bad(format!(
            "Invalid volume: Instance {id} and volume {volume_id} are not in the same availability_zone. Instance is in {}. Volume is in {}",
            s.availability_zone, vol.availability_zone
        )));
    }
    if vol.multiattach && !mv.at_least(60) {
        return Err(bad(
            "Multiattach volumes are only supported starting with compute API version 2.60.",
        ));
    }
    let attachment_id = cinder::reserve(cloud, &volume_id, &id).map_err(cinder_refusal)?;
    let until = cloud.now.after(attach_secs);
    let connect_at = Some(cloud.now.after(attach_secs / 2.0));
    let s = find_mut(cloud, &ctx, &id)?;
    let a = VolumeAttachment {
        volume_id,
        device,
        attachment_id,
        bdm_uuid: ids::uuid(),
        delete_on_termination,
        tag,
        boot: false,
        attached: true,
        pending: Some(PendingAttach {
            phase: AttachPhase::Attaching,
            until,
            connect_at,
        }),
    };
    let mut v = attachment_view(s, &a, mv);
    // The POST response keeps `id` at every version (sample at 2.89).
    v["id"] = json!(a.volume_id);
    if mv.at_least(89)
        && let Some(o) = v.as_object_mut()
    {
        o.remove("attachment_id");
        o.remove("bdm_uuid");
    }
    s.volumes.push(a);
    s.updated = date;
    Ok(reply(StatusCode::OK, json!({"volumeAttachment": v})))
}

/// Nova's `block_device.match_device`: `/dev/` then an optional `x`, a letter and a `d`, then letters
/// and digits (`/dev/vdb`, `/dev/sdc1`).
fn device_path_ok(d: &str) -> bool {
    regex::Regex::new("^/dev/x?[a-z]?d?[a-z]+[0-9]*$").is_ok_and(|r| r.is_match(d))
}

/// Cinder's 400 as Nova passes it on: cinderclient's text inside Nova's `InvalidInput`.
fn cinder_refusal(e: SimError) -> SimError {
    bad(format!(
        "Invalid input received: {} (HTTP 400) (Request-ID: req-{})",
        e.message,
        ids::uuid()
    ))
}

/// Nova's detach: the volume (404), its mapping on this server (404), never the root disk, the server's
/// state, then Cinder's `begin_detaching` (only an `in-use` volume). The mapping stays listed, and the
/// volume `detaching`, until the compute host is done.
pub async fn detach_volume(
    State(app): State<SharedApp>,
    Extension(ctx): Ctx,
    Path((id, volume_id)): Path<(String, String)>,
) -> SimResult<StatusCode> {
    let mut guard = app.cloud();
    let date = guard.date();
    let cloud = &mut *guard;
    let s = find(cloud, &ctx, &id)?;
    if cinder::volume_status(cloud, &volume_id).is_none() {
        return Err(not_found(format!("Volume {volume_id} could not be found.")));
    }
    let a = s
        .volumes
        .iter()
        .find(|a| a.attached && a.volume_id == volume_id)
        .ok_or_else(|| {
            not_found(format!(
                "Instance {id} is not attached to volume {volume_id}"
            ))
        })?;
    if a.boot {
        return Err(bad("Cannot detach a root device volume"));
    }
    if s.delete_at.is_some() || !["active", "stopped"].contains(&s.vm_state.as_str()) {
        return Err(invalid_state("detach_volume", s));
    }
    cinder::begin_detaching(cloud, &volume_id).map_err(|e| {
        let wrapped = cinder_refusal(e);
        bad(format!("Invalid volume: {}", wrapped.message))
    })?;
    let until = cloud.now.after(app.latency().volume_attach_secs);
    let s = find_mut(cloud, &ctx, &id)?;
    if let Some(a) = s.volumes.iter_mut().find(|a| a.volume_id == volume_id) {
        a.pending = Some(PendingAttach {
            phase: AttachPhase::Detaching,
            until,
            connect_at: None,
        });
    }
    s.updated = date;
    Ok(StatusCode::ACCEPTED)
}
