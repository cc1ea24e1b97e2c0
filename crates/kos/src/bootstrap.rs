//! The kubeadm bootstrap behind `kos up`: the [`Bootstrap`] that renders every node's cloud-init
//! user_data with kos-bootstrap, from the secrets of a [`SecretStore`] (on this machine,
//! [`crate::local::Local`]).

use ipnet::IpNet;
use kos_bootstrap::{
    ApiEndpoint, Ccm, CloudConf, ClusterInput, ClusterSecrets, Cni, Csi, KubeVersion, ManifestPin,
    NodeInput, PkiDelivery, Role, Taint, TaintEffect,
};
use kos_cluster::apply::CcmCredential;
use kos_cluster::bootstrap::{Bootstrap, BootstrapError, NodeContext, NodeRole};
use kos_cluster::resolved::Resolved;
use kos_cluster::{ClusterSpec, spec};
use kos_control::store::{Records, SecretStore};
use kos_lifecycle::rotate::Credential;
use miette::{IntoDiagnostic, WrapErr};
use secrecy::SecretString;

/// Port of the Kubernetes API on the endpoint.
pub use kos_control::connect::API_PORT;
/// Keystone's default region, for clouds whose profile names none.
const DEFAULT_REGION: &str = "RegionOne";
/// The pool name control planes carry in their `kos/pool` label.
const CONTROL_PLANE_POOL: &str = "control-plane";

/// Renders user_data with kos-bootstrap: cp-0 runs `kubeadm init`, other control planes and workers
/// join; all get the same CA and token, so they boot in parallel.
pub struct KubeadmBootstrap<'a> {
    name: String,
    version: KubeVersion,
    pod_cidr: IpNet,
    service_cidr: IpNet,
    cni: Cni,
    ccm: Ccm,
    csi: Csi,
    cni_manifest: Option<ManifestPin>,
    dns_name: Option<String>,
    expected_nodes: u32,
    auth_url: String,
    region: String,
    floating_network_id: String,
    /// The Services' Octavia provider (cloud.conf `lb-provider`).
    service_lb_provider: Option<String>,
    /// The PEM of clouds.yaml's `cacert`, for cloud.conf's `ca-file`.
    ca_cert: Option<String>,
    /// The Cinder zone of CSI volumes, when the nodes' zones are not Cinder's (preflight decided).
    csi_volume_zone: Option<String>,
    secrets: ClusterSecrets,
    stored_ccm: Option<Credential>,
    /// Where the secrets are kept: the CCM credential goes there, and the fact that the secrets
    /// were delivered.
    store: &'a dyn SecretStore,
    /// The providers every control plane made now runs with (`None`: no encryption at rest).
    encryption: Option<kos_bootstrap::Encryption>,
    /// Mirrors and proxy (spec.mirrors, spec.proxy).
    airgap: kos_bootstrap::Airgap,
    /// Told once, before the first user_data leaves this machine, that the secrets are in use.
    delivered: std::sync::Mutex<bool>,
}

impl<'a> KubeadmBootstrap<'a> {
    pub fn new(
        spec: &ClusterSpec,
        resolved: &Resolved,
        session: &kos_cloud::Session,
        secrets: ClusterSecrets,
        store: &'a dyn SecretStore,
        encryption: Option<kos_bootstrap::Encryption>,
    ) -> miette::Result<Self> {
        let version: KubeVersion = spec
            .kubernetes_version
            .to_string()
            .parse()
            .map_err(|e| miette::miette!("{e}"))?;
        let ca_cert = session
            .cacert()
            .map(|path| {
                std::fs::read_to_string(path)
                    .into_diagnostic()
                    .wrap_err_with(|| {
                        format!(
                            "cannot read the cloud's CA bundle {} (clouds.yaml `cacert`), which the cloud controller needs too",
                            path.display()
                        )
                    })
            })
            .transpose()?;
        Ok(Self {
            name: spec.name.value.as_str().to_owned(),
            version,
            pod_cidr: IpNet::V4(spec.network.pod_cidr.value),
            service_cidr: IpNet::V4(spec.network.service_cidr.value),
            cni: match spec.addons.cni {
                spec::Cni::Calico => Cni::Calico,
                spec::Cni::Cilium => Cni::Cilium,
                spec::Cni::Flannel => Cni::Flannel,
                spec::Cni::KubeRouter => Cni::KubeRouter,
            },
            ccm: match &spec.addons.ccm {
                spec::Ccm::Upstream => Ccm::Upstream,
                spec::Ccm::Kos { image } => Ccm::Kos {
                    image: image.clone(),
                },
            },
            cni_manifest: spec.addons.cni_manifest.as_ref().map(|m| ManifestPin {
                url: m.url.clone(),
                sha256: m.sha256.clone(),
            }),
            csi: csi_input(&spec.addons.csi),
            dns_name: spec
                .api_endpoint
                .dns_name
                .as_ref()
                .map(|d| d.as_str().to_owned()),
            expected_nodes: spec.node_count(),
            auth_url: session.auth_url().to_owned(),
            region: session.region().unwrap_or(DEFAULT_REGION).to_owned(),
            floating_network_id: resolved.external_network.id.clone(),
            service_lb_provider: resolved.service_lb_provider.clone(),
            csi_volume_zone: resolved.csi_volume_zone.clone(),
            ca_cert,
            secrets,
            stored_ccm: store
                .ccm_credential()
                .map_err(|e| miette::miette!("{}", kos_lifecycle::api::chain(&e)))?,
            store,
            encryption,
            airgap: airgap_input(spec, Some(node_cidr(resolved))),
            delivered: std::sync::Mutex::new(false),
        })
    }

