//! Security groups and rules, with the project's lazily created `default` group.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::*;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SecurityGroup {
    pub m: Meta,
    pub stateful: bool,
    pub shared: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SgRule {
    pub m: Meta,
    pub security_group_id: String,
    pub direction: String,
    pub ethertype: String,
    pub protocol: Option<String>,
    pub port_range_min: Option<u32>,
    pub port_range_max: Option<u32>,
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
}

fn is_default(n: &NeutronState, sg_id: &str) -> bool {
    n.security_groups
        .iter()
        .any(|s| s.m.id == sg_id && s.m.name == "default")
}

pub fn render_rule(n: &NeutronState, r: &SgRule) -> Value {
    let mut v = with(
        r.m.json(),
        json!({
            "security_group_id": r.security_group_id,
            "direction": r.direction,
            "ethertype": r.ethertype,
            "protocol": r.protocol,
            "port_range_min": r.port_range_min,
            "port_range_max": r.port_range_max,
            "remote_ip_prefix": r.remote_ip_prefix,
            "remote_group_id": r.remote_group_id,
            "remote_address_group_id": null,
            "normalized_cidr": r.remote_ip_prefix,
            "belongs_to_default_sg": is_default(n, &r.security_group_id),
        }),
    );
    // Rules have no name in Neutron, and no tags (its rule model has no tag support; checked
    // against Neutron 29, whatever the API reference's sample shows).
    if let Some(o) = v.as_object_mut() {
        o.remove("name");
        o.remove("tags");
    }
    v
}

pub fn render(n: &NeutronState, x: &SecurityGroup) -> Value {
    let rules: Vec<Value> = n
        .security_group_rules
        .iter()
        .filter(|r| r.security_group_id == x.m.id)
        .map(|r| render_rule(n, r))
        .collect();
    with(
        x.m.json(),
        json!({"security_group_rules": rules, "stateful": x.stateful, "shared": x.shared}),
    )
}

fn rule(
    project: &str,
    sg: &str,
    direction: &str,
    ethertype: &str,
    remote_group: Option<&str>,
) -> SgRule {
    SgRule {
        m: Meta::new(project, "", ""),
        security_group_id: sg.to_owned(),
        direction: direction.to_owned(),
        ethertype: ethertype.to_owned(),
        remote_group_id: remote_group.map(str::to_owned),
        ..Default::default()
    }
}

/// A new group with Neutron's two egress rules (and, for `default`, ingress from its own members).
pub(super) fn new_group(
    n: &mut NeutronState,
    project: &str,
    name: &str,
    description: &str,
    stateful: bool,
) -> String {
    let sg = SecurityGroup {
        m: Meta::new(project, name, description),
        stateful,
        shared: false,
    };
    let id = sg.m.id.clone();
    n.security_groups.push(sg);
    for eth in ["IPv4", "IPv6"] {
        n.security_group_rules
            .push(rule(project, &id, "egress", eth, None));
        if name == "default" {
            n.security_group_rules
                .push(rule(project, &id, "ingress", eth, Some(&id)));
        }
    }
    id
}

pub fn default_id(n: &NeutronState, project: &str) -> Option<String> {
    n.security_groups
        .iter()
        .find(|s| s.m.project_id == project && s.m.name == "default")
        .map(|s| s.m.id.clone())
}

/// The project's `default` group, created on first use as Neutron does.
pub fn ensure_default(n: &mut NeutronState, project: &str) -> String {
    match default_id(n, project) {
        Some(id) => id,
        None if project.is_empty() => String::new(),
        None => new_group(n, project, "default", "Default security group", true),
    }
}

// No `tags`: Neutron's tag extension has them `allow_post: False` except on ports (a 400).
const CREATE: &[&str] = &["name", "description", "stateful", "tenant_id", "project_id"];
const UPDATE: &[&str] = &["name", "description", "stateful"];

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    name: Option<String>,
    description: Option<String>,
    stateful: Option<bool>,
}

pub fn create(cloud: &mut Cloud, ctx: &AuthCtx, obj: &Map<String, Value>) -> SimResult<String> {
    check_attrs(Kind::SecurityGroup, obj, CREATE, true)?;
    let b: Body = typed(obj)?;
    let project = owner(ctx, obj, "create_security_group")?;
    ensure_default(&mut cloud.neutron, &project);
    let name = b.name.unwrap_or_default();
    if name == "default" {
        return Err(conflict(
            "SecurityGroupDefaultAlreadyExists",
            "Default security group already exists.",
        ));
    }
    check_quota(cloud, &project, "security_group", 1)?;
    check_quota(cloud, &project, "security_group_rule", 2)?;
    Ok(new_group(
        &mut cloud.neutron,
        &project,
        &name,
        b.description.as_deref().unwrap_or(""),
        b.stateful.unwrap_or(true),
    ))
}

