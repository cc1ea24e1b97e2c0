//! The Cluster CRD's CEL rules (`x-kubernetes-validations`): the rules of `kos plan` (kos-cluster's
//! `validate`) that CEL can check on the spec alone, each with `kos plan`'s message at its field,
//! and the bounds their cost needs. `tests/rules.rs` drives kos-cluster's reader and kos-kube-fake
//! side by side so they agree; docs/operator.md lists what stays `kos plan`'s.

/// A cross-field rule of `kos plan` (kos-cluster's `validate`) as a CEL `x-kubernetes-validations`
/// entry: the API server refuses at apply time what `kos plan` would refuse, with the message
/// `kos plan` prints (without its `field: ` prefix, which the server's error carries itself).
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Where the rule sits, from the CRD's root: `` (the object), `spec`, `spec.apiEndpoint`,
    /// `spec.nodePools[]` (a list's items).
    pub at: &'static str,
    /// The CEL expression, true when the value is valid.
    pub rule: &'static str,
    /// The message when kos's is a fixed text.
    pub message: Option<&'static str>,
    /// The message when kos's names a value.
    pub message_expression: Option<&'static str>,
    /// Where below `at` the error is reported (`.apiEndpoint.type`), as `kos plan` reports it.
    pub field_path: Option<&'static str>,
}

const fn rule(at: &'static str, rule: &'static str) -> Rule {
    Rule {
        at,
        rule,
        message: None,
        message_expression: None,
        field_path: None,
    }
}

impl Rule {
    const fn message(self, m: &'static str) -> Self {
        Self {
            message: Some(m),
            ..self
        }
    }
    const fn message_expression(self, m: &'static str) -> Self {
        Self {
            message_expression: Some(m),
            ..self
        }
    }
    const fn field(self, f: &'static str) -> Self {
        Self {
            field_path: Some(f),
            ..self
        }
    }
}

/// CEL: `x` is a range kos reads as a cluster range (an IPv4 network address, no host bits).
macro_rules! v4 {
    ($x:literal) => {
        concat!(
            "(isCIDR(",
            $x,
            ") && cidr(",
            $x,
            ").ip().family() == 4 && cidr(",
            $x,
            ") == cidr(",
            $x,
            ").masked())"
        )
    };
}

/// CEL: two network ranges share an address (one holds the other's network address), as kos's
/// `check_overlap` decides.
macro_rules! overlap {
    ($a:literal, $b:literal) => {
        concat!(
            "(cidr(",
            $a,
            ").containsIP(cidr(",
            $b,
            ").ip()) || cidr(",
            $b,
            ").containsIP(cidr(",
            $a,
            ").ip()))"
        )
    };
}

/// CEL (a pool's rule): its name's length is not one the schema allows, which the schema reports.
macro_rules! pool_name_sized {
    () => {
        "(self.name.size() < 1 || self.name.size() > 20)"
    };
}

/// CEL (a pool's rule): it has no range to hold `count` to: no `autoscaling`, or one whose bounds
/// the rules before report (`max` 0, `min` above `max`).
macro_rules! without_autoscaling_range {
    () => {
        "(!has(self.autoscaling) || self.autoscaling.max == 0 || self.autoscaling.min > self.autoscaling.max)"
    };
}

/// CEL (a tag's rule): the tag is empty or too long, which an earlier rule reports.
macro_rules! tag_sized {
    () => {
        "(self.size() < 1 || self.size() > 60)"
    };
}

/// CEL (a label value's rule): the value is empty (which is allowed) or too long (which an
/// earlier rule reports).
macro_rules! label_value_sized {
    () => {
        "(self.size() == 0 || self.size() > 63)"
    };
}

/// CEL message: a range that is not a CIDR.
const NOT_A_CIDR: &str = "'`' + self + '` is not a CIDR'";
/// CEL: a CIDR that is a network address (or no CIDR, which the rule before reports).
const HOST_BITS_RULE: &str = "!isCIDR(self) || cidr(self) == cidr(self).masked()";
const HOST_BITS: &str = "'`' + self + '` has host bits set'";
/// CEL: an IPv4 range (or one the rules before report).
const IPV4_RULE: &str =
    "!isCIDR(self) || cidr(self) != cidr(self).masked() || cidr(self).ip().family() == 4";
const IPV6: &str = "'`' + self + '` is IPv6; kos builds IPv4 clusters'";

/// CEL: a duration kos reads (a number of at most 15 digits a part, kos's own bound being u64's
/// seconds).
const DURATION_RULE: &str = "self.matches('^(0|([0-9]{1,15}[hms])+)$')";
const NOT_A_DURATION: &str = "'`' + self + '` is not a duration'";

