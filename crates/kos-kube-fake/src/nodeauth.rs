//! kube-apiserver's Node authorizer (`plugin/pkg/auth/authorizer/node`), the `Node` of kubeadm's
//! `--authorization-mode=Node,RBAC`: it decides for kubelets (`system:node:<name>` in
//! `system:nodes`) alone, before RBAC, with the `AuthorizeNodeWithSelectors` rules (on by default
//! from 1.32; every minor kos supports).
//!
//! - Secrets and ConfigMaps: get, list, watch of one named object in a namespace that a pod bound
//!   to the node references; PersistentVolumeClaims, PersistentVolumes, VolumeAttachments: get of
//!   one related object; a claim's `status`: update and patch; ServiceAccounts: create of the
//!   `token` subresource of a pod's ServiceAccount.
//! - Leases in `kube-node-lease` and CSINodes: get, create, update, patch, delete of the node's
//!   own (create by any name: the NodeRestriction admission plugin checks it).
//! - Nodes: get, list, watch of its own by name; create, update, patch, and `status` update and
//!   patch of any (NodeRestriction narrows them). Pods: get of a pod bound to it; list and watch
//!   with the `spec.nodeName=<node>` field selector (or of one related pod by name); create,
//!   delete, `status` update and patch, `eviction` create (NodeRestriction narrows them).
//! - Anything else: the static node rules (`bootstrappolicy.NodeRules()`).
//!
//! The graph the real authorizer keeps from informers is read here from the store on each
//! decision, which is the same relation without the informers' lag: node ← pod (bound by
//! `spec.nodeName`) ← the Secrets, ConfigMaps, claims and ServiceAccount the pod names (none for a
//! mirror pod) ← a claim's PersistentVolume (by its `claimRef`) ← the Secrets the volume names for
//! the kubelet; node ← VolumeAttachment (by `spec.nodeName`).
//!
//! Not modelled: ResourceClaims and ResourceSlices (the fake serves no `resource.k8s.io`),
//! PodCertificateRequests, ClusterTrustBundles (their gate is off by default).

use serde_json::Value;

use crate::authz::{RequestInfo, User, rule_allows};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Store;

pub(crate) const NODE_PREFIX: &str = "system:node:";
pub(crate) const NODES_GROUP: &str = "system:nodes";
pub(crate) const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
pub(crate) const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `nodeidentifier.NodeIdentity`: the node a user is, when it is one (`Some("")`: a node user
/// whose node cannot be told).
pub(crate) fn node_identity(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_PREFIX)?;
    user.groups.iter().any(|g| g == NODES_GROUP).then_some(name)
}

/// What one authorizer of the chain says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    /// No opinion, with the reason the 403 carries (empty: none).
    NoOpinion(String),
}

fn no(reason: impl Into<String>) -> Decision {
    Decision::NoOpinion(reason.into())
}

/// The Node authorizer's decision.
pub(crate) fn authorize(store: &Store, user: &User, info: &RequestInfo) -> Decision {
    let Some(node) = node_identity(user) else {
        return no("");
    };
    if node.is_empty() {
        return no(format!("unknown node for user {:?}", user.name));
    }
    if info.resource_request {
        match (info.api_group.as_str(), info.resource.as_str()) {
            ("", "secrets") => return read_namespaced(store, node, Vertex::Secret, info),
            ("", "configmaps") => return read_namespaced(store, node, Vertex::ConfigMap, info),
            ("", "persistentvolumeclaims") if info.subresource == "status" => {
                return status_update(store, node, Vertex::Pvc, info);
            }
            ("", "persistentvolumeclaims") => return get_one(store, node, Vertex::Pvc, info),
            ("", "persistentvolumes") => return get_one(store, node, Vertex::Pv, info),
            ("storage.k8s.io", "volumeattachments") => {
                return get_one(store, node, Vertex::VolumeAttachment, info);
            }
            ("", "serviceaccounts") => return create_token(store, node, info),
            ("coordination.k8s.io", "leases") => return lease(node, info),
            ("storage.k8s.io", "csinodes") => return csi_node(node, info),
            ("", "nodes") => return node_object(node, info),
            ("", "pods") => return pod(store, node, info),
            _ => {}
        }
    }
    if node_rules().iter().any(|r| rule_allows(info, r)) {
        Decision::Allow
    } else {
        no("")
    }
}

