//! What a run keeps of a cluster besides the cloud: its secrets (PKI, encryption keys, the CCM's
//! application credential) and two records (the API address and version; whether the secrets ever
//! went into a server's user_data).
//!
//! [`SecretStore`] is the seam: a front end says *where* (the CLI: 0600 files in a 0700 directory
//! keyed by the cloud's identity; an operator: Secrets owned by its Cluster object), this module says
//! *what* ([`Records`]: each record's format, made and checked in one place, so the bytes are the
//! same wherever they are kept) and decides with them ([`secrets_for_up`], [`keys_for_up`]).
//!
//! Nothing secret reaches an error or a `Debug`: contents travel as [`Sensitive`], errors name
//! the record and where it is kept, never what it holds.

use std::time::Duration;

use kos_bootstrap::{ClusterSecrets, Sensitive};
use kos_lifecycle::encryption::KeyState;
use kos_lifecycle::rotate::Credential;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// A cause kept as the error's source.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// A token with less than this left is replaced: a node created now must be able to join with it.
pub const TOKEN_MARGIN: Duration = Duration::from_secs(30 * 60);

/// One thing a store keeps of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Record {
    /// The [`ClusterSecrets`] bundle: CAs, service-account key, join token, certificate key.
    Pki,
    /// The CCM's application credential (id, name, secret).
    CcmCredential,
    /// The credential a rotation that has not finished made.
    PendingCcmCredential,
    /// The Secrets' encryption keys and the rotation step ([`KeyState`]).
    EncryptionKeys,
    /// The API address and Kubernetes version ([`ClusterMeta`]): not secret.
    Meta,
}

impl Record {
    /// Every record, for a store that lists or moves them all.
    pub const ALL: [Record; 5] = [
        Record::Pki,
        Record::CcmCredential,
        Record::PendingCcmCredential,
        Record::EncryptionKeys,
        Record::Meta,
    ];

    /// What it is, for messages.
    #[must_use]
    pub fn what(self) -> &'static str {
        match self {
            Record::Pki => "the cluster's PKI",
            Record::CcmCredential => "the CCM application credential",
            Record::PendingCcmCredential => {
                "the CCM application credential of a rotation under way"
            }
            Record::EncryptionKeys => "the Secrets' encryption keys",
            Record::Meta => "the cluster's API address and version",
        }
    }
}

impl std::fmt::Display for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what())
    }
}

/// Why a store could not read or keep a record. `location` is where the store keeps it (a path,
/// a Secret's name), never what it holds.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read {location}")]
    Read {
        record: Record,
        location: String,
        #[source]
        source: Cause,
    },
    #[error("cannot write {location}")]
    Write {
        record: Record,
        location: String,
        #[source]
        source: Cause,
    },
    /// It is there but not what kos writes. The cause only when it cannot quote a secret.
    #[error("{location} is malformed")]
    Malformed {
        record: Record,
        location: String,
        #[source]
        source: Option<Cause>,
    },
    /// The store itself cannot be used (another owner's, locked, not the store kos made).
    #[error("the cluster's store cannot be used")]
    Unusable(#[source] Cause),
}

impl StoreError {
    /// The record it is about (`None`: the store as a whole).
    #[must_use]
    pub fn record(&self) -> Option<Record> {
        match self {
            StoreError::Read { record, .. }
            | StoreError::Write { record, .. }
            | StoreError::Malformed { record, .. } => Some(*record),
            StoreError::Unusable(_) => None,
        }
    }
}

/// Where a cluster's secrets and records are kept. Implementations keep each record whole (a
/// reader sees the old contents or the new, never a mix) and readable only by whoever runs kos for
/// the cluster. The contents are opaque here: [`Records`] gives them their form.
pub trait SecretStore: Send + Sync {
    /// The record's contents; `None` when the store has none.
    ///
    /// # Errors
    /// [`StoreError::Read`], [`StoreError::Unusable`].
    fn read(&self, record: Record) -> Result<Option<Sensitive>, StoreError>;
    /// Replaces the record's contents.
    ///
    /// # Errors
    /// [`StoreError::Write`], [`StoreError::Unusable`].
    fn write(&self, record: Record, contents: &Sensitive) -> Result<(), StoreError>;
    /// Deletes the record; one that is not there is fine.
    ///
    /// # Errors
    /// [`StoreError::Write`], [`StoreError::Unusable`].
    fn remove(&self, record: Record) -> Result<(), StoreError>;
    /// Where the record is kept, for messages (a file's path, a Secret's name).
    fn location(&self, record: Record) -> String;
    /// Whether the secrets ever went into a server's user_data (a cluster of this CA existed);
    /// `None` when the store keeps no such record (secrets from before it did were in use).
    ///
    /// # Errors
    /// As [`SecretStore::read`].
    fn delivered(&self) -> Result<Option<bool>, StoreError>;
    /// Records that the secrets are about to go into a server's user_data.
    ///
    /// # Errors
    /// As [`SecretStore::write`].
    fn mark_delivered(&self) -> Result<(), StoreError>;
}

