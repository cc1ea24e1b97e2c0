//! Carrying out [`kos_lifecycle::drain`]: the drain's [`NodeApi`] over kos's client of the
//! cluster's API ([`Kube`], the admin certificate). One request per call and no retries here: the
//! drain loop owns them, a 429 included. The client's errors become the seam's
//! ([`ApiError`]); what they mean for the drain (a missing Node, one deleted already) the drain
//! decides.

use kos_lifecycle::api::ApiError;
use kos_lifecycle::drain::{
    self, Blocked, DrainError, Drained, Eviction, MIRROR_ANNOTATION, Node, NodeApi, Options, Phase,
    Pod, Ready, UNREACHABLE_TAINT,
};
use serde_json::{Value, json};

use crate::kube::{Kube, KubeError};

/// Drains `node` of the cluster `kube` talks to (see [`drain::drain`]); `say` gets one line per step.
pub async fn drain_node(
    kube: &Kube,
    node: &str,
    opts: Options,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<Drained, DrainError> {
    drain::drain(&Api(kube), node, opts, say).await
}

/// Deletes the Node `node` after its server went (see [`drain::remove_node`]).
pub async fn remove_node(kube: &Kube, node: &str) -> Result<(), DrainError> {
    drain::remove_node(&Api(kube), node).await
}

struct Api<'a>(&'a Kube);

fn node_path(name: &str) -> String {
    format!("/api/v1/nodes/{name}")
}

impl NodeApi for Api<'_> {
    async fn node(&self, name: &str) -> Result<Node, ApiError> {
        Ok(node_of(name, &self.0.get(&node_path(name)).await?))
    }

    async fn cordon(&self, name: &str) -> Result<(), ApiError> {
        Ok(self
            .0
            .merge_patch(&node_path(name), &json!({"spec": {"unschedulable": true}}))
            .await?)
    }

    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, ApiError> {
        // Node names are DNS subdomains: nothing in them needs escaping in a query.
        let list = self
            .0
            .get(&format!(
                "/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
            ))
            .await?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(pod_of)
            .collect())
    }

    async fn evict(&self, namespace: &str, name: &str) -> Eviction {
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        });
        eviction_of(
            self.0
                .post(
                    &format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction"),
                    &body,
                )
                .await,
        )
    }

    async fn delete_node(&self, name: &str) -> Result<(), ApiError> {
        Ok(self.0.delete(&node_path(name)).await?)
    }
}

fn node_of(name: &str, n: &Value) -> Node {
    let ready = n
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str());
    Node {
        name: name.to_owned(),
        unschedulable: n
            .pointer("/spec/unschedulable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ready: match ready {
            Some("True") => Ready::True,
            Some("False") => Ready::False,
            _ => Ready::Unknown,
        },
        unreachable: n
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|t| t["key"] == UNREACHABLE_TAINT),
    }
}

/// A listed pod; `None` for an item without a name or namespace (no real server sends one).
fn pod_of(p: &Value) -> Option<Pod> {
    let s = |ptr: &str| p.pointer(ptr).and_then(Value::as_str);
    let deletion = s("/metadata/deletionTimestamp").map(|t| {
        t.parse::<k8s_openapi::jiff::Timestamp>()
            .map(std::time::SystemTime::from)
            // Unreadable: taken as just now, so it is waited for rather than counted gone.
            .unwrap_or_else(|_| std::time::SystemTime::now())
    });
    Some(Pod {
        namespace: s("/metadata/namespace")?.to_owned(),
        name: s("/metadata/name")?.to_owned(),
        phase: Phase::parse(s("/status/phase").unwrap_or("Pending")),
        mirror: p
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(MIRROR_ANNOTATION))
            .is_some(),
        controller_kind: p
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|o| o["controller"] == true)
            .and_then(|o| o["kind"].as_str())
            .map(str::to_owned),
        deletion,
    })
}

/// What kube-apiserver's answer to an Eviction means (`pkg/registry/core/pod/storage/eviction.go`):
/// 201 with a Success `Status`; 404 when the pod is gone; 429 TooManyRequests when a budget allows
/// no disruption, its `DisruptionBudget` cause naming the budget; anything else is a failure,
/// described by the `Status` message.
fn eviction_of(answer: Result<Value, KubeError>) -> Eviction {
    match answer {
        Ok(a) if a["status"] != "Failure" => Eviction::Evicted,
        // A success status with a Failure body: no real server sends one.
        Ok(a) => Eviction::Failed(ApiError::Status {
            code: u16::try_from(a["code"].as_u64().unwrap_or(0)).unwrap_or(0),
            message: a["message"].as_str().unwrap_or_default().to_owned(),
        }),
        Err(KubeError::NotFound { .. }) => Eviction::Gone,
        Err(KubeError::Status {
            code: 429,
            message,
            causes,
            ..
        }) => {
            let budget = causes
                .iter()
                .filter(|(reason, _)| reason == "DisruptionBudget")
                .find_map(|(_, m)| drain::budget_in_cause(m))
                .map(str::to_owned);
            // The causes as Cluster API shows them: after the message.
            let mut text = message;
            for (_, c) in causes.iter().filter(|(_, m)| !m.is_empty()) {
                text.push(' ');
                text.push_str(c);
            }
            Eviction::Blocked(Blocked {
                budget,
                message: text,
            })
        }
        Err(e) => Eviction::Failed(e.into()),
    }
}

#[cfg(test)]
mod tests;
