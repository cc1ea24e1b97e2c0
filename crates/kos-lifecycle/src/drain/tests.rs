//! The drain against an in-memory cluster: what is left, budgets that clear and that do not, pods
//! that linger, a node whose kubelet cannot confirm, a node that is not there.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashMap;

use super::*;

const TOO_MANY: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// A pod of the in-memory cluster and how it behaves when evicted.
struct Held {
    pod: Pod,
    /// Refusals by the budget `web` still to come; `None`: refused for ever.
    refusals: Option<Option<u32>>,
    /// Lists in which it still shows once evicted; `None`: for ever (a finalizer nobody removes).
    linger: Option<u32>,
}

#[derive(Default)]
struct Cluster {
    node: RefCell<Option<Node>>,
    pods: RefCell<Vec<Held>>,
    cordons: RefCell<u32>,
    lists: RefCell<u32>,
    evictions: RefCell<HashMap<String, u32>>,
    deleted_nodes: RefCell<Vec<String>>,
}

fn node(ready: Ready, unschedulable: bool) -> Node {
    Node {
        name: "w-1".into(),
        unschedulable,
        ready,
        unreachable: false,
    }
}

fn pod(name: &str, controller: Option<&str>) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        phase: Phase::Running,
        mirror: false,
        controller_kind: controller.map(str::to_owned),
        deletion: None,
    }
}

fn held(pod: Pod) -> Held {
    Held {
        pod,
        refusals: None,
        linger: Some(0),
    }
}

impl Cluster {
    fn with(node: Node, pods: Vec<Held>) -> Cluster {
        Cluster {
            node: RefCell::new(Some(node)),
            pods: RefCell::new(pods),
            ..Cluster::default()
        }
    }

    fn evictions_of(&self, name: &str) -> u32 {
        self.evictions
            .borrow()
            .get(&format!("default/{name}"))
            .copied()
            .unwrap_or(0)
    }

    fn names(&self) -> Vec<String> {
        self.pods
            .borrow()
            .iter()
            .map(|h| h.pod.name.clone())
            .collect()
    }
}

impl NodeApi for Cluster {
    async fn node(&self, name: &str) -> Result<Node, ApiError> {
        self.node
            .borrow()
            .clone()
            .filter(|n| n.name == name)
            .ok_or(ApiError::NotFound)
    }

    async fn cordon(&self, _name: &str) -> Result<(), ApiError> {
        *self.cordons.borrow_mut() += 1;
        if let Some(n) = self.node.borrow_mut().as_mut() {
            n.unschedulable = true;
        }
        Ok(())
    }

    async fn pods_on(&self, _node: &str) -> Result<Vec<Pod>, ApiError> {
        *self.lists.borrow_mut() += 1;
        let mut pods = self.pods.borrow_mut();
        // An evicted pod shows `linger` more times, then its kubelet confirms and it goes.
        pods.retain_mut(|h| match (h.pod.deletion, h.linger) {
            (Some(_), Some(0)) => false,
            (Some(_), Some(n)) => {
                h.linger = Some(n - 1);
                true
            }
            _ => true,
        });
        Ok(pods.iter().map(|h| h.pod.clone()).collect())
    }

    async fn evict(&self, namespace: &str, name: &str) -> Eviction {
        *self
            .evictions
            .borrow_mut()
            .entry(format!("{namespace}/{name}"))
            .or_default() += 1;
        let mut pods = self.pods.borrow_mut();
        let Some(h) = pods.iter_mut().find(|h| h.pod.name == name) else {
            return Eviction::Gone;
        };
        let refuse = match &mut h.refusals {
            Some(None) => true,
            Some(Some(0)) | None => false,
            Some(Some(n)) => {
                *n -= 1;
                true
            }
        };
        if refuse {
            return Eviction::Blocked(Blocked {
                budget: Some("web".into()),
                message: format!(
                    "{TOO_MANY} The disruption budget web needs 2 healthy pods and has 2 currently"
                ),
            });
        }
        if h.pod.deletion.is_none() {
            h.pod.deletion = Some(SystemTime::now());
        }
        Eviction::Evicted
    }

