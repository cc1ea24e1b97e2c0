//! A simulated cluster: its Kubernetes API (a [`FakeKube`] holding Namespaces, Secrets, ConfigMaps,
//! Nodes and whatever the addons apply) and what kubeadm keeps outside it: the cluster's identity and
//! CA, its version, its etcd membership, and which CNI network it runs. The controllers that act on
//! the API without a node's help (the token cleaner, the garbage collector for `kubeadm-certs`, the
//! node lifecycle's NotReady) run in [`crate::Guest::tick`].

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kos_kube_fake::FakeKube;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::GuestError;
use crate::kubeadm::config::TokenSpec;
use crate::seam::ServerId;
use crate::version::Version;

/// Which simulated cluster (a new one per `kubeadm init`, even with the same CA).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ClusterId(pub u32);

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cluster-{}", self.0)
    }
}

/// One etcd member: the control plane it runs on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EtcdMember {
    /// etcd's member ID (random, never 0).
    #[serde(default)]
    pub id: u64,
    pub server: ServerId,
    /// The member name kubeadm gives it: the node name.
    pub name: String,
    /// The address of its peer URL (`https://<ip>:2380`): the node's advertise address.
    #[serde(default)]
    pub ip: Option<std::net::IpAddr>,
}

impl EtcdMember {
    /// A new member (a fresh random ID, as etcd gives one on `member add`).
    pub fn new(server: ServerId, name: String, ip: Option<std::net::IpAddr>) -> EtcdMember {
        use rand::Rng;
        EtcdMember {
            id: rand::rng().random_range(1..=u64::MAX),
            server,
            name,
            ip,
        }
    }

    pub fn peer_url(&self) -> String {
        url_of(self.ip, 2380)
    }

    pub fn client_url(&self) -> String {
        url_of(self.ip, 2379)
    }
}

fn url_of(ip: Option<std::net::IpAddr>, port: u16) -> String {
    match ip {
        Some(std::net::IpAddr::V6(a)) => format!("https://[{a}]:{port}"),
        Some(a) => format!("https://{a}:{port}"),
        None => format!("https://127.0.0.1:{port}"),
    }
}

/// etcd's raft position, as far as the model has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdRaft {
    pub term: u64,
    pub index: u64,
}

impl Default for EtcdRaft {
    fn default() -> EtcdRaft {
        EtcdRaft { term: 2, index: 4 }
    }
}

/// The CNI a cluster runs (a stand-in for the manifest's objects).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CniState {
    pub daemonset: String,
    /// The pod network the CNI uses after the script's CIDR rewrite.
    pub network: Option<String>,
}

/// One cluster.
pub struct Cluster {
    pub id: ClusterId,
    pub name: String,
    /// `controlPlaneEndpoint`, if set.
    pub endpoint: Option<String>,
    /// `sha256:<hex>` of the CA's SPKI: what joins pin.
    pub ca_hash: String,
    pub version: Version,
    /// Set while an upgrade to that version is under way (not simulated yet; joins accept its minor).
    pub upgrading_to: Option<Version>,
    pub pod_subnet: Option<String>,
    pub etcd: Vec<EtcdMember>,
    /// Servers whose member was removed while they ran: their etcd stopped, and their API server
    /// with it (Cluster API removes a machine's member right before it deletes the machine).
    pub removed_members: std::collections::BTreeSet<ServerId>,
    /// etcd's raft term and index as its status reports them (they move with membership only).
    pub etcd_raft: EtcdRaft,
    pub cni: Option<CniState>,
    /// What kubeadm puts into every API server's serving certificate.
    pub serving: Serving,
    pub kube: FakeKube,
}

/// The cluster-wide part of an API server's serving certificate (kubeadm's
/// `GetAPIServerAltNames`): `networking.serviceSubnet` (its first address), `networking.dnsDomain`
/// and `apiServer.certSANs`; the node's name and address and the `controlPlaneEndpoint` host are
/// added per server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Serving {
    pub service_subnet: String,
    pub dns_domain: String,
    pub cert_sans: Vec<String>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("version", &self.version)
            .field("etcd", &self.etcd)
            .field("cni", &self.cni)
            .finish_non_exhaustive()
    }
}

pub const KUBE_SYSTEM: &str = "kube-system";
pub const KUBEADM_CERTS: &str = "kubeadm-certs";
const TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

