//! Each control plane's kube-apiserver: its cluster's API served over TLS on a local port while the
//! server is on, with the serving certificate kubeadm's `certs/apiserver` phase issues from the CA
//! on the node's disk (`/etc/kubernetes/pki/apiserver.crt` and `.key`, written there once and reused),
//! and client certificates checked against that CA. `/readyz` follows the cluster's etcd quorum.
//! `/version` answers with the version of the API server that answers (its static pod's), so a
//! client through the endpoint sees whichever server the load balancer picked, as with kubectl
//! against a cluster mid-upgrade.
//!
//! kubeadm's SANs (`GetAPIServerAltNames`): DNS names the node name, `kubernetes`,
//! `kubernetes.default`, `kubernetes.default.svc`, `kubernetes.default.svc.<dnsDomain>`; IPs the
//! first address of the service subnet and the advertise address (the node's address); then the
//! `controlPlaneEndpoint` host and `apiServer.certSANs`, each as an IP or a DNS name.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use kos_kube_fake::{TlsFront, TlsServing};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};

use crate::bootstrap::steps::PKI_DIR;
use crate::cluster::{Cluster, ClusterId};
use crate::guest::{Guest, Power, Server};
use crate::seam::ServerId;

const SERVING_CERT: &str = "apiserver.crt";
const SERVING_KEY: &str = "apiserver.key";

/// The running API servers, by server.
#[derive(Default)]
pub(crate) struct Fronts {
    running: BTreeMap<ServerId, Running>,
    /// Why a server's API server could not start (reported once).
    failed: BTreeMap<ServerId, String>,
}

struct Running {
    cluster: ClusterId,
    front: TlsFront,
}

impl Fronts {
    /// Starts the API servers of control planes that are on, stops the others.
    pub fn reconcile(&mut self, guest: &mut Guest) {
        let wanted: BTreeMap<ServerId, ClusterId> = guest
            .servers
            .iter()
            .filter(|(_, s)| s.power == Power::On)
            .filter_map(|(id, s)| s.api_of.map(|c| (id.clone(), c)))
            .filter(|(_, c)| guest.clusters.contains_key(c))
            .collect();
        self.running
            .retain(|id, r| wanted.get(id) == Some(&r.cluster));
        self.failed.retain(|id, _| wanted.contains_key(id));
        for (id, cid) in &wanted {
            if self.running.contains_key(id) || self.failed.contains_key(id) {
                continue;
            }
            let (Some(srv), Some(cluster)) = (guest.servers.get_mut(id), guest.clusters.get(cid))
            else {
                continue;
            };
            match start(srv, cluster) {
                Ok((front, encryption)) => {
                    // In-process writes (kubeadm, controllers) go through the newest API server.
                    cluster.kube.set_encryption(encryption);
                    // The kube-apiserver its static pod runs answers /version with its own.
                    if let Some(v) = crate::static_pods::apiserver_version(&srv.vfs) {
                        front.set_version(v.major, v.minor, &v.to_string());
                    }
                    tracing::debug!(server = %id, cluster = %cid, addr = %front.addr(), "kube-apiserver serving");
                    self.running.insert(
                        id.clone(),
                        Running {
                            cluster: *cid,
                            front,
                        },
                    );
                }
                Err(why) => {
                    tracing::warn!(server = %id, "kube-apiserver of {cid} cannot serve: {why}");
                    self.failed.insert(id.clone(), why);
                }
            }
        }
        self.update_readiness(guest);
    }

    /// `/readyz`: the cluster's etcd has quorum and the node's own member (the API server's
    /// `--etcd-servers=https://127.0.0.1:2379`) is still in it.
    pub fn update_readiness(&self, guest: &Guest) {
        for (id, r) in &self.running {
            if let Some(c) = guest.clusters.get(&r.cluster) {
                let up = |m: &ServerId| guest.servers.get(m).is_some_and(|s| s.power == Power::On);
                let member = c.etcd.iter().any(|m| &m.server == id);
                r.front.set_ready(member && c.has_quorum(&up));
            }
        }
    }

    /// The local address of `server`'s API server, if it serves `cluster`.
    pub fn addr_of(&self, server: &ServerId, cluster: ClusterId) -> Option<SocketAddr> {
        self.running
            .get(server)
            .filter(|r| r.cluster == cluster)
            .map(|r| r.front.addr())
    }

