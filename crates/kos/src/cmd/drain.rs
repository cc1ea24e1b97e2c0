//! The CLI side of [`kos_lifecycle::drain`]: the drain's [`NodeApi`] over kos's JSON client of the
//! cluster's API ([`Kube`], the admin certificate). One request per call and no retries here: the
//! drain loop owns them, a 429 included.

use kos_lifecycle::drain::{
    self, Blocked, DrainError, Drained, Eviction, MIRROR_ANNOTATION, Node, NodeApi, Options, Phase,
    Pod, Ready, UNREACHABLE_TAINT,
};
use serde_json::{Value, json};

use crate::bootstrap::kube::Kube;

/// Drains `node` of the cluster `kube` talks to (see [`drain::drain`]); `say` gets one line per step.
pub(crate) async fn drain_node(
    kube: &Kube,
    node: &str,
    opts: Options,
    say: &mut dyn FnMut(&str),
) -> Result<Drained, DrainError> {
    drain::drain(&Api(kube), node, opts, say).await
}

struct Api<'a>(&'a Kube);

fn node_path(name: &str) -> String {
    format!("/api/v1/nodes/{name}")
}

impl NodeApi for Api<'_> {
    async fn node(&self, name: &str) -> Result<Option<Node>, String> {
        Ok(self
            .0
            .get_json_opt(&node_path(name))
            .await?
            .map(|n| node_of(name, &n)))
    }

    async fn cordon(&self, name: &str) -> Result<(), String> {
        self.0
            .merge_patch(&node_path(name), &json!({"spec": {"unschedulable": true}}))
            .await
    }

    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, String> {
        // Node names are DNS subdomains: nothing in them needs escaping in a query.
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
            .filter_map(pod_of)
            .collect())
    }

    async fn evict(&self, namespace: &str, name: &str) -> Eviction {
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        });
        match self
            .0
            .post_json(
                &format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction"),
                &body,
            )
            .await
        {
            Ok((code, answer)) => eviction_of(code, &answer),
            Err(e) => Eviction::Failed(e),
        }
    }

    async fn delete_node(&self, name: &str) -> Result<(), String> {
        self.0.delete(&node_path(name)).await
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
fn eviction_of(code: u16, answer: &Value) -> Eviction {
    let message = answer["message"].as_str().unwrap_or_default();
    let causes: Vec<&Value> = answer
        .pointer("/details/causes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    match code {
        200 | 201 if answer["status"] != "Failure" => Eviction::Evicted,
        404 => Eviction::Gone,
        429 => {
            let budget = causes
                .iter()
                .filter(|c| c["reason"] == "DisruptionBudget")
                .find_map(|c| c["message"].as_str().and_then(drain::budget_in_cause))
                .map(str::to_owned);
            // The causes as Cluster API shows them: after the message.
            let mut text = message.to_owned();
            for c in causes.iter().filter_map(|c| c["message"].as_str()) {
                text.push(' ');
                text.push_str(c);
            }
            Eviction::Blocked(Blocked {
                budget,
                message: text,
            })
        }
        _ if message.is_empty() => Eviction::Failed(format!("HTTP {code}")),
        _ => Eviction::Failed(format!("HTTP {code}: {message}")),
    }
}

#[cfg(test)]
mod tests;
