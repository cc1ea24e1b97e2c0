//! Each control plane's etcd, as a client reaches it: the JSON of etcd's v3 gRPC gateway over TLS,
//! on a local port while the server is on and its member is in the cluster, reached through
//! `pods/portforward` of `etcd-<node>` port 2379 (the [`Kubelets`] backend of each cluster's API).
//!
//! - TLS as kubeadm runs etcd: the serving certificate is issued from the etcd CA on the node's
//!   disk (`/etc/kubernetes/pki/etcd/ca.crt`, `.key`) as kubeadm's `certs/etcd-server` phase does
//!   (SANs: node name, `localhost`, node IP, `127.0.0.1`, `::1`; written to `etcd/server.crt` and
//!   `.key`), and `--client-cert-auth=true`: a client certificate signed by that CA is required in
//!   the handshake.
//! - `POST /v3/cluster/member/list`, `/v3/cluster/member/remove` (`{"ID": "<id>"}`) and
//!   `/v3/maintenance/status`, with etcdserverpb's JSON names (uint64 as strings). Errors are the
//!   gateway's `{"error", "code", "message"}` with the gRPC code's HTTP status (NotFound 404,
//!   Unavailable 503).
//! - The model is the cluster's member list ([`crate::Cluster::etcd`]): quorum is a majority of its
//!   members up; a member without quorum answers `etcdserver: no leader` (status reports no leader);
//!   a removed member's etcd stops (`the member has been permanently removed from the cluster`), and
//!   the API server on its node loses its etcd (`/readyz` fails).
//! - The leader is the first member that is up (no elections are simulated); the raft term and
//!   index move with membership changes only.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kos_kube_fake::{ForwardError, PodStream, PortForward};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::bootstrap::steps::PKI_DIR;
use crate::cluster::{Cluster, ClusterId};
use crate::guest::{Guest, Power, Server};
use crate::kubelet::ETCD_VERSION;
use crate::seam::ServerId;

/// The port etcd serves clients on (kubeadm's `--listen-client-urls`).
pub const CLIENT_PORT: u16 = 2379;

/// The running etcd members, by server.
#[derive(Default)]
pub(crate) struct Etcds {
    running: BTreeMap<ServerId, Running>,
    failed: BTreeMap<ServerId, String>,
}

struct Running {
    member: u64,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What an etcd endpoint's requests act on: the runtime's state, without keeping it alive.
pub(crate) type Model = Weak<Mutex<super::Inner>>;

/// The member a server runs, if it is in its cluster.
fn member_of(guest: &Guest, id: &ServerId) -> Option<(ClusterId, u64)> {
    let s = guest.servers.get(id)?;
    let cid = s.api_of?;
    let c = guest.clusters.get(&cid)?;
    c.etcd.iter().find(|m| &m.server == id).map(|m| (cid, m.id))
}

impl Etcds {
    /// Starts the etcd of every control plane that is on and a member, stops the others.
    pub fn reconcile(&mut self, guest: &mut Guest, model: &Model) {
        let wanted: BTreeMap<ServerId, (ClusterId, u64)> = guest
            .servers
            .iter()
            .filter(|(_, s)| s.power == Power::On)
            .filter_map(|(id, _)| member_of(guest, id).map(|m| (id.clone(), m)))
            .collect();
        self.running
            .retain(|id, r| wanted.get(id).is_some_and(|(_, m)| *m == r.member));
        self.failed.retain(|id, _| wanted.contains_key(id));
        for (id, (cid, member)) in wanted {
            if self.running.contains_key(&id) || self.failed.contains_key(&id) {
                continue;
            }
            let Some(srv) = guest.servers.get_mut(&id) else {
                continue;
            };
            match start(srv, model.clone(), id.clone(), cid) {
                Ok((addr, task)) => {
                    tracing::debug!(server = %id, %addr, "etcd serving");
                    self.running.insert(id, Running { member, addr, task });
                }
                Err(why) => {
                    tracing::warn!(server = %id, "etcd of {cid} cannot serve: {why}");
                    self.failed.insert(id, why);
                }
            }
        }
    }

