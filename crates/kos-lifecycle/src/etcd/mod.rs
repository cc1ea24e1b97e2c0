//! kos's etcd client: the v3 gRPC gateway's JSON over HTTP/1.1, over TLS to the member (server verified
//! for `localhost`, as kubeadm's etcd serving certificates name it; a short-lived client certificate
//! signed by the cluster's etcd CA), over whatever stream a [`Dial`] opens: a port-forward to the
//! member's pod through the API server (as Cluster API reaches etcd), or a TCP stream in tests.

mod http;
pub mod wire;

use std::sync::Arc;

use kos_bootstrap::ClusterSecrets;
use kos_bootstrap::pki::{CaKind, sign_client_valid_for};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::de::DeserializeOwned;
use time::{Duration, OffsetDateTime};
use tokio::io::{AsyncRead, AsyncWrite};

pub use wire::{Member, MemberId, Status};

/// The common name of kos's etcd client certificate.
pub const CLIENT_CN: &str = "kos-etcd-client";
/// How long that certificate is valid: one run; it is never stored.
pub const CLIENT_VALIDITY: Duration = Duration::hours(1);
/// How long one call (dial, TLS, request and answer) may take: a port-forward whose far end never
/// answers (a kubelet or member that hangs) must fail the run, not hold it forever.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("cannot make kos's etcd client identity: {0}")]
    Identity(String),
    #[error("cannot reach etcd: {what}")]
    Transport {
        what: Step,
        #[source]
        source: Option<crate::api::Cause>,
    },
    #[error("etcd answered {path} with HTTP {status}: {message}")]
    Api {
        path: &'static str,
        status: u16,
        message: String,
    },
    #[error("etcd's answer to {path} is not what its gateway sends: {reason}")]
    Decode { path: &'static str, reason: String },
}

/// Where on the way to etcd a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Opening the stream to `target` (a port-forward to a pod, a TCP address).
    Dial { target: String },
    /// The TLS handshake (etcd's certificate, or kos's refused).
    Tls,
    /// Reading or writing the connection.
    Connection,
    /// No answer to `path` within `after`.
    Timeout {
        path: &'static str,
        after: std::time::Duration,
    },
    /// An answer that is not HTTP as etcd's gateway sends it.
    MalformedHttp(&'static str),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Dial { target } => f.write_str(target),
            Step::Tls => f.write_str("TLS with etcd"),
            Step::Connection => f.write_str("the connection"),
            Step::Timeout { path, after } => {
                write!(f, "{path}: no answer within {} s", after.as_secs_f64())
            }
            Step::MalformedHttp(what) => {
                write!(f, "etcd's gateway answered malformed HTTP: {what}")
            }
        }
    }
}

impl EtcdError {
    /// A transport failure at `what`, caused by `source`.
    pub fn transport(what: Step, source: impl Into<crate::api::Cause>) -> EtcdError {
        EtcdError::Transport {
            what,
            source: Some(source.into()),
        }
    }
}

/// Opens a fresh byte stream to one etcd member's client port (2379).
pub trait Dial: Send + Sync {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send;
    fn dial(&self) -> impl std::future::Future<Output = Result<Self::Stream, EtcdError>> + Send;
}

/// TLS to etcd: the etcd CA as the only root, the server verified for `localhost`, kos's client
/// certificate presented.
#[derive(Clone)]
pub struct EtcdTls {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds the client's private key.
        f.write_str("EtcdTls")
    }
}

impl EtcdTls {
    /// A client identity signed now by the cluster's etcd CA, valid for [`CLIENT_VALIDITY`].
    ///
    /// # Errors
    /// The stored etcd CA cannot sign, or rustls refuses the result.
    pub fn for_cluster(secrets: &ClusterSecrets, now: OffsetDateTime) -> Result<Self, EtcdError> {
        let (cert, key) = sign_client_valid_for(
            &mut rand::rng(),
            &secrets.etcd_ca,
            CaKind::Etcd,
            CLIENT_CN,
            &[],
            now,
            CLIENT_VALIDITY,
        )
        .map_err(|e| EtcdError::Identity(e.to_string()))?;
        Self::new(&secrets.etcd_ca.cert_pem, &cert, key.expose())
    }