    async fn delete_node(&self, name: &str) -> Result<(), ApiError> {
        self.deleted_nodes.borrow_mut().push(name.to_owned());
        // As kube-apiserver answers a DELETE of what is not there.
        match self.node.borrow_mut().take() {
            Some(n) if n.name == name => Ok(()),
            _ => Err(ApiError::NotFound),
        }
    }
}

/// Long enough never to be reached by a drain that should succeed, on any machine.
fn patient() -> Options {
    Options {
        timeout: Duration::from_secs(120),
        poll: Duration::from_millis(1),
        skip_wait_for_delete: Duration::from_secs(300),
    }
}

/// For a drain that must give up: what blocks it never clears, so only the timeout ends it.
fn impatient() -> Options {
    Options {
        timeout: Duration::from_millis(500),
        poll: Duration::from_millis(5),
        skip_wait_for_delete: Duration::from_secs(300),
    }
}

async fn run(c: &Cluster, opts: Options) -> (Result<Drained, DrainError>, Vec<String>) {
    let mut said = Vec::new();
    let r = drain(c, "w-1", opts, &mut |l| said.push(l.to_owned())).await;
    (r, said)
}

#[tokio::test]
async fn daemonset_mirror_and_finished_pods_are_left_and_the_rest_evicted() {
    let mut mirror = pod("etcd-w-1", Some("Node"));
    mirror.mirror = true;
    let mut done = pod("job-x", Some("Job"));
    done.phase = Phase::Succeeded;
    let mut failed = pod("job-y", None);
    failed.phase = Phase::Failed;
    let c = Cluster::with(
        node(Ready::True, false),
        vec![
            held(pod("web-0", Some("ReplicaSet"))),
            held(pod("kube-proxy-abc", Some("DaemonSet"))),
            held(mirror),
            held(done),
            held(failed),
            held(pod("bare", None)),
        ],
    );
    let (r, said) = run(&c, patient()).await;
    let d = r.unwrap();
    assert_eq!(*c.cordons.borrow(), 1);
    assert!(c.node.borrow().as_ref().unwrap().unschedulable);
    assert_eq!(d.evicted, ["default/web-0", "default/bare"]);
    let mut left = c.names();
    left.sort();
    assert_eq!(left, ["etcd-w-1", "job-x", "job-y", "kube-proxy-abc"]);
    for kept in ["etcd-w-1", "job-x", "job-y", "kube-proxy-abc"] {
        assert_eq!(c.evictions_of(kept), 0, "{kept} was evicted");
    }
    let mut why: Vec<_> = d.left.iter().map(|(p, w)| (p.as_str(), *w)).collect();
    why.sort_by_key(|(p, _)| *p);
    assert_eq!(
        why,
        [
            ("default/etcd-w-1", Left::Mirror),
            ("default/job-x", Left::Finished),
            ("default/job-y", Left::Finished),
            ("default/kube-proxy-abc", Left::DaemonSet),
        ]
    );
    assert!(said.iter().any(|l| l == "node w-1 is drained"), "{said:?}");
}

#[tokio::test]
async fn a_budget_that_clears_after_some_polls_lets_the_drain_finish() {
    let mut web = held(pod("web-1", Some("ReplicaSet")));
    web.refusals = Some(Some(3));
    let c = Cluster::with(
        node(Ready::True, false),
        vec![held(pod("web-0", Some("ReplicaSet"))), web],
    );
    let d = run(&c, patient()).await.0.unwrap();
    assert_eq!(d.evicted, ["default/web-0", "default/web-1"]);
    // Three refusals, then the eviction that went through; nothing after it.
    assert_eq!(c.evictions_of("web-1"), 4);
    assert_eq!(c.evictions_of("web-0"), 1);
    assert!(c.names().is_empty());
}