    /// Where a server's etcd listens, while it runs.
    pub fn addr_of(&self, server: &ServerId) -> Option<SocketAddr> {
        self.running.get(server).map(|r| r.addr)
    }
}

fn start(
    srv: &mut Server,
    model: Model,
    id: ServerId,
    cluster: ClusterId,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), String> {
    let ca = srv
        .vfs
        .text(&format!("{PKI_DIR}/etcd/ca.crt"))
        .ok_or("no etcd CA in /etc/kubernetes/pki/etcd")?
        .to_owned();
    let (cert, key) = super::serving_pair(
        srv,
        &format!("{PKI_DIR}/etcd/server.crt"),
        &format!("{PKI_DIR}/etcd/server.key"),
        &format!("{PKI_DIR}/etcd/ca.key"),
        |srv, ca_key| {
            let node = srv
                .kubelet
                .as_ref()
                .map_or(srv.meta.local_hostname.clone(), |k| k.node.clone());
            server_certificate(&node, srv.addresses.first().copied(), &ca, ca_key)
        },
    )?;
    let config = tls_config(&cert, &key, &ca)?;
    let std_listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .map_err(|e| e.to_string())?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::from_std(std_listener).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let me = Me {
        model,
        server: id,
        cluster,
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let task = tokio::spawn(accept_loop(listener, acceptor, me));
    Ok((addr, task))
}

/// kubeadm's `etcd/server.crt`: server and client auth, the node's names and addresses.
fn server_certificate(
    node: &str,
    ip: Option<IpAddr>,
    ca_pem: &str,
    ca_key_pem: &str,
) -> Result<(String, String), String> {
    let issuer = Issuer::from_ca_cert_pem(
        ca_pem,
        KeyPair::from_pem(ca_key_pem).map_err(|e| format!("etcd CA key: {e}"))?,
    )
    .map_err(|e| format!("etcd CA certificate: {e}"))?;
    let mut params = CertificateParams::new(vec![node.to_owned(), "localhost".to_owned()])
        .map_err(|e| e.to_string())?;
    for a in ip.into_iter().chain([
        IpAddr::from([127, 0, 0, 1]),
        IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
    ]) {
        if !params.subject_alt_names.contains(&SanType::IpAddress(a)) {
            params.subject_alt_names.push(SanType::IpAddress(a));
        }
    }
    params.distinguished_name.push(DnType::CommonName, node);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(365);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing etcd's serving certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// `--client-cert-auth=true --trusted-ca-file=etcd/ca.crt`: no certificate from that CA, no
/// handshake.
fn tls_config(cert: &str, key: &str, ca: &str) -> Result<ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("etcd serving certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
        .map_err(|e| format!("etcd serving key: {e}"))?;
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots
            .add(c.map_err(|e| format!("etcd CA: {e}"))?)
            .map_err(|e| format!("etcd CA: {e}"))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("etcd CA: {e}"))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("etcd serving certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Which member an endpoint is.
#[derive(Clone)]
struct Me {
    model: Model,
    server: ServerId,
    cluster: ClusterId,
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    me: Me,
) {
    let app = axum::Router::new()
        .route("/v3/cluster/member/list", axum::routing::post(member_list))
        .route(
            "/v3/cluster/member/remove",
            axum::routing::post(member_remove),
        )
        .route("/v3/maintenance/status", axum::routing::post(status))
        .with_state(me);
    let mut conns = JoinSet::new();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        while conns.try_join_next().is_some() {}
        let (acceptor, app) = (acceptor.clone(), app.clone());
        conns.spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!("etcd TLS handshake refused: {e}");
                    return;
                }
            };
            let svc = TowerToHyperService::new(app);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await
            {
                tracing::debug!("etcd connection: {e}");
            }
        });
    }
}