/// Every rule of `kos plan` the CRD carries. The ones it cannot carry are listed in
/// docs/operator.md: they need the cloud or kos's pinned manifests, are warnings, or read a value
/// the schema leaves untyped (`ccm`, `csi`, `image`, taints: CEL cannot see those).
pub const RULES: &[Rule] = &[
    // The Cluster's name is the cluster's (kos-cluster `ClusterName`): a DNS label of at most 20
    // characters. The API server already holds `metadata.name` to a DNS subdomain; what a label
    // adds is no `.`. At the root, where a rule may read `self.metadata.name` (and nothing else of
    // the metadata); reported there (`<nil>`), as a root rule's failure is.
    rule("", "self.metadata.name.size() <= 20").message_expression(
        "'`' + self.metadata.name + '` is ' + string(self.metadata.name.size()) + ' characters long; the limit is 20'",
    ),
    rule("", "!self.metadata.name.contains('.')").message_expression(
        "'`' + self.metadata.name + '` contains `.`, which is not allowed here'",
    ),
    rule(
        "spec",
        concat!("!(", "has(self.apiEndpoint) && has(self.apiEndpoint.type) && self.apiEndpoint.type == 'floatingIP'", ") || self.controlPlane.count == 1"),
    )
    .message_expression(
        "'a floating-IP endpoint reaches one server, but there are ' + string(self.controlPlane.count) + ' control planes'",
    )
    .field(".apiEndpoint.type"),
    rule(
        "spec",
        concat!("!(", "has(self.apiEndpoint) && has(self.apiEndpoint.type) && self.apiEndpoint.type == 'floatingIP'", ") || !has(self.controlPlane.maxSurge) || self.controlPlane.maxSurge == 0"),
    )
    .message(
        "a floating-IP endpoint is its one server's port: no second control plane can join behind it",
    )
    .field(".controlPlane.maxSurge"),
    rule(
        "spec.apiEndpoint",
        "!has(self.type) || self.type != 'floatingIP' || !has(self.provider)",
    )
    .message_expression(
        "'provider `' + self.provider + '` is for load balancers, but the endpoint is a floating IP'",
    )
    .field(".provider"),
    rule(
        "spec.network",
        "!(has(self.create) && has(self.existing))",
    )
    .message("has both `create` and `existing`"),
    rule("spec.network", "has(self.create) || has(self.existing)")
        .message("the network needs `create` or `existing`")
        .field(".create"),
    // kos reports the second pool of a name at its `name`; a list rule can only point at the list.
    rule(
        "spec.nodePools",
        "self.all(p, self.exists_one(q, q.name == p.name))",
    )
    .message_expression(
        "'pool name `' + self.filter(p, self.filter(q, q.name == p.name).size() > 1)[0].name + '` is used twice'",
    ),
    rule(
        "spec.nodePools[]",
        "!(self.name == 'cp' || self.name.startsWith('port-') || self.name.startsWith('vol-') || self.name.startsWith('sgroup-'))",
    )
    .message_expression(concat!(
        "'pool name `' + self.name + '` is reserved: ' + (self.name == 'cp' ",
        "? \"the control plane's servers are `cp-0`, `cp-1`…\" ",
        ": 'its servers (`' + self.name + '-0`…) would take the ids of the ' + (",
        "self.name.startsWith('port-') ? 'ports of `' + self.name.substring(5) + '` (`port-' + self.name.substring(5) + '-0`…)' ",
        ": self.name.startsWith('vol-') ? 'boot volumes of `' + self.name.substring(4) + '` (`vol-' + self.name.substring(4) + '-0`…)' ",
        ": 'server groups of pools named `' + self.name.substring(7) + '-<n>` (`sgroup-' + self.name.substring(7) + '-0`…)'))",
    ))
    .field(".name"),
    // A pool name is a DNS label (kos-cluster `check_dns_label`); the schema holds its length to
    // 1–20, these name the first rule it breaks in kos's order and words: an uppercase letter, a
    // character outside `[a-z0-9-]`, a bad first or last character.
    rule(
        "spec.nodePools[]",
        concat!(pool_name_sized!(), " || !self.name.matches('[A-Z]')"),
    )
    .message_expression(
        "'`' + self.name + '` contains the uppercase letter `' + self.name.find('[A-Z]') + '`; DNS names are lowercase'",
    )
    .field(".name"),
    rule(
        "spec.nodePools[]",
        concat!(pool_name_sized!(), " || self.name.matches('[A-Z]') || self.name.matches('^[a-z0-9-]*$')"),
    )
    .message_expression(
        "'`' + self.name + '` contains `' + self.name.find('[^a-z0-9-]') + '`, which is not allowed here'",
    )
    .field(".name"),
    rule(
        "spec.nodePools[]",
        concat!(pool_name_sized!(), " || !self.name.matches('^[a-z0-9-]*$') || self.name.matches('^[a-z0-9]')"),
    )
    .message_expression("'`' + self.name + '` must start with a letter or digit'")
    .field(".name"),
    rule(
        "spec.nodePools[]",
        concat!(pool_name_sized!(), " || !self.name.matches('^[a-z0-9-]*$') || self.name.matches('[a-z0-9]$')"),
    )
    .message_expression("'`' + self.name + '` must end with a letter or digit'")
    .field(".name"),
    // A label's value (kos-cluster `check_label_value`): empty, or at most 63 of `[A-Za-z0-9._-]`
    // with a letter or digit at both ends, the first rule broken named. Keys stay `kos plan`'s:
    // a schema cannot bound a map key's length, and a rule reading keys would be over the
    // server's cost budget.
    rule("spec.nodePools[].labels{}", "self.size() <= 63").message_expression(
        "'label value `' + self + '` is ' + string(self.size()) + ' characters long; the limit is 63'",
    ),
    rule(
        "spec.nodePools[].labels{}",
        concat!(label_value_sized!(), " || self.matches('^[A-Za-z0-9._-]*$')"),
    )
    .message_expression(
        "'label value `' + self + '` contains `' + self.find('[^A-Za-z0-9._-]') + '`, which is not allowed here'",
    ),
    rule(
        "spec.nodePools[].labels{}",
        concat!(label_value_sized!(), " || !self.matches('^[A-Za-z0-9._-]*$') || self.matches('^[A-Za-z0-9]')"),
    )
    .message_expression("'label value `' + self + '` must start with a letter or digit'"),
    rule(
        "spec.nodePools[].labels{}",
        concat!(label_value_sized!(), " || !self.matches('^[A-Za-z0-9._-]*$') || self.matches('[A-Za-z0-9]$')"),
    )
    .message_expression("'label value `' + self + '` must end with a letter or digit'"),
    rule(
        "spec.nodePools[]",
        "!has(self.maxUnavailable) || self.maxUnavailable != 0 || (has(self.maxSurge) && self.maxSurge != 0)",
    )
    .message("maxUnavailable 0 with maxSurge 0: no node could ever be replaced")
    .field(".maxUnavailable"),
    // A pool's `autoscaling` (kos-cluster `autoscaling`, `count_within`), in kos's order: `max` at
    // least 1 (the schema holds both bounds to 500), `min` at most `max`, then `count` (the
    // current target size) within them, each silent on what an earlier one reports.
    rule("spec.nodePools[].autoscaling", "self.max >= 1")
        .message("0 is out of range; it must be 1–500")
        .field(".max"),
    rule(
        "spec.nodePools[].autoscaling",
        "self.max == 0 || self.min <= self.max",
    )
    .message_expression("'min ' + string(self.min) + ' is above max ' + string(self.max)")
    .field(".min"),
    rule(
        "spec.nodePools[]",
        concat!(without_autoscaling_range!(), " || self.count <= self.autoscaling.max"),
    )
    .message_expression(
        "'count ' + string(self.count) + ' is above autoscaling.max ' + string(self.autoscaling.max)",
    )
    .field(".count"),
    rule(
        "spec.nodePools[]",
        concat!(without_autoscaling_range!(), " || self.count >= self.autoscaling.min"),
    )
    .message_expression(
        "'count ' + string(self.count) + ' is below autoscaling.min ' + string(self.autoscaling.min)",
    )
    .field(".count"),
    rule(
        "spec.addons.cniManifest",
        "self.url.trim().size() == 0 || (self.url.startsWith('https://') && size(self.url) > 8)",
    )
    .message_expression("'`' + self.url + '` is not an https:// URL'")
    .field(".url"),
    rule(
        "spec.addons.cniManifest",
        "self.sha256.trim().size() == 0 || (size(self.sha256) == 64 && self.sha256.matches('^[0-9a-f]+$'))",
    )
    .message_expression("'`' + self.sha256 + '` is not a sha256 (64 lowercase hex digits)'")
    .field(".sha256"),
    // The extra tags (a cluster document's `metadata.tags`, kos-cluster `check_nova_tag`), in
    // kos's order: empty or longer than Nova's 60, a `/` or `,`, a key of kos's (`kos-…=`); and no
    // more than a server holds beside kos's own (names::USER_TAGS_MAX).
    rule("spec.tags", "self.size() <= 39")
        .message_expression("string(self.size()) + ' tags; the limit is 39'"),
    rule("spec.tags[]", "self.size() > 0").message("tag `` is empty"),
    rule("spec.tags[]", "self.size() <= 60").message_expression(
        "'tag `' + self + '` is ' + string(self.size()) + ' characters long; the limit is 60'",
    ),
    rule(
        "spec.tags[]",
        concat!(tag_sized!(), " || !self.matches('[/,]')"),
    )
    .message_expression(
        "'tag `' + self + '` contains `' + self.find('[/,]') + '`, which is not allowed here'",
    ),
    rule(
        "spec.tags[]",
        concat!(tag_sized!(), " || self.matches('[/,]') || !self.matches('^kos-[^=]*=')"),
    )
    .message_expression(
        "'tag `' + self + '` uses the key `' + self.substring(0, self.indexOf('=')) + '`, which kos sets itself'",
    ),
    // The ranges' syntax (kos-cluster `any_cidr`, `cluster_cidr`), in kos's order: a CIDR, then a
    // network address, then IPv4 for the cluster's own ranges. The rules between ranges (below)
    // stay silent on a range these report.
    rule("spec.network.create.cidr", "isCIDR(self)").message_expression(NOT_A_CIDR),
    rule("spec.network.create.cidr", HOST_BITS_RULE).message_expression(HOST_BITS),
    rule("spec.network.create.cidr", IPV4_RULE).message_expression(IPV6),
    rule("spec.network.podCIDR", "isCIDR(self)").message_expression(NOT_A_CIDR),
    rule("spec.network.podCIDR", HOST_BITS_RULE).message_expression(HOST_BITS),
    rule("spec.network.podCIDR", IPV4_RULE).message_expression(IPV6),
    rule("spec.network.serviceCIDR", "isCIDR(self)").message_expression(NOT_A_CIDR),
    rule("spec.network.serviceCIDR", HOST_BITS_RULE).message_expression(HOST_BITS),
    rule("spec.network.serviceCIDR", IPV4_RULE).message_expression(IPV6),
    // Source ranges, IPv4 or IPv6.
    rule("spec.apiEndpoint.allowedCIDRs[]", "isCIDR(self)").message_expression(NOT_A_CIDR),
    rule("spec.apiEndpoint.allowedCIDRs[]", HOST_BITS_RULE).message_expression(HOST_BITS),
    rule("spec.network.ssh.allowedCIDRs[]", "isCIDR(self)").message_expression(NOT_A_CIDR),
    rule("spec.network.ssh.allowedCIDRs[]", HOST_BITS_RULE).message_expression(HOST_BITS),
    // The node subnet's DNS servers (kos-cluster `parsed::<Ipv4Addr>`).
    rule(
        "spec.network.create.dnsServers[]",
        "isIP(self) && ip(self).family() == 4",
    )
    .message_expression("'`' + self + '` is not an IPv4 address'"),
    // A health check's durations (kos-cluster `parse_duration`: `0`, or whole numbers with `h`, `m`
    // or `s`).
    rule("spec.controlPlane.healthCheck.nodeStartupTimeout", DURATION_RULE)
        .message_expression(NOT_A_DURATION),
    rule(
        "spec.controlPlane.healthCheck.unhealthyConditions[].timeout",
        DURATION_RULE,
    )
    .message_expression(NOT_A_DURATION),
    rule("spec.nodePools[].healthCheck.nodeStartupTimeout", DURATION_RULE)
        .message_expression(NOT_A_DURATION),
    rule(
        "spec.nodePools[].healthCheck.unhealthyConditions[].timeout",
        DURATION_RULE,
    )
    .message_expression(NOT_A_DURATION),
    // What the nodes reach without the proxy (kos-cluster airgap `no_proxy_entry`), and the
    // mirrors' CA bundle (PEM certificates, never a private key).
    rule(
        "spec.proxy.noProxy[]",
        r"self.trim().matches('^[A-Za-z0-9.:/\\[\\]-]*$')",
    )
    .message_expression("'`' + self.trim() + '` is not a host, domain or CIDR'"),
    rule(
        "spec.mirrors.caBundle",
        "self.contains('-----BEGIN CERTIFICATE-----') && !self.contains('PRIVATE KEY')",
    )
    .message("not a PEM certificate bundle"),
    rule("spec.proxy", "has(self.http) || has(self.https)")
        .message("a proxy needs `http` or `https`"),
    // The cluster ranges' sizes and overlaps, on ranges kos reads (IPv4 network addresses; others
    // kos refuses with its own message, and the rules stay silent on them). kos's defaults for an
    // unset range are written in: 10.244.0.0/16 (pods), 10.96.0.0/12 (services).
    rule(
        "spec.network.create",
        concat!("!", v4!("self.cidr"), " || cidr(self.cidr).prefixLength() <= 28"),
    )
    .message_expression("'`' + self.cidr + '` is too small for the node subnet'")
    .field(".cidr"),
    rule(
        "spec.network",
        concat!("!has(self.podCIDR) || !", v4!("self.podCIDR"), " || cidr(self.podCIDR).prefixLength() <= 24"),
    )
    .message_expression("'`' + self.podCIDR + '` is too small for the pod range'")
    .field(".podCIDR"),
    rule(
        "spec.network",
        concat!("!has(self.serviceCIDR) || !", v4!("self.serviceCIDR"), " || cidr(self.serviceCIDR).prefixLength() <= 24"),
    )
    .message_expression("'`' + self.serviceCIDR + '` is too small for the service range'")
    .field(".serviceCIDR"),
    rule(
        "spec.network",
        concat!("!has(self.serviceCIDR) || !", v4!("self.serviceCIDR"), " || cidr(self.serviceCIDR).prefixLength() >= 12"),
    )
    .message_expression(
        "'`' + self.serviceCIDR + '` is too large for the service range; Kubernetes allows at most /12'",
    )
    .field(".serviceCIDR"),
    // kos blames the range the user wrote, the later one (node, pod, service) if both.
    rule(
        "spec.network",
        concat!(
            "!(has(self.create) && has(self.podCIDR) && ", v4!("self.create.cidr"), " && ", v4!("self.podCIDR"), ") || !",
            overlap!("self.create.cidr", "self.podCIDR"),
        ),
    )
    .message_expression("'podCIDR ' + self.podCIDR + ' overlaps create.cidr ' + self.create.cidr")
    .field(".podCIDR"),
    rule(
        "spec.network",
        concat!(
            "!(has(self.create) && !has(self.podCIDR) && ", v4!("self.create.cidr"), ") || !",
            overlap!("self.create.cidr", "'10.244.0.0/16'"),
        ),
    )
    .message_expression("'create.cidr ' + self.create.cidr + ' overlaps podCIDR 10.244.0.0/16'")
    .field(".create.cidr"),
    rule(
        "spec.network",
        concat!(
            "!(has(self.create) && has(self.serviceCIDR) && ", v4!("self.create.cidr"), " && ", v4!("self.serviceCIDR"), ") || !",
            overlap!("self.create.cidr", "self.serviceCIDR"),
        ),
    )
    .message_expression(
        "'serviceCIDR ' + self.serviceCIDR + ' overlaps create.cidr ' + self.create.cidr",
    )
    .field(".serviceCIDR"),
    rule(
        "spec.network",
        concat!(
            "!(has(self.create) && !has(self.serviceCIDR) && ", v4!("self.create.cidr"), ") || !",
            overlap!("self.create.cidr", "'10.96.0.0/12'"),
        ),
    )
    .message_expression("'create.cidr ' + self.create.cidr + ' overlaps serviceCIDR 10.96.0.0/12'")
    .field(".create.cidr"),
    rule(
        "spec.network",
        concat!(
            "!(has(self.serviceCIDR) && ", v4!("self.serviceCIDR"), " && (!has(self.podCIDR) || ", v4!("self.podCIDR"), ")) || !",
            overlap!("self.serviceCIDR", "(has(self.podCIDR) ? self.podCIDR : '10.244.0.0/16')"),
        ),
    )
    .message_expression(
        "'serviceCIDR ' + self.serviceCIDR + ' overlaps podCIDR ' + (has(self.podCIDR) ? self.podCIDR : '10.244.0.0/16')",
    )
    .field(".serviceCIDR"),
    rule(
        "spec.network",
        concat!(
            "!(has(self.podCIDR) && !has(self.serviceCIDR) && ", v4!("self.podCIDR"), ") || !",
            overlap!("self.podCIDR", "'10.96.0.0/12'"),
        ),
    )
    .message_expression("'podCIDR ' + self.podCIDR + ' overlaps serviceCIDR 10.96.0.0/12'")
    .field(".podCIDR"),
];

