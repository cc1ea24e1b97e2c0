//! Just enough of the Kubernetes API for `kos up` to check a cluster nobody logs into: `/readyz`, the
//! node list, and creating an object. It authenticates with an admin client certificate signed offline
//! by the cluster CA, and trusts that CA only. On a simulated cloud it connects to the endpoint's local
//! address ([`Kube::via`]) and still verifies the serving certificate for the endpoint's name.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kos_bootstrap::pki::{self, CaKind};
use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use serde_json::Value;
use time::OffsetDateTime;

/// The taint nodes carry until the cloud controller manager initialised them.
pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

pub struct Kube {
    client: reqwest::Client,
    base: String,
}

/// A node as far as "is the cluster up" goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub name: String,
    pub ready: bool,
    pub uninitialized: bool,
    /// When its Ready condition last changed (RFC 3339), while it is not True.
    pub not_ready_since: Option<String>,
}

impl Kube {
    pub fn new(
        endpoint: &ApiEndpoint,
        version: &KubeVersion,
        secrets: &ClusterSecrets,
    ) -> Result<Self, String> {
        let (cert, key) = admin_certificate(version, secrets)?;
        let identity = reqwest::Identity::from_pem(format!("{cert}{}", key.expose()).as_bytes())
            .map_err(|e| format!("client certificate: {e}"))?;
        let ca = reqwest::Certificate::from_pem(secrets.ca.cert_pem.as_bytes())
            .map_err(|e| format!("cluster CA: {e}"))?;
        let client = reqwest::Client::builder()
            .tls_certs_only([ca])
            .identity(identity)
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            base: format!("https://{endpoint}"),
        })
    }

    /// A client that connects to `local` (where a simulated cloud forwards `endpoint` from this
    /// machine) and verifies the serving certificate for `endpoint`'s host, as kubectl does with
    /// `tls-server-name`.
    pub fn via(
        endpoint: &ApiEndpoint,
        local: SocketAddr,
        version: &KubeVersion,
        secrets: &ClusterSecrets,
    ) -> Result<Self, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let (cert, key) = admin_certificate(version, secrets)?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(secrets.ca.cert_pem.as_bytes()) {
            roots
                .add(ca.map_err(|e| format!("cluster CA: {e}"))?)
                .map_err(|e| format!("cluster CA: {e}"))?;
        }
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| format!("cluster CA: {e}"))?;
        let name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| format!("{}: {e}", endpoint.host))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("client certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
            .map_err(|e| format!("client key: {e}"))?;
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ForName { inner, name }))
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("client certificate: {e}"))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            base: format!("https://{local}"),
        })
    }

    /// `Ok(true)` when `/readyz` says ok; `Err` when the API cannot be reached at all.
    pub async fn readyz(&self) -> Result<bool, String> {
        let r = self
            .client
            .get(format!("{}/readyz", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(r.status().is_success())
    }

    pub async fn nodes(&self) -> Result<Vec<NodeStatus>, String> {
        let r = self
            .client
            .get(format!("{}/api/v1/nodes", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("listing nodes: HTTP {}", r.status()));
        }
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        Ok(v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| NodeStatus {
                name: n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                ready: n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
                uninitialized: n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["key"] == UNINITIALIZED),
                not_ready_since: n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Ready" && c["status"] != "True")
                    .and_then(|c| c["lastTransitionTime"].as_str())
                    .map(str::to_owned),
            })
            .collect())
    }

    /// POSTs a YAML manifest to `path` (e.g. `/api/v1/namespaces/kube-system/secrets`), as JSON;
    /// one that already exists is fine.
    pub async fn create(&self, path: &str, yaml: &str) -> Result<(), String> {
        let doc: Value =
            serde_saphyr::from_str(yaml).map_err(|e| format!("manifest is not YAML: {e}"))?;
        match self.post_json(path, &doc).await?.0 {
            200..=299 | 409 => Ok(()),
            s => Err(format!("HTTP {s}")),
        }
    }

    /// GETs the object at `path` as JSON.
    pub async fn get_json(&self, path: &str) -> Result<Value, String> {
        self.get_json_opt(path)
            .await?
            .ok_or_else(|| format!("GET {path}: HTTP 404"))
    }

    /// GETs the object at `path` as JSON; `None` when the API answers 404.
    pub async fn get_json_opt(&self, path: &str) -> Result<Option<Value>, String> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match r.status().as_u16() {
            404 => Ok(None),
            200..=299 => r
                .json()
                .await
                .map(Some)
                .map_err(|e| format!("GET {path}: {e}")),
            s => Err(format!("GET {path}: HTTP {s}")),
        }
    }

    /// POSTs `body` to `path` once and returns the HTTP status with the answer's JSON (`null` when
    /// it is not JSON), whatever the status: the caller decides, and retries (a 429 included).
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<(u16, Value), String> {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let text = r.text().await.map_err(|e| format!("POST {path}: {e}"))?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// PUTs `body` (a whole object, its resourceVersion kept: a concurrent change is a 409) to
    /// `path` and returns the HTTP status. The body is never logged: it may be a Secret.
    pub async fn put_json(&self, path: &str, body: &Value) -> Result<u16, String> {
        let r = self
            .client
            .put(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(r.status().as_u16())
    }

    /// A JSON merge patch (RFC 7386) of the object at `path`. The body is never logged: it may
    /// carry a Secret's data.
    pub async fn merge_patch(&self, path: &str, body: &Value) -> Result<(), String> {
        self.patch(path, body, "application/merge-patch+json").await
    }

    /// A strategic merge patch of the object at `path` (lists such as containers merge by name).
    pub async fn strategic_patch(&self, path: &str, body: &Value) -> Result<(), String> {
        self.patch(path, body, "application/strategic-merge-patch+json")
            .await
    }

    async fn patch(&self, path: &str, body: &Value, content_type: &str) -> Result<(), String> {
        let r = self
            .client
            .patch(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match r.status().as_u16() {
            200..=299 => Ok(()),
            s => Err(format!("PATCH {path}: HTTP {s}")),
        }
    }

    /// DELETEs the object at `path`; one that is already gone is fine.
    pub async fn delete(&self, path: &str) -> Result<(), String> {
        let r = self
            .client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match r.status().as_u16() {
            200..=299 | 404 => Ok(()),
            s => Err(format!("HTTP {s}")),
        }
    }
}

/// A kube-rs client of the cluster's API with kos's admin certificate, trusting the cluster CA only:
/// at `endpoint`, or at `local` (a simulated cloud's forwarder of it) verifying the serving
/// certificate for the endpoint's host, as kubectl does with `tls-server-name`.
pub fn kube_rs(
    endpoint: &ApiEndpoint,
    local: Option<SocketAddr>,
    version: &KubeVersion,
    secrets: &ClusterSecrets,
) -> Result<kube::Client, String> {
    let (cert, key) = admin_certificate(version, secrets)?;
    let at = local.map_or_else(|| endpoint.to_string(), |l| l.to_string());
    let url: http::Uri = format!("https://{at}")
        .parse()
        .map_err(|e| format!("{at}: {e}"))?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(vec![pem_der(&secrets.ca.cert_pem)?]);
    config.tls_server_name = local.map(|_| endpoint.host.clone());
    config.auth_info.client_certificate_data = Some(b64(&cert));
    config.auth_info.client_key_data = Some(secrecy::SecretString::from(b64(key.expose())));
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The DER of the first certificate in `pem`.
fn pem_der(pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or("cluster CA: no certificate")?
        .map(|c| c.as_ref().to_vec())
        .map_err(|e| format!("cluster CA: {e}"))
}

/// kos's admin client certificate, signed now by the cluster CA.
fn admin_certificate(
    version: &KubeVersion,
    secrets: &ClusterSecrets,
) -> Result<(String, kos_bootstrap::Sensitive), String> {
    pki::sign_client(
        &mut rand::rng(),
        &secrets.ca,
        CaKind::Cluster,
        kos_bootstrap::kubeconfig::ADMIN_CN,
        &[version.admin_group()],
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| e.to_string())
}

/// Verifies a server's certificate for a fixed name, whatever address the connection went to (a
/// local forwarder of the endpoint).
#[derive(Debug)]
struct ForName {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    name: rustls::pki_types::ServerName<'static>,
}

impl rustls::client::danger::ServerCertVerifier for ForName {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
