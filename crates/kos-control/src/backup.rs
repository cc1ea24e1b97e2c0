//! A cluster's records sealed with a passphrase the user gives (`kos backup`), and opened again
//! into a store (`kos restore`): what lets a cluster whose API, management cluster or workstation is
//! gone be taken on again from the CLI, since the cloud shows its servers but never its secrets.
//!
//! The file is JSON: the format, the cluster's name, PBKDF2-HMAC-SHA256's salt and iterations, and
//! AES-256-GCM's nonce and sealed records (the format and cluster's name as associated data, so a
//! backup cannot be passed off as another cluster's). Nothing in it is readable without the
//! passphrase, and nothing is written over a record that differs.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kos_bootstrap::Sensitive;
use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};

use crate::store::{Record, SecretStore, StoreError};

/// The file's format.
pub const FORMAT: &str = "kos-backup/v1";
/// PBKDF2 iterations: OWASP's figure for PBKDF2-HMAC-SHA256 (2023).
pub const ITERATIONS: u32 = 600_000;
/// The shortest passphrase taken.
pub const MIN_PASSPHRASE: usize = 12;
const SALT_LEN: usize = 16;
/// The records' names in the sealed document (the operator's Secret keys' spelling).
const NAMES: [(Record, &str); 5] = [
    (Record::Pki, "pki"),
    (Record::CcmCredential, "ccmCredential"),
    (Record::PendingCcmCredential, "pendingCcmCredential"),
    (Record::EncryptionKeys, "encryptionKeys"),
    (Record::Meta, "meta"),
];

/// Why a backup could not be made or opened. Never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("the passphrase is {0} characters; give at least {MIN_PASSPHRASE}")]
    ShortPassphrase(usize),
    #[error("the store holds no records of cluster {0}: nothing to back up")]
    Empty(String),
    #[error("not a kos backup ({0})")]
    NotBackup(String),
    #[error("a {found} file, not {FORMAT}: written by another kos")]
    Format { found: String },
    /// A wrong passphrase and a changed file look alike to AES-GCM.
    #[error("the passphrase is wrong, or the file was changed")]
    Opening,
    #[error("{record} differs from the backup's: nothing was written ({location})")]
    Differs {
        record: &'static str,
        location: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no random bytes: {0}")]
    Random(String),
}

/// The file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    format: String,
    cluster: String,
    kdf: Kdf,
    nonce: String,
    sealed: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Kdf {
    name: String,
    iterations: u32,
    salt: String,
}

const KDF_NAME: &str = "PBKDF2-HMAC-SHA256";

fn key(
    passphrase: &SecretString,
    salt: &[u8],
    iterations: u32,
) -> Result<LessSafeKey, BackupError> {
    let iterations = NonZeroU32::new(iterations).ok_or(BackupError::Opening)?;
    let mut bytes = [0u8; 32];
    aws_lc_rs::pbkdf2::derive(
        aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        passphrase.expose_secret().as_bytes(),
        &mut bytes,
    );
    let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| BackupError::Opening)?;
    bytes.fill(0);
    Ok(LessSafeKey::new(key))
}

fn aad(cluster: &str) -> Vec<u8> {
    format!("{FORMAT}\n{cluster}").into_bytes()
}

/// The backup of `cluster`'s records in `store`, sealed with `passphrase`: the file's text.
///
/// # Errors
/// [`BackupError`].
pub fn seal(
    cluster: &str,
    store: &dyn SecretStore,
    passphrase: &SecretString,
) -> Result<String, BackupError> {
    seal_with(cluster, store, passphrase, ITERATIONS)
}

fn seal_with(
    cluster: &str,
    store: &dyn SecretStore,
    passphrase: &SecretString,
    iterations: u32,
) -> Result<String, BackupError> {
    let chars = passphrase.expose_secret().chars().count();
    if chars < MIN_PASSPHRASE {
        return Err(BackupError::ShortPassphrase(chars));
    }
    let mut records = BTreeMap::new();
    for (record, name) in NAMES {
        if let Some(s) = store.read(record)? {
            records.insert(name, s.expose().to_owned());
        }
    }
    if records.is_empty() {
        return Err(BackupError::Empty(cluster.to_owned()));
    }
    // Whether the secrets went into a server's user_data: the restored store says so too.
    let delivered = store.delivered()?.unwrap_or(true);
    let plain = serde_json::json!({"records": records, "delivered": delivered});
    let mut data = serde_json::to_vec(&plain).map_err(|e| BackupError::NotBackup(e.to_string()))?;
    drop(records);
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut salt).map_err(|e| BackupError::Random(e.to_string()))?;
    aws_lc_rs::rand::fill(&mut nonce).map_err(|e| BackupError::Random(e.to_string()))?;
    let key = key(passphrase, &salt, iterations)?;
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad(cluster)),
        &mut data,
    )
    .map_err(|_| BackupError::Opening)?;
    let file = File {
        format: FORMAT.to_owned(),
        cluster: cluster.to_owned(),
        kdf: Kdf {
            name: KDF_NAME.to_owned(),
            iterations,
            salt: B64.encode(salt),
        },
        nonce: B64.encode(nonce),
        sealed: B64.encode(&data),
    };
    let mut text =
        serde_json::to_string_pretty(&file).map_err(|e| BackupError::NotBackup(e.to_string()))?;
    text.push('\n');
    Ok(text)
}

