//! Apply: runs a plan as a DAG. A node starts as soon as its dependencies are done; API calls are bounded
//! by `parallelism` (waits hold no slot); the children of one load balancer are serialised with a wait for
//! ACTIVE after each change; waits poll one list per resource type. On the first failure no new node starts,
//! running ones finish, and the error names every node that failed and why.

mod delete;
mod lb;
mod ops;
mod wait;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kos_cloud::Session;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_cloud::model::compute::MAX_USER_DATA_BASE64;
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use secrecy::SecretString;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::Sender;
use tokio::task::JoinSet;

use crate::bootstrap::{Bootstrap, NodeContext};
use crate::events::{Event, Phase, emit};
use crate::graph::{Desired, DesiredGraph, Kind};
use crate::names::TAG_CLUSTER;
use crate::plan::{Action, Op, Plan};

pub(crate) use delete::Deleter;
pub(crate) use wait::{Filters, Waiter};

/// How long each kind of wait may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// BUILD → ACTIVE.
    pub server: Duration,
    /// PENDING_* → ACTIVE (amphora boot on create).
    pub load_balancer: Duration,
    /// creating → available.
    pub volume: Duration,
    /// Any delete until the object is gone (and "in use" retries).
    pub delete: Duration,
}

/// Knobs of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOptions {
    /// API calls in flight at once (waits do not count).
    pub parallelism: usize,
    /// Between two list calls of a wait.
    pub poll_interval: Duration,
    pub deadlines: Deadlines,
    /// How waits observe the cloud.
    pub poll: PollMode,
    /// A node keeps its parallelism slot while it waits, as in Terraform's `-parallelism` (a benchmark
    /// baseline). Off, waits hold no slot and `parallelism` bounds only the calls in flight.
    pub waits_hold_slots: bool,
    /// Whose clock `poll_interval` and `deadlines` are in.
    pub clock: WaitClock,
    /// Delete and recreate the CCM application credential (its secret cannot be read back: use this when
    /// the stored copy is lost).
    pub recreate_ccm_credential: bool,
    /// How long Nova's scheduler may still count a deleted boot on the host it was turned away from:
    /// its `scheduler_instance_sync_interval` (120 s by default) and a margin. A server that lost a
    /// placement race and then finds "No valid host" boots again after this long.
    pub scheduler_sync: Duration,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            parallelism: 10,
            poll_interval: Duration::from_secs(2),
            deadlines: Deadlines {
                server: Duration::from_secs(600),
                load_balancer: Duration::from_secs(900),
                volume: Duration::from_secs(300),
                delete: Duration::from_secs(600),
            },
            poll: PollMode::ListPerKind,
            waits_hold_slots: false,
            clock: WaitClock::Cloud,
            recreate_ccm_credential: false,
            scheduler_sync: Duration::from_secs(130),
        }
    }
}

/// Whose clock a run's poll intervals and deadlines are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitClock {
    /// The cloud's, as its `Date` headers show it ([`kos_cloud::pace`]): a cloud whose clock runs
    /// fast is polled as often, and given up on as soon, as its own time says, never sooner than
    /// [`kos_cloud::pace::LOCAL_FLOOR`] on this machine.
    #[default]
    Cloud,
    /// This machine's, as given (benchmarks that scale their own knobs, and tests).
    Local,
}

/// How waits observe the cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PollMode {
    /// One list call per resource type answers every pending wait of that type, soon after a wait
    /// starts and then less often (see `wait.rs`).
    #[default]
    ListPerKind,
    /// One GET per waited-for resource every `poll_interval`, as Terraform's providers poll (a benchmark
    /// baseline).
    GetPerResource,
}

impl ApplyOptions {
    /// For the simulator (`SimConfig::fast()`): polls every 5 ms, 30 s deadlines.
    #[must_use]
    pub fn fast() -> Self {
        let d = Duration::from_secs(30);
        ApplyOptions {
            poll_interval: Duration::from_millis(5),
            deadlines: Deadlines {
                server: d,
                load_balancer: d,
                volume: d,
                delete: d,
            },
            clock: WaitClock::Local,
            scheduler_sync: Duration::from_millis(50),
            ..Self::default()
        }
    }
}

