//! What kube-apiserver allocates to a Service when it stores it: a cluster IP from the service
//! range (`--service-cluster-ip-range`, [`crate::Config::service_cidr`]), node ports from
//! 30000-32767 for `NodePort` and `LoadBalancer` Services (unless
//! `allocateLoadBalancerNodePorts: false`), and a `healthCheckNodePort` for a `LoadBalancer` with
//! `externalTrafficPolicy: Local`. An update that leaves them out keeps what was allocated (the
//! registry's `patchAllocatedValues`), a cluster IP never changes, and a requested cluster IP
//! must be in the range and free. A requested node port must be in the range and free too (one
//! the Service held already stays its own), may not repeat for one protocol, and may not be given
//! to a `ClusterIP` Service. An update that switches a Service's type drops what the old type
//! allocated and the write left unchanged (the registry's `dropTypeDependentFields`).
//!
//! A requested `healthCheckNodePort` must be free too, and a full range is kube-apiserver's 500
//! (its allocators' `InternalError`), not a field's 422. `externalTrafficPolicy` is for
//! externally reachable Services only, `healthCheckNodePort` for a `LoadBalancer` with
//! `externalTrafficPolicy: Local` only, and fixed once given.
//!
//! An `ExternalName` Service holds nothing: it needs a DNS name, may not be given cluster IPs or
//! IP families, and a Service turned into one loses those it had (when the write left them), and
//! its `internalTrafficPolicy` (kube-apiserver drops that field from `ExternalName` Services).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use rand::Rng;
use serde_json::{Value, json};

use crate::error::Cause;

pub const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

/// What Services hold: cluster IPs and node ports.
#[derive(Debug, Default)]
pub struct Held {
    pub ips: BTreeSet<Ipv4Addr>,
    pub node_ports: BTreeSet<i64>,
}

impl Held {
    /// From every stored Service but the one being written (`skip`: its namespace and name).
    pub fn of<'a>(services: impl Iterator<Item = &'a Value>, skip: (&str, &str)) -> Held {
        let mut t = Held::default();
        for s in services {
            let key = (
                s.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                s.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            );
            if key == skip {
                continue;
            }
            if let Some(ip) = s
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .and_then(|ip| ip.parse().ok())
            {
                t.ips.insert(ip);
            }
            for p in s
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
                    t.node_ports.insert(n);
                }
            }
            if let Some(n) = s
                .pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_i64)
            {
                t.node_ports.insert(n);
            }
        }
        t
    }
}

/// What a Service being written may not take: what the other Services hold, and what this write
/// took so far. The others are looked at only when the write allocates or requests something
/// new: most writes of a Service (its status, finalizers, annotations) keep what it holds, and
/// looking at every other Service on each of them made the fake API server's cost grow with the
/// square of the Services.
pub struct Taken<'a> {
    others: Option<Box<dyn FnOnce() -> Held + 'a>>,
    held: Held,
}

impl<'a> Taken<'a> {
    /// The others' allocations, listed by `others` when first needed.
    pub fn later(others: impl FnOnce() -> Held + 'a) -> Taken<'a> {
        Taken {
            others: Some(Box::new(others)),
            held: Held::default(),
        }
    }

    /// The others' allocations, already known.
    #[cfg(test)]
    pub fn known(held: Held) -> Taken<'a> {
        Taken { others: None, held }
    }

    /// Everything taken: the others' (listed now if not yet) and this write's.
    fn all(&mut self) -> &Held {
        if let Some(list) = self.others.take() {
            let others = list();
            self.held.ips.extend(others.ips);
            self.held.node_ports.extend(others.node_ports);
        }
        &self.held
    }

    fn take_ip(&mut self, ip: Ipv4Addr) {
        self.held.ips.insert(ip);
    }

    fn take_port(&mut self, port: i64) {
        self.held.node_ports.insert(port);
    }

