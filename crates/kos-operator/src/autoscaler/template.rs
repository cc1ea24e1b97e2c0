//! The Node a pool's new server would register as, for the autoscaler's scale-up simulations: what
//! lets it grow a pool that has no node to copy (scale from zero). Capacity comes from the flavor,
//! allocatable from it less the kubelet's default hard eviction (kos sets no reservation), labels and
//! taints from the pool and the cloud controller, marshalled as `v1.Node#Marshal()`.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint};
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
// The pool label every kos node registers with (kos-bootstrap's `--node-labels`).
use kos_bootstrap::input::POOL_LABEL;
use kos_cloud::model::compute::Flavor;

/// The kubelet's default `maxPods`.
pub const MAX_PODS: u32 = 110;
/// The kubelet's default `evictionHard` `memory.available`, in MiB.
pub const EVICTION_MEMORY_MIB: u64 = 100;
/// The kubelet's default `evictionHard` `nodefs.available`, in percent.
pub const EVICTION_NODEFS_PERCENT: u64 = 10;

/// What a pool's node is made of.
#[derive(Debug, Clone)]
pub struct Shape<'a> {
    pub cluster: &'a str,
    pub pool: &'a str,
    pub flavor: &'a Flavor,
    /// The boot volume's size, when the pool boots from one (else the flavor's disk).
    pub disk_gb: Option<u64>,
    /// The pool's zone, when it has exactly one: the node's zone label.
    pub zone: Option<&'a str>,
    /// The session's region: the node's region label.
    pub region: Option<&'a str>,
    pub labels: &'a BTreeMap<String, String>,
    /// `(key, value, effect)`.
    pub taints: &'a [(String, Option<String>, String)],
    /// `1.36.4`.
    pub kubernetes_version: &'a str,
}

fn quantity(s: String) -> Quantity {
    Quantity { string: Some(s) }
}

/// The template Node.
#[must_use]
pub fn node(shape: &Shape<'_>) -> Node {
    let name = format!("kos-{}-{}-template", shape.cluster, shape.pool);
    let flavor = shape.flavor;
    let mut labels: BTreeMap<String, String> = shape.labels.clone();
    labels.insert(POOL_LABEL.into(), shape.pool.into());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("beta.kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    labels.insert("beta.kubernetes.io/arch".into(), "amd64".into());
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert(
        "node.kubernetes.io/instance-type".into(),
        flavor.name.clone(),
    );
    labels.insert(
        "beta.kubernetes.io/instance-type".into(),
        flavor.name.clone(),
    );
    if let Some(zone) = shape.zone {
        labels.insert("topology.kubernetes.io/zone".into(), zone.into());
        labels.insert("failure-domain.beta.kubernetes.io/zone".into(), zone.into());
    }
    if let Some(region) = shape.region {
        labels.insert("topology.kubernetes.io/region".into(), region.into());
        labels.insert(
            "failure-domain.beta.kubernetes.io/region".into(),
            region.into(),
        );
    }
    let disk_gib = shape.disk_gb.unwrap_or(flavor.disk);
    let disk_bytes = disk_gib * 1024 * 1024 * 1024;
    let capacity: BTreeMap<String, Quantity> = [
        ("cpu", flavor.vcpus.to_string()),
        ("memory", format!("{}Mi", flavor.ram)),
        ("ephemeral-storage", format!("{disk_gib}Gi")),
        ("pods", MAX_PODS.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), quantity(v)))
    .collect();
    let allocatable: BTreeMap<String, Quantity> = [
        ("cpu", flavor.vcpus.to_string()),
        (
            "memory",
            format!("{}Mi", flavor.ram.saturating_sub(EVICTION_MEMORY_MIB)),
        ),
        (
            "ephemeral-storage",
            (disk_bytes - disk_bytes * EVICTION_NODEFS_PERCENT / 100).to_string(),
        ),
        ("pods", MAX_PODS.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), quantity(v)))
    .collect();
    let taints = shape
        .taints
        .iter()
        .map(|(key, value, effect)| Taint {
            key: Some(key.clone()),
            value: value.clone(),
            effect: Some(effect.clone()),
            time_added: None,
        })
        .collect();
    Node {
        metadata: Some(ObjectMeta {
            name: Some(name),
            labels,
            ..ObjectMeta::default()
        }),
        spec: Some(NodeSpec {
            taints,
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity,
            allocatable,
            conditions: vec![NodeCondition {
                r#type: Some("Ready".into()),
                status: Some("True".into()),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                ..NodeCondition::default()
            }],
            node_info: Some(NodeSystemInfo {
                operating_system: Some("linux".into()),
                architecture: Some("amd64".into()),
                kubelet_version: Some(format!("v{}", shape.kubernetes_version)),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

/// `v1.Node#Marshal()` of the template.
#[must_use]
pub fn bytes(shape: &Shape<'_>) -> Vec<u8> {
    prost::Message::encode_to_vec(&node(shape))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_template_decodes_as_a_node_of_the_flavor_and_pool() {
        let flavor = Flavor {
            name: "m1.large".into(),
            vcpus: 4,
            ram: 8192,
            disk: 40,
            ..Flavor::default()
        };
        let labels = BTreeMap::from([("tier".to_owned(), "batch".to_owned())]);
        let taints = [(
            "gpu".to_owned(),
            Some("yes".to_owned()),
            "NoSchedule".to_owned(),
        )];
        let shape = Shape {
            cluster: "demo",
            pool: "batch",
            flavor: &flavor,
            disk_gb: None,
            zone: Some("nova"),
            region: Some("RegionOne"),
            labels: &labels,
            taints: &taints,
            kubernetes_version: "1.36.4",
        };
        let node: Node = prost::Message::decode(bytes(&shape).as_slice()).unwrap();
        let meta = node.metadata.unwrap();
        assert_eq!(meta.labels["tier"], "batch");
        assert_eq!(meta.labels["kos/pool"], "batch");
        assert_eq!(meta.labels["node.kubernetes.io/instance-type"], "m1.large");
        assert_eq!(meta.labels["topology.kubernetes.io/zone"], "nova");
        assert_eq!(meta.labels["topology.kubernetes.io/region"], "RegionOne");
        let taint = &node.spec.unwrap().taints[0];
        assert_eq!(taint.key.as_deref(), Some("gpu"));
        assert_eq!(taint.effect.as_deref(), Some("NoSchedule"));
        let status = node.status.unwrap();
        let q = |m: &BTreeMap<String, Quantity>, k: &str| m[k].string.clone().unwrap();
        assert_eq!(q(&status.capacity, "cpu"), "4");
        assert_eq!(q(&status.capacity, "memory"), "8192Mi");
        assert_eq!(q(&status.allocatable, "memory"), "8092Mi");
        assert_eq!(q(&status.capacity, "ephemeral-storage"), "40Gi");
        assert_eq!(
            q(&status.allocatable, "ephemeral-storage"),
            (40u64 * 1024 * 1024 * 1024 * 9 / 10).to_string()
        );
        assert_eq!(q(&status.capacity, "pods"), "110");
    }
}