/// CEL: a version of kos's form, `1.MINOR.PATCH` with or without a `v` (as kos reads it, spaces
/// around it allowed), which the rule after the form's reports about.
const VERSION_FORM: &str =
    r"self.matches('^\\s*v?(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)\\s*$')";

/// `kos plan`'s rules for `kubernetesVersion` (kos-cluster `KubernetesVersion::parse`), in its
/// order: the form, Kubernetes 1.x, a minor of kos's pins table (the CRD is generated with the
/// table of the binary that prints it, as every run checks against that table too).
fn version_rules() -> Vec<serde_json::Value> {
    let minors = kos_cluster::spec::KubernetesVersion::supported_minors();
    let quoted: Vec<String> = minors.iter().map(|m| format!("'{m}'")).collect();
    let supported: Vec<String> = minors.iter().map(|m| format!("1.{m}")).collect();
    vec![
        serde_json::json!({
            "rule": VERSION_FORM,
            "messageExpression": "'`' + self + '` is not a version of the form `1.MINOR.PATCH`'",
        }),
        serde_json::json!({
            "rule": format!("!{VERSION_FORM} || self.find('[0-9]+') == '1'"),
            "messageExpression": "'`' + self + '` has major version ' + self.find('[0-9]+') + '; Kubernetes releases are 1.x'",
        }),
        serde_json::json!({
            "rule": format!(
                "!{VERSION_FORM} || self.find('[0-9]+') != '1' || self.findAll('[0-9]+')[1] in [{}]",
                quoted.join(", ")
            ),
            "messageExpression": format!(
                "'`' + self + '` is outside the supported releases ({})'",
                supported.join(", ")
            ),
        }),
    ]
}

