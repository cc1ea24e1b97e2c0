//! The Keystone access rules of the CCM's and CSI's application credential
//! (`addons.credentialAccessRules: true`): every request kos-ccm and kos-csi make, and no other.
//!
//! One list, [`CALLS`], read by the product (the credential `kos up` makes) and by the tests that
//! run kos-ccm's load-balancer reconcile and kos-csi's controller with exactly these rules. Each
//! entry is a request a kos-cloud facade sends for kos-ccm or kos-csi, its path relative to the
//! service's versioned endpoint as the facade writes it (`*` for an id); the rule's path is the
//! endpoint's own path followed by it, because keystonemiddleware matches the whole path the
//! service is asked for (`auth_token.BaseAuthProtocol.validate_allowed_request`, `_path_matches`).
//!
//! Off by default: a service whose keystonemiddleware lacks `[keystone_authtoken] service_type`
//! refuses every token of a credential with rules ("Token authorization failed", a 401), and no
//! API shows that setting. The upstream CCM and cinder-csi call other paths: the rules are kos-ccm's
//! and kos-csi's only.

use std::collections::BTreeMap;

use kos_cloud::identity::RuleTarget;
use kos_cloud::model::identity::AccessRule;
use kos_cloud::{ServiceKind, Session};

/// Who makes a call (for `kos plan` and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Caller {
    /// kos-ccm's Service load-balancer controller.
    CcmLoadBalancer,
    /// kos-ccm's node and node-lifecycle controllers.
    CcmNode,
    /// kos-csi's controller service.
    Csi,
}

/// One request kos-ccm or kos-csi makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub service: ServiceKind,
    pub method: &'static str,
    /// Relative to the versioned endpoint; `*` is one path segment (an id).
    pub path: &'static str,
    pub by: Caller,
}

const fn call(service: ServiceKind, method: &'static str, path: &'static str, by: Caller) -> Call {
    Call {
        service,
        method,
        path,
        by,
    }
}

use Caller::{CcmLoadBalancer as Lb, CcmNode as Node, Csi};
use ServiceKind::{
    BlockStorage as Cinder, Compute as Nova, LoadBalancer as Octavia, Network as Neutron,
};

/// Every request kos-ccm and kos-csi send through kos-cloud's facades. A call added to either
/// needs its line here (the end-to-end tests with these rules fail with a 401 otherwise).
pub const CALLS: &[Call] = &[
    // Nova: the node controllers find a node's server and its flavor; the CSI attaches volumes.
    // `*` is any one segment, so `servers/*` is also the list `servers/detail` (by name).
    call(Nova, "GET", "servers/*", Node), // get_server (the CSI's too); list_servers_named
    // list_flavors, for a flavor whose name is no label value (microversion 2.79 servers name
    // their flavor, so kos-ccm never gets one by id).
    call(Nova, "GET", "flavors/detail", Node),
    call(Nova, "POST", "servers/*/os-volume_attachments", Csi),
    call(Nova, "DELETE", "servers/*/os-volume_attachments/*", Csi),
    // Neutron. kos's cloud.conf names the floating network and the members' subnet, and no router
    // (kos-ccm's route controller does not run in a kos cluster).
    call(Neutron, "GET", "subnets", Lb), // the floating subnet by name (Service annotation)
    call(Neutron, "GET", "subnets/*", Lb), // the member subnet's CIDR
    call(Neutron, "GET", "ports", Node), // node addresses; LB members' ports
    call(Neutron, "PUT", "ports/*", Lb), // security groups
    call(Neutron, "PUT", "ports/*/tags", Lb),
    call(Neutron, "PUT", "ports/*/tags/*", Lb),
    call(Neutron, "GET", "security-groups", Lb),
    call(Neutron, "POST", "security-groups", Lb),
    call(Neutron, "DELETE", "security-groups/*", Lb),
    call(Neutron, "POST", "security-group-rules", Lb),
    call(Neutron, "DELETE", "security-group-rules/*", Lb),
    call(Neutron, "GET", "floatingips", Lb),
    call(Neutron, "POST", "floatingips", Lb),
    call(Neutron, "PUT", "floatingips/*", Lb), // associate, disassociate
    call(Neutron, "DELETE", "floatingips/*", Lb),
    // Octavia.
    call(Octavia, "GET", "lbaas/loadbalancers", Lb),
    call(Octavia, "POST", "lbaas/loadbalancers", Lb),
    call(Octavia, "PUT", "lbaas/loadbalancers/*", Lb),
    call(Octavia, "DELETE", "lbaas/loadbalancers/*", Lb),
    call(Octavia, "GET", "lbaas/listeners", Lb),
    call(Octavia, "POST", "lbaas/listeners", Lb),
    call(Octavia, "PUT", "lbaas/listeners/*", Lb),
    call(Octavia, "DELETE", "lbaas/listeners/*", Lb),
    call(Octavia, "GET", "lbaas/pools", Lb),
    call(Octavia, "POST", "lbaas/pools", Lb),
    call(Octavia, "PUT", "lbaas/pools/*", Lb),
    call(Octavia, "DELETE", "lbaas/pools/*", Lb),
    call(Octavia, "GET", "lbaas/pools/*/members", Lb),
    // The whole membership in one call; one member at a time only with
    // `provider-requires-serial-api-calls`, which kos's cloud.conf does not set.
    call(Octavia, "PUT", "lbaas/pools/*/members", Lb),
    call(Octavia, "GET", "lbaas/healthmonitors", Lb),
    call(Octavia, "POST", "lbaas/healthmonitors", Lb),
    call(Octavia, "PUT", "lbaas/healthmonitors/*", Lb),
    call(Octavia, "DELETE", "lbaas/healthmonitors/*", Lb),
    // Cinder: the CSI controller's volumes and snapshots (`volumes/*` is also `volumes/detail`).
    call(Cinder, "POST", "volumes", Csi),
    call(Cinder, "GET", "volumes/*", Csi),
    call(Cinder, "DELETE", "volumes/*", Csi),
    call(Cinder, "POST", "volumes/*/action", Csi), // extend
    call(Cinder, "POST", "snapshots", Csi),
    call(Cinder, "GET", "snapshots/*", Csi),
    call(Cinder, "DELETE", "snapshots/*", Csi),
];

