//! kube-controller-manager's PV binder: hands a claim to its class's external provisioner, binds a
//! claim and the volume made for it both ways, and releases a volume whose claim is gone. It acts
//! as `kube-system/persistent-volume-binder`, whose role allows updates of claims and volumes (and
//! of their status) but no patches: every write is a read-modify-write update, as upstream's
//! controller makes them (a conflict waits for the next pass).

use super::controllers::By;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::PostParams;

use super::controllers::*;
use super::world::*;

impl Loop {
    pub(super) async fn binder(&mut self, w: &World) {
        let binder = self.binder.clone();
        let pvcs = |ns: &str| Api::<PersistentVolumeClaim>::namespaced(binder.clone(), ns);
        let pvs = Api::<PersistentVolume>::all(self.binder.clone());
        let pp = PostParams::default();
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
                if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
                    let mut bound = pv.clone();
                    bound.status.get_or_insert_default().phase = Some("Bound".into());
                    if let Err(e) = pvs.replace_status(&pv_name, &pp, &bound).await {
                        tracing::debug!(pv = pv_name, "binding: {e}");
                        continue;
                    }
                }
                let mut claim = pvc.clone();
                if spec.volume_name.is_none() {
                    let annotations = claim.metadata.annotations.get_or_insert_default();
                    annotations.insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
                    annotations.insert("pv.kubernetes.io/bound-by-controller".into(), "yes".into());
                    claim.spec.get_or_insert_default().volume_name = Some(pv_name.clone());
                    match pvcs(&ns).replace(&name, &pp, &claim).await {
                        Ok(c) => claim = c,
                        Err(e) => {
                            tracing::debug!(pvc = name, "binding: {e}");
                            continue;
                        }
                    }
                }
                if phase.as_deref() != Some("Bound") {
                    let pv_spec = pv.spec.clone().unwrap_or_default();
                    let status = claim.status.get_or_insert_default();
                    status.phase = Some("Bound".into());
                    status.access_modes = pv_spec.access_modes;
                    status.capacity = pv_spec.capacity;
                    if let Err(e) = pvcs(&ns).replace_status(&name, &pp, &claim).await {
                        tracing::debug!(pvc = name, "binding: {e}");
                    }
                }
                continue;
            }
            if spec.volume_name.is_some() {
                continue;
            }
            let mut claim = pvc.clone();
            if phase.is_none() {
                claim.status.get_or_insert_default().phase = Some("Pending".into());
                match pvcs(&ns).replace_status(&name, &pp, &claim).await {
                    Ok(c) => claim = c,
                    Err(e) => tracing::debug!(pvc = name, "{e}"),
                }
            }
            let Some(class) = spec.storage_class_name.as_deref().and_then(|c| w.class(c)) else {
                continue;
            };
            if class.provisioner == "kubernetes.io/no-provisioner" {
                continue;
            }
            if ann(m, STORAGE_PROVISIONER) != Some(class.provisioner.as_str()) {
                let annotations = claim.metadata.annotations.get_or_insert_default();
                annotations.insert(STORAGE_PROVISIONER.into(), class.provisioner.clone());
                annotations.insert(BETA_STORAGE_PROVISIONER.into(), class.provisioner.clone());
                if let Err(e) = pvcs(&ns).replace(&name, &pp, &claim).await {
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
                By::Binder,
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
            {
                let mut released = pv.clone();
                released.status.get_or_insert_default().phase = Some("Released".into());
                if let Err(e) = pvs
                    .replace_status(&name_of(&pv.metadata), &pp, &released)
                    .await
                {
                    tracing::debug!("releasing: {e}");
                }
            }
        }
    }
}
