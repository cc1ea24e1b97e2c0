//! Why a node reconcile failed. Every variant names the node; none carries a secret (cloud errors
//! are already redacted by kos-cloud).

use kos_cloud::CloudError;

use super::addresses::ProvidedIpError;
use super::provider_id::ProviderIdError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No server for a node that has no providerID: none is named like the node.
    #[error("node {node}: no server is named {node:?} (and the node has no providerID)")]
    NoServerNamed { node: String },
    /// The node's providerID names a server that does not exist.
    #[error("node {node}: server {server_id} of providerID {provider_id:?} does not exist")]
    ServerGone {
        node: String,
        server_id: String,
        provider_id: String,
    },
    #[error("node {node}: several servers are named {node:?} ({count}): set the node's providerID")]
    ServersNamedAlike { node: String, count: usize },
    #[error("node {node}")]
    ProviderId {
        node: String,
        #[source]
        source: ProviderIdError,
    },
    #[error(
        "node {node}: providerID {provider_id:?} is in region {theirs:?}, this CCM serves {ours:?}"
    )]
    RegionMismatch {
        node: String,
        provider_id: String,
        theirs: String,
        ours: String,
    },
    #[error("node {node}: annotation alpha.kubernetes.io/provided-node-ip")]
    ProvidedNodeIp {
        node: String,
        #[source]
        source: ProvidedIpError,
    },
    #[error("node {node}: server {server_id} has no usable flavor name or id: {detail}")]
    InstanceType {
        node: String,
        server_id: String,
        detail: String,
    },
    #[error("node {node}: {what}")]
    Cloud {
        node: String,
        what: &'static str,
        #[source]
        source: CloudError,
    },
    #[error("node {node}: {what}")]
    Kube {
        node: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The label failures are counted under (one per variant).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NoServerNamed { .. } => "no_server_named",
            Error::ServerGone { .. } => "server_gone",
            Error::ServersNamedAlike { .. } => "servers_named_alike",
            Error::ProviderId { .. } => "provider_id",
            Error::RegionMismatch { .. } => "region_mismatch",
            Error::ProvidedNodeIp { .. } => "provided_node_ip",
            Error::InstanceType { .. } => "instance_type",
            Error::Cloud { .. } => "cloud",
            Error::Kube { .. } => "kube",
        }
    }

    /// A write lost an optimistic-concurrency race: retry at once with a fresh read.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