/// What `kos kubeconfig` and the next run need besides the secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMeta {
    pub api_address: String,
    pub kubernetes_version: String,
}

/// The stored form of a credential.
#[derive(Deserialize)]
struct StoredCredential {
    id: String,
    #[serde(default)]
    name: String,
    secret: String,
}

/// The records' forms, over any [`SecretStore`].
pub trait Records: SecretStore {
    /// The cluster's PKI, `None` when the store has none.
    ///
    /// # Errors
    /// The store's; [`StoreError::Malformed`] (naming the part, never its content).
    fn pki(&self) -> Result<Option<ClusterSecrets>, StoreError> {
        let Some(text) = self.read(Record::Pki)? else {
            return Ok(None);
        };
        ClusterSecrets::from_bundle(text.expose())
            .map(Some)
            .map_err(|e| malformed(self, Record::Pki, Some(Box::new(e))))
    }

    /// # Errors
    /// The store's.
    fn put_pki(&self, secrets: &ClusterSecrets) -> Result<(), StoreError> {
        self.write(Record::Pki, &secrets.to_bundle())
    }

    /// The CCM credential, `None` when it was never stored (or lost).
    ///
    /// # Errors
    /// The store's; [`StoreError::Malformed`] (without the parser's message: it may quote the
    /// secret).
    fn ccm_credential(&self) -> Result<Option<Credential>, StoreError> {
        credential(self, Record::CcmCredential)
    }

    /// # Errors
    /// The store's.
    fn put_ccm_credential(&self, c: &Credential) -> Result<(), StoreError> {
        self.write(Record::CcmCredential, &stored(c))
    }

    /// The credential a rotation that has not finished made.
    ///
    /// # Errors
    /// As [`Records::ccm_credential`].
    fn pending_ccm_credential(&self) -> Result<Option<Credential>, StoreError> {
        credential(self, Record::PendingCcmCredential)
    }

    /// # Errors
    /// The store's.
    fn put_pending_ccm_credential(&self, c: &Credential) -> Result<(), StoreError> {
        self.write(Record::PendingCcmCredential, &stored(c))
    }

    /// The encryption keys, `None` when the store has none.
    ///
    /// # Errors
    /// The store's; [`StoreError::Malformed`] (key names only).
    fn keys(&self) -> Result<Option<KeyState>, StoreError> {
        let Some(text) = self.read(Record::EncryptionKeys)? else {
            return Ok(None);
        };
        KeyState::from_json(text.expose())
            .map(Some)
            .map_err(|e| malformed(self, Record::EncryptionKeys, Some(Box::new(e))))
    }

    /// Stores the keys and step (before anything acts on them: a crash must not lose a key that a
    /// control plane or a Secret already uses).
    ///
    /// # Errors
    /// The store's.
    fn put_keys(&self, keys: &KeyState) -> Result<(), StoreError> {
        self.write(Record::EncryptionKeys, &keys.to_json())
    }

    /// The API address and version, `None` when the store has none.
    ///
    /// # Errors
    /// The store's; [`StoreError::Malformed`].
    fn meta(&self) -> Result<Option<ClusterMeta>, StoreError> {
        let Some(text) = self.read(Record::Meta)? else {
            return Ok(None);
        };
        serde_json::from_str(text.expose())
            .map(Some)
            .map_err(|e| malformed(self, Record::Meta, Some(Box::new(e))))
    }

    /// # Errors
    /// The store's.
    fn put_meta(&self, meta: &ClusterMeta) -> Result<(), StoreError> {
        let body = serde_json::to_string_pretty(meta).map_err(|e| StoreError::Write {
            record: Record::Meta,
            location: self.location(Record::Meta),
            source: Box::new(e),
        })?;
        self.write(Record::Meta, &Sensitive::new(body))
    }
}

impl<S: SecretStore + ?Sized> Records for S {}

fn malformed<S: SecretStore + ?Sized>(s: &S, record: Record, source: Option<Cause>) -> StoreError {
    StoreError::Malformed {
        record,
        location: s.location(record),
        source,
    }
}

