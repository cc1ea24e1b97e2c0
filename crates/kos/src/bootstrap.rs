//! The kubeadm bootstrap behind `kos up`: the cluster's secrets kept on this machine, and the
//! [`Bootstrap`] that renders every node's cloud-init user_data with kos-bootstrap.
//!
//! Local files, all 0600 under `<data_dir>/clusters/<cloud>/<project key>/<cluster>/` (see
//! [`crate::local`]: the key is the cloud's identity, and `owner.json` records it):
//! - `pki.json`: the [`ClusterSecrets`] bundle (CAs, service-account key, bootstrap token, certificate
//!   key). Made by the first `up`, reused by every later one, so a re-created node joins the same
//!   cluster. Never printed, logged or put in a plan.
//! - `ccm-credential.json`: the CCM application credential (written by `cmd::cluster`), and
//!   `ccm-credential-next.json` while `kos rotate credential` replaces it (`cmd::rotate`).
//! - `cluster.json`: the API address and Kubernetes version, for `kos kubeconfig` without a cloud.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use kos_bootstrap::{
    ApiEndpoint, Ccm, CloudConf, ClusterInput, ClusterSecrets, Cni, Csi, KubeVersion, ManifestPin,
    NodeInput, PkiDelivery, Role, Taint, TaintEffect,
};
use kos_cluster::apply::CcmCredential;
use kos_cluster::bootstrap::{Bootstrap, BootstrapError, NodeContext, NodeRole};
use kos_cluster::resolved::Resolved;
use kos_cluster::{ClusterSpec, spec};
use miette::{IntoDiagnostic, WrapErr};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use kos_lifecycle::encryption::KeyState;

use crate::files::write_private;
use crate::local::{CloudIdentity, ClusterLock, LocalError, Place};

/// Port of the Kubernetes API on the endpoint.
pub const API_PORT: u16 = 6443;
/// A token with less than this left is replaced: a node created now must be able to join with it.
const TOKEN_MARGIN: Duration = Duration::from_secs(30 * 60);
/// Keystone's default region, for clouds whose profile names none.
const DEFAULT_REGION: &str = "RegionOne";
/// The pool name control planes carry in their `kos/pool` label.
const CONTROL_PLANE_POOL: &str = "control-plane";

/// A cluster's local files.
#[derive(Debug, Clone)]
pub struct Local {
    pub dir: PathBuf,
    /// Where they belong; `None` for a directory `kos kubeconfig` found without asking the cloud.
    place: Option<Place>,
}

/// What the cloud shows of a cluster when its secrets are looked for.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// Servers of it exist: new secrets would make nodes that cannot join it.
    pub servers: bool,
    /// Anything tagged for it exists.
    pub anything: bool,
}

/// What `kos kubeconfig` needs besides the secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterMeta {
    pub api_address: String,
    pub kubernetes_version: String,
}

/// The CCM credential as stored by `kos up`.
#[derive(Debug, Clone, Deserialize)]
pub struct StoredCcm {
    pub id: String,
    pub secret: SecretString,
}

/// The secrets `up` works with and what happened to them.
pub struct Secrets {
    pub secrets: ClusterSecrets,
    /// The token was replaced: a running cluster does not know it yet.
    pub token_refreshed: bool,
}

impl Local {
    /// The cluster's directory for the cloud and project `session` is connected to.
    pub fn for_session(session: &kos_cloud::Session, cluster: &str) -> miette::Result<Self> {
        let name = kos_cluster::names::ClusterName::new(cluster).map_err(|e| {
            miette::miette!(
                "`{}` is not a cluster name: {e}",
                crate::term::printable(cluster)
            )
        })?;
        let place = Place::new(&crate::cloud::data_dir()?, CloudIdentity::of(session), name);
        Ok(Self {
            dir: place.dir.clone(),
            place: Some(place),
        })
    }

    /// A directory found by [`crate::local::candidates`], to read from.
    pub fn at(dir: PathBuf) -> Self {
        Self { dir, place: None }
    }

    /// Where the files belong (`None` for [`Local::at`]).
    pub fn place(&self) -> Option<&Place> {
        self.place.as_ref()
    }

    /// Takes the cluster's lock for a command that changes it (see [`Place::lock`]).
    pub fn lock(&self, what: &str) -> miette::Result<ClusterLock> {
        let place = self
            .place
            .as_ref()
            .ok_or_else(|| miette::miette!("{} has no cloud to lock it for", self.dir.display()))?;
        place.lock(what).map_err(|e| match e {
            LocalError::Locked { .. } => miette::miette!(
                help = "wait for it to finish (or stop it), then run the command again: two runs at once would \
                        each write the cluster's secrets",
                "{e}"
            ),
            e => miette::miette!("{e}"),
        })
    }

