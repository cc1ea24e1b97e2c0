//! Draining a node before its server goes, as Cluster API drains a Machine (and `kubectl drain
//! --ignore-daemonsets --delete-emptydir-data --force` does): the node is cordoned, every pod on it
//! is evicted through the Eviction API (so PodDisruptionBudgets hold: a 429 is retried until the
//! budget allows it or the timeout), and kos waits until they are gone. DaemonSet pods stay (their
//! controller would put them back, and they go with the node), mirror pods stay (the kubelet owns
//! them), finished pods do not count.
//!
//! On a node that is not Ready, a pod being deleted is counted gone: its kubelet will never confirm
//! the deletion (Cluster API's `SkipWaitForDeleteTimeoutSeconds`).
//!
//! Idempotent: a cordoned or half-drained node drains again, a node already gone is drained.

use std::future::Future;
use std::time::Duration;

/// A pod on the node, as the drain needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// Owned by a DaemonSet.
    pub daemon_set: bool,
    /// A static pod's mirror (`kubernetes.io/config.mirror`).
    pub mirror: bool,
    /// Succeeded or Failed.
    pub finished: bool,
    /// Its deletion was asked for (`deletionTimestamp` set).
    pub deleting: bool,
}

impl Pod {
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether the drain evicts it and waits for it.
    fn drained(&self) -> bool {
        !(self.daemon_set || self.mirror || self.finished)
    }
}

/// What one eviction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// Accepted: the pod is being deleted.
    Evicted,
    /// The pod is gone already.
    Gone,
    /// A PodDisruptionBudget allows no disruption now (429): the API server's words, which name it.
    Blocked(String),
}

/// The node as the drain sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Ready,
    NotReady,
    Gone,
}

/// The cluster's API, as a drain uses it.
pub trait NodeApi {
    /// Marks the node unschedulable; its state (a node that does not exist is `Gone`).
    fn cordon(&self, node: &str) -> impl Future<Output = Result<NodeState, String>>;
    /// The pods bound to the node.
    fn pods_on(&self, node: &str) -> impl Future<Output = Result<Vec<Pod>, String>>;
    fn evict(&self, pod: &Pod) -> impl Future<Output = Result<Eviction, String>>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    #[error("draining {node}: the cluster's API: {detail}")]
    Api { node: String, detail: String },
    #[error(
        "draining {node} did not finish within {}s: {} still on it{}; raise the budget's \
         maxUnavailable, scale its workload, or evict the pod by hand, then run `kos up` again",
        .waited.as_secs(),
        pods.join(", "),
        blocked.as_ref().map(|b| format!(" (blocked: {b})")).unwrap_or_default()
    )]
    Timeout {
        node: String,
        pods: Vec<String>,
        /// The last PodDisruptionBudget refusal, naming the budget.
        blocked: Option<String>,
        waited: Duration,
    },
}

/// How long a drain may take, and how often it looks.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub timeout: Duration,
    pub poll: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            poll: Duration::from_secs(5),
        }
    }
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// Pods evicted (`namespace/name`).
    pub evicted: Vec<String>,
}