/// The application credential the in-cluster CCM uses.
///
/// Keystone shows the secret once, at create. The CLI must store it (mode 0600 under the cluster's data
/// dir) when `secret` is `Some`; on later runs the credential is adopted by name with `secret: None`, and
/// the stored copy is used. If that copy is lost, run again with
/// [`ApplyOptions::recreate_ccm_credential`].
#[derive(Debug, Clone)]
pub struct CcmCredential {
    pub id: String,
    pub name: String,
    /// Only when created by this run. Never logged, never in a plan.
    pub secret: Option<SecretString>,
}

/// What a successful run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApplyReport {
    pub cluster: String,
    /// The API endpoint's address (floating IP, VIP or the control plane's IP).
    pub api_address: Option<String>,
    /// Every desired node with what was done to it.
    pub nodes: Vec<(String, Op)>,
    /// Every desired server's id as the run left it (made, made again or found), by logical id: what
    /// follows the run reads their consoles without listing the servers again.
    pub servers: BTreeMap<String, String>,
    /// Logical ids deleted by the prune phase.
    pub deleted: Vec<String>,
    #[serde(skip)]
    pub ccm_credential: Option<CcmCredential>,
}

impl ApplyReport {
    /// Nodes that were not no-ops.
    #[must_use]
    pub fn changes(&self) -> usize {
        self.nodes.iter().filter(|(_, op)| *op != Op::NoOp).count() + self.deleted.len()
    }
}

/// One node that failed.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFailure {
    pub logical_id: String,
    pub kind: Kind,
    pub name: String,
    pub error: String,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
#[error("apply stopped: {}", render(.failures))]
pub struct ApplyError {
    pub failures: Vec<NodeFailure>,
    /// What was done before it stopped (including a newly created CCM secret, which must not be lost).
    pub report: Box<ApplyReport>,
}

