//! Following a bootstrap without SSH: every node's serial console (Nova os-getConsoleOutput) carries
//! `kos-bootstrap: <step> ok|failed: <reason>` markers; `bootstrap` is the last. A failed step stops
//! the wait with the node's own reason. Then, when the API answers from here, the cluster itself:
//! `/readyz`, and every node Ready without the uninitialized taint.

use std::collections::BTreeMap;
use std::time::Duration;

use kos_cloud::Session;
use tokio::task::JoinSet;
use tokio::time::Instant;

use kos_lifecycle::api::chain;

use crate::kube::{Kube, NodeStatus};

mod bootstrap;
use crate::report::{Event, HEARTBEAT, Report};
pub use bootstrap::{BootstrapError, Wait, bootstrap};

/// What the servers' consoles say of their bootstraps, where that is not "done".
#[derive(Debug, Default)]
pub struct Boots {
    /// `<id> failed at <step>: <reason>`.
    pub failed: Vec<String>,
    /// `<id> (last: <marker>)`: started and not finished, e.g. a first control plane trying its CNI
    /// again (`cni retrying: …`).
    pub unfinished: Vec<String>,
}

/// The servers among `resources` whose console says their bootstrap failed or has not finished.
/// A console that cannot be read, or shows no marker yet, says nothing. One console read per
/// server (what `kos status` costs).
pub async fn unfinished(session: &Session, resources: &[kos_cluster::observe::Resource]) -> Boots {
    let mut out = Boots::default();
    for r in resources
        .iter()
        .filter(|r| r.kind == kos_cluster::graph::Kind::Server && r.tagged && !r.failed)
    {
        match session.compute().console_output(&r.id, None).await {
            Ok(console) => match parse(&console) {
                (_, NodeState::Failed { step, reason }) => out
                    .failed
                    .push(format!("{} failed at {step}: {reason}", r.logical_id)),
                (_, NodeState::Running(last)) => out
                    .unfinished
                    .push(format!("{} (last: {last})", r.logical_id)),
                _ => {}
            },
            Err(e) => tracing::info!(server = %r.id, "console not read: {e}"),
        }
    }
    out
}

#[cfg(test)]
mod api_tests;

const MARKER: &str = "kos-bootstrap: ";

/// cloud-init's console handler writes `<asctime> - <file>[WARNING]: <message>`
/// (config/cloud.cfg.d/05_logging.cfg), and carries on after each of these: but what follows
/// them never runs kos's bootstrap, so no marker would ever come and the node would be waited on
/// for the whole deadline. The messages as cloud-init's code words them:
/// handlers/__init__.py (a user_data it has no handler for), handlers/jinja_template.py (a
/// template it ignores), util.py `load_yaml` (a cloud-config it ignores), config/modules.py (a
/// module that raised: `write_files` writes kos's script and environment, `runcmd` the command
/// that runs it, `scripts_user`/`scripts-user` runs it) and cc_scripts_user.py.
const CLOUD_INIT_FATAL: &[&str] = &[
    "Unhandled non-multipart (",
    "Unhandled unknown content-type (",
    "Ignoring jinja template for ",
    "Failed loading yaml blob",
    "Running module write_files (",
    "Running module runcmd (",
    "Running module scripts_user (",
    "Running module scripts-user (",
    "Failed to run module scripts_user (",
    "Failed to run module scripts-user (",
];

/// The message of a cloud-init warning on `line` after which kos's bootstrap cannot run.
fn cloud_init_fatal(line: &str) -> Option<&str> {
    let (head, message) = line.split_once("[WARNING]: ")?;
    // `… - util.py[WARNING]: …`: the file name cloud-init's formatter puts before the level.
    if !head.ends_with(".py") {
        return None;
    }
    let message = message.trim();
    CLOUD_INIT_FATAL
        .iter()
        .any(|p| message.starts_with(p))
        .then_some(message)
}

/// A node's bootstrap, as its console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// No marker yet.
    Waiting,
    /// The last step seen (`kernel ok`).
    Running(String),
    /// The final `bootstrap` marker (`ok`).
    Done(String),
    Failed {
        step: String,
        reason: String,
    },
}

