//! One `kos up`: the sequence that takes a cluster from what the cloud and the cluster show to what
//! the spec says, whatever was there (nothing, a running cluster, what a killed run left). The CLI
//! runs it today; a controller can run the same code, as it only speaks through [`Cluster`].
//!
//! Each turn decides afresh ([`Cluster::prepare`]: the plan, which servers leave and which join) and
//! then:
//!
//! 1. refuses a replacement no order can make, before anything changes;
//! 2. with `--repair`, replaces one node its group's `healthCheck` finds unhealthy first (the
//!    converge would wait for it), unless more of the group than `maxUnhealthy` is;
//! 3. converges everything but the servers to replace or retire (a pool's smaller count drained
//!    first, kubeadm-config moved before a control plane of a new release joins), following the new
//!    nodes' bootstrap;
//! 4. makes again the nodes an interrupted run left failed;
//! 5. takes the next step: the next server(s) to retire (a control plane, or a pool's batch that
//!    surged) or, failing that, to replace in place (a control plane, or a pool's `maxUnavailable`);
//! 6. once nothing is left, lets the addons that follow the minor catch up.
//!
//! A server replaced by this run that still needs replacing, or a successor made by this run that is
//! outdated itself, stops the run: the spec describes a server the cloud does not make as described,
//! and going on would not end.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use kos_cluster::graph::Kind;
use kos_cluster::plan::Plan;

use crate::roll::{self, NodeHealth, RollError, Target};
use crate::succession::Retirement;

/// What a turn decided from the spec, the cloud and the cluster.
#[derive(Debug, Clone)]
pub struct Decided {
    /// Against every server the run keeps (those leaving are planned as deletes).
    pub plan: Plan,
    /// Servers that leave as steps ([`crate::succession`]), in their order.
    pub retirements: Vec<Retirement>,
    /// The groups (`cp`, pool names) whose outdated servers are succeeded, not replaced in place.
    pub surging: BTreeSet<String>,
    /// A pool's `maxUnavailable` (at least 1 in place); a pool not listed takes 1.
    pub max_unavailable: BTreeMap<String, usize>,
    /// Each group's `healthCheck` (`cp`, pool names); a group not listed takes the default.
    pub health: BTreeMap<String, kos_cluster::spec::HealthCheck>,
    /// Servers that have not joined yet, for which what they replace stays this turn
    /// ([`crate::succession`]).
    pub waiting: Vec<String>,
}

impl Decided {
    /// The plan the in-place replacement works from: surging groups are succeeded instead.
    #[must_use]
    pub fn in_place(&self) -> Plan {
        roll::in_place(&self.plan, &|g| self.surging.contains(g))
    }

    /// What a converge makes: everything but the servers to replace in place or to retire.
    #[must_use]
    pub fn converging(&self) -> Plan {
        roll::without_rolls(&roll::without_retirements(&self.plan, &self.retirements))
    }

    /// Whether every replacement can be made, checked before anything changes.
    ///
    /// # Errors
    /// The first control plane that cannot be replaced in place.
    pub fn check(&self) -> Result<(), RollError> {
        roll::check(&self.in_place())
    }

    /// The next step: the next servers to retire, else the next in-place batch; empty when done.
    ///
    /// # Errors
    /// As [`roll::next`].
    pub fn next_step(&self) -> Result<Vec<Target>, RollError> {
        let retiring = roll::next_retirements(&self.plan, &self.retirements);
        if !retiring.is_empty() {
            return Ok(retiring);
        }
        roll::next_batch(&self.in_place(), &|pool| {
            self.max_unavailable.get(pool).copied().unwrap_or(1)
        })
    }

    /// The cloud ids of the servers found.
    fn servers(&self) -> BTreeSet<String> {
        self.plan
            .actions
            .iter()
            .filter(|a| a.kind == Kind::Server)
            .filter_map(|a| a.existing.as_ref().map(|r| r.id.clone()))
            .collect()
    }

    /// The cloud id of server `logical_id`, leaving or not (`Plan::for_node` skips deletes, and a
    /// leaving server is one).
    fn server_id(&self, logical_id: &str) -> Option<&str> {
        self.plan
            .actions
            .iter()
            .filter(|a| a.kind == Kind::Server && a.logical_id == logical_id)
            .find_map(|a| a.existing.as_ref())
            .map(|r| r.id.as_str())
    }
}

/// A run's decision the driver cannot make on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Refused(#[from] RollError),
    #[error("{id} was made again by this run and still needs it: {why}")]
    ReplacedAgain { id: String, why: String },
    #[error(
        "{id} was made by this run to succeed an outdated server, and is outdated itself: {why}"
    )]
    SucceededAgain { id: String, why: String },
    #[error(
        "{} booted and finished its bootstrap, but the cluster shows no Node of it: what it \
         replaces stays",
        ids.join(", ")
    )]
    NeverJoined { ids: Vec<String> },
}

