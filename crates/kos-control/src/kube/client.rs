//! The client: kube-rs with kos's admin certificate, the cluster CA as its only root, and requests
//! of JSON by path. On a simulated cloud it connects to the endpoint's local address and still
//! verifies the serving certificate for the endpoint's name, as kubectl does with
//! `tls-server-name`.
//!
//! One request per call: kube-rs's own retry of 429, 503 and 504 is off, so a caller that retries
//! (the drain, a 429 of an eviction included) decides when. Every request ends within
//! [`REQUEST_TIMEOUT`]; port-forwards ([`Kube::client`]) only have the connection's timeouts.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Method, Request};
use kos_bootstrap::pki::{self, CaKind};
use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use serde_json::Value;
use time::OffsetDateTime;

use super::KubeError;

/// How long a TCP connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may stay silent while it is read (a port-forward's stream too).
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one request may take, answer included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Why no client could be made. Nothing here holds the client key.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot sign kos's admin client certificate")]
    Certificate(#[source] kos_bootstrap::Error),
    #[error("the cluster CA is not a PEM certificate")]
    ClusterCa(#[source] Option<rustls::pki_types::pem::Error>),
    #[error("{address} is not an address of the API")]
    Address {
        address: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The proxy URL is not shown: it may carry credentials.
    #[error("HTTPS_PROXY is not a URL")]
    Proxy {
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("cannot make the client of the cluster's API")]
    Client(#[source] kube::Error),
}

/// A client of one cluster's API.
#[derive(Clone)]
pub struct Kube {
    client: kube::Client,
}

impl Kube {
    /// A client of the API at `endpoint`, or at `local` (a simulated cloud's forwarder of it)
    /// verifying the serving certificate for the endpoint's host. Its client certificate is
    /// kos's admin, signed now by the cluster CA for the admin group of Kubernetes `version`.
    pub fn connect(
        endpoint: &ApiEndpoint,
        local: Option<SocketAddr>,
        version: &KubeVersion,
        secrets: &ClusterSecrets,
    ) -> Result<Kube, ConnectError> {
        // HTTPS_PROXY and NO_PROXY, as kubectl honours them for this host; a local forwarder is
        // this machine's and never proxied.
        let proxy = match local {
            Some(_) => None,
            None => super::proxy::from_env(&endpoint.host),
        };
        Self::connect_through(endpoint, local, version, secrets, proxy.as_deref())
    }

    /// [`Kube::connect`] through the HTTP proxy at `proxy` (a CONNECT tunnel), or direct.
    pub fn connect_through(
        endpoint: &ApiEndpoint,
        local: Option<SocketAddr>,
        version: &KubeVersion,
        secrets: &ClusterSecrets,
        proxy: Option<&str>,
    ) -> Result<Kube, ConnectError> {
        let (cert, key) = admin_certificate(version, secrets)?;
        let at = local.map_or_else(|| endpoint.to_string(), |l| l.to_string());
        let url: http::Uri =
            format!("https://{at}")
                .parse()
                .map_err(|source| ConnectError::Address {
                    address: at.clone(),
                    source,
                })?;
        let mut config = kube::Config::new(url);
        // The cluster CA is the only root: no system store, no other cluster's CA.
        config.root_cert = Some(vec![pem_der(&secrets.ca.cert_pem)?]);
        config.tls_server_name = local.map(|_| endpoint.host.clone());
        config.auth_info.client_certificate_data = Some(b64(&cert));
        config.auth_info.client_key_data = Some(secrecy::SecretString::from(b64(key.expose())));
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        config.default_retry = false;
        if let Some(p) = proxy {
            config.proxy_url = Some(p.parse().map_err(|source| ConnectError::Proxy { source })?);
        }
        let client = kube::Client::try_from(config).map_err(ConnectError::Client)?;
        Ok(Kube { client })
    }

    /// The kube-rs client, for what needs more than JSON by path (a port-forward).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `true` when `/readyz` says ok, `false` for any other answer; an error only when nothing
    /// answered.
    pub async fn readyz(&self) -> Result<bool, KubeError> {
        let (code, _) = self.send(Method::GET, "/readyz", None, None).await?;
        Ok((200..300).contains(&code))
    }

    /// The object at `path` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, KubeError> {
        self.json(Method::GET, path, None, None).await
    }

    /// The object at `path` as JSON; `None` when the API answers 404.
    pub async fn get_opt(&self, path: &str) -> Result<Option<Value>, KubeError> {
        match self.get(path).await {
            Ok(v) => Ok(Some(v)),
            Err(KubeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// POSTs `body` to `path` (a create, an eviction) and returns the answer (`null` when it is
    /// not JSON).
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, KubeError> {
        let (_, answer) = self
            .checked(Method::POST, path, Some(body), Some(JSON))
            .await?;
        Ok(serde_json::from_slice(&answer).unwrap_or(Value::Null))
    }

    /// PUTs `body` (a whole object, its resourceVersion kept: a concurrent change is a
    /// [`KubeError::Conflict`]) to `path`. The body is never logged: it may be a Secret.
    pub async fn put(&self, path: &str, body: &Value) -> Result<(), KubeError> {
        self.checked(Method::PUT, path, Some(body), Some(JSON))
            .await
            .map(drop)
    }

    /// A JSON merge patch (RFC 7386) of the object at `path`. The body is never logged: it may
    /// carry a Secret's data.
    pub async fn merge_patch(&self, path: &str, body: &Value) -> Result<(), KubeError> {
        self.checked(
            Method::PATCH,
            path,
            Some(body),
            Some("application/merge-patch+json"),
        )
        .await
        .map(drop)
    }

    /// A strategic merge patch of the object at `path` (lists such as containers merge by name).
    pub async fn strategic_patch(&self, path: &str, body: &Value) -> Result<(), KubeError> {
        self.checked(
            Method::PATCH,
            path,
            Some(body),
            Some("application/strategic-merge-patch+json"),
        )
        .await
        .map(drop)
    }

    /// DELETEs the object at `path`; [`KubeError::NotFound`] when it is gone already
    /// ([`super::error::gone_is_fine`]).
    pub async fn delete(&self, path: &str) -> Result<(), KubeError> {
        self.checked(Method::DELETE, path, None, None)
            .await
            .map(drop)
    }

    async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<Value, KubeError> {
        let what = format!("{method} {path}");
        let (_, answer) = self.checked(method, path, body, content_type).await?;
        serde_json::from_slice(&answer).map_err(|source| KubeError::Decode { what, source })
    }

    /// A request whose answer must be a success; another status is the error it means.
    async fn checked(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<(u16, Vec<u8>), KubeError> {
        let what = format!("{method} {path}");
        let (code, answer) = self.send(method, path, body, content_type).await?;
        if (200..300).contains(&code) {
            Ok((code, answer))
        } else {
            Err(KubeError::from_answer(what, code, &answer))
        }
    }

    /// One request and its whole answer, whatever its status, within [`REQUEST_TIMEOUT`].
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<(u16, Vec<u8>), KubeError> {
        let what = format!("{method} {path}");
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::ACCEPT, JSON);
        if let Some(ct) = content_type {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        let bytes = body.map(Value::to_string).unwrap_or_default().into_bytes();
        let req = req
            .body(kube::client::Body::from(bytes))
            .map_err(|e| KubeError::Transport {
                what: what.clone(),
                source: kube::Error::HttpError(e),
            })?;
        let exchange = async {
            let res = self.client.send(req).await?;
            let code = res.status().as_u16();
            let answer = res.into_body().collect_bytes().await?.to_vec();
            Ok::<_, kube::Error>((code, answer))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(source)) => Err(KubeError::Transport { what, source }),
            Err(_) => Err(KubeError::Timeout {
                what,
                after: REQUEST_TIMEOUT,
            }),
        }
    }
}

const JSON: &str = "application/json";

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The DER of the first certificate in `pem`.
fn pem_der(pem: &str) -> Result<Vec<u8>, ConnectError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or(ConnectError::ClusterCa(None))?
        .map(|c| c.as_ref().to_vec())
        .map_err(|e| ConnectError::ClusterCa(Some(e)))
}

/// kos's admin client certificate, signed now by the cluster CA.
fn admin_certificate(
    version: &KubeVersion,
    secrets: &ClusterSecrets,
) -> Result<(String, kos_bootstrap::Sensitive), ConnectError> {
    pki::sign_client(
        &mut rand::rng(),
        &secrets.ca,
        CaKind::Cluster,
        kos_bootstrap::kubeconfig::ADMIN_CN,
        &[version.admin_group()],
        OffsetDateTime::now_utc(),
    )
    .map_err(ConnectError::Certificate)
}
