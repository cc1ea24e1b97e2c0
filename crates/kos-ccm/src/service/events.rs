//! Which Event notes to record. A pass repeats the notes of its Service's standing problems (a
//! typo in an annotation, no eligible node) every time it runs; recording each would make every
//! resync write Events. A note is recorded again only when the Service changed since, or after
//! the repeat interval (Events expire). Notes of passes that changed the cloud are Normal news
//! and always recorded.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;

use crate::lb::annotations::{LOAD_BALANCER_ADDRESS, LOAD_BALANCER_ID};
use crate::lb::{EventNote, EventType};

/// What a note is about: the Service's inputs (spec and the annotations kos-ccm does not write).
pub(crate) fn fingerprint(svc: &Service) -> u64 {
    let mut h = DefaultHasher::new();
    // Serialising a spec cannot fail; an empty string would only make notes repeat.
    serde_json::to_string(&svc.spec)
        .unwrap_or_default()
        .hash(&mut h);
    if let Some(ann) = &svc.metadata.annotations {
        for (k, v) in ann {
            if k != LOAD_BALANCER_ID && k != LOAD_BALANCER_ADDRESS {
                (k, v).hash(&mut h);
            }
        }
    }
    svc.metadata.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

type Key = (bool, &'static str, String);

struct Seen {
    fingerprint: u64,
    recorded: HashMap<Key, Instant>,
}

/// Per Service UID, the notes recorded for its current fingerprint.
pub(crate) struct EventMemory {
    repeat_after: Duration,
    seen: Mutex<HashMap<String, Seen>>,
}

impl EventMemory {
    pub(crate) fn new(repeat_after: Duration) -> EventMemory {
        EventMemory {
            repeat_after,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn locked(&self) -> MutexGuard<'_, HashMap<String, Seen>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notes of one pass to record now (and remembers them as recorded).
    pub(crate) fn to_record<'a>(
        &self,
        uid: &str,
        fingerprint: u64,
        notes: &'a [EventNote],
        changed_cloud: bool,
    ) -> Vec<&'a EventNote> {
        self.to_record_at(uid, fingerprint, notes, changed_cloud, Instant::now())
    }

    fn to_record_at<'a>(
        &self,
        uid: &str,
        fingerprint: u64,
        notes: &'a [EventNote],
        changed_cloud: bool,
        now: Instant,
    ) -> Vec<&'a EventNote> {
        let mut seen = self.locked();
        let entry = seen.entry(uid.to_owned()).or_insert_with(|| Seen {
            fingerprint,
            recorded: HashMap::new(),
        });
        if entry.fingerprint != fingerprint {
            entry.fingerprint = fingerprint;
            entry.recorded.clear();
        }
        notes
            .iter()
            .filter(|n| {
                let key = (n.type_ == EventType::Warning, n.reason, n.note.clone());
                let news = changed_cloud && n.type_ == EventType::Normal;
                let fresh = entry
                    .recorded
                    .get(&key)
                    .is_some_and(|at| now.duration_since(*at) < self.repeat_after);
                if news || !fresh {
                    entry.recorded.insert(key, now);
                    true
                } else {
                    false
                }
            })
            .collect()
    }

    pub(crate) fn forget(&self, uid: &str) {
        self.locked().remove(uid);
    }

    /// Drops what is remembered of Services that no longer exist.
    pub(crate) fn retain(&self, live: &HashSet<String>) {
        self.locked().retain(|uid, _| live.contains(uid));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locked().len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ServiceSpec;

    use super::*;

    fn note(type_: EventType, reason: &'static str, text: &str) -> EventNote {
        EventNote {
            type_,
            reason,
            note: text.into(),
        }
    }

    fn svc(annotations: &[(&str, &str)]) -> Service {
        let mut s = Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        s.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        );
        s
    }

    #[test]
    fn a_standing_warning_is_recorded_once_until_the_service_changes_or_time_passes() {
        let m = EventMemory::new(Duration::from_secs(3600));
        let warn = [note(
            EventType::Warning,
            "Invalid",
            "timeout-client-data: 5s",
        )];
        let fp = fingerprint(&svc(&[("x", "1")]));
        assert_eq!(m.to_record("u", fp, &warn, false).len(), 1);
        assert!(m.to_record("u", fp, &warn, false).is_empty());
        // Our own annotations are outputs, not a change of the Service.
        let written = fingerprint(&svc(&[("x", "1"), (LOAD_BALANCER_ID, "id")]));
        assert_eq!(written, fp);
        assert!(m.to_record("u", written, &warn, true).is_empty());
        // A changed Service hears it again, as does one after the repeat interval.
        let changed = fingerprint(&svc(&[("x", "2")]));
        assert_eq!(m.to_record("u", changed, &warn, false).len(), 1);
        assert!(m.to_record("u", changed, &warn, false).is_empty());
        let later = Instant::now() + Duration::from_secs(3601);
        assert_eq!(m.to_record_at("u", changed, &warn, false, later).len(), 1);
        // Another Service is another story.
        assert_eq!(m.to_record("v", changed, &warn, false).len(), 1);
        m.retain(&HashSet::from(["v".to_owned()]));
        assert_eq!(m.len(), 1);
        m.forget("v");
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn normal_notes_of_a_pass_that_changed_the_cloud_are_always_recorded() {
        let m = EventMemory::new(Duration::from_secs(3600));
        let fp = fingerprint(&svc(&[]));
        let n = [note(EventType::Normal, "Updating", "replace members")];
        assert_eq!(m.to_record("u", fp, &n, true).len(), 1);
        assert_eq!(m.to_record("u", fp, &n, true).len(), 1);
        assert!(m.to_record("u", fp, &n, false).is_empty());
    }
}