    /// Whether files of the layout before cloud identities wait to be adopted.
    pub fn legacy_pending(&self) -> bool {
        self.place
            .as_ref()
            .is_some_and(|p| p.legacy_pending().is_some())
    }

    /// Whether kos keeps anything of the cluster here besides its lock and owner record.
    pub fn has_data(&self) -> bool {
        self.place.as_ref().is_some_and(Place::has_data)
    }

    /// Moves this cluster's files from the layout before cloud identities, once the cloud shows the
    /// cluster (see [`Place::adopt_legacy`]).
    pub fn adopt_legacy(&self) -> Result<(), crate::local::LocalError> {
        if let Some(place) = &self.place
            && place.adopt_legacy()?
        {
            eprintln!(
                "kos: moved the local secrets of cluster {} to {}",
                place
                    .dir
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                place.dir.display()
            );
        }
        Ok(())
    }

    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki.json")
    }

    pub fn ccm(&self) -> PathBuf {
        self.dir.join("ccm-credential.json")
    }

    /// The credential a `kos rotate credential` that has not finished made (0600).
    pub fn ccm_next(&self) -> PathBuf {
        self.dir.join("ccm-credential-next.json")
    }

    fn meta(&self) -> PathBuf {
        self.dir.join("cluster.json")
    }

    /// The Secrets' encryption keys and the rotation step (0600): [`KeyState`].
    pub fn keys_path(&self) -> PathBuf {
        self.dir.join("encryption.json")
    }

    /// The stored encryption keys, `None` when this machine has none for the cluster.
    pub fn keys(&self) -> miette::Result<Option<KeyState>> {
        let path = self.keys_path();
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        KeyState::from_json(&text).map(Some).map_err(|e| {
            miette::miette!(
                help = "restore the file from a backup: the cluster's Secrets are sealed under these keys",
                "{}: {e}",
                path.display()
            )
        })
    }

    /// Stores the keys and step (before anything acts on them: a crash must not lose a key that a
    /// control plane or a Secret already uses).
    pub fn write_keys(&self, keys: &KeyState) -> miette::Result<()> {
        write_private(&self.keys_path(), keys.to_json().expose().as_bytes())
    }

    /// The keys `kos up` works with, made on first use: a new cluster's first key, or for a
    /// running cluster made before kos encrypted Secrets (its control planes record no keys) a
    /// first key rolled in. Control planes that record keys this machine does not have: refused,
    /// a new key of the same name would not open what they sealed.
    pub fn keys_for_up(&self, recorded: &[Option<&str>]) -> miette::Result<KeyState> {
        if let Some(k) = self.keys()? {
            return Ok(k);
        }
        let mut rng = rand::rng();
        let keys = if recorded.iter().all(Option::is_none) {
            if recorded.is_empty() {
                KeyState::new_cluster(&mut rng)
            } else {
                KeyState::adopted(&mut rng)
            }
        } else {
            miette::bail!(
                help = "copy encryption.json from the machine that manages the cluster into this directory",
                "the cluster's control planes run with encryption keys ({}) that are not on this machine ({})",
                recorded
                    .iter()
                    .flatten()
                    .next()
                    .copied()
                    .unwrap_or_default(),
                self.keys_path().display()
            );
        };
        self.write_keys(&keys)?;
        Ok(keys)
    }

    /// The script that creates a renewed bootstrap token in a cluster whose API kos cannot reach.
    pub fn token_script(&self) -> PathBuf {
        self.dir.join("create-bootstrap-token.sh")
    }

    /// Writes [`token_script`](Self::token_script) (0600: it holds the token) for `cluster`: run on
    /// a control plane, it creates the token kos put into this run's new nodes, so they can join a
    /// cluster whose API is private. Nothing is printed or logged with the token in it.
    pub fn write_token_script(
        &self,
        cluster: &str,
        secrets: &ClusterSecrets,
        certs: bool,
        now: OffsetDateTime,
    ) -> miette::Result<PathBuf> {
        let t = &secrets.token;
        // What is left of the join window, at least a quarter of an hour to get to a control plane.
        let ttl = (t.expires - now).max(time::Duration::minutes(15));
        // Joining control planes download the CAs sealed under this run's key (kubeadm's own phase
        // makes the Secret, its two-hour token and the Role).
        let upload = if certs {
            format!(
                "kubeadm init phase upload-certs --upload-certs --kubeconfig /etc/kubernetes/admin.conf \\\n  \
                 --certificate-key '{}'\n",
                secrets.certificate_key.expose()
            )
        } else {
            String::new()
        };
        let script = format!(
            "#!/bin/sh\n\
             # kos: create the renewed bootstrap token of cluster {cluster}, so that the nodes `kos up`\n\
             # creates can join. Run it on one of the cluster's control planes, as root:\n\
             #   sudo sh create-bootstrap-token.sh\n\
             # It holds the token: keep it 0600 and delete it afterwards.\n\
             set -eu\n\
             kubeadm token create '{}.{}' --kubeconfig /etc/kubernetes/admin.conf --ttl {}s \\\n  \
             --groups system:bootstrappers:kubeadm:default-node-token \\\n  \
             --description 'renewed by kos up'\n{upload}",
            t.id,
            t.secret.expose(),
            ttl.whole_seconds()
        );
        let path = self.token_script();
        write_private(&path, script.as_bytes())?;
        Ok(path)
    }

    /// The stored secrets, `None` when this machine has none for the cluster.
    pub fn secrets(&self) -> miette::Result<Option<ClusterSecrets>> {
        let path = self.pki();
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        ClusterSecrets::from_bundle(&text).map(Some).map_err(|e| {
            miette::miette!(
                help = "restore the file from a backup: a new CA would not be trusted by the cluster's nodes",
                "{}: {e}",
                path.display()
            )
        })
    }

    /// The stored secrets, made on first use. With servers of the cluster in the cloud, new secrets
    /// would make nodes that cannot join it: refused. Secrets once given to servers of a cluster the
    /// cloud no longer shows at all (deleted outside kos, or another project's) are refused unless
    /// `reuse` says so: a new cluster would trust every certificate the old CA signed.
    pub fn secrets_for_up(&self, seen: Seen, reuse: bool) -> miette::Result<Secrets> {
        let now = OffsetDateTime::now_utc();
        let mut rng = rand::rng();
        let stored = self.secrets()?;
        if stored.is_some() && !seen.anything && !reuse {
            let delivered = match &self.place {
                Some(p) => p
                    .owner()
                    .map_err(|e| miette::miette!("{e}"))?
                    // No record: from before kos kept one, so it was in use.
                    .is_none_or(|o| o.delivered),
                None => true,
            };
            if delivered {
                miette::bail!(
                    help = format!(
                        "pass --reuse-local-secrets to make the cluster again with this CA (every certificate \
                         it signed will be trusted), or `kos down {0} --forget` to delete them: the cloud shows \
                         nothing of cluster {0}",
                        self.dir
                            .file_name()
                            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
                    ),
                    "the secrets in {} were given to servers of a cluster that this project ({}) shows no \
                     trace of",
                    self.pki().display(),
                    self.place
                        .as_ref()
                        .map_or("?", |p| p.identity().project_id.as_str())
                );
            }
        }
        let (mut secrets, mut changed) = match stored {
            Some(s) => (s, false),
            None if seen.servers => miette::bail!(
                help =
                    "copy pki.json from the machine that created the cluster into this directory",
                "the cluster already has servers but its secrets ({}) are not on this machine",
                self.pki().display()
            ),
            None => (
                ClusterSecrets::generate(&mut rng, now, kos_bootstrap::DEFAULT_TOKEN_TTL)
                    .map_err(|e| miette::miette!("cannot generate the cluster's PKI: {e}"))?,
                true,
            ),
        };
        let token_refreshed =
            !changed && secrets.refresh_token_if_expired(&mut rng, now, TOKEN_MARGIN);
        changed |= token_refreshed;
        if changed {
            // Written before any server is created: a crash must not lose the CA the nodes get.
            write_private(&self.pki(), secrets.to_bundle().expose().as_bytes())?;
        }
        Ok(Secrets {
            secrets,
            token_refreshed,
        })
    }

    /// The CCM credential, `None` when it was never stored here (or lost).
    pub fn ccm_credential(&self) -> miette::Result<Option<StoredCcm>> {
        let path = self.ccm();
        read_optional(&path)?
            .map(|t| {
                serde_json::from_str(&t)
                    .into_diagnostic()
                    .wrap_err_with(|| format!("{} is malformed", path.display()))
            })
            .transpose()
    }

    pub fn write_meta(&self, meta: &ClusterMeta) -> miette::Result<()> {
        let body = serde_json::to_vec_pretty(meta).into_diagnostic()?;
        write_private(&self.meta(), &body)
    }

    pub fn meta_data(&self) -> miette::Result<Option<ClusterMeta>> {
        let path = self.meta();
        read_optional(&path)?
            .map(|t| {
                serde_json::from_str(&t)
                    .into_diagnostic()
                    .wrap_err_with(|| format!("{} is malformed", path.display()))
            })
            .transpose()
    }
}

