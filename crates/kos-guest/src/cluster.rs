//! A simulated cluster: its Kubernetes API (a [`FakeKube`] holding Namespaces, Secrets, ConfigMaps,
//! Nodes and whatever the addons apply) and what kubeadm keeps outside it: the cluster's identity and
//! CA, its etcd membership, and which CNI network it runs. Its Kubernetes version is not kept here:
//! as for kubeadm, it is the `kubernetesVersion` of the ClusterConfiguration in the
//! `kube-system/kubeadm-config` ConfigMap ([`Cluster::cluster_configuration`]), which a client may
//! change (Cluster API does before it rolls control planes), and each API server runs the version
//! its static pod was written with. The controllers that act on
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
use crate::kubeadm::config::{self, ClusterDoc, TokenSpec};
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
    /// The minor its API server behaved as when the cluster was made (the fake's feature gates).
    pub minor: u32,
    pub kube: FakeKube,
    /// The CertificateSigningRequests kube-controller-manager's certificate controllers last
    /// handled, by name, at the resourceVersion they saw (their watch's memory: a request is
    /// handled again when it changes).
    pub(crate) csrs_seen: std::sync::Mutex<BTreeMap<String, String>>,
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

impl Serving {
    /// What a ClusterConfiguration puts into an API server's certificate.
    #[must_use]
    pub fn of(c: &crate::kubeadm::config::ClusterDoc) -> Self {
        Serving {
            service_subnet: c.service_subnet.to_string(),
            dns_domain: c.dns_domain.clone(),
            cert_sans: c.cert_sans.clone(),
        }
    }
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("etcd", &self.etcd)
            .field("cni", &self.cni)
            .finish_non_exhaustive()
    }
}

pub const KUBE_SYSTEM: &str = "kube-system";
pub const KUBEADM_CERTS: &str = "kubeadm-certs";
/// kubeadm's `KubeadmConfigConfigMap` and its `ClusterConfigurationConfigMapKey`.
pub const KUBEADM_CONFIG: &str = "kubeadm-config";
pub const CLUSTER_CONFIGURATION_KEY: &str = "ClusterConfiguration";
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
    /// The ClusterConfiguration init ran with (uploaded to `kubeadm-config`).
    pub configuration: ClusterDoc,
    pub pod_subnet: Option<String>,
    pub serving: Serving,
    /// The first etcd member: the initialising control plane.
    pub first: EtcdMember,
    /// The version of the kubeadm that runs `init` (it decides admin.conf's group).
    pub kubeadm: Version,
}