impl RunError {
    /// What the user can do, said to `to`.
    #[must_use]
    pub fn help(&self, to: crate::audience::Audience) -> String {
        match self {
            RunError::Refused(e) => e.help().into(),
            RunError::ReplacedAgain { .. } => format!(
                "the node's console (`openstack console log show <server>`) and {} say why; fix \
                 the cause, then {}",
                to.plan(),
                to.again()
            ),
            RunError::SucceededAgain { .. } => format!(
                "{} says what differs; fix the cause, then {}",
                to.plan(),
                to.again()
            ),
            RunError::NeverJoined { .. } => format!(
                "the node's log is /var/log/kos-bootstrap.log, its console `openstack console log \
                 show <server>`; delete its server to have it made again, then {}",
                to.again()
            ),
        }
    }

    /// Whether it comes from the spec (nothing changed), not from what the run met.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        matches!(self, RunError::Refused(_))
    }
}

/// What a run needs of the cloud and the cluster. Each call is idempotent: the next turn decides
/// again from what they show.
pub trait Cluster {
    /// One turn's view: the [`Decided`] and whatever the driver keeps with it (the spec, the graph).
    type Turn: AsRef<Decided>;
    type Error: From<RunError> + std::fmt::Display;

    /// Reads the spec, checks it against the cloud, observes, decides.
    fn prepare(&mut self) -> impl Future<Output = Result<Self::Turn, Self::Error>>;
    /// `--repair` found unhealthy nodes in `group` that its health check holds back (`why`).
    fn repair_held(&self, t: &Self::Turn, group: &str, why: &str);
    /// A node is not healthy yet not unhealthy for long enough: it may be in `secs` of the
    /// judging clock (a controller looks again then).
    fn recheck_health(&self, _t: &Self::Turn, _secs: u64) {}
    /// What each group's health check found this turn (every group judged, healthy or not).
    fn judged(&self, _t: &Self::Turn, _groups: &[roll::GroupHealth]) {}
    /// The cluster's Nodes: every name, and those whose Ready condition is not True, since when.
    fn unhealthy(&self, t: &Self::Turn) -> impl Future<Output = Result<NodeHealth, Self::Error>>;
    /// Drains the workers `plan` deletes for a smaller count; their node names.
    fn drain_scaled_down(
        &self,
        t: &Self::Turn,
        plan: &Plan,
    ) -> impl Future<Output = Result<Vec<String>, Self::Error>>;
    /// Before control planes of a new release join: kubeadm-config says it.
    fn before_joins(
        &self,
        t: &Self::Turn,
        plan: &Plan,
    ) -> impl Future<Output = Result<(), Self::Error>>;
    /// Applies `plan` and follows the bootstrap; the servers an interrupted run left failed.
    /// `not_ready`: nodes the turn's health check leaves not healthy (pending, or held), which
    /// the wait for Ready nodes does not count on.
    fn converge(
        &self,
        t: &Self::Turn,
        plan: &Plan,
        not_ready: usize,
    ) -> impl Future<Output = Result<Vec<String>, Self::Error>>;
    /// Deletes the Nodes of servers that are gone (best effort).
    fn delete_nodes(&self, t: &Self::Turn, names: &[String]) -> impl Future<Output = ()>;
    /// One step: `batch` drained, a control plane's member removed, `plan` (their deletes) applied,
    /// their Nodes deleted.
    fn remove(
        &self,
        t: &Self::Turn,
        batch: &[Target],
        plan: &Plan,
    ) -> impl Future<Output = Result<(), Self::Error>>;
    /// Nothing left to change: what follows the cluster's minor catches up (best effort), and the
    /// CCM's credential is rotated if it is near its expiry (an error fails the run).
    fn converged(&self, t: &Self::Turn) -> impl Future<Output = Result<(), Self::Error>>;
    /// Whether a converge follows new nodes until they joined (not when told to stop once the
    /// servers are ACTIVE): if not, a server that has not joined ends the run, to be continued by
    /// the next, rather than stopping it.
    fn follows_joins(&self) -> bool {
        true
    }
}

/// `--repair`: nodes their group's `healthCheck` finds unhealthy are replaced.
#[derive(Clone, Copy)]
pub struct Repair<'a> {
    /// `--repair-after`: how long Ready may be False or Unknown, for every group, instead of the
    /// health checks' own timeouts.
    pub after_secs: Option<i64>,
    /// Now, as Unix seconds on the clock of what is judged (the cloud's: servers' `created`,
    /// and its clusters' Node conditions).
    pub now: &'a (dyn Fn() -> i64 + Send + Sync),
    /// An unhealthy node that cannot be replaced (the only control plane): the run fails (the
    /// CLI's `--repair`: the user asked for it), or the group is held and the run goes on (a
    /// controller, whose every turn would fail otherwise).
    pub unrepairable: Unrepairable,
}

/// What a run does with an unhealthy node it cannot replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrepairable {
    Refuse,
    Hold,
}