/// Drains `node`; `say` gets a line when a budget holds an eviction back.
///
/// # Errors
/// The API failed, or pods were still on the node when the timeout passed.
pub async fn drain(
    api: &impl NodeApi,
    node: &str,
    opts: Options,
    say: &mut dyn FnMut(&str),
) -> Result<Drained, DrainError> {
    let err = |detail: String| DrainError::Api {
        node: node.to_owned(),
        detail,
    };
    let state = api.cordon(node).await.map_err(err)?;
    let mut done = Drained::default();
    if state == NodeState::Gone {
        return Ok(done);
    }
    let started = tokio::time::Instant::now();
    let mut said = std::collections::BTreeSet::new();
    loop {
        let left: Vec<Pod> = api
            .pods_on(node)
            .await
            .map_err(err)?
            .into_iter()
            .filter(Pod::drained)
            // An unreachable kubelet never confirms a deletion.
            .filter(|p| !(p.deleting && state == NodeState::NotReady))
            .collect();
        if left.is_empty() {
            return Ok(done);
        }
        let mut blocked = None;
        for p in left.iter().filter(|p| !p.deleting) {
            match api.evict(p).await.map_err(err)? {
                Eviction::Evicted => done.evicted.push(p.key()),
                Eviction::Gone => {}
                Eviction::Blocked(why) => {
                    if said.insert(p.key()) {
                        say(&format!("{}: eviction of {} waits: {why}", node, p.key()));
                    }
                    blocked = Some(why);
                }
            }
        }
        if started.elapsed() >= opts.timeout {
            return Err(DrainError::Timeout {
                node: node.to_owned(),
                pods: left.iter().map(Pod::key).collect(),
                blocked,
                waited: opts.timeout,
            });
        }
        tokio::time::sleep(opts.poll).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A node with pods; evictions of `guarded` are refused until `budget_after` polls.
    struct Fake {
        state: NodeState,
        pods: RefCell<Vec<Pod>>,
        guarded: &'static str,
        budget_after: Option<u32>,
        polls: RefCell<u32>,
        /// Evicted pods linger (deleting) for this many polls.
        linger: u32,
        lingering: RefCell<Vec<(String, u32)>>,
        cordoned: RefCell<bool>,
    }

    fn pod(name: &str) -> Pod {
        Pod {
            namespace: "default".into(),
            name: name.into(),
            daemon_set: false,
            mirror: false,
            finished: false,
            deleting: false,
        }
    }

    impl Fake {
        fn new(state: NodeState, pods: Vec<Pod>) -> Self {
            Fake {
                state,
                pods: RefCell::new(pods),
                guarded: "",
                budget_after: None,
                polls: RefCell::new(0),
                linger: 0,
                lingering: RefCell::new(Vec::new()),
                cordoned: RefCell::new(false),
            }
        }
    }

    impl NodeApi for Fake {
        async fn cordon(&self, _node: &str) -> Result<NodeState, String> {
            *self.cordoned.borrow_mut() = true;
            Ok(self.state)
        }
        async fn pods_on(&self, _node: &str) -> Result<Vec<Pod>, String> {
            *self.polls.borrow_mut() += 1;
            let mut lingering = self.lingering.borrow_mut();
            let mut pods = self.pods.borrow_mut();
            for (name, left) in lingering.iter_mut() {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    pods.retain(|p| &p.name != name);
                }
            }
            lingering.retain(|(_, left)| *left > 0);
            Ok(pods.clone())
        }
        async fn evict(&self, p: &Pod) -> Result<Eviction, String> {
            if p.name == self.guarded && self.budget_after.is_none_or(|n| *self.polls.borrow() < n)
            {
                return Ok(Eviction::Blocked(
                    "The disruption budget web-pdb needs 2 healthy pods and has 2 currently".into(),
                ));
            }
            let mut pods = self.pods.borrow_mut();
            let Some(x) = pods.iter_mut().find(|x| x.name == p.name) else {
                return Ok(Eviction::Gone);
            };
            if self.linger == 0 {
                pods.retain(|x| x.name != p.name);
            } else {
                x.deleting = true;
                self.lingering
                    .borrow_mut()
                    .push((p.name.clone(), self.linger));
            }
            Ok(Eviction::Evicted)
        }
    }

    fn opts(polls: u32) -> Options {
        Options {
            timeout: Duration::from_millis(u64::from(polls)),
            poll: Duration::from_millis(1),
        }
    }

    fn run<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn daemonset_mirror_and_finished_pods_stay_the_rest_are_evicted() {
        let mut ds = pod("kube-proxy-x");
        ds.daemon_set = true;
        let mut mirror = pod("etcd-node");
        mirror.mirror = true;
        let mut done = pod("job-1");
        done.finished = true;
        let f = Fake::new(
            NodeState::Ready,
            vec![ds, mirror, done, pod("web-1"), pod("web-2")],
        );
        let d = run(drain(&f, "n", opts(10_000), &mut |_| {})).expect("drained");
        assert_eq!(d.evicted, ["default/web-1", "default/web-2"]);
        assert!(*f.cordoned.borrow());
        assert_eq!(f.pods.borrow().len(), 3, "the others stay");
    }

    #[test]
    fn a_budget_that_clears_is_waited_for_and_one_that_never_does_times_out_naming_it() {
        let mut f = Fake::new(NodeState::Ready, vec![pod("web-1"), pod("api-1")]);
        f.guarded = "web-1";
        f.budget_after = Some(4);
        let mut lines = Vec::new();
        let d = run(drain(&f, "n", opts(10_000), &mut |l| {
            lines.push(l.to_owned())
        }))
        .expect("drained once the budget allows");
        assert!(d.evicted.contains(&"default/web-1".to_owned()));
        assert_eq!(lines.len(), 1, "said once: {lines:?}");
        assert!(lines[0].contains("web-pdb"), "{lines:?}");

        let mut f = Fake::new(NodeState::Ready, vec![pod("web-1"), pod("api-1")]);
        f.guarded = "web-1";
        let e = run(drain(&f, "n", opts(30), &mut |_| {})).expect_err("never allowed");
        let DrainError::Timeout { pods, blocked, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!(pods, &["default/web-1"]);
        assert!(blocked.as_deref().is_some_and(|b| b.contains("web-pdb")));
        assert!(e.to_string().contains("web-pdb"), "{e}");
        assert!(e.to_string().contains("run `kos up` again"), "{e}");
    }

    #[test]
    fn evicted_pods_are_waited_for_unless_the_node_is_not_ready() {
        let mut f = Fake::new(NodeState::Ready, vec![pod("web-1")]);
        f.linger = 3;
        let d = run(drain(&f, "n", opts(10_000), &mut |_| {})).expect("drained");
        assert_eq!(d.evicted, ["default/web-1"]);
        assert!(f.pods.borrow().is_empty(), "waited until it was gone");
        assert!(*f.polls.borrow() >= 4, "{}", f.polls.borrow());

        // NotReady: the kubelet never confirms; a pod being deleted counts as gone.
        let mut f = Fake::new(NodeState::NotReady, vec![pod("web-1")]);
        f.linger = 1_000_000;
        let d = run(drain(&f, "n", opts(10_000), &mut |_| {})).expect("drained");
        assert_eq!(d.evicted, ["default/web-1"]);
    }

    #[test]
    fn a_node_that_is_gone_is_drained() {
        let f = Fake::new(NodeState::Gone, vec![pod("web-1")]);
        let d = run(drain(&f, "n", opts(1), &mut |_| {})).expect("nothing to do");
        assert!(d.evicted.is_empty());
    }
}