fn meta(ns: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: ns.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

/// A Secret's entry as text.
pub fn secret_str(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// A bootstrap token's expiry, `None` when it has none.
pub fn token_expiry(s: &Secret) -> Option<OffsetDateTime> {
    secret_str(s, "expiration").and_then(|e| OffsetDateTime::parse(&e, &Rfc3339).ok())
}

/// What `kubeadm init` knows of the cluster it makes.
#[derive(Debug, Clone)]
pub struct NewCluster {
    pub id: ClusterId,
    pub name: String,
    pub endpoint: Option<String>,
    pub ca_hash: String,
    pub version: Version,
    pub pod_subnet: Option<String>,
    pub serving: Serving,
    /// The first etcd member: the initialising control plane.
    pub first: EtcdMember,
}

impl Cluster {
    /// What `kubeadm init` makes before the node registers: namespaces, `cluster-info`,
    /// `kubeadm-config`.
    pub fn create(new: NewCluster, ca_pem: &[u8]) -> Result<Cluster, GuestError> {
        let NewCluster {
            id,
            name,
            endpoint,
            ca_hash,
            version,
            pod_subnet,
            serving,
            first,
        } = new;
        let kube = FakeKube::start_sync(kos_kube_fake::Config::default())?;
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            kube.insert(&Namespace {
                metadata: meta(None, ns),
                ..Namespace::default()
            })?;
        }
        let server = endpoint.clone().unwrap_or_default();
        let ca_b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_pem);
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://{server}\n    certificate-authority-data: {ca_b64}\ncontexts: null\ncurrent-context: \"\"\nusers: null\n"
        );
        kube.insert(&ConfigMap {
            metadata: meta(Some("kube-public"), "cluster-info"),
            data: Some(BTreeMap::from([("kubeconfig".to_owned(), kubeconfig)])),
            ..ConfigMap::default()
        })?;
        let cluster_config = format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: {name}\nkubernetesVersion: {version}\ncontrolPlaneEndpoint: {server}\n"
        );
        kube.insert(&ConfigMap {
            metadata: meta(Some(KUBE_SYSTEM), "kubeadm-config"),
            data: Some(BTreeMap::from([(
                "ClusterConfiguration".to_owned(),
                cluster_config,
            )])),
            ..ConfigMap::default()
        })?;
        Ok(Cluster {
            id,
            name,
            endpoint,
            ca_hash,
            version,
            upgrading_to: None,
            pod_subnet,
            etcd: vec![first],
            removed_members: Default::default(),
            etcd_raft: EtcdRaft::default(),
            cni: None,
            serving,
            kube,
        })
    }

    /// The bootstrap-token Secret kubeadm's `CreateNewTokens` writes.
    pub fn create_token(&self, t: &TokenSpec, now: OffsetDateTime) -> Result<Secret, GuestError> {
        let expires = now + t.ttl;
        let mut data = BTreeMap::from([
            ("token-id".to_owned(), t.token.id.clone()),
            ("token-secret".to_owned(), t.token.secret.clone()),
            ("expiration".to_owned(), rfc3339(expires)),
        ]);
        if !t.description.is_empty() {
            data.insert("description".into(), t.description.clone());
        }
        for u in &t.usages {
            data.insert(format!("usage-bootstrap-{u}"), "true".into());
        }
        if !t.groups.is_empty() {
            data.insert("auth-extra-groups".into(), t.groups.join(","));
        }
        let secret = Secret {
            metadata: meta(
                Some(KUBE_SYSTEM),
                &format!("bootstrap-token-{}", t.token.id),
            ),
            type_: Some(TOKEN_TYPE.into()),
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k, ByteString(v.into_bytes())))
                    .collect(),
            ),
            ..Secret::default()
        };
        Ok(self.kube.insert(&secret)?)
    }

    /// `kubeadm-certs`, owned by a short-lived token so that it goes when the token does.
    pub fn upload_certs(
        &self,
        entries: BTreeMap<String, Vec<u8>>,
        owner: &Secret,
    ) -> Result<(), GuestError> {
        let owner_ref = OwnerReference {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: owner.metadata.name.clone().unwrap_or_default(),
            uid: owner.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let mut m = meta(Some(KUBE_SYSTEM), KUBEADM_CERTS);
        m.owner_references = Some(vec![owner_ref]);
        self.kube.insert(&Secret {
            metadata: m,
            data: Some(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, ByteString(v)))
                    .collect(),
            ),
            ..Secret::default()
        })?;
        Ok(())
    }

    /// A Secret of kube-system, if present.
    pub fn secret(&self, name: &str) -> Result<Option<Secret>, GuestError> {
        Ok(self.kube.get::<Secret>(Some(KUBE_SYSTEM), name)?)
    }

    /// The token cleaner (kube-controller-manager) deletes expired bootstrap tokens; the garbage
    /// collector then deletes what they owned (`kubeadm-certs`).
    pub fn run_token_cleaner_and_gc(&self, now: OffsetDateTime) -> Result<(), GuestError> {
        let secrets = self.kube.list::<Secret>(Some(KUBE_SYSTEM))?;
        for s in &secrets {
            let expired =
                s.type_.as_deref() == Some(TOKEN_TYPE) && token_expiry(s).is_some_and(|e| e <= now);
            if expired && let Some(name) = &s.metadata.name {
                self.kube.delete::<Secret>(Some(KUBE_SYSTEM), name)?;
            }
        }
        let remaining = self.kube.list::<Secret>(Some(KUBE_SYSTEM))?;
        for s in &remaining {
            let orphaned = s.metadata.owner_references.as_ref().is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.kind == "Secret"
                        && !remaining
                            .iter()
                            .any(|o| o.metadata.uid.as_deref() == Some(r.uid.as_str()))
                })
            });
            if orphaned && let Some(name) = &s.metadata.name {
                self.kube.delete::<Secret>(Some(KUBE_SYSTEM), name)?;
            }
        }
        Ok(())
    }

    /// The etcd members whose control plane is up, given which servers are.
    pub fn healthy_members<'a>(&'a self, up: &dyn Fn(&ServerId) -> bool) -> Vec<&'a EtcdMember> {
        self.etcd.iter().filter(|m| up(&m.server)).collect()
    }

    /// etcd has quorum: more than half of the members are up.
    pub fn has_quorum(&self, up: &dyn Fn(&ServerId) -> bool) -> bool {
        self.healthy_members(up).len() * 2 > self.etcd.len()
    }

    /// etcd's cluster ID (stable for the cluster's life: derived from its identity).
    pub fn etcd_cluster_id(&self) -> u64 {
        use sha2::Digest;
        let d = sha2::Sha256::digest(format!("{}/{}", self.ca_hash, self.id.0).as_bytes());
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        u64::from_be_bytes(b).max(1)
    }
}