fn render(f: &[NodeFailure]) -> String {
    f.iter()
        .map(|f| {
            format!(
                "{} ({} {}): {}",
                f.logical_id,
                f.kind.as_str(),
                f.name,
                f.error
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a finished node hands to its dependents.
#[derive(Debug, Clone, Default)]
pub(crate) struct Output {
    pub id: String,
    pub address: Option<String>,
    pub port_id: Option<String>,
}

/// Shared by the tasks of one run.
pub(crate) struct Ctx {
    pub session: Session,
    pub cluster: String,
    pub opts: ApplyOptions,
    pub waiter: Waiter,
    pub permits: Semaphore,
    /// With [`ApplyOptions::waits_hold_slots`]: one per running node, held through its waits.
    pub node_slots: Option<Arc<Semaphore>>,
    pub outputs: Mutex<HashMap<String, Output>>,
    /// One lock per load balancer (by logical id): its children change one at a time.
    pub lb_locks: HashMap<String, tokio::sync::Mutex<()>>,
    pub events: Option<Sender<Event>>,
    pub ccm: Mutex<Option<CcmCredential>>,
    /// Load balancers (by logical id) this run creates with all their children in one call.
    pub populated: HashMap<String, lb::Populated>,
    /// Whether Neutron keeps the tags of a port POST: asked once a run, and only by a run that
    /// creates ports (see [`Ctx::port_tags_on_create`]).
    pub port_tags: tokio::sync::OnceCell<bool>,
}

/// Runs `plan` (made from `desired` and a fresh observe) against the cloud.
///
/// # Errors
/// [`ApplyError`] naming each failed node (with the server's fault or the LB's ERROR), after running nodes
/// have finished; nothing new starts once one failed. Re-running observe, plan and apply continues.
pub async fn apply(
    session: &Session,
    desired: &DesiredGraph,
    plan: &Plan,
    bootstrap: &dyn Bootstrap,
    opts: ApplyOptions,
    events: Sender<Event>,
) -> Result<ApplyReport, ApplyError> {
    let cluster_tag = format!("{TAG_CLUSTER}={}", desired.cluster);
    let filters = Filters {
        servers: TagQuery::all([cluster_tag.clone()]),
        load_balancers: LoadBalancerFilter {
            tags: TagQuery::all([cluster_tag]),
            ..LoadBalancerFilter::default()
        },
        volumes: VolumeFilter {
            metadata: BTreeMap::from([(TAG_CLUSTER.to_owned(), desired.cluster.clone())]),
            ..VolumeFilter::default()
        },
    };
    let ctx = Arc::new(Ctx {
        session: session.clone(),
        cluster: desired.cluster.clone(),
        waiter: Waiter::new(session.clone(), filters, opts.poll_interval)
            .with_mode(opts.poll)
            .with_clock(opts.clock),
        node_slots: opts
            .waits_hold_slots
            .then(|| Arc::new(Semaphore::new(opts.parallelism.max(1)))),
        permits: Semaphore::new(opts.parallelism.max(1)),
        outputs: Mutex::default(),
        lb_locks: desired
            .nodes
            .values()
            .filter(|n| n.kind == Kind::LoadBalancer)
            .map(|n| (n.id.clone(), tokio::sync::Mutex::new(())))
            .collect(),
        events: Some(events),
        ccm: Mutex::default(),
        populated: lb::populated(desired, plan),
        port_tags: tokio::sync::OnceCell::new(),
        opts,
    });
    if plan.actions.iter().any(|a| {
        desired
            .node(&a.logical_id)
            .is_some_and(|n| ops::in_port_batch(n, a))
    }) {
        // Asked while the network and subnet are made, so the first ports need not wait for it.
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move { ctx.port_tags_on_create().await });
    }
    let mut report = ApplyReport {
        cluster: desired.cluster.clone(),
        ..ApplyReport::default()
    };
    let rehearsal = rehearse_bootstrap(desired, plan, bootstrap);
    if !rehearsal.is_empty() {
        return Err(ApplyError {
            failures: rehearsal,
            report: Box::new(report),
        });
    }
    emit(
        ctx.events.as_ref(),
        Event::Phase {
            phase: Phase::Converge,
        },
    );
    let failures = converge(&ctx, desired, plan, bootstrap, &mut report).await;
    let failures = if failures.is_empty() {
        emit(
            ctx.events.as_ref(),
            Event::Phase {
                phase: Phase::Prune,
            },
        );
        prune(&ctx, plan, &mut report).await
    } else {
        failures
    };
    report.api_address = ctx.output(desired.api.node()).and_then(|o| o.address);
    report.ccm_credential = ctx.ccm.lock().unwrap_or_else(|p| p.into_inner()).take();
    emit(ctx.events.as_ref(), Event::Phase { phase: Phase::Done });
    if failures.is_empty() {
        Ok(report)
    } else {
        Err(ApplyError {
            failures,
            report: Box::new(report),
        })
    }
}

impl Ctx {
    /// Whether Neutron lists [`kos_cloud::network::PORT_TAGS_ON_CREATE`]: then a port's tags go in its
    /// POST, else each port is tagged right after (a cloud whose extension list cannot be read is
    /// treated as one without it: the tags still arrive, with one more call).
    pub(crate) async fn port_tags_on_create(&self) -> bool {
        *self
            .port_tags
            .get_or_init(|| async {
                match self.session.network().extension_aliases().await {
                    Ok(aliases) => aliases
                        .iter()
                        .any(|a| a == kos_cloud::network::PORT_TAGS_ON_CREATE),
                    Err(e) => {
                        tracing::debug!("Neutron's extensions could not be read: {e}");
                        false
                    }
                }
            })
            .await
    }

    pub(crate) fn output(&self, id: &str) -> Option<Output> {
        self.outputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    fn set_output(&self, id: &str, o: Output) {
        self.outputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), o);
    }
}

async fn converge(
    ctx: &Arc<Ctx>,
    desired: &DesiredGraph,
    plan: &Plan,
    bootstrap: &dyn Bootstrap,
    report: &mut ApplyReport,
) -> Vec<NodeFailure> {
    let mut waiting_on: HashMap<&str, usize> = HashMap::new();
    let mut dependents: HashMap<&str, Vec<&str>> = HashMap::new();
    for n in desired.nodes.values() {
        waiting_on.insert(&n.id, n.deps.len());
        for d in &n.deps {
            dependents.entry(d).or_default().push(&n.id);
        }
    }
    let mut ready: VecDeque<&str> = desired
        .order
        .iter()
        .map(String::as_str)
        .filter(|id| waiting_on.get(id) == Some(&0))
        .collect();
    let mut running = JoinSet::new();
    let mut failures = Vec::new();
    let mut batches: BTreeMap<String, Vec<crate::graph::Node>> = BTreeMap::new();
    // The ports a load balancer this run creates waits for (its VIP, its members): made first, in a
    // batch of their own, before any other port batch starts. Neutron makes ports one after another
    // (~0.15 s each on minicloud, whether bulk or in parallel), so a pool of workers' ports sent at
    // the same time would delay the load balancer, the slowest thing of a cluster, by seconds.
    let urgent: BTreeSet<&str> = desired
        .nodes
        .values()
        .filter(|n| n.kind == Kind::LoadBalancer)
        .flat_map(|n| n.deps.iter().map(String::as_str))
        .filter(|d| {
            desired.node(d).is_some_and(|n| {
                plan.for_node(d).is_none_or(|a| ops::in_port_batch(n, a))
                    && matches!(n.spec, Desired::Port { .. } | Desired::VipPort { .. })
            })
        })
        .collect();
    let mut urgent_left = urgent.len();
    let mut held: Vec<Vec<crate::graph::Node>> = Vec::new();
    // The Neutron writes a load balancer this run creates does not need (security group rules, the
    // router and its interface, the floating IP, other ports) wait until it has started: Neutron
    // does one request at a time, and each of these sent alongside makes the subnet and the load
    // balancer's ports later, by seconds on minicloud.
    let lb_path = load_balancer_path(desired, plan);
    let mut gate_open = lb_path.is_empty();
    let mut deferred: Vec<&str> = Vec::new();
    loop {
        while failures.is_empty()
            && let Some(id) = ready.pop_front()
        {
            let Some(node) = desired.node(id) else {
                continue;
            };
            if !gate_open && writes_neutron(node.kind) && !lb_path.contains(id) {
                deferred.push(id);
                continue;
            }
            if node.kind == Kind::LoadBalancer {
                gate_open = true;
                ready.extend(deferred.drain(..));
            }
            let action = plan.for_node(id).cloned().unwrap_or_else(|| Action {
                logical_id: node.id.clone(),
                kind: node.kind,
                name: node.name.clone(),
                op: Op::Create,
                reason: "not in the plan".into(),
                changes: Vec::new(),
                existing: None,
            });
            let user_data = match user_data(ctx, desired, node, &action, bootstrap) {
                Ok(u) => u,
                Err(error) => {
                    failures.push(failure(node, error));
                    continue;
                }
            };
            emit(
                ctx.events.as_ref(),
                Event::Started {
                    id: node.id.clone(),
                    kind: node.kind,
                    op: action.op,
                },
            );
            if ops::in_port_batch(node, &action) {
                let key = if urgent.contains(node.id.as_str()) {
                    String::new()
                } else {
                    ops::port_batch_key(node)
                };
                batches.entry(key).or_default().push(node.clone());
                continue;
            }
            let (ctx, node) = (Arc::clone(ctx), node.clone());
            running.spawn(async move {
                let slots = ctx.node_slots.clone();
                let _slot = match &slots {
                    Some(s) => s.acquire().await.ok(),
                    None => None,
                };
                let out = ops::run(&ctx, &node, &action, user_data).await;
                vec![(node, action.op, out.map_err(|e| e.to_string()))]
            });
        }
        // The ports that became ready together are made together, one bulk create per batch. The
        // load balancer's (the empty key) once all of them are ready, since it needs them all; the
        // others once those are made. A batch waits only while something runs, so it never stalls
        // the run.
        if !failures.is_empty() {
            // Nothing new starts after a failure.
            batches.clear();
            held.clear();
        }
        let mut lb_ports = batches.remove("");
        if lb_ports
            .as_ref()
            .is_some_and(|b| b.len() >= urgent_left || running.is_empty())
            && let Some(nodes) = lb_ports.take()
        {
            spawn_ports(ctx, &mut running, nodes);
        }
        let hold = urgent_left > 0 && !running.is_empty();
        for (_, nodes) in std::mem::take(&mut batches) {
            if hold {
                held.push(nodes);
            } else {
                spawn_ports(ctx, &mut running, nodes);
            }
        }
        if !hold {
            for nodes in std::mem::take(&mut held) {
                spawn_ports(ctx, &mut running, nodes);
            }
        }
        if let Some(nodes) = lb_ports {
            batches.insert(String::new(), nodes);
        }
        if running.is_empty() && !deferred.is_empty() {
            // Nothing runs that could start the load balancer: the gate holds nothing back.
            gate_open = true;
            ready.extend(deferred.drain(..));
            continue;
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let finished: Finished = match joined {
            Ok(x) => x,
            Err(e) => {
                failures.push(NodeFailure {
                    logical_id: "?".into(),
                    kind: Kind::Network,
                    name: String::new(),
                    error: format!("a task panicked or was cancelled: {e}"),
                });
                continue;
            }
        };
        for (node, op, out) in finished {
            if urgent.contains(node.id.as_str()) {
                urgent_left = urgent_left.saturating_sub(1);
            }
            if !finish(ctx, bootstrap, report, &mut failures, &node, op, out) {
                continue;
            }
            for d in dependents.get(node.id.as_str()).into_iter().flatten() {
                if let Some(n) = waiting_on.get_mut(d) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push_back(d);
                    }
                }
            }
        }
    }
    failures
}

type Finished = Vec<(crate::graph::Node, Op, Result<Output, String>)>;

/// The nodes a load balancer this run creates waits for, directly or not (empty: it creates none).
fn load_balancer_path<'g>(desired: &'g DesiredGraph, plan: &Plan) -> BTreeSet<&'g str> {
    let mut path = BTreeSet::new();
    let mut todo: Vec<&str> = desired
        .nodes
        .values()
        .filter(|n| n.kind == Kind::LoadBalancer)
        .filter(|n| plan.for_node(&n.id).is_none_or(|a| a.op == Op::Create))
        .map(|n| n.id.as_str())
        .collect();
    while let Some(id) = todo.pop() {
        if path.insert(id)
            && let Some(n) = desired.node(id)
        {
            todo.extend(n.deps.iter().map(String::as_str));
        }
    }
    path
}

