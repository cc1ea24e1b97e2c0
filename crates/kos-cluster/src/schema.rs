//! The cluster document's `spec` as types with a JSON schema: what kos-operator's
//! `clusters.kos.dev` CustomResourceDefinition serves, so `kubectl apply` refuses a misspelt field,
//! a wrong type or an out-of-range count before kos sees it.
//!
//! The rules live in the reader (`validate`): these types only describe the shape, with the bounds
//! and choices a schema can say. Every run still reads the document through [`crate::load`], whose
//! diagnostics are the ones users get. Values the reader takes in more than one form (an image by
//! name or by tags, a taint as text or as a mapping, an addon by name or as `{kos: {image}}`) are
//! left to the reader (`x-kubernetes-preserve-unknown-fields`).
//!
//! The tests in `tests/schema.rs` keep the two telling one story: every object the reader reads
//! has exactly the fields the schema lists, and every example is valid under both.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// `spec` of a `kos.dev/v1alpha1` `Cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// A Kubernetes release kos supports, `1.36.4` (default: the newest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    pub network: Network,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<ApiEndpoint>,
    pub control_plane: ControlPlane,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pools: Option<Vec<NodePool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<Addons>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_load_balancers: Option<ServiceLoadBalancers>,
    /// An OpenSSH public key (the `.pub` file) for the nodes' default user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirrors: Option<Mirrors>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Proxy>,
}

/// The nodes' network: `create` or `existing`, exactly one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Network {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<CreateNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing: Option<ExistingNetwork>,
    /// The network floating IPs come from (found when the cloud has exactly one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_network: Option<String>,
    #[serde(rename = "podCIDR", default, skip_serializing_if = "Option::is_none")]
    pub pod_cidr: Option<String>,
    #[serde(
        rename = "serviceCIDR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_cidr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<Ssh>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateNetwork {
    /// The node subnet kos makes, an IPv4 CIDR.
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_servers: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExistingNetwork {
    /// A network's name or id.
    pub network: String,
    pub subnet: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ssh {
    #[serde(
        rename = "allowedCIDRs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_cidrs: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiEndpoint {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<EndpointType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    #[serde(
        rename = "allowedCIDRs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_cidrs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<LbProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EndpointType {
    #[serde(rename = "loadBalancer")]
    LoadBalancer,
    #[serde(rename = "floatingIP")]
    FloatingIp,
}

/// An Octavia provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LbProvider {
    Amphora,
    Ovn,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlPlane {
    /// 1, 3 or 5 (etcd members).
    #[schemars(schema_with = "control_plane_count")]
    pub count: u32,
    pub flavor: String,
    #[schemars(schema_with = "image")]
    pub image: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_volume: Option<BootVolume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zones: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_group_policy: Option<ServerGroupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1))]
    pub max_surge: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePool {
    #[schemars(length(min = 1, max = 20))]
    pub name: String,
    #[schemars(range(max = 500))]
    pub count: u32,
    pub flavor: String,
    #[schemars(schema_with = "image")]
    pub image: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_volume: Option<BootVolume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zones: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "taints")]
    pub taints: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_group_policy: Option<ServerGroupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 500))]
    pub max_unavailable: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 500))]
    pub max_surge: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
}

/// The bounds the cluster-autoscaler scales a pool within (through kos-operator); `count` is the
/// pool's current target size, within them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Autoscaling {
    /// The fewest nodes the autoscaler leaves the pool.
    #[schemars(range(max = 500))]
    pub min: u32,
    /// The most nodes the autoscaler gives the pool, at least 1.
    #[schemars(range(max = 500))]
    pub max: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootVolume {
    #[serde(rename = "sizeGB")]
    #[schemars(range(min = 10, max = 2048))]
    pub size_gb: u32,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ServerGroupPolicy {
    AntiAffinity,
    SoftAntiAffinity,
    Affinity,
    None,
}

/// When a node counts as unhealthy, and how many may be replaced at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheck {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_conditions: Option<Vec<UnhealthyCondition>>,
    /// A duration with its unit (`10m`, `0` to switch it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_startup_timeout: Option<String>,
    /// A number of nodes (`2`) or a percentage (`40%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_unhealthy: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnhealthyCondition {
    #[serde(rename = "type")]
    pub condition: String,
    pub status: ConditionStatus,
    pub timeout: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Addons {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<Cni>,
    /// `upstream`, or `{kos: {image: <reference>}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "addon")]
    pub ccm: Option<serde_json::Value>,
    /// `cinder`, `none`, or `{kos: {image: <reference>}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "addon")]
    pub csi: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni_manifest: Option<CniManifest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 7, max = 365))]
    pub credential_lifetime_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_access_rules: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_availability_zone: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Cni {
    Calico,
    Cilium,
    Flannel,
    KubeRouter,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CniManifest {
    /// An https:// URL.
    pub url: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceLoadBalancers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<LbProvider>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mirrors {
    /// Registry host → mirror URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registries: Option<BTreeMap<String, String>>,
    /// PEM certificates of the mirrors' CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<Packages>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Packages {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_security: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Proxy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_proxy: Option<Vec<String>>,
}

fn control_plane_count(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "1, 3 or 5: the etcd members.",
        "type": "integer",
        "enum": [1, 3, 5],
    })
}

/// Any value: the reader checks its form and says what is wrong with it.
fn any(description: &str) -> Schema {
    json_schema!({
        "description": description,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn image(_: &mut SchemaGenerator) -> Schema {
    any("An image's name or id, or `{tags: [...]}` selecting exactly one image.")
}

fn addon(_: &mut SchemaGenerator) -> Schema {
    any("A named choice, or `{kos: {image: <reference>}}` for kos's own component.")
}

fn taints(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "description": "`key=value:Effect`, or `{key, value, effect}`.",
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    })
}