/// `kos plan`'s rule for a CNI without a verified manifest in kos's pins table (kos-cluster
/// `check_cni_pinned`): refused unless the spec pins its own `cniManifest`. The CRD is generated
/// with the table of the binary that prints it.
fn cni_rules() -> Vec<serde_json::Value> {
    let verified: Vec<String> = kos_bootstrap::addons::Pins::builtin()
        .map(|p| {
            p.cni
                .iter()
                .filter(|(_, pin)| pin.vouched())
                .map(|(key, _)| format!("'{key}'"))
                .collect()
        })
        .unwrap_or_default();
    vec![serde_json::json!({
        "rule": format!(
            "!has(self.cni) || has(self.cniManifest) || self.cni in [{}]",
            verified.join(", ")
        ),
        "messageExpression": "'kos has no verified manifest for CNI `' + self.cni + '`: its first control plane would refuse to install it'",
        "fieldPath": ".cni",
    })]
}

/// CEL: the nodes the spec asks for, the control planes and every pool's count.
const NODES: &str =
    "(self.controlPlane.count + (has(self.nodePools) ? self.nodePools.map(p, p.count).sum() : 0))";

/// `kos plan`'s rules between the ranges and the number of nodes (kos-cluster `check_capacity`):
/// each node takes an address of the node subnet, of which Neutron and Octavia take 5, and a /24
/// of the pod range (kos's default `10.244.0.0/16` for an unset one). On ranges kos reads and of a
/// size kos allows (the rules above report the others); CEL has no power, so a range's size is
/// looked up by its prefix length.
fn capacity_rules() -> Vec<serde_json::Value> {
    let sizes = |top: u32, last: u32| {
        let list: Vec<String> = (0..=last)
            .map(|p| (1u64 << (top - p)).to_string())
            .collect();
        format!("[{}]", list.join(", "))
    };
    let node = "self.network.create.cidr";
    let room = format!("({}[cidr({node}).prefixLength()] - 5)", sizes(32, 28));
    let pods = "(has(self.network.podCIDR) ? self.network.podCIDR : '10.244.0.0/16')";
    let per_node = format!("{}[cidr({pods}).prefixLength()]", sizes(24, 24));
    vec![
        serde_json::json!({
            "rule": format!(
                "!has(self.network.create) || !{} || cidr({node}).prefixLength() > 28 || {NODES} <= {room}",
                v4!("self.network.create.cidr"),
            ),
            "messageExpression": format!(
                "{node} + ' has room for ' + string({room}) + ' nodes, the spec asks for ' + string({NODES})"
            ),
            "fieldPath": ".network.create.cidr",
        }),
        serde_json::json!({
            "rule": format!(
                "(has(self.network.podCIDR) && !{}) || cidr({pods}).prefixLength() > 24 || {NODES} <= {per_node}",
                v4!("self.network.podCIDR"),
            ),
            "messageExpression": format!(
                "{pods} + ' gives ' + string({per_node}) + ' nodes a /24 each, the spec asks for ' + string({NODES}) + ' nodes'"
            ),
            "fieldPath": ".network.podCIDR",
        }),
    ]
}

