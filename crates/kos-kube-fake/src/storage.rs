//! The storage API as kube-apiserver serves it: validation of PersistentVolumes,
//! PersistentVolumeClaims, StorageClasses, VolumeAttachments, CSINodes and CSIDrivers (kubernetes
//! `pkg/apis/core/validation` `ValidatePersistentVolume*`, `pkg/apis/storage/validation`), what
//! their registry strategies do on create and update (`pkg/registry/core/persistentvolume*`,
//! `pkg/registry/storage/volumeattachment`), and the admission plugins a kubeadm API server
//! runs on them by default: `StorageObjectInUseProtection` (the `kubernetes.io/pvc-protection` and
//! `kubernetes.io/pv-protection` finalizers on create), `DefaultStorageClass` (a claim without
//! `storageClassName` gets the default class on create) and `PersistentVolumeClaimResize` (a
//! claim grows only if its StorageClass has `allowVolumeExpansion`, else 403). A claim may name
//! a StorageClass that does not exist: neither the server nor its admission checks it.
//!
//! As of Kubernetes 1.34–1.36, the minors kos supports: `ReadWriteOncePod` is GA,
//! `RecoverVolumeExpansionFailure` is on (a bound claim's request may go back down, but not to or
//! below `status.capacity`), `VolumeAttributesClass` is on. Simplified: the `spec is immutable`
//! message does not carry the Go diff; the beta storage-class annotation's upgrade path is not
//! modelled (the annotation is left alone); in-tree volume sources other than csi, hostPath,
//! local, nfs and cinder are counted, not checked field by field; label selectors of claims are
//! not checked.

use serde_json::{Map, Value, json};

use crate::error::Cause;
use crate::quantity::{self, Quantity};
use crate::validate::{is_dns_subdomain, is_label_value, is_qualified_name};

// ------------------------------------------------------------------------------------ causes

pub(crate) fn required(field: impl Into<String>, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        field: field.into(),
        message: if detail.is_empty() {
            "Required value".into()
        } else {
            format!("Required value: {detail}")
        },
    }
}

pub(crate) fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Cause {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    Cause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: if detail.is_empty() {
            format!("Invalid value: {shown}")
        } else {
            format!("Invalid value: {shown}: {detail}")
        },
    }
}

pub(crate) fn forbidden(field: impl Into<String>, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: format!("Forbidden: {detail}"),
    }
}

fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Cause {
    let shown = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    let list = supported
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Cause {
        reason: "FieldValueNotSupported",
        field: field.into(),
        message: format!("Unsupported value: {shown}: supported values: {list}"),
    }
}

fn duplicate(field: impl Into<String>, value: &Value) -> Cause {
    Cause {
        reason: "FieldValueDuplicate",
        field: field.into(),
        message: format!("Duplicate value: {value}"),
    }
}

fn too_long(field: impl Into<String>, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooLong",
        field: field.into(),
        message: format!("Too long: may not be more than {max} bytes"),
    }
}

fn immutable(field: impl Into<String>, value: &Value) -> Cause {
    invalid(field, value, "field is immutable")
}

pub(crate) const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn present(v: &Value, p: &str) -> bool {
    v.pointer(p).is_some_and(|x| !x.is_null())
}

fn arr<'a>(v: &'a Value, p: &str) -> &'a [Value] {
    v.pointer(p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn map_of<'a>(v: &'a Value, p: &str) -> Option<&'a Map<String, Value>> {
    v.pointer(p).and_then(Value::as_object)
}

/// A quantity field: parsed, or the format error.
fn quantity_at(v: &Value, field: &str, out: &mut Vec<Cause>) -> Option<Quantity> {
    let text = match v {
        Value::String(t) => t.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            out.push(invalid(field, other, quantity::FORMAT_ERROR));
            return None;
        }
    };
    let q = Quantity::parse(&text);
    if q.is_none() {
        out.push(invalid(field, v, quantity::FORMAT_ERROR));
    }
    q
}

/// `validateBasicResource` and `ValidatePositiveQuantityValue` together: a negative value is
/// refused by both.
fn non_negative(v: &Value, field: &str, out: &mut Vec<Cause>) -> Option<Quantity> {
    let q = quantity_at(v, field, out)?;
    if q.is_negative() {
        out.push(invalid(field, v, "must be a valid resource quantity"));
        out.push(invalid(field, v, "must be greater than or equal to 0"));
    }
    Some(q)
}

/// `ValidateCSIDriverName`.
fn csi_driver_name(name: &str, field: &str, out: &mut Vec<Cause>) {
    if name.is_empty() {
        out.push(required(field, ""));
    }
    if name.len() > 63 {
        out.push(too_long(field, 63));
    }
    if !is_dns_subdomain(&name.to_lowercase()) {
        out.push(invalid(field, &json!(name), SUBDOMAIN_MSG));
    }
}

fn class_name(name: &str, field: &str, out: &mut Vec<Cause>) {
    if !is_dns_subdomain(name) {
        out.push(invalid(field, &json!(name), SUBDOMAIN_MSG));
    }
}

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const VOLUME_MODES: [&str; 2] = ["Block", "Filesystem"];