#[tokio::test]
async fn a_budget_that_never_clears_times_out_naming_the_budget_and_the_pod() {
    let mut web = held(pod("web-1", Some("ReplicaSet")));
    web.refusals = Some(None);
    let c = Cluster::with(node(Ready::True, false), vec![web]);
    let e = run(&c, impatient()).await.0.unwrap_err();
    let DrainError::Timeout { node, stuck, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(node, "w-1");
    assert_eq!(
        stuck.0,
        [(
            "default/web-1".to_owned(),
            Stuck::Budget {
                budget: Some("default/web".into()),
                message: format!(
                    "{TOO_MANY} The disruption budget web needs 2 healthy pods and has 2 currently"
                ),
            }
        )]
    );
    let text = e.to_string();
    for want in [
        "node w-1 was not drained",
        "pod default/web-1",
        "PodDisruptionBudget default/web",
        "needs 2 healthy pods and has 2 currently",
        "raise the budget's maxUnavailable, scale its workload, or evict by hand",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    // How the run comes again is the step's help, said to the CLI's user or kos-operator's.
    assert!(!text.contains("kos up"), "{text}");
    // Retried every poll, not once.
    assert!(c.evictions_of("web-1") > 1);
    assert_eq!(c.names(), ["web-1"]);
}

#[tokio::test]
async fn pods_that_linger_after_eviction_are_waited_for_and_not_evicted_again() {
    let mut slow = held(pod("web-0", Some("ReplicaSet")));
    slow.linger = Some(5);
    let c = Cluster::with(node(Ready::True, false), vec![slow]);
    let d = run(&c, patient()).await.0.unwrap();
    assert_eq!(d.evicted, ["default/web-0"]);
    assert_eq!(c.evictions_of("web-0"), 1);
    // Evicted on the first list, seen terminating five more times, gone on the seventh.
    assert_eq!(*c.lists.borrow(), 7);

    // One whose kubelet never confirms (a finalizer nobody removes) on a Ready node: the drain gives up,
    // naming it.
    let mut stuck = held(pod("web-9", Some("ReplicaSet")));
    stuck.linger = None;
    let c = Cluster::with(node(Ready::True, false), vec![stuck]);
    let e = run(&c, impatient()).await.0.unwrap_err();
    assert_eq!(c.evictions_of("web-9"), 1);
    let text = e.to_string();
    assert!(
        text.contains("pod default/web-9 is being deleted and its kubelet has not confirmed it")
            && text.contains("evict or delete them by hand"),
        "{text}"
    );
}

#[tokio::test]
async fn a_not_ready_nodes_long_terminating_pods_count_as_gone() {
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let terminating = |name: &str, since: SystemTime| {
        let mut p = pod(name, Some("ReplicaSet"));
        p.deletion = Some(since);
        Held {
            pod: p,
            refusals: None,
            linger: None,
        }
    };
    for ready in [Ready::Unknown, Ready::False] {
        let c = Cluster::with(
            node(ready, true),
            vec![terminating("web-0", hour_ago), held(pod("web-1", None))],
        );
        let d = run(&c, patient()).await.0.unwrap();
        assert_eq!(d.abandoned, ["default/web-0"], "{ready:?}");
        assert_eq!(d.evicted, ["default/web-1"]);
        // Already being deleted: never evicted again. Already cordoned: not cordoned again.
        assert_eq!(c.evictions_of("web-0"), 0);
        assert_eq!(*c.cordons.borrow(), 0);
    }
    // Unreachable by its taint, Ready as last reported.
    let mut tainted = node(Ready::True, true);
    tainted.unreachable = true;
    let c = Cluster::with(tainted, vec![terminating("web-0", hour_ago)]);
    assert_eq!(
        run(&c, patient()).await.0.unwrap().abandoned,
        ["default/web-0"]
    );

    // The same pod on a Ready node is waited for: its kubelet will confirm.
    let c = Cluster::with(
        node(Ready::True, true),
        vec![terminating("web-0", hour_ago)],
    );
    assert!(matches!(
        run(&c, impatient()).await.0,
        Err(DrainError::Timeout { .. })
    ));
    // And on a NotReady node, one deleted only now is waited for, within the grace bound.
    let c = Cluster::with(
        node(Ready::Unknown, true),
        vec![terminating("web-0", SystemTime::now())],
    );
    assert!(matches!(
        run(&c, impatient()).await.0,
        Err(DrainError::Timeout { .. })
    ));
}

#[tokio::test]
async fn a_missing_node_is_nothing_to_do_and_a_drained_one_stays_drained() {
    let c = Cluster::default();
    let (r, said) = run(&c, impatient()).await;
    assert!(r.unwrap().node_missing);
    assert_eq!((*c.cordons.borrow(), *c.lists.borrow()), (0, 0));
    assert_eq!(said, ["node w-1 is not in the cluster: nothing to drain"]);

    // Drained once, then again: the second run changes nothing.
    let c = Cluster::with(
        node(Ready::True, false),
        vec![
            held(pod("web-0", Some("ReplicaSet"))),
            held(pod("ds", Some("DaemonSet"))),
        ],
    );
    run(&c, patient()).await.0.unwrap();
    let again = run(&c, patient()).await.0.unwrap();
    assert!(again.evicted.is_empty());
    assert_eq!(*c.cordons.borrow(), 1);
    assert_eq!(c.evictions_of("web-0"), 1);
    remove_node(&c, "w-1").await.unwrap();
    assert_eq!(*c.deleted_nodes.borrow(), ["w-1"]);
    assert!(run(&c, patient()).await.0.unwrap().node_missing);
    // The API says the Node is not there (404): removed already, which is what was asked.
    remove_node(&c, "w-1").await.unwrap();
    assert_eq!(*c.deleted_nodes.borrow(), ["w-1", "w-1"]);
}

/// The API failing otherwise stops the drain naming the call, the error kept as its cause: a
/// refusal is not mistaken for a missing Node, nor a failed delete for a done one. A transient
/// failure (no answer) stops it only once the drain's time is up.
#[tokio::test]
async fn api_failures_other_than_not_found_stop_the_drain_with_their_cause() {
    struct Failing {
        inner: Cluster,
        cordon: fn() -> ApiError,
    }
    impl NodeApi for Failing {
        async fn node(&self, name: &str) -> Result<Node, ApiError> {
            self.inner.node(name).await
        }
        async fn cordon(&self, _name: &str) -> Result<(), ApiError> {
            Err((self.cordon)())
        }
        async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, ApiError> {
            self.inner.pods_on(node).await
        }
        async fn evict(&self, namespace: &str, name: &str) -> Eviction {
            self.inner.evict(namespace, name).await
        }
        async fn delete_node(&self, _name: &str) -> Result<(), ApiError> {
            Err((self.cordon)())
        }
    }
    let forbidden = || ApiError::Status {
        code: 403,
        message: "nodes \"w-1\" is forbidden".into(),
    };
    let unreachable = || {
        ApiError::Unreachable(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        )))
    };
    let cases: [(fn() -> ApiError, bool); 2] = [(forbidden, false), (unreachable, true)];
    for (cordon, transient) in cases {
        let c = Failing {
            inner: Cluster::with(node(Ready::True, false), vec![held(pod("web-0", None))]),
            cordon,
        };
        let opts = if transient { impatient() } else { patient() };
        let e = run_on(&c, opts).await.unwrap_err();
        let DrainError::Api { node, call, source } = &e else {
            panic!("{e}")
        };
        assert_eq!((node.as_str(), *call), ("w-1", Call::Cordon));
        assert_eq!(source.is_transient(), transient, "{source}");
        assert_eq!(
            e.to_string(),
            "draining node w-1: cordoning it through the cluster's API"
        );
        assert!(
            crate::api::chain(&e).contains(&cordon().to_string()),
            "{}",
            crate::api::chain(&e)
        );
        assert_eq!(c.inner.evictions_of("web-0"), 0, "nothing evicted");
        let e = remove_node(&c, "w-1").await.unwrap_err();
        assert!(
            matches!(
                e,
                DrainError::Api {
                    call: Call::DeleteNode,
                    ..
                }
            ),
            "{e}"
        );
    }
}

