//! The storage API through the real kube-rs client, as kube-apiserver (1.34–1.36) serves it:
//! PersistentVolumes and PersistentVolumeClaims with their validation, strategies and admission
//! (protection finalizers, the default StorageClass), StorageClasses, VolumeAttachments and
//! CSINodes; the external-snapshotter's real CRDs with their schemas and CEL rules; the RBAC of
//! upstream's cinder-csi controller sidecars. Fixtures: `tests/fixtures/storage/README.md`.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kos_kube_fake::FakeKube;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

type R = Result<(), Box<dyn std::error::Error>>;

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(v)
}

/// The 422's causes as `field: message`, or the error itself when it is not a 422.
fn invalid(e: kube::Error) -> Result<Vec<String>, kube::Error> {
    match e {
        kube::Error::Api(s) if s.code == 422 => Ok(s
            .details
            .map(|d| {
                d.causes
                    .into_iter()
                    .map(|c| format!("{}: {}", c.field, c.message))
                    .collect()
            })
            .unwrap_or_default()),
        other => Err(other),
    }
}

/// Expects a 422 naming `field` with a message containing `text`.
fn assert_refused<T: std::fmt::Debug>(
    r: Result<T, kube::Error>,
    field: &str,
    text: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let causes = invalid(r.map(|v| format!("{v:?}")).err().ok_or("accepted")?)?;
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with(&format!("{field}: ")) && c.contains(text)),
        "no {field}: …{text}… in {causes:#?}"
    );
    Ok(())
}

async fn fake() -> Result<FakeKube, Box<dyn std::error::Error>> {
    let fake = FakeKube::start().await?;
    for ns in ["default", "kube-system"] {
        fake.insert::<Namespace>(&typed(json!({"metadata": {"name": ns}}))?)?;
    }
    Ok(fake)
}

fn claim(
    name: &str,
    class: Option<&str>,
    size: &str,
) -> Result<PersistentVolumeClaim, serde_json::Error> {
    let mut spec =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
    if let Some(c) = class {
        spec["storageClassName"] = json!(c);
    }
    typed(json!({"metadata": {"name": name}, "spec": spec}))
}

fn csi_volume(name: &str) -> Result<PersistentVolume, serde_json::Error> {
    typed(json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
        "csi": {"driver": "cinder.csi.openstack.org", "volumeHandle": "0c3d7e2a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
                "fsType": "ext4"}}}))
}