fn access_modes(spec: &Value, path: &str, required_detail: &str, out: &mut Vec<Cause>) {
    let modes = arr(spec, "/accessModes");
    if modes.is_empty() {
        out.push(required(format!("{path}.accessModes"), required_detail));
    }
    let (mut once_pod, mut other) = (false, false);
    for m in modes {
        let m_str = m.as_str().unwrap_or_default();
        if !ACCESS_MODES.contains(&m_str) {
            out.push(not_supported(
                format!("{path}.accessModes"),
                m,
                &ACCESS_MODES,
            ));
        } else if m_str == "ReadWriteOncePod" {
            once_pod = true;
        } else {
            other = true;
        }
    }
    if once_pod && other {
        out.push(forbidden(
            format!("{path}.accessModes"),
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn volume_mode(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(m) = spec.get("volumeMode").filter(|m| !m.is_null())
        && !m.as_str().is_some_and(|m| VOLUME_MODES.contains(&m))
    {
        out.push(not_supported(
            format!("{path}.volumeMode"),
            m,
            &VOLUME_MODES,
        ));
    }
}

fn volume_attributes_class(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(v) = spec
        .get("volumeAttributesClassName")
        .filter(|v| !v.is_null())
    {
        let name = v.as_str().unwrap_or_default();
        let field = format!("{path}.volumeAttributesClassName");
        if name.is_empty() {
            out.push(required(field, "an empty string is disallowed"));
        } else {
            class_name(name, &field, out);
        }
    }
}

// ------------------------------------------------------------------------------- dispatch

/// Everything wrong with a storage object `obj` of `kind` (`group` its API group); `old` is the
/// stored version on updates.
pub fn check(
    group: &str,
    kind: &str,
    obj: &Value,
    old: Option<&Value>,
    gates: Gates,
    out: &mut Vec<Cause>,
) {
    match (group, kind) {
        ("", "PersistentVolume") => {
            let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
            pv_spec(&spec, "spec", false, out);
            if let Some(old) = old {
                pv_update(obj, old, out);
            }
        }
        ("", "PersistentVolumeClaim") => {
            let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
            pvc_spec(&spec, "spec", out);
            pvc_status(obj, out);
            if let Some(old) = old {
                pvc_update(obj, old, out);
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            storage_class(obj, out);
            if let Some(old) = old {
                storage_class_update(obj, old, out);
            }
        }
        ("storage.k8s.io", "VolumeAttachment") => {
            volume_attachment(obj, old.is_none(), out);
            if let Some(old) = old
                && obj.get("spec") != old.get("spec")
            {
                out.push(immutable("spec", obj.get("spec").unwrap_or(&Value::Null)));
            }
        }
        ("storage.k8s.io", "CSIDriver") => {
            csi_driver(obj, out);
            if let Some(old) = old {
                for (field, ptr) in [
                    // Upstream's path has the typo.
                    ("spec.attachedRequired", "/spec/attachRequired"),
                    ("spec.volumeLifecycleModes", "/spec/volumeLifecycleModes"),
                ] {
                    if obj.pointer(ptr) != old.pointer(ptr) {
                        out.push(immutable(field, obj.pointer(ptr).unwrap_or(&Value::Null)));
                    }
                }
            }
        }
        ("storage.k8s.io", "CSINode") => {
            let long_ids = old.is_some_and(|o| {
                arr(o, "/spec/drivers")
                    .iter()
                    .any(|d| s(d, "/nodeID").len() > CSI_NODE_ID_MAX)
            });
            csi_node(obj, long_ids, out);
            if let Some(old) = old {
                csi_node_update(obj, old, gates, out);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------- PersistentVolume

/// The volume sources of `PersistentVolumeSource`, in the order upstream's validation counts
/// them (the second one found is the one reported).
const PV_SOURCES: [&str; 22] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

const RECLAIM_POLICIES: [&str; 3] = ["Delete", "Recycle", "Retain"];

/// `ValidatePersistentVolumeSpec`; `inline` for a VolumeAttachment's `inlineVolumeSpec`.
fn pv_spec(spec: &Value, path: &str, inline: bool, out: &mut Vec<Cause>) {
    if inline {
        if present(spec, "/claimRef") {
            out.push(forbidden(
                format!("{path}.claimRef"),
                "may not be specified in the context of inline volumes",
            ));
        }
        if map_of(spec, "/capacity").is_some_and(|c| !c.is_empty()) {
            out.push(forbidden(
                format!("{path}.capacity"),
                "may not be specified in the context of inline volumes",
            ));
        }
        if !present(spec, "/csi") {
            out.push(required(
                format!("{path}.csi"),
                "has to be specified in the context of inline volumes",
            ));
        }
    }
    access_modes(spec, path, "", out);
    if !inline {
        let capacity = map_of(spec, "/capacity");
        if capacity.is_none_or(Map::is_empty) {
            out.push(required(format!("{path}.capacity"), ""));
        }
        let cap = capacity.cloned().unwrap_or_default();
        if !cap.contains_key("storage") || cap.len() > 1 {
            out.push(not_supported(
                format!("{path}.capacity"),
                &Value::Object(cap.clone()),
                &["storage"],
            ));
        }
        for (k, v) in &cap {
            non_negative(v, &format!("{path}.capacity[{k}]"), out);
        }
    }
    let policy = s(spec, "/persistentVolumeReclaimPolicy");
    if !policy.is_empty() {
        if inline {
            if policy != "Retain" {
                out.push(forbidden(
                    format!("{path}.persistentVolumeReclaimPolicy"),
                    "may only be Retain in the context of inline volumes",
                ));
            }
        } else if !RECLAIM_POLICIES.contains(&policy) {
            out.push(not_supported(
                format!("{path}.persistentVolumeReclaimPolicy"),
                &json!(policy),
                &RECLAIM_POLICIES,
            ));
        }
    }
    let mut affinity = false;
    if let Some(na) = spec.get("nodeAffinity").filter(|v| !v.is_null()) {
        if inline {
            out.push(forbidden(
                format!("{path}.nodeAffinity"),
                "may not be specified in the context of inline volumes",
            ));
        } else {
            affinity = node_affinity(na, &format!("{path}.nodeAffinity"), out);
        }
    }
    let mut found = 0;
    for source in PV_SOURCES {
        let Some(v) = spec.get(source).filter(|v| !v.is_null()) else {
            continue;
        };
        let field = format!("{path}.{source}");
        // Upstream's quirks: flexVolume is counted without the check, cephfs is reported as
        // "cephFS".
        if found > 0 && source != "flexVolume" {
            let reported = if source == "cephfs" {
                format!("{path}.cephFS")
            } else {
                field
            };
            out.push(forbidden(
                reported,
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        found += 1;
        match source {
            "csi" => csi_source(v, &field, out),
            "hostPath" | "local" => {
                if s(v, "/path").is_empty() {
                    out.push(required(format!("{field}.path"), ""));
                } else if s(v, "/path").split('/').any(|seg| seg == "..") {
                    out.push(invalid(
                        format!("{field}.path"),
                        &json!(s(v, "/path")),
                        "must not contain '..'",
                    ));
                }
                if source == "local" && !affinity {
                    out.push(required(
                        format!("{path}.nodeAffinity"),
                        "Local volume requires node affinity",
                    ));
                }
            }
            "nfs" => {
                if s(v, "/server").is_empty() {
                    out.push(required(format!("{field}.server"), ""));
                }
                let p = s(v, "/path");
                if p.is_empty() {
                    out.push(required(format!("{field}.path"), ""));
                } else if !p.starts_with('/') {
                    out.push(invalid(
                        format!("{field}.path"),
                        &json!(p),
                        "must be an absolute path",
                    ));
                }
            }
            "cinder" if s(v, "/volumeID").is_empty() => {
                out.push(required(format!("{field}.volumeID"), ""));
            }
            _ => {}
        }
    }
    if found == 0 {
        out.push(required(path, "must specify a volume type"));
    }
    if spec
        .pointer("/hostPath/path")
        .and_then(Value::as_str)
        .is_some_and(|p| p.trim_end_matches('/').is_empty())
        && policy == "Recycle"
    {
        out.push(forbidden(
            format!("{path}.persistentVolumeReclaimPolicy"),
            "may not be 'recycle' for a hostPath mount of '/'",
        ));
    }
    let class = s(spec, "/storageClassName");
    if !class.is_empty() {
        if inline {
            out.push(forbidden(
                format!("{path}.storageClassName"),
                "may not be specified in the context of inline volumes",
            ));
        } else {
            class_name(class, &format!("{path}.storageClassName"), out);
        }
    }
    if let Some(m) = spec.get("volumeMode").and_then(Value::as_str)
        && inline
        && m != "Filesystem"
    {
        out.push(forbidden(
            format!("{path}.volumeMode"),
            "may not specify volumeMode other than Filesystem in the context of inline volumes",
        ));
    } else if !inline {
        volume_mode(spec, path, out);
    }
    if present(spec, "/volumeAttributesClassName") {
        volume_attributes_class(spec, path, out);
        if !present(spec, "/csi") {
            out.push(required(
                format!("{path}.csi"),
                "has to be specified when using volumeAttributesClassName",
            ));
        }
    }
}

fn csi_source(csi: &Value, field: &str, out: &mut Vec<Cause>) {
    csi_driver_name(s(csi, "/driver"), &format!("{field}.driver"), out);
    if s(csi, "/volumeHandle").is_empty() {
        out.push(required(format!("{field}.volumeHandle"), ""));
    }
    for secret in [
        "controllerPublishSecretRef",
        "controllerExpandSecretRef",
        "nodePublishSecretRef",
        "nodeExpandSecretRef",
    ] {
        let Some(r) = csi.get(secret).filter(|v| !v.is_null()) else {
            continue;
        };
        for part in ["name", "namespace"] {
            let f = format!("{field}.{secret}.{part}");
            let v = s(r, &format!("/{part}"));
            if v.is_empty() {
                out.push(required(f, ""));
            } else if !is_dns_label(v) {
                out.push(invalid(f, &json!(v), "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"));
            }
        }
    }
}

fn is_dns_label(v: &str) -> bool {
    is_dns_subdomain(v) && !v.contains('.') && v.len() <= 63
}

/// `validateVolumeNodeAffinity`: whether it names any constraint.
fn node_affinity(na: &Value, path: &str, out: &mut Vec<Cause>) -> bool {
    let Some(req) = na.get("required").filter(|v| !v.is_null()) else {
        out.push(required(
            format!("{path}.required"),
            "must specify required node constraints",
        ));
        return false;
    };
    node_selector(req, &format!("{path}.required"), out);
    true
}

/// `ValidateNodeSelector`.
fn node_selector(sel: &Value, path: &str, out: &mut Vec<Cause>) {
    let terms = arr(sel, "/nodeSelectorTerms");
    if terms.is_empty() {
        out.push(required(
            format!("{path}.nodeSelectorTerms"),
            "must have at least one node selector term",
        ));
    }
    for (i, t) in terms.iter().enumerate() {
        for (j, r) in arr(t, "/matchExpressions").iter().enumerate() {
            let f = format!("{path}.nodeSelectorTerms[{i}].matchExpressions[{j}]");
            let key = s(r, "/key");
            if !is_qualified_name(key) {
                out.push(invalid(
                    format!("{f}.key"),
                    &json!(key),
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                ));
            }
            let values = arr(r, "/values");
            match s(r, "/operator") {
                "In" | "NotIn" => {
                    if values.is_empty() {
                        out.push(required(
                            format!("{f}.values"),
                            "must be specified when `operator` is 'In' or 'NotIn'",
                        ));
                    }
                }
                "Exists" | "DoesNotExist" => {
                    if !values.is_empty() {
                        out.push(forbidden(
                            format!("{f}.values"),
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        ));
                    }
                }
                "Gt" | "Lt" => {
                    if values.len() != 1 {
                        out.push(required(
                            format!("{f}.values"),
                            "must be specified single value when `operator` is 'Lt' or 'Gt'",
                        ));
                    }
                }
                op => out.push(invalid(
                    format!("{f}.operator"),
                    &json!(op),
                    "not a valid selector operator",
                )),
            }
        }
    }
}

/// `ValidatePersistentVolumeUpdate`.
fn pv_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let source = |v: &Value| -> Map<String, Value> {
        let mut m: Map<String, Value> = PV_SOURCES
            .iter()
            .filter_map(|k| {
                v.pointer(&format!("/spec/{k}"))
                    .filter(|x| !x.is_null())
                    .map(|x| ((*k).to_owned(), x.clone()))
            })
            .collect();
        // A controllerExpandSecretRef may be added to a CSI volume that had none.
        if old.pointer("/spec/csi/controllerExpandSecretRef").is_none()
            && let Some(csi) = m.get_mut("csi").and_then(Value::as_object_mut)
        {
            csi.remove("controllerExpandSecretRef");
        }
        m
    };
    if source(new) != source(old) {
        out.push(forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    if new.pointer("/spec/volumeMode") != old.pointer("/spec/volumeMode") {
        out.push(immutable(
            "volumeMode",
            new.pointer("/spec/volumeMode").unwrap_or(&Value::Null),
        ));
    }
    if present(old, "/spec/nodeAffinity")
        && new.pointer("/spec/nodeAffinity") != old.pointer("/spec/nodeAffinity")
    {
        out.push(immutable(
            "nodeAffinity",
            new.pointer("/spec/nodeAffinity").unwrap_or(&Value::Null),
        ));
    }
    vac_update(new, old, out);
}

// ----------------------------------------------------------------- PersistentVolumeClaim

/// `ValidatePersistentVolumeClaimSpec`.
fn pvc_spec(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    access_modes(spec, path, "at least 1 access mode is required", out);
    let field = format!("{path}.resources[storage]");
    match spec.pointer("/resources/requests/storage") {
        None | Some(Value::Null) => out.push(required(field, "")),
        Some(v) => {
            if let Some(q) = quantity_at(v, &field, out)
                && q.is_negative()
            {
                out.push(invalid(&field, v, "must be greater than or equal to 0"));
            }
        }
    }
    if let Some(class) = spec.get("storageClassName").and_then(Value::as_str)
        && !class.is_empty()
    {
        class_name(class, &format!("{path}.storageClassName"), out);
    }
    volume_mode(spec, path, out);
    for ds in ["dataSource", "dataSourceRef"] {
        let Some(d) = spec.get(ds).filter(|v| !v.is_null()) else {
            continue;
        };
        let f = format!("{path}.{ds}");
        if s(d, "/name").is_empty() {
            out.push(required(format!("{f}.name"), ""));
        }
        if s(d, "/kind").is_empty() {
            out.push(required(format!("{f}.kind"), ""));
        }
        let group = s(d, "/apiGroup");
        if group.is_empty() && s(d, "/kind") != "PersistentVolumeClaim" {
            out.push(invalid(
                f.clone(),
                &json!(s(d, "/kind")),
                "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
            ));
        }
        if !group.is_empty() && !is_dns_subdomain(group) {
            out.push(invalid(
                format!("{f}.apiGroup"),
                &json!(group),
                SUBDOMAIN_MSG,
            ));
        }
        let ns = s(d, "/namespace");
        if ds == "dataSourceRef" && !ns.is_empty() && !is_dns_label(ns) {
            out.push(invalid(
                format!("{f}.namespace"),
                &json!(ns),
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            ));
        }
    }
    let source = spec.get("dataSource").filter(|v| !v.is_null());
    let reference = spec.get("dataSourceRef").filter(|v| !v.is_null());
    if let Some(r) = reference
        && !s(r, "/namespace").is_empty()
    {
        if source.is_some() {
            out.push(invalid(
                path,
                &json!(format!("{path}.dataSource")),
                "may not be specified when dataSourceRef.namespace is specified",
            ));
        }
    } else if let (Some(a), Some(b)) = (source, reference) {
        let same = |k: &str| a.get(k).filter(|v| !v.is_null()) == b.get(k).filter(|v| !v.is_null());
        if !(same("apiGroup") && same("kind") && same("name")) {
            out.push(invalid(
                path,
                &json!(format!("{path}.dataSource")),
                "must match dataSourceRef",
            ));
        }
    }
    // A claim's attributes class may be "" (unlike a volume's).
    if let Some(vac) = spec
        .get("volumeAttributesClassName")
        .and_then(Value::as_str)
        && !vac.is_empty()
    {
        class_name(vac, &format!("{path}.volumeAttributesClassName"), out);
    }
}

const RESIZE_STATUSES: [&str; 5] = [
    "ControllerResizeFailed",
    "ControllerResizeInProgress",
    "NodeResizeFailed",
    "NodeResizeInProgress",
    "NodeResizePending",
];

/// `validatePersistentVolumeClaimResourceKey`: a qualified name, and `storage` if it is a
/// native resource name (unprefixed or `kubernetes.io/`).
fn claim_resource_key(key: &str, field: &str, out: &mut Vec<Cause>) -> bool {
    if !is_qualified_name(key) {
        out.push(invalid(field, &json!(key), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        return false;
    }
    let native = match key.split_once('/') {
        None => true,
        Some((prefix, _)) => prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io"),
    };
    if native && key != "storage" {
        out.push(not_supported(field, &json!(key), &["storage"]));
        return false;
    }
    true
}

/// What `ValidatePersistentVolumeClaimStatusUpdate` checks of a status.
fn pvc_status(obj: &Value, out: &mut Vec<Cause>) {
    if let Some(cap) = map_of(obj, "/status/capacity") {
        for (k, v) in cap {
            let f = format!("status.capacity[{k}]");
            if quantity_at(v, &f, out).is_some_and(Quantity::is_negative) {
                out.push(invalid(f, v, "must be a valid resource quantity"));
            }
        }
    }
    if let Some(statuses) = map_of(obj, "/status/allocatedResourceStatuses") {
        for (k, v) in statuses {
            claim_resource_key(k, "status.allocatedResourceStatus", out);
            if !v.as_str().is_some_and(|v| RESIZE_STATUSES.contains(&v)) {
                out.push(not_supported(
                    "status.allocatedResourceStatus",
                    &json!(k),
                    &RESIZE_STATUSES,
                ));
            }
        }
    }
    if let Some(alloc) = map_of(obj, "/status/allocatedResources") {
        for (k, v) in alloc {
            if !claim_resource_key(k, "status.allocatedResources", out) {
                continue;
            }
            let f = format!("status.allocatedResources[{k}]");
            if quantity_at(v, &f, out).is_some_and(Quantity::is_negative) {
                out.push(invalid(f, v, "must be a valid resource quantity"));
            }
        }
    }
}

const BETA_CLASS: &str = "/metadata/annotations/volume.beta.kubernetes.io~1storage-class";

/// `ValidatePersistentVolumeClaimUpdate`: the spec is frozen but for the binding's volumeName
/// (once, from empty), a class set where there was none (the PV controller's retroactive default
/// class, or the beta annotation's upgrade), the attributes class, and a bound claim's request.
fn pvc_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let mut new_spec = new.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut old_spec = old.get("spec").cloned().unwrap_or_else(|| json!({}));
    if s(&old_spec, "/volumeName").is_empty() {
        set_or_remove(&mut old_spec, "volumeName", new_spec.get("volumeName"));
    }
    let class = |v: &Value| v.get("storageClassName").filter(|c| !c.is_null()).cloned();
    let (old_class, new_class) = (class(&old_spec), class(&new_spec));
    let old_beta = old.pointer(BETA_CLASS).and_then(Value::as_str);
    let new_beta = new.pointer(BETA_CLASS).and_then(Value::as_str);
    let from_annotation = old_beta.is_some()
        && old_class.is_none()
        && new_class.as_ref().and_then(Value::as_str) == old_beta
        && (new_beta.is_none() || new_beta == old_beta);
    if from_annotation {
        set_or_remove(&mut new_spec, "storageClassName", None);
    } else {
        if new_beta != old_beta {
            out.push(invalid(
                "metadata.annotations[volume.beta.kubernetes.io/storage-class]",
                &json!(new_beta.unwrap_or_default()),
                "field is immutable",
            ));
        }
        let from_nil = new_class.is_some()
            && old_class.is_none()
            && (old_beta.is_none() || new_class.as_ref().and_then(Value::as_str) == old_beta);
        if from_nil {
            set_or_remove(&mut new_spec, "storageClassName", None);
        }
    }
    if s(new, "/status/phase") == "Bound" {
        let old_storage = old_spec.pointer("/resources/requests/storage").cloned();
        if let Some(req) = new_spec
            .pointer_mut("/resources/requests")
            .and_then(Value::as_object_mut)
        {
            match old_storage {
                Some(v) => {
                    req.insert("storage".into(), v);
                }
                None => {
                    req.remove("storage");
                }
            }
        }
    }
    let old_vac = old_spec.get("volumeAttributesClassName").cloned();
    set_or_remove(&mut new_spec, "volumeAttributesClassName", old_vac.as_ref());
    if new_spec != old_spec {
        out.push(forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        ));
    }
    let size = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(|q| match q {
                Value::String(t) => Quantity::parse(t),
                Value::Number(n) => Quantity::parse(&n.to_string()),
                _ => None,
            })
            .unwrap_or(Quantity::ZERO)
    };
    let new_size = size(new, "/spec/resources/requests/storage");
    let old_size = size(old, "/spec/resources/requests/storage");
    let status_size = size(old, "/status/capacity/storage");
    if new_size < old_size && new_size <= status_size {
        out.push(forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        ));
    }
    if new.pointer("/spec/volumeMode") != old.pointer("/spec/volumeMode") {
        out.push(immutable(
            "volumeMode",
            new.pointer("/spec/volumeMode").unwrap_or(&Value::Null),
        ));
    }
    vac_update(new, old, out);
}

/// An attributes class, once set, is not unset (nor, on a claim, emptied).
fn vac_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let vac = |v: &Value| {
        v.pointer("/spec/volumeAttributesClassName")
            .filter(|x| !x.is_null())
            .cloned()
    };
    let (before, after) = (vac(old), vac(new));
    if before.is_none() || before == after {
        return;
    }
    match after {
        None => out.push(forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to nil is forbidden",
        )),
        Some(v) if v == "" && s(new, "/kind") == "PersistentVolumeClaim" => out.push(forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to an empty string is forbidden",
        )),
        Some(_) => {}
    }
}

fn set_or_remove(v: &mut Value, key: &str, to: Option<&Value>) {
    if let Some(m) = v.as_object_mut() {
        match to {
            Some(x) => {
                m.insert(key.to_owned(), x.clone());
            }
            None => {
                m.remove(key);
            }
        }
    }
}

// ---------------------------------------------------------------------------- StorageClass

const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETERS_SIZE: usize = 256 * 1024;

/// `ValidateStorageClass`.
fn storage_class(sc: &Value, out: &mut Vec<Cause>) {
    let provisioner = s(sc, "/provisioner");
    if provisioner.is_empty() {
        out.push(required("provisioner", ""));
    } else if !is_qualified_name(&provisioner.to_lowercase()) {
        out.push(invalid(
            "provisioner",
            &json!(provisioner),
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ));
    }
    if let Some(params) = map_of(sc, "/parameters") {
        if params.len() > MAX_PARAMETERS {
            out.push(Cause {
                reason: "FieldValueTooLong",
                field: "parameters".into(),
                message: format!("Too long: may not be more than {MAX_PARAMETERS} items"),
            });
        } else {
            let mut total = 0;
            for (k, v) in params {
                if k.is_empty() {
                    out.push(invalid("parameters", &json!(k), "field can not be empty."));
                }
                total += k.len() + v.as_str().map_or(0, str::len);
            }
            if total > MAX_PARAMETERS_SIZE {
                out.push(too_long("parameters", MAX_PARAMETERS_SIZE));
            }
        }
    }
    let policy = sc.get("reclaimPolicy").unwrap_or(&Value::Null);
    if !policy
        .as_str()
        .is_some_and(|p| matches!(p, "Delete" | "Retain"))
    {
        out.push(not_supported(
            "reclaimPolicy",
            policy,
            &["Delete", "Retain"],
        ));
    }
    let mode = sc.get("volumeBindingMode").unwrap_or(&Value::Null);
    if mode.is_null() {
        out.push(required("volumeBindingMode", ""));
    } else if !mode
        .as_str()
        .is_some_and(|m| matches!(m, "Immediate" | "WaitForFirstConsumer"))
    {
        out.push(not_supported(
            "volumeBindingMode",
            mode,
            &["Immediate", "WaitForFirstConsumer"],
        ));
    }
    allowed_topologies(arr(sc, "/allowedTopologies"), out);
}

/// `validateAllowedTopologies`: every term well formed, no two terms alike. Upstream compares
/// each term with a list that starts with as many empty terms as there are terms, so an empty
/// term is always a duplicate; so here.
fn allowed_topologies(terms: &[Value], out: &mut Vec<Cause>) {
    let mut seen: Vec<Map<String, Value>> = vec![Map::new(); terms.len()];
    for (i, t) in terms.iter().enumerate() {
        let path = format!("allowedTopologies[{i}]");
        let mut exprs = Map::new();
        for (j, e) in arr(t, "/matchLabelExpressions").iter().enumerate() {
            let f = format!("{path}.matchLabelExpressions[{j}]");
            let key = s(e, "/key");
            if !is_qualified_name(key) {
                out.push(invalid(
                    format!("{f}.key"),
                    &json!(key),
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                ));
            }
            let values = arr(e, "/values");
            if values.is_empty() {
                out.push(required(
                    format!("{f}.values"),
                    "must specify as least one value",
                ));
            }
            let mut set: Vec<&str> = Vec::new();
            for (k, v) in values.iter().enumerate() {
                let v = v.as_str().unwrap_or_default();
                if !is_label_value(v) {
                    out.push(invalid(
                        format!("{f}.values[{k}]"),
                        &json!(v),
                        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                    ));
                }
                if set.contains(&v) {
                    out.push(duplicate(format!("{f}.values[{k}]"), &json!(v)));
                }
                set.push(v);
            }
            if exprs.contains_key(key) {
                out.push(duplicate(format!("{f}.key"), &json!(key)));
            }
            set.sort_unstable();
            exprs.insert(key.to_owned(), json!(set));
        }
        if seen.contains(&exprs) {
            out.push(duplicate(
                format!("{path}.matchLabelExpressions"),
                &json!(""),
            ));
        }
        seen.push(exprs);
    }
}

/// `ValidateStorageClassUpdate`.
fn storage_class_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let params = |v: &Value| map_of(v, "/parameters").cloned().unwrap_or_default();
    if params(new) != params(old) {
        out.push(forbidden(
            "parameters",
            "updates to parameters are forbidden.",
        ));
    }
    if s(new, "/provisioner") != s(old, "/provisioner") {
        out.push(forbidden(
            "provisioner",
            "updates to provisioner are forbidden.",
        ));
    }
    if s(new, "/reclaimPolicy") != s(old, "/reclaimPolicy") {
        out.push(forbidden(
            "reclaimPolicy",
            "updates to reclaimPolicy are forbidden.",
        ));
    }
    if new.get("volumeBindingMode") != old.get("volumeBindingMode") {
        out.push(immutable(
            "volumeBindingMode",
            new.get("volumeBindingMode").unwrap_or(&Value::Null),
        ));
    }
}

// ------------------------------------------------------------------------ VolumeAttachment

const MAX_ATTACHED_METADATA_SIZE: usize = 256 * 1024;
const MAX_VOLUME_ERROR_MESSAGE_SIZE: usize = 1024;

/// `ValidateVolumeAttachment` (every write) and, on create, `ValidateVolumeAttachmentV1`.
fn volume_attachment(va: &Value, create: bool, out: &mut Vec<Cause>) {
    let attacher = s(va, "/spec/attacher");
    if attacher.is_empty() {
        out.push(required("spec.attacher", ""));
    }
    let source = va
        .pointer("/spec/source")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let pv = source.get("persistentVolumeName").filter(|v| !v.is_null());
    let inline = source.get("inlineVolumeSpec").filter(|v| !v.is_null());
    match (pv, inline) {
        (None, None) => out.push(required(
            "spec.source",
            "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        )),
        (Some(_), Some(_)) => out.push(forbidden(
            "spec.source",
            "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        )),
        (Some(name), None) => {
            if name.as_str().is_none_or(str::is_empty) {
                out.push(required(
                    "spec.source.persistentVolumeName",
                    "must specify non empty persistentVolumeName",
                ));
            }
        }
        (None, Some(spec)) => pv_spec(spec, "spec.source.inlineVolumeSpec", true, out),
    }
    // ValidateNodeName: an empty name is not "required", it is not a subdomain.
    let node = s(va, "/spec/nodeName");
    if !is_dns_subdomain(node) {
        out.push(invalid("spec.nodeName", &json!(node), SUBDOMAIN_MSG));
    }
    if let Some(status) = va.get("status").filter(|v| !v.is_null()) {
        if let Some(meta) = status.get("attachmentMetadata").and_then(Value::as_object) {
            let size: usize = meta
                .iter()
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum();
            if size > MAX_ATTACHED_METADATA_SIZE {
                out.push(too_long(
                    "status.attachmentMetadata",
                    MAX_ATTACHED_METADATA_SIZE,
                ));
            }
        }
        for e in ["attachError", "detachError"] {
            if s(status, &format!("/{e}/message")).len() > MAX_VOLUME_ERROR_MESSAGE_SIZE {
                // Upstream reports the metadata limit here, not the message's.
                out.push(too_long(
                    format!("status.{e}.message"),
                    MAX_ATTACHED_METADATA_SIZE,
                ));
            }
            if let Some(code) = status.pointer(&format!("/{e}/errorCode"))
                && code.as_i64().is_none_or(|c| c < 0)
            {
                out.push(invalid(
                    format!("status.{e}.errorCode"),
                    code,
                    "must be between 0 and 2147483647, inclusive",
                ));
            }
        }
    }
    if create {
        // The V1 rules, tightened for new attachments only.
        csi_driver_name(attacher, "spec.attacher", out);
        if let Some(name) = pv.and_then(Value::as_str)
            && !is_dns_subdomain(name)
        {
            out.push(invalid(
                "spec.source.persistentVolumeName",
                &json!(name),
                SUBDOMAIN_MSG,
            ));
        }
    }
}

// -------------------------------------------------------------------------------- CSIDriver

const FS_GROUP_POLICIES: [&str; 3] = ["File", "None", "ReadWriteOnceWithFSType"];

/// `validateCSIDriverSpec`. Defaulting has filled the booleans it requires, as on the real server.
fn csi_driver(d: &Value, out: &mut Vec<Cause>) {
    for (field, key) in [
        ("spec.attachedRequired", "attachRequired"),
        ("spec.podInfoOnMount", "podInfoOnMount"),
        ("spec.storageCapacity", "storageCapacity"),
        ("spec.seLinuxMount", "seLinuxMount"),
    ] {
        if d.pointer(&format!("/spec/{key}"))
            .is_none_or(Value::is_null)
        {
            out.push(required(field, ""));
        }
    }
    if let Some(p) = d.pointer("/spec/fsGroupPolicy").filter(|v| !v.is_null())
        && !p.as_str().is_some_and(|p| FS_GROUP_POLICIES.contains(&p))
    {
        out.push(not_supported("spec.fsGroupPolicy", p, &FS_GROUP_POLICIES));
    }
    let mut audiences: Vec<&str> = Vec::new();
    for (i, t) in arr(d, "/spec/tokenRequests").iter().enumerate() {
        let path = format!("spec.tokenRequests[{i}]");
        let audience = s(t, "/audience");
        if audiences.contains(&audience) {
            out.push(duplicate(format!("{path}.audience"), &json!(audience)));
            continue;
        }
        audiences.push(audience);
        if let Some(secs) = t.get("expirationSeconds").and_then(Value::as_i64) {
            if secs < 600 {
                out.push(invalid(
                    format!("{path}.expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if secs > 1 << 32 {
                out.push(invalid(
                    format!("{path}.expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
    }
    for m in arr(d, "/spec/volumeLifecycleModes") {
        if !m
            .as_str()
            .is_some_and(|m| matches!(m, "Persistent" | "Ephemeral"))
        {
            out.push(not_supported(
                "spec.volumeLifecycleModes",
                m,
                &["Persistent", "Ephemeral"],
            ));
        }
    }
    if let Some(p) = d
        .pointer("/spec/nodeAllocatableUpdatePeriodSeconds")
        .and_then(Value::as_i64)
        && p < 10
    {
        out.push(invalid(
            "spec.nodeAllocatableUpdatePeriodSeconds",
            &json!(p),
            "must be greater than or equal to 10 seconds",
        ));
    }
}

// ---------------------------------------------------------------------------------- CSINode

const CSI_NODE_ID_MAX: usize = 192;
const CSI_NODE_ID_LONGER_MAX: usize = 256;

/// `ValidateCSINode`; `long_ids` allows node IDs up to 256 (only on an update of a CSINode that
/// already has one longer than 192).
fn csi_node(node: &Value, long_ids: bool, out: &mut Vec<Cause>) {
    let mut names: Vec<&str> = Vec::new();
    for (i, d) in arr(node, "/spec/drivers").iter().enumerate() {
        let path = format!("spec.drivers[{i}]");
        let name = s(d, "/name");
        csi_driver_name(name, &format!("{path}.name"), out);
        let id = s(d, "/nodeID");
        if id.is_empty() {
            out.push(required(format!("{path}.nodeID"), ""));
        }
        let max = if long_ids {
            CSI_NODE_ID_LONGER_MAX
        } else {
            CSI_NODE_ID_MAX
        };
        if id.len() > max {
            out.push(invalid(
                format!("{path}.nodeID"),
                &json!(id),
                &format!("must be {max} characters or less"),
            ));
        }
        if let Some(count) = d.pointer("/allocatable/count").filter(|v| !v.is_null())
            && count.as_i64().is_none_or(|c| c < 0)
        {
            out.push(invalid(
                format!("{path}.allocatable.count"),
                count,
                "must be greater than or equal to 0",
            ));
        }
        if names.contains(&name) {
            out.push(duplicate(format!("{path}.name"), &json!(name)));
        }
        names.push(name);
        // Upstream reports the topology keys' problems at the driver's path.
        let mut keys: Vec<&str> = Vec::new();
        for k in arr(d, "/topologyKeys") {
            let k = k.as_str().unwrap_or_default();
            if k.is_empty() {
                out.push(required(path.clone(), ""));
            }
            if keys.contains(&k) {
                out.push(duplicate(path.clone(), &json!(k)));
            }
            keys.push(k);
            if !is_qualified_name(k) {
                out.push(invalid(path.clone(), &json!(k), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
            }
        }
    }
}

/// `ValidateCSINodeUpdate`: a driver that stays is unchanged, but for its allocatable count
/// where `MutableCSINodeAllocatableCount` is on.
fn csi_node_update(new: &Value, old: &Value, gates: Gates, out: &mut Vec<Cause>) {
    for old_d in arr(old, "/spec/drivers") {
        for new_d in arr(new, "/spec/drivers") {
            if s(new_d, "/name") != s(old_d, "/name") {
                continue;
            }
            let (mut a, mut b) = (new_d.clone(), old_d.clone());
            if gates.mutable_csi_node_allocatable_count {
                for d in [&mut a, &mut b] {
                    if let Some(m) = d.as_object_mut() {
                        m.remove("allocatable");
                    }
                }
            }
            if a != b {
                out.push(immutable("spec.drivers", &a));
            }
        }
    }
}

/// The feature gates the storage validation depends on, by the minor modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gates {
    /// Beta and on by default from 1.35 (off in 1.34).
    pub mutable_csi_node_allocatable_count: bool,
}

impl Gates {
    pub fn of_minor(minor: u32) -> Gates {
        Gates {
            mutable_csi_node_allocatable_count: minor >= 35,
        }
    }
}

// ----------------------------------------------------------------- strategies and admission

/// What the strategies and admission do to a new `kind` object before it is stored:
/// `default_class` is the class `DefaultStorageClass` would give a claim that names none.
pub fn on_create(kind: &str, obj: &mut Value, default_class: Option<String>, now: &str) {
    match kind {
        "PersistentVolume" => {
            add_finalizer(obj, "kubernetes.io/pv-protection");
            if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
                status.insert("lastPhaseTransitionTime".into(), json!(now));
            }
        }
        "PersistentVolumeClaim" => {
            add_finalizer(obj, "kubernetes.io/pvc-protection");
            let beta = obj
                .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                .is_some();
            drop_cross_namespace_source(obj, None);
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                if spec.get("storageClassName").is_none_or(Value::is_null)
                    && !beta
                    && let Some(class) = default_class
                {
                    spec.insert("storageClassName".into(), json!(class));
                }
                // NormalizeDataSources: either data source field implies the other.
                match (
                    spec.get("dataSource").filter(|v| !v.is_null()).cloned(),
                    spec.get("dataSourceRef").filter(|v| !v.is_null()).cloned(),
                ) {
                    (Some(ds), None) => {
                        spec.insert("dataSourceRef".into(), ds);
                    }
                    (None, Some(r)) if r.get("namespace").is_none_or(|n| n == "") => {
                        spec.insert("dataSource".into(), r);
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// The PV status strategy: a new phase gets a new `lastPhaseTransitionTime`, unless the writer
/// set one itself; an unchanged phase keeps the old one when the writer left it out.
pub fn on_update(kind: &str, obj: &mut Value, old: &Value, now: &str) {
    if kind == "PersistentVolumeClaim" {
        drop_cross_namespace_source(obj, Some(old));
    }
    if kind != "PersistentVolume" {
        return;
    }
    let phase = |v: &Value| s(v, "/status/phase").to_owned();
    let time = |v: &Value| {
        v.pointer("/status/lastPhaseTransitionTime")
            .filter(|t| !t.is_null())
            .cloned()
    };
    let to = if phase(obj) == phase(old) {
        // Unchanged phase, time left out: the old one is kept.
        time(obj).is_none().then(|| time(old)).flatten()
    } else if time(obj).is_none() || time(obj) == time(old) {
        Some(json!(now))
    } else {
        None
    };
    if let Some(t) = to
        && let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
    {
        status.insert("lastPhaseTransitionTime".into(), t);
    }
}

/// `DropDisabledFields` with `CrossNamespaceVolumeDataSource` (alpha) off: a data source in
/// another namespace is dropped, not refused, unless the stored claim already had one.
fn drop_cross_namespace_source(obj: &mut Value, old: Option<&Value>) {
    if old.is_some_and(|o| !s(o, "/spec/dataSourceRef/namespace").is_empty()) {
        return;
    }
    if let Some(r) = obj
        .pointer_mut("/spec/dataSourceRef")
        .and_then(Value::as_object_mut)
    {
        r.remove("namespace");
    }
}

fn add_finalizer(obj: &mut Value, name: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let fins = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(list) = fins.as_array_mut()
        && !list.iter().any(|f| f == name)
    {
        list.push(json!(name));
    }
}

/// The `PersistentVolumeClaimResize` admission plugin on an update of a claim (not its status):
/// a larger request needs a bound claim whose StorageClass (looked up by `class`) exists and has
/// `allowVolumeExpansion: true`. The refusal's reason, for a 403.
pub fn resize_admission(
    new: &Value,
    old: &Value,
    class: impl Fn(&str) -> Option<Value>,
) -> Option<&'static str> {
    let size = |v: &Value| {
        v.pointer("/spec/resources/requests/storage")
            .and_then(|q| match q {
                Value::String(t) => Quantity::parse(t),
                Value::Number(n) => Quantity::parse(&n.to_string()),
                _ => None,
            })
            .unwrap_or(Quantity::ZERO)
    };
    if size(new) <= size(old) {
        return None;
    }
    if s(old, "/status/phase") != "Bound" {
        return Some("Only bound persistent volume claims can be expanded");
    }
    let class_of = |v: &Value| -> String {
        match s(
            v,
            "/metadata/annotations/volume.beta.kubernetes.io~1storage-class",
        ) {
            "" => s(v, "/spec/storageClassName").to_owned(),
            beta => beta.to_owned(),
        }
    };
    let (a, b) = (class_of(new), class_of(old));
    let allowed = !a.is_empty()
        && a == b
        && class(&a).is_some_and(|sc| {
            sc.get("allowVolumeExpansion").and_then(Value::as_bool) == Some(true)
        });
    (!allowed).then_some(
        "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
    )
}

/// The quantities of a volume or claim in their canonical form, as the real server stores them
/// (its decoder keeps the parsed value; what it serialises is `Quantity.String()`). A value that
/// is not a quantity is left for validation to refuse.
pub fn canonicalize(kind: &str, obj: &mut Value) {
    for ptr in quantity_maps(kind) {
        let Some(m) = obj.pointer_mut(ptr).and_then(Value::as_object_mut) else {
            continue;
        };
        for v in m.values_mut() {
            let text = match v {
                Value::String(t) => t.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            if let Some(c) = quantity::canonical(&text) {
                *v = Value::String(c);
            }
        }
    }
}

/// Where a volume's or claim's quantities are.
fn quantity_maps(kind: &str) -> &'static [&'static str] {
    match kind {
        "PersistentVolume" => &["/spec/capacity"],
        "PersistentVolumeClaim" => &[
            "/spec/resources/requests",
            "/spec/resources/limits",
            "/status/capacity",
            "/status/allocatedResources",
        ],
        _ => &[],
    }
}

/// Whether every quantity of a volume or claim parses. One that does not is refused before
/// anything else, by the decoder (a 400, not a 422).
pub fn quantities_decode(kind: &str, obj: &Value) -> bool {
    quantity_maps(kind).iter().all(|ptr| {
        map_of(obj, ptr).is_none_or(|m| {
            m.values().all(|v| match v {
                Value::String(t) => Quantity::parse(t).is_some(),
                Value::Number(_) => true,
                _ => false,
            })
        })
    })
}

/// Of the StorageClasses `classes`, the one `DefaultStorageClass` picks: among those marked
/// default, the newest, then the first by name (what upstream's `GetDefaultClass` sorts by).
pub fn default_class<'a>(classes: impl Iterator<Item = &'a Value>) -> Option<String> {
    let mut defaults: Vec<(&str, &str)> = classes
        .filter(|c| {
            [
                "/metadata/annotations/storageclass.kubernetes.io~1is-default-class",
                "/metadata/annotations/storageclass.beta.kubernetes.io~1is-default-class",
            ]
            .iter()
            .any(|p| s(c, p) == "true")
        })
        .map(|c| (s(c, "/metadata/creationTimestamp"), s(c, "/metadata/name")))
        .collect();
    defaults.sort_by(|a, b| b.0.cmp(a.0).then(a.1.cmp(b.1)));
    defaults.first().map(|(_, n)| (*n).to_owned())
}

// ------------------------------------------------------------------- protection controllers

const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// One pass of kube-controller-manager's pvc-protection and pv-protection controllers, which
/// the fake does not run by itself: a claim being deleted loses its finalizer once no scheduled
/// pod of its namespace names it in a `persistentVolumeClaim` volume (upstream's `podUsesPVC`);
/// a volume being deleted once it is not `Bound`. The objects then go, as their deletion asked.
/// Whether anything changed.
pub(crate) fn reconcile_protection(
    store: &mut crate::store::Store,
) -> crate::error::ApiResult<bool> {
    use crate::error::ApiError;
    use crate::store::{Scope, WriteCtx};
    let index = |store: &crate::store::Store, plural: &str| {
        store
            .type_index("", "v1", plural)
            .ok_or_else(|| ApiError::no_route(plural))
    };
    let (pods, pvcs, pvs) = (
        index(store, "pods")?,
        index(store, "persistentvolumeclaims")?,
        index(store, "persistentvolumes")?,
    );
    let ctx = |manager: &str| WriteCtx {
        manager: manager.into(),
        scope: Scope::Main,
        dry_run: false,
        keep_status: true,
        validation: None,
        warnings: Default::default(),
        user: None,
    };
    let deleting = |o: &Value, finalizer: &str| {
        present(o, "/metadata/deletionTimestamp")
            && arr(o, "/metadata/finalizers")
                .iter()
                .any(|f| f == finalizer)
    };
    let without = |o: &Value, finalizer: &str| {
        let mut o = o.clone();
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            if let Some(Value::Array(f)) = m.get_mut("finalizers") {
                f.retain(|x| x != finalizer);
            }
        }
        o
    };
    let mut changed = false;
    let none = (Default::default(), Default::default());
    for claim in store.list(pvcs, None, &none.0, &none.1) {
        if !deleting(&claim, PVC_PROTECTION) {
            continue;
        }
        let (ns, name) = (
            s(&claim, "/metadata/namespace"),
            s(&claim, "/metadata/name"),
        );
        let used = store
            .list(pods, Some(ns), &none.0, &none.1)
            .iter()
            .any(|p| {
                !s(p, "/spec/nodeName").is_empty()
                    && arr(p, "/spec/volumes")
                        .iter()
                        .any(|v| s(v, "/persistentVolumeClaim/claimName") == name)
            });
        if !used {
            let (ns, name) = (ns.to_owned(), name.to_owned());
            store.update(
                pvcs,
                &ns,
                &name,
                without(&claim, PVC_PROTECTION),
                &ctx("pvc-protection-controller"),
            )?;
            changed = true;
        }
    }
    for volume in store.list(pvs, None, &none.0, &none.1) {
        if deleting(&volume, PV_PROTECTION) && s(&volume, "/status/phase") != "Bound" {
            let name = s(&volume, "/metadata/name").to_owned();
            store.update(
                pvs,
                "",
                &name,
                without(&volume, PV_PROTECTION),
                &ctx("pv-protection-controller"),
            )?;
            changed = true;
        }
    }
    Ok(changed)
}