impl std::fmt::Debug for Repair<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repair")
            .field("after_secs", &self.after_secs)
            .finish_non_exhaustive()
    }
}

/// How a run goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    pub repair: Option<Repair<'a>>,
}

/// Runs `kos up` until nothing is left to change.
///
/// # Errors
/// The driver's, and [`RunError`]s converted into its error.
pub async fn up<C: Cluster>(cluster: &mut C, opts: Options<'_>) -> Result<(), C::Error> {
    let mut run = Run::default();
    loop {
        let turn = cluster.prepare().await?;
        let d = turn.as_ref();
        // A replacement that cannot be done is refused before the first change.
        d.check().map_err(RunError::from)?;
        run.made.get_or_insert_with(|| d.servers());
        // Only servers that stay are judged: none (a cluster being made) asks nothing of it.
        let judged = d.plan.actions.iter().any(|a| {
            a.kind == Kind::Server
                && matches!(
                    a.op,
                    kos_cluster::plan::Op::NoOp | kos_cluster::plan::Op::Update
                )
        });
        let repair = opts.repair.filter(|_| judged);
        let seen = match repair {
            Some(repair) => match cluster.unhealthy(&turn).await {
                Ok(sick) => Some((repair, sick)),
                // Nothing is judged without the Nodes (each would look never joined). A
                // controller's turn goes on: its converge may be what mends the cluster (a
                // control plane's server made again).
                Err(e) if repair.unrepairable == Unrepairable::Hold => {
                    cluster.repair_held(
                        &turn,
                        "every group",
                        &format!("the cluster's Nodes cannot be read: {e}"),
                    );
                    None
                }
                Err(e) => return Err(e),
            },
            None => None,
        };
        let mut left_not_healthy = 0;
        if let Some((repair, sick)) = seen {
            let found = roll::repairs(&d.plan, &d.health, &sick, (repair.now)(), repair.after_secs);
            left_not_healthy = found.left_not_healthy;
            cluster.judged(&turn, &found.groups);
            for (group, why) in &found.held {
                cluster.repair_held(&turn, group, why);
            }
            if let Some(secs) = found.recheck_secs {
                cluster.recheck_health(&turn, secs);
            }
            let mut next = None;
            for t in found
                .targets
                .into_iter()
                .filter(|t| !run.replaced.contains(&t.logical_id))
            {
                match roll::check_repair(&d.plan, &t) {
                    Ok(()) => {
                        next = Some(t);
                        break;
                    }
                    Err(e) if repair.unrepairable == Unrepairable::Hold => {
                        cluster.repair_held(&turn, roll::group_of(&t.logical_id), &e.to_string());
                        left_not_healthy += 1;
                    }
                    Err(e) => return Err(RunError::from(e).into()),
                }
            }
            if let Some(t) = next {
                run.step(cluster, &turn, &[t]).await?;
                continue;
            }
        }
        let converging = d.converging();
        let scaled_down = cluster.drain_scaled_down(&turn, &converging).await?;
        cluster.before_joins(&turn, &converging).await?;
        let failed_earlier = cluster
            .converge(&turn, &converging, left_not_healthy)
            .await?;
        cluster.delete_nodes(&turn, &scaled_down).await;
        // A converge that changed nothing leaves the cloud as this turn saw it: no second look,
        // unless servers that had not joined held a leave back (the converge followed them since).
        let waited = d.waiting.clone();
        let fresh = if converging.summary().changes() == 0
            && failed_earlier.is_empty()
            && waited.is_empty()
        {
            turn
        } else {
            cluster.prepare().await?
        };
        // A successor whose bootstrap failed is made again (it joins as a new one).
        if !failed_earlier.is_empty() {
            let batch = roll::remakes(&fresh.as_ref().plan, &failed_earlier);
            run.step(cluster, &fresh, &batch).await?;
            continue;
        }
        // Followed to the end of their bootstrap and still not joined: looking again would not end.
        let never: Vec<String> = fresh
            .as_ref()
            .waiting
            .iter()
            .filter(|id| waited.contains(id))
            .cloned()
            .collect();
        if !never.is_empty() {
            if !cluster.follows_joins() {
                return cluster.converged(&fresh).await;
            }
            return Err(RunError::NeverJoined { ids: never }.into());
        }
        let batch = fresh.as_ref().next_step().map_err(RunError::from)?;
        if batch.is_empty() {
            return cluster.converged(&fresh).await;
        }
        run.succeeded_again(fresh.as_ref(), &batch)?;
        run.step(cluster, &fresh, &batch).await?;
    }
}

/// What a run remembers between its turns.
#[derive(Default)]
struct Run {
    /// The servers there before this run (cloud ids).
    made: Option<BTreeSet<String>>,
    /// The servers this run replaced or made again (logical ids).
    replaced: BTreeSet<String>,
}