impl Cluster {
    /// What `kubeadm init` makes before the node registers: the API server's namespaces, then
    /// with kubeadm's own credentials (its `Client()`: the `kubeadm:cluster-admins` binding as
    /// `super-admin.conf` once admin.conf is refused, every other write as admin.conf)
    /// `cluster-info`, `kubeadm-config` and kubeadm's RBAC ([`crate::kubeadm::rbac`]).
    pub fn create(new: NewCluster, ca_pem: &[u8]) -> Result<Cluster, GuestError> {
        let NewCluster {
            id,
            name,
            endpoint,
            ca_hash,
            configuration,
            pod_subnet,
            serving,
            first,
            kubeadm,
        } = new;
        // The API server serves as the minor kubeadm init ran (feature gates differ by minor).
        let minor = configuration.kubernetes_version.minor;
        let kube = FakeKube::start_sync(kos_kube_fake::Config {
            minor,
            ..kos_kube_fake::Config::default()
        })?;
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            kube.insert(&Namespace {
                metadata: meta(None, ns),
                ..Namespace::default()
            })?;
        }
        let admin = ensure_admin_binding(&kube, kubeadm)?;
        let server = endpoint.clone().unwrap_or_default();
        let ca_b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_pem);
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: https://{server}\n    certificate-authority-data: {ca_b64}\ncontexts: null\ncurrent-context: \"\"\nusers: null\n"
        );
        admin.create(&ConfigMap {
            metadata: meta(Some("kube-public"), "cluster-info"),
            data: Some(BTreeMap::from([("kubeconfig".to_owned(), kubeconfig)])),
            ..ConfigMap::default()
        })?;
        admin.create(&ConfigMap {
            metadata: meta(Some(KUBE_SYSTEM), KUBEADM_CONFIG),
            data: Some(BTreeMap::from([(
                CLUSTER_CONFIGURATION_KEY.to_owned(),
                config::render_cluster_configuration(&configuration),
            )])),
            ..ConfigMap::default()
        })?;
        // The API server authorises every request: kubeadm's bindings are what admin.conf, joining
        // nodes and anonymous discovery rely on.
        let rbac = crate::kubeadm::rbac::init();
        for o in &rbac.cluster_roles {
            admin.create(o)?;
        }
        for o in &rbac.cluster_role_bindings {
            admin.create(o)?;
        }
        for o in &rbac.roles {
            admin.create(o)?;
        }
        for o in &rbac.role_bindings {
            admin.create(o)?;
        }
        drop(admin);
        Ok(Cluster {
            id,
            name,
            endpoint,
            ca_hash,
            pod_subnet,
            etcd: vec![first],
            removed_members: Default::default(),
            etcd_raft: EtcdRaft::default(),
            cni: None,
            serving,
            minor,
            kube,
            csrs_seen: Default::default(),
        })
    }

    /// The ClusterConfiguration of `kube-system/kubeadm-config`, read as kubeadm's
    /// `FetchInitConfigurationFromCluster` reads it (and parsed as strictly as a config file); the
    /// inner error is kubeadm's text, without its "unable to fetch the kubeadm-config ConfigMap"
    /// prefix.
    pub fn cluster_configuration(&self) -> Result<Result<ClusterDoc, String>, GuestError> {
        let Some(cm) = self
            .kube
            .get::<ConfigMap>(Some(KUBE_SYSTEM), KUBEADM_CONFIG)?
        else {
            return Ok(Err(format!(
                "failed to get config map: configmaps \"{KUBEADM_CONFIG}\" not found"
            )));
        };
        let Some(text) = cm
            .data
            .as_ref()
            .and_then(|d| d.get(CLUSTER_CONFIGURATION_KEY))
        else {
            return Ok(Err(format!(
                "unexpected error when reading {KUBEADM_CONFIG} ConfigMap: {CLUSTER_CONFIGURATION_KEY} key value pair missing"
            )));
        };
        Ok(config::parse_cluster_configuration(text)
            .map_err(|e| format!("failed to decode cluster configuration data: {e}")))
    }

    /// What kubeadm `kubeadm` does with admin.conf.
    pub fn kubeadm_admin(&self, kubeadm: Version) -> kos_kube_fake::Acting<'_> {
        self.kube
            .acting_as(crate::kubeadm::rbac::admin(kubeadm), "kubeadm")
    }

    /// The bootstrap-token Secret kubeadm's `CreateNewTokens` writes (with admin.conf).
    pub fn create_token(
        &self,
        t: &TokenSpec,
        now: OffsetDateTime,
        kubeadm: Version,
    ) -> Result<Secret, GuestError> {
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
        Ok(self.kubeadm_admin(kubeadm).create(&secret)?)
    }

    /// `kubeadm-certs`, owned by a short-lived token so that it goes when the token does
    /// (with admin.conf).
    pub fn upload_certs(
        &self,
        entries: BTreeMap<String, Vec<u8>>,
        owner: &Secret,
        kubeadm: Version,
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
        self.kubeadm_admin(kubeadm).create(&Secret {
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

    /// The token cleaner (kube-controller-manager, as its ServiceAccount) deletes expired
    /// bootstrap tokens; the garbage collector (as `generic-garbage-collector`) then deletes what
    /// they owned (`kubeadm-certs`).
    /// A controller refused by the API server logs it and tries again on its next pass.
    pub fn run_token_cleaner_and_gc(&self, now: OffsetDateTime) -> Result<(), GuestError> {
        let refused = |who: &str, r: Result<(), kos_kube_fake::FakeError>| match r {
            Err(kos_kube_fake::FakeError::Api(e)) if e.code == 403 => {
                tracing::warn!(cluster = %self.id, "{who}: {}", e.message);
                Ok(())
            }
            other => other,
        };
        let cleaner = controller(&self.kube, "token-cleaner");
        refused("token-cleaner", clean_tokens(&cleaner, now))?;
        let gc = controller(&self.kube, "generic-garbage-collector");
        refused("generic-garbage-collector", self.collect_garbage(&gc))?;
        Ok(())
    }

    /// The garbage collector's pass over kube-system's Secrets: one whose owner is gone goes.
    fn collect_garbage(
        &self,
        gc: &kos_kube_fake::Acting<'_>,
    ) -> Result<(), kos_kube_fake::FakeError> {
        let remaining = gc.list::<Secret>(Some(KUBE_SYSTEM), "")?;
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
                gc.delete::<Secret>(Some(KUBE_SYSTEM), name)?;
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

/// The token cleaner's pass: expired bootstrap tokens go.
fn clean_tokens(
    cleaner: &kos_kube_fake::Acting<'_>,
    now: OffsetDateTime,
) -> Result<(), kos_kube_fake::FakeError> {
    for s in &cleaner.list::<Secret>(Some(KUBE_SYSTEM), "")? {
        let expired =
            s.type_.as_deref() == Some(TOKEN_TYPE) && token_expiry(s).is_some_and(|e| e <= now);
        if expired && let Some(name) = &s.metadata.name {
            cleaner.delete::<Secret>(Some(KUBE_SYSTEM), name)?;
        }
    }
    Ok(())
}

/// kubeadm's `EnsureAdminClusterRoleBinding` (kubeadm 1.29+): admin.conf tries to create the
/// `kubeadm:cluster-admins` binding that makes it an admin; refused (it is not one yet),
/// super-admin.conf creates it. Older kubeadm's admin.conf is in `system:masters`. Returns
/// admin.conf's client.
fn ensure_admin_binding(
    kube: &FakeKube,
    kubeadm: Version,
) -> Result<kos_kube_fake::Acting<'_>, GuestError> {
    use crate::kubeadm::rbac;
    let admin = kube.acting_as(rbac::admin(kubeadm), "kubeadm");
    if kubeadm.minor < 29 {
        return Ok(admin);
    }
    match admin.create(&rbac::cluster_admins_binding()) {
        Ok(_) => {}
        Err(kos_kube_fake::FakeError::Api(e)) if e.code == 409 => {}
        Err(kos_kube_fake::FakeError::Api(e)) if e.code == 403 => {
            let super_admin = kube.acting_as(rbac::super_admin(), "kubeadm");
            match super_admin.create(&rbac::cluster_admins_binding()) {
                Ok(_) => {}
                Err(kos_kube_fake::FakeError::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(admin)
}

/// A kube-controller-manager controller acting as its ServiceAccount `kube-system/<name>`
/// (kubeadm runs kube-controller-manager with `--use-service-account-credentials=true`), bound
/// to `system:controller:<name>`.
pub fn controller<'a>(kube: &'a kos_kube_fake::FakeKube, name: &str) -> kos_kube_fake::Acting<'a> {
    kube.acting_as(
        kos_kube_fake::User::service_account(KUBE_SYSTEM, name),
        "kube-controller-manager",
    )
}
