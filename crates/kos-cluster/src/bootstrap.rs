//! The hook servers get their user_data from. The bootstrap crate implements it with kubeadm and
//! cloud-init; [`MarkerBootstrap`] is the minimal implementation used until then and in engine tests.

use std::collections::BTreeMap;

use secrecy::SecretString;

use crate::apply::CcmCredential;

/// What a node's bootstrap needs to know, known before the server is created.
#[derive(Debug, Clone)]
pub struct NodeContext {
    pub cluster: String,
    /// The server's logical id (`cp-0`, `pool-workers-2`).
    pub logical_id: String,
    pub role: NodeRole,
    /// The API endpoint address (the pre-allocated floating IP, or the private VIP/IP): known before
    /// any server boots, so every node's bootstrap is complete at create time.
    pub api_address: String,
    pub labels: BTreeMap<String, String>,
    /// `key=value:Effect` or `key:Effect`.
    pub taints: Vec<String>,
    /// The nodes' subnet (cloud id): cloud.conf's `subnet-id`, where the CCM puts LB members.
    pub subnet_id: Option<String>,
    /// The CCM's application credential: its id once that node is done (the first control plane waits
    /// for it), and its secret only when this run created it (Keystone shows it once; later runs use
    /// the caller's stored copy).
    pub ccm_credential_id: Option<String>,
    pub ccm_credential_secret: Option<SecretString>,
}

/// Whether a cluster already exists for the spec's control planes: it decides which new control plane,
/// if any, runs `kubeadm init`. Decided from what the cloud and the cluster show (kos-lifecycle), never
/// from a server's name: after init all control planes are equal, and a second init is a second cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formation {
    /// Nothing shows a cluster: the spec's first control plane (`cp-0`) initializes one.
    Fresh,
    /// A cluster exists: every new control plane joins it.
    Formed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRole {
    /// The one control plane of a fresh cluster that runs `kubeadm init`.
    InitControlPlane,
    JoinControlPlane,
    Worker {
        pool: String,
    },
}

#[derive(Debug, thiserror::Error)]
#[error("cannot render the bootstrap of {node}")]
pub struct BootstrapError {
    pub node: String,
    /// Why: the implementation's own typed error (never holding a secret).
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl BootstrapError {
    pub fn new(
        node: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            node: node.into(),
            source: source.into(),
        }
    }

    /// The cause and its own causes, `: ` between them: what a node's failure says.
    #[must_use]
    pub fn reason(&self) -> String {
        let mut out = self.source.to_string();
        let mut cur = self.source.source();
        while let Some(s) = cur {
            out.push_str(": ");
            out.push_str(&s.to_string());
            cur = s.source();
        }
        out
    }
}

/// Renders a node's user_data (raw bytes; the compute facade base64-encodes and size-checks them).
pub trait Bootstrap: Send + Sync {
    /// What the server gets: the bytes leave this machine in the create request that follows.
    fn user_data(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError>;

    /// The same rendering as [`Bootstrap::user_data`], only to check it (size, inputs) before
    /// anything is created: nothing leaves this machine, so an implementation that records that
    /// its secrets were handed out must not record it here.
    fn rehearse(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError>;

    /// Keeps the CCM's application credential, called the moment Keystone has returned it and
    /// before any node that needs it starts: Keystone shows the secret once, and a run killed after
    /// this must not have lost it.
    ///
    /// # Errors
    /// It could not be kept: the node fails, and nothing that needs the credential is created.
    fn keep_ccm_credential(&self, credential: &CcmCredential) -> Result<(), BootstrapError>;
}

/// A valid cloud-config that only writes a marker file naming the node: enough to prove the wiring.
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkerBootstrap;

impl Bootstrap for MarkerBootstrap {
    /// Its nodes carry no cloud.conf: there is nothing to keep the secret for.
    fn keep_ccm_credential(&self, _: &CcmCredential) -> Result<(), BootstrapError> {
        Ok(())
    }

    fn rehearse(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        self.user_data(node)
    }

    fn user_data(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        let role = match &node.role {
            NodeRole::InitControlPlane => "init-control-plane".to_owned(),
            NodeRole::JoinControlPlane => "join-control-plane".to_owned(),
            NodeRole::Worker { pool } => format!("worker/{pool}"),
        };
        Ok(format!(
            "#cloud-config\nwrite_files:\n  - path: /var/lib/kos/node\n    permissions: '0644'\n    content: |\n      cluster: {}\n      node: {}\n      role: {role}\n      api: {}\n",
            node.cluster, node.logical_id, node.api_address
        )
        .into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_a_cloud_config() {
        let ctx = NodeContext {
            cluster: "demo".into(),
            logical_id: "cp-0".into(),
            role: NodeRole::InitControlPlane,
            api_address: "172.24.4.10".into(),
            labels: BTreeMap::new(),
            taints: vec![],
            subnet_id: None,
            ccm_credential_id: None,
            ccm_credential_secret: None,
        };
        let ud =
            String::from_utf8(MarkerBootstrap.user_data(&ctx).expect("renders")).expect("utf8");
        assert!(ud.starts_with("#cloud-config\n"));
        assert!(ud.contains("node: cp-0"));
    }
}
