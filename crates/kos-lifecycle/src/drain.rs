//! Draining a node before its server is deleted, as Cluster API's machine controller does it
//! (`internal/controllers/machine/drain`, kept close to kubectl's drain helper with `Force`,
//! `IgnoreAllDaemonSets` and `DeleteEmptyDirData`): the node is cordoned, every pod bound to it that
//! must go is evicted through the Eviction API (which honours PodDisruptionBudgets), and the drain
//! waits until those pods are gone from the node.
//!
//! Left on the node: mirror pods (the kubelet's copies of static pods: the API cannot remove them),
//! pods a DaemonSet owns (its controller would put them back at once), and pods already finished
//! (Succeeded or Failed: they hold nothing, and the pod garbage collector removes them with the Node).
//!
//! A pod a budget protects is refused with 429 TooManyRequests; the eviction is tried again every
//! poll until the timeout, and the error then names the budget with the server's own words. A pod
//! already being deleted is not evicted again: the drain waits for it, except on a node whose kubelet
//! cannot confirm anything (NotReady or unreachable), where a pod being deleted for longer than
//! [`Options::skip_wait_for_delete`] counts as gone (Cluster API's `SkipWaitForDeleteTimeoutSeconds`).
//!
//! An answer that may differ on the next try (the API unreachable, 429, a 5xx: a control plane
//! replaced during a roll, the API load balancer moving its members) does not end the drain: the
//! call is made again each poll until the drain's timeout, as Cluster API's machine controller
//! requeues a drain that met an error.
//!
//! Every step is decided from what the cluster shows, so draining a node that is already cordoned,
//! half drained, or gone (no Node object: nothing to drain) does what is left and nothing more.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

pub use crate::api::ApiError;
use crate::api::chain;

/// The annotation the kubelet puts on a mirror pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The taint the node lifecycle controller puts on a node whose kubelet stopped reporting.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// What the drain says to do when a budget blocks it. How the run comes again is the step's help,
/// worded for its audience (the CLI's user or kos-operator's).
const BUDGET_HELP: &str = "raise the budget's maxUnavailable, scale its workload, or evict by hand";
/// What the drain says to do when pods stay for another reason.
const OTHER_HELP: &str = "evict or delete them by hand (see why above)";

/// The Ready condition of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    True,
    False,
    /// Unknown, or no condition at all: the kubelet has stopped reporting.
    Unknown,
}

/// A node, as far as draining it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// `spec.unschedulable`: cordoned.
    pub unschedulable: bool,
    pub ready: Ready,
    /// It carries [`UNREACHABLE_TAINT`].
    pub unreachable: bool,
}

impl Node {
    /// Whether the node's kubelet can confirm that a pod stopped: not while the node is NotReady
    /// or unreachable.
    pub fn kubelet_answers(&self) -> bool {
        self.ready == Ready::True && !self.unreachable
    }
}

/// A pod's `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    pub fn parse(s: &str) -> Phase {
        match s {
            "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            _ => Phase::Unknown,
        }
    }
}

/// A pod bound to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub phase: Phase,
    /// It carries [`MIRROR_ANNOTATION`].
    pub mirror: bool,
    /// The kind of its controller (the owner reference with `controller: true`).
    pub controller_kind: Option<String>,
    /// `metadata.deletionTimestamp`: it is being deleted.
    pub deletion: Option<SystemTime>,
}

impl Pod {
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Why the drain leaves this pod on the node, if it does.
    pub fn left_because(&self) -> Option<Left> {
        if self.mirror {
            Some(Left::Mirror)
        } else if matches!(self.phase, Phase::Succeeded | Phase::Failed) {
            Some(Left::Finished)
        } else if self.controller_kind.as_deref() == Some("DaemonSet") {
            Some(Left::DaemonSet)
        } else {
            None
        }
    }
}

/// Why a pod stays on a drained node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    Mirror,
    DaemonSet,
    Finished,
}

/// What an eviction came to.
#[derive(Debug)]
pub enum Eviction {
    /// 201 (or 200): the pod is being deleted.
    Evicted,
    /// 404: the pod is gone already.
    Gone,
    /// 429: a PodDisruptionBudget allows no disruption now.
    Blocked(Blocked),
    /// Anything else (another status, or the API could not be reached).
    Failed(ApiError),
}

/// A refusal by a disruption budget, in the server's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The budget's name, when the server named it (its namespace is the pod's).
    pub budget: Option<String>,
    /// The server's message with its causes (`Cannot evict pod as it would violate the pod's
    /// disruption budget. The disruption budget web needs 2 healthy pods and has 2 currently`).
    pub message: String,
}

