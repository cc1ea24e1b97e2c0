//! The lower bound on an apply's wall time from zero, from the desired graph and a cost model alone: no
//! schedule can finish before the longest weighted path through the graph, nor (under a per-service rate
//! limit) before the busiest service has answered the calls the graph needs. A new load balancer comes
//! with its children in one create (Octavia's fully populated create, which kos uses): they cost nothing
//! of their own. `kos bench apply` divides its measured time by the bound.
//!
//! Pure: no cloud call, so it is unit-tested on hand-made graphs.

use std::collections::{BTreeMap, HashMap};

use kos_cloud::ServiceKind;
use serde::Serialize;

use crate::graph::{Desired, DesiredGraph, Kind, Node};

/// What each step costs, in cloud seconds (mirrors kos-sim's `LatencyModel`; no dependency on the sim).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostModel {
    /// Added to every API call.
    pub per_call_secs: f64,
    /// BUILD → ACTIVE.
    pub server_boot_secs: f64,
    /// LB PENDING_CREATE → ACTIVE.
    pub lb_create_secs: f64,
    /// LB PENDING_UPDATE → ACTIVE after one child change (not on the path from zero: a new load
    /// balancer is created with its children).
    pub lb_update_secs: f64,
    /// Volume creating → available.
    pub volume_create_secs: f64,
    /// Requests per second that each service accepts (`None`: unlimited).
    pub rate_limit: Option<f64>,
}

impl CostModel {
    /// The calls a node needs at the very least, one after another: one create each (none for a load
    /// balancer's children, which its create makes). kos may make more (a tag call, one call per
    /// security-group rule): those count against kos, not in its bound. The observation that a wait is
    /// over costs nothing extra here: a poll sent just in time answers as the state changes.
    #[must_use]
    pub fn calls(&self, node: &Node) -> u32 {
        u32::from(!node.is_external() && lb_of(node).is_none())
    }

    /// The state-machine wait after a node's calls.
    #[must_use]
    pub fn wait_secs(&self, node: &Node) -> f64 {
        match node.kind {
            _ if node.is_external() => 0.0,
            Kind::Server => self.server_boot_secs,
            Kind::LoadBalancer => self.lb_create_secs,
            Kind::Volume => self.volume_create_secs,
            _ => 0.0,
        }
    }

    /// A node's own duration: its calls, then its wait.
    #[must_use]
    pub fn cost(&self, node: &Node) -> f64 {
        f64::from(self.calls(node)) * self.per_call_secs + self.wait_secs(node)
    }
}

/// The service a node's create goes to.
#[must_use]
pub fn service(kind: Kind) -> ServiceKind {
    match kind {
        Kind::ServerGroup | Kind::Keypair | Kind::Server => ServiceKind::Compute,
        Kind::LoadBalancer | Kind::Listener | Kind::Pool | Kind::HealthMonitor | Kind::Members => {
            ServiceKind::LoadBalancer
        }
        Kind::Volume | Kind::Snapshot => ServiceKind::BlockStorage,
        Kind::AppCredential => ServiceKind::Identity,
        Kind::Network
        | Kind::Subnet
        | Kind::Router
        | Kind::RouterInterface
        | Kind::SecurityGroup
        | Kind::SecurityGroupRules
        | Kind::FloatingIp
        | Kind::Port
        | Kind::FloatingIpAssociation => ServiceKind::Network,
    }
}

/// One node of the critical path, with when it could start and finish at the earliest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub id: String,
    pub kind: Kind,
    pub start_secs: f64,
    pub finish_secs: f64,
}

/// Which constraint the bound comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// The longest dependency path.
    Path,
    /// The busiest service's calls at its rate limit.
    RateLimit,
}

/// The lower bound and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LowerBound {
    /// `max(path_secs, rate_secs)`.
    pub secs: f64,
    pub binding: Binding,
    /// The longest weighted dependency path.
    pub path_secs: f64,
    pub path: Vec<Step>,
    /// The calls of the busiest service divided by the rate limit (0 without one).
    pub rate_secs: f64,
    /// The calls the graph needs at least, per service.
    pub calls: BTreeMap<ServiceKind, u64>,
}

