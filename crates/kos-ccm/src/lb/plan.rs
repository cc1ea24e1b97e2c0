//! The decision: desired ports vs what one load balancer holds → the Octavia changes, in the
//! order they must happen. Pure, so every drift case is a unit test.
//!
//! Octavia locks a load balancer (PENDING_UPDATE) after each change and answers 409 until it is
//! ACTIVE again, so the caller applies only the first action per pass and requeues; the plan is
//! recomputed from a fresh observation each time, which also makes every pass a drift repair.
//! A plan that is empty means the load balancer matches.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use ipnet::IpNet;
use kos_cloud::model::load_balancer::{
    HealthMonitor, HealthMonitorCreate, HealthMonitorUpdate, Listener, ListenerCreate,
    ListenerUpdate, LoadBalancer, LoadBalancerUpdate, Member, MemberSpec, Pool, PoolCreate,
    PoolParent, PoolUpdate,
};

use super::desired::{
    Desired, DesiredListener, DesiredMember, DesiredMonitor, DesiredPool, DesiredPort, ListenerKey,
    XFF_HEADER,
};
use super::naming::SERVICE_PREFIX;
use super::observed::Observed;

/// One change to a load balancer or its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LbAction {
    UpdateLoadBalancer {
        id: String,
        req: LoadBalancerUpdate,
        why: String,
    },
    DeletePool {
        id: String,
        why: String,
    },
    DeleteListener {
        id: String,
        why: String,
    },
    // Boxed: the create requests dwarf every other variant.
    CreateListener {
        req: Box<ListenerCreate>,
    },
    UpdateListener {
        id: String,
        req: ListenerUpdate,
        why: String,
    },
    CreatePool {
        req: Box<PoolCreate>,
    },
    UpdatePool {
        id: String,
        req: PoolUpdate,
        why: String,
    },
    /// The batch member update: the pool's whole membership in one PUT.
    ReplaceMembers {
        pool_id: String,
        members: Vec<MemberSpec>,
        why: String,
    },
    /// Serial providers (`provider-requires-serial-api-calls`): one member at a time.
    CreateMember {
        pool_id: String,
        member: MemberSpec,
    },
    DeleteMember {
        pool_id: String,
        member_id: String,
        why: String,
    },
    DeleteMonitor {
        id: String,
        why: String,
    },
    CreateMonitor {
        req: HealthMonitorCreate,
    },
    UpdateMonitor {
        id: String,
        req: HealthMonitorUpdate,
        why: String,
    },
}

impl fmt::Display for LbAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LbAction::UpdateLoadBalancer { id, why, .. } => {
                write!(f, "update load balancer {id} ({why})")
            }
            LbAction::DeletePool { id, why } => write!(f, "delete pool {id} ({why})"),
            LbAction::DeleteListener { id, why } => write!(f, "delete listener {id} ({why})"),
            LbAction::CreateListener { req } => write!(
                f,
                "create listener {} ({} {})",
                req.name, req.protocol, req.protocol_port
            ),
            LbAction::UpdateListener { id, why, .. } => {
                write!(f, "update listener {id} ({why})")
            }
            LbAction::CreatePool { req } => {
                write!(f, "create pool {} ({})", req.name, req.protocol)
            }
            LbAction::UpdatePool { id, why, .. } => write!(f, "update pool {id} ({why})"),
            LbAction::ReplaceMembers {
                pool_id,
                members,
                why,
            } => write!(
                f,
                "set the {} members of pool {pool_id} ({why})",
                members.len()
            ),
            LbAction::CreateMember { pool_id, member } => write!(
                f,
                "add member {}:{} to pool {pool_id}",
                member.address, member.protocol_port
            ),
            LbAction::DeleteMember {
                pool_id,
                member_id,
                why,
            } => write!(f, "remove member {member_id} from pool {pool_id} ({why})"),
            LbAction::DeleteMonitor { id, why } => write!(f, "delete health monitor {id} ({why})"),
            LbAction::CreateMonitor { req } => {
                write!(f, "create health monitor {} ({})", req.name, req.kind)
            }
            LbAction::UpdateMonitor { id, why, .. } => {
                write!(f, "update health monitor {id} ({why})")
            }
        }
    }
}

/// Everything [`plan`] compares.
pub struct PlanInput<'a> {
    pub desired: &'a Desired,
    pub lb: &'a LoadBalancer,
    pub observed: &'a Observed,
    /// Members of this Service's pools, by pool id (pools missing here are treated as unknown and
    /// left alone).
    pub members: &'a HashMap<String, std::sync::Arc<Membership>>,
    /// The Service's tag (its upstream LB name).
    pub service_tag: &'a str,
    /// The load balancer carries this Service's name (it was made for it).
    pub owner: bool,
    /// The tags the load balancer must carry (added to whatever it has).
    pub lb_tags: &'a [String],
    /// Tags to take off (what an older kos-ccm wrote instead of `lb_tags`).
    pub drop_tags: &'a [String],
    pub serial: bool,
}