/// Kinds whose create or change is a Neutron write.
fn writes_neutron(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Network
            | Kind::Subnet
            | Kind::Router
            | Kind::RouterInterface
            | Kind::Port
            | Kind::SecurityGroup
            | Kind::SecurityGroupRules
            | Kind::FloatingIp
            | Kind::FloatingIpAssociation
    )
}

/// Starts one bulk create of `nodes`' ports.
fn spawn_ports(ctx: &Arc<Ctx>, running: &mut JoinSet<Finished>, nodes: Vec<crate::graph::Node>) {
    let ctx = Arc::clone(ctx);
    running.spawn(async move {
        let slots = ctx.node_slots.clone();
        let _slot = match &slots {
            Some(s) => s.acquire().await.ok(),
            None => None,
        };
        let outs = ops::create_ports(&ctx, &nodes).await;
        nodes
            .into_iter()
            .zip(outs)
            .map(|(n, o)| (n, Op::Create, o))
            .collect()
    });
}

/// Records one finished node: its output, or its failure. Whether it succeeded.
fn finish(
    ctx: &Ctx,
    bootstrap: &dyn Bootstrap,
    report: &mut ApplyReport,
    failures: &mut Vec<NodeFailure>,
    node: &crate::graph::Node,
    op: Op,
    out: Result<Output, String>,
) -> bool {
    let out = out.and_then(|o| {
        if node.kind == Kind::AppCredential {
            keep_ccm_credential(ctx, bootstrap)?;
        }
        Ok(o)
    });
    match out {
        Ok(o) => {
            if node.kind == Kind::Server {
                report.servers.insert(node.id.clone(), o.id.clone());
            }
            ctx.set_output(&node.id, o);
            emit(
                ctx.events.as_ref(),
                Event::Done {
                    id: node.id.clone(),
                    kind: node.kind,
                    op,
                },
            );
            report.nodes.push((node.id.clone(), op));
            true
        }
        Err(error) => {
            tracing::warn!(node = %node.id, "failed: {error}");
            emit(
                ctx.events.as_ref(),
                Event::Failed {
                    id: node.id.clone(),
                    error: error.clone(),
                },
            );
            failures.push(failure(node, error));
            false
        }
    }
}

