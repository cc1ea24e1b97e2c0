//! Plan: what to do, per logical id, to turn what is observed into what is desired, each with a reason.
//!
//! Pure: no cloud call. The same plan renders as a human diff (`+ ~ -` lines), as JSON, and drives apply.
//! Secrets never appear here: user_data is rendered at apply time and the CCM credential's secret is never
//! observed.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use crate::graph::{AssocTarget, Desired, DesiredGraph, Kind, Node, Remote, Rule, host_cidr};
use crate::observe::{Observed, ObservedRule, Resource};

/// What to do with one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Create,
    Update,
    /// Found by its deterministic name without kos's tags (a crash between create and tag): tag it.
    Adopt,
    /// In a failure state (server/LB ERROR, volume error): delete, then create.
    Replace,
    /// A running server (and its boot volume) made for another spec: replaced one at a time, drained
    /// first, in the order the plan lists (control planes, then each pool).
    Roll,
    Delete,
    NoOp,
}

impl Op {
    fn sign(self) -> &'static str {
        match self {
            Op::Create => "+",
            Op::Update | Op::Adopt => "~",
            Op::Replace | Op::Roll => "-/+",
            Op::Delete => "-",
            Op::NoOp => "=",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct Action {
    pub logical_id: String,
    pub kind: Kind,
    pub name: String,
    pub op: Op,
    pub reason: String,
    /// What differs, one line each (`+ rule tcp 6443 from 0.0.0.0/0`).
    pub changes: Vec<String>,
    /// The observed object this action keeps, updates, replaces or deletes.
    pub existing: Option<Resource>,
}

/// The plan of one cluster.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub cluster: String,
    /// Desired nodes in create order, then deletes.
    pub actions: Vec<Action>,
    /// Changes the spec asks for that no running cluster can take (the node network's CIDR, the
    /// external network): the CLI refuses the plan before anything is made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

/// Counts per operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub create: usize,
    pub update: usize,
    pub adopt: usize,
    pub replace: usize,
    pub delete: usize,
    pub unchanged: usize,
}

impl Summary {
    /// Everything but no-ops.
    #[must_use]
    pub fn changes(&self) -> usize {
        self.create + self.update + self.adopt + self.replace + self.delete
    }
}

impl Plan {
    #[must_use]
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for a in &self.actions {
            *match a.op {
                Op::Create => &mut s.create,
                Op::Update => &mut s.update,
                Op::Adopt => &mut s.adopt,
                Op::Replace | Op::Roll => &mut s.replace,
                Op::Delete => &mut s.delete,
                Op::NoOp => &mut s.unchanged,
            } += 1;
        }
        s
    }

    /// The action for a desired node (not its duplicates' deletes).
    #[must_use]
    pub fn for_node(&self, logical_id: &str) -> Option<&Action> {
        self.actions
            .iter()
            .find(|a| a.logical_id == logical_id && a.op != Op::Delete)
    }

    /// Deletes (scaled-down objects, duplicates, leftovers).
    pub fn deletes(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| a.op == Op::Delete)
    }

    /// The human diff: one line per change, `+` create, `~` update/adopt, `-/+` replace, `-` delete;
    /// no-ops only with `verbose`. Ends with a summary line.
    #[must_use]
    pub fn diff(&self, verbose: bool) -> String {
        let mut out = String::new();
        for a in &self.actions {
            if a.op == Op::NoOp && !verbose {
                continue;
            }
            let _ = writeln!(
                out,
                "{:>3} {:<22} {:<24} {}",
                a.op.sign(),
                a.logical_id,
                a.kind.as_str(),
                a.reason
            );
            for c in &a.changes {
                let _ = writeln!(out, "        {c}");
            }
        }
        let s = self.summary();
        let _ = writeln!(
            out,
            "Plan for {}: {} to create, {} to update, {} to adopt, {} to replace, {} to delete, {} unchanged.",
            self.cluster, s.create, s.update, s.adopt, s.replace, s.delete, s.unchanged
        );
        out
    }
}

