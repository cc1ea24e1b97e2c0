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

/// kos-ccm's tag naming the cluster (by `--cluster-name`) that uses a load balancer. Its own key:
/// kos (the CLI) tags what it makes `kos-cluster=<name>`, and a Service must never be able to claim
/// one of those (the cluster's API load balancer) as its own.
pub const CLUSTER_TAG_KEY: &str = "kos-ccm-cluster";

/// The key kos (the CLI) tags everything it makes with. Older kos-ccm releases used it too: a load
/// balancer tagged so is a CCM's only when it also carries a Service's name or tag (and is then
/// moved to [`CLUSTER_TAG_KEY`]); otherwise kos made it for the cluster itself.
pub const KOS_CLUSTER_TAG_KEY: &str = "kos-cluster";

/// The key kos (the CLI) tags each object with its logical id (`kos-id=api-lb`); no CCM ever
/// wrote it, so an object carrying it is kos's, whatever else it carries.
pub const KOS_ID_TAG_KEY: &str = "kos-id";

/// Tag naming the cluster by a unique id, so two clusters that share a name (the upstream default
/// `kubernetes`) in one project still tell their load balancers apart (upstream #2241, #3102).
/// kos-ccm's (kos never writes it).
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

/// The tag older kos-ccm releases put on their load balancers (kos's own key, see
/// [`KOS_CLUSTER_TAG_KEY`]); taken off when one of them is reconciled.
pub fn legacy_cluster_tag(cluster: &str) -> String {
    format!("{KOS_CLUSTER_TAG_KEY}={cluster}")
}

pub fn cluster_id_tag(id: &str) -> String {
    format!("{CLUSTER_ID_TAG_KEY}={id}")
}

/// `(cluster, namespace, service)` of an upstream-format name or Service tag
/// (`kube_service_<cluster>_<ns>_<svc>`). Namespaces and Service names cannot contain `_`, so the
/// last two `_` separate them and everything before is the cluster (which may contain `_`).
/// `None` for other names, and for names cut so short that the split is lost.
fn parts(name_or_tag: &str) -> Option<(&str, &str, &str)> {
    let rest = name_or_tag.strip_prefix(SERVICE_PREFIX)?;
    let mut parts = rest.rsplitn(3, '_');
    let (svc, ns, cluster) = (parts.next()?, parts.next()?, parts.next()?);
    (!cluster.is_empty()).then_some((cluster, ns, svc))
}

/// The cluster component of an upstream-format name or Service tag (see [`parts`]).
pub fn cluster_of(name_or_tag: &str) -> Option<&str> {
    parts(name_or_tag).map(|(c, _, _)| c)
}

/// Whose load balancer this is, as far as its name and tags tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nothing says anyone else uses it.
    Ours,
    /// Another cluster's: never touched. The string says which tag or name tells.
    Foreign(String),
    /// Made by kos (the CLI) for a cluster, such as its API load balancer: never a Service's.
    Kos(String),
    /// Used by a Service of another namespace of this cluster: joining it would let one namespace
    /// reach another's traffic.
    OtherNamespace(String),
}

/// Who asks, for [`claim`].
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// `--cluster-name`.
    pub cluster: &'a str,
    /// The cluster's unique id, when known.
    pub cluster_id: Option<&'a str>,
    /// `Some(ns)`: the Service of namespace `ns` wants to join a load balancer it does not own, and
    /// Services of other namespaces on it make it not ours. `None`: no namespace rule (the load
    /// balancer's own Service, a delete, or cloud.conf allows sharing across namespaces).
    pub namespace: Option<&'a str>,
}