async fn run_on(api: &impl NodeApi, opts: Options) -> Result<Drained, DrainError> {
    drain(api, "w-1", opts, &mut |_| {}).await
}

/// The API out for a while (a control plane replaced mid-roll, the load balancer moving its
/// members): each call that got no answer, a 503 or a 429 is made again at the next poll, and the
/// drain ends as it would have. Before, the first such answer ended it.
#[tokio::test]
async fn a_drain_outlasts_an_api_outage_shorter_than_its_timeout() {
    struct Flaky {
        inner: Cluster,
        /// Failures still to come: every other call fails (no answer, a 503, a 429 in turn), so
        /// each of the drain's calls in a row meets one.
        outage: RefCell<u32>,
        calls: RefCell<u32>,
    }
    impl Flaky {
        fn fail(&self) -> Result<(), ApiError> {
            let mut calls = self.calls.borrow_mut();
            *calls += 1;
            let mut left = self.outage.borrow_mut();
            if *left == 0 || (*calls).is_multiple_of(2) {
                return Ok(());
            }
            *left -= 1;
            Err(match *left % 3 {
                0 => ApiError::Unreachable(Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "connection refused",
                ))),
                1 => ApiError::Status {
                    code: 503,
                    message: "the server is currently unable to handle the request".into(),
                },
                _ => ApiError::Status {
                    code: 429,
                    message: "too many requests".into(),
                },
            })
        }
    }
    impl NodeApi for Flaky {
        async fn node(&self, name: &str) -> Result<Node, ApiError> {
            self.fail()?;
            self.inner.node(name).await
        }
        async fn cordon(&self, name: &str) -> Result<(), ApiError> {
            self.fail()?;
            self.inner.cordon(name).await
        }
        async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, ApiError> {
            self.fail()?;
            self.inner.pods_on(node).await
        }
        async fn evict(&self, namespace: &str, name: &str) -> Eviction {
            self.inner.evict(namespace, name).await
        }
        async fn delete_node(&self, name: &str) -> Result<(), ApiError> {
            self.inner.delete_node(name).await
        }
    }
    // The drain's calls in turn (read, cordon, list, read again, list) each fail once first.
    for outage in [1, 2, 3, 5] {
        let c = Flaky {
            inner: Cluster::with(
                node(Ready::True, false),
                vec![held(pod("web-0", Some("ReplicaSet")))],
            ),
            outage: RefCell::new(outage),
            calls: RefCell::new(0),
        };
        let d = run_on(&c, patient())
            .await
            .unwrap_or_else(|e| panic!("an outage of {outage} calls: {e}"));
        assert_eq!(d.evicted, ["default/web-0"], "outage of {outage}");
        assert_eq!(*c.outage.borrow(), 0);
        assert!(c.inner.node.borrow().as_ref().unwrap().unschedulable);
    }
}