#[tokio::test]
async fn a_claim_is_defaulted_protected_and_may_name_a_class_that_does_not_exist() -> R {
    let fake = fake().await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client()?, "default");
    let mut sent = claim("data", Some("not-made-yet"), "1Gi")?;
    // Status is the binder's: what a client sends is dropped.
    sent.status = Some(typed(json!({"phase": "Bound"}))?);
    let c = pvcs.create(&PostParams::default(), &sent).await?;
    let spec = c.spec.clone().ok_or("spec")?;
    assert_eq!(spec.storage_class_name.as_deref(), Some("not-made-yet"));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(
        c.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(
        c.metadata.finalizers,
        Some(vec!["kubernetes.io/pvc-protection".to_owned()])
    );

    // DefaultStorageClass: a claim naming no class gets the default one, the newest if several;
    // one naming "" keeps it (no class: only pre-made volumes).
    let scs: Api<StorageClass> = Api::all(fake.client()?);
    for (name, default) in [("standard", true), ("slow", false)] {
        scs.create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": name, "annotations": {
                "storageclass.kubernetes.io/is-default-class": default.to_string()}},
                "provisioner": "cinder.csi.openstack.org"}))?,
        )
        .await?;
    }
    let c = pvcs
        .create(&PostParams::default(), &claim("defaulted", None, "1Gi")?)
        .await?;
    assert_eq!(
        c.spec.and_then(|s| s.storage_class_name).as_deref(),
        Some("standard")
    );
    let c = pvcs
        .create(
            &PostParams::default(),
            &claim("classless", Some(""), "1Gi")?,
        )
        .await?;
    assert_eq!(
        c.spec.and_then(|s| s.storage_class_name).as_deref(),
        Some("")
    );

    // Deleting a protected claim only marks it: the pvc-protection controller lets it go once
    // no scheduled pod names it.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(fake.client()?, "default");
    pods.create(
        &PostParams::default(),
        &typed(
            json!({"metadata": {"name": "app"}, "spec": {"nodeName": "demo-w-0",
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
        )?,
    )
    .await?;
    pvcs.delete("data", &Default::default()).await?;
    fake.reconcile_storage_protection()?;
    let marked = pvcs.get("data").await?;
    assert!(marked.metadata.deletion_timestamp.is_some(), "in use: kept");
    pods.delete("app", &Default::default()).await?;
    fake.reconcile_storage_protection()?;
    assert!(pvcs.get_opt("data").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn a_claim_needs_access_modes_and_a_storage_request() -> R {
    let fake = fake().await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client()?, "default");
    let bad: PersistentVolumeClaim = typed(json!({"metadata": {"name": "bad"}, "spec": {
        "resources": {"requests": {"cpu": "1"}}, "volumeMode": "Raw",
        "dataSource": {"kind": "VolumeSnapshot", "name": "snap"}}}))?;
    let causes = invalid(
        pvcs.create(&PostParams::default(), &bad)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    assert_eq!(
        causes,
        [
            "spec.accessModes: Required value: at least 1 access mode is required",
            "spec.resources[storage]: Required value",
            "spec.volumeMode: Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\"",
            "spec.dataSource: Invalid value: \"VolumeSnapshot\": must be 'PersistentVolumeClaim' when referencing the default apiGroup",
            // The strategy copied dataSource into dataSourceRef before validation, as upstream's.
            "spec.dataSourceRef: Invalid value: \"VolumeSnapshot\": must be 'PersistentVolumeClaim' when referencing the default apiGroup",
        ]
    );
    let rwop: PersistentVolumeClaim = typed(json!({"metadata": {"name": "rwop"}, "spec": {
        "accessModes": ["ReadWriteOncePod", "ReadWriteOnce"],
        "resources": {"requests": {"storage": "-1Gi"}}}}))?;
    let causes = invalid(
        pvcs.create(&PostParams::default(), &rwop)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    assert_eq!(
        causes,
        [
            "spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
            "spec.resources[storage]: Invalid value: \"-1Gi\": must be greater than or equal to 0",
        ]
    );
    // A snapshot source is fine, and fills dataSourceRef as the strategy does.
    let from_snap: PersistentVolumeClaim = typed(
        json!({"metadata": {"name": "restored"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}}),
    )?;
    let c = pvcs.create(&PostParams::default(), &from_snap).await?;
    assert_eq!(
        c.spec
            .and_then(|s| s.data_source_ref)
            .map(|r| (r.kind, r.name)),
        Some(("VolumeSnapshot".into(), "snap".into()))
    );
    Ok(())
}

#[tokio::test]
async fn a_claims_spec_is_frozen_but_for_its_binding_and_a_bound_claims_growth() -> R {
    let fake = fake().await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client()?, "default");
    pvcs.create(
        &PostParams::default(),
        &claim("data", Some("standard"), "1Gi")?,
    )
    .await?;
    let pp = PatchParams::default();

    assert_refused(
        pvcs.patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
        )
        .await,
        "spec",
        "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
    )?;
    // Not bound yet: the request is frozen too.
    assert_refused(
        pvcs.patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
        )
        .await,
        "spec",
        "immutable",
    )?;
    assert_refused(
        pvcs.patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"volumeMode": "Block"}})),
        )
        .await,
        "volumeMode",
        "field is immutable",
    )?;

    // The binder sets volumeName once, then the phase and capacity through /status.
    pvcs.patch(
        "data",
        &pp,
        &Patch::Merge(json!({"spec": {"volumeName": "pv-1"}})),
    )
    .await?;
    assert_refused(
        pvcs.patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"volumeName": "pv-2"}})),
        )
        .await,
        "spec",
        "immutable",
    )?;
    pvcs.patch_status(
        "data",
        &pp,
        &Patch::Merge(
            json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "1Gi"}}}),
        ),
    )
    .await?;

    // Bound, but its class (which does not exist) does not allow expansion: the
    // PersistentVolumeClaimResize admission plugin refuses, after validation passed.
    match pvcs
        .patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "3Gi"}}}})),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => assert_eq!(
            s.message,
            "persistentvolumeclaims \"data\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
        ),
        other => return Err(format!("expected 403, got {other:?}").into()),
    }
    Api::<StorageClass>::all(fake.client()?)
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "standard"},
                "provisioner": "cinder.csi.openstack.org", "allowVolumeExpansion": true}))?,
        )
        .await?;
    // Now it may grow (1Gi is 1073741824), and come back down only above what it has.
    let grown = pvcs
        .patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "3Gi"}}}})),
        )
        .await?;
    assert_eq!(grown.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    pvcs.patch(
        "data",
        &pp,
        &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
    )
    .await?;
    assert_refused(
        pvcs.patch(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "1073741824"}}}})),
        )
        .await,
        "spec.resources.requests.storage",
        "field can not be less than status.capacity",
    )?;
    // A status write cannot change the spec (the status strategy keeps the stored one).
    let after = pvcs
        .patch_status(
            "data",
            &pp,
            &Patch::Merge(json!({"spec": {"storageClassName": "other"}, "status": {"capacity": {"storage": "2Gi"}}})),
        )
        .await?;
    assert_eq!(
        after.spec.and_then(|s| s.storage_class_name).as_deref(),
        Some("standard")
    );
    Ok(())
}

