//! The well-known keys the node controllers read and write, and the label rules: what a valid
//! label value is, the upstream's `SanitizeLabel` for zones and host ids, and the beta→GA label
//! reconciliation of `k8s.io/cloud-provider`'s node controller.

use std::collections::BTreeMap;

/// Instance type, GA and deprecated beta (both are written, as upstream does).
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
/// The OpenStack hypervisor host (Nova `hostId`), the upstream's additional label.
pub const HOST_ID: &str = "topology.openstack.org/host-id";
/// Nodes with this label are left alone by the lifecycle checks (`k8s.io/cloud-provider`).
pub const EXCLUDE_FROM_LIFECYCLE: &str = "node.kubernetes.io/exclude-from-lifecycle-management";

/// Set by kubelet `--node-ip` with an external cloud provider: the address(es) to prefer.
pub const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// kubelet `--cloud-provider=external` registers nodes with it; the CCM removes it once the node
/// is initialised.
pub const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Added (NoSchedule) while the server is shut off.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// `(beta, GA)`: the beta label is the source of truth; the GA one follows it.
const BETA_TO_GA: [(&str, &str); 3] = [
    (ZONE_BETA, ZONE),
    (REGION_BETA, REGION),
    (INSTANCE_TYPE_BETA, INSTANCE_TYPE),
];

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters, or empty.
pub fn is_valid_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// The upstream's `SanitizeLabel` (PR #2634, for AZ names such as `"az 1"`): each run of
/// characters a label value may not hold becomes one `-`, the ends are trimmed to alphanumerics,
/// and the result is cut to 63 characters (and trimmed again, so it stays valid).
pub fn sanitize_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut in_bad_run = false;
    for c in v.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
            out.push(c);
            in_bad_run = false;
        } else if !in_bad_run {
            out.push('-');
            in_bad_run = true;
        }
    }
    let trim = |s: &str| {
        s.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_owned()
    };
    let out = trim(&out);
    if out.len() > 63 {
        trim(&out[..63])
    } else {
        out
    }
}

/// GA labels to set so they agree with their beta labels (upstream `reconcileNodeLabels`).
pub fn beta_to_ga(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    BETA_TO_GA
        .iter()
        .filter_map(|(beta, ga)| {
            let v = labels.get(*beta)?;
            (labels.get(*ga) != Some(v)).then(|| ((*ga).to_owned(), v.clone()))
        })
        .collect()
}

/// Labels in the Kubernetes namespaces (`kubernetes.io/`, `k8s.io/` and their subdomains) are
/// not the cloud provider's to add as "additional" labels.
pub fn is_kubernetes_namespaced(key: &str) -> bool {
    key.split_once('/').is_some_and(|(prefix, _)| {
        ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_label_makes_valid_values() {
        assert_eq!(sanitize_label("nova"), "nova");
        assert_eq!(sanitize_label("az 1"), "az-1");
        assert_eq!(sanitize_label(" eu/west  (2) "), "eu-west-2");
        assert_eq!(sanitize_label("---"), "");
        let long = format!("{}-{}", "a".repeat(62), "b".repeat(10));
        let s = sanitize_label(&long);
        assert!(s.len() <= 63 && is_valid_label_value(&s), "{s}");
        for v in ["az 1", "ü-zone", "a.b_c", "x".repeat(80).as_str()] {
            assert!(is_valid_label_value(&sanitize_label(v)), "{v}");
        }
    }

    #[test]
    fn ga_labels_follow_beta_labels() {
        let labels: BTreeMap<String, String> = [
            (ZONE_BETA, "az1"),
            (ZONE, "old"),
            (REGION_BETA, "r1"),
            (INSTANCE_TYPE, "m1.small"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let want: BTreeMap<String, String> = [(ZONE, "az1"), (REGION, "r1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(beta_to_ga(&labels), want);
    }

    #[test]
    fn kubernetes_namespaces_are_recognised() {
        assert!(is_kubernetes_namespaced("node.kubernetes.io/x"));
        assert!(is_kubernetes_namespaced("k8s.io/x"));
        assert!(!is_kubernetes_namespaced("topology.openstack.org/host-id"));
        assert!(!is_kubernetes_namespaced("notkubernetes.io/x"));
    }
}
