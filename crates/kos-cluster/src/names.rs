//! Naming and tag rules, in one place so that every name kos makes fits every limit it meets.
//!
//! Every resource is named `kos-<cluster>-<logical id>` and tagged `kos-cluster=<cluster>` and
//! `kos-id=<logical id>` (DESIGN.md). The limits behind the numbers here:
//! - Nova server tags are at most 60 characters and may contain neither `/` nor `,`
//!   (<https://docs.openstack.org/api-ref/compute/#server-tags-servers-tags>).
//! - Nova derives the hostname from the server name and keeps 63 characters of it; the hostname becomes the
//!   Kubernetes node name, a DNS-1123 label.
//! - Kubernetes label keys are `[prefix/]name` (prefix a DNS subdomain ≤ 253, name ≤ 63 of `[-._A-Za-z0-9]`,
//!   alphanumeric at both ends); values are empty or follow the name rule
//!   (<https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set>).

use std::fmt;

/// Tag key that marks every resource of a cluster.
pub const TAG_CLUSTER: &str = "kos-cluster";
/// Tag key that carries a resource's logical id.
pub const TAG_ID: &str = "kos-id";
/// Tag key kos-ccm marks what it makes at run time with (`kos-ccm-cluster=<cluster>`; kos-ccm's
/// `lb::naming::CLUSTER_TAG_KEY`). Distinct from [`TAG_CLUSTER`] so that no Service can claim what kos
/// made (the API load balancer); reserved here so that no extra tag on kos's objects carries it.
pub const TAG_CCM_CLUSTER: &str = "kos-ccm-cluster";
/// Every tag key kos sets begins so (`kos-cluster`, `kos-id`, `kos-ccm-cluster` and the records a
/// server carries: `kos-k8s`, `kos-node`, `kos-enc`, …): a user's tag `kos-<key>=…` is refused, as
/// one of a record's key would shadow the record (a `kos-node=` of the user's would make every plan
/// see changed labels and replace every node, again and again).
pub const KOS_TAG_PREFIX: &str = "kos-";
/// Nova's limit on one tag.
pub const NOVA_TAG_MAX: usize = 60;
/// Nova's limit on the tags of one server (`MAX_TAGS`; a create with more is refused).
pub const NOVA_TAGS_PER_SERVER: usize = 50;
/// The most tags kos itself puts on one server: a control plane's `kos-cluster` and `kos-id`, its
/// record (`kos-k8s`, `kos-node` and the six cluster settings of `graph::record`) and kos-lifecycle's
/// `kos-enc`. `graph::record`'s tests keep it true.
pub const KOS_SERVER_TAGS_MAX: usize = 11;
/// The most tags a cluster document may add (`metadata.tags`): every server carries them beside
/// kos's own.
pub const USER_TAGS_MAX: usize = NOVA_TAGS_PER_SERVER - KOS_SERVER_TAGS_MAX;
/// Limit on cluster names: `kos-<cluster>-` leaves 38 characters of the 63-character hostname for the logical id.
pub const CLUSTER_NAME_MAX: usize = 20;
/// Limit on node pool names, so that a pool's logical ids (`<pool>-<index>`) fit the hostname with the cluster.
pub const POOL_NAME_MAX: usize = 20;
/// Hostnames (and so Kubernetes node names) keep 63 characters.
pub const RESOURCE_NAME_MAX: usize = 63;

/// The tag every resource of `cluster` carries.
#[must_use]
pub fn cluster_tag(cluster: &ClusterName) -> String {
    format!("{TAG_CLUSTER}={cluster}")
}

/// The tag that names a resource's logical id.
#[must_use]
pub fn id_tag(logical_id: &str) -> String {
    format!("{TAG_ID}={logical_id}")
}

/// The deterministic name of a resource: `kos-<cluster>-<logical id>`.
#[must_use]
pub fn resource_name(cluster: &ClusterName, logical_id: &str) -> String {
    format!("kos-{cluster}-{logical_id}")
}

