//! A run (`kos up`'s) as kos-lifecycle's [`run::Cluster`]: each turn's spec checked against the
//! cloud and decided ([`prepare`], [`look`]), the turn's steps carried out ([`super::steps`],
//! [`super::converge`]), the addons and the CCM credential kept current once nothing is left to
//! change. The front end gives the spec and its own chores ([`Front`]); the error says what the
//! front end needs to pick an exit code ([`UpError::is_input`]) and what the user can do
//! ([`UpError::help`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use kos_cluster::ClusterSpec;
use kos_cluster::graph::{DesiredGraph, Kind};
use kos_cluster::observe::Observed;
use kos_cluster::plan::{Op, Plan};
use kos_cluster::preflight::PreflightError;
use kos_cluster::resolved::Resolved;
use kos_lifecycle::api::chain;
use kos_lifecycle::audience::Audience;
use kos_lifecycle::decide::DecideError;
use kos_lifecycle::run::{self, Decided, RunError};

use super::steps::{self, StepError};
use super::{ConvergeError, Env, Turn};
use crate::connect::Cloud;
use crate::encryption::TurnKeysError;
use crate::report::{Event, Report};
use crate::rotate::RotateNowError;
use crate::store::{Cause, Records as _, SecretStore, SecretsError, StoreError};

/// A spec as a turn reads it: the loaded spec, its name in messages, and the text diagnostics
/// point into.
pub struct Spec {
    pub spec: ClusterSpec,
    pub shown: String,
    pub text: String,
}

/// What only the front end does for a run.
pub trait Front: Send + Sync {
    /// The spec for a later turn, read again (the first turn's comes with [`Up::new`]).
    ///
    /// # Errors
    /// Why it cannot be read or is not valid (the front end's diagnostic, as a cause).
    fn spec(&self) -> Result<Spec, Cause>;
    /// The cloud shows something of the cluster: the front end may take over what it kept of it
    /// elsewhere (the CLI: files of an older layout).
    ///
    /// # Errors
    /// The front end's.
    fn seen(&self) -> Result<(), Cause>;
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    /// The spec read again for a later turn is not valid (the front end's diagnostic).
    #[error(transparent)]
    Spec(Cause),
    /// Preflight refused the spec, or the cloud failed while it looked; `changed`: this run had
    /// changed something already.
    #[error("{error}")]
    Preflight {
        error: Box<PreflightError>,
        changed: bool,
    },
    /// What the cloud shows of the cluster could not be listed.
    #[error("{0}")]
    Observe(kos_cloud::CloudError),
    /// The front end's [`Front::seen`] failed.
    #[error("{0}")]
    Seen(Cause),
    #[error(transparent)]
    Keys(Box<TurnKeysError>),
    /// The decision refused the spec (`shown`: the spec's name in messages).
    #[error("{shown}: {error}")]
    Decide {
        shown: String,
        error: DecideError,
        changed: bool,
    },
    /// The run refused a step (a refusal) or could not take it.
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Step(Box<StepError>),
    #[error(transparent)]
    Converge(Box<ConvergeError>),
    #[error(transparent)]
    Rotate(Box<RotateNowError>),
    /// What stopped a run after it had changed something: no longer bad input, and the next run
    /// continues.
    #[error(
        "kos up stopped after it had made changes; fix the cause and run it again: it continues"
    )]
    AfterChanges(#[source] Box<UpError>),
}

impl From<StepError> for UpError {
    fn from(e: StepError) -> UpError {
        UpError::Step(Box::new(e))
    }
}

impl From<ConvergeError> for UpError {
    fn from(e: ConvergeError) -> UpError {
        UpError::Converge(Box::new(e))
    }
}

impl From<RotateNowError> for UpError {
    fn from(e: RotateNowError) -> UpError {
        UpError::Rotate(Box::new(e))
    }
}

/// A record that cannot be written is the store's failure (run again); one that cannot be read is
/// input to fix.
fn store_is_input(e: &StoreError) -> bool {
    !matches!(e, StoreError::Write { .. })
}

