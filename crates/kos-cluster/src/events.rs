//! Progress events of apply and teardown, for the CLI's progress bars or log lines. Sending never blocks
//! the engine on a slow or absent reader: events are dropped when the channel is full or closed.

use serde::Serialize;
use tokio::sync::mpsc::Sender;

use crate::graph::Kind;
use crate::plan::Op;

/// A phase of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Creating, updating and adopting, in dependency order.
    Converge,
    /// Removing what is no longer desired (scale-down, duplicates).
    Prune,
    /// `kos down`.
    Teardown,
    Done,
}

/// What happened.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    Phase {
        phase: Phase,
    },
    Started {
        id: String,
        kind: Kind,
        op: Op,
    },
    /// Waiting for the cloud (a server to boot, an LB to become ACTIVE, something to go away).
    Waiting {
        id: String,
        what: String,
    },
    Done {
        id: String,
        kind: Kind,
        op: Op,
    },
    Failed {
        id: String,
        error: String,
    },
    /// A server's build failed (ERROR with Nova's fault, or gone while built); it and its port
    /// are deleted, and a `Failed` of the node follows. The server's id is kept for whoever must
    /// account for it (cluster-autoscaler, told of a create error).
    BuildFailed {
        id: String,
        server: String,
        fault: String,
    },
    Deleted {
        id: String,
        kind: Kind,
        name: String,
    },
}

/// Sends without waiting; a full or closed channel loses the event, never the run.
pub(crate) fn emit(tx: Option<&Sender<Event>>, e: Event) {
    if let Some(tx) = tx {
        let _ = tx.try_send(e);
    }
}