impl NodeState {
    fn finished(&self) -> bool {
        matches!(self, Self::Done(_) | Self::Failed { .. })
    }
}

/// The markers in `console`, in order, and the state they add up to. The first failure wins; after
/// the final `bootstrap` marker the node is done, whatever its background cleanup writes later
/// (`cleanup ok`, or a failure to delete the join secrets, which the cluster survives).
pub fn parse(console: &str) -> (Vec<String>, NodeState) {
    let mut markers = Vec::new();
    let mut state = NodeState::Waiting;
    for line in console.lines() {
        if let Some(reason) =
            cloud_init_fatal(line).filter(|_| !matches!(state, NodeState::Done(_)))
        {
            let reason = reason.to_owned();
            markers.push(format!("cloud-init failed: {reason}"));
            state = NodeState::Failed {
                step: "cloud-init".into(),
                reason,
            };
            break;
        }
        let Some(i) = line.find(MARKER) else {
            continue;
        };
        let marker = line[i + MARKER.len()..].trim().to_owned();
        markers.push(marker.clone());
        if matches!(state, NodeState::Done(_)) {
            continue;
        }
        state = marker_state(&marker);
        if matches!(state, NodeState::Failed { .. }) {
            break;
        }
    }
    (markers, state)
}

/// What one marker (`kernel ok`, `kubeadm-join failed: …`, `bootstrap ok`) says of its node, taken
/// alone: [`parse`] adds a console's up.
#[must_use]
pub fn marker_state(marker: &str) -> NodeState {
    let (step, outcome) = marker.split_once(' ').unwrap_or((marker, ""));
    if let Some(reason) = outcome.strip_prefix("failed:") {
        NodeState::Failed {
            step: step.to_owned(),
            reason: reason.trim().to_owned(),
        }
    } else if step == "bootstrap" {
        NodeState::Done(outcome.to_owned())
    } else {
        NodeState::Running(marker.to_owned())
    }
}

/// Whether `console` shows that its node ran `kubeadm init` or `join` (whatever the outcome: a
/// failed join may have added its etcd member), or no longer tells (a console this long has lost
/// its beginning). `false`: its bootstrap is still before kubeadm.
#[must_use]
pub fn kubeadm_seen(console: &str) -> bool {
    let (markers, state) = parse(console);
    let kubeadm = markers.iter().any(|m| {
        let step = m.split_once(' ').map_or(m.as_str(), |(s, _)| s);
        matches!(step, "kubeadm-init" | "kubeadm-join" | "bootstrap")
    });
    kubeadm || (state == NodeState::Waiting && console.len() >= SCROLLED)
}

/// Whether any of `servers` (cloud ids) ran kubeadm as its console shows ([`kubeadm_seen`]); a
/// console that cannot be read counts as one that did (nothing may be concluded from it).
pub async fn kubeadm_ran(session: &Session, servers: &[String]) -> bool {
    for id in servers {
        match session.compute().console_output(id, None).await {
            Ok(console) if !kubeadm_seen(&console) => {}
            Ok(_) => return true,
            Err(e) => {
                tracing::info!(server = %id, "console not read: {e}");
                return true;
            }
        }
    }
    false
}

/// The consoles seen done, by server id, with their state: a bootstrap that finished stays finished,
/// so a process that runs turn after turn on one cluster (the operator) reads a server's console
/// until it shows the end, and not at every resync after (one cloud call per server per turn
/// otherwise). A console that scrolled past its markers is kept too. A failed one is not: it is
/// read and reported again. The CLI starts each run with none.
#[derive(Debug, Default)]
pub struct FinishedConsoles(std::sync::Mutex<BTreeMap<String, NodeState>>);

impl FinishedConsoles {
    fn get(&self, server_id: &str) -> Option<NodeState> {
        self.lock().get(server_id).cloned()
    }

