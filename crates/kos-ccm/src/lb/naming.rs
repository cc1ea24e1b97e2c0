//! Names, descriptions and tags of the Octavia and Neutron objects kos-ccm makes, in the upstream
//! openstack-cloud-controller-manager's formats (`pkg/openstack/loadbalancer.go`: `lbFormat`,
//! `listenerFormat`, `poolFormat`, `monitorFormat`, the LB and FIP descriptions), so that load
//! balancers the upstream CCM made are found and adopted, plus the ownership tags kos adds.
//!
//! Invariant: every function here is pure and total; parsing a name never fails, it answers `None`.

use kos_cloud::model::load_balancer::LoadBalancer;

/// The upstream prefix of every LB name and per-Service LB tag.
pub const SERVICE_PREFIX: &str = "kube_service_";

/// What the upstream puts at the start of the description of every floating IP it creates; it
/// deletes only floating IPs whose description contains it (upstream `deleteFIPIfCreatedByProvider`).
pub const FIP_DESCRIPTION_MARK: &str = "Floating IP for Kubernetes external service";

/// Tag naming the cluster (by `--cluster-name`) that uses a load balancer.
pub const CLUSTER_TAG_KEY: &str = "kos-cluster";

/// Tag naming the cluster by a unique id, so two clusters that share a name (the upstream default
/// `kubernetes`) in one project still tell their load balancers apart (upstream #2241, #3102).
pub const CLUSTER_ID_TAG_KEY: &str = "kos-cluster-id";

/// OpenStack's usual limit on names and descriptions.
const MAX_NAME: usize = 255;

/// Cuts to at most `max` bytes like the upstream's `CutString255`, on a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// `kube_service_<cluster>_<namespace>_<name>`, cut to 255 bytes (upstream `GetLoadBalancerName`).
pub fn lb_name(cluster: &str, namespace: &str, name: &str) -> String {
    cut(
        format!("{SERVICE_PREFIX}{cluster}_{namespace}_{name}"),
        MAX_NAME,
    )
}

/// The pre-1.x name, `a` + the Service UID without dashes, cut to 32 bytes
/// (`cloudprovider.DefaultLoadBalancerName`); still looked up so very old LBs are found.
pub fn legacy_lb_name(uid: &str) -> String {
    cut(format!("a{}", uid.replace('-', "")), 32)
}

/// `listener_<port index>_<lb name>`.
pub fn listener_name(index: usize, lb_name: &str) -> String {
    cut(format!("listener_{index}_{lb_name}"), MAX_NAME)
}

/// `pool_<port index>_<lb name>`.
pub fn pool_name(index: usize, lb_name: &str) -> String {
    cut(format!("pool_{index}_{lb_name}"), MAX_NAME)
}

/// `monitor_<port index>_<lb name>`.
pub fn monitor_name(index: usize, lb_name: &str) -> String {
    cut(format!("monitor_{index}_{lb_name}"), MAX_NAME)
}

pub fn lb_description(namespace: &str, name: &str, cluster: &str) -> String {
    cut(
        format!("Kubernetes external service {namespace}/{name} from cluster {cluster}"),
        MAX_NAME,
    )
}

/// The description that marks a floating IP as made by the CCM for this Service.
pub fn fip_description(namespace: &str, name: &str, cluster: &str) -> String {
    cut(
        format!("{FIP_DESCRIPTION_MARK} {namespace}/{name} from cluster {cluster}"),
        MAX_NAME,
    )
}

/// Was this floating IP made by a CCM (kos or upstream)? Only those are ever deleted.
pub fn fip_made_by_ccm(description: &str) -> bool {
    description.contains(FIP_DESCRIPTION_MARK)
}

pub fn cluster_tag(cluster: &str) -> String {
    format!("{CLUSTER_TAG_KEY}={cluster}")
}

pub fn cluster_id_tag(id: &str) -> String {
    format!("{CLUSTER_ID_TAG_KEY}={id}")
}

/// The cluster component of an upstream-format name or Service tag
/// (`kube_service_<cluster>_<ns>_<svc>`). Namespaces and Service names cannot contain `_`, so the
/// last two `_` separate them and everything before is the cluster (which may contain `_`).
/// `None` for other names, and for names cut so short that the split is lost.
pub fn cluster_of(name_or_tag: &str) -> Option<&str> {
    let rest = name_or_tag.strip_prefix(SERVICE_PREFIX)?;
    let mut parts = rest.rsplitn(3, '_');
    let (_svc, _ns, cluster) = (parts.next()?, parts.next()?, parts.next()?);
    (!cluster.is_empty()).then_some(cluster)
}

/// Whose load balancer this is, as far as its name and tags tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nothing says another cluster uses it.
    Ours,
    /// Another cluster's: never touched. The string says which tag or name tells.
    Foreign(String),
}