impl UpError {
    /// Bad input, found before anything was changed (a front end's "nothing was changed" exit).
    #[must_use]
    pub fn is_input(&self) -> bool {
        match self {
            UpError::Spec(_) | UpError::Decide { .. } => true,
            UpError::Preflight { error, changed } => !error.cloud_failed && !changed,
            UpError::Observe(_) | UpError::Seen(_) | UpError::AfterChanges(_) => false,
            UpError::Keys(e) => match &**e {
                TurnKeysError::Keys(crate::store::KeysError::Store(s))
                | TurnKeysError::Store(s) => store_is_input(s),
                TurnKeysError::Keys(crate::store::KeysError::Missing { .. }) => true,
                TurnKeysError::Rewrite(_) => false,
            },
            UpError::Run(e) => e.is_refusal(),
            UpError::Step(e) => match &**e {
                StepError::Store(s) => store_is_input(s),
                StepError::Bootstrap(_) => true,
                _ => false,
            },
            UpError::Converge(e) => match &**e {
                ConvergeError::Store(s) | ConvergeError::Secrets(SecretsError::Store(s)) => {
                    store_is_input(s)
                }
                e => e.is_input(),
            },
            UpError::Rotate(e) => match &**e {
                RotateNowError::Store(s) => store_is_input(s),
                e => e.is_input(),
            },
        }
    }

    /// What the user can do about it, said to `to`.
    #[must_use]
    pub fn help(&self, to: Audience) -> Option<String> {
        match self {
            UpError::Decide {
                error: DecideError::Quorum { .. },
                ..
            } => Some(
                "keep controlPlane.count at the number of control planes that run, and bring stopped ones back first"
                    .into(),
            ),
            UpError::Decide {
                error: DecideError::Refused { .. },
                changed: false,
                ..
            } => Some("nothing was changed".into()),
            UpError::Keys(e) => match &**e {
                TurnKeysError::Keys(crate::store::KeysError::Missing { .. }) => Some(
                    "copy encryption.json from the machine that manages the cluster into this directory"
                        .into(),
                ),
                TurnKeysError::Rewrite(_) => Some(match to {
                    Audience::Cli => {
                        "run the command again: it rewrites the Secrets again, then drops the old key"
                    }
                    Audience::Operator => {
                        "the operator tries again by itself: it rewrites the Secrets again, then \
                         drops the old key"
                    }
                }
                .into()),
                _ => None,
            },
            UpError::Run(e) => Some(e.help(to)),
            UpError::Step(e) => e.help(to),
            UpError::Converge(e) => e.help(to),
            UpError::Rotate(e) => e.help(to).map(Into::into),
            _ => None,
        }
    }
}

/// What a decision is made from: preflight, what the cloud shows and whether the cluster exists.
pub struct Looked {
    pub shown: String,
    pub spec: ClusterSpec,
    pub resolved: Resolved,
    pub observed: Observed,
    pub formation: kos_lifecycle::formation::Decision,
    pub last_applied: Option<kos_bootstrap::KubeVersion>,
}

impl Looked {
    /// The desired graph and the decision. `not_joined`: servers (`cp-1`) the cluster shows no
    /// Node of ([`not_joined`]).
    ///
    /// # Errors
    /// The decision's refusals.
    pub fn decide(
        &self,
        renew_before: Option<i64>,
        encryption: Option<&str>,
        not_joined: &BTreeSet<String>,
    ) -> Result<(DesiredGraph, Decided), DecideError> {
        kos_lifecycle::decide::decide(&kos_lifecycle::decide::Inputs {
            spec: &self.spec,
            resolved: &self.resolved,
            observed: &self.observed,
            formation: self.formation.formation,
            last_applied: self.last_applied,
            renew_before,
            encryption,
            not_joined,
        })
    }
}