/// What a new object is made with, where the diff should say it: the credential's roles and
/// lifetime (the secret is never in a plan); a boot volume's Cinder zone, and its server's compute
/// zone when the two differ.
fn made_with(node: &Node, desired: &DesiredGraph) -> Vec<String> {
    match &node.spec {
        Desired::AppCredential {
            roles,
            lifetime_days,
            access_rules,
        } => {
            let mut made = format!(
                "roles {}; expires {lifetime_days} days after it is made",
                roles.join(", ")
            );
            if *access_rules {
                let per: Vec<String> = crate::access_rules::counts()
                    .into_iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect();
                let _ = write!(
                    made,
                    "; access rules (addons.credentialAccessRules) for kos-ccm's and kos-csi's \
                     calls only: {} (one per catalog type of each service)",
                    per.join(", ")
                );
            }
            vec![made]
        }
        Desired::Volume {
            availability_zone, ..
        } => {
            let server = desired.in_order().find_map(|n| match &n.spec {
                Desired::Server(s) if s.volume.as_deref() == Some(node.id.as_str()) => Some(s),
                _ => None,
            });
            let compute = server.and_then(|s| s.availability_zone.as_deref());
            vec![match (availability_zone.as_deref(), compute) {
                // Allowed: Nova attaches across zones unless told not to, and says so if it is.
                (Some(v), Some(c)) if v != c => format!(
                    "in Cinder zone {v}, its server in compute zone {c} (a cross-zone attach: a cloud \
                     whose Nova sets [cinder] cross_az_attach = False refuses it)"
                ),
                (Some(v), _) => format!("in Cinder zone {v}"),
                (None, _) => "in Cinder's default zone".to_owned(),
            }]
        }
        _ => Vec::new(),
    }
}

/// Compares the desired graph with what was observed.
#[must_use]
pub fn plan(desired: &DesiredGraph, observed: &Observed) -> Plan {
    let mut actions = Vec::new();
    let mut deletes = Vec::new();
    for node in desired.in_order() {
        let (action, extra) = plan_node(node, desired, observed);
        actions.push(action);
        deletes.extend(extra);
    }
    recreate_children_of_replaced(desired, &mut actions);
    fresh_volumes_for_rolled_servers(desired, &mut actions);
    for (logical, found) in &observed.resources {
        if desired.node(logical).is_some() {
            continue;
        }
        for r in found {
            // Rules and members go with their group or pool; untagged objects that are not desired are not
            // provably kos's (teardown still removes them by name).
            if matches!(r.kind, Kind::SecurityGroupRules | Kind::Members) || !r.tagged {
                continue;
            }
            let reason = match r.kind {
                Kind::Server | Kind::Port | Kind::Volume => "not in the spec (scaled down)",
                Kind::FloatingIpAssociation => "endpoint no longer uses it: disassociate",
                _ => "tagged for the cluster but not in the spec",
            };
            deletes.push(delete_action(r, reason.to_owned()));
        }
    }
    actions.extend(deletes);
    Plan {
        cluster: desired.cluster.clone(),
        refused: refusals(desired, observed),
        actions,
    }
}