    /// From PEMs: the CA that signed the members' serving certificates, kos's client chain and key.
    ///
    /// # Errors
    /// A PEM does not parse, or rustls refuses them.
    pub fn new(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Self, EtcdError> {
        let id =
            |what: &str, e: &dyn std::fmt::Display| EtcdError::Identity(format!("{what}: {e}"));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(ca.map_err(|e| id("etcd CA", &e))?)
                .map_err(|e| id("etcd CA", &e))?;
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| id("client certificate", &e))?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| id("client key", &e))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| id("TLS", &e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| id("client certificate", &e))?;
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

/// One etcd member reached through `D`.
#[derive(Debug)]
pub struct EtcdClient<D> {
    dial: D,
    tls: EtcdTls,
    timeout: std::time::Duration,
}

impl<D: Dial> EtcdClient<D> {
    pub fn new(dial: D, tls: EtcdTls) -> Self {
        Self {
            dial,
            tls,
            timeout: CALL_TIMEOUT,
        }
    }

    /// Another bound for each call than [`CALL_TIMEOUT`].
    #[must_use]
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `POST /v3/cluster/member/list`.
    ///
    /// # Errors
    /// Unreachable, refused, or an answer that is no member list.
    pub async fn member_list(&self) -> Result<Vec<Member>, EtcdError> {
        let l: wire::MemberList = self.call("/v3/cluster/member/list", b"{}").await?;
        Ok(l.members)
    }

    /// `POST /v3/maintenance/status` of the member this client reaches.
    ///
    /// # Errors
    /// Unreachable, refused, or an answer that is no status.
    pub async fn status(&self) -> Result<Status, EtcdError> {
        self.call("/v3/maintenance/status", b"{}").await
    }

    /// `POST /v3/cluster/member/remove`. A member etcd no longer knows counts as removed: a run that was
    /// stopped after the removal and runs again must go on (etcd answers gRPC NotFound, "member not
    /// found", which the gateway turns into HTTP 404).
    ///
    /// # Errors
    /// Unreachable, or etcd refused the removal (e.g. it would lose quorum, or the cluster is unhealthy).
    pub async fn member_remove(&self, id: MemberId) -> Result<(), EtcdError> {
        let body =
            serde_json::to_vec(&wire::MemberRemove { id }).map_err(|e| EtcdError::Decode {
                path: "/v3/cluster/member/remove",
                reason: e.to_string(),
            })?;
        match self
            .call::<serde_json::Value>("/v3/cluster/member/remove", &body)
            .await
        {
            Ok(_) => Ok(()),
            Err(EtcdError::Api {
                status, message, ..
            }) if status == 404 || message.contains("member not found") => {
                tracing::info!(member = %id, "etcd member already removed");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        path: &'static str,
        body: &[u8],
    ) -> Result<T, EtcdError> {
        tokio::time::timeout(self.timeout, self.call_once(path, body))
            .await
            .map_err(|_| EtcdError::Transport {
                what: Step::Timeout {
                    path,
                    after: self.timeout,
                },
                source: None,
            })?
    }

    async fn call_once<T: DeserializeOwned>(
        &self,
        path: &'static str,
        body: &[u8],
    ) -> Result<T, EtcdError> {
        let stream = self.dial.dial().await?;
        let connector = tokio_rustls::TlsConnector::from(self.tls.config.clone());
        let name =
            ServerName::try_from("localhost").map_err(|e| EtcdError::transport(Step::Tls, e))?;
        let mut tls = connector
            .connect(name, stream)
            .await
            .map_err(|e| EtcdError::transport(Step::Tls, e))?;
        let (status, answer) = http::post(&mut tls, path, body).await?;
        if !(200..300).contains(&status) {
            let e: wire::GatewayError = serde_json::from_slice(&answer).unwrap_or_default();
            let message = e
                .message
                .or(e.error)
                .unwrap_or_else(|| String::from_utf8_lossy(&answer).chars().take(300).collect());
            return Err(EtcdError::Api {
                path,
                status,
                message,
            });
        }
        serde_json::from_slice(&answer).map_err(|e| EtcdError::Decode {
            path,
            reason: e.to_string(),
        })
    }
}
