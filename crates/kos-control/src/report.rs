//! What a run reports as it goes. The library prints nothing: it hands [`Event`]s to a [`Report`],
//! which a front end renders (the CLI as lines on stderr, an operator as Kubernetes Events or
//! status conditions). Text in an event may come from the cluster or a node's console: a renderer
//! escapes it before it reaches a terminal.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kos_cluster::events::Event as ApplyEvent;
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

use crate::follow::NodeState;

mod summary;
pub use summary::{
    Api, Bootstrap, Credential, Encryption, Failure, GroupHealth, Node, NodePhase, Outcome,
    Summarised, Summary, UnhealthyNode,
};

/// How long a wait may stay silent: then it reports what it still waits for.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// One thing worth telling while a run goes on.
#[derive(Debug, Clone, Copy)]
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
    /// Preflight's warnings (the spec's spans; render with miette).
    PreflightWarnings {
        warnings: &'a kos_cluster::diagnostics::Report,
    },
    /// The Secrets' encryption keys moved a step (`shown`: names and phase, never key material).
    KeysStep { cluster: &'a str, shown: &'a str },
    /// `secrets` Secrets were written again under the new key.
    SecretsRewritten { cluster: &'a str, secrets: usize },
    /// Workers leaving a smaller pool (`nodes`) go undrained: the API does not answer (`why`).
    NotDrained { nodes: &'a str, why: &'a str },
    /// The Node of a removed server stays (`why`): the cloud controller removes it.
    NodeKept { node: &'a str, why: &'a str },
    /// An addon (`kube-system` workload) moved to the images of Kubernetes 1.`minor`.
    AddonMoved {
        cluster: &'a str,
        addon: &'a str,
        minor: u32,
    },
    /// The addons could not follow the minor (`why`).
    AddonsNotMoved { why: &'a str },
    /// A step of the CCM credential's rotation (the cluster's names in it).
    Rotation { line: &'a str },
    /// The CCM credential (`credential`: its name, the cloud's text) is rotated, `why`.
    RotationDue {
        cluster: &'a str,
        credential: &'a str,
        why: &'a str,
    },
    /// A converge makes `changes` changes.
    Changes { cluster: &'a str, changes: usize },
    /// Why new control planes initialise the cluster or join it (said when a converge makes one).
    Formation { cluster: &'a str, reason: &'a str },
    /// The etcd members were not checked before control planes join (`why`): none of an earlier
    /// life can be registered when no running control plane ran kubeadm (`kubeadm_ran` false);
    /// otherwise a warning.
    MembersNotChecked {
        cluster: &'a str,
        why: &'a str,
        kubeadm_ran: bool,
    },
    /// A converge's apply finished: `changes` made, the API at `api_address` when known.
    Applied {
        cluster: &'a str,
        changes: usize,
        api_address: Option<&'a str>,
    },
    /// A converge's apply stopped on a failure after making `changes` changes (the error follows).
    ApplyStopped { changes: usize },
    /// The join token is in the cluster for the nodes this run adds (the first time it is seen
    /// there).
    TokenPushed,
    /// The join token (with `certs`, and kubeadm-certs) was put into the cluster before the new
    /// nodes boot; `renewed`: the token is a new one.
    TokenInCluster { certs: bool, renewed: bool },
    /// The join token could not be put into the cluster (`why`); it was written to `location`
    /// for a person to run on a control plane.
    TokenScript { why: &'a str, location: &'a str },
    /// The join token could not be put into the cluster (`why`), nor written for a person
    /// (`error`).
    TokenScriptFailed { why: &'a str, error: &'a str },
    /// The run does not follow the bootstrap (it was asked to stop at the infrastructure).
    BootstrapNotFollowed,
    /// The consoles of `nodes` node(s) are followed, for at most `deadline` of the cloud's time.
    FollowingConsoles { nodes: usize, deadline: Duration },
    /// Only nodes an earlier run made failed their bootstrap (`why`): they are made again.
    FailedEarlier { why: &'a str },
    /// Every followed node's bootstrap as its console ended it; `deadline` on this machine's clock.
    Bootstrapped {
        deadline: Duration,
        nodes: &'a BTreeMap<String, NodeState>,
    },
    /// The run does not check the cluster's API (it was asked to stop at the bootstrap).
    ApiNotChecked,
    /// The cluster's API was not checked, and why.
    ApiSkipped { why: &'a str },
    /// Waiting for `/readyz` and `nodes` Ready nodes.
    ApiWaiting { nodes: u32 },
    /// The API is ready, `nodes` nodes Ready and initialised.
    ApiReady { nodes: usize },
    /// kubeadm-certs could not be taken out of the cluster (`why`): it goes with its token.
    CertsKept { why: &'a str },
    /// Every node joined: the join token was taken out of the cluster.
    TokenDeleted,
    /// The join token could not be taken out of the cluster (`why`): it expires on its own.
    TokenKept { why: &'a str },
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
    /// A node is neither healthy nor unhealthy yet (NotReady, or not joined, within its health
    /// check's timeout): it may be unhealthy in `secs` seconds of the cloud's clock.
    HealthRecheck { cluster: &'a str, secs: u64 },
    /// What each group's health check found this turn (`--repair`, and every controller turn):
    /// how many of its nodes are healthy, which are unhealthy and why, and whether they may be
    /// replaced.
    Health {
        cluster: &'a str,
        groups: &'a [kos_lifecycle::roll::GroupHealth],
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
    /// The CCM application credential Keystone just made is stored at `location` (readable by
    /// whoever runs kos for the cluster only).
    CcmCredentialStored { location: &'a str },
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

    /// Where an apply of `total` changes sends its events, and the task to await once the apply
    /// dropped the sender. Dropped unless a front end renders them.
    fn apply_progress(&self, total: u64) -> (Sender<ApplyEvent>, JoinHandle<()>) {
        let _ = total;
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let drained = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        (tx, drained)
    }
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