/// Decides from name and tags whether `lb` may be used by `who`. An LB without any claim (made by
/// hand, or by an upstream CCM of this cluster before Octavia had tags) is ours.
///
/// kos (the CLI) tags what it makes `kos-cluster=<name>` and `kos-id=<logical id>`; older kos-ccm
/// releases tagged their load balancers `kos-cluster=<name>` as well, but those always carry a
/// Service's upstream name or tag, which kos's own never do unless a Service was pointed at one
/// (and then `kos-id` still tells).
pub fn claim(lb: &LoadBalancer, who: &Claimant) -> Claim {
    let cluster = who.cluster;
    fn key_of(tag: &str) -> &str {
        tag.split_once('=').map_or(tag, |(k, _)| k)
    }
    if let Some(tag) = lb.tags.iter().find(|t| key_of(t) == KOS_ID_TAG_KEY) {
        return Claim::Kos(format!("it is tagged {tag}, which only kos sets"));
    }
    let made_for_services =
        lb.name.starts_with(SERVICE_PREFIX) || service_tags(lb).next().is_some();
    if !made_for_services
        && let Some(tag) = lb.tags.iter().find(|t| key_of(t) == KOS_CLUSTER_TAG_KEY)
    {
        return Claim::Kos(format!(
            "it is tagged {tag} and carries no Service's name or tag"
        ));
    }
    for tag in &lb.tags {
        let (key, value) = tag.split_once('=').unwrap_or((tag.as_str(), ""));
        match key {
            KOS_CLUSTER_TAG_KEY | CLUSTER_TAG_KEY if value != cluster => {
                return Claim::Foreign(format!("it is tagged {tag}"));
            }
            CLUSTER_ID_TAG_KEY if who.cluster_id.is_some_and(|id| id != value) => {
                return Claim::Foreign(format!("it is tagged {tag}"));
            }
            _ => {}
        }
        if tag.starts_with(SERVICE_PREFIX) && !claims_cluster(tag, cluster) {
            return Claim::Foreign(format!(
                "it carries the Service tag {tag} of another cluster"
            ));
        }
    }
    if lb.name.starts_with(SERVICE_PREFIX) && !claims_cluster(&lb.name, cluster) {
        return Claim::Foreign(format!("its name {} is another cluster's", lb.name));
    }
    if let Some(ns) = who.namespace {
        let users = std::iter::once(lb.name.as_str())
            .filter(|n| n.starts_with(SERVICE_PREFIX))
            .chain(service_tags(lb));
        for user in users {
            if !in_namespace(user, cluster, ns) {
                let whom = match parts(user) {
                    Some((_, n, s)) => format!("Service {n}/{s}"),
                    None => user.to_owned(),
                };
                return Claim::OtherNamespace(format!(
                    "{whom} of another namespace uses it ({user})"
                ));
            }
        }
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

/// Does an upstream-format name or tag of `cluster` name a Service of namespace `ns`? For a name
/// cut to 255 bytes the prefix decides (a namespace cut short is another namespace).
fn in_namespace(name: &str, cluster: &str, ns: &str) -> bool {
    match parts(name) {
        Some((c, n, _)) if name.len() < MAX_NAME => c == cluster && n == ns,
        _ => name.starts_with(&format!("{SERVICE_PREFIX}{cluster}_{ns}_")),
    }
}

/// Service tags (`kube_service_…`) on a load balancer: one per Service using it.
pub fn service_tags(lb: &LoadBalancer) -> impl Iterator<Item = &str> {
    lb.tags
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with(SERVICE_PREFIX))
}

/// Is this description the name kos (the CLI) gives its objects, `kos-<cluster>-<logical id>`
/// (lowercase letters, digits and `-`)? kos describes its floating IPs so (they have no name) in
/// the create itself, before it tags them: this tells its API floating IP in that moment too.
pub fn is_kos_resource_name(description: &str) -> bool {
    description.len() > 4
        && description.starts_with("kos-")
        && description
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Whose floating IP this is, for `spec.loadBalancerIP`: `None` when this Service may take it
/// (untagged and undescribed by anyone, or described as this Service's own), else why not.
/// `own_description` is this Service's CCM floating-IP description.
pub fn fip_claim(tags: &[String], description: &str, own_description: &str) -> Option<String> {
    if let Some(t) = tags.iter().find(|t| {
        t.split_once('=')
            .is_some_and(|(k, _)| k == KOS_CLUSTER_TAG_KEY || k == KOS_ID_TAG_KEY)
    }) {
        return Some(format!(
            "kos made it for a cluster (it is tagged {t}): it is the cluster's API address"
        ));
    }
    if is_kos_resource_name(description) {
        return Some(format!(
            "kos made it for a cluster (its description {description:?} is a kos object's name)"
        ));
    }
    if fip_made_by_ccm(description) && description != own_description {
        return Some(format!(
            "it belongs to another Service (its description is {description:?})"
        ));
    }
    None
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

    fn who<'a>(namespace: Option<&'a str>) -> Claimant<'a> {
        Claimant {
            cluster: "prod",
            cluster_id: Some("uid-a"),
            namespace,
        }
    }

    #[test]
    fn another_clusters_load_balancer_is_foreign() {
        let c = |l: &LoadBalancer| claim(l, &who(None));
        assert_eq!(c(&lb("kube_service_prod_web_front", &[])), Claim::Ours);
        assert_eq!(c(&lb("user-lb", &[])), Claim::Ours);
        // A cluster whose name has ours as a prefix is another cluster.
        assert!(matches!(
            c(&lb("kube_service_prod_eu_web_front", &[])),
            Claim::Foreign(_)
        ));
        assert!(matches!(
            c(&lb(
                "kube_service_prod_web_front",
                &["kos-ccm-cluster=staging"]
            )),
            Claim::Foreign(_)
        ));
        // An older kos-ccm's tag of another cluster, on its Service's load balancer.
        assert!(matches!(
            c(&lb("kube_service_prod_web_front", &["kos-cluster=staging"])),
            Claim::Foreign(_)
        ));
        assert!(matches!(
            c(&lb(
                "kube_service_prod_web_front",
                &["kos-ccm-cluster=prod", "kos-cluster-id=uid-b"]
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
                    "kos-ccm-cluster=prod",
                    "kos-cluster-id=uid-a"
                ]
            )),
            Claim::Ours
        );
        // Without a cluster id of our own, an id tag cannot be compared: the name decides.
        let no_id = Claimant {
            cluster_id: None,
            ..who(None)
        };
        assert_eq!(
            claim(
                &lb("kube_service_prod_web_front", &["kos-cluster-id=x"]),
                &no_id
            ),
            Claim::Ours
        );
    }

    /// The defect of issue 19 item 5: kos tags the cluster's API load balancer `kos-cluster=<name>`,
    /// which kos-ccm took for its own tag, so any Service naming its id got listeners on it.
    #[test]
    fn what_kos_made_for_the_cluster_is_never_a_services() {
        let api = lb(
            "kos-prod-api-lb",
            &["kos-cluster=prod", "kos-id=api-lb", "team=web"],
        );
        for ns in [None, Some("default"), Some("kube-system")] {
            assert!(matches!(claim(&api, &who(ns)), Claim::Kos(_)), "{ns:?}");
        }
        // Even once a Service was pointed at it by a kos-ccm without this rule (its tag is on it).
        let joined = lb(
            "kos-prod-api-lb",
            &["kos-cluster=prod", "kos-id=api-lb", "kube_service_prod_x_y"],
        );
        assert!(matches!(claim(&joined, &who(None)), Claim::Kos(_)));
        // kos's tag alone, without kos-id (a hand-made copy, say) and without a Service name.
        assert!(matches!(
            claim(&lb("edge", &["kos-cluster=prod"]), &who(None)),
            Claim::Kos(_)
        ));
        // Another kos cluster's API load balancer is kos's too.
        assert!(matches!(
            claim(
                &lb("kos-other-api-lb", &["kos-cluster=other", "kos-id=api-lb"]),
                &who(None)
            ),
            Claim::Kos(_)
        ));
    }

    #[test]
    fn an_older_kos_ccm_load_balancer_of_this_service_is_still_ours() {
        // What kos-ccm wrote before it had its own key: the Service's name and tag, kos's key.
        let legacy = lb(
            "kube_service_prod_web_front",
            &[
                "kube_service_prod_web_front",
                "kos-cluster=prod",
                "kos-cluster-id=uid-a",
            ],
        );
        assert_eq!(claim(&legacy, &who(None)), Claim::Ours);
        // A user's load balancer an older kos-ccm shared: the Service tag says it is a CCM's.
        let shared = lb("edge", &["kube_service_prod_web_a", "kos-cluster=prod"]);
        assert_eq!(claim(&shared, &who(Some("web"))), Claim::Ours);
    }

    #[test]
    fn a_load_balancer_with_the_new_tag_is_ours() {
        let new = lb(
            "kube_service_prod_web_front",
            &[
                "kube_service_prod_web_front",
                "kos-ccm-cluster=prod",
                "kos-cluster-id=uid-a",
            ],
        );
        assert_eq!(claim(&new, &who(None)), Claim::Ours);
        assert_eq!(claim(&new, &who(Some("web"))), Claim::Ours);
        assert_eq!(cluster_tag("prod"), "kos-ccm-cluster=prod");
    }

    #[test]
    fn another_namespaces_load_balancer_is_not_joined() {
        let theirs = lb(
            "kube_service_prod_payments_api",
            &["kube_service_prod_payments_api", "kos-ccm-cluster=prod"],
        );
        assert!(matches!(
            claim(&theirs, &who(Some("web"))),
            Claim::OtherNamespace(why) if why.contains("payments/api")
        ));
        // The same namespace may share it (max-shared-lb permitting); so may anyone when
        // cloud.conf allows sharing across namespaces (no namespace given).
        assert_eq!(claim(&theirs, &who(Some("payments"))), Claim::Ours);
        assert_eq!(claim(&theirs, &who(None)), Claim::Ours);
        // A user's load balancer is another namespace's once one of its Services joined it.
        let user = lb("edge", &["team=x", "kube_service_prod_payments_api"]);
        assert!(matches!(
            claim(&user, &who(Some("web"))),
            Claim::OtherNamespace(_)
        ));
        assert_eq!(
            claim(&lb("edge", &["team=x"]), &who(Some("web"))),
            Claim::Ours
        );
        // A namespace whose name extends another's is another namespace.
        let longer = lb("kube_service_prod_web-2_front", &[]);
        assert!(matches!(
            claim(&longer, &who(Some("web"))),
            Claim::OtherNamespace(_)
        ));
    }

    #[test]
    fn floating_ips_of_kos_and_of_other_services_are_not_free() {
        let own = fip_description("web", "front", "prod");
        let tags = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        // kos's API floating IP: tagged, and described with its kos name from the create on.
        assert!(
            fip_claim(
                &tags(&["kos-cluster=prod", "kos-id=api-fip"]),
                "kos-prod-api-fip",
                &own
            )
            .is_some_and(|w| w.contains("kos-cluster=prod"))
        );
        assert!(fip_claim(&[], "kos-prod-api-fip", &own).is_some());
        assert!(fip_claim(&tags(&["kos-id=api-fip"]), "", &own).is_some());
        // Another Service's (this cluster's or another's).
        let other = fip_description("payments", "api", "prod");
        assert!(fip_claim(&[], &other, &own).is_some_and(|w| w.contains("another Service")));
        assert!(fip_claim(&[], &fip_description("web", "front", "staging"), &own).is_some());
        // Free: untagged and not described by kos or a CCM (as upstream), or this Service's own.
        assert_eq!(fip_claim(&[], "", &own), None);
        assert_eq!(
            fip_claim(&tags(&["team=web"]), "reserved for web", &own),
            None
        );
        assert_eq!(fip_claim(&[], &own, &own), None);
        assert!(!is_kos_resource_name("Kos reserved"));
        assert!(!is_kos_resource_name("kos-"));
    }
}
