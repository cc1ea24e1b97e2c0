//! The Kubernetes API calls kos-ccm makes, as RBAC sees them: what its ClusterRole and Role must
//! grant, and all they may grant. Each controller declares its own calls next to the code that
//! makes them (`node::API_CALLS`, `route::API_CALLS`, `leader::API_CALLS`,
//! `context::API_CALLS`); the Service controller's are here while its module is reworked.
//! [`CALLS`] is all of them.
//!
//! Two tests hold the manifest to it (crates/kos-ccm/tests/rbac.rs): the rendered ClusterRole and
//! Role grant exactly these calls, no verb less and none more; and kos-ccm run against
//! kos-kube-fake as its ServiceAccount, with that RBAC, makes no call outside this table and is
//! refused (403) when one rule is taken away.

/// One kind of request: verbs on a resource (`resource/subresource`) of an API group, cluster-wide
/// or in one namespace, optionally only on named objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiCall {
    /// Who makes it (for the reader).
    pub by: &'static str,
    pub verbs: &'static [&'static str],
    /// `""` is the core group.
    pub group: &'static str,
    pub resource: &'static str,
    pub scope: Scope,
    /// Restricted to these objects (never for `create`, `list` or `watch`, which RBAC cannot
    /// restrict by name); empty: any.
    pub names: &'static [&'static str],
}

/// Where a call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-scoped objects, or namespaced ones in any namespace: a ClusterRole.
    Cluster,
    /// The leader-election namespace (`--leader-elect-resource-namespace`, kube-system by
    /// default): a Role there.
    LeaderElection,
}

/// The Service controller (crate::service): Services and their status, the Nodes it balances
/// to, and the kube-system Namespace whose UID names the cluster in load-balancer tags.
pub const SERVICE_CALLS: &[ApiCall] = &[
    ApiCall {
        by: "service: the controller's list-watch; finalizer and annotations",
        verbs: &["list", "watch", "patch"],
        group: "",
        resource: "services",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "service: status.loadBalancer",
        verbs: &["patch"],
        group: "",
        resource: "services/status",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "service: the backends' watch",
        verbs: &["list", "watch"],
        group: "",
        resource: "nodes",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "service: the cluster's identity (cluster_id)",
        verbs: &["get"],
        group: "",
        resource: "namespaces",
        scope: Scope::Cluster,
        names: &["kube-system"],
    },
];

/// Every call of every controller.
pub fn calls() -> Vec<ApiCall> {
    [
        crate::node::API_CALLS,
        crate::route::API_CALLS,
        SERVICE_CALLS,
        crate::context::API_CALLS,
        crate::leader::API_CALLS,
    ]
    .concat()
}

/// The lease name kos-ccm campaigns on unless told otherwise (`--leader-elect-resource-name`).
pub const LEASE_NAME: &str = "cloud-controller-manager";