/// Decides from name and tags whether `lb` belongs to another cluster than (`cluster`,
/// `cluster_id`). An LB without any claim (made by hand, or by an upstream CCM of this cluster
/// before Octavia had tags) is not foreign.
pub fn claim(lb: &LoadBalancer, cluster: &str, cluster_id: Option<&str>) -> Claim {
    for tag in &lb.tags {
        if let Some(v) = tag.strip_prefix(&format!("{CLUSTER_ID_TAG_KEY}=")) {
            if cluster_id.is_some_and(|id| id != v) {
                return Claim::Foreign(format!("it is tagged {tag}"));
            }
        } else if let Some(v) = tag.strip_prefix(&format!("{CLUSTER_TAG_KEY}=")) {
            if v != cluster {
                return Claim::Foreign(format!("it is tagged {tag}"));
            }
        } else if tag.starts_with(SERVICE_PREFIX) && !claims_cluster(tag, cluster) {
            return Claim::Foreign(format!(
                "it carries the Service tag {tag} of another cluster"
            ));
        }
    }
    if lb.name.starts_with(SERVICE_PREFIX) && !claims_cluster(&lb.name, cluster) {
        return Claim::Foreign(format!("its name {} is another cluster's", lb.name));
    }
    Claim::Ours
}

/// Does an upstream-format name or tag belong to `cluster`? Exact when the name parses; for a
/// name cut to 255 bytes, the prefix decides.
fn claims_cluster(name: &str, cluster: &str) -> bool {
    match cluster_of(name) {
        Some(c) if name.len() < MAX_NAME => c == cluster,
        _ => name.starts_with(&format!("{SERVICE_PREFIX}{cluster}_")),
    }
}

/// Service tags (`kube_service_…`) on a load balancer: one per Service using it.
pub fn service_tags(lb: &LoadBalancer) -> impl Iterator<Item = &str> {
    lb.tags
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with(SERVICE_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(name: &str, tags: &[&str]) -> LoadBalancer {
        LoadBalancer {
            name: name.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn names_follow_the_upstream_formats() {
        let n = lb_name("prod", "web", "front");
        assert_eq!(n, "kube_service_prod_web_front");
        assert_eq!(
            listener_name(1, &n),
            "listener_1_kube_service_prod_web_front"
        );
        assert_eq!(pool_name(0, &n), "pool_0_kube_service_prod_web_front");
        assert_eq!(monitor_name(2, &n), "monitor_2_kube_service_prod_web_front");
        assert_eq!(
            fip_description("web", "front", "prod"),
            "Floating IP for Kubernetes external service web/front from cluster prod"
        );
        assert_eq!(
            lb_description("web", "front", "prod"),
            "Kubernetes external service web/front from cluster prod"
        );
        assert_eq!(
            legacy_lb_name("6a4b1c2d-1111-2222-3333-444455556666"),
            "a6a4b1c2d11112222333344445555666"
        );
    }

    #[test]
    fn long_names_are_cut_to_255_bytes() {
        let ns = "n".repeat(63);
        let svc = "s".repeat(63);
        let cluster = "c".repeat(200);
        let n = lb_name(&cluster, &ns, &svc);
        assert_eq!(n.len(), 255);
        assert!(n.starts_with("kube_service_ccc"));
        assert_eq!(listener_name(0, &n).len(), 255);
    }

    #[test]
    fn the_cluster_is_read_from_the_right() {
        assert_eq!(cluster_of("kube_service_prod_web_front"), Some("prod"));
        assert_eq!(
            cluster_of("kube_service_prod_eu_web_front"),
            Some("prod_eu")
        );
        assert_eq!(cluster_of("kube_service_web_front"), None);
        assert_eq!(cluster_of("my-lb"), None);
    }

    #[test]
    fn another_clusters_load_balancer_is_foreign() {
        let c = |l: &LoadBalancer| claim(l, "prod", Some("uid-a"));
        assert_eq!(c(&lb("kube_service_prod_web_front", &[])), Claim::Ours);
        assert_eq!(c(&lb("user-lb", &[])), Claim::Ours);
        // A cluster whose name has ours as a prefix is another cluster.
        assert!(matches!(
            c(&lb("kube_service_prod_eu_web_front", &[])),
            Claim::Foreign(_)
        ));
        assert!(matches!(
            c(&lb("kube_service_prod_web_front", &["kos-cluster=staging"])),
            Claim::Foreign(_)
        ));
        assert!(matches!(
            c(&lb(
                "kube_service_prod_web_front",
                &["kos-cluster=prod", "kos-cluster-id=uid-b"]
            )),
            Claim::Foreign(_)
        ));
        assert!(matches!(
            c(&lb("user-lb", &["kube_service_staging_web_front"])),
            Claim::Foreign(_)
        ));
        assert_eq!(
            c(&lb(
                "user-lb",
                &[
                    "kube_service_prod_a_b",
                    "kos-cluster=prod",
                    "kos-cluster-id=uid-a"
                ]
            )),
            Claim::Ours
        );
        // Without a cluster id of our own, an id tag cannot be compared: the name decides.
        assert_eq!(
            claim(
                &lb("kube_service_prod_web_front", &["kos-cluster-id=x"]),
                "prod",
                None
            ),
            Claim::Ours
        );
    }
}
