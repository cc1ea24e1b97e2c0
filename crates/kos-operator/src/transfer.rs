//! Moving a cluster between a front end's store and the operator, without touching a server:
//! `kos export` puts a CLI-made cluster's records into the Secret the operator keeps them in and
//! makes its Cluster; `kos adopt` takes them back into any [`SecretStore`] and lets the Cluster go
//! (annotated [`ORPHAN`], so its deletion tears nothing down).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kos_bootstrap::Sensitive;
use kos_control::store::{Record, SecretStore, StoreError};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::resource::{Cluster, ClusterSpec, IdentityRef, ORPHAN};
use crate::store::{CLUSTER_LABEL, SECRET_TYPE, key, secret_name};

/// Why a cluster could not be moved. Never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("Cluster {namespace}/{name} already exists in the management cluster")]
    ClusterExists { namespace: String, name: String },
    #[error(
        "Secret {namespace}/{secret} already exists in the management cluster: another cluster's \
         records, or an export that stopped half-way"
    )]
    SecretExists { namespace: String, secret: String },
    #[error("Cluster {namespace}/{name} does not exist in the management cluster")]
    NoCluster { namespace: String, name: String },
    #[error("Secret {namespace}/{secret} holds none of the cluster's records")]
    NoRecords { namespace: String, secret: String },
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("Cluster {namespace}/{name} was not let go within {secs} s (is kos-operator running?)")]
    NotReleased {
        namespace: String,
        name: String,
        secs: u64,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> TransferError {
    let what = what.into();
    move |source| TransferError::Api { what, source }
}

/// Puts the records of `from` into the Secret `<name>-kos` of `namespace` and makes the Cluster
/// (`spec` and `identity`), which the operator then owns the Secret through. Refused when either
/// exists. Returns how many records moved; the caller removes its own copies after.
///
/// # Errors
/// [`TransferError`]; a Secret made before a failure is named by the next attempt's refusal.
pub async fn export(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    spec: kos_cluster::schema::Spec,
    tags: Vec<String>,
    identity: IdentityRef,
    from: &dyn SecretStore,
) -> Result<usize, TransferError> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secret_name(name);
    if clusters
        .get_opt(name)
        .await
        .map_err(api("reading the Cluster"))?
        .is_some()
    {
        return Err(TransferError::ClusterExists {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    if secrets
        .get_opt(&secret)
        .await
        .map_err(api("reading the Secret"))?
        .is_some()
    {
        return Err(TransferError::SecretExists {
            namespace: namespace.to_owned(),
            secret,
        });
    }
    let mut data = BTreeMap::new();
    for record in Record::ALL {
        if let Some(contents) = from.read(record)? {
            data.insert(
                key(record).to_owned(),
                ByteString(contents.expose().as_bytes().to_vec()),
            );
        }
    }
    let moved = data.len();
    // A store that keeps no such record held secrets that went into user_data.
    if from.delivered()?.unwrap_or(true) {
        data.insert("delivered".to_owned(), ByteString(b"true".to_vec()));
    }
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(secret.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                CLUSTER_LABEL.to_owned(),
                name.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(data),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &s)
        .await
        .map_err(api(format!("making Secret {namespace}/{secret}")))?;
    let mut c = Cluster::new(
        name,
        ClusterSpec {
            identity_ref: identity,
            tags,
            cluster: spec,
        },
    );
    c.metadata.namespace = Some(namespace.to_owned());
    clusters
        .create(&PostParams::default(), &c)
        .await
        .map_err(api(format!("making Cluster {namespace}/{name}")))?;
    Ok(moved)
}

/// What `kos adopt` takes back: the Cluster's spec and tags, and how many records moved into the
/// store.
pub struct Adopted {
    pub spec: kos_cluster::schema::Spec,
    pub tags: Vec<String>,
    pub records: usize,
}

/// Writes the records of Cluster `namespace/name` into `to`, then lets the Cluster go: annotated
/// [`ORPHAN`] and deleted, the operator removes its finalizer without tearing anything down. Waits
/// (at most `wait`) until it is gone.
///
/// # Errors
/// [`TransferError`]; nothing is deleted before every record is in `to`.
pub async fn adopt(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    to: &dyn SecretStore,
    wait: Duration,
) -> Result<Adopted, TransferError> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let cluster = clusters
        .get_opt(name)
        .await
        .map_err(api("reading the Cluster"))?
        .ok_or_else(|| TransferError::NoCluster {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })?;
    let secret = secret_name(name);
    let data = secrets
        .get_opt(&secret)
        .await
        .map_err(api("reading the Secret"))?
        .and_then(|s| s.data)
        .unwrap_or_default();
    let mut records = 0;
    for record in Record::ALL {
        if let Some(bytes) = data.get(key(record)) {
            let Ok(text) = String::from_utf8(bytes.0.clone()) else {
                return Err(StoreError::Malformed {
                    record,
                    location: format!("Secret {namespace}/{secret} key {}", key(record)),
                    source: None,
                }
                .into());
            };
            to.write(record, &Sensitive::new(text))?;
            records += 1;
        }
    }
    if records == 0 {
        return Err(TransferError::NoRecords {
            namespace: namespace.to_owned(),
            secret,
        });
    }
    if data.contains_key("delivered") {
        to.mark_delivered()?;
    }
    clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ORPHAN: "true"}}})),
        )
        .await
        .map_err(api("annotating the Cluster"))?;
    clusters
        .delete(name, &DeleteParams::default())
        .await
        .map_err(api("deleting the Cluster"))?;
    let deadline = tokio::time::Instant::now() + wait;
    while clusters
        .get_opt(name)
        .await
        .map_err(api("reading the Cluster"))?
        .is_some()
    {
        if tokio::time::Instant::now() >= deadline {
            return Err(TransferError::NotReleased {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                secs: wait.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(Adopted {
        spec: cluster.spec.cluster,
        tags: cluster.spec.tags,
        records,
    })
}