pub fn update(cloud: &mut Cloud, id: &str, obj: &Map<String, Value>) -> SimResult<()> {
    check_attrs(Kind::SecurityGroup, obj, UPDATE, false)?;
    let b: Body = typed(obj)?;
    let n = &mut cloud.neutron;
    let renaming_default = is_default(n, id) && b.name.as_deref().is_some_and(|x| x != "default");
    if renaming_default || (!is_default(n, id) && b.name.as_deref() == Some("default")) {
        return Err(conflict(
            "SecurityGroupCannotUpdateDefault",
            "Updating default security group not allowed.",
        ));
    }
    let in_use = n
        .ports
        .iter()
        .any(|p| p.security_groups.iter().any(|s| s == id));
    let sg = n
        .security_groups
        .iter_mut()
        .find(|s| s.m.id == id)
        .ok_or_else(|| Kind::SecurityGroup.not_found(id))?;
    if let Some(v) = b.stateful
        && v != sg.stateful
        && in_use
    {
        return Err(conflict(
            "SecurityGroupInUse",
            format!("Security Group {id} in use."),
        ));
    }
    if let Some(v) = b.name {
        sg.m.name = v;
    }
    if let Some(v) = b.description {
        sg.m.description = v;
    }
    if let Some(v) = b.stateful {
        sg.stateful = v;
    }
    sg.m.touch();
    Ok(())
}

/// 409 for the default group and for groups ports use; the group's rules, and rules elsewhere that name it
/// as their remote group, go with it.
pub fn delete(n: &mut NeutronState, id: &str) -> SimResult<()> {
    if is_default(n, id) {
        return Err(conflict(
            "SecurityGroupCannotRemoveDefault",
            "Insufficient rights for removing default security group.",
        ));
    }
    if n.ports
        .iter()
        .any(|p| p.security_groups.iter().any(|s| s == id))
    {
        return Err(conflict(
            "SecurityGroupInUse",
            format!("Security Group {id} in use."),
        ));
    }
    n.security_group_rules
        .retain(|r| r.security_group_id != id && r.remote_group_id.as_deref() != Some(id));
    n.security_groups.retain(|s| s.m.id != id);
    Ok(())
}

const RULE_CREATE: &[&str] = &[
    "security_group_id",
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "remote_group_id",
    "remote_address_group_id",
    "description",
    "tenant_id",
    "project_id",
];

/// Protocol names Neutron accepts, and their numbers.
const PROTOCOLS: &[(&str, u8)] = &[
    ("ah", 51),
    ("dccp", 33),
    ("egp", 8),
    ("esp", 50),
    ("gre", 47),
    ("icmp", 1),
    ("icmpv6", 58),
    ("ipv6-icmp", 58),
    ("igmp", 2),
    ("ipip", 4),
    ("ipv6-encap", 41),
    ("ipv6-frag", 44),
    ("ipv6-nonxt", 59),
    ("ipv6-opts", 60),
    ("ipv6-route", 43),
    ("ospf", 89),
    ("pgm", 113),
    ("rsvp", 46),
    ("sctp", 132),
    ("tcp", 6),
    ("udp", 17),
    ("udplite", 136),
    ("vrrp", 112),
];

/// Port ranges apply to these protocols (by number).
const PORT_PROTOCOLS: &[u8] = &[6, 17, 33, 132, 136];

/// A JSON string or number as an optional integer (Neutron converts either).
fn int_attr(obj: &Map<String, Value>, key: &str) -> SimResult<Option<i64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| {
            bad(format!(
                "Invalid input for {key}. Reason: '{n}' is not an integer."
            ))
        }),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| {
            bad(format!(
                "Invalid input for {key}. Reason: '{s}' is not an integer."
            ))
        }),
        Some(v) => Err(bad(format!(
            "Invalid input for {key}. Reason: '{v}' is not an integer."
        ))),
    }
}

fn str_attr(obj: &Map<String, Value>, key: &str) -> SimResult<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(v) => Err(bad(format!(
            "Invalid input for {key}. Reason: '{v}' is not a valid string."
        ))),
    }
}

