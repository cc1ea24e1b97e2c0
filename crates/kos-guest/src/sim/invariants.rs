//! The clusters' invariants, watched at every state change the runtime sees (and when asked), each
//! violation recorded once when it becomes true, with the simulated time:
//! - etcd without quorum;
//! - an etcd member whose server is gone, for longer than [`GONE_GRACE_SECS`] simulated seconds
//!   (Cluster API's KCP removes a machine's member right before it deletes the machine, so a short
//!   window is normal; a member left behind for longer is what breaks the next join);
//! - a control plane that joined (it runs an API server of the cluster) without its etcd member (one
//!   whose member was removed while it ran is on its way out: its etcd and API server stopped);
//! - version skew ([`crate::skew`]): two running API servers more than one minor apart, a kubelet
//!   newer than a running API server it talks to.

use std::collections::{BTreeMap, BTreeSet};

use kos_sim::SimTime;
use serde_json::{Value, json};

use crate::cluster::ClusterId;
use crate::guest::{Guest, Power};
use crate::kubelet;

/// How long an etcd member may outlive its server before it is a violation (simulated seconds).
pub const GONE_GRACE_SECS: f64 = 300.0;

#[derive(Default)]
pub(crate) struct Invariants {
    /// When each member's server was first seen gone, by (cluster, member).
    gone_since: BTreeMap<(ClusterId, u64), f64>,
    /// The violations true at the last look, by cluster.
    active: BTreeMap<ClusterId, BTreeSet<String>>,
    /// Every violation recorded, by cluster: (simulated seconds, what).
    recorded: BTreeMap<ClusterId, Vec<(f64, String)>>,
}

impl Invariants {
    /// Looks at every cluster at `now`.
    pub fn observe(&mut self, guest: &Guest, now: SimTime) {
        let t = now.0;
        for (cid, c) in &guest.clusters {
            let up = |s: &crate::seam::ServerId| {
                guest.servers.get(s).is_some_and(|x| x.power == Power::On)
            };
            let mut now_true = BTreeSet::new();
            if !c.has_quorum(&up) {
                now_true.insert("etcd has no quorum".to_owned());
            }
            for m in &c.etcd {
                let gone = guest
                    .servers
                    .get(&m.server)
                    .is_none_or(|s| s.power == Power::Deleted);
                let key = (*cid, m.id);
                if !gone {
                    self.gone_since.remove(&key);
                    continue;
                }
                let since = *self.gone_since.entry(key).or_insert(t);
                if t - since >= GONE_GRACE_SECS {
                    now_true.insert(format!(
                        "etcd member {:x} ({}) outlives its server {} by more than {GONE_GRACE_SECS}s",
                        m.id, m.name, m.server
                    ));
                }
            }
            for (id, s) in &guest.servers {
                if s.power == Power::On
                    && s.api_of == Some(*cid)
                    && !c.etcd.iter().any(|m| &m.server == id)
                    && !c.removed_members.contains(id)
                {
                    let node = s.kubelet.as_ref().map_or("?", |k| k.node.as_str());
                    now_true.insert(format!(
                        "control plane {node} ({id}) runs without its etcd member"
                    ));
                }
            }
            now_true.extend(guest.skew_violations(*cid));
            let before = self.active.entry(*cid).or_default();
            let rec = self.recorded.entry(*cid).or_default();
            for v in now_true.difference(before) {
                tracing::info!(cluster = %cid, "invariant violated: {v}");
                rec.push((t, v.clone()));
            }
            *before = now_true;
        }
        self.gone_since
            .retain(|(cid, _), _| guest.clusters.contains_key(cid));
    }

    /// `GET /_sim/clusters`.
    pub fn report(&self, guest: &Guest) -> Value {
        let clusters: Vec<Value> = guest
            .clusters
            .iter()
            .map(|(cid, c)| {
                let up = |s: &crate::seam::ServerId| {
                    guest.servers.get(s).is_some_and(|x| x.power == Power::On)
                };
                let nodes: Vec<Value> = c
                    .kube
                    .list::<k8s_openapi::api::core::v1::Node>(None)
                    .unwrap_or_default()
                    .iter()
                    .map(|n| {
                        let name = n.metadata.name.clone().unwrap_or_default();
                        let server = guest
                            .servers
                            .iter()
                            .find(|(_, s)| {
                                s.kubelet
                                    .as_ref()
                                    .is_some_and(|k| k.cluster == *cid && k.node == name)
                            })
                            .map(|(id, _)| id);
                        json!({
                            "name": name,
                            "server": server.map(|id| id.0.clone()),
                            "version": n.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.kubelet_version.clone()),
                            // The API server its static pod runs; null on a worker.
                            "apiserver": server
                                .and_then(|id| guest.api_server_version(id))
                                .map(|v| v.to_string()),
                            "ready": kubelet::ready_status(n) == Some("True"),
                            // What its bootstrap downloaded and pulled (URLs).
                            "fetched": server
                                .and_then(|id| guest.servers.get(id))
                                .map(|s| s.fetched.clone())
                                .unwrap_or_default(),
                        })
                    })
                    .collect();
                let members: Vec<Value> = c
                    .etcd
                    .iter()
                    .map(|m| {
                        json!({
                            "id": m.id.to_string(),
                            "name": m.name,
                            "server": m.server.0,
                            "up": up(&m.server),
                            "learner": false,
                        })
                    })
                    .collect();
                let violations: Vec<Value> = self
                    .recorded
                    .get(cid)
                    .map(|v| v.iter().map(|(t, w)| json!({"at": t, "what": w})).collect())
                    .unwrap_or_default();
                json!({
                    "id": cid.0,
                    "name": c.name,
                    "endpoint": c.endpoint,
                    "nodes": nodes,
                    "etcd": {"quorum": c.has_quorum(&up), "members": members},
                    "violations": violations,
                })
            })
            .collect();
        Value::Array(clusters)
    }
}