fn read_namespaced(store: &Store, node: &str, v: Vertex, info: &RequestInfo) -> Decision {
    if !matches!(info.verb.as_str(), "get" | "list" | "watch") {
        return no("can only read resources of this type");
    }
    if !info.subresource.is_empty() {
        return no("cannot read subresource");
    }
    if info.namespace.is_empty() {
        return no("can only read namespaced object of this type");
    }
    related(store, node, v, info)
}

fn get_one(store: &Store, node: &str, v: Vertex, info: &RequestInfo) -> Decision {
    if info.verb != "get" {
        return no("can only get individual resources of this type");
    }
    if !info.subresource.is_empty() {
        return no("cannot get subresource");
    }
    related(store, node, v, info)
}

fn status_update(store: &Store, node: &str, v: Vertex, info: &RequestInfo) -> Decision {
    if !matches!(info.verb.as_str(), "update" | "patch") {
        return no("can only get/update/patch this type");
    }
    if info.subresource != "status" {
        return no("can only update status subresource");
    }
    related(store, node, v, info)
}

fn related(store: &Store, node: &str, v: Vertex, info: &RequestInfo) -> Decision {
    if info.name.is_empty() {
        return no("No Object name found");
    }
    if has_path(store, node, v, &info.namespace, &info.name) {
        Decision::Allow
    } else {
        no(format!(
            "no relationship found between node '{node}' and this object"
        ))
    }
}

fn create_token(store: &Store, node: &str, info: &RequestInfo) -> Decision {
    if info.verb != "create" || info.name.is_empty() {
        return no("can only create tokens for individual service accounts");
    }
    if info.subresource != "token" {
        return no("can only create token subresource of serviceaccount");
    }
    related(store, node, Vertex::ServiceAccount, info)
}

fn lease(node: &str, info: &RequestInfo) -> Decision {
    let verb = info.verb.as_str();
    if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
        return no("can only get, create, update, patch, or delete a node lease");
    }
    if info.namespace != NODE_LEASE_NAMESPACE {
        return no(format!(
            "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
        ));
    }
    if verb != "create" && info.name != node {
        return no("can only access node lease with the same name as the requesting node");
    }
    Decision::Allow
}

fn csi_node(node: &str, info: &RequestInfo) -> Decision {
    let verb = info.verb.as_str();
    if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
        return no("can only get, create, update, patch, or delete a CSINode");
    }
    if !info.subresource.is_empty() {
        return no("cannot authorize CSINode subresources");
    }
    if verb != "create" && info.name != node {
        return no("can only access CSINode with the same name as the requesting node");
    }
    Decision::Allow
}

fn node_object(node: &str, info: &RequestInfo) -> Decision {
    match (info.subresource.as_str(), info.verb.as_str()) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => Decision::Allow,
        ("", "get" | "list" | "watch") => {
            if info.name == node {
                Decision::Allow
            } else if info.name.is_empty() {
                no(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                ))
            } else {
                no(format!(
                    "node '{node}' cannot read '{}', only its own Node object",
                    info.name
                ))
            }
        }
        _ => no(""),
    }
}

fn pod(store: &Store, node: &str, info: &RequestInfo) -> Decision {
    match (info.subresource.as_str(), info.verb.as_str()) {
        ("", "get") => get_one(store, node, Vertex::Pod, info),
        ("", "list" | "watch") => {
            let scoped = info
                .field_selector
                .iter()
                .any(|r| r.field == "spec.nodeName" && r.equals && r.value == node);
            if scoped {
                Decision::Allow
            } else if !info.name.is_empty() {
                related(store, node, Vertex::Pod, info)
            } else {
                no("can only list/watch pods with spec.nodeName field selector")
            }
        }
        ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
            Decision::Allow
        }
        _ => no(""),
    }
}

/// The kinds of objects the graph relates to nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vertex {
    Pod,
    Secret,
    ConfigMap,
    Pvc,
    Pv,
    ServiceAccount,
    VolumeAttachment,
}

fn all(store: &Store, group: &str, plural: &str, ns: Option<&str>) -> Vec<Value> {
    let Some(res) = store.type_index(group, "v1", plural) else {
        return Vec::new();
    };
    store.list(
        res,
        ns,
        &LabelSelector::default(),
        &FieldSelector::default(),
    )
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn items<'a>(v: &'a Value, p: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(p).and_then(Value::as_array).into_iter().flatten()
}

/// The pods bound to `node` in `ns` (the graph's pod vertices with an edge to the node).
fn pods_on(store: &Store, node: &str, ns: Option<&str>) -> Vec<Value> {
    all(store, "", "pods", ns)
        .into_iter()
        .filter(|p| s(p, "/spec/nodeName") == node)
        .collect()
}

