//! One reconcile of a Cluster: the same turn as `kos up` (kos-control's [`Up`]) with the spec
//! from the resource, the credential from its identity Secret, the secrets in a Secret it owns;
//! or, when the Cluster is being deleted, the same teardown as `kos down`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kos_control::connect::{Cloud, Reach};
use kos_control::follow::FinishedConsoles;
use kos_control::report::{Summarised, Summary};
use kos_control::store::{Cause, Records as _};
use kos_control::up::{Env, Front, Spec, Up, UpError};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizing, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;

use crate::events::{BuildFailures, Forward, Note, Recheck};
use crate::identity::{self, IdentityError};
use crate::resource::{Cluster, ClusterStatus, FINALIZER, ORPHAN};
use crate::slots::{Slots, Turn};
use crate::status::{self, Verdict};
use crate::store::{CLUSTER_LABEL, SecretRecords};

/// How the operator runs its reconciles.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A converged Cluster is looked at again after this long (the cloud may have drifted).
    pub resync: Duration,
    /// A failed reconcile is tried again after this long.
    pub retry: Duration,
    /// Runs at once against one cloud project (its rate limit is shared).
    pub per_project: usize,
    /// Cloud calls at once within one run (`kos up --parallelism`).
    pub parallelism: usize,
    /// How long a node's drain may take (`kos up --drain-timeout`).
    pub drain_timeout: Duration,
    /// cluster-autoscaler installed into Clusters with autoscaled pools, wired to this operator's
    /// endpoint (`None`: not installed).
    pub autoscaler: Option<Arc<crate::autoscaler::install::Install>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resync: Duration::from_secs(600),
            retry: Duration::from_secs(60),
            per_project: 4,
            parallelism: 10,
            drain_timeout: Duration::from_secs(600),
            autoscaler: None,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: kube::Client,
    /// How this process reaches a cluster's API address.
    pub reach: Arc<dyn Reach>,
    pub reporter: Reporter,
    pub settings: Settings,
    /// The run slots of each cloud project.
    projects: Mutex<HashMap<String, Arc<Slots>>>,
    /// The cloud sessions, reused while their identity Secret is unchanged.
    sessions: identity::Sessions,
    /// Which Cluster (namespace, uid) has a cluster name in a cloud project: the cloud knows
    /// clusters by name alone, so two Clusters of one name in two namespaces would share one.
    names: Mutex<HashMap<(String, String), Claim>>,
    /// Per Cluster (uid), the consoles its turns have seen done: a resync reads none of them again.
    consoles: Mutex<HashMap<String, Arc<FinishedConsoles>>>,
    /// The watches on the Ready Clusters' Nodes.
    nodes: crate::nodes::NodeWatches,
}

/// The Cluster's cloud project (as the run limiter and the name claims key it), its owner
/// reference, and its claim on its name.
fn claim_of(
    cluster: &Cluster,
    ns: &str,
    session: &kos_cloud::Session,
) -> Option<(String, OwnerReference, Claim)> {
    let project = format!("{} {}", session.auth_url(), session.project_id());
    // None while the Cluster has no uid (not stored yet).
    let owner = cluster.controller_owner_ref(&())?;
    let claim = Claim {
        namespace: ns.to_owned(),
        uid: owner.uid.clone(),
    };
    Some((project, owner, claim))
}

/// A Cluster that has a cluster name in a cloud project.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    namespace: String,
    uid: String,
}

impl Context {
    #[must_use]
    pub fn new(
        client: kube::Client,
        reach: Arc<dyn Reach>,
        reporter: Reporter,
        settings: Settings,
    ) -> Context {
        Context {
            client,
            reach,
            reporter,
            settings,
            projects: Mutex::new(HashMap::new()),
            sessions: identity::Sessions::default(),
            names: Mutex::new(HashMap::new()),
            consoles: Mutex::new(HashMap::new()),
            nodes: crate::nodes::NodeWatches::default(),
        }
    }

    /// The watches on the Clusters' Nodes: their `triggers()` go to the controller's
    /// `reconcile_on`, so that a node that stops being Ready brings a turn.
    #[must_use]
    pub fn node_watches(&self) -> &crate::nodes::NodeWatches {
        &self.nodes
    }