fn credential<S: SecretStore + ?Sized>(
    s: &S,
    record: Record,
) -> Result<Option<Credential>, StoreError> {
    let Some(text) = s.read(record)? else {
        return Ok(None);
    };
    // Never the parser's message: it may quote the secret.
    let c: StoredCredential =
        serde_json::from_str(text.expose()).map_err(|_| malformed(s, record, None))?;
    Ok(Some(Credential {
        id: c.id,
        name: c.name,
        secret: SecretString::from(c.secret),
    }))
}

fn stored(c: &Credential) -> Sensitive {
    Sensitive::new(
        serde_json::json!({"id": c.id, "name": c.name, "secret": c.secret.expose_secret()})
            .to_string(),
    )
}

/// What the cloud shows of a cluster when its secrets are looked for.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// Servers of it exist: new secrets would make nodes that cannot join it.
    pub servers: bool,
    /// Anything tagged for it exists.
    pub anything: bool,
}

/// The secrets a run works with and what happened to them.
pub struct Secrets {
    pub secrets: ClusterSecrets,
    /// The token was replaced: a running cluster does not know it yet.
    pub token_refreshed: bool,
}

/// Why a run cannot have the cluster's secrets.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Secrets once given to servers of a cluster the cloud shows nothing of.
    #[error(
        "the secrets in {location} were given to servers of a cluster that the cloud shows no trace of"
    )]
    Orphaned { location: String },
    #[error("the cluster already has servers but its secrets ({location}) are not here")]
    Missing { location: String },
    /// The cloud shows something of a cluster of this name, no server yet, and no secrets here:
    /// refused under [`Leftovers::Refuse`].
    #[error(
        "the cloud already shows resources of a cluster of this name, and its secrets ({location}) \
         are not here: someone else may be making it"
    )]
    Foreign { location: String },
    #[error("cannot generate the cluster's PKI")]
    Generate(#[source] kos_bootstrap::Error),
}

/// What a run without the cluster's secrets does when the cloud shows something of it but no
/// server (nothing holds the secrets yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Leftovers {
    /// Takes it over with new secrets (the CLI: a run whose files went before any server was made).
    #[default]
    Adopt,
    /// Refuses: another owner may be making it (the operator: a Cluster of the same name in
    /// another namespace, or a CLI user, in the same cloud project).
    Refuse,
}

/// The stored secrets, made on first use. With servers of the cluster in the cloud, new secrets
/// would make nodes that cannot join it: refused. Secrets once given to servers of a cluster the
/// cloud no longer shows at all (deleted outside kos, or another project's) are refused unless
/// `reuse` says so: a new cluster would trust every certificate the old CA signed. Without stored
/// secrets, what the cloud shows of the cluster is taken over or refused as `leftovers` says. A token that
/// expires within [`TOKEN_MARGIN`] is replaced; what changed is stored before any server gets it.
///
/// # Errors
/// [`SecretsError`].
pub fn secrets_for_up<S: SecretStore + ?Sized>(
    store: &S,
    seen: Seen,
    reuse: bool,
    leftovers: Leftovers,
    now: OffsetDateTime,
) -> Result<Secrets, SecretsError> {
    let mut rng = rand::rng();
    let stored = store.pki()?;
    // No record: from before kos kept one, so it was in use.
    if stored.is_some() && !seen.anything && !reuse && store.delivered()?.unwrap_or(true) {
        return Err(SecretsError::Orphaned {
            location: store.location(Record::Pki),
        });
    }
    let (mut secrets, mut changed) = match stored {
        Some(s) => (s, false),
        None if seen.servers => {
            return Err(SecretsError::Missing {
                location: store.location(Record::Pki),
            });
        }
        None if seen.anything && leftovers == Leftovers::Refuse => {
            return Err(SecretsError::Foreign {
                location: store.location(Record::Pki),
            });
        }
        None => (
            ClusterSecrets::generate(&mut rng, now, kos_bootstrap::DEFAULT_TOKEN_TTL)
                .map_err(SecretsError::Generate)?,
            true,
        ),
    };
    let token_refreshed = !changed && secrets.refresh_token_if_expired(&mut rng, now, TOKEN_MARGIN);
    changed |= token_refreshed;
    if changed {
        // Written before any server is created: a crash must not lose the CA the nodes get.
        store.put_pki(&secrets)?;
    }
    Ok(Secrets {
        secrets,
        token_refreshed,
    })
}

/// Why a run cannot have the cluster's encryption keys.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the cluster's control planes run with encryption keys ({recorded}) that are not here ({location})"
    )]
    Missing { recorded: String, location: String },
}