fn is_mirror(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// Whether the graph has a path from the object to the node.
pub(crate) fn has_path(store: &Store, node: &str, v: Vertex, ns: &str, name: &str) -> bool {
    match v {
        Vertex::Pod => pods_on(store, node, Some(ns))
            .iter()
            .any(|p| s(p, "/metadata/name") == name),
        Vertex::VolumeAttachment => all(store, "storage.k8s.io", "volumeattachments", None)
            .iter()
            .any(|va| s(va, "/metadata/name") == name && s(va, "/spec/nodeName") == node),
        Vertex::Secret | Vertex::ConfigMap | Vertex::Pvc | Vertex::ServiceAccount => {
            let pods = pods_on(store, node, Some(ns));
            let by_pod = pods.iter().filter(|p| !is_mirror(p)).any(|p| match v {
                Vertex::Secret => pod_secrets(p).iter().any(|n| n == name),
                Vertex::ConfigMap => pod_config_maps(p).iter().any(|n| n == name),
                Vertex::Pvc => pod_claims(p).iter().any(|n| n == name),
                _ => s(p, "/spec/serviceAccountName") == name,
            });
            by_pod
                || (v == Vertex::Secret
                    && all(store, "", "persistentvolumes", None).iter().any(|pv| {
                        pv_kubelet_secrets(pv)
                            .iter()
                            .any(|(sns, sname)| sns == ns && sname == name)
                            && pv_reaches(store, node, pv)
                    }))
        }
        Vertex::Pv => all(store, "", "persistentvolumes", None)
            .iter()
            .any(|pv| s(pv, "/metadata/name") == name && pv_reaches(store, node, pv)),
    }
}

/// A volume's edge goes to the claim its `claimRef` names, whose pods may be on the node.
fn pv_reaches(store: &Store, node: &str, pv: &Value) -> bool {
    let (ns, claim) = (
        s(pv, "/spec/claimRef/namespace"),
        s(pv, "/spec/claimRef/name"),
    );
    !claim.is_empty() && has_path(store, node, Vertex::Pvc, ns, claim)
}

/// Every container of a pod: init, regular and ephemeral.
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    items(pod, "/spec/initContainers")
        .chain(items(pod, "/spec/containers"))
        .chain(items(pod, "/spec/ephemeralContainers"))
}

