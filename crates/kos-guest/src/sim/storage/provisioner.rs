//! external-provisioner: CreateVolume for a claim handed to the driver and a PersistentVolume for
//! it; DeleteVolume for a released volume whose reclaim policy is Delete.

use super::controllers::By;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kos_csi::csi;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::controllers::*;
use super::world::*;

impl Loop {
    pub(super) async fn provision(&mut self, w: &World) {
        let Some(flags) = self.provisioner.clone() else {
            return;
        };
        for pvc in &w.pvcs {
            let m = &pvc.metadata;
            let spec = pvc.spec.clone().unwrap_or_default();
            if m.deletion_timestamp.is_some()
                || spec.volume_name.is_some()
                || ann(m, STORAGE_PROVISIONER) != Some(self.driver.as_str())
            {
                continue;
            }
            let uid = m.uid.clone().unwrap_or_default();
            let pv_name = format!("pvc-{uid}");
            if w.pv(&pv_name).is_some() || self.provisioning.contains(&uid) {
                continue;
            }
            if self.provisioning.len() >= WORKERS {
                return;
            }
            let key = format!("provision/{uid}");
            if !self.due(&key) {
                continue;
            }
            let class_name = spec.storage_class_name.clone().unwrap_or_default();
            let Some(class) = w.class(&class_name) else {
                continue;
            };
            let wffc = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
            let selected = ann(m, SELECTED_NODE).map(str::to_owned);
            if wffc && selected.is_none() {
                continue;
            }
            self.event(
                By::Sidecar,
                "PersistentVolumeClaim",
                m,
                false,
                "Provisioning",
                format!(
                    "External provisioner is provisioning volume for claim \"{}/{}\"",
                    ns_of(m),
                    name_of(m)
                ),
                &format!("{}_csi-provisioner", self.driver),
            )
            .await;
            let request =
                match self.volume_request(w, pvc, class, &flags, &pv_name, selected.as_deref()) {
                    Ok(r) => r,
                    Err(why) => {
                        self.failed(&key);
                        self.provisioning_failed(m, &class_name, why).await;
                        continue;
                    }
                };
            let Some(controller) = self.controller.clone() else {
                return;
            };
            // A worker per claim, as the sidecar's --worker-threads: a slow create holds no one.
            self.provisioning.insert(uid.clone());
            let (sidecar, tx, meta, class_name) = (
                self.sidecar.clone(),
                self.done.clone(),
                m.clone(),
                class_name.clone(),
            );
            tokio::spawn(async move {
                let result = provision_one(controller, sidecar, request).await;
                let _ = tx.send(Done::Provisioned {
                    meta,
                    class: class_name,
                    result,
                });
            });
        }
    }

    /// A claim's worker answered.
    pub(super) async fn provisioned(
        &mut self,
        meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        class: String,
        result: Result<String, String>,
    ) {
        let uid = meta.uid.clone().unwrap_or_default();
        self.provisioning.remove(&uid);
        let key = format!("provision/{uid}");
        match result {
            Ok(pv_name) => {
                self.succeeded(&key);
                self.event(
                    By::Sidecar,
                    "PersistentVolumeClaim",
                    &meta,
                    false,
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {pv_name}"),
                    &format!("{}_csi-provisioner", self.driver),
                )
                .await;
            }
            Err(why) => {
                self.failed(&key);
                self.provisioning_failed(&meta, &class, why).await;
            }
        }
    }

    async fn provisioning_failed(
        &mut self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        class: &str,
        why: String,
    ) {
        self.event(
            By::Sidecar,
            "PersistentVolumeClaim",
            meta,
            true,
            "ProvisioningFailed",
            format!("failed to provision volume with StorageClass \"{class}\": {why}"),
            &format!("{}_csi-provisioner", self.driver),
        )
        .await;
    }