    /// Every API server of a cluster.
    pub fn of_cluster(&self, cluster: ClusterId) -> Vec<SocketAddr> {
        self.running
            .values()
            .filter(|r| r.cluster == cluster)
            .map(|r| r.front.addr())
            .collect()
    }
}

/// The front and the encryption configuration it runs with (`--encryption-provider-config`, read
/// through the static pod's hostPath volume and parsed as kube-apiserver's loader does: a file it
/// refuses keeps the API server from starting).
fn start(
    srv: &mut Server,
    cluster: &Cluster,
) -> Result<(TlsFront, std::sync::Arc<kos_kube_fake::EncryptionConfig>), String> {
    let encryption = std::sync::Arc::new(
        crate::static_pods::apiserver_encryption(&srv.vfs)
            .map_err(|e| format!("kube-apiserver exited: {e}"))?,
    );
    let ca = srv
        .vfs
        .text(&format!("{PKI_DIR}/ca.crt"))
        .ok_or(
            "no CA certificate in /etc/kubernetes/pki (kubeadm generated one that is not on disk)",
        )?
        .to_owned();
    let (cert, key) = super::serving_pair(
        srv,
        &format!("{PKI_DIR}/{SERVING_CERT}"),
        &format!("{PKI_DIR}/{SERVING_KEY}"),
        &format!("{PKI_DIR}/ca.key"),
        |srv, ca_key| serving_certificate(srv, cluster, &ca, ca_key),
    )?;
    let front = cluster
        .kube
        .serve_tls_encrypted(
            &TlsServing {
                cert_chain_pem: cert,
                key_pem: key,
                client_ca_pem: ca,
            },
            encryption.clone(),
        )
        .map_err(|e| e.to_string())?;
    Ok((front, encryption))
}

/// The first address of a subnet (`10.96.0.0/12` → `10.96.0.1`): the `kubernetes` Service's IP.
fn first_service_ip(subnet: &str) -> Option<IpAddr> {
    let net: ipnet::IpNet = subnet.parse().ok()?;
    net.hosts().next()
}

/// The host of `host:port` (brackets stripped from an IPv6 address).
fn host_of(endpoint: &str) -> &str {
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The serving certificate and key kubeadm would issue for this node.
fn serving_certificate(
    srv: &Server,
    cluster: &Cluster,
    ca_pem: &str,
    ca_key_pem: &str,
) -> Result<(String, String), String> {
    let node = srv
        .kubelet
        .as_ref()
        .map_or(srv.meta.local_hostname.clone(), |k| k.node.clone());
    let s = srv.serving.as_ref().unwrap_or(&cluster.serving);
    let mut sans: Vec<String> = vec![
        node,
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        format!("kubernetes.default.svc.{}", s.dns_domain),
    ];
    sans.extend(first_service_ip(&s.service_subnet).map(|ip| ip.to_string()));
    sans.extend(srv.addresses.first().map(ToString::to_string));
    sans.extend(cluster.endpoint.as_deref().map(|e| host_of(e).to_owned()));
    sans.extend(s.cert_sans.iter().cloned());
    let mut seen = std::collections::BTreeSet::new();
    sans.retain(|x| seen.insert(x.clone()));
    let issuer = Issuer::from_ca_cert_pem(
        ca_pem,
        KeyPair::from_pem(ca_key_pem).map_err(|e| format!("CA key: {e}"))?,
    )
    .map_err(|e| format!("CA certificate: {e}"))?;
    let mut params = CertificateParams::new(sans).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = time::OffsetDateTime::now_utc();
    // kubeadm backdates by a few minutes for clock skew and issues for a year.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(365);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing the serving certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The CA certificate and key a control plane of `cluster` holds.
pub(crate) fn cluster_ca(guest: &Guest, cluster: ClusterId) -> Option<(String, String)> {
    guest
        .servers
        .values()
        .filter(|s| s.api_of == Some(cluster))
        .find_map(|s| {
            Some((
                s.vfs.text(&format!("{PKI_DIR}/ca.crt"))?.to_owned(),
                s.vfs.text(&format!("{PKI_DIR}/ca.key"))?.to_owned(),
            ))
        })
}