/// Why a name or tag was refused; the `Display` text continues a sentence that starts with the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing given.
    #[error("is empty")]
    Empty,
    /// Too many characters.
    #[error("is {len} characters long; the limit is {max}")]
    TooLong {
        /// Characters given.
        len: usize,
        /// Characters allowed.
        max: usize,
    },
    /// DNS labels are lowercase.
    #[error("contains the uppercase letter `{0}`; DNS names are lowercase")]
    Uppercase(char),
    /// A character outside the allowed set.
    #[error("contains `{0}`, which is not allowed here")]
    InvalidChar(char),
    /// First character not alphanumeric.
    #[error("must start with a letter or digit")]
    BadStart,
    /// Last character not alphanumeric.
    #[error("must end with a letter or digit")]
    BadEnd,
    /// A tag that would impersonate kos's own tags.
    #[error("uses the key `{0}`, which kos sets itself")]
    Reserved(String),
}

/// Checks a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`) of at most `max` characters.
///
/// # Errors
/// The first rule the name breaks.
pub fn check_dns_label(s: &str, max: usize) -> Result<(), NameError> {
    check_len(s, max)?;
    if let Some(c) = s.chars().find(char::is_ascii_uppercase) {
        return Err(NameError::Uppercase(c));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(NameError::InvalidChar(c));
    }
    check_ends(s)
}

/// Checks a DNS-1123 subdomain: dot-separated labels, at most 253 characters.
///
/// # Errors
/// The first rule the name breaks.
pub fn check_dns_subdomain(s: &str) -> Result<(), NameError> {
    check_len(s, 253)?;
    s.split('.')
        .try_for_each(|label| check_dns_label(label, 63))
}

/// Checks a Nova server tag (also used for Neutron, Octavia and Cinder, whose rules are looser).
///
/// # Errors
/// The first rule the tag breaks.
pub fn check_nova_tag(s: &str) -> Result<(), NameError> {
    check_len(s, NOVA_TAG_MAX)?;
    if let Some(c) = s.chars().find(|c| matches!(c, '/' | ',')) {
        return Err(NameError::InvalidChar(c));
    }
    match s.split_once('=') {
        Some((key, _)) if key.starts_with(KOS_TAG_PREFIX) => {
            Err(NameError::Reserved(key.to_owned()))
        }
        _ => Ok(()),
    }
}

/// Checks a Kubernetes label key, `[prefix/]name`.
///
/// # Errors
/// The first rule the key breaks.
pub fn check_label_key(s: &str) -> Result<(), NameError> {
    match s.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix)?;
            check_qualified_name(name)
        }
        None => check_qualified_name(s),
    }
}

/// Checks a Kubernetes label value (may be empty).
///
/// # Errors
/// The first rule the value breaks.
pub fn check_label_value(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        Ok(())
    } else {
        check_qualified_name(s)
    }
}

/// Whether the kubelet may set this label on its own node: the NodeRestriction admission plugin refuses keys
/// in the `kubernetes.io` and `k8s.io` namespaces except a few, and the kubelet then fails to register.
/// <https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction>
#[must_use]
pub fn kubelet_may_set(key: &str) -> bool {
    const ALLOWED_KEYS: [&str; 11] = [
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "kubernetes.io/arch",
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    let Some((prefix, _)) = key.split_once('/') else {
        return true;
    };
    let restricted = ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")));
    let allowed_namespace = ["kubelet.kubernetes.io", "node.kubernetes.io"]
        .iter()
        .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")));
    !restricted || allowed_namespace || ALLOWED_KEYS.contains(&key)
}

fn check_qualified_name(s: &str) -> Result<(), NameError> {
    check_len(s, 63)?;
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(NameError::InvalidChar(c));
    }
    check_ends(s)
}

fn check_len(s: &str, max: usize) -> Result<(), NameError> {
    let len = s.chars().count();
    match len {
        0 => Err(NameError::Empty),
        len if len > max => Err(NameError::TooLong { len, max }),
        _ => Ok(()),
    }
}

fn check_ends(s: &str) -> Result<(), NameError> {
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        Err(NameError::BadStart)
    } else if !s.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        Err(NameError::BadEnd)
    } else {
        Ok(())
    }
}

macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $check:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Checks and wraps `s`.
            ///
            /// # Errors
            /// The first rule `s` breaks.
            pub fn new(s: &str) -> Result<Self, NameError> {
                let check: fn(&str) -> Result<(), NameError> = $check;
                check(s).map(|()| Self(s.to_owned()))
            }

            /// The checked string.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