/// `podutil.VisitPodSecretNames`: image pull secrets, the containers' `env` and `envFrom`, the
/// volumes' Secret sources (`secret`, projected, `azureFile`, a CSI volume's
/// `nodePublishSecretRef` and the `secretRef` of the other in-tree types).
pub(crate) fn pod_secrets(pod: &Value) -> Vec<String> {
    let mut out: Vec<String> = items(pod, "/spec/imagePullSecrets")
        .map(|r| s(r, "/name").to_owned())
        .collect();
    for c in containers(pod) {
        out.extend(items(c, "/envFrom").map(|e| s(e, "/secretRef/name").to_owned()));
        out.extend(items(c, "/env").map(|e| s(e, "/valueFrom/secretKeyRef/name").to_owned()));
    }
    for v in items(pod, "/spec/volumes") {
        out.push(s(v, "/secret/secretName").to_owned());
        out.push(s(v, "/azureFile/secretName").to_owned());
        out.push(s(v, "/csi/nodePublishSecretRef/name").to_owned());
        out.extend(items(v, "/projected/sources").map(|p| s(p, "/secret/name").to_owned()));
        if let Some(m) = v.as_object() {
            out.extend(m.values().map(|src| s(src, "/secretRef/name").to_owned()));
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

/// `podutil.VisitPodConfigmapNames`: the containers' `env` and `envFrom`, `configMap` and
/// projected volumes.
pub(crate) fn pod_config_maps(pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in containers(pod) {
        out.extend(items(c, "/envFrom").map(|e| s(e, "/configMapRef/name").to_owned()));
        out.extend(items(c, "/env").map(|e| s(e, "/valueFrom/configMapKeyRef/name").to_owned()));
    }
    for v in items(pod, "/spec/volumes") {
        out.push(s(v, "/configMap/name").to_owned());
        out.extend(items(v, "/projected/sources").map(|p| s(p, "/configMap/name").to_owned()));
    }
    out.retain(|n| !n.is_empty());
    out
}

/// The claims a pod's volumes name: `persistentVolumeClaim`, and a generic ephemeral volume's
/// `<pod>-<volume>`.
pub(crate) fn pod_claims(pod: &Value) -> Vec<String> {
    let pod_name = s(pod, "/metadata/name");
    items(pod, "/spec/volumes")
        .filter_map(|v| {
            let claim = s(v, "/persistentVolumeClaim/claimName");
            if !claim.is_empty() {
                Some(claim.to_owned())
            } else if v.get("ephemeral").is_some() {
                Some(format!("{pod_name}-{}", s(v, "/name")))
            } else {
                None
            }
        })
        .collect()
}

/// `pvutil.VisitPVSecretNames`, the kubelet-visible ones: a CSI volume's node stage, publish and
/// expand secrets, the `secretRef` of the in-tree types (in the claim's namespace unless named).
fn pv_kubelet_secrets(pv: &Value) -> Vec<(String, String)> {
    let claim_ns = s(pv, "/spec/claimRef/namespace");
    let mut out = Vec::new();
    if let Some(csi) = pv.pointer("/spec/csi") {
        for r in [
            "nodeStageSecretRef",
            "nodePublishSecretRef",
            "nodeExpandSecretRef",
        ] {
            if let Some(r) = csi.get(r) {
                out.push((s(r, "/namespace").to_owned(), s(r, "/name").to_owned()));
            }
        }
    }
    if let Some(spec) = pv.get("spec").and_then(Value::as_object) {
        for (kind, src) in spec {
            if kind == "csi" {
                continue;
            }
            if let Some(r) = src.get("secretRef") {
                let ns = match s(r, "/namespace") {
                    "" => claim_ns,
                    n => n,
                };
                out.push((ns.to_owned(), s(r, "/name").to_owned()));
            }
            if kind == "azureFile" && !s(src, "/secretName").is_empty() {
                let ns = match s(src, "/secretNamespace") {
                    "" => claim_ns,
                    n => n,
                };
                out.push((ns.to_owned(), s(src, "/secretName").to_owned()));
            }
        }
    }
    out.retain(|(_, n)| !n.is_empty());
    out
}

/// `bootstrappolicy.NodeRules()` as of the minors kos supports (1.34–1.36, their default gates):
/// what the Node authorizer grants every node for the resources it does not subdivide.
pub(crate) fn node_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let rule = |verbs: &[&str], group: &str, resources: &[&str]| {
        let v = |xs: &[&str]| xs.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        k8s_openapi::api::rbac::v1::PolicyRule {
            verbs: v(verbs),
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(v(resources)),
            ..Default::default()
        }
    };
    let read = ["get", "list", "watch"];
    vec![
        rule(&["create"], "authentication.k8s.io", &["tokenreviews"]),
        rule(
            &["create"],
            "authorization.k8s.io",
            &["subjectaccessreviews", "localsubjectaccessreviews"],
        ),
        rule(&read, "", &["services"]),
        rule(&["create", "get", "list", "watch"], "", &["nodes"]),
        rule(&["update", "patch"], "", &["nodes/status"]),
        rule(&["update", "patch"], "", &["nodes"]),
        rule(&["create", "update", "patch"], "", &["events"]),
        rule(&read, "", &["pods"]),
        rule(&["create", "delete"], "", &["pods"]),
        rule(&["update", "patch"], "", &["pods/status"]),
        rule(&["create"], "", &["pods/eviction"]),
        rule(&read, "", &["secrets", "configmaps"]),
        rule(
            &["get"],
            "",
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        rule(&["get"], "", &["endpoints"]),
        rule(
            &["create", "get", "list", "watch"],
            "certificates.k8s.io",
            &["certificatesigningrequests"],
        ),
        rule(
            &["get", "create", "update", "patch", "delete"],
            "coordination.k8s.io",
            &["leases"],
        ),
        rule(&["get"], "storage.k8s.io", &["volumeattachments"]),
        rule(&["create"], "", &["serviceaccounts/token"]),
        rule(
            &["get", "update", "patch"],
            "",
            &["persistentvolumeclaims/status"],
        ),
        rule(&read, "storage.k8s.io", &["csidrivers"]),
        rule(
            &["get", "create", "update", "patch", "delete"],
            "storage.k8s.io",
            &["csinodes"],
        ),
        rule(&read, "node.k8s.io", &["runtimeclasses"]),
        rule(&["get"], "resource.k8s.io", &["resourceclaims"]),
    ]
}

#[cfg(test)]
mod tests;
