//! The NodeRestriction admission plugin (`plugin/pkg/admission/noderestriction`), which kubeadm
//! enables: what a kubelet (`system:node:<name>` in `system:nodes`) may write once the Node
//! authorizer let the request through.
//!
//! - Pods: create only a mirror pod (`kubernetes.io/config.mirror`) bound to itself, owned by its
//!   own Node alone (controller, no `blockOwnerDeletion`, the Node's UID), naming no
//!   ServiceAccount, Secret, ConfigMap, ClusterTrustBundle or claim; delete only pods bound to
//!   itself; update `status` only of pods bound to itself, without changing their labels or
//!   resource claim statuses; evict only pods bound to itself.
//! - Nodes: only its own, created without `configSource` and with labels in the kubelet's allowed
//!   set (`node-restriction.kubernetes.io/` never; `kubernetes.io` and `k8s.io` ones only the
//!   kubelet's: `kubernetes.io/hostname`, the topology, instance-type, os and arch labels, and
//!   the `kubelet.kubernetes.io` and `node.kubernetes.io` namespaces), updated without changing
//!   its taints, its `configSource` or labels outside that set.
//! - Claims: only `status`, and there only `capacity`, `conditions`, `allocatedResources` and
//!   `allocatedResourceStatuses` (`RecoverVolumeExpansionFailure` is on in every minor kos
//!   supports).
//! - ServiceAccount tokens: only bound to a pod (by name and UID) bound to itself.
//! - Leases: only in `kube-node-lease`, only its own; CSINodes: only its own.
//!
//! Errors are `admission.NewForbidden`'s 403: `<resource> "<name>" is forbidden: <why>`.
//!
//! Not modelled: what it checks of CertificateSigningRequests, ResourceSlices and
//! PodCertificateRequests (the fake serves none of them).

use serde_json::Value;

use crate::authz::User;
use crate::error::{ApiError, ApiResult, Details};
use crate::nodeauth::{MIRROR_ANNOTATION, NODE_LEASE_NAMESPACE, node_identity};
use crate::store::Store;

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Create,
    Update,
    Delete,
}

/// `admission.Attributes`: what is written, by whom.
#[derive(Debug, Clone)]
pub(crate) struct Attributes<'a> {
    pub op: Op,
    pub group: &'a str,
    /// The plural.
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object written (for a delete: none).
    pub object: Option<&'a Value>,
    /// The stored object an update or delete replaces.
    pub old: Option<&'a Value>,
}