checked_string!(
    /// A cluster name: a DNS-1123 label of at most [`CLUSTER_NAME_MAX`] characters.
    ClusterName,
    |s| check_dns_label(s, CLUSTER_NAME_MAX)
);
checked_string!(
    /// A node pool name: a DNS-1123 label of at most [`POOL_NAME_MAX`] characters.
    PoolName,
    |s| check_dns_label(s, POOL_NAME_MAX)
);
checked_string!(
    /// An extra tag that fits Nova's rules and is not one of kos's own.
    Tag,
    check_nova_tag
);
checked_string!(
    /// A DNS name (DNS-1123 subdomain), e.g. the API server's `dnsName`.
    DnsName,
    check_dns_subdomain
);
checked_string!(
    /// A Kubernetes label key (also a taint key).
    LabelKey,
    check_label_key
);
checked_string!(
    /// A Kubernetes label value (also a taint value).
    LabelValue,
    check_label_value
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_label_rules_name_the_first_broken_rule() {
        assert_eq!(check_dns_label("prod-1", 20), Ok(()));
        assert_eq!(check_dns_label("Prod", 20), Err(NameError::Uppercase('P')));
        assert_eq!(check_dns_label("-a", 20), Err(NameError::BadStart));
        assert_eq!(check_dns_label("a_b", 20), Err(NameError::InvalidChar('_')));
        assert_eq!(
            check_dns_label(&"a".repeat(21), 20),
            Err(NameError::TooLong { len: 21, max: 20 })
        );
    }

    #[test]
    fn nova_tags_refuse_slash_comma_length_and_kos_keys() {
        assert_eq!(check_nova_tag("team=web"), Ok(()));
        assert_eq!(check_nova_tag("a,b"), Err(NameError::InvalidChar(',')));
        assert_eq!(check_nova_tag("a/b"), Err(NameError::InvalidChar('/')));
        // Every key kos sets, the records a server carries included: a user's `kos-node=` would
        // shadow the node's record (this once passed, and `kos-ccm=x` was asserted to).
        for key in [
            TAG_CLUSTER,
            TAG_ID,
            TAG_CCM_CLUSTER,
            crate::graph::record::TAG_KUBERNETES,
            crate::graph::record::TAG_NODE,
            crate::graph::record::TAG_CCM,
            crate::graph::record::TAG_API_DNS,
            "kos-enc",
        ] {
            assert_eq!(
                check_nova_tag(&format!("{key}=x")),
                Err(NameError::Reserved(key.to_owned())),
                "{key}"
            );
        }
        assert_eq!(check_nova_tag("kos-demo"), Ok(()));
        assert_eq!(check_nova_tag("team=kos-x"), Ok(()));
        assert!(check_nova_tag(&"x".repeat(61)).is_err());
    }

    #[test]
    fn longest_cluster_name_fits_the_tag_and_leaves_room_for_ids() {
        let name = ClusterName::new(&"c".repeat(CLUSTER_NAME_MAX)).expect("valid");
        assert!(cluster_tag(&name).len() <= NOVA_TAG_MAX);
        assert!(resource_name(&name, &"i".repeat(38)).len() <= RESOURCE_NAME_MAX);
    }

    #[test]
    fn label_keys_allow_prefix_and_mixed_case_names() {
        assert_eq!(check_label_key("example.com/GPU_type"), Ok(()));
        assert_eq!(
            check_label_key("Example.com/x"),
            Err(NameError::Uppercase('E'))
        );
        assert_eq!(check_label_key("a b"), Err(NameError::InvalidChar(' ')));
        assert_eq!(check_label_value(""), Ok(()));
        assert_eq!(check_label_value("v1.2_x"), Ok(()));
    }

    #[test]
    fn kubelet_may_not_set_node_role_labels() {
        assert!(!kubelet_may_set("node-role.kubernetes.io/worker"));
        assert!(kubelet_may_set("node.kubernetes.io/pool"));
        assert!(kubelet_may_set("topology.kubernetes.io/zone"));
        assert!(kubelet_may_set("example.com/tier"));
        assert!(kubelet_may_set("tier"));
    }
}
