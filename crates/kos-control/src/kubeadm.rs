//! The kubeadm bootstrap behind a run (`kos up`'s, an operator's): [`Kubeadm`], the
//! [`Bootstraps`] that makes each turn's [`KubeadmBootstrap`], which renders every node's
//! cloud-init user_data with kos-bootstrap from the secrets of a [`SecretStore`].

use ipnet::IpNet;
use kos_bootstrap::{
    ApiEndpoint, Ccm, CloudConf, ClusterInput, ClusterSecrets, Cni, Csi, KubeVersion, ManifestPin,
    NodeInput, PkiDelivery, Role, Taint, TaintEffect,
};
use kos_cluster::apply::CcmCredential;
use kos_cluster::bootstrap::{Bootstrap, BootstrapError, NodeContext, NodeRole};
use kos_cluster::resolved::Resolved;
use kos_cluster::{ClusterSpec, spec};
use kos_lifecycle::rotate::Credential;
use secrecy::SecretString;

use crate::connect::API_PORT;
use crate::report::{Event, Report};
use crate::roll::cert_sans;
use crate::store::{Cause, Record, Records as _, SecretStore, StoreError};
use crate::up::{Bootstraps, Turn};

/// Keystone's default region, for clouds whose profile names none.
const DEFAULT_REGION: &str = "RegionOne";
/// The pool name control planes carry in their `kos/pool` label.
const CONTROL_PLANE_POOL: &str = "control-plane";

/// Why a turn's [`KubeadmBootstrap`] cannot be made (nothing was changed). Never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum KubeadmError {
    /// The spec's Kubernetes version is not one kos-bootstrap renders.
    #[error(transparent)]
    Version(kos_bootstrap::Error),
    /// The stored CCM credential cannot be read (the error names the record and where it is
    /// kept, never its content).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// kubeadm's user_data through kos-bootstrap for a run's turns, the CCM credential and the
/// secrets' delivery kept in `store`, what it does told to `report`.
pub struct Kubeadm<'a> {
    pub session: &'a kos_cloud::Session,
    pub store: &'a dyn SecretStore,
    /// The PEM of the CA bundle that signed the cloud's endpoints (clouds.yaml's `cacert`), for
    /// cloud.conf's `ca-file`: the front end reads it (a file, a Secret), this crate reads no file.
    pub ca_cert: Option<String>,
    pub report: &'a dyn Report,
}

impl Bootstraps for Kubeadm<'_> {
    fn bootstrap<'a>(
        &'a self,
        turn: &'a Turn,
        secrets: ClusterSecrets,
    ) -> Result<Box<dyn Bootstrap + 'a>, Cause> {
        let b = KubeadmBootstrap::new(
            self,
            &turn.spec,
            &turn.resolved,
            secrets,
            turn.keys
                .as_ref()
                .map(kos_lifecycle::encryption::KeyState::desired),
        )?;
        Ok(Box::new(b))
    }
}

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
    /// Told where the CCM credential was stored.
    report: &'a dyn Report,
    /// The providers every control plane made now runs with (`None`: no encryption at rest).
    encryption: Option<kos_bootstrap::Encryption>,
    /// Mirrors and proxy (spec.mirrors, spec.proxy).
    airgap: kos_bootstrap::Airgap,
    /// Told once, before the first user_data leaves this machine, that the secrets are in use.
    delivered: std::sync::Mutex<bool>,
}