    /// After a console phase over `targets`: what is known finished of them, nothing else (servers
    /// gone or made again drop out).
    fn keep(&self, targets: &[Target], states: &BTreeMap<String, NodeState>, scrolled: &[String]) {
        let mut map = self.lock();
        map.clear();
        for t in targets {
            match states.get(&t.logical_id) {
                Some(s @ NodeState::Done(_)) => {
                    map.insert(t.server_id.clone(), s.clone());
                }
                Some(s) if scrolled.contains(&t.logical_id) => {
                    map.insert(t.server_id.clone(), s.clone());
                }
                _ => {}
            }
        }
    }

    /// How many servers are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeState>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A server to follow.
#[derive(Debug, Clone)]
pub struct Target {
    pub logical_id: String,
    pub server_id: String,
    /// Created (or replaced) by this run. A server from an earlier run is followed like any other
    /// until its console shows the final marker (an earlier run may have been stopped before it
    /// followed it), unless its console is full without a marker: then they scrolled out.
    pub created_now: bool,
}

/// Nova keeps the last 100 KiB of a console (libvirt driver, `MAX_CONSOLE_BYTES`): a console this long
/// without any marker has lost its beginning, and the markers with it. One shorter has not written them
/// yet.
const SCROLLED: usize = 90 * 1024;

/// How often the bootstrap is looked at, and for how long.
#[derive(Debug, Clone)]
pub struct Timing {
    /// First interval between two rounds of console reads; it doubles while nothing changes.
    pub poll: Duration,
    pub max_poll: Duration,
    /// For the console phase, and again for the API phase.
    pub deadline: Duration,
    /// The cloud whose clock these are in ([`kos_cloud::pace`]), asked again at every round: its
    /// pace is learned from its answers as the run goes. `None`: this machine's clock.
    pub cloud: Option<Session>,
}

impl Timing {
    /// A real cloud's bootstrap timing, in the cloud's time: consoles read every 3 s at first, then
    /// up to every 30 s; 30 minutes per phase.
    pub fn of_cloud(session: &Session) -> Timing {
        Timing {
            poll: Duration::from_secs(3),
            max_poll: Duration::from_secs(30),
            deadline: Duration::from_secs(30 * 60),
            cloud: Some(session.clone()),
        }
    }

    /// The first interval between two looks, on this machine's clock.
    pub fn poll(&self) -> Duration {
        self.local(self.poll, Duration::from_millis(50))
    }

    fn max_poll(&self) -> Duration {
        self.local(self.max_poll, Duration::from_millis(500))
    }

    /// The deadline on this machine's clock, as far as the cloud's pace is known now.
    pub fn deadline(&self) -> Duration {
        match &self.cloud {
            Some(s) => s.pace().local_deadline(self.deadline),
            None => self.deadline,
        }
    }

    fn local(&self, d: Duration, least: Duration) -> Duration {
        match &self.cloud {
            Some(s) => s.pace().local(d).max(least.min(d)),
            None => d,
        }
    }
}

/// How the console phase ended.
#[derive(Debug)]
pub struct Followed {
    pub nodes: BTreeMap<String, NodeState>,
}

/// What ended the console phase early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Nodes whose console says a step failed: `<id> failed at <step>: <reason>` (the reason is
    /// the node's text).
    Failed(Vec<String>),
    /// Nodes still running at the deadline: `<id> (last: <marker>)` or `<id> (no marker yet)`.
    Late {
        deadline: Duration,
        nodes: Vec<String>,
    },
}

/// Why the console phase failed.
#[derive(Debug)]
pub struct FollowError {
    pub stopped: Stopped,
    /// Failed nodes this run did not create: a server an interrupted run made (its bootstrap could
    /// not finish without that run, e.g. with no join token in the cluster), which `kos up` makes
    /// again.
    pub failed_earlier: Vec<String>,
    /// Failed nodes this run created, and nodes made again would not help.
    pub failed_now: Vec<String>,
    /// A first control plane failed after it initialised the cluster, at a step only it runs (the
    /// CNI, the addons): a control plane made again joins, and the cluster never gets them.
    pub after_init: bool,
    /// Nodes still trying a step again by themselves at the deadline (`<step> retrying: …`).
    pub retrying: Vec<String>,
}