impl Run {
    /// One step of `batch`. A server this run already replaced that comes up again would be
    /// replaced forever: the run stops instead.
    async fn step<C: Cluster>(
        &mut self,
        cluster: &C,
        turn: &C::Turn,
        batch: &[Target],
    ) -> Result<(), C::Error> {
        for t in batch.iter().filter(|t| !t.scale_down) {
            if !self.replaced.insert(t.logical_id.clone()) {
                return Err(RunError::ReplacedAgain {
                    id: t.logical_id.clone(),
                    why: t.changes.join("; "),
                }
                .into());
            }
        }
        let plan = roll::step_plan(&turn.as_ref().plan, batch);
        cluster.remove(turn, batch, &plan).await
    }

    /// A server leaving because it is outdated, that this run made as a successor.
    fn succeeded_again(&self, d: &Decided, batch: &[Target]) -> Result<(), RunError> {
        let Some(before) = &self.made else {
            return Ok(());
        };
        for t in batch.iter().filter(|t| t.scale_down) {
            let outdated = d
                .retirements
                .iter()
                .any(|r| r.id == t.logical_id && r.why.starts_with("replaced by"));
            if outdated
                && d.server_id(&t.logical_id)
                    .is_some_and(|id| !before.contains(id))
            {
                return Err(RunError::SucceededAgain {
                    id: t.logical_id.clone(),
                    why: t.changes.join("; "),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use kos_cluster::observe::{Facts, Resource};
    use kos_cluster::plan::{Action, Op};

    use super::*;

    fn server(id: &str, op: Op, cloud_id: &str) -> Action {
        Action {
            logical_id: id.into(),
            kind: Kind::Server,
            name: format!("kos-demo-{id}"),
            op,
            reason: String::new(),
            changes: vec!["flavor: a → b".into()],
            existing: (op != Op::Create).then(|| Resource {
                kind: Kind::Server,
                logical_id: id.into(),
                id: cloud_id.into(),
                name: format!("kos-demo-{id}"),
                tagged: true,
                state: "ACTIVE".into(),
                failed: false,
                facts: Facts::default(),
            }),
        }
    }

    fn decided(actions: Vec<Action>) -> Decided {
        Decided {
            plan: Plan {
                cluster: "demo".into(),
                actions,
                refused: Vec::new(),
            },
            retirements: Vec::new(),
            surging: BTreeSet::new(),
            max_unavailable: BTreeMap::new(),
            health: BTreeMap::new(),
            waiting: Vec::new(),
        }
    }

    struct Turn(Decided);
    impl AsRef<Decided> for Turn {
        fn as_ref(&self) -> &Decided {
            &self.0
        }
    }

    #[derive(Debug, PartialEq)]
    enum Error {
        Run(RunError),
        Script(&'static str),
    }
    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }
    impl From<RunError> for Error {
        fn from(e: RunError) -> Self {
            Error::Run(e)
        }
    }

    /// Plays back what the cloud shows turn after turn, and records what the run does.
    #[derive(Default)]
    struct Script {
        turns: VecDeque<Decided>,
        failed_earlier: VecDeque<Vec<String>>,
        unhealthy: Vec<crate::roll::Unhealthy>,
        log: RefCell<Vec<String>>,
        /// Each turn's judgement of the groups, one line per group.
        judged: RefCell<Vec<String>>,
        /// `--wait infra`: converges do not follow new nodes.
        infra: bool,
    }

    impl Script {
        fn new(turns: Vec<Decided>) -> Script {
            Script {
                turns: turns.into(),
                ..Script::default()
            }
        }
        fn did(&self, what: String) {
            self.log.borrow_mut().push(what);
        }
        fn log(&self) -> Vec<String> {
            self.log.borrow().clone()
        }
    }

    fn changed(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .filter(|a| a.op != Op::NoOp)
            .map(|a| format!("{:?} {}", a.op, a.logical_id))
            .collect()
    }

    impl Cluster for Script {
        type Turn = Turn;
        type Error = Error;
        async fn prepare(&mut self) -> Result<Turn, Error> {
            self.did("prepare".into());
            self.turns
                .pop_front()
                .map(Turn)
                .ok_or(Error::Script("no more turns"))
        }
        fn repair_held(&self, _: &Turn, group: &str, why: &str) {
            self.did(format!("held {group}: {why}"));
        }
        fn recheck_health(&self, _: &Turn, secs: u64) {
            self.did(format!("recheck in {secs}s"));
        }
        fn judged(&self, _: &Turn, groups: &[crate::roll::GroupHealth]) {
            for g in groups {
                let unhealthy: Vec<&str> = g.unhealthy.iter().map(|(n, _)| n.as_str()).collect();
                self.judged.borrow_mut().push(format!(
                    "{}: {}/{} healthy, unhealthy {unhealthy:?}, pending {:?}",
                    g.group, g.healthy, g.expected, g.pending
                ));
            }
        }
        async fn unhealthy(&self, t: &Turn) -> Result<NodeHealth, Error> {
            // Every server of the turn has its Node.
            Ok(NodeHealth {
                names: t
                    .as_ref()
                    .plan
                    .actions
                    .iter()
                    .filter(|a| a.kind == Kind::Server)
                    .map(|a| a.name.clone())
                    .collect(),
                unhealthy: self.unhealthy.clone(),
            })
        }
        async fn drain_scaled_down(&self, _: &Turn, plan: &Plan) -> Result<Vec<String>, Error> {
            let gone: Vec<String> = plan
                .actions
                .iter()
                .filter(|a| a.kind == Kind::Server && a.op == Op::Delete)
                .map(|a| a.name.clone())
                .collect();
            if !gone.is_empty() {
                self.did(format!("drain {}", gone.join(",")));
            }
            Ok(gone)
        }
        async fn before_joins(&self, _: &Turn, _: &Plan) -> Result<(), Error> {
            Ok(())
        }
        async fn converge(
            &self,
            _: &Turn,
            plan: &Plan,
            not_ready: usize,
        ) -> Result<Vec<String>, Error> {
            self.did(format!("converge [{}]", changed(plan).join(", ")));
            if not_ready > 0 {
                self.did(format!("not waiting for {not_ready}"));
            }
            Ok(self.failed_earlier.front().cloned().unwrap_or_default())
        }
        async fn delete_nodes(&self, _: &Turn, names: &[String]) {
            if !names.is_empty() {
                self.did(format!("delete nodes {}", names.join(",")));
            }
        }
        async fn remove(&self, _: &Turn, batch: &[Target], plan: &Plan) -> Result<(), Error> {
            let ids: Vec<&str> = batch.iter().map(|t| t.logical_id.as_str()).collect();
            self.did(format!(
                "remove {} [{}]",
                ids.join(","),
                changed(plan).join(", ")
            ));
            Ok(())
        }
        async fn converged(&self, _: &Turn) -> Result<(), Error> {
            self.did("converged".into());
            Ok(())
        }
        fn follows_joins(&self) -> bool {
            !self.infra
        }
    }

    fn run(script: &mut Script, opts: Options<'_>) -> Result<(), Error> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(up(script, opts))
    }

    #[test]
    fn nothing_to_replace_is_one_converge_then_the_addons() {
        let d = decided(vec![
            server("cp-0", Op::NoOp, "a"),
            server("w-0", Op::Create, ""),
        ]);
        let done = decided(vec![
            server("cp-0", Op::NoOp, "a"),
            server("w-0", Op::NoOp, "b"),
        ]);
        let mut s = Script::new(vec![d, done]);
        run(&mut s, Options::default()).unwrap();
        assert_eq!(
            s.log(),
            ["prepare", "converge [Create w-0]", "prepare", "converged"]
        );
    }

    /// Workers replaced in place, one at a time, each followed by a converge that makes its successor.
    #[test]
    fn each_replacement_is_a_step_followed_by_a_converge() {
        let rolling = |w0, w1| {
            decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("w-0", w0, "w0"),
                server("w-1", w1, "w1"),
            ])
        };
        // A converge that changes nothing is not followed by a second look.
        let turns = vec![
            rolling(Op::Roll, Op::Roll),
            rolling(Op::Create, Op::Roll),
            rolling(Op::NoOp, Op::Roll),
            rolling(Op::NoOp, Op::Create),
            rolling(Op::NoOp, Op::NoOp),
        ];
        let mut s = Script::new(turns);
        run(&mut s, Options::default()).unwrap();
        assert_eq!(
            s.log(),
            [
                "prepare",
                "converge []",
                "remove w-0 [Delete w-0]",
                "prepare",
                "converge [Create w-0]",
                "prepare",
                "remove w-1 [Delete w-1]",
                "prepare",
                "converge [Create w-1]",
                "prepare",
                "converged",
            ]
        );
    }

    /// The only control plane cannot be replaced in place: refused before the first change, even
    /// with workers to replace that come first in nothing.
    #[test]
    fn a_refusal_comes_before_any_change() {
        let d = decided(vec![
            server("cp-0", Op::Roll, "a"),
            server("w-0", Op::Roll, "b"),
        ]);
        let mut s = Script::new(vec![d]);
        let e = run(&mut s, Options::default()).unwrap_err();
        assert!(matches!(&e, Error::Run(r) if r.is_refusal()), "{e:?}");
        assert_eq!(s.log(), ["prepare"]);
        // With a successor joining first (maxSurge) it is no refusal.
        let mut surged = decided(vec![server("cp-0", Op::Roll, "a")]);
        surged.surging.insert("cp".into());
        assert!(surged.check().is_ok());
    }

    /// A server this run replaced that still differs is not replaced forever.
    #[test]
    fn a_server_replaced_twice_in_one_run_stops_it() {
        let d = || {
            decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("w-0", Op::Roll, "b"),
            ])
        };
        let mut s = Script::new(vec![d(), d(), d(), d()]);
        let e = run(&mut s, Options::default()).unwrap_err();
        assert!(
            matches!(&e, Error::Run(RunError::ReplacedAgain { id, .. }) if id == "w-0"),
            "{e:?}"
        );
        assert_eq!(
            s.log().iter().filter(|l| l.starts_with("remove")).count(),
            1
        );
    }

    /// A turn that kept an outdated control plane for a successor that had not joined looks again
    /// after its converge (which changed nothing but followed the successor): then it leaves. One
    /// that still has not joined stops the run rather than looking forever.
    #[test]
    fn a_successor_not_joined_is_looked_at_again_after_the_converge() {
        let waiting = || {
            let mut d = decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("cp-1", Op::NoOp, "b"),
            ]);
            d.waiting = vec!["cp-1".into()];
            d
        };
        let mut leaving = decided(vec![
            server("cp-0", Op::Delete, "a"),
            server("cp-1", Op::NoOp, "b"),
        ]);
        leaving.retirements = vec![Retirement {
            id: "cp-0".into(),
            why: "replaced by a successor that joined first (flavor: a → b)".into(),
        }];
        let done = decided(vec![server("cp-1", Op::NoOp, "b")]);
        let mut s = Script::new(vec![waiting(), leaving, done]);
        run(&mut s, Options::default()).unwrap();
        assert_eq!(
            s.log(),
            [
                "prepare",
                "converge []",
                "prepare",
                "remove cp-0 [Delete cp-0]",
                "prepare",
                "converge []",
                "converged"
            ],
        );
        let mut s = Script::new(vec![waiting(), waiting()]);
        let e = run(&mut s, Options::default()).unwrap_err();
        assert_eq!(
            e,
            Error::Run(RunError::NeverJoined {
                ids: vec!["cp-1".into()]
            })
        );
        // Told not to follow new nodes (`--wait infra`): the run ends, cp-0 still there, and the
        // next continues.
        let mut s = Script::new(vec![waiting(), waiting()]);
        s.infra = true;
        run(&mut s, Options::default()).unwrap();
        assert_eq!(s.log(), ["prepare", "converge []", "prepare", "converged"]);
    }

    /// A successor this run made, outdated itself, is not succeeded again; one made before is.
    #[test]
    fn a_successor_made_by_this_run_and_outdated_stops_it() {
        let leaving = |cloud_id: &str| {
            let mut d = decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("w-0", Op::Delete, cloud_id),
            ]);
            d.retirements = vec![Retirement {
                id: "w-0".into(),
                why: "replaced by a successor that joined first (flavor: a → b)".into(),
            }];
            d.surging.insert("w".into());
            d
        };
        // There before the run: it leaves.
        let done = decided(vec![server("cp-0", Op::NoOp, "a")]);
        let mut s = Script::new(vec![leaving("old"), done.clone()]);
        run(&mut s, Options::default()).unwrap();
        assert!(
            s.log().contains(&"remove w-0 [Delete w-0]".to_owned()),
            "{:?}",
            s.log()
        );
        // The retiring server is not drained as a smaller count by the converge.
        assert!(
            !s.log().iter().any(|l| l.starts_with("drain")),
            "{:?}",
            s.log()
        );
        // Made by this run (not among the servers of its first turn): the run stops.
        // (its converge created it: not among the first turn's servers).
        let making = decided(vec![
            server("cp-0", Op::NoOp, "a"),
            server("w-0", Op::Create, ""),
        ]);
        let mut s = Script::new(vec![making, leaving("new")]);
        let e = run(&mut s, Options::default()).unwrap_err();
        assert!(
            matches!(&e, Error::Run(RunError::SucceededAgain { .. })),
            "{e:?}"
        );
    }

    /// `--repair`: the node NotReady for long enough is replaced before the converge, which would
    /// wait for it; one that is not stays.
    #[test]
    fn repair_replaces_before_the_converge() {
        let d = || {
            decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("w-0", Op::NoOp, "b"),
            ])
        };
        let mut s = Script::new(vec![d(), d(), d()]);
        s.unhealthy = vec![crate::roll::Unhealthy {
            node: "kos-demo-w-0".into(),
            status: kos_cluster::spec::ConditionStatus::Unknown,
            since_unix: 100,
        }];
        let repair = |after_secs| Options {
            repair: Some(Repair {
                after_secs: Some(after_secs),
                now: &|| 1_000,
                unrepairable: Unrepairable::Refuse,
            }),
        };
        run(&mut s, repair(300)).unwrap();
        assert_eq!(
            s.log(),
            [
                "prepare",
                "remove w-0 [Delete w-0]",
                "prepare",
                "converge []",
                "converged"
            ]
        );
        // Every turn says what each group's check found, the healthy groups too.
        assert_eq!(
            s.judged.borrow()[..2],
            [
                "cp: 1/1 healthy, unhealthy [], pending []",
                "w: 0/1 healthy, unhealthy [\"kos-demo-w-0\"], pending []",
            ]
        );
        let mut s = Script::new(vec![d(), d()]);
        s.unhealthy = vec![crate::roll::Unhealthy {
            node: "kos-demo-w-0".into(),
            status: kos_cluster::spec::ConditionStatus::Unknown,
            since_unix: 900,
        }];
        run(&mut s, repair(300)).unwrap();
        assert!(!s.log().iter().any(|l| l.starts_with("remove")));
        assert_eq!(
            s.judged.borrow()[1],
            "w: 0/1 healthy, unhealthy [], pending [\"kos-demo-w-0\"]"
        );
        // NotReady for 100 s of its 300: looked at again when it may be unhealthy, and not
        // waited for meanwhile.
        assert!(
            s.log().contains(&"recheck in 200s".to_owned()),
            "{:?}",
            s.log()
        );
        assert!(
            s.log().contains(&"not waiting for 1".to_owned()),
            "{:?}",
            s.log()
        );
    }

    /// The only control plane NotReady past its timeout cannot be replaced: `--repair` (Refuse)
    /// fails the run; a controller (Hold) says so, replaces the worker that can be, and converges.
    #[test]
    fn an_unrepairable_control_plane_fails_a_cli_repair_and_is_held_by_a_controller() {
        let d = || {
            decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("w-0", Op::NoOp, "b"),
            ])
        };
        let sick = || {
            ["kos-demo-cp-0", "kos-demo-w-0"]
                .map(|node| crate::roll::Unhealthy {
                    node: node.into(),
                    status: kos_cluster::spec::ConditionStatus::Unknown,
                    since_unix: 100,
                })
                .to_vec()
        };
        let repair = |unrepairable| Options {
            repair: Some(Repair {
                after_secs: None,
                now: &|| 1_000,
                unrepairable,
            }),
        };
        let mut s = Script::new(vec![d(), d(), d()]);
        s.unhealthy = sick();
        let e = run(&mut s, repair(Unrepairable::Refuse)).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Run(RunError::Refused(RollError::SingleControlPlane { .. }))
            ),
            "{e:?}"
        );
        let mut s = Script::new(vec![d(), d(), d()]);
        s.unhealthy = sick();
        run(&mut s, repair(Unrepairable::Hold)).unwrap();
        let log = s.log();
        assert!(log.iter().any(|l| l.starts_with("held cp: ")), "{log:?}");
        assert!(
            log.contains(&"remove w-0 [Delete w-0]".to_owned()),
            "{log:?}"
        );
        // The held control plane is not waited for.
        assert!(log.contains(&"not waiting for 1".to_owned()), "{log:?}");
        assert_eq!(log.last().map(String::as_str), Some("converged"), "{log:?}");
    }

    /// A successor whose bootstrap an interrupted run left failed (`kubeadm-certs` gone before it
    /// joined) is made again while its predecessor leaves: the remake deletes the successor only.
    /// (It used to delete the leaving cp-0 with it, undrained and its etcd member left behind: the
    /// random-kill upgrade's "member outlives its server".)
    #[test]
    fn a_remake_leaves_the_retiring_server_to_its_own_step() {
        let d = || {
            let mut d = decided(vec![
                server("cp-1", Op::NoOp, "b"),
                server("cp-3", Op::NoOp, "d"),
                server("cp-0", Op::Delete, "a"),
            ]);
            d.retirements = vec![Retirement {
                id: "cp-0".into(),
                why: "replaced by a successor that joined first (flavor: a → b)".into(),
            }];
            d.surging.insert("cp".into());
            d
        };
        // As the cloud and the cluster show it now: cp-3 has no Node, so cp-0 waits for it. Its
        // failed bootstrap is made again, not taken for a successor that never joins (the
        // random-kill upgrade stopped there with "cp-3 … shows no Node").
        let waiting = || {
            let mut d = decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("cp-1", Op::NoOp, "b"),
                server("cp-3", Op::NoOp, "d"),
            ]);
            d.waiting = vec!["cp-3".into()];
            d.surging.insert("cp".into());
            d
        };
        for turn in [&d as &dyn Fn() -> Decided, &waiting] {
            let mut s = Script::new(vec![turn(), turn(), turn()]);
            s.failed_earlier = VecDeque::from([vec!["cp-3".to_owned()]]);
            let _ = run(&mut s, Options::default());
            assert_eq!(
                &s.log()[..4],
                [
                    "prepare",
                    "converge []",
                    "prepare",
                    "remove cp-3 [Delete cp-3]"
                ]
            );
        }
    }

    /// What a turn decides of a cluster with three control planes and a pool `general` of one, both
    /// with `maxSurge: 1` in three zones, from what the cloud shows (`seen`: servers, and the ports
    /// and volumes a killed run left) and the servers made for another spec (`old`): the real
    /// succession, and the plan that goes with it (a server kept is rolled or kept, one missing
    /// made, the rest deleted).
    fn from_cloud(seen: &[&str], old: &[&str]) -> Decided {
        use crate::succession::{self, Rule};
        use kos_cluster::observe::Observed;
        let kind = |id: &str| {
            if id.starts_with("port-") {
                Kind::Port
            } else if id.starts_with("vol-") {
                Kind::Volume
            } else {
                Kind::Server
            }
        };
        let found = |id: &str| Resource {
            kind: kind(id),
            logical_id: id.into(),
            id: format!("id-{id}"),
            name: format!("kos-demo-{id}"),
            tagged: true,
            state: "ACTIVE".into(),
            failed: false,
            facts: Facts::default(),
        };
        let mut observed = Observed::default();
        for id in seen {
            observed.resources.insert((*id).into(), vec![found(id)]);
        }
        let outdated: BTreeMap<String, String> = old
            .iter()
            .map(|id| ((*id).to_owned(), "Kubernetes: 1.35.2 → 1.36.4".to_owned()))
            .collect();
        let rule = |prefix, count| Rule {
            prefix,
            count,
            surge: 1,
            unavailable: 0,
            zones: 3,
        };
        let s = succession::decide(
            &observed,
            &outdated,
            rule("cp", 3),
            &[rule("general", 1)],
            &BTreeSet::new(),
        )
        .unwrap();
        let kept: Vec<String> = s
            .slots
            .control_plane()
            .iter()
            .map(|i| format!("cp-{i}"))
            .chain(
                s.slots
                    .pool("general", 1)
                    .iter()
                    .map(|i| format!("general-{i}")),
            )
            .collect();
        let mut actions: Vec<Action> = kept
            .iter()
            .map(|id| {
                let op = match (seen.contains(&id.as_str()), old.contains(&id.as_str())) {
                    (false, _) => Op::Create,
                    (true, true) => Op::Roll,
                    (true, false) => Op::NoOp,
                };
                let mut a = server(id, op, &format!("id-{id}"));
                a.changes = outdated.get(id).cloned().into_iter().collect();
                a
            })
            .collect();
        let gone = seen.iter().filter(|id| {
            !kept.iter().any(|k| {
                [k.clone(), format!("port-{k}"), format!("vol-{k}")].contains(&(**id).to_owned())
            })
        });
        for id in gone {
            actions.push(Action {
                logical_id: (*id).into(),
                kind: kind(id),
                name: format!("kos-demo-{id}"),
                op: Op::Delete,
                reason: "not in the spec".into(),
                changes: Vec::new(),
                existing: Some(found(id)),
            });
        }
        let mut d = decided(actions);
        d.retirements = s.retirements;
        d.surging = ["cp".to_owned(), "general".to_owned()].into();
        d
    }

    /// An upgrade whose last control-plane removal was killed after its server went, before its
    /// port and volume did: the next run finishes that removal, then the pool, held while a control
    /// plane was leaving, rolls. (It used to find no server to retire, hold the pool for the port
    /// and volume, and end with `general-0` on the old release.)
    #[test]
    fn a_removal_killed_after_its_server_went_is_finished_and_the_pool_rolls() {
        let cps = ["cp-3", "cp-4", "cp-5"];
        let remnant = [cps.as_slice(), &["port-cp-2", "vol-cp-2", "general-0"]].concat();
        let after = [cps.as_slice(), &["general-0"]].concat();
        let joined = [cps.as_slice(), &["general-0", "general-3"]].concat();
        let done = [cps.as_slice(), &["general-3"]].concat();
        let old = ["general-0"];
        let mut s = Script::new(vec![
            from_cloud(&remnant, &old),
            from_cloud(&after, &old),
            from_cloud(&joined, &old),
            from_cloud(&done, &[]),
        ]);
        assert_eq!(
            s.turns[0].retirements.first().map(|r| r.id.as_str()),
            Some("cp-2"),
            "what holds no server leaves"
        );
        run(&mut s, Options::default()).unwrap();
        assert_eq!(
            s.log(),
            [
                "prepare",
                "converge []",
                "remove cp-2 [Delete port-cp-2, Delete vol-cp-2]",
                "prepare",
                "converge [Create general-3]",
                "prepare",
                "remove general-0 [Delete general-0]",
                "prepare",
                "converge []",
                "converged",
            ]
        );
    }

    /// A node an interrupted run left failed is made again after the converge.
    #[test]
    fn nodes_an_interrupted_run_left_failed_are_made_again() {
        let d = || {
            decided(vec![
                server("cp-0", Op::NoOp, "a"),
                server("w-0", Op::NoOp, "b"),
            ])
        };
        let mut s = Script::new(vec![d(), d(), d(), d()]);
        s.failed_earlier = VecDeque::from([vec!["w-0".to_owned()]]);
        // The script reports w-0 failed on every converge: the second remake stops the run.
        let e = run(&mut s, Options::default()).unwrap_err();
        assert!(
            matches!(&e, Error::Run(RunError::ReplacedAgain { id, .. }) if id == "w-0"),
            "{e:?}"
        );
        assert_eq!(
            &s.log()[..4],
            [
                "prepare",
                "converge []",
                "prepare",
                "remove w-0 [Delete w-0]"
            ]
        );
    }
}