/// `admission.NewForbidden`: the group-resource and the name, the reason after them.
fn forbidden(a: &Attributes<'_>, why: impl std::fmt::Display) -> ApiError {
    let name = if a.name.is_empty() {
        a.object.map(|o| s(o, "/metadata/name")).unwrap_or_default()
    } else {
        a.name
    };
    let qualified = if a.group.is_empty() {
        a.resource.to_owned()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let what = if name.is_empty() {
        format!("{qualified} is forbidden")
    } else {
        format!("{qualified} \"{name}\" is forbidden")
    };
    let mut e = ApiError::new(403, "Forbidden", format!("{what}: {why}"));
    e.details = Some(Box::new(Details {
        name: (!name.is_empty()).then(|| name.to_owned()),
        group: (!a.group.is_empty()).then(|| a.group.to_owned()),
        kind: Some(a.resource.to_owned()),
        causes: Vec::new(),
    }));
    e
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn stored(store: &Store, plural: &str, ns: &str, name: &str) -> ApiResult<Value> {
    let res = store
        .type_index("", "v1", plural)
        .ok_or_else(|| ApiError::no_route(plural))?;
    store.get(res, ns, name)
}

/// The plugin's decision on one write; non-node users pass.
pub(crate) fn admit(store: &Store, user: &User, a: &Attributes<'_>) -> ApiResult<()> {
    let Some(node) = node_identity(user) else {
        return Ok(());
    };
    if node.is_empty() {
        return Err(forbidden(
            a,
            format!("could not determine node from user {:?}", user.name),
        ));
    }
    match (a.group, a.resource) {
        ("", "pods") => match a.subresource {
            "" => pod(store, node, a),
            "status" => pod_status(node, a),
            "eviction" => eviction(store, node, a),
            other => Err(forbidden(
                a,
                format!(
                    "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
                ),
            )),
        },
        ("", "nodes") => node_object(node, a),
        ("", "persistentvolumeclaims") => match a.subresource {
            "status" => claim_status(node, a),
            _ => Err(forbidden(a, "may only update PVC status")),
        },
        ("", "serviceaccounts") => token(store, node, a),
        ("coordination.k8s.io", "leases") => lease(node, a),
        ("storage.k8s.io", "csinodes") => csi_node(node, a),
        _ => Ok(()),
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Create => "CREATE",
        Op::Update => "UPDATE",
        Op::Delete => "DELETE",
    }
}

fn pod(store: &Store, node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    match a.op {
        Op::Create => mirror_pod(store, node, a),
        Op::Delete => {
            let existing = stored(store, "pods", a.namespace, a.name)?;
            if s(&existing, "/spec/nodeName") != node {
                return Err(forbidden(
                    a,
                    format!("node {node:?} can only delete pods with spec.nodeName set to itself"),
                ));
            }
            Ok(())
        }
        Op::Update => Err(forbidden(
            a,
            format!(
                "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
                op_name(a.op)
            ),
        )),
    }
}

fn mirror_pod(store: &Store, node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    let Some(pod) = a.object else {
        return Err(forbidden(a, "unexpected type <nil>"));
    };
    let mirror = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|m| m.contains_key(MIRROR_ANNOTATION));
    if !mirror {
        return Err(forbidden(
            a,
            format!(
                "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
            ),
        ));
    }
    if s(pod, "/spec/nodeName") != node {
        return Err(forbidden(
            a,
            format!("node {node:?} can only create pods with spec.nodeName set to itself"),
        ));
    }
    let owners: Vec<&Value> = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    match owners.as_slice() {
        [] => {
            return Err(forbidden(
                a,
                format!("node {node:?} can only create pods with an owner reference set to itself"),
            ));
        }
        [owner] => {
            if s(owner, "/apiVersion") != "v1"
                || s(owner, "/kind") != "Node"
                || s(owner, "/name") != node
            {
                return Err(forbidden(
                    a,
                    format!(
                        "node {node:?} can only create pods with an owner reference set to itself"
                    ),
                ));
            }
            if owner.get("controller").and_then(Value::as_bool) != Some(true) {
                return Err(forbidden(
                    a,
                    format!(
                        "node {node:?} can only create pods with a controller owner reference set to itself"
                    ),
                ));
            }
            if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
                return Err(forbidden(
                    a,
                    format!("node {node:?} must not set blockOwnerDeletion on an owner reference"),
                ));
            }
            let own = stored(store, "nodes", "", node)?;
            let (want, got) = (s(owner, "/uid"), s(&own, "/metadata/uid"));
            if want != got {
                return Err(forbidden(
                    a,
                    format!("node {node} UID mismatch: expected {want} got {got}"),
                ));
            }
        }
        _ => {
            return Err(forbidden(
                a,
                format!(
                    "node {node:?} can only create pods with a single owner reference set to itself"
                ),
            ));
        }
    }
    if !s(pod, "/spec/serviceAccountName").is_empty() {
        return Err(forbidden(
            a,
            format!("node {node:?} can not create pods that reference a service account"),
        ));
    }
    if !crate::nodeauth::pod_secrets(pod).is_empty() {
        return Err(forbidden(
            a,
            format!("node {node:?} can not create pods that reference secrets"),
        ));
    }
    if !crate::nodeauth::pod_config_maps(pod).is_empty() {
        return Err(forbidden(
            a,
            format!("node {node:?} can not create pods that reference configmaps"),
        ));
    }
    let volumes: Vec<&Value> = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let bundles = volumes.iter().any(|v| {
        v.pointer("/projected/sources")
            .and_then(Value::as_array)
            .is_some_and(|srcs| srcs.iter().any(|p| p.get("clusterTrustBundle").is_some()))
    });
    if bundles {
        return Err(forbidden(
            a,
            format!("node {node:?} can not create pods that reference clustertrustbundles"),
        ));
    }
    if volumes
        .iter()
        .any(|v| v.get("persistentVolumeClaim").is_some())
    {
        return Err(forbidden(
            a,
            format!("node {node:?} can not create pods that reference persistentvolumeclaims"),
        ));
    }
    Ok(())
}

