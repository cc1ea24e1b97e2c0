//! What a server was made for, recorded in its own tags when it is created, so that a later plan sees
//! a change the cloud cannot show: the Kubernetes release it installed, and the labels and taints its
//! kubelet registered with (they are applied once, at registration: a change needs a new node).
//!
//! The cloud's tags are kos's only state; these two are read back by the plan
//! ([`crate::plan`]). A server made before they existed has neither: it is taken as made for the spec
//! (kos refused every change it could not carry out), and the tags are added.

use super::ServerSpec;

/// `kos-k8s=1.35.2`: the release the server's kubelet and kubeadm are.
pub const TAG_KUBERNETES: &str = "kos-k8s";
/// `kos-node=<16 hex>`: a digest of the node's labels and taints.
pub const TAG_NODE: &str = "kos-node";

/// `kos-pods=10.244.0.0_16`: a control plane's record of the cluster's pod CIDR (Nova refuses a `/`
/// in a tag: it is written `_`).
pub const TAG_PODS: &str = "kos-pods";
/// `kos-services=10.96.0.0_12`: a control plane's record of the cluster's service CIDR.
pub const TAG_SERVICES: &str = "kos-services";
/// `kos-cni=calico`: a control plane's record of the cluster's CNI.
pub const TAG_CNI: &str = "kos-cni";
/// `kos-ccm=upstream`: a control plane's record of the cluster's cloud controller.
pub const TAG_CCM: &str = "kos-ccm";
/// `kos-csi=cinder`: a control plane's record of the cluster's CSI.
pub const TAG_CSI: &str = "kos-csi";
/// `kos-api-dns=api.example.com` (`-`: none): the DNS name in a control plane's API server
/// certificate; a name too long for Nova's 60 characters is recorded as `~<digest>`.
pub const TAG_API_DNS: &str = "kos-api-dns";

/// The record tags of a server made from `spec`.
#[must_use]
pub fn tags(spec: &ServerSpec) -> Vec<String> {
    let mut t = vec![
        format!("{TAG_KUBERNETES}={}", spec.kubernetes_version),
        format!("{TAG_NODE}={}", node_digest(spec)),
    ];
    if let Some(c) = &spec.cluster {
        t.extend(
            settings(c)
                .into_iter()
                .map(|(_, key, value)| format!("{key}={}", tag_value(key, value))),
        );
    }
    t
}

/// A control plane's record of the cluster: `(field, tag key, value)`.
fn settings(c: &super::ClusterRecord) -> [(&'static str, &'static str, &str); 6] {
    [
        ("network.podCIDR", TAG_PODS, c.pod_cidr.as_str()),
        ("network.serviceCIDR", TAG_SERVICES, c.service_cidr.as_str()),
        ("addons.cni", TAG_CNI, c.cni.as_str()),
        ("addons.ccm", TAG_CCM, c.ccm.as_str()),
        ("addons.csi", TAG_CSI, c.csi.as_str()),
        ("apiEndpoint.dnsName", TAG_API_DNS, c.api_dns_name.as_str()),
    ]
}

/// `value` as a tag of `key` holds it: Nova refuses `/` (written `_`; no recorded value has one of
/// its own), and a tag past 60 characters (`~<digest>` instead).
fn tag_value(key: &str, value: &str) -> String {
    let v = value.replace('/', "_");
    if key.len() + 1 + v.len() <= crate::names::NOVA_TAG_MAX {
        v
    } else {
        format!("~{}", fnv(value))
    }
}

/// The recorded settings a control plane takes from the running cluster when it joins: `kubeadm join
/// --control-plane` issues its API server's certificate from the ClusterConfiguration in
/// `kubeadm-config`, which kos updates first. A change replaces the control planes, as Cluster API's
/// control plane rolls its machines, instead of being refused.
pub const ROLLED: [&str; 1] = ["apiEndpoint.dnsName"];

/// A recorded value as the user wrote it (`-`, the record of no DNS name, is none).
#[must_use]
pub fn shown(value: &str) -> String {
    if value == "-" {
        "none".to_owned()
    } else {
        value.to_owned()
    }
}

/// The cluster-wide settings `cluster` changes from what a control plane recorded in its `tags`, as
/// `(field, recorded, wanted)`; a setting not recorded (a server made before the record) is none.
#[must_use]
pub fn cluster_changes(
    tags: &[String],
    cluster: &super::ClusterRecord,
) -> Vec<(&'static str, String, String)> {
    settings(cluster)
        .into_iter()
        .filter_map(|(field, key, want)| {
            let have = recorded(tags, key)?;
            (have != tag_value(key, want)).then(|| (field, have.replace('_', "/"), want.to_owned()))
        })
        .collect()
}

/// FNV-1a 64, as 16 hex digits: stable across runs and builds.
fn fnv(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A recorded value in `tags`, if the server has it.
#[must_use]
pub fn recorded<'a>(tags: &'a [String], key: &str) -> Option<&'a str> {
    tags.iter()
        .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
}