    /// A free node port, taken; a full range is the allocator's 500, naming `what` it was for.
    fn next_port(&mut self, what: &str) -> Result<i64, Refused> {
        let n = free_port(&self.all().node_ports).ok_or_else(|| {
            Refused::Internal(format!("failed to allocate {what}: range is full"))
        })?;
        self.take_port(n);
        Ok(n)
    }
}

fn invalid(field: &str, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.to_owned(),
        message,
    }
}

/// Why a Service write is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its fields: kube-apiserver's 422 `Invalid`, with these causes.
    Invalid(Vec<Cause>),
    /// An allocator's failure: kube-apiserver's 500 `InternalError`, with this text after its
    /// "Internal error occurred: ".
    Internal(String),
}

/// Fills the allocations of `svc` (defaulted already); `old` is the stored Service on updates.
pub fn service(
    svc: &mut Value,
    old: Option<&Value>,
    taken: &mut Taken<'_>,
    range: Ipv4Net,
) -> Result<(), Refused> {
    if let Some(old) = old {
        drop_type_dependent(svc, old);
    }
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let type_ = type_of(spec).to_owned();
    if type_ == "ExternalName" {
        spec.remove("internalTrafficPolicy");
        let problems = validate_external_name(spec);
        return if problems.is_empty() {
            Ok(())
        } else {
            Err(Refused::Invalid(problems))
        };
    }
    let old_spec = old.and_then(|o| o.get("spec"));
    let old_ip = old_spec
        .and_then(|s| s.get("clusterIP"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let mut problems = Vec::new();
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let ip = match (requested, old_ip) {
        (None, Some(old)) => old.to_owned(),
        (Some(new), Some(old)) if new != old => {
            problems.push(invalid(
                "spec.clusterIPs[0]",
                format!("Invalid value: {new:?}: may not change once set"),
            ));
            old.to_owned()
        }
        // Unchanged, or headless.
        (Some(new), Some(_)) => new,
        (Some(new), None) if new == "None" => new,
        (Some(new), None) => match new.parse::<Ipv4Addr>() {
            Ok(a) if !range.contains(&a) => {
                problems.push(invalid(
                    "spec.clusterIPs",
                    format!("Invalid value: [{new:?}]: failed to allocate IP {new}: the provided IP ({new}) is not in the valid range. The range of valid IPs is {range}"),
                ));
                new
            }
            Ok(a) if taken.all().ips.contains(&a) => {
                problems.push(invalid(
                    "spec.clusterIPs",
                    format!("Invalid value: [{new:?}]: failed to allocate IP {new}: provided IP is already allocated"),
                ));
                new
            }
            Ok(_) => new,
            Err(_) => {
                problems.push(invalid(
                    "spec.clusterIPs[0]",
                    format!("Invalid value: {new:?}: must be a valid IP address"),
                ));
                new
            }
        },
        (None, None) => match free_ip(range, &taken.all().ips) {
            Some(a) => a.to_string(),
            None => {
                return Err(Refused::Internal(
                    "failed to allocate a serviceIP: range is full".into(),
                ));
            }
        },
    };
    if let Ok(a) = ip.parse() {
        taken.take_ip(a);
    }
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    if spec.get("ipFamilies").is_none_or(Value::is_null) {
        spec.insert("ipFamilies".into(), json!(["IPv4"]));
    }
    if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
        spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
    }

    let wants_node_ports = type_ == "NodePort"
        || (type_ == "LoadBalancer"
            && spec
                .get("allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false));
    let old_ports: &[Value] = old_spec
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let held_before = node_ports(old_spec.and_then(Value::as_object));
    problems.extend(validate_node_ports(spec, &type_));
    // Node ports this write requested: one number may serve several ports of the Service.
    let mut requested = BTreeSet::new();
    if uses_node_ports(spec)
        && let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut)
    {
        for (i, p) in ports.iter_mut().enumerate() {
            let Some(p) = p.as_object_mut() else { continue };
            if let Some(n) = p
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0)
            {
                let field = format!("spec.ports[{i}].nodePort");
                if !NODE_PORTS.contains(&n) {
                    problems.push(invalid(
                        &field,
                        format!("Invalid value: {n}: provided port is not in the valid range. The range of valid ports is 30000-32767"),
                    ));
                } else if !held_before.contains(&n)
                    && !requested.contains(&n)
                    && taken.all().node_ports.contains(&n)
                {
                    problems.push(invalid(
                        &field,
                        format!("Invalid value: {n}: provided port is already allocated"),
                    ));
                }
                requested.insert(n);
                taken.take_port(n);
                continue;
            }
            // `allocateLoadBalancerNodePorts: false`: requested ports only.
            if !wants_node_ports {
                continue;
            }
            let kept = old_ports
                .iter()
                .find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"))
                .and_then(|o| o.get("nodePort"))
                .and_then(Value::as_i64);
            let n = match kept {
                Some(n) => {
                    taken.take_port(n);
                    n
                }
                None => taken.next_port("a nodePort")?,
            };
            p.insert("nodePort".into(), json!(n));
        }
    }
    let old_check = old_spec
        .and_then(Value::as_object)
        .filter(|o| needs_health_check(o))
        .and_then(|s| s.get("healthCheckNodePort"))
        .and_then(Value::as_i64)
        .filter(|n| *n != 0);
    if needs_health_check(spec) {
        let asked = spec
            .get("healthCheckNodePort")
            .and_then(Value::as_i64)
            .filter(|n| *n != 0);
        match (asked, old_check) {
            (Some(n), Some(was)) if n != was => problems.push(invalid(
                "spec.healthCheckNodePort",
                format!("Invalid value: {n}: field is immutable"),
            )),
            (Some(n), Some(_)) | (None, Some(n)) => {
                taken.take_port(n);
                spec.insert("healthCheckNodePort".into(), json!(n));
            }
            // The allocator's answer to a request (in the range and free, or a 500).
            (Some(n), None) => {
                let why = if !NODE_PORTS.contains(&n) {
                    Some(
                        "provided port is not in the valid range. The range of valid ports is 30000-32767",
                    )
                } else if taken.all().node_ports.contains(&n) {
                    Some("provided port is already allocated")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(Refused::Internal(format!(
                        "failed to allocate requested HealthCheck NodePort {n}: {why}"
                    )));
                }
                taken.take_port(n);
            }
            (None, None) => {
                let n = taken.next_port("a HealthCheck NodePort")?;
                spec.insert("healthCheckNodePort".into(), json!(n));
            }
        }
    }
    problems.extend(validate_traffic_policy(spec));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Refused::Invalid(problems))
    }
}

