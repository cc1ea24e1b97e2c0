//! An admin kubeconfig signed offline with the cluster CA: usable the moment the API answers, without
//! fetching anything from a node.

use base64::Engine;
use rand::CryptoRng;
use serde::Serialize;
use time::OffsetDateTime;

use crate::input::{ApiEndpoint, KubeVersion};
use crate::pki::{self, CaKind};
use crate::{ClusterSecrets, Result, Sensitive};

/// The admin user's common name, as kubeadm's admin.conf has it.
pub const ADMIN_CN: &str = "kubernetes-admin";

#[derive(Serialize)]
struct Cluster {
    server: String,
    #[serde(rename = "certificate-authority-data")]
    ca: String,
}

#[derive(Serialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Serialize)]
struct User {
    #[serde(rename = "client-certificate-data")]
    cert: String,
    #[serde(rename = "client-key-data")]
    key: String,
}

#[derive(Serialize)]
struct NamedUser {
    name: String,
    user: User,
}

#[derive(Serialize)]
struct Context {
    cluster: String,
    user: String,
}

#[derive(Serialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Serialize)]
struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    clusters: Vec<NamedCluster>,
    users: Vec<NamedUser>,
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    current_context: String,
}

/// The context (and cluster entry) name for a kos cluster.
pub fn context_name(name: &str) -> String {
    format!("kos-{name}")
}

/// A kubeconfig with context `kos-<name>` whose client certificate (CN `kubernetes-admin`, group
/// `kubeadm:cluster-admins` from 1.29, `system:masters` before) is signed by the cluster CA with a fresh
/// key, valid one year from `now`. It holds a private key, hence [`Sensitive`].
pub fn render_kubeconfig<R: CryptoRng + ?Sized>(
    rng: &mut R,
    name: &str,
    endpoint: &ApiEndpoint,
    version: &KubeVersion,
    secrets: &ClusterSecrets,
    now: OffsetDateTime,
) -> Result<Sensitive> {
    let (cert, key) = pki::sign_client(
        rng,
        &secrets.ca,
        CaKind::Cluster,
        ADMIN_CN,
        &[version.admin_group()],
        now,
    )?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ctx = context_name(name);
    let user = format!("{ctx}-admin");
    let kc = Kubeconfig {
        api_version: "v1",
        kind: "Config",
        clusters: vec![NamedCluster {
            name: ctx.clone(),
            cluster: Cluster {
                server: format!("https://{endpoint}"),
                ca: b64(&secrets.ca.cert_pem),
            },
        }],
        users: vec![NamedUser {
            name: user.clone(),
            user: User {
                cert: b64(&cert),
                key: b64(key.expose()),
            },
        }],
        contexts: vec![NamedContext {
            name: ctx.clone(),
            context: Context {
                cluster: ctx.clone(),
                user,
            },
        }],
        current_context: ctx,
    };
    crate::yaml::to_string(&kc).map(Sensitive::new)
}