/// A gRPC error as etcd's gateway writes it: `{"error", "code", "message"}` with the code's HTTP
/// status.
#[derive(Debug, Clone, Copy)]
struct GrpcError {
    code: u16,
    http: StatusCode,
    message: &'static str,
}

impl IntoResponse for GrpcError {
    fn into_response(self) -> Response {
        (
            self.http,
            axum::Json(json!({"error": self.message, "code": self.code, "message": self.message})),
        )
            .into_response()
    }
}

fn grpc_error(code: u16, http: StatusCode, message: &'static str) -> GrpcError {
    GrpcError {
        code,
        http,
        message,
    }
}

const NOT_FOUND: u16 = 5;
const UNAVAILABLE: u16 = 14;

fn member_json(m: &crate::cluster::EtcdMember) -> Value {
    json!({
        "ID": m.id.to_string(),
        "name": m.name,
        "peerURLs": [m.peer_url()],
        "clientURLs": [m.client_url()],
        "isLearner": false,
    })
}

/// What a request sees: the cluster, this member, and whether it has quorum; or the error it
/// gets.
fn with_member<T>(
    me: &Me,
    f: impl FnOnce(&mut super::Inner, u64, bool) -> Result<T, GrpcError>,
) -> Result<T, GrpcError> {
    let Some(model) = me.model.upgrade() else {
        return Err(grpc_error(
            UNAVAILABLE,
            StatusCode::SERVICE_UNAVAILABLE,
            "etcdserver: server stopped",
        ));
    };
    let mut inner = model.lock().unwrap_or_else(PoisonError::into_inner);
    let Some((cid, id)) = member_of(&inner.guest, &me.server).filter(|(c, _)| *c == me.cluster)
    else {
        return Err(grpc_error(
            UNAVAILABLE,
            StatusCode::SERVICE_UNAVAILABLE,
            "etcdserver: the member has been permanently removed from the cluster",
        ));
    };
    let quorum = inner
        .guest
        .clusters
        .get(&cid)
        .is_some_and(|c| c.has_quorum(&|s| up(&inner.guest, s)));
    f(&mut inner, id, quorum)
}

fn up(guest: &Guest, s: &ServerId) -> bool {
    guest.servers.get(s).is_some_and(|x| x.power == Power::On)
}

fn header(c: &Cluster, member: u64) -> Value {
    json!({
        "cluster_id": c.etcd_cluster_id().to_string(),
        "member_id": member.to_string(),
        "revision": c.kube.resource_version().to_string(),
        "raft_term": c.etcd_raft.term.to_string(),
    })
}

fn no_leader() -> GrpcError {
    grpc_error(
        UNAVAILABLE,
        StatusCode::SERVICE_UNAVAILABLE,
        "etcdserver: no leader",
    )
}