/// A Service's spec, as the predicates below read it.
type Spec = serde_json::Map<String, Value>;

fn type_of(spec: &Spec) -> &str {
    spec.get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

/// kube's `needsNodePort`.
fn uses_node_ports(spec: &Spec) -> bool {
    matches!(type_of(spec), "NodePort" | "LoadBalancer")
}

/// kube's `NeedsHealthCheck`: a `LoadBalancer` with `externalTrafficPolicy: Local`.
fn needs_health_check(spec: &Spec) -> bool {
    type_of(spec) == "LoadBalancer"
        && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
}

/// kube's `ExternallyAccessible`: node ports, or a `ClusterIP` with external IPs.
fn externally_accessible(spec: &Spec) -> bool {
    uses_node_ports(spec)
        || (type_of(spec) == "ClusterIP"
            && spec
                .get("externalIPs")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()))
}

/// The node ports a Service's ports hold (not its health check's).
fn node_ports(spec: Option<&Spec>) -> BTreeSet<i64> {
    spec.and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
        .filter(|n| *n != 0)
        .collect()
}

/// kube-apiserver's `ValidateService` on node ports: none for a `ClusterIP` Service, and one
/// protocol's node port once.
fn validate_node_ports(spec: &Spec, type_: &str) -> Vec<Cause> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let ports = spec.get("ports").and_then(Value::as_array);
    for (i, p) in ports.into_iter().flatten().enumerate() {
        let Some(n) = p
            .get("nodePort")
            .and_then(Value::as_i64)
            .filter(|n| *n != 0)
        else {
            continue;
        };
        let field = format!("spec.ports[{i}].nodePort");
        if type_ == "ClusterIP" {
            problems.push(Cause {
                reason: "FieldValueForbidden",
                field: field.clone(),
                message: "Forbidden: may not be used when `type` is 'ClusterIP'".into(),
            });
        }
        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if !seen.insert((protocol.to_owned(), n)) {
            problems.push(Cause {
                reason: "FieldValueDuplicate",
                field,
                message: format!("Duplicate value: {n}"),
            });
        }
    }
    problems
}

