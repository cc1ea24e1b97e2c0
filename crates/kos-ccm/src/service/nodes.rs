//! The Nodes handed to the load-balancer core, and the trigger when pool members may change.
//!
//! A task watches the Nodes and keeps, per node, only what [`crate::lb::nodes::backends`] reads
//! (name, labels, taints, being deleted, addresses). The list is republished, and every Service
//! reconciled, only when that view changes: readiness flaps and status heartbeats cost nothing.
//! Keeping only that view also keeps large fields (images, conditions) out of memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The current member view of every Node; `None` until the first complete list.
pub(crate) type NodeList = watch::Receiver<Option<Arc<Vec<Node>>>>;

/// What of a Node can change a pool: must cover every field `lb::nodes::backends` reads.
pub(crate) fn member_view(node: &Node) -> Node {
    Node {
        metadata: ObjectMeta {
            name: node.metadata.name.clone(),
            labels: node.metadata.labels.clone(),
            deletion_timestamp: node.metadata.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: node.spec.as_ref().and_then(|s| s.taints.clone()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: node.status.as_ref().and_then(|s| s.addresses.clone()),
            ..NodeStatus::default()
        }),
    }
}

/// The watch's state: name → member view, and the view being relisted.
#[derive(Default)]
struct Members {
    nodes: BTreeMap<String, Node>,
    relist: Option<BTreeMap<String, Node>>,
    listed: bool,
}

impl Members {
    /// Applies one watch event; true when the member view changed (or was first complete).
    fn apply(&mut self, event: watcher::Event<Node>) -> bool {
        let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
        match event {
            watcher::Event::Apply(n) => {
                let view = member_view(&n);
                let changed = self.nodes.get(&name(&n)) != Some(&view);
                self.nodes.insert(name(&n), view);
                changed && self.listed
            }
            watcher::Event::Delete(n) => self.nodes.remove(&name(&n)).is_some() && self.listed,
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(n) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name(&n), member_view(&n));
                false
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let changed = fresh != self.nodes || !self.listed;
                self.nodes = fresh;
                self.listed = true;
                changed
            }
        }
    }

    fn list(&self) -> Arc<Vec<Node>> {
        Arc::new(self.nodes.values().cloned().collect())
    }
}

/// Starts watching the Nodes. The task ends when every receiver is gone.
pub(crate) fn spawn(api: Api<Node>) -> (JoinHandle<()>, NodeList) {
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut members = Members::default();
        loop {
            let event = tokio::select! {
                () = tx.closed() => return,
                e = stream.next() => e,
            };
            match event {
                Some(Ok(e)) => {
                    if members.apply(e) {
                        tracing::debug!(nodes = members.nodes.len(), "node members changed");
                        tx.send_replace(Some(members.list()));
                    }
                }
                // The watcher backs off and relists by itself.
                Some(Err(e)) => tracing::warn!(error = %e, "node watch"),
                None => return,
            }
        }
    });
    (task, rx)
}

/// One item per change of the member view after the current one (coalesced: several changes
/// before the controller takes the item are one reconcile of every Service).
pub(crate) fn changes(mut rx: NodeList) -> impl Stream<Item = ()> + Send {
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        rx.mark_unchanged();
        Some(((), rx))
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, Taint};

    use super::*;

    fn node(name: &str, ip: &str, ready: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    fn listed(nodes: &[Node]) -> Members {
        let mut m = Members::default();
        m.apply(watcher::Event::Init);
        for n in nodes {
            assert!(!m.apply(watcher::Event::InitApply(n.clone())));
        }
        assert!(m.apply(watcher::Event::InitDone), "the first list is news");
        m
    }

    #[test]
    fn only_member_relevant_changes_count() {
        let mut m = listed(&[node("a", "10.0.0.1", "True")]);
        // Readiness and resourceVersion: not a member change.
        let mut flapped = node("a", "10.0.0.1", "False");
        flapped.metadata.resource_version = Some("8".into());
        assert!(!m.apply(watcher::Event::Apply(flapped)));
        // A new address, a label, a taint, a new node, a deleted one: all are.
        assert!(m.apply(watcher::Event::Apply(node("a", "10.0.0.9", "False"))));
        let mut labelled = node("a", "10.0.0.9", "False");
        labelled.metadata.labels = Some(BTreeMap::from([("pool".into(), "web".into())]));
        assert!(m.apply(watcher::Event::Apply(labelled.clone())));
        let mut tainted = labelled;
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: crate::lb::nodes::TO_BE_DELETED_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        });
        assert!(m.apply(watcher::Event::Apply(tainted)));
        assert!(m.apply(watcher::Event::Apply(node("b", "10.0.0.2", "True"))));
        assert!(m.apply(watcher::Event::Delete(node("b", "10.0.0.2", "True"))));
        assert!(!m.apply(watcher::Event::Delete(node("zz", "10.0.0.3", "True"))));
        assert_eq!(m.list().len(), 1);
    }

    #[test]
    fn a_relist_counts_only_when_the_members_differ() {
        let nodes = [node("a", "10.0.0.1", "True"), node("b", "10.0.0.2", "True")];
        let mut m = listed(&nodes);
        m.apply(watcher::Event::Init);
        for n in &nodes {
            m.apply(watcher::Event::InitApply(n.clone()));
        }
        assert!(!m.apply(watcher::Event::InitDone));
        m.apply(watcher::Event::Init);
        m.apply(watcher::Event::InitApply(nodes[0].clone()));
        assert!(m.apply(watcher::Event::InitDone), "b went while unwatched");
        assert_eq!(m.list().len(), 1);
    }

    #[test]
    fn the_view_gives_the_core_the_same_members() {
        let mut n = node("a", "10.0.0.1", "True");
        n.metadata.labels = Some(BTreeMap::from([("pool".into(), "web".into())]));
        let selector = BTreeMap::from([("pool".to_owned(), "web".to_owned())]);
        let full = crate::lb::nodes::backends(std::slice::from_ref(&n), &selector, false);
        let view = crate::lb::nodes::backends(&[member_view(&n)], &selector, false);
        assert_eq!(full, view);
        assert_eq!(view.backends.len(), 1);
    }
}
