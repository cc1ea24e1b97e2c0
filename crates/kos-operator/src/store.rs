//! A cluster's secrets and records as one Secret owned by its Cluster (`<cluster>-kos`, type
//! `kos.dev/cluster-state`): the operator's [`SecretStore`], where the CLI keeps 0600 files.
//!
//! kos-control's store is synchronous (a record is written before the run goes on, so a crash
//! never loses a CA a server was given); each write here is one replace of the Secret with its
//! resourceVersion, waited for on the runtime (`block_in_place`: the operator runs on tokio's
//! multi-threaded runtime). A conflict means someone else wrote the Secret: the write fails and
//! the reconcile starts again from what the API holds.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kos_bootstrap::Sensitive;
use kos_control::store::{Record, SecretStore, StoreError};
use kube::api::{Api, ObjectMeta, PostParams};

/// The Secret's type, so `kubectl get secrets` says what it is.
pub const SECRET_TYPE: &str = "kos.dev/cluster-state";
/// The label naming the Cluster a Secret belongs to.
pub const CLUSTER_LABEL: &str = "kos.dev/cluster";
/// The key that records that the secrets went into a server's user_data.
const DELIVERED: &str = "delivered";

/// The Secret's name for a Cluster.
#[must_use]
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-kos")
}

/// Each record's key in the Secret.
#[must_use]
pub fn key(record: Record) -> &'static str {
    match record {
        Record::Pki => "pki.json",
        Record::CcmCredential => "ccm-credential.json",
        Record::PendingCcmCredential => "ccm-credential-next.json",
        Record::EncryptionKeys => "encryption.json",
        Record::Meta => "cluster.json",
    }
}

/// The records of one cluster in its Secret.
pub struct SecretRecords {
    api: Api<Secret>,
    name: String,
    namespace: String,
    cluster: String,
    owner: OwnerReference,
    /// The Secret as last read or written; `None` until the first write makes it.
    current: Mutex<Option<Secret>>,
    handle: tokio::runtime::Handle,
}

/// The API refused or failed a read or write of the Secret.
#[derive(Debug, thiserror::Error)]
#[error("the Kubernetes API: {0}")]
pub struct ApiFailed(#[source] kube::Error);

impl SecretRecords {
    /// Reads the cluster's Secret (none yet is fine).
    ///
    /// # Errors
    /// The API's, when the Secret cannot be read.
    pub async fn load(
        api: Api<Secret>,
        namespace: &str,
        cluster: &str,
        owner: OwnerReference,
    ) -> Result<SecretRecords, StoreError> {
        let name = secret_name(cluster);
        let current = api.get_opt(&name).await.map_err(|e| StoreError::Read {
            record: Record::Pki,
            location: format!("Secret {namespace}/{name}"),
            source: Box::new(ApiFailed(e)),
        })?;
        Ok(SecretRecords {
            api,
            name,
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
            owner,
            current: Mutex::new(current),
            handle: tokio::runtime::Handle::current(),
        })
    }

    fn shown(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.name)
    }

    fn data(&self) -> Result<BTreeMap<String, ByteString>, StoreError> {
        Ok(self
            .current
            .lock()
            .map_err(|_| poisoned())?
            .as_ref()
            .and_then(|s| s.data.clone())
            .unwrap_or_default())
    }

    /// Changes the Secret's data with `edit` and writes it: created when there is none, else
    /// replaced at the resourceVersion last seen.
    fn put(
        &self,
        record: Record,
        edit: impl FnOnce(&mut BTreeMap<String, ByteString>),
    ) -> Result<(), StoreError> {
        let mut current = self.current.lock().map_err(|_| poisoned())?;
        let mut next = current.clone().unwrap_or_else(|| Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    CLUSTER_LABEL.to_owned(),
                    self.cluster.clone(),
                )])),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_owned()),
            ..Secret::default()
        });
        // A Secret `kos export` made has no owner yet: it becomes the Cluster's with this write.
        let owners = next.metadata.owner_references.get_or_insert_with(Vec::new);
        if !owners.iter().any(|o| o.uid == self.owner.uid) {
            owners.push(self.owner.clone());
        }
        let mut data = next.data.take().unwrap_or_default();
        edit(&mut data);
        next.data = Some(data);
        // Written as given: `stringData` would be merged by the server into what we replace.
        next.string_data = None;
        let exists = current.is_some();
        let api = self.api.clone();
        let name = self.name.clone();
        let written = tokio::task::block_in_place(|| {
            self.handle.block_on(async {
                if exists {
                    api.replace(&name, &PostParams::default(), &next).await
                } else {
                    api.create(&PostParams::default(), &next).await
                }
            })
        })
        .map_err(|e| StoreError::Write {
            record,
            location: self.shown(),
            source: Box::new(ApiFailed(e)),
        })?;
        *current = Some(written);
        Ok(())
    }
}

impl SecretStore for SecretRecords {
    fn read(&self, record: Record) -> Result<Option<Sensitive>, StoreError> {
        let Some(bytes) = self.data()?.remove(key(record)) else {
            return Ok(None);
        };
        match String::from_utf8(bytes.0) {
            Ok(text) => Ok(Some(Sensitive::new(text))),
            // The bytes are not quoted: they may be a secret.
            Err(_) => Err(StoreError::Malformed {
                record,
                location: self.location(record),
                source: None,
            }),
        }
    }

    fn write(&self, record: Record, contents: &Sensitive) -> Result<(), StoreError> {
        let bytes = contents.expose().as_bytes().to_vec();
        self.put(record, |d| {
            d.insert(key(record).to_owned(), ByteString(bytes));
        })
    }

    fn remove(&self, record: Record) -> Result<(), StoreError> {
        if !self.data()?.contains_key(key(record)) {
            return Ok(());
        }
        self.put(record, |d| {
            d.remove(key(record));
        })
    }

    fn location(&self, record: Record) -> String {
        format!("{} key {}", self.shown(), key(record))
    }

    fn delivered(&self) -> Result<Option<bool>, StoreError> {
        // The Secret records delivery from its first write, so a missing key means never.
        Ok(Some(self.data()?.contains_key(DELIVERED)))
    }

    fn mark_delivered(&self) -> Result<(), StoreError> {
        if self.data()?.contains_key(DELIVERED) {
            return Ok(());
        }
        self.put(Record::Pki, |d| {
            d.insert(DELIVERED.to_owned(), ByteString(b"true".to_vec()));
        })
    }
}

/// A panic while a record was being written: what the cache holds is not to be trusted.
#[derive(Debug, thiserror::Error)]
#[error("a writer of the store panicked")]
struct Poisoned;

fn poisoned() -> StoreError {
    StoreError::Unusable(Box::new(Poisoned))
}