    /// cloud.conf's credential: this run's new one, else the stored copy. Only the first control
    /// plane carries cloud.conf; the others get a stand-in that is never rendered.
    fn credential(&self, node: &NodeContext) -> Result<(String, SecretString), NoCredential> {
        let id = node
            .ccm_credential_id
            .clone()
            .or_else(|| self.stored_ccm.as_ref().map(|c| c.id.clone()));
        let secret = node.ccm_credential_secret.clone().or_else(|| {
            self.stored_ccm
                .as_ref()
                .filter(|c| id.as_deref() == Some(c.id.as_str()))
                .map(|c| c.secret.clone())
        });
        match (id, secret) {
            (Some(id), Some(secret)) => Ok((id, secret)),
            _ if node.role != NodeRole::InitControlPlane => {
                Ok(("unused".into(), SecretString::from("unused")))
            }
            _ => Err(NoCredential {
                location: self
                    .store
                    .location(kos_control::store::Record::CcmCredential),
            }),
        }
    }

    fn cluster_input(&self, node: &NodeContext) -> Result<ClusterInput, NoCredential> {
        let (id, secret) = self.credential(node)?;
        let cert_sans = cert_sans(&node.api_address, self.dns_name.as_deref());
        Ok(ClusterInput {
            name: self.name.clone(),
            kubernetes_version: self.version,
            endpoint: ApiEndpoint {
                host: node.api_address.clone(),
                port: API_PORT,
            },
            cert_sans,
            pod_cidr: self.pod_cidr,
            service_cidr: self.service_cidr,
            cni: self.cni,
            cni_manifest: self.cni_manifest.clone(),
            ccm: self.ccm.clone(),
            csi: self.csi.clone(),
            cloud: CloudConf {
                auth_url: self.auth_url.clone(),
                region: self.region.clone(),
                application_credential_id: id,
                application_credential_secret: secret,
                floating_network_id: self.floating_network_id.clone(),
                subnet_id: node.subnet_id.clone().unwrap_or_else(|| "unused".into()),
                lb_provider: self.service_lb_provider.clone(),
                ca_cert: self.ca_cert.clone(),
                csi_volume_zone: self.csi_volume_zone.clone(),
            },
            pki_delivery: PkiDelivery::UploadCerts,
            expected_nodes: self.expected_nodes,
            server_tls_bootstrap: false,
            encryption: self.encryption.clone(),
            airgap: self.airgap.clone(),
        })
    }
}

/// The node subnet, made or existing.
fn node_cidr(resolved: &Resolved) -> ipnet::Ipv4Net {
    match &resolved.network {
        kos_cluster::resolved::ResolvedNetwork::Create { cidr, .. } => *cidr,
        kos_cluster::resolved::ResolvedNetwork::Existing { subnet_cidr, .. } => *subnet_cidr,
    }
}

/// The spec's storage driver as kos-bootstrap takes it.
pub fn csi_input(csi: &spec::Csi) -> Csi {
    match csi {
        spec::Csi::Cinder => Csi::Cinder,
        spec::Csi::Kos { image } => Csi::Kos {
            image: image.clone(),
        },
        spec::Csi::None => Csi::None,
    }
}