/// What a cluster that exists cannot change: its node network's CIDR (every port's address, the
/// API's, etcd's peer URLs and the certificates hang on it) and the external network its router and
/// floating IPs come from.
fn refusals(desired: &DesiredGraph, observed: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    for node in desired.in_order() {
        let Some(have) = best(observed, &node.id) else {
            continue;
        };
        match &node.spec {
            Desired::Subnet { cidr, .. } => {
                if let Some(h) = &have.facts.address
                    && h != cidr
                {
                    out.push(format!(
                        "network.create.cidr: the node network is {h}; it cannot become {cidr} under a \
                         running cluster (delete the cluster with `kos down` and make it again, or keep {h})"
                    ));
                }
            }
            Desired::Server(s) => {
                use crate::graph::record::{ROLLED, cluster_changes, shown};
                for (field, have, want) in s
                    .cluster
                    .as_ref()
                    .map(|c| cluster_changes(&have.facts.tags, c))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(field, ..)| !ROLLED.contains(field))
                {
                    let (have, want) = (shown(&have), shown(&want));
                    let why = format!(
                        "{field}: the running cluster was made with {have}; it cannot become {want} \
                         under it ({}; keep {have}, or make a new cluster and move the workloads)",
                        unchangeable(field)
                    );
                    if !out.contains(&why) {
                        out.push(why);
                    }
                }
            }
            Desired::Router {
                external_network_id,
            } => {
                if let Some(h) = &have.facts.network_id
                    && h != external_network_id
                {
                    out.push(format!(
                        "network.externalNetwork: the router's gateway is on network {h}; moving it to \
                         {external_network_id} would change the API's address and every floating IP (keep the \
                         external network the cluster was made with)"
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// Why a running cluster cannot take a new value of `field` (one of
/// [`crate::graph::record::cluster_changes`]'s).
fn unchangeable(field: &str) -> &'static str {
    match field {
        "addons.cni" => {
            "kos applies the CNI's manifest once, when the first control plane initializes the \
             cluster, and does not migrate pods from one CNI to another"
        }
        "addons.ccm" | "addons.csi" => {
            "the first control plane installs it when it initializes the cluster, and kos does not \
             swap it under running workloads"
        }
        _ => {
            "kubeadm's ClusterConfiguration, kube-proxy, the CNI and every Service and pod address \
             use it"
        }
    }
}

/// Why a server is not where its server group would place it (Nova puts a server into a group only
/// when it is made): the group's policy is another (the group is replaced), or the group does not
/// hold it (a group made after the server: a new policy, or one deleted behind kos's back).
fn outside_its_group(
    server: &Resource,
    group: &str,
    desired: &DesiredGraph,
    observed: &Observed,
) -> Option<String> {
    let Some(Desired::ServerGroup { policy }) = desired.node(group).map(|n| &n.spec) else {
        return None;
    };
    let placed = "a server joins a group only when it is made";
    let Some(g) = best(observed, group) else {
        return Some(format!(
            "server group: not in one of policy {policy} ({placed})"
        ));
    };
    match &g.facts.policy {
        Some(h) if h != policy => Some(format!("server group policy: {h} → {policy} ({placed})")),
        _ if !g.facts.members.contains(&server.id) => Some(format!(
            "server group: not in {} of policy {policy} ({placed})",
            g.name
        )),
        _ => None,
    }
}

/// A replaced server boots a new volume from the image: its old volume holds the old node's disk
/// (kubeadm's state, etcd's data), which the new node must not find.
fn fresh_volumes_for_rolled_servers(desired: &DesiredGraph, actions: &mut [Action]) {
    let volumes: BTreeSet<String> = actions
        .iter()
        .filter(|a| a.kind == Kind::Server && a.op == Op::Roll)
        .filter_map(|a| volume_of(desired, a))
        .collect();
    replace_volumes(actions, &volumes);
    fresh_volumes_for_made_servers(desired, actions);
}

fn volume_of(desired: &DesiredGraph, a: &Action) -> Option<String> {
    match desired.node(&a.logical_id).map(|n| &n.spec) {
        Some(Desired::Server(s)) => s.volume.clone(),
        _ => None,
    }
}

/// A server made while its boot volume exists (the server deleted behind kos's back, or a run
/// killed between a server's delete and its volume's) would boot the old node's disk: cloud-init
/// runs the new user_data, and kubeadm's preflight refuses a disk with its files and etcd's data
/// already there. The volume is made again first. One a killed run made before its server is made
/// again too: nothing the cloud shows tells the two apart, and a new one costs one create.
fn fresh_volumes_for_made_servers(desired: &DesiredGraph, actions: &mut [Action]) {
    let volumes: BTreeSet<String> = actions
        .iter()
        .filter(|a| a.kind == Kind::Server && a.op == Op::Create)
        .filter_map(|a| volume_of(desired, a))
        .collect();
    for a in actions.iter_mut() {
        if a.kind == Kind::Volume
            && volumes.contains(&a.logical_id)
            && a.existing.is_some()
            && matches!(a.op, Op::NoOp | Op::Update | Op::Adopt)
        {
            a.op = Op::Replace;
            a.reason =
                "its server is made again: a new boot volume, not the old node's disk".into();
        }
    }
}

/// The existing `volumes` are replaced with their servers (a new boot volume each).
pub fn replace_volumes(actions: &mut [Action], volumes: &BTreeSet<String>) {
    for a in actions.iter_mut() {
        if a.kind == Kind::Volume
            && volumes.contains(&a.logical_id)
            && a.existing.is_some()
            && matches!(a.op, Op::NoOp | Op::Update)
        {
            a.op = Op::Roll;
            a.reason = "its server is replaced with a new boot volume".into();
        }
    }
}

/// A replaced load balancer takes its listener, pool, monitor and members with it (cascade).
fn recreate_children_of_replaced(desired: &DesiredGraph, actions: &mut [Action]) {
    let replaced: BTreeSet<String> = actions
        .iter()
        .filter(|a| a.kind == Kind::LoadBalancer && a.op == Op::Replace)
        .map(|a| a.logical_id.clone())
        .collect();
    for a in actions.iter_mut() {
        let lb = match desired.node(&a.logical_id).map(|n| &n.spec) {
            Some(
                Desired::Listener { lb, .. }
                | Desired::Pool { lb, .. }
                | Desired::HealthMonitor { lb, .. }
                | Desired::Members { lb, .. },
            ) => lb,
            _ => continue,
        };
        if replaced.contains(lb) && a.op != Op::Create {
            a.op = Op::Create;
            a.reason = format!("its load balancer {lb} is replaced");
            a.existing = None;
        }
    }
}

fn delete_action(r: &Resource, reason: String) -> Action {
    Action {
        logical_id: r.logical_id.clone(),
        kind: r.kind,
        name: r.name.clone(),
        op: Op::Delete,
        reason,
        changes: Vec::new(),
        existing: Some(r.clone()),
    }
}

fn plan_node(node: &Node, desired: &DesiredGraph, observed: &Observed) -> (Action, Vec<Action>) {
    let action = |op, reason: String, changes, existing| Action {
        logical_id: node.id.clone(),
        kind: node.kind,
        name: node.name.clone(),
        op,
        reason,
        changes,
        existing,
    };
    if let Desired::External { id } = &node.spec {
        return (
            action(Op::NoOp, format!("bring your own ({id})"), Vec::new(), None),
            Vec::new(),
        );
    }
    let found = observed.get(&node.id);
    let mut ranked: Vec<&Resource> = found.iter().collect();
    ranked.sort_by_key(|r| rank(r));
    let Some((keep, rest)) = ranked.split_first() else {
        return (
            action(
                Op::Create,
                "not found".into(),
                made_with(node, desired),
                None,
            ),
            Vec::new(),
        );
    };
    let duplicates = rest
        .iter()
        .map(|r| delete_action(r, format!("duplicate of {} ({})", node.id, keep.id)))
        .collect();
    let keep = (*keep).clone();
    if keep.failed {
        let why = keep
            .facts
            .fault
            .clone()
            .map_or_else(|| keep.state.clone(), |f| format!("{}: {f}", keep.state));
        return (
            action(Op::Replace, format!("in {why}"), Vec::new(), Some(keep)),
            duplicates,
        );
    }
    // Nova cannot change a group's policy: a new group, into which its servers are replaced.
    if let Desired::ServerGroup { policy } = &node.spec
        && let Some(h) = &keep.facts.policy
        && h != policy
    {
        return (
            action(
                Op::Replace,
                "Nova cannot change a group's policy: its servers are replaced into the new group"
                    .into(),
                vec![format!("policy: {h} → {policy}")],
                Some(keep),
            ),
            duplicates,
        );
    }
    let rolled = replacements(node, &keep, desired, observed);
    if !rolled.is_empty() {
        let reason = match node.kind {
            Kind::Volume => "its server is replaced with a new boot volume".to_owned(),
            _ => "made for another spec: replaced, drained first".to_owned(),
        };
        return (action(Op::Roll, reason, rolled, Some(keep)), duplicates);
    }
    let changes = differences(node, &keep, desired, observed);
    let (op, reason) = if !keep.tagged {
        (
            Op::Adopt,
            format!("found by name {} without kos's tags", keep.name),
        )
    } else if !changes.is_empty() {
        (Op::Update, "differs from the spec".to_owned())
    } else {
        (Op::NoOp, "up to date".to_owned())
    };
    (action(op, reason, changes, Some(keep)), duplicates)
}

/// A router's external gateway address, as observed.
fn router_gateway(observed: &Observed, logical: &str) -> Option<String> {
    best(observed, logical).and_then(|r| r.facts.address.clone())
}

/// The cloud id an observed node has (the kept one).
fn observed_id(observed: &Observed, logical: &str) -> Option<String> {
    best(observed, logical).map(|r| r.id.clone())
}

fn best<'a>(observed: &'a Observed, logical: &str) -> Option<&'a Resource> {
    observed.get(logical).iter().min_by_key(|r| rank(r))
}

/// Which of several objects with one logical id to keep (lowest first): tagged before untagged, healthy
/// before failed, in use (a port bound to a server, a floating IP pointing at a port) before idle, then by
/// cloud id for stability. Keeping an idle duplicate would delete the port a running server uses.
fn rank(r: &Resource) -> (bool, bool, bool, &str) {
    let in_use = r.facts.device_id.is_some() || r.facts.port_id.is_some();
    (!r.tagged, r.failed, !in_use, &r.id)
}

/// What makes a running server (or its boot volume) differ from the spec in a way only a new one
/// carries: flavor, image, zone, key, Kubernetes release, labels and taints (its kubelet registered with
/// them), a new boot volume, a new name for a control plane's certificate. Facts the cloud or an older
/// kos did not record are not differences.
fn replacements(
    node: &Node,
    have: &Resource,
    desired: &DesiredGraph,
    observed: &Observed,
) -> Vec<String> {
    let Some(m) = &have.facts.machine else {
        return Vec::new();
    };
    let mut out = Vec::new();
    fn differs(out: &mut Vec<String>, what: &str, have: Option<&str>, want: &str) {
        if let Some(h) = have
            && h != want
        {
            out.push(format!("{what}: {h} → {want}"));
        }
    }
    match &node.spec {
        Desired::Server(s) => {
            differs(&mut out, "flavor", m.flavor.as_deref(), &s.flavor_name);
            if s.volume.is_none() {
                differs(&mut out, "image", m.image_id.as_deref(), &s.image_id);
            }
            if let Some(z) = &s.availability_zone {
                differs(
                    &mut out,
                    "availability zone",
                    m.availability_zone.as_deref(),
                    z,
                );
            }
            let key = s
                .keypair
                .as_ref()
                .and_then(|k| desired.node(k))
                .map(|k| k.name.as_str());
            match (m.key_name.as_deref(), key) {
                (Some(h), Some(w)) if h != w => out.push(format!("SSH key: {h} → {w}")),
                (None, Some(w)) => out.push(format!("SSH key: none → {w}")),
                (Some(h), None) => out.push(format!("SSH key: {h} → none")),
                _ => {}
            }
            use crate::graph::record::{TAG_KUBERNETES, TAG_NODE, node_digest, recorded};
            differs(
                &mut out,
                "Kubernetes",
                recorded(&have.facts.tags, TAG_KUBERNETES),
                &s.kubernetes_version,
            );
            if !matches!(s.role, crate::bootstrap::NodeRole::Worker { .. })
                && let (Some(created), Some(now)) = (&m.created, observed.at_unix)
                && let Some(why) = crate::certs::due(created, now)
            {
                out.push(why);
            }
            // A control plane's successor takes them from kubeadm-config, which kos moves first.
            for (field, have, want) in s
                .cluster
                .as_ref()
                .map(|c| crate::graph::record::cluster_changes(&have.facts.tags, c))
                .unwrap_or_default()
                .into_iter()
                .filter(|(field, ..)| crate::graph::record::ROLLED.contains(field))
            {
                use crate::graph::record::shown;
                out.push(format!(
                    "{field}: {} → {} (a name in its API server's certificate)",
                    shown(&have),
                    shown(&want)
                ));
            }
            if let Some(g) = &s.server_group
                && let Some(why) = outside_its_group(have, g, desired, observed)
            {
                out.push(why);
            }
            if recorded(&have.facts.tags, TAG_NODE).is_some_and(|d| d != node_digest(s)) {
                out.push("labels or taints changed (a kubelet registers them once)".into());
            }
            if let Some(v) = &s.volume
                && let Some(vn) = desired.node(v)
                && let Some(vr) = best(observed, v)
            {
                for c in replacements(vn, vr, desired, observed) {
                    out.push(format!("boot volume {c}"));
                }
            }
        }
        Desired::Volume {
            size_gb,
            volume_type,
            image_id,
            ..
        } => {
            differs(&mut out, "image", m.image_id.as_deref(), image_id);
            if m.size_gb.is_some_and(|h| h != u64::from(*size_gb)) {
                out.push(format!(
                    "size: {} GB → {size_gb} GB",
                    m.size_gb.unwrap_or_default()
                ));
            }
            if let Some(t) = volume_type {
                differs(&mut out, "type", m.volume_type.as_deref(), t);
            }
        }
        _ => {}
    }
    out
}

fn differences(
    node: &Node,
    have: &Resource,
    desired: &DesiredGraph,
    observed: &Observed,
) -> Vec<String> {
    let _ = desired;
    match &node.spec {
        Desired::Port {
            security_groups,
            address_pairs,
            ..
        } => {
            let mut out = Vec::new();
            let mut want_pairs = address_pairs.clone();
            want_pairs.sort();
            if want_pairs != have.facts.address_pairs {
                out.push(format!(
                    "allowed address pairs {:?} → {:?}",
                    have.facts.address_pairs, want_pairs
                ));
            }
            let want: Option<Vec<String>> = security_groups
                .iter()
                .map(|g| observed_id(observed, g))
                .collect();
            let want = want.map(|mut w| {
                w.sort();
                w
            });
            let kos_managed: Vec<String> = have
                .facts
                .security_groups
                .iter()
                .filter(|g| !have.facts.foreign_security_groups.contains(g))
                .cloned()
                .collect();
            if want.as_ref() != Some(&kos_managed) {
                out.push("security groups differ".into());
            }
            out
        }
        Desired::SecurityGroupRules { rules, .. } => {
            let (missing, extra) = rule_diff(
                rules,
                &have.facts.rules,
                |g| observed_id(observed, g),
                |r| router_gateway(observed, r),
            );
            missing
                .iter()
                .map(|r| format!("+ rule {}", describe(r)))
                .chain(
                    extra
                        .iter()
                        .map(|r| format!("- rule {}", describe_observed(r))),
                )
                .collect()
        }
        Desired::Listener { allowed_cidrs, .. } => {
            let want: Option<Vec<String>> = allowed_cidrs
                .iter()
                .map(|s| s.resolve(|r| router_gateway(observed, r)))
                .collect();
            match want.map(|mut w| {
                w.sort();
                w
            }) {
                Some(w) if w == have.facts.allowed_cidrs => Vec::new(),
                Some(w) => vec![format!(
                    "allowed_cidrs {:?} → {:?}",
                    have.facts.allowed_cidrs, w
                )],
                None => {
                    vec!["allowed_cidrs follow the router's gateway address, not known yet".into()]
                }
            }
        }
        Desired::Members { ports, .. } => {
            let want: Option<BTreeSet<String>> = ports
                .iter()
                .map(|p| best(observed, p).and_then(|r| r.facts.address.clone()))
                .collect();
            let have_set: BTreeSet<String> = have.facts.members.iter().cloned().collect();
            match want {
                Some(w) if w == have_set => Vec::new(),
                Some(w) => vec![format!(
                    "members {:?} → {:?}",
                    have_set.into_iter().collect::<Vec<_>>(),
                    w.into_iter().collect::<Vec<_>>()
                )],
                None => vec!["members follow new control-plane ports".into()],
            }
        }
        Desired::FloatingIpAssociation { target, .. } => {
            let want = match target {
                AssocTarget::Port(p) => observed_id(observed, p),
                AssocTarget::LoadBalancerVip(lb) => {
                    best(observed, lb).and_then(|r| r.facts.port_id.clone())
                }
            };
            if want.is_some() && want == have.facts.port_id {
                Vec::new()
            } else {
                vec![format!(
                    "points at port {}, should point at {}",
                    have.facts.port_id.as_deref().unwrap_or("-"),
                    want.as_deref().unwrap_or("a port not yet created")
                )]
            }
        }
        Desired::Subnet { dns_servers, .. } => {
            if *dns_servers == have.facts.dns_servers {
                Vec::new()
            } else {
                vec![format!(
                    "DNS servers {:?} → {:?}",
                    have.facts.dns_servers, dns_servers
                )]
            }
        }
        Desired::Server(_) => {
            let missing: Vec<&String> = node
                .tags
                .iter()
                .filter(|t| !have.facts.tags.contains(t))
                .collect();
            if missing.is_empty() {
                Vec::new()
            } else {
                vec![format!(
                    "record in its tags: {}",
                    missing
                        .iter()
                        .map(|t| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )]
            }
        }
        _ => Vec::new(),
    }
}

/// The rules to add and the (ingress) rules to remove. A rule whose remote group (or router gateway)
/// does not exist yet is missing.
pub(crate) fn rule_diff<'a>(
    want: &'a [Rule],
    have: &'a [ObservedRule],
    group_id: impl Fn(&str) -> Option<String>,
    gateway: impl Fn(&str) -> Option<String>,
) -> (Vec<&'a Rule>, Vec<&'a ObservedRule>) {
    let key_of_want = |r: &Rule| -> Option<RuleKey> {
        let (prefix, group) = match &r.remote {
            Remote::Cidr(c) => (Some(normalize_any(c)), None),
            Remote::Group(g) => (None, Some(group_id(g)?)),
            Remote::RouterGateway(router) => (Some(host_cidr(&gateway(router)?)), None),
        };
        Some(RuleKey {
            ethertype: ethertype(&r.remote).to_owned(),
            protocol: r.protocol.map(str::to_owned),
            ports: r.ports,
            prefix,
            group,
        })
    };
    let key_of_have = |r: &ObservedRule| RuleKey {
        ethertype: r.ethertype.clone(),
        protocol: r.protocol.clone().filter(|p| p != "any"),
        ports: r.ports,
        prefix: r.remote_ip_prefix.as_deref().map(normalize_any),
        group: r.remote_group_id.clone(),
    };
    let have_keys: Vec<RuleKey> = have.iter().map(key_of_have).collect();
    let want_keys: Vec<Option<RuleKey>> = want.iter().map(key_of_want).collect();
    let missing = want
        .iter()
        .zip(&want_keys)
        .filter(|(_, k)| k.as_ref().is_none_or(|k| !have_keys.contains(k)))
        .map(|(r, _)| r)
        .collect();
    let extra = have
        .iter()
        .zip(&have_keys)
        .filter(|(_, k)| !want_keys.iter().flatten().any(|w| w == *k))
        .map(|(r, _)| r)
        .collect();
    (missing, extra)
}

#[derive(Debug, PartialEq, Eq)]
struct RuleKey {
    ethertype: String,
    protocol: Option<String>,
    ports: Option<(u16, u16)>,
    prefix: Option<String>,
    group: Option<String>,
}

/// IPv4 or IPv6, from the remote (groups: IPv4, the node network is IPv4).
pub(crate) fn ethertype(remote: &Remote) -> &'static str {
    match remote {
        Remote::Cidr(c) if c.contains(':') => "IPv6",
        _ => "IPv4",
    }
}

fn normalize_any(c: &str) -> String {
    c.to_owned()
}

fn describe(r: &Rule) -> String {
    let proto = r.protocol.unwrap_or("any");
    let ports = r
        .ports
        .map(|(a, b)| {
            if a == b {
                format!(" {a}")
            } else {
                format!(" {a}-{b}")
            }
        })
        .unwrap_or_default();
    let from = match &r.remote {
        Remote::Cidr(c) => c.clone(),
        Remote::Group(g) => format!("group {g}"),
        Remote::RouterGateway(r) => format!("the gateway of {r}"),
    };
    format!("{proto}{ports} from {from} ({})", r.description)
}

fn describe_observed(r: &ObservedRule) -> String {
    let ports = r
        .ports
        .map(|(a, b)| format!(" {a}-{b}"))
        .unwrap_or_default();
    let from = r
        .remote_ip_prefix
        .clone()
        .or_else(|| r.remote_group_id.as_ref().map(|g| format!("group {g}")))
        .unwrap_or_else(|| "anywhere".into());
    format!(
        "{}{ports} from {from} ({})",
        r.protocol.as_deref().unwrap_or("any"),
        r.id
    )
}