/// CEL: `x` shown as kos shows a URL in a message (`without_userinfo`, `HttpUrl::redacted`): what
/// may be credentials, up to the last `@` before the first `/` after `://`, masked as `***`.
fn redacted(x: &str) -> String {
    format!(
        "({x}.find('^(.*?://)?[^/]*@') == '' ? {x} : {x}.find('^.*?://') + '***' + {x}.substring(size({x}.find('^(.*?://)?[^/]*@')) - 1))"
    )
}

/// `kos plan`'s rules for the API's DNS name (kos-cluster `check_dns_subdomain`, on the name
/// without its trailing dots): its length, then label by label, the first broken rule of the
/// first label that breaks one, in kos's words.
fn dns_name_rules() -> Vec<serde_json::Value> {
    let name = "self.find('^(.*[^.])?')";
    let label_ok =
        "(l.size() >= 1 && l.size() <= 63 && l.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$'))";
    let bad = format!("{name}.split('.').filter(l, !{label_ok})[0]");
    let shown = "'`' + self + '` '";
    vec![
        serde_json::json!({
            "rule": format!("{name}.size() >= 1"),
            "messageExpression": format!("{shown} + 'is empty'"),
        }),
        serde_json::json!({
            "rule": format!("{name}.size() <= 253"),
            "messageExpression": format!(
                "{shown} + 'is ' + string({name}.size()) + ' characters long; the limit is 253'"
            ),
        }),
        serde_json::json!({
            "rule": format!(
                "{name}.size() < 1 || {name}.size() > 253 || {name}.split('.').all(l, {label_ok})"
            ),
            "messageExpression": format!(
                "{shown} + ({bad}.size() == 0 ? 'is empty' \
                 : {bad}.size() > 63 ? 'is ' + string({bad}.size()) + ' characters long; the limit is 63' \
                 : {bad}.matches('[A-Z]') ? 'contains the uppercase letter `' + {bad}.find('[A-Z]') + '`; DNS names are lowercase' \
                 : !{bad}.matches('^[a-z0-9-]*$') ? 'contains `' + {bad}.find('[^a-z0-9-]') + '`, which is not allowed here' \
                 : !{bad}.matches('^[a-z0-9]') ? 'must start with a letter or digit' \
                 : 'must end with a letter or digit')"
            ),
        }),
    ]
}