/// The spec's mirrors and proxy as kos-bootstrap takes them; the node subnet (when known) joins
/// the proxy's exemptions, with the rest of the cluster's own ranges that kos-bootstrap adds.
pub fn airgap_input(
    spec: &ClusterSpec,
    node_cidr: Option<ipnet::Ipv4Net>,
) -> kos_bootstrap::Airgap {
    let m = &spec.mirrors;
    kos_bootstrap::Airgap {
        registries: m
            .registries
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().trim_end_matches('/').to_owned()))
            .collect(),
        ca_bundle: m.ca_bundle.clone(),
        kubernetes_packages: m
            .kubernetes_packages
            .as_ref()
            .map(|u| u.as_str().to_owned()),
        os_packages: m.os_packages.as_ref().map(|u| u.as_str().to_owned()),
        os_security_packages: m
            .os_security_packages
            .as_ref()
            .map(|u| u.as_str().to_owned()),
        manifests: m.manifests.as_ref().map(|u| u.as_str().to_owned()),
        proxy: spec.proxy.as_ref().map(|p| kos_bootstrap::Proxy {
            http: p.http.as_ref().map(|u| u.as_str().to_owned()),
            https: p.https.as_ref().map(|u| u.as_str().to_owned()),
            no_proxy: p
                .no_proxy
                .iter()
                .cloned()
                .chain(node_cidr.map(|c| c.to_string()))
                .collect(),
        }),
    }
}

/// The first control plane's cloud.conf needs the CCM's credential, and this machine lacks it.
#[derive(Debug, thiserror::Error)]
#[error(
    "the CCM application credential's secret is not stored on this machine ({location}); run `kos up --recreate-ccm-credential` to make a new one"
)]
struct NoCredential {
    location: String,
}

/// Keystone made the CCM's credential but did not return its secret.
#[derive(Debug, thiserror::Error)]
#[error("Keystone returned no secret")]
struct NoSecret;

/// A taint that is not `key[=value]:Effect`.
#[derive(Debug, thiserror::Error)]
#[error("taint {0:?} is not key[=value]:Effect")]
struct BadTaint(String);

/// `key=value:Effect` or `key:Effect`, as the deployer writes taints.
fn taint(s: &str) -> Result<Taint, BadTaint> {
    let bad = || BadTaint(s.to_owned());
    let (kv, effect) = s.rsplit_once(':').ok_or_else(bad)?;
    let effect = match effect {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        _ => return Err(bad()),
    };
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (kv, None),
    };
    Ok(Taint {
        key: key.to_owned(),
        value,
        effect,
    })
}

impl Bootstrap for KubeadmBootstrap<'_> {
    /// Written (0600) the moment Keystone returns it: a run killed later keeps it.
    fn keep_ccm_credential(&self, c: &CcmCredential) -> Result<(), BootstrapError> {
        let fail =
            |e: Box<dyn std::error::Error + Send + Sync>| BootstrapError::new("appcred-ccm", e);
        let secret = c.secret.as_ref().ok_or_else(|| fail(Box::new(NoSecret)))?;
        self.store
            .put_ccm_credential(&Credential {
                id: c.id.clone(),
                name: c.name.clone(),
                secret: secret.clone(),
            })
            .map_err(|e| fail(Box::new(e)))?;
        eprintln!(
            "kos: the CCM's application credential is stored in {} (0600)",
            self.store
                .location(kos_control::store::Record::CcmCredential)
        );
        Ok(())
    }

    fn user_data(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        let fail = |e: Box<dyn std::error::Error + Send + Sync>| {
            BootstrapError::new(node.logical_id.clone(), e)
        };
        // Recorded before the secrets leave: a later run must know a cluster of this CA existed.
        {
            // Held across the write: servers render in parallel, and owner.json has one temp file.
            let mut done = self.delivered.lock().unwrap_or_else(|p| p.into_inner());
            if !*done {
                self.store.mark_delivered().map_err(|e| fail(Box::new(e)))?;
                *done = true;
            }
        }
        let (role, pool) = match &node.role {
            NodeRole::InitControlPlane => (Role::InitControlPlane, CONTROL_PLANE_POOL),
            NodeRole::JoinControlPlane => (Role::JoinControlPlane, CONTROL_PLANE_POOL),
            NodeRole::Worker { pool } => (Role::Worker, pool.as_str()),
        };
        let input = NodeInput {
            role,
            pool: pool.to_owned(),
            labels: node.labels.clone(),
            taints: node
                .taints
                .iter()
                .map(|t| taint(t))
                .collect::<Result<_, _>>()
                .map_err(|e| fail(Box::new(e)))?,
        };
        let cluster = self.cluster_input(node).map_err(|e| fail(Box::new(e)))?;
        let ud = kos_bootstrap::render_user_data(&cluster, &input, &self.secrets)
            .map_err(|e| fail(Box::new(e)))?;
        tracing::debug!(node = %node.logical_id, bytes = ud.base64_len(), gzipped = ud.gzipped, "user_data rendered");
        Ok(ud.payload().to_vec())
    }
}

pub use kos_control::roll::cert_sans;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_both_forms() {
        let t = taint("dedicated=batch:NoSchedule").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_deref(), t.effect),
            ("dedicated", Some("batch"), TaintEffect::NoSchedule)
        );
        assert_eq!(taint("gpu:NoExecute").unwrap().value, None);
        assert!(taint("gpu").is_err() && taint("gpu:Sometimes").is_err());
    }
}