/// The steps the first control plane runs after `kubeadm init` and no joining node runs.
const AFTER_INIT: [&str; 3] = ["cni", "addons", "metadata-close"];

impl std::fmt::Display for FollowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.stopped {
            Stopped::Failed(nodes) => f.write_str(&nodes.join("; ")),
            Stopped::Late { deadline, nodes } => write!(
                f,
                "bootstrap did not finish within {}s: {}",
                deadline.as_secs(),
                nodes.join(", ")
            ),
        }
    }
}

impl std::error::Error for FollowError {}

/// Whether a node's last marker says it tries a step again by itself (`cni retrying: …`).
#[must_use]
pub fn retrying(state: &NodeState) -> bool {
    matches!(state, NodeState::Running(last) if last.split_once(' ').is_some_and(|(_, o)| o.starts_with("retrying:")))
}

/// Reads every target's console until all finished; reports each new marker
/// ([`Event::Marker`]), a node not followed ([`Event::Scrolled`]) and, when nothing changed for a
/// while, what it still waits for ([`Event::ConsolesWaiting`]).
///
/// A target `finished` remembers is not read again; `finished` is left holding what is known
/// finished of `targets` when all are.
///
/// # Errors
/// The failed nodes with their own reasons, or the nodes still running at the deadline.
pub async fn consoles(
    session: &Session,
    targets: &[Target],
    timing: &Timing,
    finished: &FinishedConsoles,
    report: &dyn Report,
) -> Result<Followed, FollowError> {
    let start = Instant::now();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut states: BTreeMap<String, NodeState> = BTreeMap::new();
    let mut pending: Vec<Target> = Vec::new();
    let mut scrolled_ids: Vec<String> = Vec::new();
    for t in targets {
        match finished.get(&t.server_id) {
            Some(state) => {
                if !state.finished() {
                    scrolled_ids.push(t.logical_id.clone());
                }
                states.insert(t.logical_id.clone(), state);
            }
            None => {
                states.insert(t.logical_id.clone(), NodeState::Waiting);
                pending.push(t.clone());
            }
        }
    }
    let mut interval = timing.poll();
    let mut said = Instant::now();
    while !pending.is_empty() {
        let deadline = start + timing.deadline();
        let mut reads = JoinSet::new();
        for t in &pending {
            let (s, t) = (session.clone(), t.clone());
            reads.spawn(async move {
                let out = s.compute().console_output(&t.server_id, None).await;
                (t, out)
            });
        }
        let mut progressed = false;
        let mut still = Vec::new();
        while let Some(r) = reads.join_next().await {
            let Ok((t, out)) = r else { continue };
            let console = match out {
                Ok(c) => c,
                Err(e) => {
                    // A console can be briefly unavailable (a host busy, a rebooting guest): retry.
                    tracing::debug!(node = %t.logical_id, "console output: {e}");
                    still.push(t);
                    continue;
                }
            };
            let (markers, state) = parse(&console);
            let n = seen.entry(t.logical_id.clone()).or_default();
            for m in markers.iter().skip(*n) {
                report.event(Event::Marker {
                    node: &t.logical_id,
                    marker: m,
                });
            }
            progressed |= markers.len() > *n;
            *n = markers.len();
            let scrolled =
                !t.created_now && state == NodeState::Waiting && console.len() >= SCROLLED;
            if scrolled {
                report.event(Event::Scrolled {
                    node: &t.logical_id,
                    kib: console.len() / 1024,
                });
                scrolled_ids.push(t.logical_id.clone());
            } else if !state.finished() {
                still.push(t.clone());
            }
            states.insert(t.logical_id.clone(), state);
        }
        let failed: Vec<String> = states
            .iter()
            .filter_map(|(id, s)| match s {
                NodeState::Failed { step, reason } => {
                    Some(format!("{id} failed at {step}: {reason}"))
                }
                _ => None,
            })
            .collect();
        if !failed.is_empty() {
            let (mut failed_earlier, mut failed_now) = (Vec::new(), Vec::new());
            let mut after_init = false;
            for t in targets {
                if let Some(NodeState::Failed { step, .. }) = states.get(&t.logical_id) {
                    let initialised = AFTER_INIT.contains(&step.as_str());
                    after_init |= initialised;
                    if t.created_now || initialised {
                        failed_now.push(t.logical_id.clone());
                    } else {
                        failed_earlier.push(t.logical_id.clone());
                    }
                }
            }
            return Err(FollowError {
                stopped: Stopped::Failed(failed),
                failed_earlier,
                failed_now,
                after_init,
                retrying: Vec::new(),
            });
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let late: Vec<String> = pending
                .iter()
                .map(|t| match states.get(&t.logical_id) {
                    Some(NodeState::Running(last)) => format!("{} (last: {last})", t.logical_id),
                    _ => format!("{} (no marker yet)", t.logical_id),
                })
                .collect();
            return Err(FollowError {
                stopped: Stopped::Late {
                    deadline: timing.deadline(),
                    nodes: late,
                },
                failed_earlier: Vec::new(),
                failed_now: Vec::new(),
                after_init: false,
                retrying: pending
                    .iter()
                    .filter(|t| states.get(&t.logical_id).is_some_and(retrying))
                    .map(|t| t.logical_id.clone())
                    .collect(),
            });
        }
        if progressed {
            said = Instant::now();
        } else if said.elapsed() >= HEARTBEAT {
            // Nothing new on any console for a while: say what is awaited, and until when.
            let waiting: Vec<String> = pending
                .iter()
                .map(|t| match states.get(&t.logical_id) {
                    Some(NodeState::Running(last)) => format!("{} (last: {last})", t.logical_id),
                    _ => format!("{} (no marker yet)", t.logical_id),
                })
                .collect();
            report.event(Event::ConsolesWaiting {
                waiting: &waiting,
                left: deadline.saturating_duration_since(Instant::now()),
                deadline: timing.deadline(),
            });
            said = Instant::now();
        }
        interval = if progressed {
            timing.poll()
        } else {
            (interval * 2).min(timing.max_poll())
        };
        tokio::time::sleep(interval).await;
    }
    finished.keep(targets, &states, &scrolled_ids);
    Ok(Followed { nodes: states })
}