/// What the cloud shows, preflight (on the same lists) and whether the cluster exists: what a
/// decision is made from.
/// `store`: where the cluster's records are, when there are any (the API's address and version).
/// `changed`: the run already changed the cloud (a later turn), so no error may say that nothing
/// was.
///
/// # Errors
/// [`UpError::Preflight`], [`UpError::Observe`], [`UpError::Seen`].
pub async fn look(
    cloud: Cloud<'_>,
    store: Option<&dyn SecretStore>,
    front: &dyn Front,
    spec: Spec,
    changed: bool,
    report: &dyn Report,
) -> Result<Looked, UpError> {
    let Spec { spec, shown, text } = spec;
    // The observe first: preflight reads the lists it made (the project's networks, ports, …)
    // rather than asking for them again, so a turn lists each type once. When the observe failed,
    // preflight asks itself and its report (which lookups failed, every other problem) comes
    // first, as it would alone.
    // The observe is boxed: held inline, it and preflight's lookups made a reconcile's future
    // overflow a 2 MiB worker stack in a debug build.
    let seen = Box::pin(kos_cluster::observe::observe_listed(
        cloud.session,
        spec.name.value.as_str(),
    ))
    .await;
    // Preflight boxes its own lookups (`kos_cluster::preflight::checked`).
    let pre = match &seen {
        Ok((_, listed)) => {
            kos_cluster::preflight::preflight_listed(cloud.session, &spec, &shown, &text, listed)
                .await
        }
        Err(_) => kos_cluster::preflight::preflight(cloud.session, &spec, &shown, &text).await,
    }
    .map_err(|error| UpError::Preflight {
        error: Box::new(error),
        changed,
    })?;
    let (observed, _) = seen.map_err(UpError::Observe)?;
    if !pre.warnings.diagnostics().is_empty() {
        report.event(Event::PreflightWarnings {
            warnings: &pre.warnings,
        });
    }
    if observed.all().next().is_some() {
        front.seen().map_err(UpError::Seen)?;
    }
    let formation = crate::formation::formation(cloud, store, &spec, &observed).await;
    let last_applied = store
        .and_then(|s| s.meta().ok().flatten())
        .and_then(|meta| meta.kubernetes_version.parse().ok());
    Ok(Looked {
        shown,
        spec,
        resolved: pre.resolved,
        observed,
        formation,
        last_applied,
    })
}

/// Preflight (all problems at once, nothing created), what the cloud shows, whether the cluster
/// exists (which decides if a new `cp-0` initializes it or joins it), the encryption keys (moved on
/// a step when `advance`), then the desired graph and the plan.
///
/// # Errors
/// [`UpError`].
#[allow(clippy::too_many_arguments)]
pub async fn prepare(
    cloud: Cloud<'_>,
    store: &dyn SecretStore,
    front: &dyn Front,
    spec: Spec,
    renew_before: Option<i64>,
    changed: bool,
    advance: bool,
    report: &dyn Report,
) -> Result<Turn, UpError> {
    let looked = look(cloud, Some(store), front, spec, changed, report).await?;
    let keys = crate::encryption::keys_for_turn(
        cloud,
        store,
        &looked.spec,
        &looked.observed,
        advance,
        report,
    )
    .await
    .map_err(|e| UpError::Keys(Box::new(e)))?;
    let record = keys.as_ref().map(|k| k.desired_record());
    let decide = |not_joined: &BTreeSet<String>| {
        looked
            .decide(renew_before, record.as_deref(), not_joined)
            .map_err(|error| UpError::Decide {
                shown: looked.shown.clone(),
                error,
                changed,
            })
    };
    let (mut graph, mut decided) = decide(&BTreeSet::new())?;
    // A control plane leaves only once the control planes that stay have joined: the converge
    // takes the leaving one out of the API's load balancer, through which a successor an
    // interrupted run left booting still has to join.
    let missing = not_joined(cloud, store, &looked.spec, &decided).await;
    if !missing.is_empty() {
        (graph, decided) = decide(&missing)?;
    }
    Ok(Turn {
        decided,
        seen: looked.observed.all().next().is_some(),
        spec: looked.spec,
        graph,
        resolved: looked.resolved,
        formation: looked.formation,
        keys,
    })
}