/// Is this listener one the Service made? Tagged with its name, or (on its own load balancer)
/// carrying no Service tag at all: the upstream before Octavia had tags.
pub fn listener_is_ours(l: &Listener, service_tag: &str, owner: bool) -> bool {
    l.tags.iter().any(|t| t == service_tag)
        || (owner && !l.tags.iter().any(|t| t.starts_with(SERVICE_PREFIX)))
}

pub fn key_of(l: &Listener) -> ListenerKey {
    ListenerKey {
        protocol: l.protocol.clone(),
        port: l.protocol_port,
    }
}

/// Desired ports whose listener key is taken by another Service's listener on this LB.
pub fn conflicts<'a>(
    desired: &'a Desired,
    listeners: &[&Listener],
    service_tag: &str,
    owner: bool,
) -> Vec<&'a DesiredPort> {
    desired
        .ports
        .iter()
        .filter(|p| {
            listeners
                .iter()
                .any(|l| key_of(l) == p.listener.key && !listener_is_ours(l, service_tag, owner))
        })
        .collect()
}

/// The changes that make `lb` serve `desired`, in execution order.
pub fn plan(i: &PlanInput) -> Vec<LbAction> {
    let mut out = Vec::new();
    let listeners = i.observed.listeners_of(&i.lb.id);

    // The load balancer itself: our tags, and administratively up if it is ours.
    let mut tags: Vec<String> =
        i.lb.tags
            .iter()
            .filter(|t| !i.drop_tags.contains(t))
            .cloned()
            .collect();
    for t in i.lb_tags {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    let mut why = Vec::new();
    let mut req = LoadBalancerUpdate::default();
    if tags != i.lb.tags {
        let dropped = diff_list(&tags, &i.lb.tags);
        why.push(if dropped.is_empty() {
            format!("tags + {}", diff_list(&i.lb.tags, &tags))
        } else {
            format!("tags + {} - {dropped}", diff_list(&i.lb.tags, &tags))
        });
        req.tags = Some(tags);
    }
    if i.owner && !i.lb.admin_state_up {
        why.push("admin_state_up false → true".into());
        req.admin_state_up = Some(true);
    }
    if !why.is_empty() {
        out.push(LbAction::UpdateLoadBalancer {
            id: i.lb.id.clone(),
            req,
            why: why.join(", "),
        });
    }

    // This Service's listeners that no port wants any more: pool first, then the listener.
    let wanted: BTreeSet<(String, u16)> = i
        .desired
        .ports
        .iter()
        .map(|p| (p.listener.key.protocol.to_string(), p.listener.key.port))
        .collect();
    for l in &listeners {
        if !listener_is_ours(l, i.service_tag, i.owner)
            || wanted.contains(&(l.protocol.to_string(), l.protocol_port))
        {
            continue;
        }
        let why = format!("no Service port {} {}", l.protocol, l.protocol_port);
        match l
            .default_pool_id
            .as_ref()
            .filter(|p| i.observed.pool(p).is_some())
        {
            Some(pool) => out.push(LbAction::DeletePool {
                id: pool.clone(),
                why,
            }),
            None => out.push(LbAction::DeleteListener {
                id: l.id.clone(),
                why,
            }),
        }
    }
    // Pools of ours that lost their listener (deleted behind our back): nothing routes to them.
    let pool_suffix = format!("_{}", i.desired.lb_name);
    for p in i
        .observed
        .pools
        .iter()
        .filter(|p| p.loadbalancers.iter().any(|r| r.id == i.lb.id))
    {
        let named_ours = p.name.starts_with("pool_") && p.name.ends_with(&pool_suffix);
        let linked = listeners
            .iter()
            .any(|l| l.default_pool_id.as_deref() == Some(p.id.as_str()));
        if named_ours && !linked && p.listeners.is_empty() {
            out.push(LbAction::DeletePool {
                id: p.id.clone(),
                why: "no listener uses it".into(),
            });
        }
    }

    for port in &i.desired.ports {
        let Some(l) = listeners
            .iter()
            .find(|l| key_of(l) == port.listener.key)
            .copied()
        else {
            out.push(LbAction::CreateListener {
                req: Box::new(port.listener.create(&i.lb.id, i.service_tag)),
            });
            continue;
        };
        if !listener_is_ours(l, i.service_tag, i.owner) {
            // A conflict; the caller reports it and never gets here with one.
            continue;
        }
        if let Some(a) = listener_change(l, &port.listener, i.service_tag) {
            out.push(a);
        }
        let pool = l
            .default_pool_id
            .as_deref()
            .and_then(|id| i.observed.pool(id));
        let Some(pool) = pool else {
            out.push(LbAction::CreatePool {
                req: Box::new(port.pool.create(PoolParent::Listener(l.id.clone()))),
            });
            continue;
        };
        if pool.protocol != port.pool.protocol {
            out.push(LbAction::DeletePool {
                id: pool.id.clone(),
                why: format!(
                    "protocol {} → {} needs a new pool",
                    pool.protocol, port.pool.protocol
                ),
            });
            continue;
        }
        if let Some(a) = pool_change(pool, &port.pool) {
            out.push(a);
        }
        if let Some(members) = i.members.get(&pool.id) {
            out.extend(member_changes(&pool.id, members, &port.members, i.serial));
        }
        let monitor = pool
            .healthmonitor_id
            .as_deref()
            .filter(|id| !id.is_empty())
            .and_then(|id| i.observed.monitor(id));
        out.extend(monitor_change(&pool.id, monitor, port.monitor.as_ref()));
    }
    out
}

fn diff_list(old: &[String], new: &[String]) -> String {
    new.iter()
        .filter(|t| !old.contains(t))
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

/// Everyone-allowed spellings Octavia may show for "no restriction".
fn normalized_cidrs(cidrs: &[String]) -> Option<BTreeSet<IpNet>> {
    let mut set = BTreeSet::new();
    for c in cidrs {
        let n: IpNet = c.parse().ok()?;
        if n.prefix_len() == 0 {
            return Some(BTreeSet::new());
        }
        set.insert(n.trunc());
    }
    Some(set)
}

fn listener_change(l: &Listener, d: &DesiredListener, service_tag: &str) -> Option<LbAction> {
    let mut req = ListenerUpdate::default();
    let mut why = Vec::new();
    let limit = l.connection_limit.unwrap_or(-1);
    if limit != d.connection_limit {
        why.push(format!("connection_limit {limit} → {}", d.connection_limit));
        req.connection_limit = Some(d.connection_limit);
    }
    let has_xff = l.insert_headers.get(XFF_HEADER).map(String::as_str) == Some("true");
    if has_xff != d.x_forwarded_for {
        let mut h: BTreeMap<String, String> = l.insert_headers.clone();
        if d.x_forwarded_for {
            h.insert(XFF_HEADER.to_owned(), "true".to_owned());
        } else {
            h.remove(XFF_HEADER);
        }
        why.push(format!("{XFF_HEADER} {has_xff} → {}", d.x_forwarded_for));
        req.insert_headers = Some(h);
    }
    if d.tls_container_ref.is_some() && l.default_tls_container_ref != d.tls_container_ref {
        why.push("default_tls_container_ref".into());
        req.default_tls_container_ref = d.tls_container_ref.clone();
    }
    if let Some(t) = d.timeouts {
        let pairs = [
            (
                "timeout_client_data",
                l.timeouts.timeout_client_data,
                t.timeout_client_data,
            ),
            (
                "timeout_member_connect",
                l.timeouts.timeout_member_connect,
                t.timeout_member_connect,
            ),
            (
                "timeout_member_data",
                l.timeouts.timeout_member_data,
                t.timeout_member_data,
            ),
            (
                "timeout_tcp_inspect",
                l.timeouts.timeout_tcp_inspect,
                t.timeout_tcp_inspect,
            ),
        ];
        // A timeout Octavia does not show is not compared (it may not report them for UDP).
        if pairs
            .iter()
            .any(|(_, have, want)| have.is_some() && have != want)
        {
            for (name, have, want) in pairs {
                if have.is_some() && have != want {
                    why.push(format!(
                        "{name} {} → {}",
                        have.unwrap_or_default(),
                        want.unwrap_or_default()
                    ));
                }
            }
            req.timeouts = t;
        }
    }
    let want: BTreeSet<IpNet> = d.allowed_cidrs.iter().copied().collect();
    if normalized_cidrs(&l.allowed_cidrs).as_ref() != Some(&want) {
        why.push(format!(
            "allowed_cidrs [{}] → [{}]",
            l.allowed_cidrs.join(", "),
            d.allowed_cidr_strings().join(", ")
        ));
        req.allowed_cidrs = Some(d.allowed_cidr_strings());
    }
    if !l.tags.iter().any(|t| t == service_tag) {
        let mut tags = l.tags.clone();
        tags.push(service_tag.to_owned());
        why.push(format!("tag {service_tag}"));
        req.tags = Some(tags);
    }
    if !l.admin_state_up {
        why.push("admin_state_up false → true".into());
        req.admin_state_up = Some(true);
    }
    (!why.is_empty()).then(|| LbAction::UpdateListener {
        id: l.id.clone(),
        req,
        why: why.join(", "),
    })
}

fn pool_change(p: &Pool, d: &DesiredPool) -> Option<LbAction> {
    let mut req = PoolUpdate::default();
    let mut why = Vec::new();
    if p.lb_algorithm != d.lb_algorithm {
        why.push(format!(
            "lb_algorithm {} → {}",
            p.lb_algorithm, d.lb_algorithm
        ));
        req.lb_algorithm = Some(d.lb_algorithm.clone());
    }
    let have = p
        .session_persistence
        .as_ref()
        .map(|s| s.kind.as_str())
        .filter(|k| !k.is_empty());
    let want = d.source_ip_persistence.then_some("SOURCE_IP");
    if have != want {
        why.push(format!(
            "session_persistence {} → {}",
            have.unwrap_or("none"),
            want.unwrap_or("none")
        ));
        req.session_persistence = Some(d.session_persistence());
    }
    if !p.admin_state_up {
        why.push("admin_state_up false → true".into());
        req.admin_state_up = Some(true);
    }
    (!why.is_empty()).then(|| LbAction::UpdatePool {
        id: p.id.clone(),
        req,
        why: why.join(", "),
    })
}

/// What decides that a member is as wanted (upstream compares name-address-port-monitorport; kos
/// also puts back weight and admin state changed behind its back).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct MemberKey<'a> {
    address: &'a str,
    port: u16,
    name: &'a str,
    monitor_port: u16,
    weight: u16,
    up: bool,
}

fn observed_key(m: &Member) -> MemberKey<'_> {
    MemberKey {
        address: &m.address,
        port: m.protocol_port,
        name: &m.name,
        monitor_port: m.monitor_port.unwrap_or(m.protocol_port),
        weight: m.weight.unwrap_or(1),
        up: m.admin_state_up,
    }
}