impl<'a> KubeadmBootstrap<'a> {
    /// One turn's renderer: the spec's cluster, what preflight resolved, the cluster's secrets
    /// and the providers every control plane made now runs with (`None`: no encryption at rest).
    ///
    /// # Errors
    /// [`KubeadmError`]: the spec's version, the stored CCM credential.
    pub fn new(
        kubeadm: &Kubeadm<'a>,
        spec: &ClusterSpec,
        resolved: &Resolved,
        secrets: ClusterSecrets,
        encryption: Option<kos_bootstrap::Encryption>,
    ) -> Result<Self, KubeadmError> {
        let version = kube_version(&spec.kubernetes_version.to_string())?;
        let (session, store) = (kubeadm.session, kubeadm.store);
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
            ca_cert: kubeadm.ca_cert.clone(),
            secrets,
            stored_ccm: stored_ccm(store)?,
            store,
            report: kubeadm.report,
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
                location: self.store.location(Record::CcmCredential),
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

/// The spec's version as kos-bootstrap takes it.
fn kube_version(v: &str) -> Result<KubeVersion, KubeadmError> {
    v.parse().map_err(KubeadmError::Version)
}

/// The CCM credential an earlier run stored, if any.
fn stored_ccm(store: &dyn SecretStore) -> Result<Option<Credential>, KubeadmError> {
    Ok(store.ccm_credential()?)
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
        self.report.event(Event::CcmCredentialStored {
            location: &self.store.location(Record::CcmCredential),
        });
        Ok(())
    }

    fn user_data(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        // Recorded before the secrets leave: a later run must know a cluster of this CA existed.
        {
            // Held across the write: servers render in parallel, and owner.json has one temp file.
            let mut done = self.delivered.lock().unwrap_or_else(|p| p.into_inner());
            if !*done {
                self.store
                    .mark_delivered()
                    .map_err(|e| BootstrapError::new(node.logical_id.clone(), e))?;
                *done = true;
            }
        }
        self.render(node)
    }

    /// Not recorded as delivered: a run stopped after its rehearsal has handed nothing out, and
    /// the next run must take its secrets as its own.
    fn rehearse(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        self.render(node)
    }
}

impl KubeadmBootstrap<'_> {
    fn render(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        let fail = |e: Box<dyn std::error::Error + Send + Sync>| {
            BootstrapError::new(node.logical_id.clone(), e)
        };
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use kos_bootstrap::Sensitive;

    use super::*;
    use crate::report::Recorded;
    use crate::store::Memory;

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

    #[test]
    fn a_version_kos_bootstrap_refuses_is_the_version_error() {
        let e = kube_version("1.36").unwrap_err();
        assert!(matches!(e, KubeadmError::Version(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("invalid kubernetes version: \"1.36\" is not MAJOR.MINOR.PATCH"),
            "{e}"
        );
    }

    #[test]
    fn an_unreadable_stored_credential_is_the_store_error_without_its_secret() {
        let store = Memory::default();
        store
            .write(
                Record::CcmCredential,
                &Sensitive::new("{\"id\": \"c1\", \"secret\": hunter2"),
            )
            .unwrap();
        let e = stored_ccm(&store).unwrap_err();
        assert!(matches!(e, KubeadmError::Store(_)), "{e:?}");
        let text = kos_lifecycle::api::chain(&e);
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains(&store.location(Record::CcmCredential)),
            "{text}"
        );
    }

    /// A renderer as `new` makes it, without a cloud session.
    fn renderer<'a>(store: &'a Memory, report: &'a Recorded) -> KubeadmBootstrap<'a> {
        let secrets = ClusterSecrets::generate(
            &mut rand::rng(),
            time::OffsetDateTime::now_utc(),
            kos_bootstrap::DEFAULT_TOKEN_TTL,
        )
        .unwrap();
        KubeadmBootstrap {
            name: "demo".into(),
            version: kube_version(
                &spec::KubernetesVersion::default_release()
                    .unwrap()
                    .to_string(),
            )
            .unwrap(),
            pod_cidr: "10.244.0.0/16".parse().unwrap(),
            service_cidr: "10.96.0.0/12".parse().unwrap(),
            cni: Cni::Calico,
            ccm: Ccm::Upstream,
            csi: Csi::Cinder,
            cni_manifest: None,
            dns_name: None,
            expected_nodes: 2,
            auth_url: "https://keystone.example:5000/v3".into(),
            region: DEFAULT_REGION.into(),
            floating_network_id: "ext".into(),
            service_lb_provider: None,
            ca_cert: None,
            csi_volume_zone: None,
            secrets,
            stored_ccm: None,
            store,
            report,
            encryption: None,
            airgap: kos_bootstrap::Airgap::default(),
            delivered: std::sync::Mutex::new(false),
        }
    }

    fn node(logical_id: &str, role: NodeRole) -> NodeContext {
        NodeContext {
            cluster: "demo".into(),
            logical_id: logical_id.into(),
            role,
            api_address: "192.0.2.10".into(),
            labels: BTreeMap::new(),
            taints: vec![],
            subnet_id: Some("subnet".into()),
            ccm_credential_id: None,
            ccm_credential_secret: None,
        }
    }

    #[test]
    fn the_ccm_credential_is_stored_and_reported_then_the_first_control_plane_renders() {
        let (store, report) = (Memory::default(), Recorded::default());
        let b = renderer(&store, &report);
        let cp0 = node("cp-0", NodeRole::InitControlPlane);
        assert_eq!(store.delivered().unwrap(), Some(false));
        // A rehearsal renders the same, and hands nothing out.
        let worker = node(
            "pool-workers-0",
            NodeRole::Worker {
                pool: "workers".into(),
            },
        );
        assert!(!b.rehearse(&worker).unwrap().is_empty());
        assert_eq!(store.delivered().unwrap(), Some(false));
        // No credential anywhere: the first control plane's cloud.conf cannot be written.
        let e = kos_lifecycle::api::chain(&b.rehearse(&cp0).unwrap_err());
        assert!(e.contains("kos up --recreate-ccm-credential"), "{e}");
        assert_eq!(store.delivered().unwrap(), Some(false));
        let e = kos_lifecycle::api::chain(&b.user_data(&cp0).unwrap_err());
        assert!(e.contains("kos up --recreate-ccm-credential"), "{e}");
        // Marked before the secrets would have left.
        assert_eq!(store.delivered().unwrap(), Some(true));
        b.keep_ccm_credential(&CcmCredential {
            id: "c1".into(),
            name: "kos-demo-ccm".into(),
            secret: Some(SecretString::from("hunter2")),
        })
        .unwrap();
        assert_eq!(store.ccm_credential().unwrap().unwrap().id, "c1");
        let location = store.location(Record::CcmCredential);
        assert_eq!(
            report.events(),
            vec![format!(
                "{:?}",
                Event::CcmCredentialStored {
                    location: &location
                }
            )]
        );
        // The stored copy serves the node whose context carries only the id.
        let b = KubeadmBootstrap {
            stored_ccm: store.ccm_credential().unwrap(),
            ..renderer(&store, &report)
        };
        let cp0 = NodeContext {
            ccm_credential_id: Some("c1".into()),
            ..cp0
        };
        assert!(!b.user_data(&cp0).unwrap().is_empty());
        assert!(!b.user_data(&worker).unwrap().is_empty());
    }

    #[test]
    fn a_credential_keystone_returned_without_its_secret_is_refused() {
        let (store, report) = (Memory::default(), Recorded::default());
        let e = renderer(&store, &report)
            .keep_ccm_credential(&CcmCredential {
                id: "c1".into(),
                name: "kos-demo-ccm".into(),
                secret: None,
            })
            .unwrap_err();
        assert!(kos_lifecycle::api::chain(&e).contains("Keystone returned no secret"));
        assert!(store.ccm_credential().unwrap().is_none() && report.events().is_empty());
    }
}