/// The earliest each node can be done (dependencies only), in cloud seconds from the start.
#[must_use]
pub fn earliest_finish(g: &DesiredGraph, m: &CostModel) -> BTreeMap<String, f64> {
    times(g, m)
        .into_iter()
        .map(|(id, t)| (id.to_owned(), t.finish))
        .collect()
}

/// When a node can start and finish at the earliest, and the dependency that decided its start.
#[derive(Clone, Copy)]
struct Times<'g> {
    start: f64,
    finish: f64,
    via: Option<&'g str>,
}

/// Every node's [`Times`]. Dependencies missing from the graph count as done at 0.
fn times<'g>(g: &'g DesiredGraph, m: &CostModel) -> HashMap<&'g str, Times<'g>> {
    let mut t: HashMap<&str, Times<'_>> = HashMap::new();
    for n in g.in_order() {
        let (start, via) = n
            .deps
            .iter()
            .filter_map(|d| t.get(d.as_str()).map(|x| (x.finish, Some(d.as_str()))))
            .fold((0.0, None), |best, x| if x.0 > best.0 { x } else { best });
        let finish = start + m.cost(n);
        t.insert(&n.id, Times { start, finish, via });
    }
    t
}

/// Computes the bound (see the module doc).
#[must_use]
pub fn lower_bound(g: &DesiredGraph, m: &CostModel) -> LowerBound {
    let t = times(g, m);
    let last = t
        .iter()
        .max_by(|a, b| a.1.finish.total_cmp(&b.1.finish).then_with(|| b.0.cmp(a.0)))
        .map(|(id, _)| *id);
    let mut path = Vec::new();
    let mut at = last;
    while let Some(id) = at {
        let (Some(n), Some(x)) = (g.node(id), t.get(id)) else {
            break;
        };
        path.push(Step {
            id: id.to_owned(),
            kind: n.kind,
            start_secs: x.start,
            finish_secs: x.finish,
        });
        at = x.via;
    }
    path.reverse();
    let path_secs = path.last().map_or(0.0, |s| s.finish_secs);

    let mut calls = BTreeMap::new();
    for n in g.nodes.values() {
        *calls.entry(service(n.kind)).or_insert(0) += u64::from(m.calls(n));
    }
    let rate_secs = match m.rate_limit {
        Some(r) if r > 0.0 => calls.values().max().map_or(0.0, |c| *c as f64 / r),
        _ => 0.0,
    };
    let (secs, binding) = [(path_secs, Binding::Path), (rate_secs, Binding::RateLimit)]
        .into_iter()
        // Ties (up to rounding) go to the first: the path is the most telling explanation.
        .fold((0.0, Binding::Path), |best, x| {
            if x.0 > best.0 + 1e-9 { x } else { best }
        });
    LowerBound {
        secs,
        binding,
        path_secs,
        path,
        rate_secs,
        calls,
    }
}

