//! A run's steps as Kubernetes Events on its Cluster: the kos-control [`Report`] the operator
//! gives a run. Each event kos-control reports that a person would want in `kubectl describe`
//! becomes an Event (reason, note); the run's outcome is folded into a [`Summary`] as the CLI's
//! `--output json` folds it.

use kos_control::report::{Event, Report};
use kube::runtime::events::EventType;

/// One Event to publish: its type, reason (CamelCase) and note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl Note {
    #[must_use]
    pub fn event_type(&self) -> EventType {
        if self.warning {
            EventType::Warning
        } else {
            EventType::Normal
        }
    }
}

/// The Event a step of a run makes, if any (never a secret: kos-control's events carry none).
#[must_use]
pub fn note(event: &Event<'_>) -> Option<Note> {
    let n = |reason: &'static str, note: String| {
        Some(Note {
            warning: false,
            reason,
            note,
        })
    };
    let w = |reason: &'static str, note: String| {
        Some(Note {
            warning: true,
            reason,
            note,
        })
    };
    match *event {
        Event::Changes { changes, .. } => {
            n("Applying", format!("{changes} change(s) to the cloud"))
        }
        Event::Applied { changes, .. } => n("Applied", format!("{changes} change(s) made")),
        Event::ApplyStopped { changes } => w(
            "ApplyStopped",
            format!("the apply stopped after {changes} change(s)"),
        ),
        Event::Formation { reason, .. } => n("Formation", reason.to_owned()),
        Event::FollowingConsoles { nodes, .. } => n(
            "Bootstrapping",
            format!("following {nodes} node(s)' bootstrap"),
        ),
        Event::FailedEarlier { why } => w("FailedEarlier", why.to_owned()),
        Event::ApiReady { nodes } => n(
            "ApiReady",
            format!("the API is ready, {nodes} node(s) Ready"),
        ),
        Event::Leaving {
            node,
            scale_down,
            changes,
            ..
        } => n(
            if scale_down {
                "ScalingDown"
            } else {
                "Replacing"
            },
            // Why: the plan's changes, or what its health check found.
            format!("{node} leaves the cluster: {changes}"),
        ),
        Event::Drained { node, evicted } => n(
            "Drained",
            format!("{node} drained, {evicted} pod(s) evicted"),
        ),
        Event::NotDrained { nodes, why } => w("NotDrained", format!("{nodes}: {why}")),
        Event::NodeKept { node, why } => n("NodeKept", format!("{node}: {why}")),
        Event::RepairHeld { group, why, .. } => w("RepairHeld", format!("{group}: {why}")),
        Event::Member { line } => n("EtcdMember", line.to_owned()),
        Event::ConfigMoved { version, .. } => n(
            "KubeadmConfig",
            match version {
                Some(v) => format!("kubeadm-config moved to {v}"),
                None => "kubeadm-config moved".to_owned(),
            },
        ),
        Event::AddonMoved { addon, minor, .. } => n(
            "AddonMoved",
            format!("{addon} moved to Kubernetes 1.{minor}"),
        ),
        Event::AddonsNotMoved { why } => w("AddonsNotMoved", why.to_owned()),
        Event::KeysStep { shown, .. } => n("EncryptionKeys", shown.to_owned()),
        Event::SecretsRewritten { secrets, .. } => n(
            "SecretsRewritten",
            format!("{secrets} Secret(s) written again under the new key"),
        ),
        Event::Rotation { line } => n("CredentialRotation", line.to_owned()),
        Event::RotationDue { why, .. } => n("CredentialRotationDue", why.to_owned()),
        Event::CcmSecretLost { location, .. } => w(
            "CcmCredentialLost",
            format!("the CCM credential's secret is not in {location}"),
        ),
        Event::TokenScriptFailed { why, .. } => w("JoinTokenNotPushed", why.to_owned()),
        _ => None,
    }
}

/// Forwards each step's [`Note`] to a channel the reconciler publishes from, and every event to
/// `inner` (the run's summary).
pub struct Forward<'a> {
    pub inner: &'a dyn Report,
    pub notes: tokio::sync::mpsc::UnboundedSender<Note>,
    /// The soonest a node's health must be looked at again, in the cloud's seconds.
    pub recheck: &'a Recheck,
    /// The servers whose build failed in the turn's applies.
    pub builds: BuildFailures,
}

/// The servers whose build failed in a run's applies: (node's logical id, server id, fault).
#[derive(Debug, Default, Clone)]
pub struct BuildFailures(std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>);

impl BuildFailures {
    fn push(&self, failure: (String, String, String)) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(failure);
    }

    /// Every failure so far.
    #[must_use]
    pub fn seen(&self) -> Vec<(String, String, String)> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The soonest of the turn's [`Event::HealthRecheck`]s.
#[derive(Debug, Default)]
pub struct Recheck(std::sync::Mutex<Option<u64>>);

impl Recheck {
    fn saw(&self, secs: u64) {
        let mut soonest = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *soonest = Some(soonest.map_or(secs, |s| s.min(secs)));
    }

    /// In how many of the cloud's seconds, if a node's health must be looked at again.
    #[must_use]
    pub fn secs(&self) -> Option<u64> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Report for Forward<'_> {
    fn event(&self, event: Event<'_>) {
        if let Event::HealthRecheck { secs, .. } = event {
            self.recheck.saw(secs);
        }
        if let Some(n) = note(&event) {
            // The publisher is gone only when the reconcile ended: nothing left to tell.
            let _ = self.notes.send(n);
        }
        self.inner.event(event);
    }

    /// The apply's events: a build that failed is kept ([`BuildFailures`]), the rest dropped (no
    /// front end renders them).
    fn apply_progress(
        &self,
        _total: u64,
    ) -> (
        tokio::sync::mpsc::Sender<kos_cluster::events::Event>,
        tokio::task::JoinHandle<()>,
    ) {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let builds = self.builds.clone();
        let task = tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if let kos_cluster::events::Event::BuildFailed { id, server, fault } = e {
                    builds.push((id, server, fault));
                }
            }
        });
        (tx, task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_become_events_and_warnings() {
        let applied = note(&Event::Applied {
            cluster: "c",
            changes: 3,
            api_address: None,
        })
        .expect("an event");
        assert_eq!(applied.reason, "Applied");
        assert_eq!(applied.event_type(), EventType::Normal);
        let held = note(&Event::RepairHeld {
            cluster: "c",
            group: "workers",
            why: "3 of 5 unhealthy",
        })
        .expect("an event");
        assert_eq!(held.event_type(), EventType::Warning);
        assert!(held.note.contains("workers"));
        assert!(note(&Event::TokenPushed).is_none());
    }
}