#[tokio::test]
async fn other_eviction_failures_are_retried_and_reported() {
    struct Refusing(Cluster);
    impl NodeApi for Refusing {
        async fn node(&self, name: &str) -> Result<Node, ApiError> {
            self.0.node(name).await
        }
        async fn cordon(&self, name: &str) -> Result<(), ApiError> {
            self.0.cordon(name).await
        }
        async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, ApiError> {
            self.0.pods_on(node).await
        }
        async fn evict(&self, namespace: &str, name: &str) -> Eviction {
            *self
                .0
                .evictions
                .borrow_mut()
                .entry(format!("{namespace}/{name}"))
                .or_default() += 1;
            Eviction::Failed(ApiError::Status {
                code: 500,
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
            })
        }
        async fn delete_node(&self, name: &str) -> Result<(), ApiError> {
            self.0.delete_node(name).await
        }
    }
    let c = Refusing(Cluster::with(
        node(Ready::True, false),
        vec![held(pod("web-0", Some("ReplicaSet")))],
    ));
    let mut said = Vec::new();
    let e = drain(&c, "w-1", impatient(), &mut |l| said.push(l.to_owned()))
        .await
        .unwrap_err();
    assert!(c.0.evictions_of("web-0") > 1);
    let text = e.to_string();
    assert!(
        text.contains("pod default/web-0 cannot be evicted: HTTP 500: This pod has more than one")
            && !text.contains("maxUnavailable"),
        "{text}"
    );
}

#[test]
fn the_budget_is_read_from_the_servers_cause() {
    assert_eq!(
        budget_in_cause("The disruption budget web needs 2 healthy pods and has 2 currently"),
        Some("web")
    );
    assert_eq!(
        budget_in_cause("The disruption budget db-pdb is still being processed by the server."),
        Some("db-pdb")
    );
    assert_eq!(budget_in_cause("something else"), None);
    assert_eq!(budget_in_cause("The disruption budget "), None);
}
