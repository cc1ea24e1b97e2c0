//! A TLS front for a fake: the same API served over HTTPS with a serving certificate and client
//! certificate authentication, as a kubeadm-made kube-apiserver serves it (`--tls-cert-file`,
//! `--client-ca-file`, anonymous requests allowed, bootstrap tokens on).
//!
//! Authentication, as kube-apiserver's authenticators decide it:
//! - a client certificate is requested, never required; one that does not chain to the client CA
//!   is refused **401 Unauthorized** (the x509 authenticator fails, it does not fall back to
//!   anonymous);
//! - without a certificate, `Authorization: Bearer <id>.<secret>` of a bootstrap-token Secret in
//!   `kube-system` (unexpired, `usage-bootstrap-authentication: "true"`) authenticates as
//!   `system:bootstrap:<id>` (groups `system:bootstrappers` and its `auth-extra-groups`);
//!   `system:bootstrap:<id>`; a ServiceAccount token the fake issued (module `authn`) as the
//!   ServiceAccount; any other bearer token is 401;
//! - without either, the request is `system:anonymous` in `system:unauthenticated`.
//!
//! A trusted certificate is the user its subject names (common name; organisations as groups).
//! Every user is then authorised (module `authz`): `system:masters`, then RBAC; a denial is
//! **403 Forbidden** in kube-apiserver's words. Anonymous users get what RBAC gives them:
//! `/version` (`system:public-info-viewer`) and what kubeadm's bindings add (`cluster-info`).
//! `/healthz`, `/livez` and `/readyz` answer `ok` before authorisation; while the front is marked not ready ([`TlsFront::set_ready`], an etcd without
//! quorum) `/readyz` fails and every other request times out as etcd's do.
//!
//! Each front is one kube-apiserver: given its version ([`TlsFront::set_version`]), its `/version`
//! answers with it (served without etcd, as kube-apiserver serves it), so fronts of one fake at
//! different versions answer differently, as the API servers of a cluster mid-upgrade do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::authz::User;
use crate::error::ApiError;
use crate::server::{Admitted, Shared};
use crate::{FakeError, FakeKube};

/// What a TLS front serves with. The key is never printed.
#[derive(Clone)]
pub struct TlsServing {
    /// The serving certificate (PEM), then any intermediates.
    pub cert_chain_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// The CA that client certificates must chain to (kube-apiserver's `--client-ca-file`).
    pub client_ca_pem: String,
}

impl std::fmt::Debug for TlsServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServing").finish_non_exhaustive()
    }
}

/// A running TLS front. Dropping it closes the listener and every connection it accepted.
pub struct TlsFront {
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    version: Arc<std::sync::RwLock<Option<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for TlsFront {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFront")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl TlsFront {
    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Marks the API server ready (its etcd has quorum) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The version this API server runs (`gitVersion` as `v1.35.2`), answered on `/version`.
    pub fn set_version(&self, major: u32, minor: u32, git_version: &str) {
        let doc = crate::discovery::version_of(major, minor, git_version);
        *self
            .version
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(doc);
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Who the connection's client certificate says the client is.
#[derive(Debug, Clone)]
enum Peer {
    None,
    /// Chains to the client CA: its subject's user.
    Verified(User),
    /// Presented, but does not chain to the client CA (the reason, for the log).
    Refused(String),
}

/// Requests client certificates without requiring them and accepts any at the TLS layer (checking
/// only that the client holds the key): whether the certificate is trusted is decided per request,
/// as kube-apiserver's x509 authenticator does, so an untrusted one is a 401, not a failed
/// handshake.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> FakeError {
    FakeError::Tls(format!("{what}: {e}"))
}

/// The server config and the verifier that decides, per connection, whether a client certificate
/// is trusted.
fn configs(s: &TlsServing) -> Result<(ServerConfig, Arc<dyn ClientCertVerifier>), FakeError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(s.cert_chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| tls_err("serving certificate", e))?;
    let key = PrivateKeyDer::from_pem_slice(s.key_pem.as_bytes())
        .map_err(|e| tls_err("serving key", e))?;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(s.client_ca_pem.as_bytes()) {
        let ca = ca.map_err(|e| tls_err("client CA", e))?;
        roots.add(ca).map_err(|e| tls_err("client CA", e))?;
    }
    let hints = roots.subjects();
    let trusted = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| tls_err("client CA", e))?;
    let requesting = Arc::new(RequestClientCert {
        hints,
        provider: provider.clone(),
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("TLS versions", e))?
        .with_client_cert_verifier(requesting)
        .with_single_cert(chain, key)
        .map_err(|e| tls_err("serving certificate", e))?;
    // HTTP/1.1 only: kubectl and kube-rs negotiate it when offered alone (watches stream chunked).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, trusted))
}

impl FakeKube {
    /// Serves this fake's API over TLS on `127.0.0.1:0` (see the module docs for who may do
    /// what). Call it inside a tokio runtime, from async or synchronous code.
    ///
    /// # Errors
    /// [`FakeError::Tls`] for unusable certificates or keys, [`FakeError::Start`] when no port can
    /// be bound or no runtime is running.
    pub fn serve_tls(&self, serving: &TlsServing) -> Result<TlsFront, FakeError> {
        self.serve_tls_encrypted(
            serving,
            Arc::new(crate::encryption::EncryptionConfig::none()),
        )
    }

