//! The `clusters.kos.dev` resource: the cluster document `kos up` reads, with the cloud credential
//! named as Cluster API's OpenStack provider names it, and the status the operator reports.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod rules;

/// The finalizer that keeps a Cluster until its cloud resources are gone.
pub const FINALIZER: &str = "kos.dev/cluster";
/// A Cluster annotated `kos.dev/orphan: "true"` is let go when deleted, its cloud resources left
/// running (`kos adopt` takes it back to the CLI so).
pub const ORPHAN: &str = "kos.dev/orphan";

/// A cluster kos makes and keeps: `spec` is a cluster document's `spec` (as `kos up -f` reads
/// it) and `identityRef`.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kos.dev",
    version = "v1alpha1",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "kcl",
    category = "kos",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.kubernetesVersion"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The Secret (in the Cluster's namespace) whose `clouds.yaml` holds the cloud's credential,
    /// and which cloud of it: Cluster API's OpenStack provider's `identityRef`.
    pub identity_ref: IdentityRef,
    /// Tags put on every cloud object of the cluster besides kos's own: a cluster document's
    /// `metadata.tags` (Cluster API's OpenStackCluster names them `tags` in its spec too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(flatten)]
    pub cluster: kos_cluster::schema::Spec,
}

/// Cluster API's OpenStack `identityRef`: a Secret with a `clouds.yaml` key (and `cacert`, the
/// cloud's CA, when its clouds.yaml names one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityRef {
    /// The Secret's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The cloud's entry in `clouds.yaml`.
    #[schemars(length(min = 1))]
    pub cloud_name: String,
}

/// What the operator last found and did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The generation of the spec the conditions are about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `Degraded`, as Kubernetes conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The Kubernetes API's address (`https://host:6443`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The version every node runs, once the rollout is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Each node as the last run followed it.
    #[serde(default)]
    pub nodes: Vec<NodeStatus>,
    /// What each group's health check (`cp`, each pool) found in the last turn that judged the
    /// nodes, as a MachineHealthCheck's status counts it.
    #[serde(default)]
    pub health: Vec<GroupHealthStatus>,
}

/// One group's health: how many nodes, how many healthy, which are not and why, and whether the
/// unhealthy may be replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupHealthStatus {
    /// `cp` or a pool's name.
    pub group: String,
    pub expected_nodes: u32,
    pub healthy_nodes: u32,
    /// False while more than `maxUnhealthy` are unhealthy or not started, or the check is off.
    pub remediation_allowed: bool,
    /// Why remediation is not allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub unhealthy: Vec<UnhealthyNodeStatus>,
    /// Nodes not healthy yet inside their check's timeouts.
    #[serde(default)]
    pub pending: Vec<String>,
}

/// A node found unhealthy, and what was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNodeStatus {
    pub name: String,
    pub reason: String,
}

/// A `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A node of the cluster and where its bootstrap is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub name: String,
    /// `Pending`, `Booting`, `Joined`, `Ready`, `Failed`.
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The CustomResourceDefinition, as `kos-operator crd` prints it.
///
/// # Errors
/// Never in practice: serialising a CRD built from types.
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&crd())
}

/// The CustomResourceDefinition: the schema kube-derive generates from the types, with `kos
/// plan`'s rules and their bounds added where they apply ([`rules`]).
#[must_use]
pub fn crd() -> CustomResourceDefinition {
    use kube::CustomResourceExt as _;
    let mut crd = Cluster::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let Ok(mut root) = serde_json::to_value(&*schema) else {
            continue;
        };
        rules::add(&mut root);
        match serde_json::from_value(root) {
            Ok(s) => *schema = s,
            Err(e) => tracing::error!(error = %e, "CRD schema with rules does not read back"),
        }
    }
    crd
}