/// kube-apiserver's `ValidateService` for an `ExternalName` Service: a DNS subdomain (a trailing
/// dot allowed) and no cluster IPs or IP families.
fn validate_external_name(spec: &Spec) -> Vec<Cause> {
    use crate::storage::{SUBDOMAIN_MSG, forbidden, invalid, required};
    const NOT_HERE: &str = "may not be set for ExternalName services";
    let mut problems = Vec::new();
    let set = |field: &str| match spec.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    };
    // The strategy's NormalizeClusterIPs makes `clusterIPs` of `clusterIP`: either names them.
    if set("clusterIP") || set("clusterIPs") {
        problems.push(forbidden("spec.clusterIPs", NOT_HERE));
    }
    for field in ["ipFamilies", "ipFamilyPolicy"] {
        if set(field) {
            problems.push(forbidden(format!("spec.{field}"), NOT_HERE));
        }
    }
    let name = spec
        .get("externalName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let cname = name.strip_suffix('.').unwrap_or(name);
    if cname.is_empty() {
        problems.push(required("spec.externalName", ""));
    } else if !crate::validate::is_dns_subdomain(cname) {
        problems.push(invalid("spec.externalName", &json!(cname), SUBDOMAIN_MSG));
    }
    problems
}

/// kube-apiserver's `validateServiceExternalTrafficPolicy`, but for the `Required` it never
/// reaches here (defaulting and allocation filled both).
fn validate_traffic_policy(spec: &Spec) -> Vec<Cause> {
    let mut problems = Vec::new();
    let policy = spec.get("externalTrafficPolicy").and_then(Value::as_str);
    if let Some(p) = policy.filter(|p| !p.is_empty() && !externally_accessible(spec)) {
        problems.push(invalid(
            "spec.externalTrafficPolicy",
            format!("Invalid value: {p:?}: may only be set for externally-accessible services"),
        ));
    }
    if let Some(n) = spec
        .get("healthCheckNodePort")
        .and_then(Value::as_i64)
        .filter(|n| *n != 0 && !needs_health_check(spec))
    {
        problems.push(invalid(
            "spec.healthCheckNodePort",
            format!("Invalid value: {n}: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"),
        ));
    }
    problems
}