/// Hands a credential this run created to the bootstrap to keep, before anything that needs it starts.
fn keep_ccm_credential(ctx: &Ctx, bootstrap: &dyn Bootstrap) -> Result<(), String> {
    let created = ctx
        .ccm
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .filter(|c| c.secret.is_some());
    match created {
        Some(c) => bootstrap.keep_ccm_credential(&c).map_err(|e| {
            format!(
                "the new credential's secret could not be kept: {}",
                e.reason()
            )
        }),
        None => Ok(()),
    }
}

fn failure(node: &crate::graph::Node, error: String) -> NodeFailure {
    NodeFailure {
        logical_id: node.id.clone(),
        kind: node.kind,
        name: node.name.clone(),
        error,
    }
}

/// Logical ids whose outputs a bootstrap reads.
const SUBNET: &str = "subnet";
const APP_CREDENTIAL: &str = "appcred-ccm";

/// Renders a server's user_data when it is about to be created (the API address is known by then: the
/// node that provides it is a dependency).
fn user_data(
    ctx: &Ctx,
    desired: &DesiredGraph,
    node: &crate::graph::Node,
    action: &Action,
    bootstrap: &dyn Bootstrap,
) -> Result<Option<Vec<u8>>, String> {
    let Desired::Server(spec) = &node.spec else {
        return Ok(None);
    };
    if !matches!(action.op, Op::Create | Op::Replace) {
        return Ok(None);
    }
    let api_address = ctx
        .output(desired.api.node())
        .and_then(|o| o.address)
        .ok_or_else(|| format!("the API address ({}) is not known", desired.api.node()))?;
    let ccm_secret = ctx
        .ccm
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|c| c.secret.clone());
    let nc = NodeContext {
        cluster: desired.cluster.clone(),
        logical_id: node.id.clone(),
        role: spec.role.clone(),
        api_address,
        labels: spec.labels.clone(),
        taints: spec.taints.clone(),
        subnet_id: ctx.output(SUBNET).map(|o| o.id),
        ccm_credential_id: ctx.output(APP_CREDENTIAL).map(|o| o.id),
        ccm_credential_secret: ccm_secret,
    };
    bootstrap
        .user_data(&nc)
        .map(Some)
        .map_err(|e| format!("{e}: {}", e.reason()))
}

