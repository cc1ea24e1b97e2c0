//! The scheduler's part in storage: a pod using claims goes to a node every bound volume's node
//! affinity allows; a claim waiting for its first consumer gets the node chosen.

use super::controllers::By;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::controllers::*;
use super::world::*;

impl Loop {
    pub(super) async fn schedule(&mut self, w: &World) {
        for pod in &w.pods {
            let spec = match &pod.spec {
                Some(s) if s.node_name.is_none() => s,
                _ => continue,
            };
            let m = &pod.metadata;
            let claims = claims_of(pod);
            if claims.is_empty() || m.deletion_timestamp.is_some() || terminal(pod) {
                continue;
            }
            if spec
                .scheduler_name
                .as_deref()
                .is_some_and(|s| s != "default-scheduler")
            {
                continue;
            }
            let ns = ns_of(m);
            let mut problem = None;
            let mut bound = Vec::new();
            let mut waiting = Vec::new();
            for (claim, _) in &claims {
                match w.pvc(&ns, claim) {
                    None => problem = Some(format!("persistentvolumeclaim \"{claim}\" not found")),
                    Some(c) if c.metadata.deletion_timestamp.is_some() => {
                        problem = Some(format!(
                            "persistentvolumeclaim \"{claim}\" is being deleted"
                        ));
                    }
                    Some(c) => match w.bound_pv(c) {
                        Some(pv) => bound.push(pv),
                        None => {
                            let class = c
                                .spec
                                .as_ref()
                                .and_then(|s| s.storage_class_name.as_deref())
                                .and_then(|n| w.class(n));
                            if class.and_then(|c| c.volume_binding_mode.as_deref())
                                == Some("WaitForFirstConsumer")
                            {
                                waiting.push(c);
                            } else {
                                problem =
                                    Some("pod has unbound immediate PersistentVolumeClaims".into());
                            }
                        }
                    },
                }
            }
            let total = w.nodes.len();
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            let mut fits: Vec<&Node> = Vec::new();
            if problem.is_none() {
                for n in &w.nodes {
                    let labels = labels_of(n);
                    let why = if !node_ready(n) {
                        Some("node(s) were not ready")
                    } else if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
                        Some("node(s) were unschedulable")
                    } else if !tolerates(pod, n) {
                        Some("node(s) had untolerated taint")
                    } else if spec
                        .node_selector
                        .iter()
                        .flatten()
                        .any(|(k, v)| labels.get(k) != Some(v))
                    {
                        Some("node(s) didn't match Pod's node affinity/selector")
                    } else if bound.iter().any(|pv| !affinity_allows(pv, &labels)) {
                        Some("node(s) had volume node affinity conflict")
                    } else {
                        None
                    };
                    match why {
                        Some(r) => *reasons.entry(r).or_default() += 1,
                        None => fits.push(n),
                    }
                }
            }
            // A claim waiting for its consumer names the node it chose (or keeps the one named).
            let chosen = waiting
                .iter()
                .find_map(|c| ann(&c.metadata, SELECTED_NODE))
                .and_then(|n| fits.iter().find(|f| name_of(&f.metadata) == n).copied())
                .or_else(|| {
                    fits.iter()
                        .min_by_key(|n| {
                            let name = name_of(&n.metadata);
                            let load = w
                                .pods
                                .iter()
                                .filter(|p| {
                                    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                                        == Some(name.as_str())
                                })
                                .count();
                            (load, name)
                        })
                        .copied()
                });
            let Some(node) = chosen else {
                let message = match problem {
                    Some(p) => format!(
                        "0/{total} nodes are available: {p}. preemption: not eligible due to preemptionPolicy=Never."
                    ),
                    None => {
                        let parts: Vec<String> =
                            reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                        format!("0/{total} nodes are available: {}.", parts.join(", "))
                    }
                };
                let cond = json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastTransitionTime": now_time(),
                }]}});
                let _ = Api::<Pod>::namespaced(self.scheduler.clone(), &ns)
                    .patch_status(&name_of(m), &PatchParams::default(), &Patch::Merge(cond))
                    .await;
                self.event(
                    By::Scheduler,
                    "Pod",
                    m,
                    true,
                    "FailedScheduling",
                    message,
                    "default-scheduler",
                )
                .await;
                continue;
            };
            let node_name = name_of(&node.metadata);
            let mut all_named = true;
            for c in &waiting {
                if ann(&c.metadata, SELECTED_NODE) != Some(node_name.as_str()) {
                    all_named = false;
                    let patch = json!({"metadata": {"annotations": {SELECTED_NODE: node_name}}});
                    if let Err(e) =
                        Api::<PersistentVolumeClaim>::namespaced(self.scheduler.clone(), &ns)
                            .patch(
                                &name_of(&c.metadata),
                                &PatchParams::default(),
                                &Patch::Merge(patch),
                            )
                            .await
                    {
                        tracing::debug!("selected node: {e}");
                    }
                }
            }
            if !waiting.is_empty() || !all_named {
                continue;
            }
            let pods = Api::<Pod>::namespaced(self.scheduler.clone(), &ns);
            // The scheduler's Binding: the API server sets nodeName and PodScheduled.
            let bind = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name_of(m), "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
            });
            if let Err(e) = pods
                .create_subresource::<serde_json::Value, serde_json::Value>(
                    "binding",
                    &name_of(m),
                    &kube::api::PostParams::default(),
                    &bind,
                )
                .await
            {
                tracing::debug!("binding pod: {e}");
                continue;
            }
            self.event(
                By::Scheduler,
                "Pod",
                m,
                false,
                "Scheduled",
                format!("Successfully assigned {ns}/{} to {node_name}", name_of(m)),
                "default-scheduler",
            )
            .await;
        }
    }
}
