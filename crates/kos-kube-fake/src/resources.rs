//! The resource types the fake serves: where each lives in the URL space, its kind, its scope and
//! the few per-type rules the real API server applies (status subresource, name format).
//!
//! The store itself is generic (objects are `serde_json::Value`); everything type-specific is in
//! this table, so serving another type is one more [`ResourceType`]. Types made by a
//! `CustomResourceDefinition` carry what the CRD says of them ([`Custom`]).

use kube::Resource;
use serde_json::Value;

/// How the API server validates `metadata.name` of a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain: lower-case alphanumerics, `-` and `.`, at most 253 (most types).
    Subdomain,
    /// RFC 1035 label: lower-case alphanumerics and `-`, starting with a letter, at most 63
    /// (Services, Namespaces).
    Label,
    /// Path segment rules only: no `/`, `%`, not `.` or `..` (Events).
    PathSegment,
}

/// One served resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, `""` for the core group.
    pub group: String,
    pub version: String,
    /// Lower-case plural, as in the URL (`nodes`).
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Has a `/status` subresource: the main resource ignores status changes and `/status`
    /// ignores everything else.
    pub status_subresource: bool,
    /// The server clears `status` on create (Services, Pods); Nodes keep the kubelet's status.
    pub reset_status_on_create: bool,
    pub name_rule: NameRule,
    /// Lower-case singular (`node`), as discovery gives it.
    pub singular: String,
    /// What `kubectl get svc` resolves (`svc`), from discovery.
    pub short_names: Vec<String>,
    /// `all` for what `kubectl get all` lists.
    pub categories: Vec<String>,
    /// `None` for the built-in types; what the CRD declares for a custom resource.
    pub custom: Option<Box<Custom>>,
}

/// What a `CustomResourceDefinition` says of one served version of its resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Custom {
    /// The CRD's name (`<plural>.<group>`).
    pub crd: String,
    /// The version's `schema.openAPIV3Schema` (`Null` when it declares none).
    pub schema: Value,
    /// The version's `additionalPrinterColumns`.
    pub columns: Vec<PrinterColumn>,
    /// False once the CRD is gone or no longer serves this version: the type then answers 404,
    /// as the real server's, and its place in the table is kept for when the CRD comes back.
    pub served: bool,
}

/// One of a CRD's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// A simple JSONPath (`.spec.replicas`), as the CRD validation allows.
    pub json_path: String,
}

impl ResourceType {
    pub fn new(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
    ) -> ResourceType {
        ResourceType {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            kind: kind.to_owned(),
            namespaced,
            status_subresource: false,
            reset_status_on_create: false,
            name_rule: NameRule::Subdomain,
            singular: kind.to_lowercase(),
            short_names: Vec::new(),
            categories: Vec::new(),
            custom: None,
        }
    }

    /// The type of a k8s-openapi (or `kube::CustomResource`) struct.
    pub fn of<K: Resource<DynamicType = ()>>(namespaced: bool) -> ResourceType {
        ResourceType::new(
            &K::group(&()),
            &K::version(&()),
            &K::plural(&()),
            &K::kind(&()),
            namespaced,
        )
    }

    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    #[must_use]
    fn resetting_status(mut self) -> Self {
        self.reset_status_on_create = true;
        self
    }

    #[must_use]
    fn names(mut self, rule: NameRule) -> Self {
        self.name_rule = rule;
        self
    }

    #[must_use]
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Puts the type in `kubectl get all` (the `all` category).
    #[must_use]
    pub fn in_all(mut self) -> Self {
        self.categories = vec!["all".to_owned()];
        self
    }

    /// Answers requests: always for built-in types, while its CRD serves it for custom ones.
    pub fn is_served(&self) -> bool {
        self.custom.as_ref().is_none_or(|c| c.served)
    }

