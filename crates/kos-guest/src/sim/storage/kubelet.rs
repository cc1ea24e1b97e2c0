//! The kubelet's side of storage: the node plugin's registration (NodeGetInfo into the node's
//! CSINode and topology labels) and the volume manager (NodeStage once per node, NodePublish per
//! pod, the pod Running once mounted, unpublish and unstage when it is gone, `volumesInUse`,
//! NodeExpandVolume), each node's as that node's kubelet (`system:node:<name>`).

use super::controllers::By;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kos_csi::csi;
use kos_csi::csi::node_client::NodeClient;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tonic::transport::Channel;

use super::lock;

use super::controllers::*;
use super::world::*;

impl Loop {
    /// The kubelet's plugin registration: NodeGetInfo, then the driver in the node's CSINode and
    /// its topology segments as the Node's labels.
    pub(super) async fn register_nodes(&mut self) {
        let nodes: Vec<(String, PathBuf, kube::Client)> = lock(&self.nodes)
            .iter()
            .map(|(n, h)| (n.clone(), h.socket.clone(), h.kubelet.clone()))
            .collect();
        self.registered
            .retain(|n, s| nodes.iter().any(|(m, t, _)| m == n && t == s));
        self.staged
            .retain(|(n, _), _| nodes.iter().any(|(m, _, _)| m == n));
        self.published
            .retain(|(n, _), _| nodes.iter().any(|(m, _, _)| m == n));
        for (node, socket, kubelet) in nodes {
            if self.registered.contains_key(&node) || !socket.exists() {
                continue;
            }
            match self.register(&node, &socket, &kubelet).await {
                Ok(()) => {
                    self.registered.insert(node, socket);
                }
                Err(e) => tracing::debug!(node, "CSI node plugin not registered yet: {e}"),
            }
        }
    }