/// The load balancer (logical id) whose child a node is.
fn lb_of(n: &Node) -> Option<&str> {
    match &n.spec {
        Desired::Listener { lb, .. }
        | Desired::Pool { lb, .. }
        | Desired::HealthMonitor { lb, .. }
        | Desired::Members { lb, .. } => Some(lb),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::NodeRole;
    use crate::graph::{ApiSource, ServerSpec};

    fn model() -> CostModel {
        CostModel {
            per_call_secs: 0.5,
            server_boot_secs: 30.0,
            lb_create_secs: 60.0,
            lb_update_secs: 5.0,
            volume_create_secs: 5.0,
            rate_limit: None,
        }
    }

    fn node(id: &str, kind: Kind, spec: Desired, deps: &[&str]) -> Node {
        Node {
            id: id.into(),
            kind,
            name: format!("kos-t-{id}"),
            tags: Vec::new(),
            spec,
            deps: deps.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    fn port(id: &str) -> Node {
        node(
            id,
            Kind::Port,
            Desired::Port {
                network: "network".into(),
                subnet: "network".into(),
                security_groups: Vec::new(),
                address_pairs: Vec::new(),
            },
            &["network"],
        )
    }

    fn graph(nodes: Vec<Node>) -> DesiredGraph {
        DesiredGraph::new("t", nodes, ApiSource::PortIp("network".into())).expect("a DAG")
    }

    fn ids(b: &LowerBound) -> Vec<&str> {
        b.path.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn the_longest_weighted_path_wins_not_the_longest_chain() {
        // network → port → server (0.5 + 0.5 + 30.5) beats network → a → b → c (four calls).
        let server = Desired::Server(Box::new(ServerSpec {
            flavor_id: "f".into(),
            flavor_name: "m1.small".into(),
            kubernetes_version: "1.35.2".into(),
            image_id: "i".into(),
            port: "port".into(),
            volume: None,
            server_group: None,
            keypair: None,
            availability_zone: None,
            role: NodeRole::InitControlPlane,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            cluster: None,
        }));
        let g = graph(vec![
            node("network", Kind::Network, Desired::Network, &[]),
            port("port"),
            node("vm", Kind::Server, server, &["port"]),
            port("a"),
            node("b", Kind::SecurityGroup, sg(), &["a"]),
            node("c", Kind::SecurityGroup, sg(), &["b"]),
        ]);
        let b = lower_bound(&g, &model());
        assert_eq!(ids(&b), ["network", "port", "vm"]);
        assert_eq!(b.path_secs, 31.5);
        assert_eq!(b.secs, 31.5);
        assert_eq!(b.binding, Binding::Path);
        assert_eq!(b.path[2].start_secs, 1.0);
        let f = earliest_finish(&g, &model());
        assert_eq!((f["c"], f["vm"]), (2.0, 31.5));
        assert_eq!(b.calls[&ServiceKind::Network], 5);
        assert_eq!(b.calls[&ServiceKind::Compute], 1);
    }

    #[test]
    fn external_nodes_cost_nothing() {
        let g = graph(vec![
            node(
                "network",
                Kind::Network,
                Desired::External { id: "x".into() },
                &[],
            ),
            port("port"),
        ]);
        let b = lower_bound(&g, &model());
        assert_eq!(b.path_secs, 0.5);
        assert_eq!(b.calls[&ServiceKind::Network], 1);
    }

    #[test]
    fn lb_children_come_with_the_load_balancers_create() {
        // Two listeners on one LB: the populated create makes them with it, 60.5 in all, no extra call.
        let lb = Desired::LoadBalancer {
            subnet: "s".into(),
            provider: None,
            vip_port: None,
        };
        let listener = |p| Desired::Listener {
            lb: "lb".into(),
            port: p,
            allowed_cidrs: Vec::new(),
        };
        let g = graph(vec![
            node("lb", Kind::LoadBalancer, lb, &[]),
            node("l1", Kind::Listener, listener(1), &["lb"]),
            node("l2", Kind::Listener, listener(2), &["lb"]),
        ]);
        let b = lower_bound(&g, &model());
        assert_eq!(b.path_secs, 60.5);
        assert_eq!(b.secs, 60.5);
        assert_eq!(b.binding, Binding::Path);
        assert_eq!(b.calls[&ServiceKind::LoadBalancer], 1);
    }

    #[test]
    fn a_rate_limit_bounds_by_the_busiest_service() {
        let mut nodes = vec![node("network", Kind::Network, Desired::Network, &[])];
        nodes.extend((0..99).map(|i| port(&format!("p{i}"))));
        let g = graph(nodes);
        let m = CostModel {
            rate_limit: Some(50.0),
            ..model()
        };
        let b = lower_bound(&g, &m);
        assert_eq!(b.path_secs, 1.0);
        assert_eq!(b.rate_secs, 2.0);
        assert_eq!(b.secs, 2.0);
        assert_eq!(b.binding, Binding::RateLimit);
    }

    #[test]
    fn an_empty_graph_has_a_zero_bound() {
        let b = lower_bound(&graph(Vec::new()), &model());
        assert_eq!((b.secs, b.path.len()), (0.0, 0));
    }

    fn sg() -> Desired {
        Desired::SecurityGroup {
            description: String::new(),
        }
    }
}