/// The rules of `calls` for a cloud whose services are reached as `target` says: one per call and
/// catalog type of its service; none for a service the catalog lacks. Sorted, without duplicates.
#[must_use]
pub fn rules_of(
    calls: &[Call],
    target: impl Fn(ServiceKind) -> Option<RuleTarget>,
) -> Vec<AccessRule> {
    let mut targets: BTreeMap<ServiceKind, Option<RuleTarget>> = BTreeMap::new();
    let mut out = Vec::new();
    for c in calls {
        let Some(t) = targets
            .entry(c.service)
            .or_insert_with(|| target(c.service))
        else {
            continue;
        };
        for service in &t.types {
            out.push(AccessRule {
                service: service.clone(),
                method: c.method.to_owned(),
                path: format!("{}{}", t.prefix, c.path),
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The rules of [`CALLS`] for the cloud `session` is connected to (its catalog and endpoints).
pub async fn for_session(session: &Session) -> Vec<AccessRule> {
    rules_for(session, CALLS).await
}

/// The rules of `calls` for the cloud `session` is connected to.
pub async fn rules_for(session: &Session, calls: &[Call]) -> Vec<AccessRule> {
    let identity = session.identity();
    let mut targets = BTreeMap::new();
    for c in calls {
        if let std::collections::btree_map::Entry::Vacant(e) = targets.entry(c.service) {
            e.insert(identity.rule_target(c.service).await);
        }
    }
    rules_of(calls, |s| targets.get(&s).cloned().flatten())
}

/// How many calls each service has, for `kos plan` (the rules are one per call and catalog type).
#[must_use]
pub fn counts() -> BTreeMap<ServiceKind, usize> {
    let mut m = BTreeMap::new();
    for c in CALLS {
        *m.entry(c.service).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devstack(s: ServiceKind) -> Option<RuleTarget> {
        let (types, prefix): (&[&str], &str) = match s {
            Nova => (&["compute"], "/compute/v2.1/"),
            Neutron => (&["network"], "/network/v2.0/"),
            Octavia => (&["load-balancer"], "/load-balancer/v2/"),
            Cinder => (&["block-storage", "volumev3"], "/volume/v3/p1/"),
            _ => return None,
        };
        Some(RuleTarget {
            types: types.iter().map(|t| (*t).to_owned()).collect(),
            prefix: prefix.to_owned(),
        })
    }

    #[test]
    fn each_call_is_a_rule_per_catalog_type_under_the_endpoints_path() {
        let rules = rules_of(CALLS, devstack);
        let cinder = CALLS.iter().filter(|c| c.service == Cinder).count();
        assert_eq!(rules.len(), CALLS.len() + cinder, "Cinder under two types");
        assert!(rules.contains(&AccessRule {
            service: "compute".into(),
            method: "POST".into(),
            path: "/compute/v2.1/servers/*/os-volume_attachments".into(),
        }));
        for t in ["block-storage", "volumev3"] {
            assert!(rules.contains(&AccessRule {
                service: t.into(),
                method: "DELETE".into(),
                path: "/volume/v3/p1/volumes/*".into(),
            }));
        }
    }

    #[test]
    fn a_service_the_catalog_lacks_gets_no_rules() {
        let rules = rules_of(CALLS, |s| if s == Octavia { None } else { devstack(s) });
        assert!(rules.iter().all(|r| r.service != "load-balancer"));
        assert!(rules.iter().any(|r| r.service == "network"));
    }

    #[test]
    fn rules_fit_keystones_schema() {
        // keystone/application_credential/schema.py: path starts with '/', at most 225
        // characters; method one of six; service an id_string.
        for r in rules_of(CALLS, devstack) {
            assert!(r.path.starts_with('/') && r.path.len() <= 225, "{r:?}");
            assert!(
                ["DELETE", "GET", "HEAD", "PATCH", "POST", "PUT"].contains(&r.method.as_str()),
                "{r:?}"
            );
            assert!(
                r.service
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "{r:?}"
            );
        }
        let no_dupes: std::collections::BTreeSet<_> = CALLS
            .iter()
            .map(|c| (c.service, c.method, c.path))
            .collect();
        assert_eq!(no_dupes.len(), CALLS.len(), "a call is listed twice");
    }
}