    /// `v1` or `group/version`, as in an object's `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `nodes` or `leases.coordination.k8s.io`, as in error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The types every fake serves: what a cloud-controller-manager reads and writes, the usual
/// neighbours tests create, and what a cluster's addon manifests hold (workloads, RBAC, storage), so
/// the simulated clusters (kos-guest) can `kubectl apply` them.
pub fn builtin() -> Vec<ResourceType> {
    use k8s_openapi::api::{
        apps, certificates, coordination, core, discovery, events, policy, rbac, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    // Short names and categories as kube-apiserver's discovery lists them.
    vec![
        ResourceType::of::<core::v1::Node>(false)
            .with_status()
            .with_short_names(&["no"]),
        ResourceType::of::<core::v1::Namespace>(false)
            .with_status()
            .names(NameRule::Label)
            .with_short_names(&["ns"]),
        ResourceType::of::<core::v1::Service>(true)
            .with_status()
            .resetting_status()
            .names(NameRule::Label)
            .with_short_names(&["svc"])
            .in_all(),
        ResourceType::of::<core::v1::Pod>(true)
            .with_status()
            .resetting_status()
            .with_short_names(&["po"])
            .in_all(),
        ResourceType::of::<core::v1::Event>(true)
            .names(NameRule::PathSegment)
            .with_short_names(&["ev"]),
        ResourceType::of::<core::v1::Secret>(true),
        ResourceType::of::<core::v1::ConfigMap>(true).with_short_names(&["cm"]),
        ResourceType::of::<core::v1::Endpoints>(true).with_short_names(&["ep"]),
        ResourceType::of::<core::v1::ServiceAccount>(true).with_short_names(&["sa"]),
        ResourceType::of::<events::v1::Event>(true)
            .names(NameRule::PathSegment)
            .with_short_names(&["ev"]),
        ResourceType::of::<coordination::v1::Lease>(true),
        ResourceType::of::<policy::v1::PodDisruptionBudget>(true)
            .with_status()
            .with_short_names(&["pdb"]),
        ResourceType::of::<discovery::v1::EndpointSlice>(true),
        ResourceType::of::<apps::v1::DaemonSet>(true)
            .with_status()
            .with_short_names(&["ds"])
            .in_all(),
        ResourceType::of::<apps::v1::Deployment>(true)
            .with_status()
            .with_short_names(&["deploy"])
            .in_all(),
        ResourceType::of::<apps::v1::ReplicaSet>(true)
            .with_status()
            .with_short_names(&["rs"])
            .in_all(),
        // RBAC names are only path segments (`system:cloud-controller-manager`), as the real
        // server's rbac validation (ValidatePathSegmentName) allows.
        ResourceType::of::<rbac::v1::ClusterRole>(false).names(NameRule::PathSegment),
        ResourceType::of::<rbac::v1::ClusterRoleBinding>(false).names(NameRule::PathSegment),
        ResourceType::of::<rbac::v1::Role>(true).names(NameRule::PathSegment),
        ResourceType::of::<rbac::v1::RoleBinding>(true).names(NameRule::PathSegment),
        // Storage: what a CSI driver's sidecars and the kubelet's volume manager read and write.
        // Status is the controllers' (the PV binder, external-attacher), cleared on create as
        // the registry strategies do.
        ResourceType::of::<core::v1::PersistentVolume>(false)
            .with_status()
            .resetting_status()
            .with_short_names(&["pv"]),
        ResourceType::of::<core::v1::PersistentVolumeClaim>(true)
            .with_status()
            .resetting_status()
            .with_short_names(&["pvc"]),
        ResourceType::of::<storage::v1::StorageClass>(false).with_short_names(&["sc"]),
        ResourceType::of::<storage::v1::CSIDriver>(false),
        ResourceType::of::<storage::v1::CSINode>(false),
        ResourceType::of::<storage::v1::VolumeAttachment>(false)
            .with_status()
            .resetting_status(),
        // The kubelet's TLS bootstrap; `/approval` besides `/status` (module `csr`).
        ResourceType::of::<certificates::v1::CertificateSigningRequest>(false)
            .with_status()
            .with_short_names(&["csr"]),
        ResourceType::of::<apiextensions::CustomResourceDefinition>(false)
            .with_status()
            .with_short_names(&["crd", "crds"]),
    ]
}
