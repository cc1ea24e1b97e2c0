//! What a roll does through the cluster's API besides drains: the Nodes and which are not Ready
//! (for `--repair`), kubeadm-config moved before control planes join ([`kos_lifecycle::kubeadm_config`]),
//! and the cloud controller's and CSI's images moved to the cluster's minor
//! ([`kos_lifecycle::addons`]).

use kos_cluster::spec::ConditionStatus;
use kos_lifecycle::kubeadm_config::{self, Wanted};
use kos_lifecycle::roll::{NodeHealth, Unhealthy};
use serde_json::{Value, json};

use crate::kube::{Kube, KubeError};

/// Every Node's name, and those whose Ready condition is not True, since when (one that does not
/// say since when is left out of those).
///
/// # Errors
/// The API did not answer or refused the list.
pub async fn unhealthy(kube: &Kube) -> Result<NodeHealth, KubeError> {
    let nodes = kube.nodes().await?;
    let names = nodes.iter().map(|n| n.name.clone()).collect();
    let unhealthy = nodes
        .into_iter()
        .filter(|n| !n.ready)
        .filter_map(|n| {
            let since = n.not_ready_since.as_deref().and_then(|t| {
                time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
            })?;
            // A Ready condition that is missing is the kubelet never reporting: Unknown.
            let status = match n.ready_status.as_deref() {
                Some("False") => ConditionStatus::False,
                _ => ConditionStatus::Unknown,
            };
            Some(Unhealthy {
                node: n.name,
                status,
                since_unix: since.unix_timestamp(),
            })
        })
        .collect();
    Ok(NodeHealth { names, unhealthy })
}

/// The images the cloud controller and the CSI driver run at one Kubernetes minor.
#[derive(Debug, Clone)]
pub struct AddonImages {
    pinned: [String; 2],
}

impl AddonImages {
    /// The pinned images of `minor`; `None` when the pins table has no row for it.
    ///
    /// # Errors
    /// The built-in pins table cannot be read.
    pub fn for_minor(minor: u32) -> Result<Option<AddonImages>, kos_bootstrap::Error> {
        let pins = kos_bootstrap::addons::Pins::builtin()?;
        Ok(pins.images_for(minor).map(|images| AddonImages {
            pinned: [
                images.openstack_cloud_controller_manager.clone(),
                images.cinder_csi_plugin.clone(),
            ],
        }))
    }

    /// Every Deployment and DaemonSet of kube-system running an older release of these images gets
    /// the pinned one (its controller rolls the pods); the ones moved, as `kind/name`.
    ///
    /// # Errors
    /// A list or a patch failed; the workloads before it were moved.
    pub async fn follow(&self, kube: &Kube) -> Result<Vec<String>, KubeError> {
        let pinned = [self.pinned[0].as_str(), self.pinned[1].as_str()];
        let mut moved = Vec::new();
        for kind in ["deployments", "daemonsets"] {
            let path = format!("/apis/apps/v1/namespaces/kube-system/{kind}");
            let list = kube.get(&path).await?;
            for w in list["items"].as_array().into_iter().flatten() {
                let name = w["metadata"]["name"].as_str().unwrap_or_default();
                let changes: Vec<Value> = w["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|ct| {
                        let to = kos_lifecycle::addons::retag(ct["image"].as_str()?, &pinned)?;
                        Some(json!({"name": ct["name"], "image": to}))
                    })
                    .collect();
                if changes.is_empty() {
                    continue;
                }
                // A strategic merge patch merges containers by name.
                kube.strategic_patch(
                    &format!("{path}/{name}"),
                    &json!({"spec": {"template": {"spec": {"containers": changes}}}}),
                )
                .await?;
                moved.push(format!("{kind}/{name}"));
            }
        }
        Ok(moved)
    }
}

/// What kubeadm-config must say before a control plane joins.
#[derive(Debug, Clone, Default)]
pub struct ConfigMove {
    /// The spec's release, when a control plane was made for another.
    pub version: Option<String>,
    /// The certificate names, when a control plane was made with another DNS name.
    pub sans: Option<Vec<String>>,
    /// The API server's encryption flag and volume, when a control plane was made before kos
    /// encrypted Secrets (kubeadm-config of such a cluster lacks them).
    pub encryption: bool,
}

/// Why kubeadm-config could not be moved.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMoveError {
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("kubeadm-config has no ClusterConfiguration")]
    NoClusterConfiguration,
    #[error(transparent)]
    Config(#[from] kubeadm_config::Error),
}

const KUBEADM_CONFIG: &str = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config";

impl ConfigMove {
    /// The ClusterConfiguration in `kube-system/kubeadm-config` made to say it. `true` when it
    /// was changed, `false` when it said it already.
    ///
    /// # Errors
    /// The API failed, or kubeadm-config cannot be read.
    pub async fn apply(&self, kube: &Kube) -> Result<bool, ConfigMoveError> {
        let cm = kube.get(KUBEADM_CONFIG).await?;
        let text = cm["data"]["ClusterConfiguration"]
            .as_str()
            .ok_or(ConfigMoveError::NoClusterConfiguration)?;
        let wanted = Wanted {
            version: self.version.as_deref(),
            cert_sans: self.sans.as_deref(),
            encryption: self.encryption,
        };
        let Some(updated) = kubeadm_config::updated(text, wanted)? else {
            return Ok(false);
        };
        kube.merge_patch(
            KUBEADM_CONFIG,
            &json!({"data": {"ClusterConfiguration": updated}}),
        )
        .await?;
        Ok(true)
    }
}

/// The API server certificate's extra names (`apiServer.certSANs`): the endpoint's address and the
/// spec's DNS name. The first control plane's ClusterConfiguration lists them, and kos moves
/// kubeadm-config to them before control planes join under a new name.
#[must_use]
pub fn cert_sans(api_address: &str, dns_name: Option<&str>) -> Vec<String> {
    std::iter::once(api_address.to_owned())
        .chain(dns_name.map(str::to_owned))
        .collect()
}
