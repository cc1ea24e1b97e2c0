//! What the storage controllers read of a cluster in one pass, and the rules they share (names,
//! paths, capabilities, node affinity, taints) as upstream's code writes them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kos_csi::csi;
use kos_kube_fake::quantity::Quantity;
use kube::Api;
use kube::api::ListParams;
use sha2::Digest as _;

use super::controllers::*;

pub(super) fn name_of(m: &ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

pub(super) fn ns_of(m: &ObjectMeta) -> String {
    m.namespace.clone().unwrap_or_default()
}

pub(super) fn ann<'a>(m: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    m.annotations.as_ref()?.get(k).map(String::as_str)
}

pub(super) fn bytes(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<i64> {
    Quantity::parse(&q?.0)?.value()
}

/// A size as the sidecars write it (`resource.NewQuantity(n, BinarySI)`).
pub(super) fn quantity(n: i64) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    let text = kos_kube_fake::quantity::canonical(&format!("{}Ki", n / 1024))
        .filter(|_| n % 1024 == 0)
        .unwrap_or_else(|| n.to_string());
    k8s_openapi::apimachinery::pkg::api::resource::Quantity(text)
}

pub(super) fn storage_of(
    m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<i64> {
    bytes(m?.get("storage"))
}

pub(super) fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The claims a pod's volumes name.
pub(super) fn claims_of(pod: &Pod) -> Vec<(String, bool)> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let c = v.persistent_volume_claim.as_ref()?;
            Some((c.claim_name.clone(), c.read_only.unwrap_or(false)))
        })
        .collect()
}

pub(super) fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The CSI access mode of a Kubernetes one (external-provisioner's, for a driver without
/// SINGLE_NODE_MULTI_WRITER).
pub(super) fn access_mode(m: &str) -> Option<csi::volume_capability::access_mode::Mode> {
    use csi::volume_capability::access_mode::Mode;
    Some(match m {
        "ReadWriteOnce" | "ReadWriteOncePod" => Mode::SingleNodeWriter,
        "ReadOnlyMany" => Mode::MultiNodeReaderOnly,
        "ReadWriteMany" => Mode::MultiNodeMultiWriter,
        _ => return None,
    })
}

pub(super) fn capability(
    mode: &str,
    block: bool,
    fs_type: &str,
    mount_flags: &[String],
) -> Option<csi::VolumeCapability> {
    use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
    Some(csi::VolumeCapability {
        access_mode: Some(AccessMode {
            mode: access_mode(mode)? as i32,
        }),
        access_type: Some(if block {
            AccessType::Block(BlockVolume {})
        } else {
            AccessType::Mount(MountVolume {
                fs_type: fs_type.to_owned(),
                mount_flags: mount_flags.to_vec(),
                ..MountVolume::default()
            })
        }),
    })
}

/// The capability a bound volume is used with (the attacher's and the kubelet's).
pub(super) fn pv_capability(pv: &PersistentVolume) -> Option<csi::VolumeCapability> {
    let spec = pv.spec.as_ref()?;
    let mode = spec.access_modes.as_ref()?.first()?.clone();
    let block = spec.volume_mode.as_deref() == Some("Block");
    let fs = spec
        .csi
        .as_ref()
        .and_then(|c| c.fs_type.clone())
        .unwrap_or_default();
    capability(
        &mode,
        block,
        &fs,
        spec.mount_options.as_deref().unwrap_or_default(),
    )
}

/// Whether a node's labels satisfy a volume's node affinity.
pub(super) fn affinity_allows(pv: &PersistentVolume, labels: &BTreeMap<String, String>) -> bool {
    let Some(terms) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| &r.node_selector_terms)
    else {
        return true;
    };
    terms.iter().any(|t| {
        t.match_expressions.iter().flatten().all(|e| {
            let v = labels.get(&e.key);
            let values = e.values.as_deref().unwrap_or_default();
            match e.operator.as_str() {
                "In" => v.is_some_and(|v| values.contains(v)),
                "NotIn" => v.is_none_or(|v| !values.contains(v)),
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => false,
            }
        })
    })
}

pub(super) fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether a pod tolerates a node's NoSchedule and NoExecute taints.
pub(super) fn tolerates(pod: &Pod, node: &Node) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect != "PreferNoSchedule")
        .all(|t| {
            tolerations.iter().any(|tol| {
                let effect_ok = tol
                    .effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == t.effect);
                let key_ok = tol.key.as_deref().is_none_or(|k| k.is_empty())
                    || tol.key.as_deref() == Some(&t.key);
                let value_ok = match tol.operator.as_deref() {
                    Some("Exists") => true,
                    _ => tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or(""),
                };
                effect_ok && key_ok && value_ok
            })
        })
}

