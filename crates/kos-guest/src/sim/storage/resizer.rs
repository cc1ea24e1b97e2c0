//! external-resizer: ControllerExpandVolume when a bound claim asks for more, the volume's and the
//! claim's sizes after it.

use super::controllers::By;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kos_csi::csi;
use kos_csi::csi::node_client::NodeClient;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tonic::transport::Channel;

use super::controllers::*;
use super::world::*;

impl Loop {
    pub(super) async fn resize(&mut self, w: &World) {
        for pvc in &w.pvcs {
            let Some(pv) = w.bound_pv(pvc) else {
                continue;
            };
            let Some(src) = pv.spec.as_ref().and_then(|s| s.csi.clone()) else {
                continue;
            };
            if src.driver != self.driver {
                continue;
            }
            let m = &pvc.metadata;
            let want = storage_of(
                pvc.spec
                    .as_ref()
                    .and_then(|s| s.resources.as_ref())
                    .and_then(|r| r.requests.as_ref()),
            );
            let pv_size = storage_of(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
            let (Some(want), Some(pv_size)) = (want, pv_size) else {
                continue;
            };
            if want <= pv_size {
                continue;
            }
            let key = format!("resize/{}", m.uid.clone().unwrap_or_default());
            if !self.due(&key) {
                continue;
            }
            let (ns, name) = (ns_of(m), name_of(m));
            let pvcs = Api::<PersistentVolumeClaim>::namespaced(self.sidecar.clone(), &ns);
            let component = format!("external-resizer {}", self.driver);
            let _ = pvcs
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                        "allocatedResources": {"storage": quantity(want)},
                        "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
                        "conditions": [{"type": "Resizing", "status": "True", "lastTransitionTime": now_time()}],
                    }})),
                )
                .await;
            self.event(
                By::Sidecar,
                "PersistentVolumeClaim",
                m,
                false,
                "Resizing",
                format!(
                    "External resizer is resizing volume {}",
                    name_of(&pv.metadata)
                ),
                &component,
            )
            .await;
            let Some(controller) = self.controller.as_mut() else {
                return;
            };
            let r = controller
                .controller_expand_volume(csi::ControllerExpandVolumeRequest {
                    volume_id: src.volume_handle.clone(),
                    capacity_range: Some(csi::CapacityRange {
                        required_bytes: want,
                        limit_bytes: 0,
                    }),
                    volume_capability: pv_capability(pv),
                    ..csi::ControllerExpandVolumeRequest::default()
                })
                .await;
            let resp = match r {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    self.failed(&key);
                    self.event(
                        By::Sidecar,
                        "PersistentVolumeClaim",
                        m,
                        true,
                        "VolumeResizeFailed",
                        format!(
                            "resize volume \"{}\" by resizer \"{}\" failed: {}",
                            name_of(&pv.metadata),
                            self.driver,
                            status_text(&s)
                        ),
                        &component,
                    )
                    .await;
                    continue;
                }
            };
            self.succeeded(&key);
            let size = resp.capacity_bytes.max(want);
            let pvs = Api::<PersistentVolume>::all(self.sidecar.clone());
            if let Err(e) = pvs
                .patch(
                    &name_of(&pv.metadata),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"capacity": {"storage": quantity(size)}}})),
                )
                .await
            {
                tracing::debug!("resize: {e}");
                continue;
            }
            let status = if resp.node_expansion_required {
                json!({"status": {
                    "allocatedResourceStatuses": {"storage": "NodeResizePending"},
                    "conditions": [{"type": "FileSystemResizePending", "status": "True", "lastTransitionTime": now_time(),
                        "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node."}],
                }})
            } else {
                json!({"status": {
                    "capacity": {"storage": quantity(size)},
                    "allocatedResourceStatuses": null,
                    "conditions": null,
                }})
            };
            let _ = pvcs
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await;
            self.event(
                By::Sidecar,
                "PersistentVolumeClaim",
                m,
                false,
                if resp.node_expansion_required {
                    "FileSystemResizeRequired"
                } else {
                    "VolumeResizeSuccessful"
                },
                if resp.node_expansion_required {
                    "Require file system resize of volume on node".to_owned()
                } else {
                    "Resize volume succeeded".to_owned()
                },
                &component,
            )
            .await;
        }
    }

    /// The kubelet finishes an expansion the driver left to the node, where the volume is staged.
    pub(super) async fn node_expand(
        &mut self,
        w: &World,
        client: &mut NodeClient<Channel>,
        node: &str,
        kubelet: &kube::Client,
    ) {
        for pvc in &w.pvcs {
            let pending = pvc
                .status
                .as_ref()
                .and_then(|s| s.allocated_resource_statuses.as_ref())
                .and_then(|s| s.get("storage"))
                .is_some_and(|s| s == "NodeResizePending");
            if !pending {
                continue;
            }
            let Some(pv) = w.bound_pv(pvc) else {
                continue;
            };
            let Some(src) = pv.spec.as_ref().and_then(|s| s.csi.clone()) else {
                continue;
            };
            let Some(staging) = self
                .staged
                .get(&(node.to_owned(), src.volume_handle.clone()))
                .cloned()
            else {
                continue;
            };
            let Some(target) = self
                .published
                .iter()
                .find(|((n, _), p)| n == node && p.handle == src.volume_handle)
                .map(|((_, t), _)| t.clone())
            else {
                continue;
            };
            let Some(size) = storage_of(pv.spec.as_ref().and_then(|s| s.capacity.as_ref())) else {
                continue;
            };
            let r = client
                .node_expand_volume(csi::NodeExpandVolumeRequest {
                    volume_id: src.volume_handle.clone(),
                    volume_path: target,
                    staging_target_path: staging,
                    capacity_range: Some(csi::CapacityRange {
                        required_bytes: size,
                        limit_bytes: 0,
                    }),
                    volume_capability: pv_capability(pv),
                    ..csi::NodeExpandVolumeRequest::default()
                })
                .await;
            let m = &pvc.metadata;
            match r {
                Ok(_) => {
                    let status = json!({"status": {
                        "capacity": {"storage": quantity(size)},
                        "allocatedResourceStatuses": null,
                        "conditions": null,
                    }});
                    // As the node: NodeRestriction lets it change the claim's capacity and
                    // conditions alone.
                    let _ = Api::<PersistentVolumeClaim>::namespaced(kubelet.clone(), &ns_of(m))
                        .patch_status(&name_of(m), &PatchParams::default(), &Patch::Merge(status))
                        .await;
                }
                Err(s) => {
                    let pv_name = name_of(&pv.metadata);
                    self.event(
                        By::Kubelet(kubelet),
                        "PersistentVolumeClaim",
                        m,
                        true,
                        "VolumeResizeFailed",
                        format!(
                            "MountVolume.NodeExpandVolume failed for volume \"{pv_name}\" : {}",
                            status_text(&s)
                        ),
                        "kubelet",
                    )
                    .await;
                }
            }
        }
    }
}
