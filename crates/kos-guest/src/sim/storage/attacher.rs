//! The attach-detach controller (a VolumeAttachment per volume and node a scheduled pod needs) and
//! external-attacher (ControllerPublish/Unpublish behind its finalizer).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kos_csi::csi;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::controllers::*;
use super::world::*;

impl Loop {
    /// The (volume, node) pairs scheduled pods need attached: handle → pv name, by attachment name.
    pub(super) fn wanted_attachments(
        &self,
        w: &World,
    ) -> BTreeMap<String, (String, String, String)> {
        let mut wanted = BTreeMap::new();
        for pod in &w.pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            if terminal(pod) {
                continue;
            }
            let ns = ns_of(&pod.metadata);
            for (claim, _) in claims_of(pod) {
                let Some(pv) = w.pvc(&ns, &claim).and_then(|c| w.bound_pv(c)) else {
                    continue;
                };
                let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
                    continue;
                };
                if csi.driver != self.driver || !w.attach_required(&csi.driver) {
                    continue;
                }
                wanted.insert(
                    attachment_name(&csi.volume_handle, &csi.driver, &node),
                    (
                        name_of(&pv.metadata),
                        node.clone(),
                        csi.volume_handle.clone(),
                    ),
                );
            }
        }
        wanted
    }

    pub(super) async fn attach_detach(&mut self, w: &World) {
        let wanted = self.wanted_attachments(w);
        let vas = Api::<VolumeAttachment>::all(self.attachdetach.clone());
        for (name, (pv, node, _)) in &wanted {
            if w.attachments.iter().any(|a| name_of(&a.metadata) == *name) {
                continue;
            }
            let va: Result<VolumeAttachment, _> = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "attacher": self.driver,
                    "nodeName": node,
                    "source": {"persistentVolumeName": pv},
                },
            }));
            if let Ok(va) = va
                && let Err(e) = vas.create(&PostParams::default(), &va).await
            {
                tracing::debug!(attachment = name, "{e}");
            }
        }
        for va in &w.attachments {
            let name = name_of(&va.metadata);
            if va.spec.attacher != self.driver
                || wanted.contains_key(&name)
                || va.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            // Detached only once the node's kubelet no longer uses it.
            let handle = va
                .spec
                .source
                .persistent_volume_name
                .as_deref()
                .and_then(|p| w.pv(p))
                .and_then(|p| p.spec.as_ref()?.csi.as_ref())
                .map(|c| c.volume_handle.clone());
            let in_use = handle.is_some_and(|h| {
                let unique = format!("kubernetes.io/csi/{}^{h}", self.driver);
                w.node(&va.spec.node_name)
                    .and_then(|n| n.status.as_ref()?.volumes_in_use.as_ref())
                    .is_some_and(|v| v.contains(&unique))
            });
            if in_use {
                continue;
            }
            if let Err(e) = vas.delete(&name, &Default::default()).await {
                tracing::debug!(attachment = name, "{e}");
            }
        }
    }

    pub(super) async fn attach(&mut self, w: &World) {
        let finalizer = attacher_finalizer(&self.driver);
        let vas = Api::<VolumeAttachment>::all(self.sidecar.clone());
        let pvs = Api::<PersistentVolume>::all(self.sidecar.clone());
        for va in &w.attachments {
            if va.spec.attacher != self.driver {
                continue;
            }
            let name = name_of(&va.metadata);
            let key = format!("attach/{name}");
            if !self.due(&key) {
                continue;
            }
            let has_finalizer = va
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| *f == finalizer);
            let pv = va
                .spec
                .source
                .persistent_volume_name
                .as_deref()
                .and_then(|p| w.pv(p));
            let handle = pv
                .and_then(|p| p.spec.as_ref()?.csi.as_ref())
                .map(|c| c.volume_handle.clone());
            let node_id = w
                .node_id(&va.spec.node_name, &self.driver)
                .map(|(id, _)| id);
            if va.metadata.deletion_timestamp.is_some() {
                if !has_finalizer {
                    continue;
                }
                if let (Some(handle), Some(node_id)) = (handle.clone(), node_id.clone()) {
                    let Some(controller) = self.controller.as_mut() else {
                        return;
                    };
                    let r = controller
                        .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
                            volume_id: handle,
                            node_id,
                            ..csi::ControllerUnpublishVolumeRequest::default()
                        })
                        .await;
                    if let Err(s) = r {
                        self.failed(&key);
                        let patch = json!({"status": {"attached": true, "detachError": {
                            "time": now_time(), "message": status_text(&s),
                        }}});
                        let _ = vas
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                            .await;
                        continue;
                    }
                }
                self.succeeded(&key);
                let rest: Vec<String> = va
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .filter(|f| **f != finalizer)
                    .cloned()
                    .collect();
                if let Err(e) = vas
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
                    )
                    .await
                {
                    tracing::debug!(attachment = name, "{e}");
                }
                // The volume keeps the attacher's finalizer while another node has it.
                if let Some(pv) = pv {
                    let others = w.attachments.iter().any(|a| {
                        name_of(&a.metadata) != name
                            && a.spec.source.persistent_volume_name == pv.metadata.name
                    });
                    if !others {
                        self.drop_pv_finalizer(&pvs, pv, &finalizer).await;
                    }
                }
                continue;
            }
            if va.status.as_ref().is_some_and(|s| s.attached) {
                continue;
            }
            if !has_finalizer {
                let mut f: Vec<String> = va.metadata.finalizers.clone().unwrap_or_default();
                f.push(finalizer.clone());
                if let Err(e) = vas
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": f}})),
                    )
                    .await
                {
                    tracing::debug!(attachment = name, "{e}");
                    continue;
                }
            }
            let Some(pv) = pv else {
                continue;
            };
            if !pv
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| *f == finalizer)
            {
                let mut f: Vec<String> = pv.metadata.finalizers.clone().unwrap_or_default();
                f.push(finalizer.clone());
                if let Err(e) = pvs
                    .patch(
                        &name_of(&pv.metadata),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": f}})),
                    )
                    .await
                {
                    tracing::debug!(pv = ?pv.metadata.name, "{e}");
                    continue;
                }
            }
            let result = match (handle, node_id) {
                (Some(handle), Some(node_id)) => {
                    let csi_src = pv.spec.as_ref().and_then(|s| s.csi.clone());
                    let req = csi::ControllerPublishVolumeRequest {
                        volume_id: handle,
                        node_id,
                        volume_capability: pv_capability(pv),
                        readonly: csi_src.as_ref().and_then(|c| c.read_only).unwrap_or(false),
                        volume_context: csi_src
                            .and_then(|c| c.volume_attributes)
                            .unwrap_or_default()
                            .into_iter()
                            .collect(),
                        ..csi::ControllerPublishVolumeRequest::default()
                    };
                    match self.controller.as_mut() {
                        Some(c) => c
                            .controller_publish_volume(req)
                            .await
                            .map(|r| r.into_inner().publish_context)
                            .map_err(|s| status_text(&s)),
                        None => return,
                    }
                }
                (None, _) => Err("the volume is not a CSI volume".to_owned()),
                (_, None) => Err(format!(
                    "CSINode {} does not contain driver {}",
                    va.spec.node_name, self.driver
                )),
            };
            let patch = match result {
                Ok(ctx) => {
                    self.succeeded(&key);
                    json!({"status": {"attached": true, "attachmentMetadata": ctx, "attachError": null}})
                }
                Err(msg) => {
                    self.failed(&key);
                    json!({"status": {"attached": false, "attachError": {"time": now_time(), "message": msg}}})
                }
            };
            if let Err(e) = vas
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                tracing::debug!(attachment = name, "{e}");
            }
        }
    }

    pub(super) async fn drop_pv_finalizer(
        &self,
        pvs: &Api<PersistentVolume>,
        pv: &PersistentVolume,
        finalizer: &str,
    ) {
        let rest: Vec<String> = pv
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != finalizer)
            .cloned()
            .collect();
        if rest.len() == pv.metadata.finalizers.as_ref().map_or(0, Vec::len) {
            return;
        }
        if let Err(e) = pvs
            .patch(
                &name_of(&pv.metadata),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
            )
            .await
        {
            tracing::debug!("{e}");
        }
    }
}
