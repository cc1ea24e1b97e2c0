//! The kubelet's registration and status, as far as the cluster sees them: the Node object with the
//! name, `providerID` (`--provider-id`), labels (its well-known ones, `--node-labels`, and the ones
//! kubeadm's mark-control-plane adds), taints (`--register-with-taints` from nodeRegistration, the
//! control-plane default when unset, and `node.cloudprovider.kubernetes.io/uninitialized` under
//! `--cloud-provider=external`), and the Ready condition: True only once a CNI runs, Unknown once the
//! kubelet stops posting status (server off or gone). The kubelet writes as its node
//! ([`node_user`], [`acting`]): the Node authorizer and NodeRestriction judge it, so kubeadm's
//! control-plane marks are written apart ([`mark_control_plane`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use time::OffsetDateTime;

use crate::kubeadm::config::NodeRegistration;
use crate::static_pods;
use crate::version::Version;

pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
pub const EXCLUDE_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The Ready condition the node should show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Kubelet up, no CNI (or a CNI on the wrong network).
    NetworkNotReady,
    /// Kubelet not posting status.
    Unknown,
}

impl Readiness {
    fn condition(self, now: OffsetDateTime) -> NodeCondition {
        let (status, reason, message) = match self {
            Readiness::Ready => ("True", "KubeletReady", "kubelet is posting ready status"),
            Readiness::NetworkNotReady => (
                "False",
                "KubeletNotReady",
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
            ),
            Readiness::Unknown => (
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            ),
        };
        let t = Time(
            k8s_openapi::jiff::Timestamp::from_second(now.unix_timestamp()).unwrap_or_default(),
        );
        NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: Some(t.clone()),
            last_transition_time: Some(t),
        }
    }
}

/// `--node-labels` as the kubelet parses it: `k=v` pairs separated by commas.
fn node_labels(flag: Option<&str>) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in flag
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("invalid --node-labels entry {pair:?}: must be key=value"))?;
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

/// The user a node's kubelet is once its client certificate is signed: `system:node:<name>` in
/// `system:nodes`, which the Node authorizer and NodeRestriction judge.
pub fn node_user(name: &str) -> kos_kube_fake::User {
    kos_kube_fake::User::node(name)
}

/// The kubelet of `node`, making its requests to its cluster's API (field manager `kubelet`).
pub fn acting<'a>(kube: &'a kos_kube_fake::FakeKube, node: &str) -> kos_kube_fake::Acting<'a> {
    kube.acting_as(node_user(node), "kubelet")
}

/// Copies kubeadm's mark-control-plane marks (its labels and taints) of `marked` onto `n`, the
/// Node its kubelet registered: kubeadm writes them with admin.conf, as NodeRestriction forbids
/// the kubelet the `node-role.kubernetes.io` labels.
pub fn mark_control_plane(n: &mut Node, marked: &Node) {
    let labels = n.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in marked.metadata.labels.iter().flatten() {
        labels.insert(k.clone(), v.clone());
    }
    let taints = marked.spec.as_ref().and_then(|s| s.taints.clone());
    n.spec.get_or_insert_with(NodeSpec::default).taints = taints;
}