fn desired_key(m: &DesiredMember) -> MemberKey<'_> {
    MemberKey {
        address: &m.address,
        port: m.port,
        name: &m.name,
        monitor_port: m.monitor_port.unwrap_or(m.port),
        weight: 1,
        up: true,
    }
}

/// A pool's membership as a plan compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// Every member with its id, as listed: what a serial provider's plan needs (it deletes
    /// members by id).
    Listed(Vec<Member>),
    /// Only the fold of the members' keys: enough to tell whether a batch replace is needed, at
    /// a few bytes per pool instead of every member (1000 pools of 500 members at scale).
    Folded(MemberKeys),
}

impl Membership {
    /// How many members.
    pub fn len(&self) -> usize {
        match self {
            Membership::Listed(m) => m.len(),
            Membership::Folded(k) => k.members,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a plan would find `want` already in place (the same set of member keys).
    pub fn matches(&self, want: &[DesiredMember]) -> bool {
        let want_keys: BTreeSet<MemberKey> = want.iter().map(desired_key).collect();
        self.folded()
            .same_keys(&MemberKeys::of_set(want.len(), &want_keys))
    }

    /// The same membership, folded.
    pub fn folded(&self) -> MemberKeys {
        match self {
            Membership::Listed(m) => MemberKeys::of(m),
            Membership::Folded(k) => *k,
        }
    }
}

/// The keys a membership is compared by (address, port, name, monitor port, weight, admin
/// state), folded: how many members, how many distinct keys, and a digest of the set of keys
/// that does not depend on their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberKeys {
    members: usize,
    keys: usize,
    digest: u64,
}

impl MemberKeys {
    pub fn of(members: &[Member]) -> MemberKeys {
        let keys: BTreeSet<MemberKey> = members.iter().map(observed_key).collect();
        Self::of_set(members.len(), &keys)
    }

