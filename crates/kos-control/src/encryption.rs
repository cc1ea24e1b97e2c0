//! Encryption at rest, carried out: the keys each turn decides with (made on first use, the
//! rotation step advanced when every control plane runs the current step's keys) and the rewrite
//! of every Secret under a new key. The steps and why none is skipped: `kos_lifecycle::encryption`.

use kos_cluster::ClusterSpec;
use kos_cluster::graph::Kind;
use kos_cluster::graph::record::recorded;
use kos_cluster::observe::Observed;
use kos_lifecycle::encryption::{KeyState, Step, TAG_ENCRYPTION};
use serde_json::Value;

use crate::connect::{ClientError, Cloud, stored_api_client};
use crate::kube::{Kube, KubeError};
use crate::report::{Event, Report};
use crate::store::{KeysError, Records as _, SecretStore, StoreError};

/// What the control planes the cloud shows record of their keys (`None`: made before the record).
fn records(observed: &Observed) -> Vec<Option<&str>> {
    observed
        .all()
        .filter(|r| {
            r.kind == Kind::Server
                && !r.failed
                && kos_lifecycle::formation::is_control_plane(&r.logical_id)
        })
        .map(|r| recorded(&r.facts.tags, TAG_ENCRYPTION))
        .collect()
}

/// Why a turn has no keys to decide with.
#[derive(Debug, thiserror::Error)]
pub enum TurnKeysError {
    #[error(transparent)]
    Keys(#[from] KeysError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The Secrets could not all be written again under the new key.
    #[error("cannot rewrite the cluster's Secrets under the new encryption key: {}", kos_lifecycle::api::chain(.0))]
    Rewrite(RewriteError),
}

/// The keys a turn decides with. `advance` (the first turn of a run): made on first use and a
/// rotation moved on (stored before anything acts on it); later turns and plans only read them.
///
/// # Errors
/// [`TurnKeysError`].
pub async fn keys_for_turn<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    spec: &ClusterSpec,
    observed: &Observed,
    advance: bool,
    report: &dyn Report,
) -> Result<Option<KeyState>, TurnKeysError> {
    let recorded = records(observed);
    if !advance {
        return Ok(store.keys()?);
    }
    let mut keys = crate::store::keys_for_up(store, &recorded)?;
    let cluster = spec.name.value.as_str();
    // At most the four steps, then a step that waits for control planes to be replaced.
    for _ in 0..6 {
        match keys.step(&recorded) {
            Step::Wait => break,
            Step::Advanced => {
                store.put_keys(&keys)?;
                report.event(Event::KeysStep {
                    cluster,
                    shown: &keys.shown(),
                });
            }
            Step::Rewrite => {
                let n = rewrite(cloud, store, spec)
                    .await
                    .map_err(TurnKeysError::Rewrite)?;
                report.event(Event::SecretsRewritten {
                    cluster,
                    secrets: n,
                });
                keys.rewritten();
                store.put_keys(&keys)?;
            }
        }
    }
    Ok(Some(keys))
}

/// Why the Secrets could not all be written again.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("{path} kept changing while it was written again")]
    KeptChanging { path: String },
}

/// Every Secret read and written back unchanged (upstream's `kubectl get secrets -A -o json |
/// kubectl replace -f -`): the API server writes a value its first key did not seal even when the
/// object is the same, so each one ends up under the new key. A Secret changed meanwhile (409) is
/// read again; one deleted meanwhile is done.
async fn rewrite<S: SecretStore + ?Sized>(
    cloud: Cloud<'_>,
    store: &S,
    spec: &ClusterSpec,
) -> Result<usize, RewriteError> {
    let kube = stored_api_client(cloud, spec, store).await?;
    let list = kube.get("/api/v1/secrets").await?;
    let mut done = 0;
    for item in list["items"].as_array().into_iter().flatten() {
        let (Some(ns), Some(name)) = (
            item.pointer("/metadata/namespace").and_then(Value::as_str),
            item.pointer("/metadata/name").and_then(Value::as_str),
        ) else {
            continue;
        };
        let path = format!("/api/v1/namespaces/{ns}/secrets/{name}");
        if put_again(&kube, &path, item.clone()).await? {
            done += 1;
        }
    }
    Ok(done)
}

/// Writes one Secret back; `false` when it is gone.
async fn put_again(kube: &Kube, path: &str, mut obj: Value) -> Result<bool, RewriteError> {
    for _ in 0..5 {
        match kube.put(path, &obj).await {
            Ok(()) => return Ok(true),
            Err(KubeError::NotFound { .. }) => return Ok(false),
            Err(KubeError::Conflict { .. }) => match kube.get_opt(path).await? {
                Some(fresh) => obj = fresh,
                None => return Ok(false),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(RewriteError::KeptChanging {
        path: path.to_owned(),
    })
}