/// The registry's `dropTypeDependentFields`: an update to a type that no longer uses a field the
/// old type had clears it, when the write left it as it was (a changed value is the writer's and
/// meets validation instead). Node ports are released so, and a `LoadBalancer` turned into
/// another type loses its status.
fn drop_type_dependent(svc: &mut Value, old: &Value) {
    let none = Spec::new();
    let old = old.get("spec").and_then(Value::as_object).unwrap_or(&none);
    let Some(new) = svc.get("spec").and_then(Value::as_object) else {
        return;
    };
    let same = |field: &str| new.get(field) == old.get(field);
    let wipe_node_ports = uses_node_ports(old)
        && !uses_node_ports(new)
        && node_ports(Some(new)).is_subset(&node_ports(Some(old)));
    let wipe_health_check =
        needs_health_check(old) && !needs_health_check(new) && same("healthCheckNodePort");
    let was_lb = type_of(old) == "LoadBalancer" && type_of(new) != "LoadBalancer";
    let wipe_allocate = was_lb
        && new
            .get("allocateLoadBalancerNodePorts")
            .is_some_and(Value::is_boolean)
        && same("allocateLoadBalancerNodePorts");
    let wipe_class = was_lb && same("loadBalancerClass");
    let wipe_policy =
        externally_accessible(old) && !externally_accessible(new) && same("externalTrafficPolicy");
    // needsClusterIP: every type but ExternalName.
    let to_external_name = type_of(old) != "ExternalName" && type_of(new) == "ExternalName";
    let wipe_ips = to_external_name && same("clusterIP") && same("clusterIPs");
    let wipe_families = to_external_name && same("ipFamilies");
    let wipe_family_policy = to_external_name && same("ipFamilyPolicy");
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if wipe_node_ports {
        for p in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            p.remove("nodePort");
        }
    }
    for (wipe, field) in [
        (wipe_health_check, "healthCheckNodePort"),
        (wipe_allocate, "allocateLoadBalancerNodePorts"),
        (wipe_class, "loadBalancerClass"),
        (wipe_policy, "externalTrafficPolicy"),
        (wipe_ips, "clusterIP"),
        (wipe_ips, "clusterIPs"),
        (wipe_families, "ipFamilies"),
        (wipe_family_policy, "ipFamilyPolicy"),
    ] {
        if wipe {
            spec.remove(field);
        }
    }
    if was_lb && let Some(status) = svc.get_mut("status").and_then(Value::as_object_mut) {
        status.insert("loadBalancer".into(), json!({}));
    }
}

/// A random free address of the range, neither its network nor its broadcast address.
fn free_ip(range: Ipv4Net, taken: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    let base = u32::from(range.network());
    let size = 1u64 << (32 - u32::from(range.prefix_len()));
    if size < 4 {
        return None;
    }
    let usable = size - 2;
    let start = rand::rng().random_range(0..usable);
    (0..usable)
        .map(|i| (start + i) % usable + 1)
        .filter_map(|off| u32::try_from(off).ok())
        .map(|off| Ipv4Addr::from(base + off))
        .find(|a| !taken.contains(a))
}