async fn member_list(State(me): State<Me>) -> Response {
    let r = with_member(&me, |inner, id, quorum| {
        if !quorum {
            return Err(no_leader());
        }
        let c = inner
            .guest
            .clusters
            .get(&me.cluster)
            .ok_or_else(no_leader)?;
        Ok(json!({
            "header": header(c, id),
            "members": c.etcd.iter().map(member_json).collect::<Vec<_>>(),
        }))
    });
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The ID of a request body: a uint64 as a JSON string or number.
fn id_of(body: &Value) -> Option<u64> {
    match body.get("ID")? {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

async fn member_remove(State(me): State<Me>, body: axum::body::Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let target = id_of(&body).unwrap_or(0);
    let r = with_member(&me, |inner, id, quorum| {
        if !quorum {
            return Err(no_leader());
        }
        let c = inner
            .guest
            .clusters
            .get_mut(&me.cluster)
            .ok_or_else(no_leader)?;
        if !c.etcd.iter().any(|m| m.id == target) {
            return Err(grpc_error(
                NOT_FOUND,
                StatusCode::NOT_FOUND,
                "etcdserver: member not found",
            ));
        }
        if let Some(m) = c.etcd.iter().find(|m| m.id == target) {
            c.removed_members.insert(m.server.clone());
        }
        c.etcd.retain(|m| m.id != target);
        c.etcd_raft.index += 1;
        let out = json!({
            "header": header(c, id),
            "members": c.etcd.iter().map(member_json).collect::<Vec<_>>(),
        });
        // The removed member's etcd stops, and with it the API server that used it.
        let super::Inner { guest, fronts, .. } = inner;
        fronts.update_readiness(guest);
        Ok(out)
    });
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn status(State(me): State<Me>) -> Response {
    let r = with_member(&me, |inner, id, quorum| {
        let guest = &inner.guest;
        let c = guest.clusters.get(&me.cluster).ok_or_else(no_leader)?;
        let leader = if quorum {
            c.etcd
                .iter()
                .find(|m| up(guest, &m.server))
                .map_or(0, |m| m.id)
        } else {
            0
        };
        let mut v = json!({
            "header": header(c, id),
            "version": ETCD_VERSION,
            "dbSize": "2097152",
            "dbSizeInUse": "1048576",
            "leader": leader.to_string(),
            "raftIndex": c.etcd_raft.index.to_string(),
            "raftTerm": c.etcd_raft.term.to_string(),
            "raftAppliedIndex": c.etcd_raft.index.to_string(),
            "isLearner": false,
            "storageVersion": "3.6.0",
        });
        if !quorum {
            v["errors"] = json!(["etcdserver: no leader"]);
        }
        Ok(v)
    });
    match r {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The kubelets of one cluster, as its API server's port-forwarding reaches them: the pod's node
/// must run (else the apiserver cannot dial its kubelet), and only etcd's client port of
/// `etcd-<node>` accepts (nothing else runs in the simulated pods).
pub(crate) struct Kubelets {
    pub model: Model,
    pub cluster: ClusterId,
}

impl PortForward for Kubelets {
    fn connect(
        &self,
        pod: &Value,
        port: u16,
    ) -> BoxFuture<'static, Result<Box<dyn PodStream>, ForwardError>> {
        let s = |p: &str| {
            pod.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (node, component) = (s("/spec/nodeName"), s("/metadata/labels/component"));
        let target = self.target(&node, &component, port);
        Box::pin(async move {
            let addr = target?;
            let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| {
                ForwardError::Refused(format!("failed to connect to localhost:{port}: {e}"))
            })?;
            Ok(Box::new(tcp) as Box<dyn PodStream>)
        })
    }
}

impl Kubelets {
    fn target(&self, node: &str, component: &str, port: u16) -> Result<SocketAddr, ForwardError> {
        let refused = || {
            ForwardError::Refused(format!(
                "failed to connect to localhost:{port} inside namespace of the pod: connection refused"
            ))
        };
        let model = self.model.upgrade().ok_or_else(refused)?;
        let inner = model.lock().unwrap_or_else(PoisonError::into_inner);
        let server = inner.guest.servers.iter().find(|(_, s)| {
            s.kubelet
                .as_ref()
                .is_some_and(|k| k.cluster == self.cluster && k.node == node)
        });
        let Some((id, srv)) = server.filter(|(_, s)| s.power == Power::On) else {
            let ip = server
                .and_then(|(_, s)| s.addresses.first())
                .map_or_else(|| node.to_owned(), ToString::to_string);
            return Err(ForwardError::Unreachable(format!(
                "dial tcp {ip}:10250: connect: no route to host"
            )));
        };
        let _ = srv;
        if component != "etcd" || port != CLIENT_PORT {
            return Err(refused());
        }
        inner
            .etcds
            .addr_of(id)
            .filter(|_| member_of(&inner.guest, id).is_some())
            .ok_or_else(refused)
    }
}