fn read_optional(path: &Path) -> miette::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e)
            .into_diagnostic()
            .wrap_err_with(|| format!("cannot read {}", path.display())),
    }
}

/// Renders user_data with kos-bootstrap: cp-0 runs `kubeadm init`, other control planes and workers
/// join; all get the same CA and token, so they boot in parallel.
pub struct KubeadmBootstrap {
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
    stored_ccm: Option<StoredCcm>,
    ccm_path: PathBuf,
    /// The providers every control plane made now runs with (`None`: no encryption at rest).
    encryption: Option<kos_bootstrap::Encryption>,
    /// Mirrors and proxy (spec.mirrors, spec.proxy).
    airgap: kos_bootstrap::Airgap,
    /// Told once, before the first user_data leaves this machine, that the secrets are in use.
    place: Option<Place>,
    delivered: std::sync::Mutex<bool>,
}

impl KubeadmBootstrap {
    pub fn new(
        spec: &ClusterSpec,
        resolved: &Resolved,
        session: &kos_cloud::Session,
        secrets: ClusterSecrets,
        local: &Local,
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
            stored_ccm: local.ccm_credential()?,
            ccm_path: local.ccm(),
            encryption,
            airgap: airgap_input(spec, Some(node_cidr(resolved))),
            place: local.place().cloned(),
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
                path: self.ccm_path.display().to_string(),
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
    "the CCM application credential's secret is not stored on this machine ({path}); run `kos up --recreate-ccm-credential` to make a new one"
)]
struct NoCredential {
    path: String,
}

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