/// The protocol as stored (as given, lowercased; `any` is none) and its number.
fn protocol(raw: Option<String>) -> SimResult<(Option<String>, Option<u8>)> {
    let Some(p) = raw.map(|p| p.to_ascii_lowercase()).filter(|p| p != "any") else {
        return Ok((None, None));
    };
    if let Some((_, num)) = PROTOCOLS.iter().find(|(name, _)| *name == p) {
        return Ok((Some(p), Some(*num)));
    }
    match p.parse::<u8>() {
        Ok(num) => Ok((Some(p), Some(num))),
        Err(_) => Err(err400(
            "SecurityGroupRuleInvalidProtocol",
            format!(
                "Security group rule protocol {p} not supported. Only protocol values [None, 'ah', 'dccp', 'egp', 'esp', 'gre', 'icmp', 'icmpv6', 'igmp', 'ipip', 'ipv6-encap', 'ipv6-frag', 'ipv6-icmp', 'ipv6-nonxt', 'ipv6-opts', 'ipv6-route', 'ospf', 'pgm', 'rsvp', 'sctp', 'tcp', 'udp', 'udplite', 'vrrp'] and integer representations [0 to 255] are supported."
            ),
        )),
    }
}

fn port_ranges(
    num: Option<u8>,
    min: Option<i64>,
    max: Option<i64>,
) -> SimResult<(Option<u32>, Option<u32>)> {
    if min.is_none() && max.is_none() {
        return Ok((None, None));
    }
    let Some(num) = num else {
        return Err(err400(
            "SecurityGroupProtocolRequiredWithPorts",
            "Must also specify protocol if port range is given.",
        ));
    };
    if PORT_PROTOCOLS.contains(&num) {
        let (Some(lo), Some(hi)) = (min, max) else {
            return Err(err400(
                "SecurityGroupInvalidPortRange",
                "For TCP/UDP protocols, port_range_min must be <= port_range_max",
            ));
        };
        for v in [lo, hi] {
            if !(1..=65535).contains(&v) {
                return Err(err400(
                    "SecurityGroupInvalidPortValue",
                    format!("Invalid value for port {v}."),
                ));
            }
        }
        if lo > hi {
            return Err(err400(
                "SecurityGroupInvalidPortRange",
                "For TCP/UDP protocols, port_range_min must be <= port_range_max",
            ));
        }
        return Ok((u32::try_from(lo).ok(), u32::try_from(hi).ok()));
    }
    if num == 1 || num == 58 {
        // ICMP: min is the type, max the code.
        if min.is_none() {
            return Err(err400(
                "SecurityGroupMissingIcmpType",
                format!(
                    "ICMP code (port-range-max) {} is provided but ICMP type (port-range-min) is missing.",
                    max.unwrap_or_default()
                ),
            ));
        }
        for (what, v) in [("type", min), ("code", max)] {
            if let Some(v) = v
                && !(0..=255).contains(&v)
            {
                return Err(err400(
                    "SecurityGroupInvalidIcmpValue",
                    format!(
                        "Invalid value for ICMP {what} (port-range-min): {v}. It must be 0 to 255."
                    ),
                ));
            }
        }
        return Ok((
            min.and_then(|v| u32::try_from(v).ok()),
            max.and_then(|v| u32::try_from(v).ok()),
        ));
    }
    Err(err400(
        "SecurityGroupInvalidProtoForPortRange",
        "Invalid protocol for port range, only supported for TCP, UDP, UDPLITE, SCTP and DCCP.",
    ))
}

/// Protocol number for duplicate detection (`tcp` and `6` are the same rule).
fn proto_num(p: &Option<String>) -> Option<u8> {
    protocol(p.clone()).ok().and_then(|(_, n)| n)
}