/// The budget a cause of kube-apiserver's 429 names: `The disruption budget <name> needs …` or
/// `The disruption budget <name> is still being processed by the server.`
pub fn budget_in_cause(cause: &str) -> Option<&str> {
    let rest = cause.strip_prefix("The disruption budget ")?;
    let name = rest.split_whitespace().next()?;
    (!name.is_empty()).then_some(name)
}

/// The cluster's API, as a drain uses it. Errors are the API's kinds ([`ApiError`]); what they
/// mean for the drain is decided here: a Node that is not there is nothing to drain, one deleted
/// already is done.
pub trait NodeApi {
    /// The node; [`ApiError::NotFound`] when there is no Node of that name.
    fn node(&self, name: &str) -> impl Future<Output = Result<Node, ApiError>>;
    /// Sets `spec.unschedulable`.
    fn cordon(&self, name: &str) -> impl Future<Output = Result<(), ApiError>>;
    /// Every pod whose `spec.nodeName` is `node`, in every namespace.
    fn pods_on(&self, node: &str) -> impl Future<Output = Result<Vec<Pod>, ApiError>>;
    /// A `policy/v1` Eviction of the pod; no retry of its own (the drain owns retries).
    fn evict(&self, namespace: &str, name: &str) -> impl Future<Output = Eviction>;
    /// Deletes the Node object; [`ApiError::NotFound`] when it is gone already.
    fn delete_node(&self, name: &str) -> impl Future<Output = Result<(), ApiError>>;
}

/// The node, `None` when the cluster has no Node of that name.
async fn node_if_any(api: &impl NodeApi, name: &str) -> Result<Option<Node>, ApiError> {
    match api.node(name).await {
        Ok(n) => Ok(Some(n)),
        Err(ApiError::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// How long to drain, how often to look, and how long a pod being deleted on a node whose kubelet
/// cannot confirm is waited for.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub timeout: Duration,
    pub poll: Duration,
    pub skip_wait_for_delete: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            poll: Duration::from_secs(5),
            // Cluster API's machine controller: 5 minutes for an unreachable node.
            skip_wait_for_delete: Duration::from_secs(300),
        }
    }
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// No Node of that name: nothing was done.
    pub node_missing: bool,
    /// Pods evicted by this run (`namespace/name`).
    pub evicted: Vec<String>,
    /// Pods left on the node, and why.
    pub left: Vec<(String, Left)>,
    /// Pods counted gone though the node still lists them: being deleted for longer than
    /// [`Options::skip_wait_for_delete`] on a node whose kubelet cannot confirm it.
    pub abandoned: Vec<String>,
}

/// Why a pod is still on the node when the drain gives up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stuck {
    /// A budget refused its eviction; `budget` is `namespace/name` when the server named it.
    Budget {
        budget: Option<String>,
        message: String,
    },
    /// Its eviction failed otherwise (the error and its causes, as the report shows them).
    Refused(String),
    /// It is being deleted and its kubelet has not confirmed it yet.
    Terminating,
}

/// The pods still on a node when its drain gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckPods(pub Vec<(String, Stuck)>);

impl std::fmt::Display for StuckPods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (pod, why)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match why {
                Stuck::Budget {
                    budget: Some(b),
                    message,
                } => write!(
                    f,
                    "pod {pod} cannot be evicted: PodDisruptionBudget {b} allows no disruption ({message})"
                )?,
                Stuck::Budget {
                    budget: None,
                    message,
                } => write!(
                    f,
                    "pod {pod} cannot be evicted: a PodDisruptionBudget allows no disruption ({message})"
                )?,
                Stuck::Refused(m) => write!(f, "pod {pod} cannot be evicted: {m}")?,
                Stuck::Terminating => write!(
                    f,
                    "pod {pod} is being deleted and its kubelet has not confirmed it"
                )?,
            }
        }
        Ok(())
    }
}

impl StuckPods {
    fn help(&self) -> &'static str {
        if self
            .0
            .iter()
            .any(|(_, s)| matches!(s, Stuck::Budget { .. }))
        {
            BUDGET_HELP
        } else {
            OTHER_HELP
        }
    }
}

/// The call of [`NodeApi`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    ReadNode,
    Cordon,
    ListPods,
    DeleteNode,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Call::ReadNode => "reading the Node",
            Call::Cordon => "cordoning it",
            Call::ListPods => "listing its pods",
            Call::DeleteNode => "deleting the Node",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("draining node {node}: {call} through the cluster's API")]
    Api {
        node: String,
        call: Call,
        #[source]
        source: ApiError,
    },
    #[error(
        "node {node} was not drained within {}s: {stuck}; {}",
        .waited.as_secs(),
        .stuck.help()
    )]
    Timeout {
        node: String,
        stuck: StuckPods,
        waited: Duration,
    },
}