#[tokio::test]
async fn a_claim_without_a_class_may_get_one_once_and_keeps_its_attributes_class() -> R {
    let fake = fake().await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client()?, "default");
    // No default class yet: the claim keeps none (nil, not "").
    let c = pvcs
        .create(&PostParams::default(), &claim("late", None, "1Gi")?)
        .await?;
    assert_eq!(c.spec.and_then(|s| s.storage_class_name), None);
    let pp = PatchParams::default();
    // The PV controller's retroactive default class: nil to a name is allowed, once.
    pvcs.patch(
        "late",
        &pp,
        &Patch::Merge(json!({"spec": {"storageClassName": "standard"}})),
    )
    .await?;
    assert_refused(
        pvcs.patch(
            "late",
            &pp,
            &Patch::Merge(json!({"spec": {"storageClassName": "fast"}})),
        )
        .await,
        "spec",
        "spec is immutable after creation",
    )?;
    // The attributes class may change, but once set it is not unset.
    pvcs.patch(
        "late",
        &pp,
        &Patch::Merge(json!({"spec": {"volumeAttributesClassName": "gold"}})),
    )
    .await?;
    assert_refused(
        pvcs.patch(
            "late",
            &pp,
            &Patch::Merge(json!({"spec": {"volumeAttributesClassName": null}})),
        )
        .await,
        "spec.volumeAttributesClassName",
        "update from non-nil value to nil is forbidden",
    )?;
    // CrossNamespaceVolumeDataSource is off: another namespace's source is dropped, not refused.
    let cross: PersistentVolumeClaim = typed(json!({"metadata": {"name": "cross"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                          "name": "snap", "namespace": "other"}}}))?;
    let c = pvcs.create(&PostParams::default(), &cross).await?;
    let spec = c.spec.ok_or("spec")?;
    assert_eq!(spec.data_source_ref.and_then(|r| r.namespace), None);
    assert_eq!(spec.data_source.map(|d| d.name), Some("snap".to_owned()));
    Ok(())
}

#[tokio::test]
async fn quantities_are_stored_in_their_canonical_form() -> R {
    let fake = fake().await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(fake.client()?, "default");
    let c = pvcs
        .create(&PostParams::default(), &claim("odd", Some("x"), "1.5Gi")?)
        .await?;
    let requested = c
        .spec
        .and_then(|s| s.resources)
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").cloned())
        .ok_or("no request")?;
    assert_eq!(requested.0, "1536Mi");
    // Not a quantity: the decoder's 400, before any validation.
    match pvcs
        .create(&PostParams::default(), &claim("bad", Some("x"), "1 GB")?)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 400 => assert!(
            s.message.starts_with(
                "PersistentVolumeClaim in version \"v1\" cannot be handled as a PersistentVolumeClaim: quantities must match the regular expression"
            ),
            "{}",
            s.message
        ),
        other => return Err(format!("expected 400, got {other:?}").into()),
    }
    let pvs: Api<PersistentVolume> = Api::all(fake.client()?);
    let mut v = csi_volume("pv-q")?;
    if let Some(spec) = v.spec.as_mut() {
        spec.capacity = Some(
            [(
                "storage".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1024Mi".into()),
            )]
            .into(),
        );
    }
    let v = pvs.create(&PostParams::default(), &v).await?;
    assert_eq!(
        v.spec
            .and_then(|s| s.capacity)
            .and_then(|c| c.get("storage").cloned())
            .map(|q| q.0)
            .as_deref(),
        Some("1Gi")
    );
    Ok(())
}