fn pod_status(node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    if a.op != Op::Update {
        return Err(forbidden(
            a,
            format!("unexpected operation {:?}", op_name(a.op)),
        ));
    }
    let (Some(old), Some(new)) = (a.old, a.object) else {
        return Err(forbidden(a, "unexpected type <nil>"));
    };
    if s(old, "/spec/nodeName") != node {
        return Err(forbidden(
            a,
            format!(
                "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
            ),
        ));
    }
    let labels = |v: &Value| {
        v.pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    if labels(old) != labels(new) {
        return Err(forbidden(
            a,
            format!("node {node:?} cannot update labels through pod status"),
        ));
    }
    let claims = |v: &Value| -> Vec<(String, Option<String>)> {
        v.pointer("/status/resourceClaimStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    s(c, "/name").to_owned(),
                    c.get("resourceClaimName")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                )
            })
            .collect()
    };
    if claims(old) != claims(new) {
        return Err(forbidden(
            a,
            format!("node {node:?} cannot update resource claim statues"),
        ));
    }
    Ok(())
}

fn eviction(store: &Store, node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    if a.op != Op::Create {
        return Err(forbidden(
            a,
            format!("unexpected operation {}", op_name(a.op)),
        ));
    }
    let pod_name = if a.name.is_empty() {
        a.object.map(|e| s(e, "/metadata/name")).unwrap_or_default()
    } else {
        a.name
    };
    if pod_name.is_empty() {
        return Err(forbidden(a, "could not determine pod from request data"));
    }
    let existing = stored(store, "pods", a.namespace, pod_name)?;
    if s(&existing, "/spec/nodeName") != node {
        return Err(forbidden(
            a,
            format!("node {node} can only evict pods with spec.nodeName set to itself"),
        ));
    }
    Ok(())
}

fn claim_status(node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    if a.op != Op::Update {
        return Err(forbidden(
            a,
            format!("unexpected operation {:?}", op_name(a.op)),
        ));
    }
    let (Some(old), Some(new)) = (a.old, a.object) else {
        return Err(forbidden(a, "unexpected type <nil>"));
    };
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        if let Some(st) = v.get_mut("status").and_then(Value::as_object_mut) {
            for f in [
                "capacity",
                "conditions",
                "allocatedResources",
                "allocatedResourceStatuses",
            ] {
                st.remove(f);
            }
        }
        v
    };
    if strip(old) != strip(new) {
        return Err(forbidden(
            a,
            format!(
                "node {node:?} is not allowed to update fields other than status.quantity and status.conditions"
            ),
        ));
    }
    Ok(())
}

/// `getLabelNamespace`: the prefix of a label key, `""` when it has none.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or_default()
}

fn in_namespace(ns: &str, domain: &str) -> bool {
    ns == domain || ns.ends_with(&format!(".{domain}"))
}

/// `kubeletapis.IsKubeletLabel`.
fn is_kubelet_label(key: &str) -> bool {
    const LABELS: [&str; 11] = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    let ns = label_namespace(key);
    LABELS.contains(&key)
        || in_namespace(ns, "kubelet.kubernetes.io")
        || in_namespace(ns, "node.kubernetes.io")
}