/// The Node the kubelet registers (with kubeadm's control-plane marks when `control_plane`).
pub fn node(
    reg: &NodeRegistration,
    control_plane: bool,
    kubelet: Version,
    readiness: Readiness,
    now: OffsetDateTime,
) -> Result<Node, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), reg.name.clone()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), "amd64".to_owned()),
    ]);
    labels.extend(node_labels(reg.kubelet_arg("node-labels"))?);
    if control_plane {
        labels.insert(CONTROL_PLANE_LABEL.into(), String::new());
        labels.insert(EXCLUDE_LB_LABEL.into(), String::new());
    }
    let mut taints: Vec<Taint> = match &reg.taints {
        Some(ts) => ts
            .iter()
            .map(|t| Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                time_added: None,
            })
            .collect(),
        None if control_plane => vec![Taint {
            key: CONTROL_PLANE_LABEL.into(),
            value: None,
            effect: "NoSchedule".into(),
            time_added: None,
        }],
        None => Vec::new(),
    };
    if reg.kubelet_arg("cloud-provider") == Some("external") {
        taints.push(Taint {
            key: UNINITIALIZED_TAINT.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
    }
    Ok(Node {
        metadata: ObjectMeta {
            name: Some(reg.name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                ("node.alpha.kubernetes.io/ttl".to_owned(), "0".to_owned()),
                (
                    "volumes.kubernetes.io/controller-managed-attach-detach".to_owned(),
                    "true".to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: reg.kubelet_arg("provider-id").map(str::to_owned),
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![readiness.condition(now)]),
            node_info: Some(NodeSystemInfo {
                kubelet_version: kubelet.to_string(),
                kube_proxy_version: kubelet.to_string(),
                operating_system: "linux".into(),
                architecture: "amd64".into(),
                container_runtime_version: "containerd://1.7.28".into(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    })
}

/// The node's current Ready status string (`True`, `False`, `Unknown`), if it has one.
pub fn ready_status(n: &Node) -> Option<&str> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// Sets the Ready condition, returning whether it changed.
pub fn set_readiness(n: &mut Node, r: Readiness, now: OffsetDateTime) -> bool {
    let want = r.condition(now);
    if ready_status(n) == Some(want.status.as_str()) {
        return false;
    }
    let status = n.status.get_or_insert_with(NodeStatus::default);
    let conds = status.conditions.get_or_insert_with(Vec::new);
    conds.retain(|c| c.type_ != "Ready");
    conds.push(want);
    true
}

/// The annotation that marks a mirror pod (the kubelet's `kubernetes.io/config.mirror`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub use crate::static_pods::ETCD_VERSION;

/// The mirror pods of the static pods kubeadm writes on a control plane (`etcd`,
/// `kube-apiserver`, `kube-controller-manager`, `kube-scheduler`), as the kubelet creates them:
/// named `<component>-<node>` in kube-system, kubeadm's labels `component` and `tier:
/// control-plane`, the `kubernetes.io/config.*` annotations, owned by the Node, host network, and
/// Running and Ready while the kubelet runs them.
pub fn mirror_pods(
    node: &k8s_openapi::api::core::v1::Node,
    ip: Option<std::net::IpAddr>,
    kubernetes: Version,
) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let ip = ip.map(|a| a.to_string()).unwrap_or_default();
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.clone(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    [
        (
            "etcd",
            static_pods::image("etcd", kubernetes),
            (
                "kubeadm.kubernetes.io/etcd.advertise-client-urls",
                format!("https://{ip}:2379"),
            ),
        ),
        (
            "kube-apiserver",
            static_pods::image("kube-apiserver", kubernetes),
            (
                "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint",
                format!("{ip}:6443"),
            ),
        ),
        (
            "kube-controller-manager",
            static_pods::image("kube-controller-manager", kubernetes),
            ("", String::new()),
        ),
        (
            "kube-scheduler",
            static_pods::image("kube-scheduler", kubernetes),
            ("", String::new()),
        ),
    ]
    .into_iter()
    .map(|(component, image, (ann, ann_value))| {
        let hash = format!("{:x}", {
            use sha2::Digest;
            let d = sha2::Sha256::digest(format!("{component}/{node_name}/{image}").as_bytes());
            u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
        });
        let mut annotations = BTreeMap::from([
            (MIRROR_ANNOTATION.to_owned(), hash.clone()),
            ("kubernetes.io/config.hash".to_owned(), hash),
            ("kubernetes.io/config.source".to_owned(), "file".to_owned()),
        ]);
        if !ann.is_empty() {
            annotations.insert(ann.to_owned(), ann_value);
        }
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("{component}-{node_name}"),
                "namespace": "kube-system",
                "labels": {"component": component, "tier": "control-plane"},
                "annotations": annotations,
                "ownerReferences": [owner],
            },
            "spec": {
                "nodeName": node_name,
                "hostNetwork": true,
                "priorityClassName": "system-node-critical",
                "priority": 2_000_001_000,
                "containers": [{"name": component, "image": image, "command": [component]}],
                "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
            },
            "status": pod_status(true, &ip),
        });
        serde_json::from_value(pod).unwrap_or_default()
    })
    .collect()
}

/// A mirror pod's status: Running and Ready while its kubelet runs, Ready False once the node
/// lifecycle controller marks the pods of an unreachable node.
pub fn pod_status(running: bool, ip: &str) -> serde_json::Value {
    let ready = if running { "True" } else { "False" };
    serde_json::json!({
        "phase": "Running",
        "hostIP": ip, "podIP": ip,
        "podIPs": if ip.is_empty() { serde_json::json!([]) } else { serde_json::json!([{"ip": ip}]) },
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": ready},
            {"type": "ContainersReady", "status": ready},
            {"type": "PodScheduled", "status": "True"},
        ],
    })
}

/// Whether a pod's Ready condition is True.
pub fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