/// How the API phase ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ApiPhase {
    /// `/readyz` ok and every node Ready and initialised.
    Ready { nodes: usize },
    /// Not checked, and why.
    Skipped(String),
}

/// The cluster did not get ready in time.
#[derive(Debug, thiserror::Error)]
#[error("the cluster was not ready within {}s: {last}", .deadline.as_secs())]
pub struct NotReady {
    pub deadline: Duration,
    /// What was still missing when it gave up (a node count, the API's last error).
    pub last: String,
}

/// Waits for `/readyz` and for `expected` nodes Ready without the uninitialized taint. An API that
/// cannot be reached at all for `probe` is reported as skipped (a private endpoint). Reports each
/// change of the nodes' summary ([`Event::Nodes`]) and, when nothing changed for a while, what it
/// still waits for ([`Event::NodesWaiting`]).
///
/// A node that died meanwhile (this wait saw it Ready and then not, or its Ready is `Unknown`: its
/// kubelet stopped posting) is not waited for once every node of `fresh` (made by this run) is
/// Ready: its health check's is the next turn (a controller's watch on the Nodes brings it), where
/// waiting out the deadline held the turn for half an hour and failed it.
///
/// # Errors
/// The deadline, with what was still missing.
pub async fn api(
    kube: &Kube,
    expected: usize,
    fresh: &std::collections::BTreeSet<String>,
    timing: &Timing,
    probe: Duration,
    report: &dyn Report,
) -> Result<ApiPhase, NotReady> {
    let mut seen_ready = std::collections::BTreeSet::new();
    let start = Instant::now();
    let mut reached = false;
    let mut last;
    let mut shown = String::new();
    let mut said = Instant::now();
    loop {
        match kube.readyz().await {
            Err(e) if !reached && start.elapsed() >= probe => {
                return Ok(ApiPhase::Skipped(format!(
                    "not reachable from this machine: {}",
                    chain(&e)
                )));
            }
            Err(e) => last = chain(&e),
            Ok(false) => {
                reached = true;
                last = "/readyz is not ok yet".into();
            }
            Ok(true) => {
                reached = true;
                match kube.nodes().await {
                    Ok(nodes) => {
                        let good = nodes.iter().filter(|n| n.ready && !n.uninitialized).count();
                        seen_ready.extend(nodes.iter().filter(|n| n.ready).map(|n| n.name.clone()));
                        // Dead, not joining: seen Ready by this wait, or `Unknown` (its kubelet
                        // stopped posting, which a joining node's never started).
                        let lost = nodes
                            .iter()
                            .filter(|n| {
                                !n.ready
                                    && !fresh.contains(&n.name)
                                    && (seen_ready.contains(&n.name)
                                        || n.ready_status.as_deref() == Some("Unknown"))
                            })
                            .count();
                        let fresh_good = fresh.iter().all(|f| {
                            nodes
                                .iter()
                                .any(|n| &n.name == f && n.ready && !n.uninitialized)
                        });
                        last = summary(&nodes, expected);
                        if last != shown {
                            report.event(Event::Nodes { summary: &last });
                            shown.clone_from(&last);
                            said = Instant::now();
                        }
                        if good >= expected || (lost > 0 && fresh_good && good + lost >= expected) {
                            return Ok(ApiPhase::Ready { nodes: good });
                        }
                    }
                    Err(e) => last = chain(&e),
                }
            }
        }
        let deadline = start + timing.deadline();
        if Instant::now() >= deadline {
            return Err(NotReady {
                deadline: timing.deadline(),
                last,
            });
        }
        if said.elapsed() >= HEARTBEAT {
            report.event(Event::NodesWaiting {
                expected,
                last: &last,
                left: deadline.saturating_duration_since(Instant::now()),
                deadline: timing.deadline(),
            });
            said = Instant::now();
        }
        tokio::time::sleep(timing.poll()).await;
    }
}