impl Bootstrap for KubeadmBootstrap {
    /// Written (0600) the moment Keystone returns it: a run killed later keeps it.
    fn keep_ccm_credential(&self, c: &CcmCredential) -> Result<(), BootstrapError> {
        let fail = |reason: String| BootstrapError {
            node: "appcred-ccm".into(),
            reason,
        };
        let secret = c
            .secret
            .as_ref()
            .ok_or_else(|| fail("Keystone returned no secret".into()))?;
        let body =
            serde_json::json!({"id": c.id, "name": c.name, "secret": secret.expose_secret()});
        write_private(&self.ccm_path, body.to_string().as_bytes())
            .map_err(|e| fail(format!("{e:?}")))?;
        eprintln!(
            "kos: the CCM's application credential is stored in {} (0600)",
            self.ccm_path.display()
        );
        Ok(())
    }

    fn user_data(&self, node: &NodeContext) -> Result<Vec<u8>, BootstrapError> {
        let fail = |reason: String| BootstrapError {
            node: node.logical_id.clone(),
            reason,
        };
        // Recorded before the secrets leave: a later run must know a cluster of this CA existed.
        if let Some(place) = &self.place {
            // Held across the write: servers render in parallel, and owner.json has one temp file.
            let mut done = self.delivered.lock().unwrap_or_else(|p| p.into_inner());
            if !*done {
                place
                    .record(|o| o.delivered = true)
                    .map_err(|e| fail(e.to_string()))?;
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
                .map_err(|e| fail(e.to_string()))?,
        };
        let cluster = self.cluster_input(node).map_err(|e| fail(e.to_string()))?;
        let ud = kos_bootstrap::render_user_data(&cluster, &input, &self.secrets)
            .map_err(|e| fail(e.to_string()))?;
        tracing::debug!(node = %node.logical_id, bytes = ud.base64_len(), gzipped = ud.gzipped, "user_data rendered");
        Ok(ud.payload().to_vec())
    }
}

/// The API server certificate's extra names (`apiServer.certSANs`): the endpoint's address and the
/// spec's DNS name. The first control plane's ClusterConfiguration lists them, and kos moves
/// kubeadm-config to them before control planes join under a new name.
pub fn cert_sans(api_address: &str, dns_name: Option<&str>) -> Vec<String> {
    std::iter::once(api_address.to_owned())
        .chain(dns_name.map(str::to_owned))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_token_script_holds_the_token_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let local = Local::at(dir.path().to_path_buf());
        let now = OffsetDateTime::now_utc();
        let secrets =
            ClusterSecrets::generate(&mut rand::rng(), now, kos_bootstrap::DEFAULT_TOKEN_TTL)
                .unwrap();
        let path = local
            .write_token_script("demo", &secrets, true, now)
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let token = format!("{}.{}", secrets.token.id, secrets.token.secret.expose());
        assert!(
            text.contains(&format!("kubeadm token create '{token}'")),
            "{text}"
        );
        assert!(text.contains("system:bootstrappers:kubeadm:default-node-token"));
        assert!(
            text.contains(&format!(
                "--certificate-key '{}'",
                secrets.certificate_key.expose()
            )),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A real shell accepts it.
        let check = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .status()
            .unwrap();
        assert!(check.success());
    }

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