#[tokio::test]
async fn a_volume_has_one_source_its_defaults_and_a_pending_phase() -> R {
    let fake = fake().await?;
    let pvs: Api<PersistentVolume> = Api::all(fake.client()?);
    let mut sent = csi_volume("pv-1")?;
    sent.status = Some(typed(json!({"phase": "Bound"}))?);
    let v = pvs.create(&PostParams::default(), &sent).await?;
    let spec = v.spec.clone().ok_or("spec")?;
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Retain")
    );
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    let status = v.status.clone().ok_or("status")?;
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let first = status
        .last_phase_transition_time
        .ok_or("no transition time")?;
    assert_eq!(
        v.metadata.finalizers,
        Some(vec!["kubernetes.io/pv-protection".to_owned()])
    );

    let bad: PersistentVolume = typed(json!({"metadata": {"name": "bad"}, "spec": {
        "capacity": {"storage": "1Gi", "cpu": "1"}, "persistentVolumeReclaimPolicy": "Keep",
        "csi": {"driver": "", "volumeHandle": ""}, "hostPath": {"path": "/data"}}}))?;
    let causes = invalid(
        pvs.create(&PostParams::default(), &bad)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    for want in [
        "spec.accessModes: Required value",
        "spec.capacity: Unsupported value:",
        "spec.persistentVolumeReclaimPolicy: Unsupported value: \"Keep\"",
        "spec.csi: Forbidden: may not specify more than 1 volume type",
    ] {
        assert!(
            causes.iter().any(|c| c.starts_with(want)),
            "{want} not in {causes:#?}"
        );
    }
    let no_source: PersistentVolume = typed(json!({"metadata": {"name": "none"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}}))?;
    assert_refused(
        pvs.create(&PostParams::default(), &no_source).await,
        "spec",
        "Required value: must specify a volume type",
    )?;
    let no_handle: PersistentVolume = typed(json!({"metadata": {"name": "nohandle"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
        "csi": {"driver": "cinder.csi.openstack.org"}}}))?;
    assert_refused(
        pvs.create(&PostParams::default(), &no_handle).await,
        "spec.csi.volumeHandle",
        "Required value",
    )?;

    // The source is fixed; the binder's claimRef and the phase through /status are not.
    let pp = PatchParams::default();
    assert_refused(
        pvs.patch(
            "pv-1",
            &pp,
            &Patch::Merge(json!({"spec": {"csi": {"volumeHandle": "other"}}})),
        )
        .await,
        "spec.persistentvolumesource",
        "immutable after creation",
    )?;
    pvs.patch(
        "pv-1",
        &pp,
        &Patch::Merge(
            json!({"spec": {"claimRef": {"namespace": "default", "name": "data"},
            "persistentVolumeReclaimPolicy": "Delete"}}),
        ),
    )
    .await?;
    let available = pvs
        .patch_status(
            "pv-1",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Available"}})),
        )
        .await?;
    let status = available.status.ok_or("status")?;
    assert_eq!(status.phase.as_deref(), Some("Available"));
    let since = status.last_phase_transition_time.ok_or("no time")?;
    assert!(since >= first);
    // A status written whole without the time, same phase: the time is kept.
    let mut whole = pvs.get_status("pv-1").await?;
    whole.status = Some(typed(json!({"phase": "Available", "message": "ready"}))?);
    let kept = pvs
        .replace_status("pv-1", &PostParams::default(), &whole)
        .await?;
    assert_eq!(
        kept.status.and_then(|s| s.last_phase_transition_time),
        Some(since)
    );

    // A bound volume being deleted stays (pv-protection) until it is no longer Bound.
    pvs.patch_status(
        "pv-1",
        &pp,
        &Patch::Merge(json!({"status": {"phase": "Bound"}})),
    )
    .await?;
    pvs.delete("pv-1", &Default::default()).await?;
    fake.reconcile_storage_protection()?;
    assert!(pvs.get_opt("pv-1").await?.is_some(), "bound: kept");
    pvs.patch_status(
        "pv-1",
        &pp,
        &Patch::Merge(json!({"status": {"phase": "Released"}})),
    )
    .await?;
    fake.reconcile_storage_protection()?;
    assert!(pvs.get_opt("pv-1").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn storage_classes_are_checked_and_their_parameters_frozen() -> R {
    let fake = fake().await?;
    let scs: Api<StorageClass> = Api::all(fake.client()?);
    let bad: StorageClass = typed(json!({"metadata": {"name": "bad"}, "provisioner": "",
        "reclaimPolicy": "Recycle", "volumeBindingMode": "Later",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.cinder.csi.openstack.org/zone", "values": []}]}]}))?;
    let causes = invalid(
        scs.create(&PostParams::default(), &bad)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    assert_eq!(
        causes,
        [
            "provisioner: Required value",
            "reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\"",
            "volumeBindingMode: Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\"",
            "allowedTopologies[0].matchLabelExpressions[0].values: Required value: must specify as least one value",
        ]
    );
    let sc: StorageClass = typed(json!({"metadata": {"name": "standard"},
        "provisioner": "cinder.csi.openstack.org", "parameters": {"type": "ssd"},
        "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true,
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.cinder.csi.openstack.org/zone", "values": ["nova"]}]}]}))?;
    let made = scs.create(&PostParams::default(), &sc).await?;
    assert_eq!(made.reclaim_policy.as_deref(), Some("Delete"));
    let pp = PatchParams::default();
    assert_refused(
        scs.patch(
            "standard",
            &pp,
            &Patch::Merge(json!({"parameters": {"type": "hdd"}})),
        )
        .await,
        "parameters",
        "updates to parameters are forbidden.",
    )?;
    assert_refused(
        scs.patch(
            "standard",
            &pp,
            &Patch::Merge(json!({"provisioner": "other.csi.example.com"})),
        )
        .await,
        "provisioner",
        "updates to provisioner are forbidden.",
    )?;
    assert_refused(
        scs.patch(
            "standard",
            &pp,
            &Patch::Merge(json!({"volumeBindingMode": "Immediate"})),
        )
        .await,
        "volumeBindingMode",
        "field is immutable",
    )?;
    scs.patch(
        "standard",
        &pp,
        &Patch::Merge(json!({"allowVolumeExpansion": false, "metadata": {"labels": {"a": "b"}}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn volume_attachments_have_one_source_and_a_frozen_spec() -> R {
    let fake = fake().await?;
    let vas: Api<VolumeAttachment> = Api::all(fake.client()?);
    let va: VolumeAttachment = typed(json!({"metadata": {"name": "csi-0a1b"}, "spec": {
        "attacher": "cinder.csi.openstack.org", "nodeName": "demo-w-0",
        "source": {"persistentVolumeName": "pv-1"}},
        "status": {"attached": true}}))?;
    let made = vas.create(&PostParams::default(), &va).await?;
    assert!(
        !made.status.as_ref().ok_or("status")?.attached,
        "status is the attacher's, cleared on create"
    );
    let pp = PatchParams::default();
    assert_refused(
        vas.patch(
            "csi-0a1b",
            &pp,
            &Patch::Merge(json!({"spec": {"nodeName": "demo-w-1"}})),
        )
        .await,
        "spec",
        "field is immutable",
    )?;
    let attached = vas
        .patch_status(
            "csi-0a1b",
            &pp,
            &Patch::Merge(json!({"status": {"attached": true, "attachmentMetadata": {"devicePath": "/dev/vdb"}}})),
        )
        .await?;
    assert!(attached.status.ok_or("status")?.attached);

    let both: VolumeAttachment = typed(json!({"metadata": {"name": "both"}, "spec": {
        "attacher": "cinder.csi.openstack.org", "nodeName": "n",
        "source": {"persistentVolumeName": "pv-1", "inlineVolumeSpec": {
            "accessModes": ["ReadWriteOnce"], "csi": {"driver": "cinder.csi.openstack.org", "volumeHandle": "h"}}}}}))?;
    assert_refused(
        vas.create(&PostParams::default(), &both).await,
        "spec.source",
        "Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
    )?;
    let none: VolumeAttachment = typed(json!({"metadata": {"name": "none"}, "spec": {
        "attacher": "", "nodeName": "", "source": {}}}))?;
    let causes = invalid(
        vas.create(&PostParams::default(), &none)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    // Upstream's order and repetition: the common rules, then the V1 ones of a create (the
    // attacher as a CSI driver name again); an empty node name is not a subdomain.
    let fields: Vec<&str> = causes
        .iter()
        .map(|c| c.split_once(": ").map_or(c.as_str(), |(f, _)| f))
        .collect();
    assert_eq!(
        fields,
        [
            "spec.attacher",
            "spec.source",
            "spec.nodeName",
            "spec.attacher",
            "spec.attacher"
        ],
        "{causes:#?}"
    );
    assert_eq!(
        causes[1],
        "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
    );
    assert!(
        causes[2].starts_with("spec.nodeName: Invalid value: \"\": a lowercase RFC 1123 subdomain")
    );
    Ok(())
}

#[tokio::test]
async fn csi_nodes_list_distinct_drivers_with_fixed_ids() -> R {
    let fake = fake().await?;
    let nodes: Api<CSINode> = Api::all(fake.client()?);
    let bad: CSINode = typed(
        json!({"metadata": {"name": "demo-w-0"}, "spec": {"drivers": [
        {"name": "cinder.csi.openstack.org", "nodeID": "a", "allocatable": {"count": -1}},
        {"name": "cinder.csi.openstack.org", "nodeID": "a"}]}}),
    )?;
    let causes = invalid(
        nodes
            .create(&PostParams::default(), &bad)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    assert_eq!(
        causes,
        [
            "spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0",
            "spec.drivers[1].name: Duplicate value: \"cinder.csi.openstack.org\"",
        ]
    );
    let good: CSINode = typed(
        json!({"metadata": {"name": "demo-w-0"}, "spec": {"drivers": [
        {"name": "cinder.csi.openstack.org", "nodeID": "6b1f0c3e-2d4a-4b5c-9e8f-7a6b5c4d3e2f",
         "topologyKeys": ["topology.cinder.csi.openstack.org/zone"], "allocatable": {"count": 256}}]}}),
    )?;
    nodes.create(&PostParams::default(), &good).await?;
    assert_refused(
        nodes
            .patch(
                "demo-w-0",
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/drivers/0/nodeID", "value": "other"}]))?),
            )
            .await,
        "spec.drivers",
        "field is immutable",
    )?;
    // MutableCSINodeAllocatableCount is on from 1.35: the kubelet may update the count.
    nodes
        .patch(
            "demo-w-0",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/drivers/0/allocatable/count", "value": 200}]))?),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_1_34_server_keeps_a_csi_nodes_allocatable_count() -> R {
    let fake = FakeKube::start_with(kos_kube_fake::Config {
        minor: 34,
        ..Default::default()
    })
    .await?;
    let nodes: Api<CSINode> = Api::all(fake.client()?);
    let node: CSINode = typed(json!({"metadata": {"name": "n"}, "spec": {"drivers": [
        {"name": "cinder.csi.openstack.org", "nodeID": "i-1", "allocatable": {"count": 256}}]}}))?;
    nodes.create(&PostParams::default(), &node).await?;
    assert_refused(
        nodes
            .patch(
                "n",
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/drivers/0/allocatable/count", "value": 200}]))?),
            )
            .await,
        "spec.drivers",
        "field is immutable",
    )?;
    Ok(())
}

#[tokio::test]
async fn a_csi_driver_is_defaulted_and_its_attach_rule_frozen() -> R {
    let fake = fake().await?;
    let drivers: Api<CSIDriver> = Api::all(fake.client()?);
    // cinder-csi's CSIDriver, as upstream's manifest has it.
    let d: CSIDriver = typed(
        json!({"metadata": {"name": "cinder.csi.openstack.org"}, "spec": {
        "attachRequired": true, "podInfoOnMount": true,
        "volumeLifecycleModes": ["Persistent", "Ephemeral"]}}),
    )?;
    let made = drivers.create(&PostParams::default(), &d).await?;
    let spec = made.spec;
    assert_eq!(
        (
            spec.storage_capacity,
            spec.requires_republish,
            spec.fs_group_policy.as_deref(),
            spec.se_linux_mount
        ),
        (
            Some(false),
            Some(false),
            Some("ReadWriteOnceWithFSType"),
            Some(false)
        )
    );
    // An attacher-less driver is what kos-csi is not: attachRequired defaults to true.
    let bare: CSIDriver = typed(json!({"metadata": {"name": "bare.csi.example.com"}, "spec": {}}))?;
    let bare = drivers.create(&PostParams::default(), &bare).await?;
    assert_eq!(bare.spec.attach_required, Some(true));
    assert_eq!(
        bare.spec.volume_lifecycle_modes,
        Some(vec!["Persistent".to_owned()])
    );
    let pp = PatchParams::default();
    assert_refused(
        drivers
            .patch(
                "cinder.csi.openstack.org",
                &pp,
                &Patch::Merge(json!({"spec": {"attachRequired": false}})),
            )
            .await,
        "spec.attachedRequired",
        "field is immutable",
    )?;
    // podInfoOnMount may change.
    drivers
        .patch(
            "cinder.csi.openstack.org",
            &pp,
            &Patch::Merge(json!({"spec": {"podInfoOnMount": false}})),
        )
        .await?;
    let bad: CSIDriver = typed(
        json!({"metadata": {"name": "bad.csi.example.com"}, "spec": {
        "fsGroupPolicy": "Sometimes", "volumeLifecycleModes": ["Forever"],
        "tokenRequests": [{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}]}}),
    )?;
    let causes = invalid(
        drivers
            .create(&PostParams::default(), &bad)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    assert_eq!(
        causes,
        [
            "spec.fsGroupPolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
            "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
            "spec.tokenRequests[1].audience: Duplicate value: \"a\"",
            "spec.volumeLifecycleModes: Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"",
        ]
    );
    Ok(())
}

// ---------------------------------------------------------------------------- snapshots

const SNAPSHOT_CRDS: [&str; 3] = [
    include_str!("fixtures/storage/snapshot.storage.k8s.io_volumesnapshotclasses.yaml"),
    include_str!("fixtures/storage/snapshot.storage.k8s.io_volumesnapshotcontents.yaml"),
    include_str!("fixtures/storage/snapshot.storage.k8s.io_volumesnapshots.yaml"),
];

/// The documents of a YAML stream, as JSON.
fn documents(yaml: &str) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for doc in yaml.split("\n---") {
        let v: Value = serde_saphyr::from_str(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn snapshot_api(
    fake: &FakeKube,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Result<Api<DynamicObject>, Box<dyn std::error::Error>> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", kind),
        plural,
    );
    Ok(match ns {
        Some(ns) => Api::namespaced_with(fake.client()?, ns, &ar),
        None => Api::all_with(fake.client()?, &ar),
    })
}

async fn install_snapshot_crds(fake: &FakeKube) -> R {
    let crds: Api<CustomResourceDefinition> = Api::all(fake.client()?);
    for yaml in SNAPSHOT_CRDS {
        for doc in documents(yaml)? {
            crds.create(&PostParams::default(), &typed(doc)?).await?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_external_snapshotters_crds_are_served_with_their_schemas_and_cel_rules() -> R {
    let fake = fake().await?;
    install_snapshot_crds(&fake).await?;

    let classes = snapshot_api(&fake, "VolumeSnapshotClass", "volumesnapshotclasses", None)?;
    let class: DynamicObject = typed(json!({"apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass", "metadata": {"name": "csi-cinder-snapclass"},
        "driver": "cinder.csi.openstack.org", "deletionPolicy": "Delete"}))?;
    classes.create(&PostParams::default(), &class).await?;
    // The schema's enum and required fields.
    let bad_class: DynamicObject = typed(json!({"apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass", "metadata": {"name": "bad"}, "deletionPolicy": "Keep"}))?;
    let causes = invalid(
        classes
            .create(&PostParams::default(), &bad_class)
            .await
            .err()
            .ok_or("accepted")?,
    )?;
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with("deletionPolicy: Unsupported value: \"Keep\"")),
        "{causes:#?}"
    );
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with("driver: Required value")),
        "{causes:#?}"
    );

    let snaps = snapshot_api(&fake, "VolumeSnapshot", "volumesnapshots", Some("default"))?;
    let snap = |name: &str, source: Value| -> Result<DynamicObject, serde_json::Error> {
        typed(
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeSnapshotClassName": "csi-cinder-snapclass", "source": source}}),
        )
    };
    // CEL: exactly one source.
    assert_refused(
        snaps
            .create(
                &PostParams::default(),
                &snap(
                    "both",
                    json!({"persistentVolumeClaimName": "data", "volumeSnapshotContentName": "c"}),
                )?,
            )
            .await,
        "spec.source",
        "Invalid value: \"object\": exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set",
    )?;
    snaps
        .create(
            &PostParams::default(),
            &snap("snap", json!({"persistentVolumeClaimName": "data"}))?,
        )
        .await?;
    // CEL transition rules: the source is immutable and stays set.
    let pp = PatchParams::default();
    assert_refused(
        snaps
            .patch(
                "snap",
                &pp,
                &Patch::Merge(json!({"spec": {"source": {"persistentVolumeClaimName": "other"}}})),
            )
            .await,
        "spec.source.persistentVolumeClaimName",
        "persistentVolumeClaimName is immutable",
    )?;
    assert_refused(
        snaps
            .patch(
                "snap",
                &pp,
                &Patch::Merge(json!({"spec": {"source": {"persistentVolumeClaimName": null, "volumeSnapshotContentName": "c"}}})),
            )
            .await,
        "spec.source",
        "persistentVolumeClaimName is required once set",
    )?;
    assert_refused(
        snaps
            .patch(
                "snap",
                &pp,
                &Patch::Merge(json!({"spec": {"volumeSnapshotClassName": ""}})),
            )
            .await,
        "spec.volumeSnapshotClassName",
        "volumeSnapshotClassName must not be the empty string when set",
    )?;
    // The snapshot controller's status, through /status.
    let ready = snaps
        .patch_status(
            "snap",
            &pp,
            &Patch::Merge(json!({"status": {"readyToUse": true, "restoreSize": "1Gi",
                "boundVolumeSnapshotContentName": "snapcontent-1"}})),
        )
        .await?;
    assert_eq!(ready.data.pointer("/status/readyToUse"), Some(&json!(true)));
    // The schema's pattern: restoreSize is a quantity.
    assert_refused(
        snaps
            .patch_status(
                "snap",
                &pp,
                &Patch::Merge(json!({"status": {"restoreSize": "a lot"}})),
            )
            .await,
        "status.restoreSize",
        "status.restoreSize in body should match",
    )?;

    let contents = snapshot_api(
        &fake,
        "VolumeSnapshotContent",
        "volumesnapshotcontents",
        None,
    )?;
    let content = |name: &str, reference: Value| -> Result<DynamicObject, serde_json::Error> {
        typed(
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
            "metadata": {"name": name},
            "spec": {"deletionPolicy": "Delete", "driver": "cinder.csi.openstack.org",
                     "source": {"volumeHandle": "0c3d7e2a"}, "volumeSnapshotRef": reference}}),
        )
    };
    assert_refused(
        contents
            .create(
                &PostParams::default(),
                &content("half", json!({"name": "snap"}))?,
            )
            .await,
        "spec.volumeSnapshotRef",
        "both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set",
    )?;
    contents
        .create(
            &PostParams::default(),
            &content(
                "snapcontent-1",
                json!({"name": "snap", "namespace": "default"}),
            )?,
        )
        .await?;
    // The schema's minimum.
    assert_refused(
        contents
            .patch_status(
                "snapcontent-1",
                &pp,
                &Patch::Merge(json!({"status": {"restoreSize": -1}})),
            )
            .await,
        "status.restoreSize",
        "should be greater than or equal to 0",
    )?;
    assert_refused(
        contents
            .patch(
                "snapcontent-1",
                &pp,
                &Patch::Merge(json!({"spec": {"source": {"volumeHandle": "other"}}})),
            )
            .await,
        "spec.source.volumeHandle",
        "volumeHandle is immutable",
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------- RBAC

#[tokio::test]
async fn upstream_cinder_csi_sidecar_roles_allow_what_they_grant_and_nothing_else() -> R {
    let fake = fake().await?;
    install_snapshot_crds(&fake).await?;
    for doc in documents(include_str!(
        "fixtures/storage/cinder-csi-controllerplugin-rbac.yaml"
    ))? {
        fake.apply_json(&doc, "kubectl")?;
    }
    // What the sidecars act on.
    let admin = fake.client()?;
    Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &claim("data", Some("standard"), "1Gi")?,
        )
        .await?;
    Api::<VolumeAttachment>::all(admin.clone())
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "csi-1"}, "spec": {
                "attacher": "cinder.csi.openstack.org", "nodeName": "n",
                "source": {"persistentVolumeName": "pv-1"}}}))?,
        )
        .await?;
    let sa = fake.service_account_client("kube-system", "csi-cinder-controller-sa")?;
    let pp = PatchParams::default();
    let forbidden = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
        other => Err(format!("expected 403, got {other:?}")),
    };

    // csi-provisioner: claims read and updated, volumes made; csi-resizer: claims' status.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(sa.clone(), "default");
    pvcs.list(&Default::default()).await?;
    let mut c = pvcs.get("data").await?;
    c.metadata.annotations.get_or_insert_default().insert(
        "volume.kubernetes.io/storage-provisioner".into(),
        "cinder.csi.openstack.org".into(),
    );
    pvcs.replace("data", &PostParams::default(), &c).await?;
    pvcs.patch_status(
        "data",
        &pp,
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Resizing", "status": "True"}]}})),
    )
    .await?;
    forbidden(pvcs.delete("data", &Default::default()).await.map(|_| ()))?;
    let pvs: Api<PersistentVolume> = Api::all(sa.clone());
    pvs.create(&PostParams::default(), &csi_volume("pv-1")?)
        .await?;
    pvs.delete("pv-1", &Default::default()).await?;

    // csi-attacher: attachments patched, their status too, never created.
    let vas: Api<VolumeAttachment> = Api::all(sa.clone());
    vas.patch(
        "csi-1",
        &pp,
        &Patch::Merge(
            json!({"metadata": {"finalizers": ["external-attacher/cinder-csi-openstack-org"]}}),
        ),
    )
    .await?;
    vas.patch_status(
        "csi-1",
        &pp,
        &Patch::Merge(json!({"status": {"attached": true}})),
    )
    .await?;
    forbidden(
        vas.create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "csi-2"}, "spec": {
                "attacher": "cinder.csi.openstack.org", "nodeName": "n",
                "source": {"persistentVolumeName": "pv-2"}}}))?,
        )
        .await
        .map(|_| ()),
    )?;
    let csinodes: Api<CSINode> = Api::all(sa.clone());
    csinodes.list(&Default::default()).await?;
    forbidden(
        csinodes
            .create(
                &PostParams::default(),
                &typed(json!({"metadata": {"name": "n"}, "spec": {"drivers": []}}))?,
            )
            .await
            .map(|_| ()),
    )?;

    // csi-snapshotter: contents and their status; snapshots only read (the provisioner's).
    let contents = snapshot_api(
        &fake,
        "VolumeSnapshotContent",
        "volumesnapshotcontents",
        None,
    )?;
    contents
        .create(
            &PostParams::default(),
            &typed(
                json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
                "metadata": {"name": "c1"}, "spec": {"deletionPolicy": "Delete",
                "driver": "cinder.csi.openstack.org", "source": {"volumeHandle": "v"},
                "volumeSnapshotRef": {"name": "s", "namespace": "default"}}}),
            )?,
        )
        .await?;
    let sa_contents: Api<DynamicObject> = Api::all_with(
        sa.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshotContent"),
            "volumesnapshotcontents",
        ),
    );
    sa_contents
        .patch_status(
            "c1",
            &pp,
            &Patch::Merge(json!({"status": {"readyToUse": true, "snapshotHandle": "h"}})),
        )
        .await?;
    let sa_snaps: Api<DynamicObject> = Api::namespaced_with(
        sa.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
            "volumesnapshots",
        ),
    );
    sa_snaps.list(&Default::default()).await?;
    forbidden(
        sa_snaps
            .patch_status("s", &pp, &Patch::Merge(json!({"status": {}})))
            .await
            .map(|_| ()),
    )?;
    // Nothing grants Secrets.
    forbidden(
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(sa, "kube-system")
            .list(&Default::default())
            .await
            .map(|_| ()),
    )?;
    Ok(())
}