    /// The CreateVolume request for a claim, and what its PersistentVolume will say.
    pub(super) fn volume_request(
        &self,
        w: &World,
        pvc: &PersistentVolumeClaim,
        class: &StorageClass,
        flags: &Provisioner,
        pv_name: &str,
        selected: Option<&str>,
    ) -> Result<VolumeRequest, String> {
        let m = &pvc.metadata;
        let spec = pvc.spec.clone().unwrap_or_default();
        let requested = storage_of(spec.resources.as_ref().and_then(|r| r.requests.as_ref()))
            .ok_or("claim has no storage request")?;
        let params = class.parameters.clone().unwrap_or_default();
        let fs_type = params
            .get("csi.storage.k8s.io/fstype")
            .or_else(|| params.get("fstype"))
            .cloned()
            .unwrap_or_else(|| flags.default_fstype.clone());
        let block = spec.volume_mode.as_deref() == Some("Block");
        let mount_flags = class.mount_options.clone().unwrap_or_default();
        let modes = spec.access_modes.clone().unwrap_or_default();
        let mut caps = Vec::new();
        for mode in &modes {
            caps.push(
                capability(mode, block, if block { "" } else { &fs_type }, &mount_flags)
                    .ok_or_else(|| format!("unsupported access mode {mode}"))?,
            );
        }
        let mut parameters: BTreeMap<String, String> = params
            .iter()
            .filter(|(k, _)| !k.starts_with("csi.storage.k8s.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if flags.extra_create_metadata {
            parameters.insert("csi.storage.k8s.io/pvc/name".into(), name_of(m));
            parameters.insert("csi.storage.k8s.io/pvc/namespace".into(), ns_of(m));
            parameters.insert("csi.storage.k8s.io/pv/name".into(), pv_name.to_owned());
        }
        let accessibility = flags
            .topology
            .then(|| self.requirements(w, class, selected))
            .flatten();
        let content = self.content_source(w, pvc)?;
        let req = csi::CreateVolumeRequest {
            name: pv_name.to_owned(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: requested,
                limit_bytes: 0,
            }),
            volume_capabilities: caps,
            parameters: parameters.into_iter().collect(),
            accessibility_requirements: accessibility,
            volume_content_source: content,
            ..csi::CreateVolumeRequest::default()
        };
        let mut pv = json!({
            "metadata": {
                "name": pv_name,
                "annotations": {PROVISIONED_BY: self.driver},
                "finalizers": [PROVISIONER_FINALIZER],
            },
            "spec": {
                "accessModes": modes,
                "claimRef": {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": ns_of(m), "name": name_of(m), "uid": m.uid,
                    "resourceVersion": m.resource_version,
                },
                "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
                "storageClassName": name_of(&class.metadata),
                "volumeMode": if block { "Block" } else { "Filesystem" },
                "csi": {"driver": self.driver},
            },
        });
        if !block && !fs_type.is_empty() {
            pv["spec"]["csi"]["fsType"] = json!(fs_type);
        }
        if !mount_flags.is_empty() {
            pv["spec"]["mountOptions"] = json!(mount_flags);
        }
        Ok(VolumeRequest {
            request: req,
            requested,
            pv,
            driver: self.driver.clone(),
        })
    }

    /// external-provisioner's topology (not strict): every node's segment of the driver's keys
    /// (or the class's allowed topologies) required, the selected node's preferred first.
    pub(super) fn requirements(
        &self,
        w: &World,
        class: &StorageClass,
        selected: Option<&str>,
    ) -> Option<csi::TopologyRequirement> {
        let segment_of = |node: &str| -> Option<BTreeMap<String, String>> {
            let (_, keys) = w.node_id(node, &self.driver)?;
            let labels = labels_of(w.node(node)?);
            let seg: Option<BTreeMap<String, String>> = keys
                .iter()
                .map(|k| Some((k.clone(), labels.get(k)?.clone())))
                .collect();
            seg.filter(|s| !s.is_empty())
        };
        let mut requisite: Vec<BTreeMap<String, String>> = Vec::new();
        if let Some(allowed) = class.allowed_topologies.as_ref().filter(|a| !a.is_empty()) {
            for term in allowed {
                for e in term.match_label_expressions.iter().flatten() {
                    for v in &e.values {
                        requisite.push(BTreeMap::from([(e.key.clone(), v.clone())]));
                    }
                }
            }
        } else {
            for n in &w.nodes {
                if let Some(s) = segment_of(&name_of(&n.metadata)) {
                    requisite.push(s);
                }
            }
        }
        requisite.sort();
        requisite.dedup();
        if requisite.is_empty() {
            return None;
        }
        let mut preferred = requisite.clone();
        if let Some(first) = selected.and_then(segment_of)
            && let Some(i) = preferred.iter().position(|s| *s == first)
        {
            preferred.rotate_left(i);
        }
        let topo = |s: BTreeMap<String, String>| csi::Topology {
            segments: s.into_iter().collect(),
        };
        Some(csi::TopologyRequirement {
            requisite: requisite.into_iter().map(topo).collect(),
            preferred: preferred.into_iter().map(topo).collect(),
        })
    }