fn summary(nodes: &[NodeStatus], expected: usize) -> String {
    let ready = nodes.iter().filter(|n| n.ready).count();
    let uninit: Vec<&str> = nodes
        .iter()
        .filter(|n| n.uninitialized)
        .map(|n| n.name.as_str())
        .collect();
    let mut s = format!("{ready}/{expected} node(s) Ready");
    if !uninit.is_empty() {
        s.push_str(&format!(
            ", waiting for the cloud controller to initialise {}",
            uninit.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AFTER_INIT names what the script's `init)` branch runs after `kubeadm-init`: a new step
    /// there must be added to it (or the node that failed at it would be made again, uselessly).
    #[test]
    fn after_init_is_what_the_scripts_init_branch_runs_after_kubeadm_init() {
        let script = kos_bootstrap::cloud_init::BOOTSTRAP_SCRIPT;
        let branch = script
            .split_once("\n    init)\n")
            .and_then(|(_, rest)| rest.split_once(";;"))
            .map(|(b, _)| b)
            .expect("the init branch");
        let steps: Vec<&str> = branch
            .lines()
            .filter_map(|l| l.trim().strip_prefix("step "))
            .filter_map(|l| l.split_whitespace().next())
            .skip_while(|s| *s != "kubeadm-init")
            .skip(1)
            .collect();
        assert_eq!(steps, AFTER_INIT);
    }

    #[test]
    fn markers_add_up_to_a_state() {
        let console = "[ 1.0] boot\nkos-bootstrap: preflight ok\n[ 9.1] cloud-init[1]: kos-bootstrap: packages ok\n";
        let (m, s) = parse(console);
        assert_eq!(m, ["preflight ok", "packages ok"]);
        assert_eq!(s, NodeState::Running("packages ok".into()));

        let (_, s) = parse(
            "kos-bootstrap: kubeadm-join failed: token expired\nkos-bootstrap: bootstrap ok\n",
        );
        assert_eq!(
            s,
            NodeState::Failed {
                step: "kubeadm-join".into(),
                reason: "token expired".into()
            }
        );
        let (_, s) = parse("kos-bootstrap: bootstrap skipped: simulated cloud\n");
        assert_eq!(s, NodeState::Done("skipped: simulated cloud".into()));
        // cloud-init's own warnings after which kos's bootstrap never runs, as a real console
        // shows them (through the journal), fail the node at once with cloud-init's message.
        for (line, reason) in [
            (
                "[    9.3] cloud-init[700]: 2026-11-30 12:00:00,123 - util.py[WARNING]: Failed loading yaml blob. Invalid format at line 3 column 1: \"x\"",
                "Failed loading yaml blob. Invalid format at line 3 column 1: \"x\"",
            ),
            (
                "2026-11-30 12:00:00,123 - __init__.py[WARNING]: Unhandled non-multipart (text/x-not-multipart) userdata: 'b'#!/usr/bin/env ruby'...'",
                "Unhandled non-multipart (text/x-not-multipart) userdata: 'b'#!/usr/bin/env ruby'...'",
            ),
            (
                "2026-11-30 12:00:00,123 - modules.py[WARNING]: Running module write_files (<module 'cloudinit.config.cc_write_files'>) failed",
                "Running module write_files (<module 'cloudinit.config.cc_write_files'>) failed",
            ),
            (
                "2026-11-30 12:00:00,123 - cc_scripts_user.py[WARNING]: Failed to run module scripts_user (scripts in /var/lib/cloud/instance/scripts)",
                "Failed to run module scripts_user (scripts in /var/lib/cloud/instance/scripts)",
            ),
        ] {
            let (_, s) = parse(&format!("kos-bootstrap: preflight ok\n{line}\n"));
            assert_eq!(
                s,
                NodeState::Failed {
                    step: "cloud-init".into(),
                    reason: reason.into()
                },
                "{line}"
            );
        }
        // Warnings kos's bootstrap outlives (another module, a deprecation) are no failure.
        for line in [
            "2026-11-30 12:00:00,123 - modules.py[WARNING]: Running module ssh (<module 'cloudinit.config.cc_ssh'>) failed",
            "2026-11-30 12:00:00,123 - schema.py[WARNING]: Invalid cloud-config provided: x",
            "kos-bootstrap: preflight ok [WARNING]: Failed loading yaml blob",
        ] {
            let (_, s) = parse(&format!("{line}\nkos-bootstrap: preflight ok\n"));
            assert_eq!(s, NodeState::Running("preflight ok".into()), "{line}");
        }
        assert_eq!(parse("login:").1, NodeState::Waiting);
        // The first control plane's background cleanup writes its marker after `bootstrap ok`.
        let (m, s) = parse(
            "kos-bootstrap: addons ok\nkos-bootstrap: bootstrap ok\nkos-bootstrap: cleanup ok\n",
        );
        assert_eq!(m.last().map(String::as_str), Some("cleanup ok"));
        assert_eq!(s, NodeState::Done("ok".into()));
        let (_, s) = parse("kos-bootstrap: bootstrap ok\nkos-bootstrap: cleanup failed: gave up\n");
        assert_eq!(s, NodeState::Done("ok".into()));
        // The first control plane tries a step after kubeadm init again by itself: not failed,
        // still running, until its later markers say otherwise.
        let (_, s) = parse(
            "kos-bootstrap: kubeadm-init ok\nkos-bootstrap: cni retrying: curl: (6) Could not resolve host: x\n",
        );
        assert_eq!(
            s,
            NodeState::Running("cni retrying: curl: (6) Could not resolve host: x".into())
        );
        assert!(retrying(&s));
        assert!(!retrying(&NodeState::Running("cni ok".into())));
        let (_, s) = parse(
            "kos-bootstrap: cni retrying: x\nkos-bootstrap: cni ok\nkos-bootstrap: addons ok\nkos-bootstrap: metadata-close ok\nkos-bootstrap: bootstrap ok\n",
        );
        assert_eq!(s, NodeState::Done("ok".into()));
    }
}