pub fn create_rule(
    cloud: &mut Cloud,
    ctx: &AuthCtx,
    obj: &Map<String, Value>,
) -> SimResult<String> {
    check_attrs(Kind::SecurityGroupRule, obj, RULE_CREATE, true)?;
    let project = owner(ctx, obj, "create_security_group_rule")?;
    ensure_default(&mut cloud.neutron, &project);
    let n = &cloud.neutron;
    let sg_id = str_attr(obj, "security_group_id")?.ok_or_else(|| {
        bad("Failed to parse request. Required attribute 'security_group_id' not specified")
    })?;
    let sg = n
        .security_groups
        .iter()
        .find(|s| s.m.id == sg_id && owns(ctx, &s.m.project_id))
        .ok_or_else(|| Kind::SecurityGroup.not_found(&sg_id))?;
    let direction = str_attr(obj, "direction")?.ok_or_else(|| {
        bad("Failed to parse request. Required attribute 'direction' not specified")
    })?;
    if direction != "ingress" && direction != "egress" {
        return Err(bad(format!(
            "Invalid input for direction. Reason: {direction} is not in valid_values ['ingress', 'egress']."
        )));
    }
    let ethertype = str_attr(obj, "ethertype")?.unwrap_or_else(|| "IPv4".into());
    let v6 = match ethertype.as_str() {
        "IPv4" => false,
        "IPv6" => true,
        other => {
            return Err(err400(
                "SecurityGroupRuleInvalidEtherType",
                format!(
                    "Security group rule for ethertype '{other}' not supported. Allowed values are ['IPv4', 'IPv6']."
                ),
            ));
        }
    };
    let (protocol, num) = protocol(str_attr(obj, "protocol")?)?;
    let (port_range_min, port_range_max) = port_ranges(
        num,
        int_attr(obj, "port_range_min")?,
        int_attr(obj, "port_range_max")?,
    )?;
    let remote_group_id = str_attr(obj, "remote_group_id")?;
    let remote_ip_prefix = match str_attr(obj, "remote_ip_prefix")? {
        None => None,
        Some(_) if remote_group_id.is_some() => {
            return Err(err400(
                "SecurityGroupRemoteGroupAndRemoteIpPrefix",
                "Only remote_ip_prefix or remote_group_id may be provided.",
            ));
        }
        Some(p) => {
            let net: IpNet = p
                .parse()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| bad(format!("Invalid input for remote_ip_prefix. Reason: '{p}' is not a valid IP subnet.")))?;
            if net.addr().is_ipv6() != v6 {
                return Err(err400(
                    "SecurityGroupRuleParameterConflict",
                    format!("Conflicting value ethertype {ethertype} for CIDR {p}"),
                ));
            }
            Some(net.trunc().to_string())
        }
    };
    if str_attr(obj, "remote_address_group_id")?.is_some() {
        return Err(not_found(
            "AddressGroupNotFound",
            "Address groups are not available on this cloud.",
        ));
    }
    if let Some(rg) = &remote_group_id
        && !n
            .security_groups
            .iter()
            .any(|s| &s.m.id == rg && owns(ctx, &s.m.project_id))
    {
        return Err(Kind::SecurityGroup.not_found(rg));
    }
    let candidate = SgRule {
        m: Meta::new(
            &sg.m.project_id,
            "",
            &str_attr(obj, "description")?.unwrap_or_default(),
        ),
        security_group_id: sg_id,
        direction,
        ethertype,
        protocol,
        port_range_min,
        port_range_max,
        remote_ip_prefix,
        remote_group_id,
    };
    let any_net = |p: &Option<String>| p.clone().filter(|p| p != "0.0.0.0/0" && p != "::/0");
    if let Some(dup) = n.security_group_rules.iter().find(|r| {
        r.security_group_id == candidate.security_group_id
            && r.direction == candidate.direction
            && r.ethertype == candidate.ethertype
            && proto_num(&r.protocol) == num
            && r.port_range_min == candidate.port_range_min
            && r.port_range_max == candidate.port_range_max
            && any_net(&r.remote_ip_prefix) == any_net(&candidate.remote_ip_prefix)
            && r.remote_group_id == candidate.remote_group_id
    }) {
        return Err(conflict(
            "SecurityGroupRuleExists",
            format!(
                "Security group rule already exists. Rule id is {}.",
                dup.m.id
            ),
        ));
    }
    let owner_project = candidate.m.project_id.clone();
    check_quota(cloud, &owner_project, "security_group_rule", 1)?;
    let (id, sg_id) = (candidate.m.id.clone(), candidate.security_group_id.clone());
    let n = &mut cloud.neutron;
    n.security_group_rules.push(candidate);
    if let Some(sg) = n.security_groups.iter_mut().find(|s| s.m.id == sg_id) {
        sg.m.touch();
    }
    Ok(id)
}

fn id_of_group(rules: &[SgRule], rule_id: &str) -> String {
    rules
        .iter()
        .find(|r| r.m.id == rule_id)
        .map(|r| r.security_group_id.clone())
        .unwrap_or_default()
}

pub fn delete_rule(n: &mut NeutronState, id: &str) -> SimResult<()> {
    let sg = id_of_group(&n.security_group_rules, id);
    n.security_group_rules.retain(|r| r.m.id != id);
    if let Some(sg) = n.security_groups.iter_mut().find(|s| s.m.id == sg) {
        sg.m.touch();
    }
    Ok(())
}
