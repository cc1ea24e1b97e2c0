//! The cluster's API as a drain uses it ([`kos_lifecycle::drain`]): cordon with a merge patch, the
//! node's pods by field selector, policy/v1 evictions (a 429 is a PodDisruptionBudget saying not now;
//! its cause names the budget).

use std::time::Duration;

use kos_lifecycle::drain::{self, DrainError, Drained, Eviction, NodeApi, NodeState, Options, Pod};
use serde_json::{Value, json};

use crate::bootstrap::kube::Kube;

pub(super) struct Api<'a>(pub(super) &'a Kube);

impl NodeApi for Api<'_> {
    async fn cordon(&self, node: &str) -> Result<NodeState, String> {
        let path = format!("/api/v1/nodes/{node}");
        let Some(n) = self.0.get_json_opt(&path).await? else {
            return Ok(NodeState::Gone);
        };
        if n["spec"]["unschedulable"] != true {
            self.0
                .merge_patch(&path, &json!({"spec": {"unschedulable": true}}))
                .await?;
        }
        let ready = n["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        Ok(if ready {
            NodeState::Ready
        } else {
            NodeState::NotReady
        })
    }

    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, String> {
        let list = self
            .0
            .get_json(&format!(
                "/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
            ))
            .await?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(pod_of)
            .collect())
    }

    async fn evict(&self, p: &Pod) -> Result<Eviction, String> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}/eviction",
            p.namespace, p.name
        );
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": p.name, "namespace": p.namespace},
        });
        let (status, answer) = self.0.post_json(&path, &body).await?;
        Ok(match status {
            200..=299 => Eviction::Evicted,
            404 => Eviction::Gone,
            429 => Eviction::Blocked(blocked_by(&answer)),
            s => return Err(format!("evicting {}/{}: HTTP {s}", p.namespace, p.name)),
        })
    }
}

fn pod_of(p: &Value) -> Pod {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    Pod {
        namespace: s(&p["metadata"]["namespace"]),
        name: s(&p["metadata"]["name"]),
        daemon_set: p["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|o| o["kind"] == "DaemonSet" && o["controller"] == true),
        mirror: p["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string(),
        finished: matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")),
        deleting: p["metadata"]["deletionTimestamp"].is_string(),
    }
}

/// The API server's reason for a 429: the `DisruptionBudget` cause (which names the budget), else
/// its message.
fn blocked_by(answer: &Value) -> String {
    answer["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["reason"] == "DisruptionBudget")
        .and_then(|c| c["message"].as_str())
        .or_else(|| answer["message"].as_str())
        .unwrap_or("too many requests")
        .to_owned()
}

/// Drains `node` through `kube` within `timeout`, saying what holds it back.
pub(super) async fn drain_node(
    kube: &Kube,
    node: &str,
    timeout: Duration,
    simulated: bool,
) -> Result<Drained, DrainError> {
    let opts = Options {
        timeout,
        poll: if simulated {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(2)
        },
    };
    drain::drain(&Api(kube), node, opts, &mut |l| {
        eprintln!("kos: {}", crate::term::escape(l));
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_read_as_a_drain_needs_them() {
        let ds = pod_of(&json!({
            "metadata": {"namespace": "kube-system", "name": "cilium-x",
                "ownerReferences": [{"kind": "DaemonSet", "controller": true, "name": "cilium"}]},
            "status": {"phase": "Running"}}));
        assert!(ds.daemon_set && !ds.mirror && !ds.finished && !ds.deleting);
        let mirror = pod_of(&json!({
            "metadata": {"namespace": "kube-system", "name": "etcd-n",
                "annotations": {"kubernetes.io/config.mirror": "abc"}}}));
        assert!(mirror.mirror);
        let done = pod_of(&json!({"metadata": {"name": "j"}, "status": {"phase": "Succeeded"}}));
        assert!(done.finished);
        let going = pod_of(
            &json!({"metadata": {"name": "w", "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        );
        assert!(going.deleting);
    }

    #[test]
    fn a_429_names_the_budget() {
        let answer = json!({
            "kind": "Status", "code": 429, "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}});
        assert_eq!(
            blocked_by(&answer),
            "The disruption budget web needs 2 healthy pods and has 2 currently"
        );
        assert!(blocked_by(&json!({"message": "slow down"})).contains("slow down"));
    }
}
