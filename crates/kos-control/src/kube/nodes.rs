//! The cluster's Nodes, as far as "is the cluster up" goes: Ready, initialised by the cloud
//! controller, and since when a node is not Ready.

use serde_json::Value;

use super::{Kube, KubeError};

/// The taint nodes carry until the cloud controller manager initialised them.
pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A node as far as "is the cluster up" goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub name: String,
    pub ready: bool,
    pub uninitialized: bool,
    /// When its Ready condition last changed (RFC 3339), while it is not True.
    pub not_ready_since: Option<String>,
    /// Its Ready condition's status (`True`, `False`, `Unknown`), if it has one.
    pub ready_status: Option<String>,
}

impl Kube {
    /// Every Node of the cluster.
    pub async fn nodes(&self) -> Result<Vec<NodeStatus>, KubeError> {
        let list = self.get("/api/v1/nodes").await?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(node_status)
            .collect())
    }
}

fn node_status(n: &Value) -> NodeStatus {
    let conditions = || n["status"]["conditions"].as_array().into_iter().flatten();
    NodeStatus {
        name: n["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        ready: conditions().any(|c| c["type"] == "Ready" && c["status"] == "True"),
        uninitialized: n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == UNINITIALIZED),
        not_ready_since: conditions()
            .find(|c| c["type"] == "Ready" && c["status"] != "True")
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(str::to_owned),
        ready_status: conditions()
            .find(|c| c["type"] == "Ready")
            .and_then(|c| c["status"].as_str())
            .map(str::to_owned),
    }
}
