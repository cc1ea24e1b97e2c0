//! Events about the objects kos-ccm works on, written as client-go's event recorder writes them:
//! `events.k8s.io/v1`, and a repeat (same object, type, reason, action and reporter) within six
//! minutes of the last one patches the first Event's `series` instead of making another.
//!
//! kube-runtime's `Recorder` does the same, but remembers each Event it wrote whole (and its
//! key, the whole object reference) for those six minutes: at 1000 Services the largest single
//! part of kos-ccm's heap (heaptrack, `kos bench ccm`, 2026-12-02). This remembers what a repeat
//! needs, the Event's name and count.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// How long a written Event can still be repeated into (client-go's and kube-runtime's).
const REPEAT_WITHIN: SignedDuration = SignedDuration::from_mins(6);

/// Which Events are one series: the object (not its resourceVersion), the reporter is fixed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    action: String,
    regarding: [Option<String>; 6],
}

impl Key {
    fn of(ev: &Event, r: &ObjectReference) -> Key {
        Key {
            warning: matches!(ev.type_, EventType::Warning),
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            regarding: [
                r.api_version.clone(),
                r.kind.clone(),
                r.namespace.clone(),
                r.name.clone(),
                r.uid.clone(),
                r.field_path.clone(),
            ],
        }
    }
}

/// A written Event: where it is, how often it happened, when last.
#[derive(Debug, Clone)]
struct Written {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

/// Writes Events; cheap to share (one per process, in [`crate::context::Context`]).
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    written: Mutex<HashMap<Key, Written>>,
}

impl Recorder {
    pub fn new(client: kube::Client, reporter: Reporter) -> Recorder {
        Recorder {
            client,
            reporter,
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Writes `ev` about `regarding`: a new Event, or the next of a series.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = Key::of(ev, regarding);
        let before = {
            let mut written = self.lock();
            written.retain(|_, w| w.last + REPEAT_WITHIN > now);
            written.get(&key).cloned()
        };
        let next = match before {
            Some(w) => match self.repeat(&w, now).await {
                Ok(()) => Written {
                    count: w.count + 1,
                    last: now,
                    ..w
                },
                // Gone meanwhile (Events have a TTL of their own): start again, as client-go.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.create(ev, regarding, now).await?
                }
                Err(e) => return Err(e),
            },
            None => self.create(ev, regarding, now).await?,
        };
        self.lock().insert(key, next);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Written>> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn create(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> Result<Written, kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = format!(
            "{}.{:x}",
            regarding
                .name
                .as_deref()
                .unwrap_or(&self.reporter.controller),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            related: ev.secondary.clone(),
            ..K8sEvent::default()
        };
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        Ok(Written {
            namespace,
            name,
            count: 1,
            last: now,
        })
    }

    /// The series of `w` one longer (client-go patches only the series, too).
    async fn repeat(&self, w: &Written, now: Timestamp) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "series": {"count": w.count + 1, "lastObservedTime": MicroTime(now)}
        });
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &w.namespace);
        events
            .patch(&w.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Service;
    use kube::Resource;

    use super::*;

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some("note".into()),
            action: "Ensure".into(),
            secondary: None,
        }
    }

    /// A repeat is the first Event's series (count 2, then 3), another reason or object is an
    /// Event of its own, and an Event deleted meanwhile is made again.
    #[tokio::test]
    async fn repeats_are_one_series_as_client_go_writes_them() {
        let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
        let client = fake.client().expect("client");
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "kos-ccm".into(),
                instance: Some("test".into()),
            },
        );
        let svc = |name: &str| {
            let mut s = Service::default();
            s.metadata.name = Some(name.into());
            s.metadata.namespace = Some("default".into());
            s.metadata.uid = Some(format!("uid-{name}"));
            s.object_ref(&())
        };
        let (web, db) = (svc("web"), svc("db"));
        for _ in 0..3 {
            recorder
                .publish(&event("Ensured"), &web)
                .await
                .expect("web");
        }
        recorder
            .publish(&event("Failed"), &web)
            .await
            .expect("web failed");
        recorder.publish(&event("Ensured"), &db).await.expect("db");

        let events: Api<K8sEvent> = Api::namespaced(client, "default");
        let all = events.list(&Default::default()).await.expect("list").items;
        let of = |name: &str, reason: &str| {
            all.iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason)
                })
                .collect::<Vec<_>>()
        };
        let ensured = of("web", "Ensured");
        assert_eq!(ensured.len(), 1, "{all:#?}");
        assert_eq!(ensured[0].series.as_ref().map(|s| s.count), Some(3));
        assert_eq!(ensured[0].reporting_controller.as_deref(), Some("kos-ccm"));
        assert_eq!(ensured[0].reporting_instance.as_deref(), Some("test"));
        assert_eq!(ensured[0].type_.as_deref(), Some("Normal"));
        assert_eq!(ensured[0].note.as_deref(), Some("note"));
        assert_eq!(of("web", "Failed").len(), 1);
        assert!(of("web", "Failed")[0].series.is_none());
        assert_eq!(of("db", "Ensured").len(), 1);
        assert_eq!(all.len(), 3);

        // The series' Event went away (its TTL): the next repeat makes a new one.
        let name = ensured[0].metadata.name.clone().unwrap_or_default();
        events
            .delete(&name, &Default::default())
            .await
            .expect("delete");
        recorder
            .publish(&event("Ensured"), &web)
            .await
            .expect("again");
        let all = events.list(&Default::default()).await.expect("list").items;
        assert_eq!(all.len(), 3);
        assert!(
            all.iter()
                .all(|e| e.metadata.name.as_deref() != Some(&name))
        );
    }
}
