//! What a run reports as it goes. The library prints nothing: it hands [`Event`]s to a [`Report`],
//! which a front end renders (the CLI as lines on stderr, an operator as Kubernetes Events or
//! status conditions). Text in an event may come from the cluster or a node's console: a renderer
//! escapes it before it reaches a terminal.

use std::sync::Mutex;
use std::time::Duration;

/// How long a wait may stay silent: then it reports what it still waits for.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// One thing worth telling while a run goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A new bootstrap marker on a node's console (`kernel ok`; the guest's own text).
    Marker { node: &'a str, marker: &'a str },
    /// A node an earlier run created whose console (`kib` long) holds no marker: they scrolled
    /// out, so it is not followed.
    Scrolled { node: &'a str, kib: usize },
    /// Nothing new on any console for a [`HEARTBEAT`]: the nodes awaited (`id (last: …)`), and how
    /// much of the console phase's `deadline` is `left`.
    ConsolesWaiting {
        waiting: &'a [String],
        left: Duration,
        deadline: Duration,
    },
    /// The cluster's nodes, when their summary changed (`2/3 node(s) Ready`).
    Nodes { summary: &'a str },
    /// Still waiting for `expected` Ready nodes after a [`HEARTBEAT`]; `last` is what is missing.
    NodesWaiting {
        expected: usize,
        last: &'a str,
        left: Duration,
        deadline: Duration,
    },
    /// The join token is in the cluster for the nodes this run adds (the first time it is seen
    /// there).
    TokenPushed,
    /// A node leaves the cluster (`scale_down`) or is replaced, for `changes` (the plan's, `; `
    /// between them; the cloud's text).
    Leaving {
        cluster: &'a str,
        node: &'a str,
        scale_down: bool,
        changes: &'a str,
    },
    /// `--repair` found unhealthy nodes in `group` (`cp` or a pool) and its health check holds them
    /// back (`why`: more of the group than `maxUnhealthy` is unhealthy, or the check is off).
    RepairHeld {
        cluster: &'a str,
        group: &'a str,
        why: &'a str,
    },
    /// A step of a node's drain (its pods' names: the cluster's text).
    Drain { node: &'a str, line: &'a str },
    /// A node is drained, `evicted` pods evicted.
    Drained { node: &'a str, evicted: usize },
    /// kubeadm-config was changed to say what a joining control plane needs.
    ConfigMoved {
        cluster: &'a str,
        version: Option<&'a str>,
        encryption: bool,
        sans: Option<&'a [String]>,
    },
    /// A stale etcd member was removed (etcd's names: the cluster's text).
    Member { line: &'a str },
    /// The CCM credential's secret is kept nowhere (`location`: where it should be): servers use
    /// it (`in_use`: it stays, a first control plane made again cannot get its cloud.conf), or none
    /// does yet (it is made again).
    CcmSecretLost {
        cluster: &'a str,
        location: &'a str,
        in_use: bool,
    },
}

/// Where a run's [`Event`]s go. Called from the run's task; it must not block for long.
pub trait Report: Send + Sync {
    fn event(&self, event: Event<'_>);
}

/// Drops every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Report for Silent {
    fn event(&self, _: Event<'_>) {}
}

/// Keeps every event as its `Debug` text, for tests and for a front end that shows them later.
#[derive(Debug, Default)]
pub struct Recorded(Mutex<Vec<String>>);

impl Recorded {
    /// The events so far, oldest first.
    #[must_use]
    pub fn events(&self) -> Vec<String> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Report for Recorded {
    fn event(&self, event: Event<'_>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(format!("{event:?}"));
        }
    }
}
