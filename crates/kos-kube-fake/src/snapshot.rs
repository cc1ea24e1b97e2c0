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
        }
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
            fake.shared
                .store()
                .import(snapshot.resource_version, objects)
                .map_err(|kind| FakeError::UnknownType { kind })?;
        }
        fake.shared.notify();
        Ok(fake)
    }
}