    fn of_set(members: usize, keys: &BTreeSet<MemberKey>) -> MemberKeys {
        use std::hash::{Hash, Hasher};
        let digest = keys.iter().fold(0u64, |d, k| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            k.hash(&mut h);
            d.wrapping_add(h.finish())
        });
        MemberKeys {
            members,
            keys: keys.len(),
            digest,
        }
    }

    /// The same set of keys (what [`member_changes`] compares).
    fn same_keys(&self, other: &MemberKeys) -> bool {
        self.keys == other.keys && self.digest == other.digest
    }
}

fn member_changes(
    pool_id: &str,
    have: &Membership,
    want: &[DesiredMember],
    serial: bool,
) -> Vec<LbAction> {
    let want_keys: BTreeSet<MemberKey> = want.iter().map(desired_key).collect();
    let have = match have {
        Membership::Listed(have) => have,
        Membership::Folded(keys) => {
            if keys.same_keys(&MemberKeys::of_set(want.len(), &want_keys)) {
                return Vec::new();
            }
            // A serial plan needs the members' ids; the member cache hands serial passes the
            // listed members, never a fold, so this is only a safeguard: leave the pool alone
            // (as an unknown one) rather than guess.
            if serial {
                return Vec::new();
            }
            return vec![LbAction::ReplaceMembers {
                pool_id: pool_id.to_owned(),
                members: want.iter().map(DesiredMember::spec).collect(),
                why: format!(
                    "{} members known, {} wanted, not the same",
                    keys.members,
                    want.len()
                ),
            }];
        }
    };
    let have_keys: BTreeSet<MemberKey> = have.iter().map(observed_key).collect();
    if have_keys == want_keys {
        return Vec::new();
    }
    let gone = have_keys.difference(&want_keys).count();
    let new = want_keys.difference(&have_keys).count();
    if !serial {
        return vec![LbAction::ReplaceMembers {
            pool_id: pool_id.to_owned(),
            members: want.iter().map(DesiredMember::spec).collect(),
            why: format!("{gone} to remove or change, {new} to add or change"),
        }];
    }
    let mut out = Vec::new();
    for m in have {
        if !want_keys.contains(&observed_key(m)) {
            out.push(LbAction::DeleteMember {
                pool_id: pool_id.to_owned(),
                member_id: m.id.clone(),
                why: format!("{}:{} not wanted as it is", m.address, m.protocol_port),
            });
        }
    }
    for m in want {
        if !have_keys.contains(&desired_key(m)) {
            out.push(LbAction::CreateMember {
                pool_id: pool_id.to_owned(),
                member: m.spec(),
            });
        }
    }
    out
}