    /// As [`FakeKube::serve_tls`], for a kube-apiserver started with
    /// `--encryption-provider-config`: Secrets written through this front are sealed by its
    /// first provider, and read through it only when one of its providers opens them.
    ///
    /// # Errors
    /// As [`FakeKube::serve_tls`].
    pub fn serve_tls_encrypted(
        &self,
        serving: &TlsServing,
        encryption: Arc<crate::encryption::EncryptionConfig>,
    ) -> Result<TlsFront, FakeError> {
        let (config, trusted) = configs(serving)?;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| FakeError::Start(std::io::Error::other(e)))?;
        let std_listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(FakeError::Start)?;
        std_listener
            .set_nonblocking(true)
            .map_err(FakeError::Start)?;
        let _entered = handle.enter();
        let listener = tokio::net::TcpListener::from_std(std_listener).map_err(FakeError::Start)?;
        let addr = listener.local_addr().map_err(FakeError::Start)?;
        let ready = Arc::new(AtomicBool::new(true));
        let version = Arc::new(std::sync::RwLock::new(None));
        let state = Front {
            shared: self.shared.clone(),
            ready: ready.clone(),
            version: version.clone(),
            encryption,
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(accept_loop(listener, acceptor, trusted, state));
        Ok(TlsFront {
            addr,
            ready,
            version,
            task,
        })
    }
}

#[derive(Clone)]
struct Front {
    shared: Arc<Shared>,
    ready: Arc<AtomicBool>,
    version: Arc<std::sync::RwLock<Option<Value>>>,
    encryption: Arc<crate::encryption::EncryptionConfig>,
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    trusted: Arc<dyn ClientCertVerifier>,
    front: Front,
) {
    let base = crate::server::router(front.shared.clone()).layer(
        axum::middleware::from_fn_with_state(front.clone(), authenticate),
    );
    // Connections die with the front (a server powered off closes its sockets).
    let mut conns = JoinSet::new();
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("kos-kube-fake TLS accept: {e}");
                continue;
            }
        };
        while conns.try_join_next().is_some() {}
        let (acceptor, trusted, base) = (acceptor.clone(), trusted.clone(), base.clone());
        conns.spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!("kos-kube-fake TLS handshake: {e}");
                    return;
                }
            };
            let peer = match tls.get_ref().1.peer_certificates() {
                Some([ee, rest @ ..]) => {
                    match trusted.verify_client_cert(ee, rest, UnixTime::now()) {
                        Ok(_) => match crate::authn::certificate_user(ee) {
                            Some(user) => Peer::Verified(user),
                            None => Peer::Refused("no common name in the subject".into()),
                        },
                        Err(e) => Peer::Refused(e.to_string()),
                    }
                }
                _ => Peer::None,
            };
            let svc = TowerToHyperService::new(base.layer(axum::Extension(peer)));
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .with_upgrades()
                .await;
            if let Err(e) = served {
                tracing::debug!("kos-kube-fake TLS connection: {e}");
            }
        });
    }
}

async fn authenticate(
    State(front): State<Front>,
    axum::Extension(peer): axum::Extension<Peer>,
    mut req: Request,
    next: Next,
) -> Response {
    let user = match (&peer, crate::authn::bearer(req.headers())) {
        (Peer::Refused(why), _) => {
            tracing::debug!("kos-kube-fake: client certificate refused: {why}");
            return ApiError::for_code(401, "Unauthorized").into_response();
        }
        (Peer::Verified(user), _) => user.clone(),
        (Peer::None, Some(token)) => match front.shared.authenticate_token(&token) {
            Some(user) => user,
            None => return ApiError::for_code(401, "Unauthorized").into_response(),
        },
        (Peer::None, None) => User::anonymous(),
    };
    let path = req.uri().path().to_owned();
    let ready = front.ready.load(Ordering::Relaxed);
    // Served before etcd and authorisation; `system:public-info-viewer` allows them to everyone.
    match path.as_str() {
        "/healthz" | "/livez" => return plain(StatusCode::OK, "ok"),
        "/readyz" if ready => return plain(StatusCode::OK, "ok"),
        "/readyz" => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "[-]etcd failed: reason withheld\nreadyz check failed",
            );
        }
        _ => {}
    }
    if let Err(e) = front.shared.authorize(&user, req.method(), req.uri()) {
        return e.into_response();
    }
    if path.trim_end_matches('/') == "/version" {
        let own = front
            .version
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(doc) = own {
            return crate::server::json_response(StatusCode::OK, &doc);
        }
    }
    if !ready {
        return ApiError::for_code(504, "etcdserver: request timed out").into_response();
    }
    req.extensions_mut().insert(Admitted(user));
    req.extensions_mut()
        .insert(crate::server::Encrypting(front.encryption.clone()));
    next.run(req).await
}

fn plain(code: StatusCode, text: &'static str) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}
