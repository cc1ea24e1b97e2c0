//! external-snapshotter, read from its code: snapshot-controller (a VolumeSnapshot of a bound claim
//! gets a VolumeSnapshotContent `snapcontent-<uid>` of its class, its status follows the content's,
//! and its deletion takes the content when the policy is Delete) and the csi-snapshotter sidecar
//! (CreateSnapshot named `snapshot-<uid>` for a content of the driver's until it is ready,
//! DeleteSnapshot behind the content's finalizer). Each acts with its own pod's ServiceAccount.
//! Simplified: pre-provisioned contents (no source volume) are not driven; the claim-as-source
//! finalizer is not kept.

use super::controllers::By;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_csi::csi;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::controllers::*;
use super::world::*;

const GROUP: &str = "snapshot.storage.k8s.io";
/// snapshot-controller's finalizers on a VolumeSnapshot.
const AS_SOURCE: &str = "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection";
const BOUND: &str = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection";
/// The sidecar's finalizer on a content it made a snapshot for.
const CONTENT_BOUND: &str = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection";
const BEING_DELETED: &str = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";
const DEFAULT_CLASS: &str = "snapshot.storage.kubernetes.io/is-default-class";

pub(super) fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn snapshots_ar() -> ApiResource {
    resource("VolumeSnapshot", "volumesnapshots")
}

fn contents_ar() -> ApiResource {
    resource("VolumeSnapshotContent", "volumesnapshotcontents")
}

fn classes_ar() -> ApiResource {
    resource("VolumeSnapshotClass", "volumesnapshotclasses")
}

fn s<'a>(o: &'a Value, p: &str) -> &'a str {
    o.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn finalizers(m: &ObjectMeta) -> Vec<String> {
    m.finalizers.clone().unwrap_or_default()
}