const NODES_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// When a control plane would leave: the control planes that stay whose server runs but whose Node
/// the cluster does not show (a successor an interrupted run made, still joining). Nothing when
/// none leaves, or when the API does not answer (the leave's drain then stops the run).
pub async fn not_joined(
    cloud: Cloud<'_>,
    store: &dyn SecretStore,
    spec: &ClusterSpec,
    decided: &Decided,
) -> BTreeSet<String> {
    let leaving = decided
        .retirements
        .iter()
        .any(|r| kos_lifecycle::formation::is_control_plane(&r.id));
    if !leaving {
        return BTreeSet::new();
    }
    let nodes = async {
        let kube = crate::connect::stored_api_client(cloud, spec, store).await?;
        Ok::<_, crate::connect::ClientError>(kube.nodes().await?)
    };
    // As long as the formation's probe: an API that never answers from here holds up no run.
    let names: BTreeSet<String> = match tokio::time::timeout(NODES_WAIT, nodes).await {
        Ok(Ok(nodes)) => nodes.into_iter().map(|n| n.name).collect(),
        Ok(Err(e)) => {
            tracing::debug!(error = %chain(&e), "no Nodes to tell which control planes joined");
            return BTreeSet::new();
        }
        Err(_) => return BTreeSet::new(),
    };
    decided
        .plan
        .actions
        .iter()
        .filter(|a| a.kind == Kind::Server && a.op != Op::Delete)
        .filter(|a| kos_lifecycle::formation::is_control_plane(&a.logical_id))
        .filter(|a| a.existing.as_ref().is_some_and(|r| !r.failed))
        .filter(|a| !names.contains(&a.name))
        .map(|a| a.logical_id.clone())
        .collect()
}

/// One run: kos-lifecycle's [`run::Cluster`] over the cloud, the cluster's API and its store.
pub struct Up<'a> {
    env: Env<'a>,
    front: &'a dyn Front,
    /// Read before the cloud was contacted, for the first turn.
    spec: Option<Spec>,
    /// Certificates made before this (the run's start) are renewed.
    renew_before: Option<i64>,
    /// The run's first turn: the only one that moves a key rotation on.
    first: AtomicBool,
}

impl<'a> Up<'a> {
    /// A run of `env` from `spec`; `env.changed` says afterwards whether it changed anything.
    #[must_use]
    pub fn new(env: Env<'a>, front: &'a dyn Front, spec: Spec, renew_before: Option<i64>) -> Self {
        Up {
            env,
            front,
            spec: Some(spec),
            renew_before,
            first: AtomicBool::new(true),
        }
    }

    /// Runs turns until nothing is left to change.
    ///
    /// # Errors
    /// [`UpError`]; once the run changed something, bad input comes as
    /// [`UpError::AfterChanges`].
    pub async fn run(mut self, opts: run::Options<'_>) -> Result<(), UpError> {
        let r = run::up(&mut self, opts).await;
        r.map_err(|e| self.kept_promise(e))
    }

    /// "Nothing was changed" is a promise: once this run changed something, whatever stops it (a
    /// refusal, a spec the cloud no longer passes) is no longer bad input, and the next run
    /// continues.
    fn kept_promise(&self, e: UpError) -> UpError {
        if !e.is_input() || !self.changed() {
            return e;
        }
        UpError::AfterChanges(Box::new(e))
    }

    fn changed(&self) -> bool {
        self.env.changed.load(Ordering::Relaxed)
    }

    fn set_changed(&self) {
        self.env.changed.store(true, Ordering::Relaxed);
    }
}