/// A backup opened: the cluster's name and its records.
pub struct Opened {
    pub cluster: String,
    records: Vec<(Record, Sensitive)>,
    delivered: bool,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("cluster", &self.cluster)
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl Opened {
    /// How many records it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it holds none (never, for a file [`seal`] wrote).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The backup in `text`, opened with `passphrase`.
///
/// # Errors
/// [`BackupError`]: not a backup, another format, or a wrong passphrase or changed file.
pub fn open(text: &str, passphrase: &SecretString) -> Result<Opened, BackupError> {
    let file: File =
        serde_json::from_str(text).map_err(|e| BackupError::NotBackup(e.to_string()))?;
    if file.format != FORMAT {
        return Err(BackupError::Format { found: file.format });
    }
    if file.kdf.name != KDF_NAME {
        return Err(BackupError::NotBackup(format!(
            "key derivation {}",
            file.kdf.name
        )));
    }
    let bytes = |s: &str| {
        B64.decode(s)
            .map_err(|e| BackupError::NotBackup(e.to_string()))
    };
    let salt = bytes(&file.kdf.salt)?;
    let nonce: [u8; NONCE_LEN] = bytes(&file.nonce)?
        .try_into()
        .map_err(|_| BackupError::NotBackup("a nonce of the wrong length".into()))?;
    let mut data = bytes(&file.sealed)?;
    let key = key(passphrase, &salt, file.kdf.iterations)?;
    let plain = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(&file.cluster)),
            &mut data,
        )
        .map_err(|_| BackupError::Opening)?;
    #[derive(Deserialize)]
    struct Plain {
        records: BTreeMap<String, String>,
        delivered: bool,
    }
    let parsed: Result<Plain, _> = serde_json::from_slice(plain);
    data.fill(0);
    let plain = parsed.map_err(|_| BackupError::NotBackup("its sealed records".into()))?;
    let mut records = Vec::new();
    for (name, contents) in plain.records {
        let record = NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(r, _)| *r)
            .ok_or_else(|| BackupError::NotBackup(format!("an unknown record {name}")))?;
        records.push((record, Sensitive::new(contents)));
    }
    Ok(Opened {
        cluster: file.cluster,
        records,
        delivered: plain.delivered,
    })
}

/// Writes the backup's records into `store`. A record the store holds already must be the same:
/// otherwise nothing is written and the error names it.
///
/// # Errors
/// [`BackupError::Differs`], [`BackupError::Store`].
pub fn restore(opened: &Opened, store: &dyn SecretStore) -> Result<usize, BackupError> {
    let mut missing = Vec::new();
    for (record, contents) in &opened.records {
        match store.read(*record)? {
            Some(held) if held.expose() == contents.expose() => {}
            Some(_) => {
                return Err(BackupError::Differs {
                    record: record.what(),
                    location: store.location(*record),
                });
            }
            None => missing.push((*record, contents)),
        }
    }
    for (record, contents) in &missing {
        store.write(*record, contents)?;
    }
    if opened.delivered {
        store.mark_delivered()?;
    }
    Ok(missing.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::store::Memory;

    fn store_with(records: &[(Record, &str)]) -> Memory {
        let m = Memory::default();
        for (r, t) in records {
            m.write(*r, &Sensitive::new(*t)).unwrap();
        }
        m
    }

    fn pass(s: &str) -> SecretString {
        SecretString::from(s.to_owned())
    }

    #[test]
    fn a_backup_opens_with_its_passphrase_only_and_restores_what_is_missing() {
        let from = store_with(&[
            (Record::Pki, "pki-secret-text"),
            (Record::Meta, "{\"a\":1}"),
        ]);
        from.mark_delivered().unwrap();
        let text = seal_with("demo", &from, &pass("correct horse battery"), 1000).unwrap();
        assert!(!text.contains("pki-secret-text"), "sealed: {text}");
        assert!(matches!(
            open(&text, &pass("wrong horse battery")),
            Err(BackupError::Opening)
        ));
        let opened = open(&text, &pass("correct horse battery")).unwrap();
        assert_eq!(opened.cluster, "demo");
        assert_eq!(opened.len(), 2);
        let to = Memory::default();
        assert_eq!(restore(&opened, &to).unwrap(), 2);
        assert_eq!(
            to.read(Record::Pki).unwrap().unwrap().expose(),
            "pki-secret-text"
        );
        assert_eq!(to.delivered().unwrap(), Some(true));
        // Again: the same records are there, nothing to write.
        assert_eq!(restore(&opened, &to).unwrap(), 0);
        // A store holding another cluster's PKI is left as it is.
        let other = store_with(&[(Record::Pki, "another-pki")]);
        assert!(matches!(
            restore(&opened, &other),
            Err(BackupError::Differs { .. })
        ));
        assert_eq!(
            other
                .read(Record::Meta)
                .unwrap()
                .map(|s| s.expose().to_owned()),
            None
        );
    }

    #[test]
    fn a_changed_or_relabelled_backup_does_not_open() {
        let from = store_with(&[(Record::Pki, "pki")]);
        let p = pass("correct horse battery");
        let text = seal_with("demo", &from, &p, 1000).unwrap();
        let relabelled = text.replace("\"cluster\": \"demo\"", "\"cluster\": \"prod\"");
        assert_ne!(relabelled, text);
        assert!(matches!(open(&relabelled, &p), Err(BackupError::Opening)));
        let mut file: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sealed = file["sealed"].as_str().unwrap().to_owned();
        let mut bytes = B64.decode(sealed).unwrap();
        bytes[0] ^= 1;
        file["sealed"] = B64.encode(bytes).into();
        assert!(matches!(
            open(&file.to_string(), &p),
            Err(BackupError::Opening)
        ));
        assert!(matches!(open("{}", &p), Err(BackupError::NotBackup(_))));
        assert!(matches!(
            seal_with("demo", &from, &pass("short"), 1000),
            Err(BackupError::ShortPassphrase(5))
        ));
        assert!(matches!(
            seal_with("demo", &Memory::default(), &p, 1000),
            Err(BackupError::Empty(_))
        ));
    }
}