fn rfc3339_of_nanos(ns: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

impl Loop {
    /// snapshot-controller's pass, with its own client.
    pub(super) async fn snapshot_controller(&mut self, w: &World, client: &kube::Client) {
        let snaps: Api<DynamicObject> = Api::all_with(client.clone(), &snapshots_ar());
        let Ok(list) = snaps.list(&ListParams::default()).await else {
            return; // the CRDs are not installed
        };
        let contents: Api<DynamicObject> = Api::all_with(client.clone(), &contents_ar());
        let all_contents = contents
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let classes = Api::<DynamicObject>::all_with(client.clone(), &classes_ar())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for vs in list.items {
            let m = vs.metadata.clone();
            let (ns, name) = (ns_of(&m), name_of(&m));
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &snapshots_ar());
            let bound = s(&vs.data, "/status/boundVolumeSnapshotContentName").to_owned();
            let content = all_contents
                .iter()
                .find(|c| !bound.is_empty() && c.metadata.name.as_deref() == Some(&bound));
            if m.deletion_timestamp.is_some() {
                if let Some(c) = content {
                    let delete = s(&c.data, "/spec/deletionPolicy") == "Delete";
                    if delete && c.metadata.deletion_timestamp.is_none() {
                        let patch = json!({"metadata": {"annotations": {BEING_DELETED: "yes"}}});
                        let _ = contents
                            .patch(&bound, &PatchParams::default(), &Patch::Merge(patch))
                            .await;
                        if let Err(e) = contents.delete(&bound, &Default::default()).await {
                            tracing::debug!(content = bound, "{e}");
                        }
                    }
                    if delete {
                        continue; // gone first
                    }
                }
                let rest: Vec<String> = finalizers(&m)
                    .into_iter()
                    .filter(|f| f != AS_SOURCE && f != BOUND)
                    .collect();
                if let Err(e) = api
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
                    )
                    .await
                {
                    tracing::debug!(snapshot = name, "{e}");
                }
                continue;
            }
            let mut f = finalizers(&m);
            if !f.iter().any(|x| x == BOUND) {
                f.extend([AS_SOURCE.to_owned(), BOUND.to_owned()]);
                f.dedup();
                if let Err(e) = api
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": f}})),
                    )
                    .await
                {
                    tracing::debug!(snapshot = name, "{e}");
                    continue;
                }
            }
            if bound.is_empty() {
                if let Err(why) = self.make_content(w, &vs, &classes, &contents, &api).await {
                    let status = json!({"status": {"error": {"message": why, "time": now_time()}, "readyToUse": false}});
                    let _ = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                        .await;
                    self.event(
                        By::SnapshotController,
                        "VolumeSnapshot",
                        &m,
                        true,
                        "SnapshotCreationFailed",
                        why,
                        "snapshot-controller",
                    )
                    .await;
                }
                continue;
            }
            let Some(c) = content else {
                continue;
            };
            let ready = c.data.pointer("/status/readyToUse") == Some(&Value::Bool(true));
            let mut status = json!({"boundVolumeSnapshotContentName": bound, "readyToUse": ready});
            if let Some(size) = c
                .data
                .pointer("/status/restoreSize")
                .and_then(Value::as_i64)
            {
                status["restoreSize"] = json!(kos_quantity(size));
            }
            if let Some(t) = c
                .data
                .pointer("/status/creationTime")
                .and_then(Value::as_i64)
            {
                status["creationTime"] = json!(rfc3339_of_nanos(t));
            }
            if let Some(e) = c.data.pointer("/status/error") {
                status["error"] = e.clone();
            }
            let same = ["readyToUse", "restoreSize", "creationTime"]
                .iter()
                .all(|k| vs.data.pointer(&format!("/status/{k}")) == status.get(*k));
            if !same {
                let _ = api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await;
            }
        }
    }

    /// The content object for a new snapshot of a bound claim.
    async fn make_content(
        &self,
        w: &World,
        vs: &DynamicObject,
        classes: &[DynamicObject],
        contents: &Api<DynamicObject>,
        snaps: &Api<DynamicObject>,
    ) -> Result<(), String> {
        let m = &vs.metadata;
        let (ns, name) = (ns_of(m), name_of(m));
        let claim = s(&vs.data, "/spec/source/persistentVolumeClaimName");
        if claim.is_empty() {
            return Ok(()); // a pre-provisioned content: not driven here
        }
        let pv = w
            .pvc(&ns, claim)
            .and_then(|c| w.bound_pv(c))
            .ok_or_else(|| format!("the source claim {claim} is not bound"))?;
        let src = pv
            .spec
            .as_ref()
            .and_then(|s| s.csi.clone())
            .ok_or("the source volume is not a CSI volume")?;
        let class_name = s(&vs.data, "/spec/volumeSnapshotClassName").to_owned();
        let class = classes
            .iter()
            .find(|c| {
                if class_name.is_empty() {
                    s(&c.data, "/driver") == src.driver
                        && c.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(DEFAULT_CLASS))
                            .is_some_and(|v| v == "true")
                } else {
                    c.metadata.name.as_deref() == Some(class_name.as_str())
                }
            })
            .ok_or_else(|| {
                if class_name.is_empty() {
                    format!(
                        "cannot find default snapshot class for driver {}",
                        src.driver
                    )
                } else {
                    format!(
                        "volumesnapshotclass.snapshot.storage.k8s.io \"{class_name}\" not found"
                    )
                }
            })?;
        let uid = m.uid.clone().unwrap_or_default();
        let content_name = format!("snapcontent-{uid}");
        let content: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content_name},
            "spec": {
                "deletionPolicy": s(&class.data, "/deletionPolicy"),
                "driver": src.driver,
                "source": {"volumeHandle": src.volume_handle},
                "volumeSnapshotClassName": class.metadata.name,
                "volumeSnapshotRef": {
                    "apiVersion": format!("{GROUP}/v1"), "kind": "VolumeSnapshot",
                    "name": name, "namespace": ns, "uid": uid,
                    "resourceVersion": m.resource_version,
                },
            },
        }))
        .map_err(|e| e.to_string())?;
        match contents.create(&PostParams::default(), &content).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.to_string()),
        }
        let status = json!({"status": {"boundVolumeSnapshotContentName": content_name, "readyToUse": false}});
        snaps
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The csi-snapshotter sidecar's pass: CreateSnapshot until ready, DeleteSnapshot on deletion.
    pub(super) async fn snapshotter(&mut self, extra_metadata: bool) {
        let contents: Api<DynamicObject> = Api::all_with(self.sidecar.clone(), &contents_ar());
        let Ok(list) = contents.list(&ListParams::default()).await else {
            return;
        };
        let classes = Api::<DynamicObject>::all_with(self.sidecar.clone(), &classes_ar())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for c in list.items {
            if s(&c.data, "/spec/driver") != self.driver {
                continue;
            }
            let name = name_of(&c.metadata);
            let key = format!("snapshot/{name}");
            if !self.due(&key) {
                continue;
            }
            let handle = s(&c.data, "/status/snapshotHandle").to_owned();
            let f = finalizers(&c.metadata);
            if c.metadata.deletion_timestamp.is_some() {
                if !f.iter().any(|x| x == CONTENT_BOUND) {
                    continue;
                }
                if !handle.is_empty() && s(&c.data, "/spec/deletionPolicy") == "Delete" {
                    let Some(controller) = self.controller.as_mut() else {
                        return;
                    };
                    if let Err(st) = controller
                        .delete_snapshot(csi::DeleteSnapshotRequest {
                            snapshot_id: handle,
                            ..csi::DeleteSnapshotRequest::default()
                        })
                        .await
                    {
                        self.failed(&key);
                        let status = json!({"status": {"error": {"message": status_text(&st), "time": now_time()}}});
                        let _ = contents
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                            .await;
                        continue;
                    }
                }
                self.succeeded(&key);
                let rest: Vec<String> = f.into_iter().filter(|x| x != CONTENT_BOUND).collect();
                let _ = contents
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
                    )
                    .await;
                continue;
            }
            if c.data.pointer("/status/readyToUse") == Some(&Value::Bool(true)) {
                continue;
            }
            let source = s(&c.data, "/spec/source/volumeHandle").to_owned();
            if source.is_empty() {
                continue;
            }
            if !f.iter().any(|x| x == CONTENT_BOUND) {
                let mut f = f.clone();
                f.push(CONTENT_BOUND.to_owned());
                if let Err(e) = contents
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": f}})),
                    )
                    .await
                {
                    tracing::debug!(content = name, "{e}");
                    continue;
                }
            }
            let class = s(&c.data, "/spec/volumeSnapshotClassName");
            let mut parameters: std::collections::BTreeMap<String, String> = classes
                .iter()
                .find(|k| k.metadata.name.as_deref() == Some(class))
                .and_then(|k| k.data.get("parameters"))
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .filter(|(k, _)| !k.starts_with("csi.storage.k8s.io/"))
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            let snap_uid = s(&c.data, "/spec/volumeSnapshotRef/uid").to_owned();
            if extra_metadata {
                for (k, p) in [
                    (
                        "csi.storage.k8s.io/volumesnapshot/name",
                        "/spec/volumeSnapshotRef/name",
                    ),
                    (
                        "csi.storage.k8s.io/volumesnapshot/namespace",
                        "/spec/volumeSnapshotRef/namespace",
                    ),
                ] {
                    parameters.insert(k.into(), s(&c.data, p).to_owned());
                }
                parameters.insert(
                    "csi.storage.k8s.io/volumesnapshotcontent/name".into(),
                    name.clone(),
                );
            }
            let Some(controller) = self.controller.as_mut() else {
                return;
            };
            let r = controller
                .create_snapshot(csi::CreateSnapshotRequest {
                    source_volume_id: source,
                    name: format!("snapshot-{snap_uid}"),
                    parameters: parameters.into_iter().collect(),
                    ..csi::CreateSnapshotRequest::default()
                })
                .await;
            let status = match r {
                Ok(r) => {
                    self.succeeded(&key);
                    let Some(snap) = r.into_inner().snapshot else {
                        continue;
                    };
                    let created = snap
                        .creation_time
                        .map(|t| t.seconds * 1_000_000_000 + i64::from(t.nanos))
                        .unwrap_or_default();
                    json!({"status": {
                        "snapshotHandle": snap.snapshot_id,
                        "creationTime": created,
                        "readyToUse": snap.ready_to_use,
                        "restoreSize": snap.size_bytes,
                    }})
                }
                Err(st) => {
                    self.failed(&key);
                    json!({"status": {"error": {"message": status_text(&st), "time": now_time()}, "readyToUse": false}})
                }
            };
            if let Err(e) = contents
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await
            {
                tracing::debug!(content = name, "{e}");
            }
        }
    }
}

/// A size as snapshot-controller writes a restore size (`resource.NewQuantity(n, BinarySI)`).
fn kos_quantity(n: i64) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    quantity(n)
}
