//! How a run reaches a cluster's Kubernetes API: the cloud session, the way this process gets to
//! an API address ([`Reach`]: straight to it, or through a local forwarder a front end knows of),
//! and the client builders over them ([`api_client`], [`stored_api_client`], [`api_client_at`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use kos_bootstrap::{ApiEndpoint, ClusterSecrets, KubeVersion};
use kos_cloud::Session;
use kos_cluster::ClusterSpec;

use crate::kube::{ConnectError, Kube, KubeError};
use crate::store::{Cause, Records, SecretStore, StoreError};

/// The port of every cluster's API endpoint.
pub const API_PORT: u16 = 6443;

/// A future [`Reach`] returns (boxed: a front end hands its reach in as a trait object).
pub type Reaching<'a> =
    Pin<Box<dyn Future<Output = Result<Option<SocketAddr>, ReachError>> + Send + 'a>>;

/// How this process gets to a cluster API's address: `None` dials the address itself, `Some` a
/// local address that forwards to it (a front end's knowledge; nothing here names one).
pub trait Reach: Send + Sync {
    fn local_address<'a>(&'a self, endpoint: &'a ApiEndpoint) -> Reaching<'a>;
}

/// Every address dialled as it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct Direct;

impl Reach for Direct {
    fn local_address<'a>(&'a self, _: &'a ApiEndpoint) -> Reaching<'a> {
        Box::pin(async { Ok(None) })
    }
}

/// Why the way to an API address could not be found (the front end's cause, as its source).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReachError(pub Cause);

/// A connected cloud: its session, and how its clusters' APIs are reached from here.
#[derive(Clone, Copy)]
pub struct Cloud<'a> {
    pub session: &'a Session,
    pub reach: &'a dyn Reach,
}

impl Cloud<'_> {
    /// Now on the cloud's clock ([`cloud_now`]).
    #[must_use]
    pub fn now(&self) -> time::OffsetDateTime {
        cloud_now(self.session)
    }
}

/// Now on the cloud's clock, as its answers' `Date` shows it (this machine's before any answer):
/// what kos stamps for the cluster to compare with its own clock (a token's expiration) and
/// compares with what the cloud stamped (a server's `created`). The servers keep the cloud's
/// time; this machine's may be off by hours.
#[must_use]
pub fn cloud_now(session: &Session) -> time::OffsetDateTime {
    session
        .pace()
        .now_unix()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or_else(time::OffsetDateTime::now_utc)
}

/// Why kos cannot talk to a cluster's API from here.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the cluster's secrets are not on this machine")]
    NoSecrets,
    #[error("the cluster's API address is not known on this machine")]
    NoAddress,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Reach(#[from] ReachError),
    #[error("the spec's Kubernetes version")]
    Version(#[source] kos_bootstrap::Error),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("the cluster's API is not ready")]
    NotReady,
}

/// A client of the cluster's API at `address`, reached as `cloud` says.
///
/// # Errors
/// [`ClientError`].
pub async fn api_client(
    cloud: Cloud<'_>,
    spec: &ClusterSpec,
    address: &str,
    secrets: &ClusterSecrets,
) -> Result<Kube, ClientError> {
    api_client_at(cloud, address, &version(spec)?, secrets).await
}

/// [`api_client`] from what `store` keeps of the cluster: its secrets and its API address.
///
/// # Errors
/// [`ClientError`].
pub async fn stored_api_client<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    spec: &ClusterSpec,
    store: &S,
) -> Result<Kube, ClientError> {
    let secrets = store.pki()?.ok_or(ClientError::NoSecrets)?;
    let meta = store.meta()?.ok_or(ClientError::NoAddress)?;
    api_client(cloud, spec, &meta.api_address, &secrets).await
}

/// [`api_client`] for a cluster of Kubernetes `v` (the admin group depends on the minor).
///
/// # Errors
/// [`ClientError`].
pub async fn api_client_at(
    cloud: Cloud<'_>,
    address: &str,
    v: &KubeVersion,
    secrets: &ClusterSecrets,
) -> Result<Kube, ClientError> {
    let ep = endpoint(address);
    let local = cloud.reach.local_address(&ep).await?;
    Ok(Kube::connect(&ep, local, v, secrets)?)
}

/// The API endpoint at `address`.
#[must_use]
pub fn endpoint(address: &str) -> ApiEndpoint {
    ApiEndpoint {
        host: address.to_owned(),
        port: API_PORT,
    }
}

fn version(spec: &ClusterSpec) -> Result<KubeVersion, ClientError> {
    spec.kubernetes_version
        .to_string()
        .parse()
        .map_err(ClientError::Version)
}