/// Drains `node`: cordons it, evicts what must go, and waits until it has gone; `say` gets one line
/// per step.
pub async fn drain(
    api: &impl NodeApi,
    node: &str,
    opts: Options,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<Drained, DrainError> {
    let started = tokio::time::Instant::now();
    let retried = |call: Call| Patience {
        node,
        call,
        started,
        opts,
    };
    let mut done = Drained::default();
    let Some(n) = retried(Call::ReadNode)
        .call(|| node_if_any(api, node))
        .await?
    else {
        say(&format!(
            "node {node} is not in the cluster: nothing to drain"
        ));
        done.node_missing = true;
        return Ok(done);
    };
    if !n.unschedulable {
        retried(Call::Cordon).call(|| api.cordon(node)).await?;
        say(&format!("cordoned node {node}"));
    }
    let mut n = n;
    let mut last_look = false;
    loop {
        let mut evicted_any = false;
        let pods = retried(Call::ListPods).call(|| api.pods_on(node)).await?;
        let mut stuck: BTreeMap<String, Stuck> = BTreeMap::new();
        done.left.clear();
        for p in &pods {
            let key = p.key();
            if let Some(why) = p.left_because() {
                done.left.push((key, why));
                continue;
            }
            if let Some(since) = p.deletion {
                let long = SystemTime::now()
                    .duration_since(since)
                    .is_ok_and(|d| d > opts.skip_wait_for_delete);
                if long && !n.kubelet_answers() {
                    if !done.abandoned.contains(&key) {
                        say(&format!(
                            "pod {key} counted gone: node {node} cannot confirm its deletion"
                        ));
                        done.abandoned.push(key);
                    }
                } else {
                    stuck.insert(key, Stuck::Terminating);
                }
                continue;
            }
            match api.evict(&p.namespace, &p.name).await {
                Eviction::Evicted => {
                    say(&format!("evicted pod {key}"));
                    evicted_any = true;
                    if !done.evicted.contains(&key) {
                        done.evicted.push(key.clone());
                    }
                    // Gone at once, or terminating: the next look tells.
                    stuck.insert(key, Stuck::Terminating);
                }
                Eviction::Gone => {}
                Eviction::Blocked(b) => {
                    tracing::debug!(pod = %key, message = %b.message, "eviction refused by a disruption budget");
                    let budget = b.budget.map(|name| format!("{}/{name}", p.namespace));
                    stuck.insert(
                        key,
                        Stuck::Budget {
                            budget,
                            message: b.message,
                        },
                    );
                }
                Eviction::Failed(e) => {
                    let why = chain(&e);
                    tracing::debug!(pod = %key, error = %why, "eviction failed");
                    stuck.insert(key, Stuck::Refused(why));
                }
            }
        }
        if stuck.is_empty() {
            say(&format!("node {node} is drained"));
            return Ok(done);
        }
        let waited = started.elapsed();
        // A pod evicted in this pass may be gone already: one more look before giving up.
        if last_look || (waited >= opts.timeout && !evicted_any) {
            return Err(DrainError::Timeout {
                node: node.to_owned(),
                stuck: StuckPods(stuck.into_iter().collect()),
                waited,
            });
        }
        last_look = waited >= opts.timeout;
        tokio::time::sleep(opts.poll).await;
        match retried(Call::ReadNode)
            .call(|| node_if_any(api, node))
            .await?
        {
            Some(now) => n = now,
            None => {
                say(&format!(
                    "node {node} left the cluster while it was drained"
                ));
                return Ok(done);
            }
        }
    }
}

/// One drain call, made again each poll while its answer is transient
/// ([`ApiError::is_transient`]) and the drain's time lasts.
#[derive(Clone, Copy)]
struct Patience<'a> {
    node: &'a str,
    call: Call,
    started: tokio::time::Instant,
    opts: Options,
}

impl Patience<'_> {
    async fn call<T, F, Fut>(self, mut f: F) -> Result<T, DrainError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() && self.started.elapsed() < self.opts.timeout => {
                    tracing::debug!(node = %self.node, call = %self.call, error = %chain(&e), "trying again");
                    tokio::time::sleep(self.opts.poll).await;
                }
                Err(source) => {
                    return Err(DrainError::Api {
                        node: self.node.to_owned(),
                        call: self.call,
                        source,
                    });
                }
            }
        }
    }
}

/// Deletes the Node object of a drained node whose server is gone (so no kubelet registers it
/// again); a Node that is gone already is fine.
pub async fn remove_node(api: &impl NodeApi, node: &str) -> Result<(), DrainError> {
    match api.delete_node(node).await {
        Ok(()) | Err(ApiError::NotFound) => Ok(()),
        Err(source) => Err(DrainError::Api {
            node: node.to_owned(),
            call: Call::DeleteNode,
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