pub(super) fn labels_of(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

/// The attach-detach controller's name for a VolumeAttachment.
pub(super) fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let d = sha2::Sha256::digest(format!("{handle}{driver}{node}").as_bytes());
    format!("csi-{}", hex(&d))
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The kubelet's global mount of a volume on a node.
pub(super) fn staging_path(driver: &str, handle: &str) -> String {
    let d = sha2::Sha256::digest(handle.as_bytes());
    format!(
        "{KUBELET_DIR}/plugins/kubernetes.io/csi/{driver}/{}/globalmount",
        hex(&d)
    )
}

pub(super) fn target_path(pod_uid: &str, pv: &str) -> String {
    format!("{KUBELET_DIR}/pods/{pod_uid}/volumes/kubernetes.io~csi/{pv}/mount")
}

/// The finalizer external-attacher puts on what it attached.
pub(super) fn attacher_finalizer(driver: &str) -> String {
    format!("external-attacher/{}", driver.replace(['.', '/'], "-"))
}

pub(super) struct World {
    pub(super) pvcs: Vec<PersistentVolumeClaim>,
    pub(super) pvs: Vec<PersistentVolume>,
    pub(super) classes: Vec<StorageClass>,
    pub(super) pods: Vec<Pod>,
    pub(super) nodes: Vec<Node>,
    pub(super) csinodes: Vec<CSINode>,
    pub(super) attachments: Vec<VolumeAttachment>,
    pub(super) drivers: Vec<CSIDriver>,
    /// VolumeSnapshots and their contents (none without the CRDs).
    pub(super) snapshots: Vec<kube::api::DynamicObject>,
    pub(super) contents: Vec<kube::api::DynamicObject>,
}

impl World {
    pub(super) async fn read(c: &kube::Client) -> Res<World> {
        let lp = ListParams::default();
        Ok(World {
            pvcs: Api::<PersistentVolumeClaim>::all(c.clone())
                .list(&lp)
                .await?
                .items,
            pvs: Api::<PersistentVolume>::all(c.clone())
                .list(&lp)
                .await?
                .items,
            classes: Api::<StorageClass>::all(c.clone()).list(&lp).await?.items,
            pods: Api::<Pod>::all(c.clone()).list(&lp).await?.items,
            nodes: Api::<Node>::all(c.clone()).list(&lp).await?.items,
            csinodes: Api::<CSINode>::all(c.clone()).list(&lp).await?.items,
            attachments: Api::<VolumeAttachment>::all(c.clone())
                .list(&lp)
                .await?
                .items,
            drivers: Api::<CSIDriver>::all(c.clone()).list(&lp).await?.items,
            snapshots: dynamic(c, "VolumeSnapshot", "volumesnapshots").await,
            contents: dynamic(c, "VolumeSnapshotContent", "volumesnapshotcontents").await,
        })
    }

    /// A VolumeSnapshot's snapshot id, once it is ready to restore from.
    pub(super) fn snapshot_handle(&self, ns: &str, name: &str) -> Result<String, String> {
        let vs = self
            .snapshots
            .iter()
            .find(|v| {
                v.metadata.namespace.as_deref() == Some(ns)
                    && v.metadata.name.as_deref() == Some(name)
            })
            .ok_or_else(|| {
                format!("volumesnapshots.snapshot.storage.k8s.io \"{name}\" not found")
            })?;
        if vs.data.pointer("/status/readyToUse") != Some(&serde_json::Value::Bool(true)) {
            return Err(format!("snapshot {name} is not Ready"));
        }
        let content = vs
            .data
            .pointer("/status/boundVolumeSnapshotContentName")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        self.contents
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(content))
            .and_then(|c| {
                c.data
                    .pointer("/status/snapshotHandle")?
                    .as_str()
                    .map(str::to_owned)
            })
            .ok_or_else(|| format!("snapshot {name} has no snapshot handle yet"))
    }

    pub(super) fn class(&self, name: &str) -> Option<&StorageClass> {
        self.classes.iter().find(|c| name_of(&c.metadata) == name)
    }

    pub(super) fn pvc(&self, ns: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        self.pvcs
            .iter()
            .find(|c| ns_of(&c.metadata) == ns && name_of(&c.metadata) == name)
    }

    pub(super) fn pv(&self, name: &str) -> Option<&PersistentVolume> {
        self.pvs.iter().find(|p| name_of(&p.metadata) == name)
    }

    pub(super) fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| name_of(&n.metadata) == name)
    }

    /// The volume bound to a claim, when both agree.
    pub(super) fn bound_pv(&self, pvc: &PersistentVolumeClaim) -> Option<&PersistentVolume> {
        let name = pvc.spec.as_ref()?.volume_name.as_deref()?;
        let pv = self.pv(name)?;
        let claim = pv.spec.as_ref()?.claim_ref.as_ref()?;
        (claim.uid == pvc.metadata.uid
            && pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .then_some(pv)
    }

    pub(super) fn attach_required(&self, driver: &str) -> bool {
        self.drivers
            .iter()
            .find(|d| name_of(&d.metadata) == driver)
            .and_then(|d| d.spec.attach_required)
            .unwrap_or(true)
    }

    /// The node id a node's CSINode registered for `driver`.
    pub(super) fn node_id(&self, node: &str, driver: &str) -> Option<(String, Vec<String>)> {
        let n = self
            .csinodes
            .iter()
            .find(|c| name_of(&c.metadata) == node)?;
        let d = n.spec.drivers.iter().find(|d| d.name == driver)?;
        Some((
            d.node_id.clone(),
            d.topology_keys.clone().unwrap_or_default(),
        ))
    }
}

