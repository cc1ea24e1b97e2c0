//! Encryption at rest on the CLI side: the keys each turn of `kos up` decides with (made on first
//! use, the rotation step advanced when every control plane runs the current step's keys), the
//! rewrite of every Secret, and `kos rotate encryption-key` (a rotation started, then `kos up`'s
//! loop). The steps and why none is skipped: `kos_lifecycle::encryption`.

use kos_cluster::graph::Kind;
use kos_cluster::graph::record::recorded;
use kos_cluster::observe::Observed;
use kos_lifecycle::encryption::{KeyState, Step, TAG_ENCRYPTION};
use serde_json::Value;

use super::Failure;
use crate::cloud::Connected;
use crate::kube::{Kube, KubeError};
use crate::local::Local;
use kos_control::store::{KeysError, Record, Records as _, SecretStore as _};

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

/// The keys a turn decides with. `advance` (the first turn of a `kos up`): made on first use and
/// a rotation moved on (stored before anything acts on it); later turns and `kos plan` only read
/// them, made if missing.
pub(super) async fn keys_for_turn(
    c: &Connected,
    local: &Local,
    spec: &kos_cluster::ClusterSpec,
    observed: &Observed,
    advance: bool,
) -> Result<Option<KeyState>, Failure> {
    let recorded = records(observed);
    if !advance {
        return local.keys().map_err(|e| Failure::store(&e));
    }
    let mut keys = kos_control::store::keys_for_up(local, &recorded).map_err(|e| match e {
        KeysError::Store(e) => Failure::store(&e),
        KeysError::Missing { recorded, location } => Failure::input(miette::miette!(
            help = "copy encryption.json from the machine that manages the cluster into this directory",
            "the cluster's control planes run with encryption keys ({recorded}) that are not on this machine ({location})"
        )),
    })?;
    // At most the four steps, then a step that waits for control planes to be replaced.
    for _ in 0..6 {
        match keys.step(&recorded) {
            Step::Wait => break,
            Step::Advanced => {
                local.put_keys(&keys).map_err(|e| Failure::store(&e))?;
                eprintln!("kos: {}: {}", spec.name.value, keys.shown());
            }
            Step::Rewrite => {
                let n = rewrite(c, local, spec).await.map_err(|e| {
                    Failure::cloud_report(miette::miette!(
                        help = "run the command again: it rewrites the Secrets again, then drops the old key",
                        "cannot rewrite the cluster's Secrets under the new encryption key: {}",
                        kos_lifecycle::api::chain(&e)
                    ))
                })?;
                eprintln!(
                    "kos: {}: {n} Secret(s) written again under the new key",
                    spec.name.value
                );
                keys.rewritten();
                local.put_keys(&keys).map_err(|e| Failure::store(&e))?;
            }
        }
    }
    Ok(Some(keys))
}

/// Why the Secrets could not all be written again.
#[derive(Debug, thiserror::Error)]
enum RewriteError {
    #[error(transparent)]
    Client(#[from] kos_control::connect::ClientError),
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("{path} kept changing while it was written again")]
    KeptChanging { path: String },
}

/// Every Secret read and written back unchanged (upstream's `kubectl get secrets -A -o json |
/// kubectl replace -f -`): the API server writes a value its first key did not seal even when the
/// object is the same, so each one ends up under the new key. A Secret changed meanwhile (409) is
/// read again; one deleted meanwhile is done.
async fn rewrite(
    c: &Connected,
    local: &Local,
    spec: &kos_cluster::ClusterSpec,
) -> Result<usize, RewriteError> {
    let kube = kos_control::connect::stored_api_client(c.cloud(), spec, local).await?;
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

/// `kos rotate encryption-key NAME -f SPEC`: a new key, then `kos up` carries the rotation
/// through (control planes replaced three times, every Secret rewritten). Run again after an
/// interruption, it continues the rotation under way instead of starting another.
pub async fn rotate(args: crate::cli::RotateEncryptionKeyArgs) -> Result<super::Exit, Failure> {
    let spec = super::cluster::load_spec(&args.up.spec.file)?;
    if spec.loaded.spec.name.value.as_str() != args.name.as_str() {
        return Err(Failure::input(miette::miette!(
            "{} is the spec of cluster {}, not {}",
            crate::term::printable(&spec.shown),
            spec.loaded.spec.name.value,
            args.name.as_str()
        )));
    }
    let cp = &spec.loaded.spec.control_plane;
    if cp.count.get() == 1 && !cp.surges(spec.loaded.spec.api_endpoint.kind.value) {
        return Err(Failure::input(miette::miette!(
            help = "a cluster made with `apiEndpoint.type: loadBalancer` can rotate its key (a \
                    successor joins before a control plane is replaced); a floating-IP endpoint is \
                    its one server's port, so no successor can join behind it",
            "cluster {}: its only control plane is behind a floating IP and cannot be replaced \
             without losing the cluster, and kos changes a control plane's keys only by replacing it",
            args.name.as_str()
        )));
    }
    // Add, make first, rewrite and drop: a run per step, and one to spare.
    super::cluster::up_runs(
        args.up,
        spec,
        |c, local| {
            let keys = local.keys().map_err(|e| Failure::store(&e))?;
            let Some(mut keys) = keys else {
                return Err(Failure::input(miette::miette!(
                    help = "run `kos up` first: it makes the cluster's first key",
                    "cluster {} has no encryption key on this machine ({})",
                    args.name.as_str(),
                    local.location(Record::EncryptionKeys)
                )));
            };
            let _ = c;
            if keys.phase == kos_lifecycle::encryption::Phase::Steady {
                keys.start_rotation(&mut rand::rng())
                    .map_err(|e| Failure::input(miette::miette!("{e}")))?;
                local.put_keys(&keys).map_err(|e| Failure::store(&e))?;
                eprintln!("kos: {}: {}", args.name.as_str(), keys.shown());
            } else {
                eprintln!(
                    "kos: {}: continuing the rotation under way: {}",
                    args.name.as_str(),
                    keys.shown()
                );
            }
            Ok(())
        },
        5,
    )
    .await
}