    /// As the node's kubelet (`kubelet`'s client): its Node and its CSINode are its own.
    pub(super) async fn register(
        &self,
        node: &str,
        socket: &std::path::Path,
        kubelet: &kube::Client,
    ) -> Res<()> {
        let mut client = NodeClient::new(channel(socket.to_owned()).await?);
        let info = client
            .node_get_info(csi::NodeGetInfoRequest {})
            .await?
            .into_inner();
        let segments = info
            .accessible_topology
            .map(|t| t.segments)
            .unwrap_or_default();
        let nodes = Api::<Node>::all(kubelet.clone());
        let n = nodes.get(node).await?;
        let labels = labels_of(&n);
        if segments.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            nodes
                .patch(
                    node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": segments}})),
                )
                .await?;
        }
        let mut entry = json!({
            "name": self.driver,
            "nodeID": info.node_id,
            "topologyKeys": segments.keys().collect::<Vec<_>>(),
        });
        if info.max_volumes_per_node > 0 {
            entry["allocatable"] = json!({"count": info.max_volumes_per_node});
        }
        let csinodes = Api::<CSINode>::all(kubelet.clone());
        match csinodes.get_opt(node).await? {
            None => {
                let obj: CSINode = serde_json::from_value(json!({
                    "metadata": {
                        "name": node,
                        "ownerReferences": [{
                            "apiVersion": "v1", "kind": "Node", "name": node,
                            "uid": n.metadata.uid.clone().unwrap_or_default(),
                        }],
                    },
                    "spec": {"drivers": [entry]},
                }))?;
                csinodes.create(&PostParams::default(), &obj).await?;
            }
            Some(mut c) => {
                let mut drivers: Vec<Value> = c
                    .spec
                    .drivers
                    .iter()
                    .filter(|d| d.name != self.driver)
                    .map(serde_json::to_value)
                    .collect::<Result<_, _>>()?;
                drivers.push(entry);
                c.spec.drivers = serde_json::from_value(Value::Array(drivers))?;
                csinodes.replace(node, &PostParams::default(), &c).await?;
            }
        }
        Ok(())
    }

    pub(super) async fn kubelet(&mut self, w: &World) {
        let nodes: BTreeMap<String, super::NodeHandle> = lock(&self.nodes).clone();
        for (node, handle) in &nodes {
            if !self.registered.contains_key(node) {
                continue;
            }
            let Ok(ch) = channel(handle.socket.clone()).await else {
                continue;
            };
            let mut client = NodeClient::new(ch);
            let mut live: BTreeSet<String> = BTreeSet::new();
            let mut in_use: BTreeSet<String> = BTreeSet::new();
            for pod in &w.pods {
                let spec = match &pod.spec {
                    Some(s) if s.node_name.as_deref() == Some(node.as_str()) => s,
                    _ => continue,
                };
                let claims = claims_of(pod);
                if claims.is_empty() || terminal(pod) {
                    continue;
                }
                let _ = spec;
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                live.insert(uid.clone());
                let mut ready = true;
                for (claim, read_only) in &claims {
                    match self
                        .mount(
                            w,
                            &mut client,
                            handle,
                            node,
                            pod,
                            claim,
                            *read_only,
                            &mut in_use,
                        )
                        .await
                    {
                        Ok(true) => {}
                        Ok(false) => ready = false,
                        Err(why) => {
                            ready = false;
                            self.event(
                                By::Kubelet(&handle.kubelet),
                                "Pod",
                                &pod.metadata,
                                true,
                                "FailedMount",
                                format!("MountVolume.SetUp failed for volume \"{claim}\" : {why}"),
                                "kubelet",
                            )
                            .await;
                        }
                    }
                }
                if ready {
                    self.running(pod, node, &handle.kubelet).await;
                }
            }
            // What no live pod uses any more is unpublished, then unstaged.
            let gone: Vec<(String, String)> = self
                .published
                .iter()
                .filter(|((n, _), p)| n == node && !live.contains(&p.pod_uid))
                .map(|(k, _)| k.clone())
                .collect();
            for key in gone {
                let r = client
                    .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                        volume_id: self.published[&key].handle.clone(),
                        target_path: key.1.clone(),
                    })
                    .await;
                match r {
                    Ok(_) => {
                        self.published.remove(&key);
                    }
                    Err(s) => tracing::debug!(target = key.1, "unpublish: {}", status_text(&s)),
                }
            }
            let unused: Vec<(String, String)> = self
                .staged
                .keys()
                .filter(|(n, h)| {
                    n == node
                        && !self
                            .published
                            .iter()
                            .any(|((pn, _), p)| pn == node && p.handle == *h)
                })
                .cloned()
                .collect();
            for key in unused {
                let r = client
                    .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                        volume_id: key.1.clone(),
                        staging_target_path: self.staged[&key].clone(),
                    })
                    .await;
                match r {
                    Ok(_) => {
                        self.staged.remove(&key);
                    }
                    Err(s) => tracing::debug!(volume = key.1, "unstage: {}", status_text(&s)),
                }
            }
            for (n, h) in self.staged.keys() {
                if n == node {
                    in_use.insert(format!("kubernetes.io/csi/{}^{h}", self.driver));
                }
            }
            self.volumes_in_use(w, node, in_use, &handle.kubelet).await;
            self.node_expand(w, &mut client, node, &handle.kubelet)
                .await;
        }
    }

    /// Stages and publishes one claim of a pod: whether it is mounted.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn mount(
        &mut self,
        w: &World,
        client: &mut NodeClient<Channel>,
        handle: &super::NodeHandle,
        node: &str,
        pod: &Pod,
        claim: &str,
        read_only: bool,
        in_use: &mut BTreeSet<String>,
    ) -> Result<bool, String> {
        let ns = ns_of(&pod.metadata);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(pv) = w.pvc(&ns, claim).and_then(|c| w.bound_pv(c)) else {
            return Ok(false);
        };
        let Some(src) = pv.spec.as_ref().and_then(|s| s.csi.clone()) else {
            return Ok(false);
        };
        if src.driver != self.driver {
            return Ok(false);
        }
        let pv_name = name_of(&pv.metadata);
        in_use.insert(format!(
            "kubernetes.io/csi/{}^{}",
            self.driver, src.volume_handle
        ));
        let target = target_path(&uid, &pv_name);
        if self
            .published
            .contains_key(&(node.to_owned(), target.clone()))
        {
            return Ok(true);
        }
        // The kubelet reads the claim and its volume as the node: the Node authorizer lets it
        // only along the pod bound to it.
        Api::<PersistentVolumeClaim>::namespaced(handle.kubelet.clone(), &ns)
            .get(claim)
            .await
            .map_err(|e| e.to_string())?;
        Api::<PersistentVolume>::all(handle.kubelet.clone())
            .get(&pv_name)
            .await
            .map_err(|e| e.to_string())?;
        // Attached first (the attach-detach controller's VolumeAttachment).
        let mut publish_context = BTreeMap::new();
        if w.attach_required(&src.driver) {
            let va = attachment_name(&src.volume_handle, &src.driver, node);
            match w.attachments.iter().find(|a| name_of(&a.metadata) == va) {
                Some(a) if a.status.as_ref().is_some_and(|s| s.attached) => {
                    publish_context = a
                        .status
                        .as_ref()
                        .and_then(|s| s.attachment_metadata.clone())
                        .unwrap_or_default();
                }
                _ => return Ok(false),
            }
        }
        let capability = pv_capability(pv).ok_or("the volume has no access mode")?;
        let context: BTreeMap<String, String> = src.volume_attributes.clone().unwrap_or_default();
        let staging = staging_path(&src.driver, &src.volume_handle);
        let staged_key = (node.to_owned(), src.volume_handle.clone());
        if let std::collections::btree_map::Entry::Vacant(slot) = self.staged.entry(staged_key) {
            handle.kernel.add_dir(std::path::Path::new(&staging));
            client
                .node_stage_volume(csi::NodeStageVolumeRequest {
                    volume_id: src.volume_handle.clone(),
                    publish_context: publish_context.clone().into_iter().collect(),
                    staging_target_path: staging.clone(),
                    volume_capability: Some(capability.clone()),
                    volume_context: context.clone().into_iter().collect(),
                    ..csi::NodeStageVolumeRequest::default()
                })
                .await
                .map_err(|s| status_text(&s))?;
            slot.insert(staging.clone());
        }
        if let Some(parent) = std::path::Path::new(&target).parent() {
            handle.kernel.add_dir(parent);
        }
        client
            .node_publish_volume(csi::NodePublishVolumeRequest {
                volume_id: src.volume_handle.clone(),
                publish_context: publish_context.into_iter().collect(),
                staging_target_path: staging,
                target_path: target.clone(),
                volume_capability: Some(capability),
                readonly: read_only || src.read_only.unwrap_or(false),
                volume_context: context.into_iter().collect(),
                ..csi::NodePublishVolumeRequest::default()
            })
            .await
            .map_err(|s| status_text(&s))?;
        self.published.insert(
            (node.to_owned(), target),
            Published {
                pod_uid: uid,
                handle: src.volume_handle,
            },
        );
        Ok(true)
    }

    /// The pod's containers start once its volumes are mounted.
    pub(super) async fn running(&mut self, pod: &Pod, node: &str, kubelet: &kube::Client) {
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            return;
        }
        let now = now_time();
        let containers: Vec<Value> = pod
            .spec
            .as_ref()
            .map(|s| &s.containers)
            .into_iter()
            .flatten()
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                })
            })
            .collect();
        let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
        let status = json!({"status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
            "containerStatuses": containers,
        }});
        let ns = ns_of(&pod.metadata);
        if let Err(e) = Api::<Pod>::namespaced(kubelet.clone(), &ns)
            .patch_status(
                &name_of(&pod.metadata),
                &PatchParams::default(),
                &Patch::Merge(status),
            )
            .await
        {
            tracing::debug!(node, "pod status: {e}");
        }
    }

    pub(super) async fn volumes_in_use(
        &self,
        w: &World,
        node: &str,
        in_use: BTreeSet<String>,
        kubelet: &kube::Client,
    ) {
        let have: BTreeSet<String> = w
            .node(node)
            .and_then(|n| n.status.as_ref()?.volumes_in_use.clone())
            .unwrap_or_default()
            .into_iter()
            .collect();
        // Other drivers' volumes are not this model's.
        let prefix = format!("kubernetes.io/csi/{}^", self.driver);
        let mut want: BTreeSet<String> = have
            .iter()
            .filter(|v| !v.starts_with(&prefix))
            .cloned()
            .collect();
        want.extend(in_use);
        if want == have {
            return;
        }
        let patch = json!({"status": {"volumesInUse": want}});
        if let Err(e) = Api::<Node>::all(kubelet.clone())
            .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            tracing::debug!(node, "volumesInUse: {e}");
        }
    }
}