/// The base64 alphabet, by index.
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A regular expression the base64 of an SSH key blob starts with when the blob starts with
/// `algorithm` as an SSH string (a u32 length, then the name: RFC 4253 §6.6), whatever follows:
/// the whole 3-byte groups' characters, then the characters of a last partial group as a class of
/// the values the unknown bits allow.
fn blob_prefix(algorithm: &str) -> String {
    let len = u32::try_from(algorithm.len()).unwrap_or(u32::MAX);
    let bytes: Vec<u8> = len
        .to_be_bytes()
        .iter()
        .chain(algorithm.as_bytes())
        .copied()
        .collect();
    let char_at = |i: u8| char::from(BASE64[usize::from(i & 63)]);
    let class = |first: u8, count: u8| -> String {
        let chars: String = (first..first + count).map(char_at).collect();
        format!("[{chars}]")
    };
    let mut out = String::from("^");
    for g in bytes.chunks(3) {
        match *g {
            [a, b, c] => {
                for i in [
                    a >> 2,
                    ((a & 3) << 4) | (b >> 4),
                    ((b & 15) << 2) | (c >> 6),
                    c,
                ] {
                    out.push(char_at(i));
                }
            }
            [a, b] => {
                out.push(char_at(a >> 2));
                out.push(char_at(((a & 3) << 4) | (b >> 4)));
                out.push_str(&class((b & 15) << 2, 4));
            }
            [a] => {
                out.push(char_at(a >> 2));
                out.push_str(&class((a & 3) << 4, 16));
            }
            _ => {}
        }
    }
    out
}

/// `kos plan`'s rules for `sshPublicKey` (kos-cluster `SshPublicKey::parse`), in its order and
/// words: not a PEM block, one line, a known algorithm, base64 key data (canonical, as the
/// `base64` crate's standard engine decodes it), whose start names the same algorithm. CEL has no
/// base64: the last is checked on the encoded text, whose first characters an algorithm fixes.
fn ssh_key_rules() -> Vec<serde_json::Value> {
    let line = "self.trim()";
    let algorithm = format!(r"{line}.find('^[^\\s]+')");
    let blob = format!(r"{line}.substring({algorithm}.size()).trim().find('^[^\\s]*')");
    let known: Vec<String> = kos_cluster::spec::SshPublicKey::ALGORITHMS
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let known = format!("{algorithm} in [{}]", known.join(", "));
    let base64 = format!(
        "{blob}.matches('^([A-Za-z0-9+/]{{4}})*([A-Za-z0-9+/]{{2}}[AEIMQUYcgkosw048]=|[A-Za-z0-9+/][AQgw]==)?$') && {blob}.size() > 0"
    );
    let matching: Vec<String> = kos_cluster::spec::SshPublicKey::ALGORITHMS
        .iter()
        .map(|a| {
            format!(
                "({algorithm} == '{a}' && {blob}.matches('{}'))",
                blob_prefix(a)
            )
        })
        .collect();
    let pem = format!("{line}.startsWith('-----BEGIN')");
    let lines = format!("{line}.contains('\\n')");
    let steps = [
        (
            format!("!{lines}"),
            "'the key spans several lines; give exactly one key'".to_owned(),
            lines,
        ),
        (
            known.clone(),
            format!(
                "'the key starts with `' + {algorithm} + '`, which is not an SSH key algorithm'"
            ),
            format!("!({known})"),
        ),
        (
            base64.clone(),
            "'the key has no valid base64 key data after the algorithm'".to_owned(),
            format!("!({base64})"),
        ),
        (
            format!("({})", matching.join(" || ")),
            "'the key has key data that does not match its algorithm (truncated or mixed up?)'"
                .to_owned(),
            String::new(),
        ),
    ];
    in_order(
        (
            format!("!{pem}"),
            "'the key is a PEM block, probably a private key'".to_owned(),
            pem,
        ),
        steps,
    )
}

/// Rules in kos's order: each `(what holds when the value is fine, its message, what the rules
/// after it stay silent on)` is checked only where none of the earlier ones fails, so a value
/// gets the message of the first rule it breaks, as `kos plan` gives one.
fn in_order(
    first: (String, String, String),
    rest: impl IntoIterator<Item = (String, String, String)>,
) -> Vec<serde_json::Value> {
    let mut rules = Vec::new();
    let mut silent_on: Vec<String> = Vec::new();
    for (holds, message, reported) in std::iter::once(first).chain(rest) {
        let rule = if silent_on.is_empty() {
            holds
        } else {
            format!("{} || {holds}", silent_on.join(" || "))
        };
        rules.push(serde_json::json!({"rule": rule, "messageExpression": message}));
        silent_on.push(reported);
    }
    rules
}

/// What a URL field takes besides an `http(s)://host[:port][/path]` (kos-cluster's airgap `url`).
#[derive(Clone, Copy, PartialEq)]
enum UrlKind {
    /// A proxy: credentials allowed.
    Proxy,
    /// A package or manifest mirror: no credentials.
    Mirror,
    /// A registry mirror: no credentials, no path.
    Registry,
}