fn monitor_change(
    pool_id: &str,
    have: Option<&HealthMonitor>,
    want: Option<&DesiredMonitor>,
) -> Vec<LbAction> {
    match (have, want) {
        (None, None) => Vec::new(),
        (Some(h), None) => vec![LbAction::DeleteMonitor {
            id: h.id.clone(),
            why: "health monitor not wanted".into(),
        }],
        (None, Some(w)) => vec![LbAction::CreateMonitor {
            req: w.create(pool_id),
        }],
        (Some(h), Some(w)) if h.kind != w.kind => vec![LbAction::DeleteMonitor {
            id: h.id.clone(),
            why: format!("type {} → {} needs a new monitor", h.kind, w.kind),
        }],
        (Some(h), Some(w)) => {
            let want = w.create(pool_id);
            let mut req = HealthMonitorUpdate::default();
            let mut why = Vec::new();
            let nums = [
                ("delay", h.delay, w.delay),
                ("timeout", h.timeout, w.timeout),
                ("max_retries", h.max_retries, w.max_retries),
                ("max_retries_down", h.max_retries_down, w.max_retries_down),
            ];
            for (name, have, want) in nums {
                if have != want {
                    why.push(format!("{name} {have} → {want}"));
                }
            }
            if nums.iter().any(|(_, a, b)| a != b) {
                req.delay = Some(w.delay);
                req.timeout = Some(w.timeout);
                req.max_retries = Some(w.max_retries);
                req.max_retries_down = Some(w.max_retries_down);
            }
            if w.is_http() {
                if h.url_path != want.url_path {
                    why.push("url_path".into());
                    req.url_path = want.url_path.clone();
                }
                if h.http_method != want.http_method {
                    why.push("http_method".into());
                    req.http_method = want.http_method.clone();
                }
                if h.expected_codes != want.expected_codes {
                    why.push("expected_codes".into());
                    req.expected_codes = want.expected_codes.clone();
                }
            }
            if !h.admin_state_up {
                why.push("admin_state_up false → true".into());
                req.admin_state_up = Some(true);
            }
            if why.is_empty() {
                Vec::new()
            } else {
                vec![LbAction::UpdateMonitor {
                    id: h.id.clone(),
                    req,
                    why: why.join(", "),
                }]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kos_cloud::model::load_balancer::{
        IdRef, LbAlgorithm, MonitorType, Protocol, SessionPersistence,
    };

    use super::*;
    use crate::lb::desired::desired;
    use crate::lb::testutil::{backends, opts, service};

    const TAG: &str = "kube_service_c_ns_web";

    fn lb() -> LoadBalancer {
        LoadBalancer {
            id: "lb".into(),
            name: TAG.into(),
            admin_state_up: true,
            tags: vec![TAG.into(), "kos-ccm-cluster=c".into()],
            ..Default::default()
        }
    }

    fn listener(
        id: &str,
        protocol: Protocol,
        port: u16,
        tags: &[&str],
        pool: Option<&str>,
    ) -> Listener {
        Listener {
            id: id.into(),
            protocol,
            protocol_port: port,
            admin_state_up: true,
            loadbalancers: vec![IdRef { id: "lb".into() }],
            connection_limit: Some(-1),
            default_pool_id: pool.map(Into::into),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..Default::default()
        }
    }

    fn pool(id: &str, protocol: Protocol, name: &str) -> Pool {
        Pool {
            id: id.into(),
            name: name.into(),
            protocol,
            lb_algorithm: LbAlgorithm::RoundRobin,
            admin_state_up: true,
            loadbalancers: vec![IdRef { id: "lb".into() }],
            listeners: vec![IdRef { id: "l".into() }],
            ..Default::default()
        }
    }

    fn member(name: &str, address: &str, port: u16) -> Member {
        Member {
            id: format!("m-{name}"),
            name: name.into(),
            address: address.into(),
            protocol_port: port,
            weight: Some(1),
            admin_state_up: true,
            ..Default::default()
        }
    }

    /// A load balancer that serves `ns/web` port 80 (nodePort 30080) on two nodes exactly.
    fn matching() -> (Observed, HashMap<String, std::sync::Arc<Membership>>) {
        let mut o = Observed::empty();
        o.load_balancers = vec![lb()];
        o.listeners = vec![listener("l", Protocol::Tcp, 80, &[TAG], Some("p"))];
        o.pools = vec![pool("p", Protocol::Tcp, "pool_0_kube_service_c_ns_web")];
        let members = HashMap::from([(
            "p".to_owned(),
            std::sync::Arc::new(Membership::Listed(vec![
                member("n1", "10.0.0.11", 30080),
                member("n2", "10.0.0.12", 30080),
            ])),
        )]);
        (o, members)
    }

    /// The listed members of pool `p`, to change in place.
    fn listed(m: &mut HashMap<String, std::sync::Arc<Membership>>) -> &mut Vec<Member> {
        match std::sync::Arc::make_mut(m.get_mut("p").expect("p")) {
            Membership::Listed(v) => v,
            Membership::Folded(_) => panic!("folded"),
        }
    }

    /// The same members, kept only as the fold of their keys.
    fn folded(
        m: &HashMap<String, std::sync::Arc<Membership>>,
    ) -> HashMap<String, std::sync::Arc<Membership>> {
        m.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    std::sync::Arc::new(Membership::Folded(v.folded())),
                )
            })
            .collect()
    }

    fn run(
        d: &Desired,
        o: &Observed,
        members: &HashMap<String, std::sync::Arc<Membership>>,
        owner: bool,
        serial: bool,
    ) -> Vec<LbAction> {
        let tags = vec![TAG.to_owned(), "kos-ccm-cluster=c".to_owned()];
        plan(&PlanInput {
            desired: d,
            lb: &o.load_balancers[0],
            observed: o,
            members,
            service_tag: TAG,
            owner,
            lb_tags: &tags,
            drop_tags: &["kos-cluster=c".to_owned()],
            serial,
        })
    }

    fn web(n: usize) -> Desired {
        desired(
            &service(&[("TCP", 80, 30080)]),
            &opts(),
            &backends(n),
            TAG,
            None,
        )
    }

    #[test]
    fn a_matching_load_balancer_needs_nothing() {
        let (o, m) = matching();
        assert_eq!(run(&web(2), &o, &m, true, false), vec![]);
    }

    #[test]
    fn everyone_allowed_is_the_same_as_no_allowed_cidrs() {
        let (mut o, m) = matching();
        o.listeners[0].allowed_cidrs = vec!["0.0.0.0/0".into()];
        assert_eq!(run(&web(2), &o, &m, true, false), vec![]);
        o.listeners[0].allowed_cidrs = vec!["10.0.0.0/8".into()];
        let a = run(&web(2), &o, &m, true, false);
        assert!(
            matches!(&a[..], [LbAction::UpdateListener { req, .. }] if req.allowed_cidrs == Some(vec![])),
            "{a:?}"
        );
    }

    #[test]
    fn missing_tags_are_added_to_the_load_balancer_first() {
        let (mut o, m) = matching();
        o.load_balancers[0].tags = vec![TAG.into(), "team=x".into()];
        o.listeners[0].connection_limit = Some(10);
        let a = run(&web(2), &o, &m, true, false);
        match &a[0] {
            LbAction::UpdateLoadBalancer { req, .. } => assert_eq!(
                req.tags.as_deref(),
                Some(&[TAG.to_owned(), "team=x".into(), "kos-ccm-cluster=c".into()][..])
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(a[1], LbAction::UpdateListener { .. }));
    }

    #[test]
    fn an_older_kos_ccm_tag_is_moved_to_the_new_key() {
        let (mut o, m) = matching();
        o.load_balancers[0].tags = vec![TAG.into(), "kos-cluster=c".into(), "team=x".into()];
        let a = run(&web(2), &o, &m, true, false);
        match &a[..] {
            [LbAction::UpdateLoadBalancer { req, why, .. }] => {
                assert_eq!(
                    req.tags.as_deref(),
                    Some(&[TAG.to_owned(), "team=x".into(), "kos-ccm-cluster=c".into()][..])
                );
                assert!(why.contains("- kos-cluster=c"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn another_services_listener_is_a_conflict_and_never_deleted() {
        let (mut o, m) = matching();
        o.listeners = vec![
            listener(
                "other80",
                Protocol::Tcp,
                80,
                &["kube_service_c_ns_other"],
                None,
            ),
            listener(
                "other90",
                Protocol::Tcp,
                90,
                &["kube_service_c_ns_other"],
                None,
            ),
        ];
        let d = web(2);
        let refs: Vec<&Listener> = o.listeners.iter().collect();
        assert_eq!(conflicts(&d, &refs, TAG, true).len(), 1);
        let a = run(&d, &o, &m, true, false);
        assert!(
            !a.iter().any(|x| matches!(
                x,
                LbAction::DeleteListener { .. } | LbAction::DeletePool { .. }
            )),
            "{a:?}"
        );
    }

    #[test]
    fn untagged_listeners_are_ours_only_on_our_own_load_balancer() {
        let l = listener("l", Protocol::Tcp, 80, &[], None);
        assert!(listener_is_ours(&l, TAG, true));
        assert!(!listener_is_ours(&l, TAG, false));
        let user_tagged = listener("l", Protocol::Tcp, 80, &["team=x"], None);
        assert!(listener_is_ours(&user_tagged, TAG, true));
    }

    #[test]
    fn a_protocol_change_removes_the_old_pool_then_listener_then_creates() {
        let (o, m) = matching();
        let mut x = opts();
        x.x_forwarded_for = true;
        let d = desired(&service(&[("TCP", 80, 30080)]), &x, &backends(2), TAG, None);
        let a = run(&d, &o, &m, true, false);
        assert!(
            matches!(&a[0], LbAction::DeletePool { id, .. } if id == "p"),
            "{a:?}"
        );
        assert!(
            matches!(&a[1], LbAction::CreateListener { req } if req.protocol == Protocol::Http)
        );
        // Pool gone: the listener goes next.
        let mut o = o;
        o.pools.clear();
        let a = run(&d, &o, &m, true, false);
        assert!(
            matches!(&a[0], LbAction::DeleteListener { id, .. } if id == "l"),
            "{a:?}"
        );
    }

    #[test]
    fn folded_members_decide_as_the_listed_ones_for_a_batch_provider() {
        let (o, mut m) = matching();
        assert_eq!(run(&web(2), &o, &folded(&m), true, false), vec![]);
        // Listed in another order: the same fold.
        listed(&mut m).reverse();
        assert_eq!(run(&web(2), &o, &folded(&m), true, false), vec![]);
        for change in [
            |v: &mut Vec<Member>| v[0].weight = Some(0),
            |v: &mut Vec<Member>| v[0].admin_state_up = false,
            |v: &mut Vec<Member>| v[0].address = "10.0.0.99".into(),
            |v: &mut Vec<Member>| v[1].monitor_port = Some(1),
            |v: &mut Vec<Member>| drop(v.pop()),
        ] {
            let (o, mut m) = matching();
            change(listed(&mut m));
            let a = run(&web(2), &o, &folded(&m), true, false);
            assert!(
                matches!(&a[..], [LbAction::ReplaceMembers { members, .. }] if members.len() == 2),
                "{a:?}"
            );
        }
        // A node more is wanted.
        let a = run(&web(3), &o, &folded(&m), true, false);
        assert!(
            matches!(&a[..], [LbAction::ReplaceMembers { members, .. }] if members.len() == 3),
            "{a:?}"
        );
    }

    #[test]
    fn members_are_compared_with_weight_admin_state_and_monitor_port() {
        let (o, mut m) = matching();
        // The member port as monitor port is the same as none.
        listed(&mut m)[0].monitor_port = Some(30080);
        assert_eq!(run(&web(2), &o, &m, true, false), vec![]);
        listed(&mut m)[0].weight = Some(0);
        let a = run(&web(2), &o, &m, true, false);
        match &a[..] {
            [LbAction::ReplaceMembers { members, .. }] => {
                assert_eq!(members.len(), 2);
                assert!(
                    members
                        .iter()
                        .all(|s| s.weight == Some(1) && s.admin_state_up == Some(true))
                );
            }
            other => panic!("{other:?}"),
        }
        // A serial provider: delete the changed one, create it again; add the new node.
        let a = run(&web(3), &o, &m, true, true);
        assert_eq!(
            a.iter()
                .map(|x| match x {
                    LbAction::DeleteMember { member_id, .. } => format!("-{member_id}"),
                    LbAction::CreateMember { member, .. } => format!("+{}", member.name),
                    other => format!("{other}"),
                })
                .collect::<Vec<_>>(),
            vec!["-m-n1", "+n1", "+n3"]
        );
    }

    #[test]
    fn unknown_members_are_left_alone() {
        let (o, _) = matching();
        assert_eq!(run(&web(3), &o, &HashMap::new(), true, false), vec![]);
    }

    #[test]
    fn monitors_are_created_recreated_updated_and_removed() {
        let (mut o, m) = matching();
        let mut x = opts();
        x.monitor.enabled = true;
        let d = desired(&service(&[("TCP", 80, 30080)]), &x, &backends(2), TAG, None);
        let a = run(&d, &o, &m, true, false);
        assert!(
            matches!(&a[..], [LbAction::CreateMonitor { req }] if req.pool_id == "p" && req.kind == MonitorType::Tcp)
        );
        o.pools[0].healthmonitor_id = Some("hm".into());
        o.monitors = vec![HealthMonitor {
            id: "hm".into(),
            kind: MonitorType::Http,
            delay: 5,
            timeout: 3,
            max_retries: 1,
            max_retries_down: 3,
            admin_state_up: true,
            ..Default::default()
        }];
        let a = run(&d, &o, &m, true, false);
        assert!(matches!(&a[..], [LbAction::DeleteMonitor { .. }]), "{a:?}");
        o.monitors[0].kind = MonitorType::Tcp;
        assert_eq!(run(&d, &o, &m, true, false), vec![]);
        o.monitors[0].max_retries_down = 9;
        let a = run(&d, &o, &m, true, false);
        assert!(
            matches!(&a[..], [LbAction::UpdateMonitor { req, .. }] if req.max_retries_down == Some(3))
        );
        assert!(matches!(
            &run(&web(2), &o, &m, true, false)[..],
            [LbAction::DeleteMonitor { .. }]
        ));
    }

    #[test]
    fn pool_settings_and_persistence_are_put_back() {
        let (mut o, m) = matching();
        o.pools[0].lb_algorithm = LbAlgorithm::SourceIp;
        o.pools[0].session_persistence = Some(SessionPersistence {
            kind: "HTTP_COOKIE".into(),
            cookie_name: None,
        });
        let a = run(&web(2), &o, &m, true, false);
        match &a[..] {
            [LbAction::UpdatePool { req, .. }] => {
                assert_eq!(req.lb_algorithm, Some(LbAlgorithm::RoundRobin));
                assert_eq!(req.session_persistence, Some(None));
                let v = serde_json::to_value(req).expect("json");
                assert!(v["session_persistence"].is_null());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_orphaned_pool_of_ours_is_removed_and_others_are_not() {
        let (mut o, m) = matching();
        let mut orphan = pool("orphan", Protocol::Tcp, "pool_3_kube_service_c_ns_web");
        orphan.listeners.clear();
        let mut theirs = pool("theirs", Protocol::Tcp, "pool_0_kube_service_c_ns_other");
        theirs.listeners.clear();
        o.pools.push(orphan);
        o.pools.push(theirs);
        let a = run(&web(2), &o, &m, true, false);
        assert!(
            matches!(&a[..], [LbAction::DeletePool { id, .. }] if id == "orphan"),
            "{a:?}"
        );
    }

    #[test]
    fn timeouts_octavia_does_not_show_are_not_compared() {
        let (mut o, m) = matching();
        let mut x = opts();
        x.timeouts = Some(kos_cloud::model::load_balancer::ListenerTimeouts {
            timeout_client_data: Some(50_000),
            timeout_member_connect: Some(5_000),
            timeout_member_data: Some(50_000),
            timeout_tcp_inspect: Some(0),
        });
        let d = desired(&service(&[("TCP", 80, 30080)]), &x, &backends(2), TAG, None);
        assert_eq!(run(&d, &o, &m, true, false), vec![]);
        o.listeners[0].timeouts.timeout_client_data = Some(1);
        let a = run(&d, &o, &m, true, false);
        assert!(
            matches!(&a[..], [LbAction::UpdateListener { why, .. }] if why.contains("timeout_client_data 1 → 50000")),
            "{a:?}"
        );
    }
}
