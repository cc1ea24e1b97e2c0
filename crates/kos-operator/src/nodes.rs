//! A watch on each Ready Cluster's Nodes: a node that stops being Ready brings the Cluster's next
//! turn at once (whose health check then looks again when the node's timeout may run out), where it
//! would otherwise wait for the resync. As Cluster API's MachineHealthCheck watches the workload
//! cluster's Nodes.
//!
//! One task per Cluster (by uid), started after a turn that ended Ready and kept while it runs; a
//! lost connection is watched again with kube-runtime's backoff; the task ends when the Cluster
//! is deleted.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use crate::resource::Cluster;

/// The watches, and the Clusters they ask to be looked at.
pub struct NodeWatches {
    tasks: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    tx: mpsc::UnboundedSender<ObjectRef<Cluster>>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<Cluster>>>>,
}

impl Default for NodeWatches {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        NodeWatches {
            tasks: Mutex::new(HashMap::new()),
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl NodeWatches {
    /// The Clusters to look at, for the controller's `reconcile_on`; the first caller gets them,
    /// a later one an empty stream.
    pub fn triggers(&self) -> impl Stream<Item = ObjectRef<Cluster>> + Send + 'static {
        let rx = self
            .rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            let next = rx.recv().await?;
            Some((next, Some(rx)))
        })
    }

    /// Watches the Nodes `client` reaches for Cluster `cluster` (uid `uid`), unless a watch runs.
    pub fn ensure(&self, uid: &str, cluster: ObjectRef<Cluster>, client: kube::Client) {
        let mut tasks = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tasks.get(uid).is_some_and(|t| !t.is_finished()) {
            return;
        }
        let tx = self.tx.clone();
        tasks.insert(uid.to_owned(), tokio::spawn(watch(cluster, client, tx)));
    }

    /// Stops the watch of Cluster `uid` (deleted).
    pub fn stop(&self, uid: &str) {
        if let Some(t) = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(uid)
        {
            t.abort();
        }
    }

    /// How many watches run.
    #[must_use]
    pub fn running(&self) -> usize {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter(|t| !t.is_finished())
            .count()
    }
}

impl Drop for NodeWatches {
    fn drop(&mut self) {
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
        {
            t.abort();
        }
    }
}

/// Whether `node`'s `Ready` condition is `True`.
#[must_use]
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What the Nodes' readiness said: the names that stopped being Ready.
#[derive(Debug, Default)]
pub struct Readiness(HashMap<String, bool>);

impl Readiness {
    /// Takes in one event; `true` when a Node that was Ready is not any more.
    pub fn saw(&mut self, event: &Event<Node>) -> bool {
        match event {
            Event::Apply(n) | Event::InitApply(n) => {
                let now = is_ready(n);
                self.0.insert(n.name_any(), now) == Some(true) && !now
            }
            Event::Delete(n) => {
                self.0.remove(&n.name_any());
                false
            }
            Event::Init | Event::InitDone => false,
        }
    }
}

async fn watch(
    cluster: ObjectRef<Cluster>,
    client: kube::Client,
    tx: mpsc::UnboundedSender<ObjectRef<Cluster>>,
) {
    let nodes: Api<Node> = Api::all(client);
    let stream = watcher::watcher(nodes, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut readiness = Readiness::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(e) => {
                if readiness.saw(&e) {
                    tracing::info!(cluster = %cluster, "a node stopped being Ready: a turn looks");
                    if tx.send(cluster.clone()).is_err() {
                        return;
                    }
                }
            }
            Err(e) => tracing::debug!(cluster = %cluster, "watching the cluster's Nodes: {e}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(name: &str, ready: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_node_that_stops_being_ready_asks_for_a_turn() {
        let mut r = Readiness::default();
        assert!(!r.saw(&Event::InitApply(node("a", "True"))));
        assert!(
            !r.saw(&Event::InitApply(node("b", "False"))),
            "never Ready: a joining node"
        );
        assert!(!r.saw(&Event::Apply(node("a", "True"))));
        assert!(r.saw(&Event::Apply(node("a", "Unknown"))));
        assert!(!r.saw(&Event::Apply(node("a", "Unknown"))), "once");
        assert!(!r.saw(&Event::Apply(node("a", "True"))));
        // After a relist, a node Ready before and not now.
        assert!(r.saw(&Event::InitApply(node("a", "False"))));
        assert!(!r.saw(&Event::Delete(node("b", "False"))));
        assert!(
            !r.saw(&Event::Apply(node("b", "False"))),
            "made again, never Ready"
        );
    }
}