/// `kos plan`'s rules for a URL (kos-cluster `HttpUrl::parse`, then the field's own), in its
/// order and words, each silent on what an earlier one reports: the scheme; a space, quote or
/// control character; a query or fragment; no host; a port outside 1–65535; credentials; a
/// registry mirror's path. kos trims the value first, and so do the rules.
fn url_rules(kind: UrlKind) -> Vec<serde_json::Value> {
    let t = "self.trim()";
    let shown = redacted("self");
    let scheme = format!("({t}.startsWith('https://') || {t}.startsWith('http://'))");
    let character = format!(r#"{t}.matches('[\\p{{Cc}}\\p{{Z}}"\'\\\\`$]')"#);
    let query = format!("{t}.matches('[?#]')");
    let no_host = format!(r"{t}.matches('^https?://([^/]*@)?(\\[\\])?(:[^/:\\]]*)?(/.*)?$')");
    // The authority after the credentials, and its port after the last `:` (none when that part
    // holds a `]`: an IPv6 host without a port).
    let host_port = format!("{t}.substring(size({t}.find('^https?://([^/]*@)?'))).find('^[^/]*')");
    let port = format!("{host_port}.find('[^:]*$')");
    let has_port = format!(r"{host_port}.matches(':[^:\\]]*$')");
    let port_ok = format!(
        "({port}.matches('^[+]?[0-9]+$') && size({port}) <= 18 && int({port}) >= 1 && int({port}) <= 65535)"
    );
    let credentials = format!("{t}.matches('^https?://[^/]*@')");
    let said = |what: &str| format!("'`' + {shown} + '` {what}'");
    // (what holds when the value is fine, the message, what the next rules stay silent on).
    let mut steps = vec![
        (
            format!("!{character}"),
            said("has a space, a quote or a control character"),
            character,
        ),
        (format!("!{query}"), said("has a query or fragment"), query),
        (format!("!{no_host}"), said("has no host"), no_host),
        (
            format!("!{has_port} || {port_ok}"),
            said("has a port that is not a number from 1 to 65535"),
            format!("({has_port} && !{port_ok})"),
        ),
    ];
    if kind != UrlKind::Proxy {
        steps.push((
            format!("!{credentials}"),
            format!("'`' + {} + '` carries credentials'", redacted(t)),
            credentials,
        ));
    }
    if kind == UrlKind::Registry {
        steps.push((
            format!("{t}.matches('^https?://[^/]*/?$')"),
            format!("'the registry mirror `' + {t} + '` has a path'"),
            String::new(),
        ));
    }
    in_order(
        (
            scheme.clone(),
            said("does not start with http:// or https://"),
            format!("!{scheme}"),
        ),
        steps,
    )
}

/// The URL fields and what each takes.
const URLS: &[(&str, UrlKind)] = &[
    ("spec.mirrors.registries{}", UrlKind::Registry),
    ("spec.mirrors.packages.kubernetes", UrlKind::Mirror),
    ("spec.mirrors.packages.os", UrlKind::Mirror),
    ("spec.mirrors.packages.osSecurity", UrlKind::Mirror),
    ("spec.mirrors.manifests", UrlKind::Mirror),
    ("spec.proxy.http", UrlKind::Proxy),
    ("spec.proxy.https", UrlKind::Proxy),
];

/// The strings kos-cluster reads with `string`, which refuses an empty or blank one ("must not be
/// empty") before any other rule: the CRD says so first, and its other rules at these places stay
/// silent on a blank value.
const NOT_EMPTY: &[&str] = &[
    "spec.network.externalNetwork",
    "spec.network.create.cidr",
    "spec.network.podCIDR",
    "spec.network.serviceCIDR",
    "spec.network.existing.network",
    "spec.network.existing.subnet",
    "spec.network.existing.router",
    "spec.network.ssh.allowedCIDRs[]",
    "spec.apiEndpoint.allowedCIDRs[]",
    "spec.controlPlane.flavor",
    "spec.controlPlane.availabilityZones[]",
    "spec.controlPlane.bootVolume.type",
    "spec.controlPlane.bootVolume.availabilityZone",
    "spec.nodePools[].flavor",
    "spec.nodePools[].availabilityZones[]",
    "spec.nodePools[].bootVolume.type",
    "spec.nodePools[].bootVolume.availabilityZone",
    "spec.addons.csiAvailabilityZone",
    "spec.addons.cniManifest.url",
    "spec.addons.cniManifest.sha256",
    "spec.sshPublicKey",
    "spec.mirrors.registries{}",
    "spec.mirrors.caBundle",
    "spec.mirrors.packages.kubernetes",
    "spec.mirrors.packages.os",
    "spec.mirrors.packages.osSecurity",
    "spec.mirrors.manifests",
    "spec.proxy.http",
    "spec.proxy.https",
    "spec.proxy.noProxy[]",
];

/// Bounds the rules' CEL needs: the API server refuses a rule whose estimated cost (which grows
/// with the lists it iterates and the strings it parses) is too high, so a list a rule walks twice
/// and the ranges the CIDR rules parse several times are bounded (64 characters hold any CIDR).
const BOUNDS: &[(&str, &str, u64)] = &[
    ("spec.nodePools", "maxItems", 100),
    // Nova keeps at most 50 tags on a server (kos refuses more than 39 with its own message); a
    // Neutron tag is at most 255 characters (kos refuses more than 60 with its own).
    ("spec.tags", "maxItems", 50),
    ("spec.tags[]", "maxLength", 255),
    // A pool's labels: every value's rules run once per label.
    ("spec.nodePools[].labels", "maxProperties", 64),
    ("spec.nodePools[].labels{}", "maxLength", 255),
    // A release is a few characters; its rules run regular expressions over it.
    ("spec.kubernetesVersion", "maxLength", 64),
    ("spec.network.create.cidr", "maxLength", 64),
    // Source ranges (security-group rules and a listener's allowed CIDRs: a project holds 100
    // rules a group by default) and the subnet's DNS servers (Neutron keeps 5 by default).
    ("spec.apiEndpoint.allowedCIDRs", "maxItems", 100),
    ("spec.apiEndpoint.allowedCIDRs[]", "maxLength", 64),
    ("spec.network.ssh.allowedCIDRs", "maxItems", 100),
    ("spec.network.ssh.allowedCIDRs[]", "maxLength", 64),
    // URLs: their rules run a few regular expressions over each; the registries' map is walked
    // per entry.
    ("spec.mirrors.registries", "maxProperties", 64),
    ("spec.mirrors.registries{}", "maxLength", 1024),
    ("spec.mirrors.packages.kubernetes", "maxLength", 1024),
    ("spec.mirrors.packages.os", "maxLength", 1024),
    ("spec.mirrors.packages.osSecurity", "maxLength", 1024),
    ("spec.mirrors.manifests", "maxLength", 1024),
    ("spec.proxy.http", "maxLength", 1024),
    ("spec.proxy.https", "maxLength", 1024),
    // A health check's conditions (Cluster API's hold a few) and its durations.
    (
        "spec.controlPlane.healthCheck.unhealthyConditions",
        "maxItems",
        16,
    ),
    (
        "spec.controlPlane.healthCheck.unhealthyConditions[].timeout",
        "maxLength",
        64,
    ),
    (
        "spec.controlPlane.healthCheck.nodeStartupTimeout",
        "maxLength",
        64,
    ),
    (
        "spec.nodePools[].healthCheck.unhealthyConditions",
        "maxItems",
        16,
    ),
    (
        "spec.nodePools[].healthCheck.unhealthyConditions[].timeout",
        "maxLength",
        64,
    ),
    (
        "spec.nodePools[].healthCheck.nodeStartupTimeout",
        "maxLength",
        64,
    ),
    // An SSH public key line: an RSA key of 16384 bits is about 2.8 KB of base64.
    ("spec.sshPublicKey", "maxLength", 8192),
    // The API's DNS name: 253 characters, and a few trailing dots.
    ("spec.apiEndpoint.dnsName", "maxLength", 260),
    // `noProxy` (hosts and domains: a DNS name is at most 253 characters) and the CA bundle.
    ("spec.proxy.noProxy", "maxItems", 256),
    ("spec.proxy.noProxy[]", "maxLength", 253),
    ("spec.mirrors.caBundle", "maxLength", 262_144),
    ("spec.network.create.dnsServers", "maxItems", 16),
    ("spec.network.create.dnsServers[]", "maxLength", 64),
    ("spec.network.podCIDR", "maxLength", 64),
    ("spec.network.serviceCIDR", "maxLength", 64),
];

/// Adds [`RULES`], the rules built beside it (the version's, the capacity's, the CNI's, the URLs',
/// the DNS name's and the SSH key's), the blank-string rules ([`NOT_EMPTY`]) and [`BOUNDS`] to a
/// version's schema (as JSON) where they apply.
pub(super) fn add(root: &mut serde_json::Value) {
    let table = RULES.iter().map(|r| {
        let mut v = serde_json::json!({"rule": r.rule});
        if let Some(m) = r.message {
            v["message"] = m.into();
        }
        if let Some(m) = r.message_expression {
            v["messageExpression"] = m.into();
        }
        if let Some(f) = r.field_path {
            v["fieldPath"] = f.into();
        }
        (r.at, v)
    });
    let versions = version_rules()
        .into_iter()
        .map(|v| ("spec.kubernetesVersion", v));
    let capacity = capacity_rules().into_iter().map(|v| ("spec", v));
    let cni = cni_rules().into_iter().map(|v| ("spec.addons", v));
    let urls = URLS
        .iter()
        .flat_map(|(at, kind)| url_rules(*kind).into_iter().map(move |v| (*at, v)));
    let dns_name = dns_name_rules()
        .into_iter()
        .map(|v| ("spec.apiEndpoint.dnsName", v));
    let ssh_key = ssh_key_rules()
        .into_iter()
        .map(|v| ("spec.sshPublicKey", v));
    for (at, v) in table
        .chain(versions)
        .chain(capacity)
        .chain(cni)
        .chain(urls)
        .chain(dns_name)
        .chain(ssh_key)
    {
        let mut v = v;
        if NOT_EMPTY.contains(&at)
            && let Some(rule) = v["rule"].as_str()
        {
            v["rule"] = format!("self.trim().size() == 0 || ({rule})").into();
        }
        let Some(node) = schema_at(root, at) else {
            continue;
        };
        match node.as_object_mut().map(|o| {
            o.entry("x-kubernetes-validations")
                .or_insert_with(|| serde_json::json!([]))
        }) {
            Some(serde_json::Value::Array(list)) => list.push(v),
            _ => tracing::error!(at, "CRD schema has no object for a rule"),
        }
    }
    for at in NOT_EMPTY {
        let Some(node) = schema_at(root, at).and_then(|n| n.as_object_mut()) else {
            tracing::error!(at, "CRD schema has no string for a rule");
            continue;
        };
        let rule = serde_json::json!({
            "rule": "self.trim().size() > 0",
            "message": "must not be empty",
        });
        match node
            .entry("x-kubernetes-validations")
            .or_insert_with(|| serde_json::json!([]))
        {
            serde_json::Value::Array(list) => list.insert(0, rule),
            _ => tracing::error!(at, "CRD schema has no list of rules"),
        }
    }
    for (at, bound, max) in BOUNDS {
        if let Some(node) = schema_at(root, at).and_then(|n| n.as_object_mut()) {
            node.insert((*bound).into(), (*max).into());
        }
    }
}

/// The schema node at a rule's place (`spec.nodePools[]` a list's items, `labels{}` a map's
/// values; `` the root).
fn schema_at<'a>(root: &'a mut serde_json::Value, at: &str) -> Option<&'a mut serde_json::Value> {
    let mut node = root;
    if at.is_empty() {
        return Some(node);
    }
    for part in at.split('.') {
        let (name, inner) = match (part.strip_suffix("[]"), part.strip_suffix("{}")) {
            (Some(n), _) => (n, Some("items")),
            (_, Some(n)) => (n, Some("additionalProperties")),
            _ => (part, None),
        };
        node = node.get_mut("properties")?.get_mut(name)?;
        if let Some(inner) = inner {
            node = node.get_mut(inner)?;
        }
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every place a rule or a bound names is in the schema: a misspelt one would be skipped.
    #[test]
    fn every_rule_and_bound_names_a_place_in_the_schema() {
        use kube::CustomResourceExt as _;
        let crd = crate::resource::Cluster::crd();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        let mut root = serde_json::to_value(schema).expect("json");
        let places = RULES
            .iter()
            .map(|r| r.at)
            .chain(NOT_EMPTY.iter().copied())
            .chain(URLS.iter().map(|(at, _)| *at))
            .chain(BOUNDS.iter().map(|(at, _, _)| *at))
            .chain([
                "spec.kubernetesVersion",
                "spec.apiEndpoint.dnsName",
                "spec.sshPublicKey",
            ]);
        let missing: Vec<&str> = places
            .filter(|at| schema_at(&mut root, at).is_none())
            .collect();
        assert!(missing.is_empty(), "{missing:?}");
    }
}