impl run::Cluster for Up<'_> {
    type Turn = Turn;
    type Error = UpError;

    async fn prepare(&mut self) -> Result<Turn, UpError> {
        let mut mended = false;
        loop {
            let spec = match self.spec.take() {
                Some(s) => s,
                None => self.front.spec().map_err(UpError::Spec)?,
            };
            let first = self.first.swap(false, Ordering::Relaxed);
            let turn = prepare(
                self.env.cloud,
                self.env.store,
                self.front,
                spec,
                self.renew_before,
                self.changed(),
                first,
                self.env.report,
            )
            .await?;
            // Once: a rotation that leaves the credential still to mend failed, and says so.
            if mended || self.env.options.ccm_mending != super::CcmMending::Run {
                return Ok(turn);
            }
            let cloud = self.env.cloud;
            let (store, report) = (self.env.store, self.env.report);
            mended =
                crate::rotate::mend(cloud, store, &turn.spec, &turn.decided.plan, report).await?;
            if !mended {
                return Ok(turn);
            }
            self.set_changed();
        }
    }

    fn repair_held(&self, p: &Turn, group: &str, why: &str) {
        self.env.report.event(Event::RepairHeld {
            cluster: &p.graph.cluster,
            group,
            why,
        });
    }

    fn judged(&self, p: &Turn, groups: &[kos_lifecycle::roll::GroupHealth]) {
        self.env.report.event(Event::Health {
            cluster: &p.graph.cluster,
            groups,
        });
    }

    fn recheck_health(&self, p: &Turn, secs: u64) {
        self.env.report.event(Event::HealthRecheck {
            cluster: &p.graph.cluster,
            secs,
        });
    }

    async fn unhealthy(&self, p: &Turn) -> Result<kos_lifecycle::roll::NodeHealth, UpError> {
        Ok(steps::unhealthy(&self.env, p).await?)
    }

    async fn drain_scaled_down(&self, p: &Turn, plan: &Plan) -> Result<Vec<String>, UpError> {
        if plan
            .actions
            .iter()
            .any(|a| a.kind == Kind::Server && a.op == Op::Delete)
        {
            self.set_changed();
        }
        Ok(steps::drain_scaled_down(&self.env, p, plan).await?)
    }

    async fn before_joins(&self, p: &Turn, plan: &Plan) -> Result<(), UpError> {
        // It changes kubeadm-config only when control planes join a formed cluster (a new
        // cluster has none yet: its secrets may still be refused, with nothing changed).
        if crate::tokens::joins_control_planes(plan)
            && p.formation.formation == kos_cluster::bootstrap::Formation::Formed
        {
            self.set_changed();
        }
        Ok(steps::before_joins(&self.env, p, plan).await?)
    }

    async fn converge(
        &self,
        p: &Turn,
        plan: &Plan,
        not_ready: usize,
    ) -> Result<Vec<String>, UpError> {
        Ok(super::converge(&self.env, p, plan, not_ready).await?)
    }

    async fn delete_nodes(&self, p: &Turn, names: &[String]) {
        steps::delete_nodes(&self.env, p, names).await;
    }

    async fn remove(
        &self,
        p: &Turn,
        batch: &[kos_lifecycle::roll::Target],
        plan: &Plan,
    ) -> Result<(), UpError> {
        self.set_changed();
        Ok(steps::remove(&self.env, p, batch, plan).await?)
    }

    fn follows_joins(&self) -> bool {
        self.env.options.wait != crate::follow::Wait::Infra
    }

    async fn converged(&self, p: &Turn) -> Result<(), UpError> {
        let report = self.env.report;
        // The addons that follow the minor catch up with an upgrade.
        match steps::follow_minor(&self.env, p).await {
            Ok(moved) => {
                for m in &moved {
                    report.event(Event::AddonMoved {
                        cluster: &p.graph.cluster,
                        addon: m,
                        minor: p.spec.kubernetes_version.minor(),
                    });
                }
            }
            Err(e) => report.event(Event::AddonsNotMoved { why: &chain(&e) }),
        }
        Ok(crate::rotate::when_due(
            self.env.cloud,
            self.env.store,
            &p.spec,
            &p.decided.plan,
            report,
        )
        .await?)
    }
}