    /// Takes `name` in `project` for the Cluster, or says which namespace's Cluster has it.
    fn claim(&self, project: &str, name: &str, claim: &Claim) -> Result<(), String> {
        let mut map = self
            .names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = map
            .entry((project.to_owned(), name.to_owned()))
            .or_insert_with(|| claim.clone());
        if held.uid == claim.uid {
            Ok(())
        } else {
            Err(held.namespace.clone())
        }
    }

    /// The cloud sessions this process keeps, by identity Secret.
    #[must_use]
    pub fn sessions(&self) -> &identity::Sessions {
        &self.sessions
    }

    /// The consoles the Cluster's turns have seen done.
    fn consoles(&self, claim: &Claim) -> Arc<FinishedConsoles> {
        Arc::clone(
            self.consoles
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(claim.uid.clone())
                .or_default(),
        )
    }

    /// How many servers' consoles are remembered as done, over every Cluster.
    #[must_use]
    pub fn finished_consoles(&self) -> usize {
        self.consoles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|c| c.len())
            .sum()
    }

    /// Lets `name` in `project` go, when this Cluster has it.
    fn release(&self, project: &str, name: &str, claim: &Claim) {
        let mut map = self
            .names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (project.to_owned(), name.to_owned());
        if map.get(&key).is_some_and(|held| held.uid == claim.uid) {
            map.remove(&key);
        }
        self.consoles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&claim.uid);
    }

    fn project(&self, key: String) -> Arc<Slots> {
        let mut map = self
            .projects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(key)
            .or_insert_with(|| Arc::new(Slots::new(self.settings.per_project)))
            .clone()
    }
}