/// Every object of a snapshot type, none when its CRD is not served.
async fn dynamic(c: &kube::Client, kind: &str, plural: &str) -> Vec<kube::api::DynamicObject> {
    let ar = super::snapshotter::resource(kind, plural);
    Api::<kube::api::DynamicObject>::all_with(c.clone(), &ar)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn pv(affinity: Value) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": affinity}}},
        }))
        .unwrap_or_default()
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// The attach-detach controller's name: `csi-` and sha256 of handle, driver and node
    /// (pkg/volume/csi's getAttachmentName); the kubelet's global mount is under the sha256 of the
    /// handle. Values computed with Python's hashlib.
    #[test]
    fn names_and_paths_are_the_kubelets() {
        assert_eq!(
            attachment_name("vol-1", "cinder.csi.openstack.org", "node-a"),
            "csi-e42aad47bdb0e799ce005d4536261c89163b2f56146af1119957c56b1d4a5efe"
        );
        assert_eq!(
            staging_path("cinder.csi.openstack.org", "vol-1"),
            "/var/lib/kubelet/plugins/kubernetes.io/csi/cinder.csi.openstack.org/d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount"
        );
        assert_eq!(
            target_path("u1", "pvc-1"),
            "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount"
        );
        assert_eq!(
            attacher_finalizer("cinder.csi.openstack.org"),
            "external-attacher/cinder-csi-openstack-org"
        );
    }

    /// Terms are ORed, expressions within a term ANDed; a volume without affinity fits anywhere.
    #[test]
    fn node_affinity_is_the_schedulers() {
        let zone = "topology.cinder.csi.openstack.org/zone";
        let v = pv(serde_json::json!([
            {"matchExpressions": [{"key": zone, "operator": "In", "values": ["az1"]}]},
            {"matchExpressions": [
                {"key": zone, "operator": "In", "values": ["az2"]},
                {"key": "disk", "operator": "Exists"},
            ]},
        ]));
        assert!(affinity_allows(&v, &labels(&[(zone, "az1")])));
        assert!(!affinity_allows(&v, &labels(&[(zone, "az2")])));
        assert!(affinity_allows(
            &v,
            &labels(&[(zone, "az2"), ("disk", "x")])
        ));
        assert!(!affinity_allows(&v, &labels(&[])));
        let not_in = pv(serde_json::json!([
            {"matchExpressions": [{"key": zone, "operator": "NotIn", "values": ["az3"]}]},
        ]));
        assert!(affinity_allows(&not_in, &labels(&[])));
        assert!(!affinity_allows(&not_in, &labels(&[(zone, "az3")])));
        assert!(affinity_allows(&PersistentVolume::default(), &labels(&[])));
    }

    /// NoSchedule and NoExecute taints need a toleration; PreferNoSchedule does not.
    #[test]
    fn taints_need_tolerations() -> Result<(), serde_json::Error> {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cp"},
            "spec": {"taints": [
                {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ]},
        }))?;
        let pod = |tolerations: Value| -> Result<Pod, serde_json::Error> {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [], "tolerations": tolerations},
            }))
        };
        assert!(!tolerates(&pod(serde_json::json!([]))?, &node));
        assert!(tolerates(
            &pod(
                serde_json::json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}])
            )?,
            &node
        ));
        assert!(tolerates(
            &pod(serde_json::json!([{"operator": "Exists"}]))?,
            &node
        ));
        assert!(!tolerates(
            &pod(
                serde_json::json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "x", "effect": "NoSchedule"}])
            )?,
            &node
        ));
        Ok(())
    }

    /// Sizes are written as the sidecars write them (BinarySI), and read rounding up.
    #[test]
    fn sizes_round_trip() {
        assert_eq!(quantity(kos_csi::GIB).0, "1Gi");
        assert_eq!(quantity(3 * kos_csi::GIB / 2).0, "1536Mi");
        assert_eq!(quantity(1000).0, "1000");
        let q = |s: &str| k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.into());
        assert_eq!(bytes(Some(&q("2Gi"))), Some(2 * kos_csi::GIB));
        assert_eq!(bytes(Some(&q("1G"))), Some(1_000_000_000));
        assert_eq!(bytes(Some(&q("1.5"))), Some(2));
        assert_eq!(bytes(Some(&q("x"))), None);
    }
}