/// Renders the user_data of every server this run creates before anything is created, with the
/// longest values the run-time outputs can take: a bootstrap that cannot be rendered (over Nova's
/// size limit, say) stops the run while the cloud is still untouched, instead of after the network,
/// the load balancer and the first servers exist.
fn rehearse_bootstrap(
    desired: &DesiredGraph,
    plan: &Plan,
    bootstrap: &dyn Bootstrap,
) -> Vec<NodeFailure> {
    // Stand-ins as long as the real values: an IPv4 address, a Neutron UUID, a Keystone id and an
    // application-credential secret (86 characters, base64 of 64 random bytes).
    let placeholder_secret = SecretString::from("x".repeat(86));
    plan.actions
        .iter()
        // Servers replaced later, one at a time, render now too: a spec they cannot boot with stops
        // the run before the first one is drained.
        .filter(|a| matches!(a.op, Op::Create | Op::Replace | Op::Roll))
        .filter_map(|a| desired.node(&a.logical_id))
        .filter_map(|node| {
            let Desired::Server(spec) = &node.spec else {
                return None;
            };
            let nc = NodeContext {
                cluster: desired.cluster.clone(),
                logical_id: node.id.clone(),
                role: spec.role.clone(),
                api_address: "255.255.255.255".into(),
                labels: spec.labels.clone(),
                taints: spec.taints.clone(),
                subnet_id: Some("00000000-0000-0000-0000-000000000000".into()),
                ccm_credential_id: Some("0".repeat(32)),
                ccm_credential_secret: Some(placeholder_secret.clone()),
            };
            let error = match bootstrap.rehearse(&nc) {
                Err(e) => e.reason(),
                Ok(raw) if raw.len().div_ceil(3) * 4 > MAX_USER_DATA_BASE64 => format!(
                    "its user_data is {} bytes after base64 encoding; Nova accepts at most \
                     {MAX_USER_DATA_BASE64}",
                    raw.len().div_ceil(3) * 4
                ),
                Ok(_) => return None,
            };
            Some(failure(
                node,
                format!("nothing was created: the bootstrap cannot be rendered: {error}"),
            ))
        })
        .collect()
}

async fn prune(ctx: &Arc<Ctx>, plan: &Plan, report: &mut ApplyReport) -> Vec<NodeFailure> {
    let doomed: Vec<_> = plan.deletes().filter_map(|a| a.existing.clone()).collect();
    if doomed.is_empty() {
        return Vec::new();
    }
    let deleter = Deleter {
        session: &ctx.session,
        waiter: &ctx.waiter,
        deadline: ctx.opts.deadlines.delete,
        poll: ctx.opts.poll_interval,
        events: ctx.events.as_ref(),
    };
    let ids: Vec<String> = doomed.iter().map(|r| r.logical_id.clone()).collect();
    let failed = deleter.delete_all(doomed).await;
    report.deleted = ids
        .into_iter()
        .filter(|id| !failed.iter().any(|(r, _)| &r.logical_id == id))
        .collect();
    failed
        .into_iter()
        .map(|(r, e)| NodeFailure {
            logical_id: r.logical_id,
            kind: r.kind,
            name: r.name,
            error: format!("delete failed: {e}"),
        })
        .collect()
}
