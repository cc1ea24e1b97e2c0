//! What the guest did that a test (or `kos sim`) wants to see besides the console: everything it
//! reported instead of silently ignoring (unknown keys, unsupported parts and commands, kubeadm's
//! warnings) and the cluster-level facts a real cloud would only show as a broken cluster (split brain,
//! a CA kubeadm had to generate).

use time::OffsetDateTime;

use crate::cluster::ClusterId;
use crate::seam::ServerId;

/// One logged fact.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub server: ServerId,
    pub what: Logged,
}

/// What was logged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Logged {
    /// A console line the guest wrote.
    Console(String),
    /// cloud-init met something the guest does not simulate or that cloud-init itself ignores.
    Reported(String),
    /// `kubeadm init` made a second cluster behind an endpoint that already served one.
    SplitBrain {
        endpoint: String,
        new: ClusterId,
        existing: Vec<ClusterId>,
    },
    /// kubeadm found no CA on disk and generated one: nodes pinned to kos's CA cannot join.
    GeneratedCa { cluster: ClusterId },
    /// A bootstrap step failed: its console reason, and the root cause where the reason (the script's
    /// last log line) hides it, e.g. kubeadm's error behind "To see the stack trace ...".
    StepFailed {
        step: String,
        reason: String,
        detail: Option<String>,
    },
}
