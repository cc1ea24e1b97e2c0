//! The Kubernetes API calls kos-operator makes, as RBAC sees them: what its ClusterRole and Role
//! must grant, and all they may grant. The manifests (`crate::manifests`) are rendered from this
//! table, and tests/binary.rs runs the operator as its ServiceAccount with exactly that RBAC
//! against kos-kube-fake (which authorises as kube-apiserver does) and checks that every request it
//! made is in the table.

/// One kind of request: verbs on a resource (`resource/subresource`) of an API group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiCall {
    /// Who makes it, and why (for the reader and the manifest's comments).
    pub by: &'static str,
    pub verbs: &'static [&'static str],
    /// `""` is the core group.
    pub group: &'static str,
    pub resource: &'static str,
    pub scope: Scope,
    /// Restricted to these objects (never for `create`, `list` or `watch`); empty: any.
    pub names: &'static [&'static str],
}

/// Where a call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In any namespace (Clusters live in any): a ClusterRole.
    Cluster,
    /// The operator's own namespace (its leader-election Lease): a Role there.
    Own,
}

/// The Lease the replicas campaign on.
pub const LEASE_NAME: &str = "kos-operator";

/// Every call.
pub const CALLS: &[ApiCall] = &[
    ApiCall {
        by: "controller: the Clusters' list-watch; the finalizer added and removed (JSON patch); \
             autoscaler: the Cluster its client names read, a pool's count patched",
        verbs: &["get", "list", "watch", "patch"],
        group: "kos.dev",
        resource: "clusters",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "status: read before each write, written with a merge patch",
        verbs: &["get", "patch"],
        group: "kos.dev",
        resource: "clusters/status",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "owner references with blockOwnerDeletion on the Secrets it makes: the \
             OwnerReferencesPermissionEnforcement admission plugin (optional, on in OpenShift) \
             asks for update on the owner's finalizers",
        verbs: &["update"],
        group: "kos.dev",
        resource: "clusters/finalizers",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "identity: the identityRef Secret; store: `<cluster>-kos` and `<cluster>-kubeconfig` \
             read, made and replaced",
        verbs: &["get", "create", "update"],
        group: "",
        resource: "secrets",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "events: each step of a run (kube-runtime's Recorder creates, then patches a series)",
        verbs: &["create", "patch"],
        group: "events.k8s.io",
        resource: "events",
        scope: Scope::Cluster,
        names: &[],
    },
    ApiCall {
        by: "leader: take, renew, release",
        verbs: &["get", "patch"],
        group: "coordination.k8s.io",
        resource: "leases",
        scope: Scope::Own,
        names: &[LEASE_NAME],
    },
    ApiCall {
        by: "leader: the first campaign",
        verbs: &["create"],
        group: "coordination.k8s.io",
        resource: "leases",
        scope: Scope::Own,
        names: &[],
    },
];

/// The rules of one scope, as a Role or ClusterRole lists them (one rule per call).
#[must_use]
pub fn rules(scope: Scope) -> Vec<serde_json::Value> {
    CALLS
        .iter()
        .filter(|c| c.scope == scope)
        .map(|c| {
            let mut rule = serde_json::json!({
                "apiGroups": [c.group],
                "resources": [c.resource],
                "verbs": c.verbs,
            });
            if !c.names.is_empty() {
                rule["resourceNames"] = serde_json::json!(c.names);
            }
            rule
        })
        .collect()
}
