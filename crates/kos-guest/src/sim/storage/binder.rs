//! kube-controller-manager's PV binder: hands a claim to its class's external provisioner, binds a
//! claim and the volume made for it both ways, and releases a volume whose claim is gone.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::controllers::*;
use super::world::*;

impl Loop {
    pub(super) async fn binder(&mut self, w: &World) {
        let admin = self.admin.clone();
        let pvcs = |ns: &str| Api::<PersistentVolumeClaim>::namespaced(admin.clone(), ns);
        for pvc in &w.pvcs {
            let m = &pvc.metadata;
            if m.deletion_timestamp.is_some() {
                continue;
            }
            let (ns, name) = (ns_of(m), name_of(m));
            let spec = pvc.spec.clone().unwrap_or_default();
            let phase = pvc.status.as_ref().and_then(|s| s.phase.clone());
            // A volume made for this claim: bind both ways.
            let pv = match spec.volume_name.as_deref() {
                Some(v) => w.pv(v),
                None => w.pvs.iter().find(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.claim_ref.as_ref())
                        .is_some_and(|c| c.uid == m.uid)
                }),
            };
            if let Some(pv) = pv {
                let pv_name = name_of(&pv.metadata);
                let claimed = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .is_some_and(|c| c.uid == m.uid);
                if !claimed {
                    continue;
                }
                if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound")
                    && let Err(e) = Api::<PersistentVolume>::all(self.admin.clone())
                        .patch_status(
                            &pv_name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
                        )
                        .await
                {
                    tracing::debug!(pv = pv_name, "binding: {e}");
                    continue;
                }
                if spec.volume_name.is_none()
                    && let Err(e) = pvcs(&ns)
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({
                                "metadata": {"annotations": {
                                    "pv.kubernetes.io/bind-completed": "yes",
                                    "pv.kubernetes.io/bound-by-controller": "yes",
                                }},
                                "spec": {"volumeName": pv_name},
                            })),
                        )
                        .await
                {
                    tracing::debug!(pvc = name, "binding: {e}");
                    continue;
                }
                if phase.as_deref() != Some("Bound") {
                    let pv_spec = pv.spec.clone().unwrap_or_default();
                    let status = json!({"status": {
                        "phase": "Bound",
                        "accessModes": pv_spec.access_modes,
                        "capacity": pv_spec.capacity,
                    }});
                    if let Err(e) = pvcs(&ns)
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                        .await
                    {
                        tracing::debug!(pvc = name, "binding: {e}");
                    }
                }
                continue;
            }
            if spec.volume_name.is_some() {
                continue;
            }
            if phase.is_none()
                && let Err(e) = pvcs(&ns)
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"phase": "Pending"}})),
                    )
                    .await
            {
                tracing::debug!(pvc = name, "{e}");
            }
            let Some(class) = spec.storage_class_name.as_deref().and_then(|c| w.class(c)) else {
                continue;
            };
            if class.provisioner == "kubernetes.io/no-provisioner" {
                continue;
            }
            if ann(m, STORAGE_PROVISIONER) != Some(class.provisioner.as_str()) {
                let patch = json!({"metadata": {"annotations": {
                    STORAGE_PROVISIONER: class.provisioner,
                    BETA_STORAGE_PROVISIONER: class.provisioner,
                }}});
                if let Err(e) = pvcs(&ns)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    tracing::debug!(pvc = name, "{e}");
                }
            }
            let waiting = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
                && ann(m, SELECTED_NODE).is_none();
            let (reason, message) = if waiting {
                (
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding".to_owned(),
                )
            } else {
                (
                    "ExternalProvisioning",
                    format!(
                        "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
                        class.provisioner
                    ),
                )
            };
            self.event(
                false,
                "PersistentVolumeClaim",
                m,
                false,
                reason,
                message,
                "persistentvolume-controller",
            )
            .await;
        }
        // Volumes whose claim is gone are released.
        for pv in &w.pvs {
            let Some(claim) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
                continue;
            };
            let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
            let exists = w.pvcs.iter().any(|c| c.metadata.uid == claim.uid);
            if !exists
                && matches!(phase, Some("Bound" | "Available" | "Pending") | None)
                && claim.uid.is_some()
                && let Err(e) = Api::<PersistentVolume>::all(self.admin.clone())
                    .patch_status(
                        &name_of(&pv.metadata),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"phase": "Released"}})),
                    )
                    .await
            {
                tracing::debug!("releasing: {e}");
            }
        }
    }
}