/// Stable across runs and builds (FNV-1a 64 over a canonical text), short enough for Nova's 60
/// characters a tag. Not a secret, and nothing secret goes in.
#[must_use]
pub fn node_digest(spec: &ServerSpec) -> String {
    let mut text = String::new();
    for (k, v) in &spec.labels {
        text.push_str(&format!("label {k}={v}\n"));
    }
    for t in &spec.taints {
        text.push_str(&format!("taint {t}\n"));
    }
    fnv(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::NodeRole;

    fn spec() -> ServerSpec {
        ServerSpec {
            flavor_id: "f".into(),
            flavor_name: "m1.small".into(),
            kubernetes_version: "1.35.2".into(),
            image_id: "i".into(),
            port: "port-workers-0".into(),
            volume: None,
            server_group: None,
            keypair: None,
            availability_zone: None,
            role: NodeRole::Worker {
                pool: "workers".into(),
            },
            labels: [("tier".to_owned(), "web".to_owned())].into(),
            taints: vec!["dedicated=web:NoSchedule".into()],
            cluster: None,
        }
    }

    #[test]
    fn tags_fit_nova_and_read_back() {
        let t = tags(&spec());
        assert!(t.iter().all(|t| t.len() <= crate::names::NOVA_TAG_MAX));
        assert_eq!(recorded(&t, TAG_KUBERNETES), Some("1.35.2"));
        assert_eq!(recorded(&t, TAG_NODE).map(str::len), Some(16));
        assert_eq!(recorded(&["kos-k8sx=1".to_owned()], TAG_KUBERNETES), None);
    }

    #[test]
    fn the_digest_moves_with_labels_and_taints_only() {
        let a = spec();
        let mut b = spec();
        b.flavor_name = "m1.large".into();
        b.kubernetes_version = "1.36.0".into();
        assert_eq!(node_digest(&a), node_digest(&b));
        b.labels.insert("tier".into(), "db".into());
        assert_ne!(node_digest(&a), node_digest(&b));
        let mut c = spec();
        c.taints.clear();
        assert_ne!(node_digest(&a), node_digest(&c));
        // Pinned: a digest that changed with a kos release would replace every node.
        assert_eq!(node_digest(&a), "6f9b1a2a01221936");
    }

    /// A control plane records the cluster's CIDRs and CNI; a worker does not. A change shows against
    /// the record, and nothing recorded is no change.
    #[test]
    fn control_planes_record_the_cluster() {
        let mut cp = spec();
        cp.role = NodeRole::JoinControlPlane;
        cp.cluster = Some(crate::graph::ClusterRecord {
            pod_cidr: "fd00:10:244::/56".into(),
            service_cidr: "10.96.0.0/12".into(),
            cni: "calico".into(),
            ccm: "upstream".into(),
            csi: "cinder".into(),
            api_dns_name: "-".into(),
        });
        let t = tags(&cp);
        assert!(
            t.iter().all(|t| t.len() <= crate::names::NOVA_TAG_MAX),
            "{t:?}"
        );
        assert_eq!(recorded(&t, TAG_PODS), Some("fd00:10:244::_56"));
        assert!(
            t.iter().all(|t| !t.contains('/') && !t.contains(',')),
            "{t:?}"
        );
        assert_eq!(tags(&spec()).len(), 2);
        // With `kos-cluster`, `kos-id` and kos-lifecycle's `kos-enc`, a control plane carries
        // names::KOS_SERVER_TAGS_MAX of kos's tags; the user's `metadata.tags` get the rest of
        // Nova's 50, and every record key is one the user may not write.
        assert_eq!(2 + t.len() + 1, crate::names::KOS_SERVER_TAGS_MAX);
        for tag in &t {
            assert!(
                crate::names::Tag::new(tag).is_err(),
                "{tag} is not reserved"
            );
        }
        let mut want = cp.cluster.clone().expect("a control plane's record");
        assert!(cluster_changes(&t, &want).is_empty());
        want.cni = "cilium".into();
        want.service_cidr = "10.100.0.0/16".into();
        let own = |(f, h, w): (&'static str, &str, &str)| (f, h.to_owned(), w.to_owned());
        assert_eq!(
            cluster_changes(&t, &want),
            [
                own(("network.serviceCIDR", "10.96.0.0/12", "10.100.0.0/16")),
                own(("addons.cni", "calico", "cilium"))
            ]
        );
        assert!(cluster_changes(&t[..2], &want).is_empty(), "not recorded");
        // A DNS name too long for a tag is recorded as a digest, and compared as one.
        let long = format!("{}.example.com", "a".repeat(60));
        let mut named = cp.clone();
        if let Some(c) = named.cluster.as_mut() {
            c.api_dns_name = long.clone();
        }
        let t = tags(&named);
        assert!(
            t.iter().all(|t| t.len() <= crate::names::NOVA_TAG_MAX),
            "{t:?}"
        );
        let mut same = named.cluster.clone().expect("record");
        assert!(cluster_changes(&t, &same).is_empty());
        same.api_dns_name = "api.example.com".into();
        let changed = cluster_changes(&t, &same);
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(changed[0].0, "apiEndpoint.dnsName");
        assert!(changed[0].1.starts_with('~'), "{changed:?}");
    }
}
