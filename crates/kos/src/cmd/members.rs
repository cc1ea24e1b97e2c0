//! The CLI side of [`kos_control::members`]: the cluster's secrets and API address from this
//! machine ([`Local`]), the client of its API, then the library removes the stale etcd members.

use kos_control::members::MembersError;
use kos_lifecycle::membership::Joining;

use super::cluster::{ApiClientError, api_client_at};
use crate::cloud::Connected;
use crate::local::Local;
use kos_control::store::{Records as _, StoreError};

pub(super) use kos_control::members::joining;

/// Why the stale members were not removed: what this machine keeps, the API, or etcd.
#[derive(Debug, thiserror::Error)]
pub(super) enum StaleMembersError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the API address of the cluster is not known on this machine")]
    NoAddress,
    #[error("the cluster's secrets are not on this machine")]
    NoSecrets,
    #[error(transparent)]
    Version(kos_bootstrap::Error),
    #[error(transparent)]
    Client(Box<ApiClientError>),
    #[error(transparent)]
    Members(MembersError),
}

/// Removes the members `joining` would collide with; the lines to show. Err when etcd cannot be
/// reached: the control planes could not join, so nothing is created.
pub(super) async fn remove_stale_members(
    c: &Connected,
    local: &Local,
    joining: &[Joining],
    why: &str,
) -> Result<Vec<String>, StaleMembersError> {
    let meta = local.meta()?.ok_or(StaleMembersError::NoAddress)?;
    let secrets = local.pki()?.ok_or(StaleMembersError::NoSecrets)?;
    let version: kos_bootstrap::KubeVersion = meta
        .kubernetes_version
        .parse()
        .map_err(StaleMembersError::Version)?;
    let kube = api_client_at(c, &meta.api_address, &version, &secrets)
        .await
        .map_err(|e| StaleMembersError::Client(Box::new(e)))?;
    kos_control::members::remove_stale_members(&kube, &meta.api_address, &secrets, joining, why)
        .await
        .map_err(StaleMembersError::Members)
}