    /// A claim's data source: another claim (a clone); snapshots are not simulated.
    pub(super) fn content_source(
        &self,
        w: &World,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Option<csi::VolumeContentSource>, String> {
        use csi::volume_content_source::{Type, VolumeSource};
        let spec = pvc.spec.as_ref();
        let Some(src) = spec
            .and_then(|s| s.data_source_ref.clone())
            .map(|r| (r.kind, r.name, r.api_group))
            .or_else(|| {
                spec.and_then(|s| s.data_source.clone())
                    .map(|r| (r.kind, r.name, r.api_group))
            })
        else {
            return Ok(None);
        };
        match (src.0.as_str(), src.2.as_deref().unwrap_or("")) {
            ("PersistentVolumeClaim", "") => {
                let ns = ns_of(&pvc.metadata);
                let source = w
                    .pvc(&ns, &src.1)
                    .ok_or_else(|| format!("persistentvolumeclaims \"{}\" not found", src.1))?;
                let pv = w
                    .bound_pv(source)
                    .ok_or_else(|| format!("the source claim {} is not bound", src.1))?;
                let handle = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.csi.as_ref())
                    .map(|c| c.volume_handle.clone())
                    .ok_or("the source volume is not a CSI volume")?;
                Ok(Some(csi::VolumeContentSource {
                    r#type: Some(Type::Volume(VolumeSource { volume_id: handle })),
                }))
            }
            ("VolumeSnapshot", "snapshot.storage.k8s.io") => {
                let handle = w.snapshot_handle(&ns_of(&pvc.metadata), &src.1)?;
                Ok(Some(csi::VolumeContentSource {
                    r#type: Some(Type::Snapshot(csi::volume_content_source::SnapshotSource {
                        snapshot_id: handle,
                    })),
                }))
            }
            (kind, group) => Err(format!("data source {group}/{kind} is not supported")),
        }
    }

    /// DeleteVolume for a released volume whose policy is Delete, then the PersistentVolume.
    pub(super) async fn delete_released(&mut self, w: &World) {
        for pv in &w.pvs {
            let m = &pv.metadata;
            let spec = pv.spec.clone().unwrap_or_default();
            let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
            let ours = ann(m, PROVISIONED_BY) == Some(self.driver.as_str());
            if !released
                || !ours
                || spec.persistent_volume_reclaim_policy.as_deref() != Some("Delete")
            {
                continue;
            }
            let Some(handle) = spec.csi.as_ref().map(|c| c.volume_handle.clone()) else {
                continue;
            };
            let name = name_of(m);
            let key = format!("delete/{name}");
            if !self.due(&key) {
                continue;
            }
            let Some(controller) = self.controller.as_mut() else {
                return;
            };
            let deleted = controller
                .delete_volume(csi::DeleteVolumeRequest {
                    volume_id: handle,
                    ..csi::DeleteVolumeRequest::default()
                })
                .await;
            if let Err(s) = deleted {
                self.failed(&key);
                self.event(
                    By::Sidecar,
                    "PersistentVolume",
                    m,
                    true,
                    "VolumeFailedDelete",
                    status_text(&s),
                    &format!("{}_csi-provisioner", self.driver),
                )
                .await;
                continue;
            }
            self.succeeded(&key);
            let pvs = Api::<PersistentVolume>::all(self.sidecar.clone());
            if let Err(e) = pvs.delete(&name, &Default::default()).await {
                tracing::debug!(pv = name, "deleting: {e}");
                continue;
            }
            let finalizers: Vec<String> = m
                .finalizers
                .iter()
                .flatten()
                .filter(|f| *f != PROVISIONER_FINALIZER)
                .cloned()
                .collect();
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": null}});
            if let Err(e) = pvs
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                tracing::debug!(pv = name, "finalizer: {e}");
            }
        }
    }
}

/// A CreateVolume to make, and the PersistentVolume its answer completes.
pub(super) struct VolumeRequest {
    request: csi::CreateVolumeRequest,
    requested: i64,
    /// The PersistentVolume but for what the answer says (size, handle, context, topology).
    pv: Value,
    driver: String,
}

/// At most this many claims are provisioned at once (external-provisioner's `--worker-threads`).
const WORKERS: usize = 100;

/// One claim's worker: CreateVolume, then its PersistentVolume (as the sidecar's identity). The
/// volume's name on success.
async fn provision_one(
    mut controller: kos_csi::csi::controller_client::ControllerClient<tonic::transport::Channel>,
    sidecar: kube::Client,
    v: VolumeRequest,
) -> Result<String, String> {
    let resp = controller
        .create_volume(v.request)
        .await
        .map_err(|s| status_text(&s))?
        .into_inner();
    let vol = resp.volume.ok_or("CreateVolume answered no volume")?;
    let capacity = if vol.capacity_bytes > 0 {
        vol.capacity_bytes
    } else {
        v.requested
    };
    let mut attributes: BTreeMap<String, String> = vol.volume_context.into_iter().collect();
    attributes.insert(
        "storage.kubernetes.io/csiProvisionerIdentity".into(),
        format!("0-0-{}", v.driver),
    );
    let terms: Vec<Value> = vol
        .accessible_topology
        .iter()
        .map(|t| {
            let exprs: Vec<Value> = t
                .segments
                .iter()
                .map(|(k, v)| json!({"key": k, "operator": "In", "values": [v]}))
                .collect();
            json!({"matchExpressions": exprs})
        })
        .collect();
    let mut pv = v.pv;
    pv["spec"]["capacity"] = json!({"storage": quantity(capacity)});
    pv["spec"]["csi"]["volumeHandle"] = json!(vol.volume_id);
    pv["spec"]["csi"]["volumeAttributes"] = json!(attributes);
    if !terms.is_empty() {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": terms}});
    }
    let pv: PersistentVolume = serde_json::from_value(pv).map_err(|e| e.to_string())?;
    let name = pv.metadata.name.clone().unwrap_or_default();
    Api::<PersistentVolume>::all(sidecar)
        .create(&PostParams::default(), &pv)
        .await
        .map_err(|e| format!("creating PersistentVolume {name}: {e}"))?;
    Ok(name)
}