fn free_port(taken: &BTreeSet<i64>) -> Option<i64> {
    let span = NODE_PORTS.end() - NODE_PORTS.start() + 1;
    let start = rand::rng().random_range(0..span);
    (0..span)
        .map(|i| NODE_PORTS.start() + (start + i) % span)
        .find(|p| !taken.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Ipv4Net {
        "10.96.0.0/12".parse().unwrap_or_default()
    }

    #[test]
    fn a_load_balancer_gets_an_ip_and_node_ports_an_update_keeps_them() {
        let mut taken = Taken::known(Held::default());
        let mut svc =
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert!(service(&mut svc, None, &mut taken, range()).is_ok());
        let ip: Ipv4Addr = svc["spec"]["clusterIP"]
            .as_str()
            .unwrap_or_default()
            .parse()
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        assert!(range().contains(&ip) && ip != range().network(), "{ip}");
        let np = svc["spec"]["ports"][0]["nodePort"]
            .as_i64()
            .unwrap_or_default();
        assert!(NODE_PORTS.contains(&np), "{np}");
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));

        // A replace without the allocations keeps them.
        let mut again =
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert!(
            service(
                &mut again,
                Some(&svc),
                &mut Taken::known(Held::default()),
                range()
            )
            .is_ok()
        );
        assert_eq!(again["spec"]["clusterIP"], svc["spec"]["clusterIP"]);
        assert_eq!(again["spec"]["ports"][0]["nodePort"], np);

        let mut moved = json!({"spec": {"clusterIP": "10.96.0.77", "ports": [{"port": 80}]}});
        let err = service(
            &mut moved,
            Some(&svc),
            &mut Taken::known(Held::default()),
            range(),
        );
        assert!(causes(err)[0].1.contains("may not change once set"));
    }

    #[test]
    fn a_requested_ip_must_be_in_the_range_and_free() {
        let mut held = Held::default();
        held.ips.insert(Ipv4Addr::new(10, 96, 0, 10));
        let mut taken = Taken::known(held);
        let mut dup = json!({"spec": {"clusterIP": "10.96.0.10"}});
        assert!(service(&mut dup, None, &mut taken, range()).is_err());
        let mut outside = json!({"spec": {"clusterIP": "192.168.0.1"}});
        assert!(service(&mut outside, None, &mut taken, range()).is_err());
        let mut headless = json!({"spec": {"clusterIP": "None"}});
        assert!(service(&mut headless, None, &mut taken, range()).is_ok());
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    }

    #[test]
    fn only_a_write_that_allocates_looks_at_the_other_services() {
        let looked = std::cell::Cell::new(0);
        let others = || {
            looked.set(looked.get() + 1);
            let mut held = Held::default();
            held.ips.insert(Ipv4Addr::new(10, 96, 0, 10));
            held.node_ports.extend(NODE_PORTS.filter(|p| *p != 30123));
            held
        };
        let mut svc =
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert!(service(&mut svc, None, &mut Taken::later(others), range()).is_ok());
        assert_eq!(looked.get(), 1);
        // The only port the others left.
        assert_eq!(svc["spec"]["ports"][0]["nodePort"], 30123);
        assert_ne!(svc["spec"]["clusterIP"], "10.96.0.10");

        // A status or metadata write keeps what the Service holds: nothing to look up.
        let mut status = svc.clone();
        status["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}});
        assert!(service(&mut status, Some(&svc), &mut Taken::later(others), range()).is_ok());
        assert_eq!(looked.get(), 1);

        // A new port needs one.
        let mut wider = svc.clone();
        wider["spec"]["ports"] = json!([
            {"port": 80, "protocol": "TCP", "nodePort": 30123},
            {"port": 443, "protocol": "TCP"}
        ]);
        let err = service(&mut wider, Some(&svc), &mut Taken::later(others), range());
        assert_eq!(looked.get(), 2);
        assert_eq!(
            err,
            Err(Refused::Internal(
                "failed to allocate a nodePort: range is full".into()
            ))
        );
    }

    fn causes(r: Result<(), Refused>) -> Vec<(String, String)> {
        match r {
            Err(Refused::Invalid(c)) => c.into_iter().map(|c| (c.field, c.message)).collect(),
            Err(Refused::Internal(m)) => vec![("500".into(), m)],
            Ok(()) => Vec::new(),
        }
    }

    #[test]
    fn a_requested_node_port_is_free_once_per_protocol_and_not_for_cluster_ip() {
        let held = || {
            let mut h = Held::default();
            h.node_ports.insert(30080);
            h
        };
        // Another Service holds it.
        let mut svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        assert_eq!(
            causes(service(&mut svc, None, &mut Taken::known(held()), range())),
            [(
                "spec.ports[0].nodePort".to_owned(),
                "Invalid value: 30080: provided port is already allocated".to_owned()
            )]
        );
        // One number for TCP and UDP is one allocation; twice for TCP is refused.
        let mut both = json!({"spec": {"type": "NodePort", "ports": [
            {"port": 53, "protocol": "TCP", "nodePort": 30053},
            {"port": 53, "protocol": "UDP", "nodePort": 30053}
        ]}});
        assert!(service(&mut both, None, &mut Taken::known(held()), range()).is_ok());
        let mut twice = json!({"spec": {"type": "NodePort", "ports": [
            {"port": 80, "protocol": "TCP", "nodePort": 30081},
            {"port": 81, "protocol": "TCP", "nodePort": 30081}
        ]}});
        assert_eq!(
            causes(service(
                &mut twice,
                None,
                &mut Taken::known(held()),
                range()
            )),
            [(
                "spec.ports[1].nodePort".to_owned(),
                "Duplicate value: 30081".to_owned()
            )]
        );
        // A ClusterIP Service has none.
        let mut plain =
            json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "nodePort": 30082}]}});
        assert_eq!(
            causes(service(
                &mut plain,
                None,
                &mut Taken::known(held()),
                range()
            )),
            [(
                "spec.ports[0].nodePort".to_owned(),
                "Forbidden: may not be used when `type` is 'ClusterIP'".to_owned()
            )]
        );
        // Without node ports allocated, a load balancer still gets the one it asks for, if free.
        let mut asked = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [
            {"port": 80, "protocol": "TCP", "nodePort": 30080},
            {"port": 443, "protocol": "TCP"}
        ]}});
        assert_eq!(
            causes(service(
                &mut asked,
                None,
                &mut Taken::known(held()),
                range()
            ))
            .len(),
            1
        );
        asked["spec"]["ports"][0]["nodePort"] = json!(30090);
        assert!(service(&mut asked, None, &mut Taken::known(held()), range()).is_ok());
        assert_eq!(asked["spec"]["ports"][1].get("nodePort"), None);
    }

    #[test]
    fn a_service_turned_cluster_ip_releases_what_its_type_held() {
        let mut lb = json!({
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                     "ports": [{"port": 80, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
        });
        assert!(service(&mut lb, None, &mut Taken::known(Held::default()), range()).is_ok());
        assert!(lb["spec"]["healthCheckNodePort"].is_i64());

        // `kubectl edit` of the type alone: the rest as stored.
        let mut plain = lb.clone();
        plain["spec"]["type"] = json!("ClusterIP");
        assert!(
            service(
                &mut plain,
                Some(&lb),
                &mut Taken::known(Held::default()),
                range()
            )
            .is_ok()
        );
        assert_eq!(
            plain["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP"}])
        );
        assert_eq!(plain["spec"].get("healthCheckNodePort"), None);
        assert_eq!(plain["spec"].get("externalTrafficPolicy"), None);
        assert_eq!(plain["status"]["loadBalancer"], json!({}));
        assert_eq!(plain["spec"]["clusterIP"], lb["spec"]["clusterIP"]);

        // A node port changed in the same write is the writer's: validation refuses it.
        let mut moved = lb.clone();
        moved["spec"]["type"] = json!("ClusterIP");
        moved["spec"]["ports"][0]["nodePort"] = json!(30999);
        let c = causes(service(
            &mut moved,
            Some(&lb),
            &mut Taken::known(Held::default()),
            range(),
        ));
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(c[0].1.contains("may not be used"), "{c:?}");
    }

    #[test]
    fn a_health_check_port_is_local_load_balancers_only_free_and_fixed() {
        let held = || {
            let mut h = Held::default();
            h.node_ports.insert(30100);
            h
        };
        let local = |hc: Value| {
            json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                            "healthCheckNodePort": hc, "ports": [{"port": 80, "protocol": "TCP"}]}})
        };
        // Taken, or outside the range: the allocator's 500.
        assert_eq!(
            service(&mut local(json!(30100)), None, &mut Taken::known(held()), range()),
            Err(Refused::Internal(
                "failed to allocate requested HealthCheck NodePort 30100: provided port is already allocated".into()
            ))
        );
        assert!(matches!(
            service(&mut local(json!(80)), None, &mut Taken::known(held()), range()),
            Err(Refused::Internal(m)) if m.contains("not in the valid range")
        ));
        // Free: kept as asked, and fixed from then on.
        let mut svc = local(json!(30101));
        assert!(service(&mut svc, None, &mut Taken::known(held()), range()).is_ok());
        assert_eq!(svc["spec"]["healthCheckNodePort"], 30101);
        let mut moved = svc.clone();
        moved["spec"]["healthCheckNodePort"] = json!(30102);
        assert_eq!(
            causes(service(
                &mut moved,
                Some(&svc),
                &mut Taken::known(held()),
                range()
            )),
            [(
                "spec.healthCheckNodePort".to_owned(),
                "Invalid value: 30102: field is immutable".to_owned()
            )]
        );
        // Only where a health check is needed; the policy only where the Service is reachable.
        let mut cluster = json!({"spec": {"type": "NodePort", "healthCheckNodePort": 30103,
                                          "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert_eq!(
            causes(service(&mut cluster, None, &mut Taken::known(held()), range())),
            [(
                "spec.healthCheckNodePort".to_owned(),
                "Invalid value: 30103: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'".to_owned()
            )]
        );
        let mut inside =
            json!({"spec": {"externalTrafficPolicy": "Local", "ports": [{"port": 80}]}});
        assert_eq!(
            causes(service(
                &mut inside,
                None,
                &mut Taken::known(held()),
                range()
            )),
            [(
                "spec.externalTrafficPolicy".to_owned(),
                "Invalid value: \"Local\": may only be set for externally-accessible services"
                    .to_owned()
            )]
        );
        inside["spec"]["externalIPs"] = json!(["198.51.100.7"]);
        assert!(service(&mut inside, None, &mut Taken::known(held()), range()).is_ok());
    }

    /// kube-apiserver's `ExternalName` rules (validation.go, and the registry's
    /// `dropTypeDependentFields`, read): no cluster IPs or families given, a DNS name required, and
    /// a ClusterIP Service turned into one loses the IP, families and internal policy it carried.
    #[test]
    fn an_external_name_service_holds_no_ip_and_needs_a_dns_name() {
        let fresh = || Taken::known(Held::default());
        let mut ok = json!({"spec": {"type": "ExternalName", "externalName": "db.example.com.",
                                     "internalTrafficPolicy": "Cluster"}});
        assert!(service(&mut ok, None, &mut fresh(), range()).is_ok());
        assert_eq!(ok["spec"].get("clusterIP"), None);
        assert_eq!(ok["spec"].get("internalTrafficPolicy"), None, "dropped");

        let mut given = json!({"spec": {"type": "ExternalName", "externalName": "db.example.com",
                                        "clusterIP": "10.96.0.9", "ipFamilies": ["IPv4"],
                                        "ipFamilyPolicy": "SingleStack"}});
        let forbidden = "Forbidden: may not be set for ExternalName services".to_owned();
        assert_eq!(
            causes(service(&mut given, None, &mut fresh(), range())),
            [
                ("spec.clusterIPs".to_owned(), forbidden.clone()),
                ("spec.ipFamilies".to_owned(), forbidden.clone()),
                ("spec.ipFamilyPolicy".to_owned(), forbidden),
            ]
        );
        let mut nameless = json!({"spec": {"type": "ExternalName"}});
        assert_eq!(
            causes(service(&mut nameless, None, &mut fresh(), range())),
            [("spec.externalName".to_owned(), "Required value".to_owned())]
        );
        let mut bad = json!({"spec": {"type": "ExternalName", "externalName": "DB_host"}});
        let c = causes(service(&mut bad, None, &mut fresh(), range()));
        assert!(
            c[0].1
                .starts_with("Invalid value: \"DB_host\": a lowercase RFC 1123 subdomain"),
            "{c:?}"
        );

        // A ClusterIP Service switched with its allocations left in the write.
        let mut old = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}],
                                      "internalTrafficPolicy": "Cluster"}});
        assert!(service(&mut old, None, &mut fresh(), range()).is_ok());
        let mut switched = old.clone();
        switched["spec"]["type"] = json!("ExternalName");
        switched["spec"]["externalName"] = json!("db.example.com");
        assert!(service(&mut switched, Some(&old), &mut fresh(), range()).is_ok());
        for gone in [
            "clusterIP",
            "clusterIPs",
            "ipFamilies",
            "ipFamilyPolicy",
            "internalTrafficPolicy",
        ] {
            assert_eq!(switched["spec"].get(gone), None, "{gone}");
        }
        // One the write changed is the writer's, and refused.
        let mut moved = old.clone();
        moved["spec"]["type"] = json!("ExternalName");
        moved["spec"]["externalName"] = json!("db.example.com");
        moved["spec"]["clusterIP"] = json!("10.96.0.99");
        moved["spec"]["clusterIPs"] = json!(["10.96.0.99"]);
        let c = causes(service(&mut moved, Some(&old), &mut fresh(), range()));
        assert_eq!(c[0].0, "spec.clusterIPs", "{c:?}");
    }
}