/// Why a reconcile did not finish; the Cluster's status says it too.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("the Cluster has no namespace")]
    NoNamespace,
    /// Not stored yet (no uid): nothing can be owned by it.
    #[error("the Cluster has no uid")]
    NoUid,
    #[error("the Kubernetes API: {0}")]
    Api(#[source] kube::Error),
    #[error("{0}")]
    Identity(#[source] IdentityError),
    #[error("the cluster's secrets: {0}")]
    Store(#[source] kos_control::store::StoreError),
    #[error("{message}")]
    Run {
        message: String,
        #[source]
        source: UpError,
    },
    #[error("tearing the cluster down: {0}")]
    Teardown(#[source] kos_cluster::teardown::TeardownError),
    #[error("the admin kubeconfig: {0}")]
    Kubeconfig(#[source] kos_bootstrap::Error),
    #[error("the cloud project's run limiter was closed")]
    Limiter,
    #[error(transparent)]
    Finalizer(Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

/// Reconciles one Cluster: through the finalizer, a run or a teardown.
///
/// # Errors
/// [`ReconcileError`]; the controller tries again after [`Settings::retry`].
pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = cluster.namespace().ok_or(ReconcileError::NoNamespace)?;
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, cluster, |event| async {
        match event {
            Finalizing::Apply(c) => apply(&c, &ns, &ctx).await,
            Finalizing::Cleanup(c) => cleanup(&c, &ns, &ctx).await,
        }
    })
    .await
    .map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

/// The cluster document kos's reader reads: the resource's name, `tags` and spec, the operator's
/// own `identityRef` left out.
#[must_use]
pub fn document(cluster: &Cluster) -> String {
    let doc = document_value(
        &cluster.name_any(),
        &cluster.spec.tags,
        &cluster.spec.cluster,
    );
    // JSON is YAML; pretty, so a diagnostic's line is one field.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// A cluster document (`kos up -f`'s) of a name, its cloud tags (`metadata.tags`) and a spec.
#[must_use]
pub fn document_value(
    name: &str,
    tags: &[String],
    spec: &kos_cluster::schema::Spec,
) -> serde_json::Value {
    let mut metadata = json!({"name": name});
    if !tags.is_empty() {
        metadata["tags"] = json!(tags);
    }
    json!({
        "apiVersion": kos_cluster::spec::API_VERSION,
        "kind": kos_cluster::spec::KIND,
        "metadata": metadata,
        "spec": spec,
    })
}

/// The spec of a turn: the resource as it was when the reconcile started (an edit starts a new
/// reconcile).
struct ResourceFront {
    shown: String,
    text: String,
    /// Per autoscaled pool, the failed builds the autoscaler is told of and has not taken yet: the
    /// turn runs the pool that much smaller, so that it does not boot them again meanwhile.
    hold: BTreeMap<String, u32>,
}

impl ResourceFront {
    fn load(&self) -> Result<Spec, kos_cluster::SpecErrors> {
        let mut loaded = kos_cluster::load(&self.shown, &self.text)?;
        for pool in &mut loaded.spec.node_pools {
            if let Some(held) = self.hold.get(pool.name.value.as_str()) {
                pool.count.value = pool.count.value.saturating_sub(*held);
            }
        }
        Ok(Spec {
            spec: loaded.spec,
            shown: self.shown.clone(),
            text: self.text.clone(),
        })
    }
}

impl Front for ResourceFront {
    fn spec(&self) -> Result<Spec, Cause> {
        self.load().map_err(|e| Box::new(e) as Cause)
    }

    fn seen(&self) -> Result<(), Cause> {
        Ok(())
    }
}

/// The spec's problems as one message: each with its field and its fix, as `kos plan` says them.
#[must_use]
pub fn spec_message(errors: &kos_cluster::SpecErrors) -> String {
    errors
        .errors()
        .map(|d| match &d.help {
            Some(h) => format!("{} ({h})", d.message),
            None => d.message.clone(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

async fn apply(cluster: &Cluster, ns: &str, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = cluster.name_any();
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = cluster.object_ref(&());
    let publish = |n: Note| {
        let recorder = &recorder;
        let reference = &reference;
        async move {
            let ev = KubeEvent {
                type_: n.event_type(),
                reason: n.reason.to_owned(),
                note: Some(n.note),
                action: "Reconcile".to_owned(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, reference).await {
                tracing::warn!(cluster = %name_of(reference), "an Event was not recorded: {e}");
            }
        }
    };
    // Degraded for `reason` in the status, and said so in a Warning Event.
    let degraded = |reason: &'static str, message: String, extra: Option<StatusExtra>| {
        let publish = &publish;
        async move {
            let verdict = Verdict::Degraded {
                reason: reason.into(),
                message: message.clone(),
            };
            write_status(ctx, cluster, ns, &verdict, extra).await?;
            publish(Note {
                warning: true,
                reason,
                note: message,
            })
            .await;
            Ok::<(), ReconcileError>(())
        }
    };
    let front = ResourceFront {
        shown: format!("Cluster {ns}/{name}"),
        text: document(cluster),
        hold: held_builds(cluster),
    };
    let spec = match front.load() {
        Ok(s) => s,
        Err(errors) => {
            degraded("SpecInvalid", spec_message(&errors), None).await?;
            // Nothing changes until the spec does.
            return Ok(Action::await_change());
        }
    };
    let autoscaled = spec.spec.node_pools.iter().any(|p| p.autoscaling.is_some());
    let cluster_spec = spec.spec.clone();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let connected =
        match identity::connect(&secrets, ns, &cluster.spec.identity_ref, &ctx.sessions).await {
            Ok(c) => c,
            Err(e) => {
                let reason = if e.is_input() {
                    "IdentityInvalid"
                } else {
                    "CloudUnreachable"
                };
                write_status(
                    ctx,
                    cluster,
                    ns,
                    &Verdict::Degraded {
                        reason: reason.into(),
                        message: e.to_string(),
                    },
                    None,
                )
                .await?;
                return Err(ReconcileError::Identity(e));
            }
        };
    let session = &connected.session;
    let (project, owner, claim) = claim_of(cluster, ns, session).ok_or(ReconcileError::NoUid)?;
    if let Err(holder) = ctx.claim(&project, &name, &claim) {
        let message = format!(
            "Cluster {holder}/{name} has the name {name} in this cloud project, and the cloud knows \
             a cluster by its name alone (give this Cluster another name)"
        );
        degraded("NameTaken", message, None).await?;
        // Looked at again: the name is free once that Cluster has gone.
        return Ok(Action::requeue(ctx.settings.retry));
    }
    let store = match SecretRecords::load(secrets.clone(), ns, &name, owner.clone()).await {
        Ok(s) => s,
        Err(e) => {
            ctx.release(&project, &name, &claim);
            return Err(ReconcileError::Store(e));
        }
    };
    // Boxed: the turn's future is large, and inline it overflowed a worker's stack (debug build).
    let result = Box::pin(async {
        // A resync of a converged Cluster is not news: Progressing says so only for a new generation
        // or after a failure.
        let converged = cluster.status.as_ref().is_some_and(|s| {
            s.observed_generation == cluster.meta().generation
                && s.conditions
                    .iter()
                    .any(|c| c.kind == status::READY && c.status == "True")
        });
        // Runs against one project share its rate limit: at most `per_project` at once, of which
        // resyncs of converged Clusters at most half.
        let turn = if converged { Turn::Resync } else { Turn::Work };
        let _slot = ctx
            .project(project.clone())
            .take(turn)
            .await
            .map_err(|_| ReconcileError::Limiter)?;
        if !converged {
            write_status(ctx, cluster, ns, &Verdict::Progressing, None).await?;
        }

        let (notes, mut rx) = tokio::sync::mpsc::unbounded_channel::<Note>();
        let summary = Summarised::new(&kos_control::report::Silent, Summary::new(Some(&name)));
        let recheck = Recheck::default();
        let builds = BuildFailures::default();
        let report = Forward {
            inner: &summary,
            notes,
            recheck: &recheck,
            builds: builds.clone(),
        };
        let kubeadm = kos_control::kubeadm::Kubeadm {
            session,
            store: &store,
            ca_cert: connected.ca_pem.clone(),
            report: &report,
        };
        let options = kos_control::up::Options {
            reuse_local_secrets: false,
            recreate_ccm_credential: false,
            parallelism: ctx.settings.parallelism,
            wait: kos_control::follow::Wait::Ready,
            drain_timeout: ctx.settings.drain_timeout,
            // Another Cluster of this name (another namespace, another operator) or a CLI user may be
            // making what the cloud shows.
            leftovers: kos_control::store::Leftovers::Refuse,
            // No one else keeps the cluster's secrets: a rotation a killed leader left, or a
            // credential whose secret is lost, is mended here.
            ccm_mending: kos_control::up::CcmMending::Run,
        };
        let changed = AtomicBool::new(false);
        let consoles = ctx.consoles(&claim);
        let env = Env {
            cloud: Cloud {
                session,
                reach: ctx.reach.as_ref(),
            },
            store: &store,
            script: &kos_control::tokens::NoScript,
            bootstraps: &kubeadm,
            report: &report,
            options: &options,
            changed: &changed,
            consoles: &consoles,
        };
        // Health checks judge what the cloud and its clusters stamp by the cloud's clock.
        let cloud_now = || kos_control::connect::cloud_now(session).unix_timestamp();
        let run = Up::new(env, &front, spec, None).run(kos_lifecycle::run::Options {
            repair: Some(kos_lifecycle::run::Repair {
                // Each group's own healthCheck.
                after_secs: None,
                now: &cloud_now,
                // Every later turn would fail too: the group is held, and the rest goes on.
                unrepairable: kos_lifecycle::run::Unrepairable::Hold,
            }),
        });
        // Events go out while the run goes on.
        let published = async {
            while let Some(n) = rx.recv().await {
                publish(n).await;
            }
        };
        let r = {
            tokio::pin!(run);
            tokio::pin!(published);
            loop {
                tokio::select! {
                    r = &mut run => break r,
                    () = &mut published => {}
                }
            }
        };
        drop(report);
        while let Ok(n) = rx.try_recv() {
            publish(n).await;
        }
        // Before the status: a failure recorded late would be booted again by the next turn.
        record_failed_builds(ctx, cluster, ns, &cluster_spec, &builds.seen()).await?;
        let done = summary.summary();
        match r {
            Ok(()) => {
                let meta = store.meta().map_err(ReconcileError::Store)?;
                let endpoint = meta.as_ref().map(|m| {
                    format!(
                        "https://{}:{}",
                        m.api_address,
                        kos_control::connect::API_PORT
                    )
                });
                write_kubeconfig(&secrets, ns, &name, owner, &store).await?;
                let cloud = Cloud {
                    session,
                    reach: ctx.reach.as_ref(),
                };
                let workload =
                    kos_control::connect::stored_api_client(cloud, &cluster_spec, &store).await;
                match (&workload, cluster.uid()) {
                    (Ok(kube), Some(uid)) => {
                        ctx.nodes
                            .ensure(&uid, ObjectRef::from_obj(cluster), kube.client());
                    }
                    (Err(e), _) => {
                        tracing::debug!(cluster = %name, "no watch on its Nodes: {e}");
                    }
                    _ => {}
                }
                if let Some(install) = &ctx.settings.autoscaler {
                    let r = match &workload {
                        Ok(kube) => {
                            autoscaler_addon(
                                &kube.client(),
                                &cluster_spec,
                                install,
                                ns,
                                &name,
                                autoscaled,
                            )
                            .await
                        }
                        Err(e) => Err(format!("the cluster's API: {e}")),
                    };
                    if let Err(e) = r {
                        publish(Note {
                            warning: true,
                            reason: "AutoscalerNotInstalled",
                            note: e,
                        })
                        .await;
                    }
                }
                let extra = StatusExtra {
                    endpoint,
                    version: meta.map(|m| m.kubernetes_version),
                    nodes: status::nodes(&done),
                    summary: Some(done.clone()),
                };
                write_status(ctx, cluster, ns, &Verdict::Ready, Some(extra)).await?;
                // A node NotReady within its timeout is looked at when it may have run out (a
                // second late, so that it has), not a resync later.
                let due = recheck.secs().map(|secs| {
                    session.pace().local(Duration::from_secs(secs)) + Duration::from_secs(1)
                });
                Ok(Action::requeue(due.map_or(ctx.settings.resync, |d| {
                    d.min(ctx.settings.resync)
                })))
            }
            Err(e) => {
                let reason = if e.is_input() {
                    "SpecRefused"
                } else {
                    "RunFailed"
                };
                let mut message = match &e {
                    // The problems themselves, as `kos plan` lists them, not only their count.
                    UpError::Preflight { error, .. } => {
                        format!("{}: {}", error.report, spec_message(&error.report))
                    }
                    e => kos_lifecycle::api::chain(e),
                };
                if let Some(help) = e
                    .help(kos_lifecycle::audience::Audience::Operator)
                    .or_else(|| elsewhere(&e, &name))
                {
                    message = format!("{message} ({help})");
                }
                let extra = StatusExtra {
                    endpoint: done.api_endpoint.clone(),
                    version: None,
                    nodes: status::nodes(&done),
                    summary: Some(done.clone()),
                };
                degraded(reason, message.clone(), Some(extra)).await?;
                if e.is_input() {
                    // Refused before anything changed: nothing to try until the spec changes.
                    return Ok(Action::await_change());
                }
                Err(ReconcileError::Run { message, source: e })
            }
        }
    })
    .await;
    // A Cluster that has made nothing (its secrets are made before anything in the cloud) holds
    // no name: the Cluster that has the cloud's cluster of that name may then have it.
    if matches!(store.pki(), Ok(None)) {
        ctx.release(&project, &name, &claim);
    }
    result
}

/// Per autoscaled pool, how many of its failed builds the autoscaler has not taken yet
/// ([`crate::autoscaler::groups::Records::held`]).
fn held_builds(cluster: &Cluster) -> BTreeMap<String, u32> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let records = crate::autoscaler::groups::Records::of(cluster.annotations(), now);
    cluster
        .spec
        .cluster
        .node_pools
        .iter()
        .flatten()
        .filter(|p| p.autoscaling.is_some())
        .map(|p| (p.name.clone(), records.held(&p.name)))
        .filter(|(_, held)| *held > 0)
        .collect()
}

/// Records the servers of autoscaled pools whose build failed in this run
/// (`failed.kos.dev/<pool>`), so that the autoscaler is told and backs the pool off; the expired
/// dropped. kos deleted each at once: without the record the autoscaler never sees one fail.
async fn record_failed_builds(
    ctx: &Context,
    cluster: &Cluster,
    ns: &str,
    spec: &kos_cluster::spec::ClusterSpec,
    seen: &[(String, String, String)],
) -> Result<(), ReconcileError> {
    use crate::autoscaler::groups;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let annotations = cluster.annotations();
    let mut patch = serde_json::Map::new();
    for pool in spec.node_pools.iter() {
        let Some(autoscaling) = &pool.autoscaling else {
            continue;
        };
        let name = pool.name.value.as_str();
        // The pool's servers are `<pool>-<index>`: the one whose index is all digits.
        let found: Vec<(String, String)> = seen
            .iter()
            .filter(|(id, _, _)| {
                id.rsplit_once('-').is_some_and(|(p, i)| {
                    p == name && !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())
                })
            })
            .map(|(_, server, fault)| (server.clone(), fault.clone()))
            .collect();
        let key = groups::failed_key(name);
        let was = annotations.get(&key);
        if found.is_empty() && was.is_none() {
            continue;
        }
        let before = was.map(|v| groups::failures(v, now)).unwrap_or_default();
        let keep = usize::try_from(autoscaling.max).unwrap_or(usize::MAX);
        let after = groups::with_failures(before, &found, now, keep.max(1));
        let value = groups::failures_value(&after);
        if value.as_ref() != was {
            patch.insert(key, value.map_or(serde_json::Value::Null, Into::into));
        }
    }
    if patch.is_empty() {
        return Ok(());
    }
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": patch}})),
    )
    .await
    .map_err(ReconcileError::Api)?;
    Ok(())
}

/// What to do when the cloud's cluster of this name is not this Cluster's.
fn elsewhere(e: &UpError, name: &str) -> Option<String> {
    use kos_control::store::SecretsError;
    let UpError::Converge(c) = e else {
        return None;
    };
    matches!(
        &**c,
        kos_control::up::ConvergeError::Secrets(
            SecretsError::Missing { .. } | SecretsError::Foreign { .. }
        )
    )
    .then(|| {
        format!(
            "a cluster named {name} in this cloud project is managed elsewhere: `kos export {name}` \
             moves one the CLI made under the operator; otherwise give this Cluster another name"
        )
    })
}

fn name_of(r: &k8s_openapi::api::core::v1::ObjectReference) -> String {
    format!(
        "{}/{}",
        r.namespace.as_deref().unwrap_or_default(),
        r.name.as_deref().unwrap_or_default()
    )
}

/// What the status says besides the conditions.
struct StatusExtra {
    endpoint: Option<String>,
    version: Option<String>,
    nodes: Vec<crate::resource::NodeStatus>,
    /// The run's summary, for what its health checks found.
    summary: Option<Summary>,
}

async fn write_status(
    ctx: &Context,
    cluster: &Cluster,
    ns: &str,
    verdict: &Verdict,
    extra: Option<StatusExtra>,
) -> Result<(), ReconcileError> {
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), ns);
    // The status as stored now: this reconcile may have written it already.
    let old: Option<ClusterStatus> = api
        .get_status(&cluster.name_any())
        .await
        .map_err(ReconcileError::Api)?
        .status;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut next = status::next(old.as_ref(), verdict, cluster.meta().generation, &now);
    if let Some(x) = extra {
        if x.endpoint.is_some() {
            next.endpoint = x.endpoint;
        }
        if x.version.is_some() {
            next.kubernetes_version = x.version;
        }
        if !x.nodes.is_empty() {
            next.nodes = x.nodes;
        }
        if let Some(summary) = &x.summary {
            status::judged(&mut next, summary, cluster.meta().generation, &now);
        }
    }
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": next })),
    )
    .await
    .map_err(ReconcileError::Api)?;
    Ok(())
}

/// The admin kubeconfig as Cluster API keeps it: Secret `<cluster>-kubeconfig`, key `value`,
/// owned by the Cluster; made again when the API's address changed.
/// cluster-autoscaler in the cluster while a pool is autoscaled, and taken out after.
async fn autoscaler_addon(
    client: &kube::Client,
    spec: &kos_cluster::spec::ClusterSpec,
    install: &crate::autoscaler::install::Install,
    ns: &str,
    name: &str,
    autoscaled: bool,
) -> Result<(), String> {
    use crate::autoscaler::install;
    if !autoscaled {
        return install::remove(client).await.map_err(|e| e.to_string());
    }
    let minor = spec.kubernetes_version.minor();
    let image = kos_bootstrap::addons::Pins::builtin()
        .ok()
        .and_then(|p| p.images_for(minor).map(|m| m.cluster_autoscaler.clone()))
        .ok_or_else(|| format!("the pins table has no cluster-autoscaler for 1.{minor}"))?;
    install::ensure(client, install, ns, name, &image)
        .await
        .map_err(|e| e.to_string())
}

async fn write_kubeconfig(
    secrets: &Api<Secret>,
    ns: &str,
    name: &str,
    owner: OwnerReference,
    store: &SecretRecords,
) -> Result<(), ReconcileError> {
    const ADDRESS: &str = "kos.dev/api-address";
    let (Some(pki), Some(meta)) = (
        store.pki().map_err(ReconcileError::Store)?,
        store.meta().map_err(ReconcileError::Store)?,
    ) else {
        return Ok(());
    };
    let secret_name = format!("{name}-kubeconfig");
    let existing = secrets
        .get_opt(&secret_name)
        .await
        .map_err(ReconcileError::Api)?;
    if existing
        .as_ref()
        .and_then(|s| s.metadata.annotations.as_ref())
        .and_then(|a| a.get(ADDRESS))
        .is_some_and(|a| *a == meta.api_address)
    {
        return Ok(());
    }
    let version: kos_bootstrap::KubeVersion = meta
        .kubernetes_version
        .parse()
        .map_err(ReconcileError::Kubeconfig)?;
    let endpoint = kos_bootstrap::ApiEndpoint {
        host: meta.api_address.clone(),
        port: kos_control::connect::API_PORT,
    };
    let kc = kos_bootstrap::render_kubeconfig(
        &mut rand::rng(),
        name,
        &endpoint,
        &version,
        &pki,
        time::OffsetDateTime::now_utc(),
    )
    .map_err(ReconcileError::Kubeconfig)?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(ns.to_owned()),
            labels: Some([(CLUSTER_LABEL.to_owned(), name.to_owned())].into()),
            annotations: Some([(ADDRESS.to_owned(), meta.api_address.clone())].into()),
            owner_references: Some(vec![owner]),
            resource_version: existing.and_then(|s| s.metadata.resource_version),
            ..Default::default()
        },
        type_: Some("cluster.x-k8s.io/secret".to_owned()),
        data: Some(
            [(
                "value".to_owned(),
                k8s_openapi::ByteString(kc.expose().as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let r = if secret.metadata.resource_version.is_some() {
        secrets
            .replace(&secret_name, &PostParams::default(), &secret)
            .await
    } else {
        secrets.create(&PostParams::default(), &secret).await
    };
    r.map_err(ReconcileError::Api)?;
    Ok(())
}

async fn cleanup(cluster: &Cluster, ns: &str, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = cluster.name_any();
    if let Some(uid) = cluster.uid() {
        ctx.nodes.stop(&uid);
    }
    if cluster
        .annotations()
        .get(ORPHAN)
        .is_some_and(|v| v == "true")
    {
        tracing::info!(cluster = %name, "let go, its cloud resources kept (kos.dev/orphan)");
        return Ok(Action::await_change());
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let connected = identity::connect(&secrets, ns, &cluster.spec.identity_ref, &ctx.sessions)
        .await
        .map_err(ReconcileError::Identity)?;
    let session = &connected.session;
    let (project, owner, claim) = claim_of(cluster, ns, session).ok_or(ReconcileError::NoUid)?;
    let store = SecretRecords::load(secrets.clone(), ns, &name, owner)
        .await
        .map_err(ReconcileError::Store)?;
    // Its secrets are made before anything in the cloud: without them this Cluster made nothing,
    // and what the cloud shows of the name is another's (a Cluster elsewhere, the CLI).
    if store.pki().map_err(ReconcileError::Store)?.is_none() {
        tracing::info!(cluster = %name, "made nothing in the cloud: nothing to tear down");
        ctx.release(&project, &name, &claim);
        return Ok(Action::await_change());
    }
    let _slot = ctx
        .project(project.clone())
        .take(Turn::Work)
        .await
        .map_err(|_| ReconcileError::Limiter)?;
    let opts = kos_cluster::teardown::TeardownOptions::default();
    let report = kos_cluster::teardown::teardown_with(session, &name, &opts)
        .await
        .map_err(ReconcileError::Teardown)?;
    tracing::info!(cluster = %name, deleted = report.resources.len(), "torn down");
    ctx.release(&project, &name, &claim);
    // The Secrets it owns go with the Cluster (garbage collection).
    Ok(Action::await_change())
}

/// What the controller does after a failed reconcile.
#[must_use]
pub fn error_policy(_: Arc<Cluster>, e: &ReconcileError, ctx: Arc<Context>) -> Action {
    tracing::warn!("reconcile failed: {e}");
    Action::requeue(ctx.settings.retry)
}
