//! Snapshots: a fake's objects taken out and put back into a new fake, so a simulated cluster
//! outlives the process that made it (kos-guest saves its clusters next to the simulated cloud's
//! state). Objects keep their uid, resourceVersion, timestamps and field ownership; the change
//! history does not survive (a watch resuming from before the snapshot gets 410 Gone and relists,
//! as after etcd compaction), nor do the request log and injected faults.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Config, FakeError, FakeKube};

/// A fake's objects at one resourceVersion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub resource_version: u64,
    pub objects: Vec<SnapshotObject>,
    /// What etcd held of each Secret (encryption at rest): restored as it was, so a value sealed
    /// under a key stays sealed under it.
    #[serde(default)]
    pub at_rest: Vec<AtRest>,
}

/// One Secret's stored bytes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtRest {
    pub namespace: String,
    pub name: String,
    /// The bytes etcd holds, base64 (a sealed value, or the plain object for identity).
    pub value: String,
}

impl std::fmt::Debug for AtRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AtRest({}/{}, {} bytes)",
            self.namespace,
            self.name,
            self.value.len()
        )
    }
}

impl AtRest {
    /// The stored bytes.
    #[must_use]
    pub fn bytes(&self) -> Vec<u8> {
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &self.value)
            .unwrap_or_default()
    }

    /// `k8s:enc:<provider>:v1:<key name>:` of a sealed value, `None` for a plain one.
    #[must_use]
    pub fn prefix(&self) -> Option<String> {
        let b = self.bytes();
        let rest = b.strip_prefix(b"k8s:enc:")?;
        // provider, v1, key name: three fields, each ended by ':'.
        let mut end = 0;
        for _ in 0..3 {
            end += rest.get(end..)?.iter().position(|&c| c == b':')? + 1;
        }
        Some(format!("k8s:enc:{}", String::from_utf8_lossy(&rest[..end])))
    }

    /// The key name of a sealed value.
    #[must_use]
    pub fn key_name(&self) -> Option<String> {
        let p = self.prefix()?;
        p.trim_end_matches(':')
            .rsplit(':')
            .next()
            .map(str::to_owned)
    }
}

/// One object and the coordinates of its type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotObject {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub object: Value,
}

impl FakeKube {
    /// Every object the fake holds, and its resourceVersion.
    pub fn snapshot(&self) -> Snapshot {
        let at_rest = self.at_rest();
        let store = self.shared.store();
        let objects = store
            .export()
            .into_iter()
            .map(|(res, object)| {
                let t = &store.types[res];
                SnapshotObject {
                    group: t.group.clone(),
                    version: t.version.clone(),
                    plural: t.plural.clone(),
                    object,
                }
            })
            .collect();
        Snapshot {
            resource_version: store.resource_version(),
            objects,
            at_rest,
        }
    }

    /// What etcd holds of every Secret now (a test's view of encryption at rest).
    pub fn at_rest(&self) -> Vec<AtRest> {
        self.shared
            .store()
            .at_rest()
            .into_iter()
            .map(|(namespace, name, b)| AtRest {
                namespace,
                name,
                value: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b),
            })
            .collect()
    }

    /// The encryption configuration of writes that no API server front made (in-process and
    /// loopback writes): kos-guest sets the newest API server's.
    pub fn set_encryption(&self, config: std::sync::Arc<crate::encryption::EncryptionConfig>) {
        self.shared.store().encryption = config;
    }

    /// As [`FakeKube::start_sync`], holding the objects of `snapshot`.
    ///
    /// # Errors
    /// [`FakeError::UnknownType`] for an object whose type neither `config` nor a snapshot's
    /// CustomResourceDefinition serves; as
    /// [`FakeKube::start_sync`] otherwise.
    pub fn start_sync_from(config: Config, snapshot: &Snapshot) -> Result<FakeKube, FakeError> {
        let fake = FakeKube::start_sync(config)?;
        {
            let objects = snapshot
                .objects
                .iter()
                .map(|o| {
                    (
                        o.group.clone(),
                        o.version.clone(),
                        o.plural.clone(),
                        o.object.clone(),
                    )
                })
                .collect();
            let mut store = fake.shared.store();
            store
                .import(snapshot.resource_version, objects)
                .map_err(|kind| FakeError::UnknownType { kind })?;
            store.restore_at_rest(
                snapshot
                    .at_rest
                    .iter()
                    .map(|a| (a.namespace.clone(), a.name.clone(), a.bytes())),
            );
        }
        fake.shared.notify();
        Ok(fake)
    }
}