/// `getForbiddenLabels` of the labels that differ, sorted.
fn forbidden_labels(new: &Value, old: Option<&Value>) -> Vec<String> {
    let labels = |v: Option<&Value>| {
        v.and_then(|v| v.pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let (a, b) = (labels(Some(new)), labels(old));
    let mut modified: Vec<String> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .chain(b.iter().filter(|(k, v)| a.get(*k) != Some(*v)))
        .map(|(k, _)| k.clone())
        .collect();
    modified.sort();
    modified.dedup();
    modified.retain(|k| {
        let ns = label_namespace(k);
        let kubernetes = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
        in_namespace(ns, "node-restriction.kubernetes.io") || (kubernetes && !is_kubelet_label(k))
    });
    modified
}

fn node_object(node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    let requested = if a.name.is_empty() {
        a.object.map(|o| s(o, "/metadata/name")).unwrap_or_default()
    } else {
        a.name
    };
    if requested != node {
        return Err(forbidden(
            a,
            format!("node {node:?} is not allowed to modify node {requested:?}"),
        ));
    }
    match (a.op, a.object) {
        (Op::Create, Some(n)) => {
            if n.pointer("/spec/configSource")
                .is_some_and(|c| !c.is_null())
            {
                return Err(forbidden(
                    a,
                    format!(
                        "node {node:?} is not allowed to create pods with a non-nil configSource"
                    ),
                ));
            }
            let bad = forbidden_labels(n, None);
            if !bad.is_empty() {
                return Err(forbidden(
                    a,
                    format!(
                        "node {node:?} is not allowed to set the following labels: {}",
                        bad.join(", ")
                    ),
                ));
            }
        }
        (Op::Update, Some(n)) => {
            let old = a.old.unwrap_or(&Value::Null);
            let source = n.pointer("/spec/configSource").filter(|c| !c.is_null());
            if source.is_some() && source != old.pointer("/spec/configSource") {
                return Err(forbidden(
                    a,
                    format!(
                        "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                    ),
                ));
            }
            let taints = |v: &Value| {
                v.pointer("/spec/taints")
                    .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
                    .cloned()
            };
            if taints(n) != taints(old) {
                return Err(forbidden(
                    a,
                    format!("node {node:?} is not allowed to modify taints"),
                ));
            }
            let bad = forbidden_labels(n, Some(old));
            if !bad.is_empty() {
                return Err(forbidden(
                    a,
                    format!("is not allowed to modify labels: {}", bad.join(", ")),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

fn token(store: &Store, node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    if a.op != Op::Create || a.subresource != "token" {
        return Ok(());
    }
    let Some(tr) = a.object else {
        return Err(forbidden(a, "unexpected type <nil>"));
    };
    let r = tr.pointer("/spec/boundObjectRef").unwrap_or(&Value::Null);
    if r.is_null()
        || s(r, "/apiVersion") != "v1"
        || s(r, "/kind") != "Pod"
        || s(r, "/name").is_empty()
    {
        return Err(forbidden(a, "node requested token not bound to a pod"));
    }
    let uid = s(r, "/uid");
    if uid.is_empty() {
        return Err(forbidden(
            a,
            "node requested token with a pod binding without a uid",
        ));
    }
    let pod = stored(store, "pods", a.namespace, s(r, "/name"))?;
    if uid != s(&pod, "/metadata/uid") {
        return Err(forbidden(
            a,
            format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    if s(&pod, "/spec/nodeName") != node {
        return Err(forbidden(
            a,
            "node requested token bound to a pod scheduled on a different node",
        ));
    }
    Ok(())
}

fn lease(node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    if a.namespace != NODE_LEASE_NAMESPACE {
        return Err(forbidden(
            a,
            format!("can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"),
        ));
    }
    let name = match (a.op, a.object) {
        (Op::Create, Some(o)) => s(o, "/metadata/name"),
        _ => a.name,
    };
    if name != node {
        return Err(forbidden(
            a,
            "can only access node lease with the same name as the requesting node",
        ));
    }
    Ok(())
}

fn csi_node(node: &str, a: &Attributes<'_>) -> ApiResult<()> {
    let name = match (a.op, a.object) {
        (Op::Create, Some(o)) => s(o, "/metadata/name"),
        _ => a.name,
    };
    if name != node {
        return Err(forbidden(
            a,
            "can only access CSINode with the same name as the requesting node",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