/// The keys a run works with, made on first use: a new cluster's first key, or for a running
/// cluster made before kos encrypted Secrets (its control planes record no keys) a first key
/// rolled in. Control planes that record keys the store does not have: refused, a new key of the
/// same name would not open what they sealed. `recorded`: each control plane's record.
///
/// # Errors
/// [`KeysError`].
pub fn keys_for_up<S: SecretStore + ?Sized>(
    store: &S,
    recorded: &[Option<&str>],
) -> Result<KeyState, KeysError> {
    if let Some(k) = store.keys()? {
        return Ok(k);
    }
    let mut rng = rand::rng();
    let keys = if recorded.iter().all(Option::is_none) {
        if recorded.is_empty() {
            KeyState::new_cluster(&mut rng)
        } else {
            KeyState::adopted(&mut rng)
        }
    } else {
        return Err(KeysError::Missing {
            recorded: recorded
                .iter()
                .flatten()
                .next()
                .copied()
                .unwrap_or_default()
                .to_owned(),
            location: store.location(Record::EncryptionKeys),
        });
    };
    store.put_keys(&keys)?;
    Ok(keys)
}

/// kos-lifecycle's [`CredentialStore`](kos_lifecycle::rotate::CredentialStore) over a
/// [`SecretStore`].
pub struct CredentialRecords<'a, S: ?Sized>(pub &'a S);

fn lifecycle(e: StoreError) -> kos_lifecycle::rotate::StoreError {
    use kos_lifecycle::rotate::StoreError as L;
    match e {
        StoreError::Read {
            location, source, ..
        } => L::Read { location, source },
        StoreError::Write {
            location, source, ..
        } => L::Write { location, source },
        StoreError::Malformed { location, .. } => L::Malformed { location },
        e @ StoreError::Unusable(_) => L::Read {
            location: "the cluster's store".into(),
            source: Box::new(e),
        },
    }
}

impl<S: SecretStore + ?Sized> kos_lifecycle::rotate::CredentialStore for CredentialRecords<'_, S> {
    fn pending(&self) -> Result<Option<Credential>, kos_lifecycle::rotate::StoreError> {
        self.0.pending_ccm_credential().map_err(lifecycle)
    }

    fn committed(&self) -> Result<Option<Credential>, kos_lifecycle::rotate::StoreError> {
        self.0.ccm_credential().map_err(lifecycle)
    }

    fn keep_pending(&self, c: &Credential) -> Result<(), kos_lifecycle::rotate::StoreError> {
        self.0.put_pending_ccm_credential(c).map_err(lifecycle)
    }

    fn commit(&self, c: &Credential) -> Result<(), kos_lifecycle::rotate::StoreError> {
        self.0.put_ccm_credential(c).map_err(lifecycle)?;
        self.0
            .remove(Record::PendingCcmCredential)
            .map_err(lifecycle)
    }
}

/// A store in memory, for tests and for a front end that moves a cluster's records elsewhere.
#[derive(Debug, Default)]
pub struct Memory {
    records: std::sync::Mutex<std::collections::HashMap<Record, Sensitive>>,
    /// A store that keeps the record from the start: never delivered until told.
    delivered: std::sync::Mutex<bool>,
}

impl SecretStore for Memory {
    fn read(&self, record: Record) -> Result<Option<Sensitive>, StoreError> {
        Ok(self
            .records
            .lock()
            .map_err(|_| poisoned())?
            .get(&record)
            .cloned())
    }

    fn write(&self, record: Record, contents: &Sensitive) -> Result<(), StoreError> {
        self.records
            .lock()
            .map_err(|_| poisoned())?
            .insert(record, contents.clone());
        Ok(())
    }

    fn remove(&self, record: Record) -> Result<(), StoreError> {
        self.records.lock().map_err(|_| poisoned())?.remove(&record);
        Ok(())
    }

    fn location(&self, record: Record) -> String {
        format!("memory ({record})")
    }

    fn delivered(&self) -> Result<Option<bool>, StoreError> {
        Ok(Some(*self.delivered.lock().map_err(|_| poisoned())?))
    }

    fn mark_delivered(&self) -> Result<(), StoreError> {
        *self.delivered.lock().map_err(|_| poisoned())? = true;
        Ok(())
    }
}

/// A panic while a record was being written: what it holds is not to be trusted.
#[derive(Debug, thiserror::Error)]
#[error("a writer of the store panicked")]
struct Poisoned;

fn poisoned() -> StoreError {
    StoreError::Unusable(Box::new(Poisoned))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
