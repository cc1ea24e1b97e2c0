//! Just enough of the Kubernetes API for `kos up` to check a cluster nobody logs into: `/readyz`, the
//! node list, and creating an object. It authenticates with an admin client certificate signed offline
//! by the cluster CA, and trusts that CA only.

use std::time::Duration;

use kos_bootstrap::pki::{self, CaKind};
use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use serde_json::Value;
use time::OffsetDateTime;

/// The taint nodes carry until the cloud controller manager initialised them.
pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

pub struct Kube {
    client: reqwest::Client,
    base: String,
}

/// A node as far as "is the cluster up" goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub name: String,
    pub ready: bool,
    pub uninitialized: bool,
}

impl Kube {
    pub fn new(
        endpoint: &ApiEndpoint,
        version: &KubeVersion,
        secrets: &ClusterSecrets,
    ) -> Result<Self, String> {
        let (cert, key) = pki::sign_client(
            &mut rand::rng(),
            &secrets.ca,
            CaKind::Cluster,
            kos_bootstrap::kubeconfig::ADMIN_CN,
            &[version.admin_group()],
            OffsetDateTime::now_utc(),
        )
        .map_err(|e| e.to_string())?;
        let identity = reqwest::Identity::from_pem(format!("{cert}{}", key.expose()).as_bytes())
            .map_err(|e| format!("client certificate: {e}"))?;
        let ca = reqwest::Certificate::from_pem(secrets.ca.cert_pem.as_bytes())
            .map_err(|e| format!("cluster CA: {e}"))?;
        let client = reqwest::Client::builder()
            .tls_certs_only([ca])
            .identity(identity)
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            base: format!("https://{endpoint}"),
        })
    }

    /// `Ok(true)` when `/readyz` says ok; `Err` when the API cannot be reached at all.
    pub async fn readyz(&self) -> Result<bool, String> {
        let r = self
            .client
            .get(format!("{}/readyz", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(r.status().is_success())
    }

    pub async fn nodes(&self) -> Result<Vec<NodeStatus>, String> {
        let r = self
            .client
            .get(format!("{}/api/v1/nodes", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("listing nodes: HTTP {}", r.status()));
        }
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        Ok(v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| NodeStatus {
                name: n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                ready: n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
                uninitialized: n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["key"] == UNINITIALIZED),
            })
            .collect())
    }

    /// POSTs a YAML manifest to `path` (e.g. `/api/v1/namespaces/kube-system/secrets`); one that
    /// already exists is fine.
    pub async fn create(&self, path: &str, yaml: &str) -> Result<(), String> {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("Content-Type", "application/yaml")
            .body(yaml.to_owned())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match r.status().as_u16() {
            200..=299 | 409 => Ok(()),
            s => Err(format!("HTTP {s}")),
        }
    }
}
