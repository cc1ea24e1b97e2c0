//! One reconcile of one Service (see the module docs of [`super`]): ensure, or clean up, then
//! write back what changed. Never waits for the cloud: the core's requeue is the Service's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use tokio::time::Instant;

use super::error::{Error, Result};
use super::events::{EventMemory, fingerprint};
use super::nodes::NodeList;
use super::settle::Awaited;
use super::writeback::{
    annotations_patch, finalizer_patch, has_finalizer, status_patch, wants_load_balancer,
};
use super::{ServiceSettings, action};
use crate::backoff::Backoff;
use crate::context::{Context, error_chain, patch_params};
use crate::lb::annotations::{LOAD_BALANCER_ADDRESS, LOAD_BALANCER_ID};
use crate::lb::{EventType, LbError, LoadBalancers, Outcome};
use crate::metrics::Metrics;

/// Upstream's reconcile metric operations.
const OP_ENSURE: &str = "loadbalancer_ensure";
const OP_DELETE: &str = "loadbalancer_delete";

/// The controller's state, shared by its reconciles.
pub(crate) struct ServiceController {
    ctx: Arc<Context>,
    lbs: Arc<LoadBalancers>,
    settings: ServiceSettings,
    metrics: Option<Arc<Metrics>>,
    nodes: NodeList,
    /// The controller's Service cache, to forget Services that are gone.
    services: Store<Service>,
    events: EventMemory,
    /// Retry delays after failures, per Service UID.
    backoff: Backoff,
    /// Per Service UID, a requeue the last pass asked for (see [`Quiet`]).
    quiet: Mutex<HashMap<String, Quiet>>,
    /// Services whose last pass waits on a load balancer in PENDING_* (see [`super::settle`]).
    awaited: Awaited,
}

/// A pass asked to look again at `until` (Octavia busy). Until then, a pass of the Service at one
/// of the versions that pass wrote itself (the finalizer, the annotations, the status: each write
/// is a change of the Service, and each change a pass), with the same nodes, can only find the
/// same, so it is skipped rather than made to list the project again. Any other change (the
/// user's, a node's) is a new version, and a pass.
struct Quiet {
    versions: Vec<String>,
    nodes: Arc<Vec<Node>>,
    until: Instant,
}

fn uid(svc: &Service) -> String {
    svc.uid().unwrap_or_else(|| key(svc))
}

/// `namespace/name`, for logs and errors.
fn key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any())
}

fn event_type(t: EventType) -> kube::runtime::events::EventType {
    match t {
        EventType::Normal => kube::runtime::events::EventType::Normal,
        EventType::Warning => kube::runtime::events::EventType::Warning,
    }
}

fn lb_err(svc: &Service) -> impl FnOnce(LbError) -> Error {
    let service = key(svc);
    move |source| Error::LoadBalancer { service, source }
}

fn kube_err(svc: &Service, what: &'static str) -> impl FnOnce(kube::Error) -> Error {
    let service = key(svc);
    move |source| Error::Kube {
        service,
        what,
        source,
    }
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 404)
}

/// Entry point for the kube-runtime `Controller`.
pub(crate) async fn reconcile(svc: Arc<Service>, st: Arc<ServiceController>) -> Result<Action> {
    let outcome = st.sync(&svc).await;
    if outcome.is_ok() {
        st.backoff.reset(&uid(&svc));
    }
    outcome
}

/// Retries with exponential backoff per Service; a lost write race after the shortest delay; a
/// failure no retry can fix waits for the Service to change.
pub(crate) fn error_policy(svc: Arc<Service>, err: &Error, st: Arc<ServiceController>) -> Action {
    let action = if !err.is_retryable() {
        Action::await_change()
    } else if err.is_conflict() {
        Action::requeue(st.settings.retry_min)
    } else {
        Action::requeue(st.backoff.failed(&uid(&svc)))
    };
    tracing::warn!(
        service = %key(&svc),
        reason = err.metric_label(),
        next = ?action,
        "{}",
        error_chain(err)
    );
    action
}

fn requeue(after: Option<Duration>) -> Action {
    after.map_or_else(Action::await_change, Action::requeue)
}

impl ServiceController {
    pub(crate) fn new(
        ctx: Arc<Context>,
        lbs: Arc<LoadBalancers>,
        settings: ServiceSettings,
        metrics: Option<Arc<Metrics>>,
        nodes: NodeList,
        services: Store<Service>,
    ) -> ServiceController {
        ServiceController {
            ctx,
            lbs,
            events: EventMemory::new(settings.event_repeat_interval),
            settings,
            metrics,
            nodes,
            services,
            backoff: Backoff::new(settings.retry_min, settings.retry_max),
            quiet: Mutex::new(HashMap::new()),
            awaited: Awaited::default(),
        }
    }

    pub(crate) fn awaited(&self) -> &Awaited {
        &self.awaited
    }

    /// See `LoadBalancers::next_settle_poll`.
    pub(crate) fn next_settle_poll(&self) -> Option<Instant> {
        self.lbs.next_settle_poll()
    }

    /// The Services waiting on any of `lbs` whose load balancer has settled, taken out of the
    /// waits and out of [`Quiet`]: their next pass looks, whatever their requeue said.
    pub(crate) async fn settled(
        &self,
        lbs: &HashSet<String>,
    ) -> std::result::Result<Vec<ObjectRef<Service>>, LbError> {
        let done = self.lbs.settled(lbs).await?;
        tracing::debug!(
            awaited = lbs.len(),
            settled = done.len(),
            "load balancers' states listed"
        );
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let taken = self.awaited.take(&done);
        let mut quiet = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
        Ok(taken
            .into_iter()
            .map(|(uid, r)| {
                quiet.remove(&uid);
                r
            })
            .collect())
    }

    /// A periodic resync begins: the next passes look at the cloud afresh.
    pub(crate) fn resync_started(&self) {
        tracing::debug!("periodic load-balancer resync");
        self.lbs.invalidate_snapshot();
        let live: HashSet<String> = self.services.state().iter().map(|s| uid(s)).collect();
        self.events.retain(&live);
        self.backoff.retain(&live);
        self.awaited.retain(&live);
        // A resync looks at every Service, whatever it waits for.
        self.quiet.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Some(delay) when the Service is as the last pass left it, that pass asked to look again
    /// later, and the nodes did not change since: the requeue stands, nothing is done now.
    fn still_quiet(&self, svc: &Service, nodes: &Arc<Vec<Node>>) -> Option<Duration> {
        let mut quiet = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
        let id = uid(svc);
        let q = quiet.get(&id)?;
        let now = Instant::now();
        let version = svc.metadata.resource_version.as_ref();
        if q.until > now
            && version.is_some_and(|v| q.versions.contains(v))
            && Arc::ptr_eq(&q.nodes, nodes)
        {
            return Some(q.until - now);
        }
        quiet.remove(&id);
        None
    }

    fn set_quiet(
        &self,
        svc: &Service,
        versions: Vec<String>,
        nodes: Arc<Vec<Node>>,
        after: Option<Duration>,
    ) {
        let mut quiet = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
        match after {
            Some(d) if !versions.is_empty() => {
                quiet.insert(
                    uid(svc),
                    Quiet {
                        versions,
                        nodes,
                        until: Instant::now() + d,
                    },
                );
            }
            _ => {
                quiet.remove(&uid(svc));
            }
        }
    }

    async fn sync(&self, svc: &Service) -> Result<Action> {
        let class = self.lbs.settings().load_balancer_class.as_deref();
        let wanted = wants_load_balancer(svc, class) && svc.metadata.deletion_timestamp.is_none();
        if wanted {
            self.timed(OP_ENSURE, self.ensure(svc)).await
        } else if has_finalizer(svc) {
            self.timed(OP_DELETE, self.clean_up(svc)).await
        } else {
            // Not ours, or already cleaned up: not even a look at the cloud.
            Ok(Action::await_change())
        }
    }

    async fn timed(
        &self,
        operation: &'static str,
        pass: impl Future<Output = Result<Action>>,
    ) -> Result<Action> {
        let timer = self.metrics.as_ref().map(|m| m.reconcile(operation));
        let r = pass.await;
        if let Some(t) = timer {
            t.finish(r.is_ok());
        }
        r
    }

    async fn ensure(&self, svc: &Service) -> Result<Action> {
        let nodes = self.nodes.borrow().clone();
        let Some(nodes) = nodes else {
            // `run` waits for the first node list; this is only a safety net.
            return Ok(Action::requeue(self.settings.retry_min));
        };
        if let Some(wait) = self.still_quiet(svc, &nodes) {
            return Ok(Action::requeue(wait));
        }
        // The versions of the Service this pass leaves behind (see `Quiet`).
        let mut versions: Vec<String> = svc.metadata.resource_version.iter().cloned().collect();
        // Before anything reaches the cloud: nothing kos-ccm makes can outlive its Service.
        let mut cur = match finalizer_patch(svc, true) {
            Some(p) => self.patch(svc, &p, "add the finalizer").await?,
            None => svc.clone(),
        };
        versions.extend(cur.metadata.resource_version.clone());
        let out = self
            .lbs
            .ensure_service(&cur, &nodes)
            .await
            .map_err(lb_err(svc))?;
        self.log(&cur, &out, "ensure");
        self.record(&cur, &out, action::ENSURE).await;
        if let Some(p) = annotations_patch(&cur, &out.annotations, &[]) {
            cur = self
                .patch(&cur, &p, "write the load-balancer annotations")
                .await?;
            versions.extend(cur.metadata.resource_version.clone());
        }
        if let Some(want) = &out.status
            && let Some(p) = status_patch(&cur, Some(want))
        {
            cur = self
                .patch_status(&cur, &p, "write status.loadBalancer")
                .await?;
            versions.extend(cur.metadata.resource_version.clone());
        }
        self.set_quiet(&cur, versions, nodes, out.requeue_after);
        self.awaited.set(&cur, uid(&cur), out.awaiting.as_deref());
        Ok(requeue(out.requeue_after))
    }

    async fn clean_up(&self, svc: &Service) -> Result<Action> {
        let out = self
            .lbs
            .ensure_service_deleted(svc)
            .await
            .map_err(lb_err(svc))?;
        self.log(svc, &out, "delete");
        self.record(svc, &out, action::DELETE).await;
        self.awaited.set(svc, uid(svc), out.awaiting.as_deref());
        if !out.converged {
            return Ok(Action::requeue(
                out.requeue_after
                    .unwrap_or(self.lbs.settings().pending_requeue),
            ));
        }
        let mut cur = svc.clone();
        if svc.metadata.deletion_timestamp.is_none() {
            // Still a Service, no longer one of ours: it must not go on naming a load balancer.
            if let Some(p) = status_patch(&cur, None) {
                cur = self
                    .patch_status(&cur, &p, "clear status.loadBalancer")
                    .await?;
            }
            let mut remove = vec![LOAD_BALANCER_ADDRESS];
            // The id goes with its load balancer; one that stays (shared, or the user's) is the
            // user's choice and is kept.
            if let Some(id) = cur.annotations().get(LOAD_BALANCER_ID).cloned() {
                let observed = self.lbs.snapshot().await.map_err(lb_err(svc))?;
                if observed.load_balancer(id.trim()).is_none() {
                    remove.push(LOAD_BALANCER_ID);
                }
            }
            if let Some(p) = annotations_patch(&cur, &BTreeMap::new(), &remove) {
                cur = self
                    .patch(&cur, &p, "remove the load-balancer annotations")
                    .await?;
            }
        }
        if let Some(p) = finalizer_patch(&cur, false) {
            match self.patch(&cur, &p, "remove the finalizer").await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        self.events.forget(&uid(svc));
        self.set_quiet(svc, Vec::new(), Arc::default(), None);
        Ok(Action::await_change())
    }

    fn log(&self, svc: &Service, out: &Outcome, what: &str) {
        if out.writes.is_empty() {
            tracing::debug!(
                service = %key(svc),
                converged = out.converged,
                requeue = ?out.requeue_after,
                "{what}: nothing to change"
            );
        } else {
            tracing::info!(
                service = %key(svc),
                converged = out.converged,
                requeue = ?out.requeue_after,
                writes = ?out.writes,
                "{what}: load balancer changed"
            );
        }
    }

    /// Every note of the pass as an Event on the Service, but notes the Service already got.
    async fn record(&self, svc: &Service, out: &Outcome, action: &str) {
        if out.events.is_empty() {
            return;
        }
        let notes = self.events.to_record(
            &uid(svc),
            fingerprint(svc),
            &out.events,
            !out.writes.is_empty(),
        );
        let reference = svc.object_ref(&());
        for n in notes {
            self.ctx
                .publish(
                    &reference,
                    event_type(n.type_),
                    n.reason,
                    action,
                    n.note.clone(),
                )
                .await;
        }
    }

    fn api(&self, svc: &Service) -> Api<Service> {
        Api::namespaced(
            self.ctx.client.clone(),
            &svc.namespace().unwrap_or_default(),
        )
    }

    async fn patch(&self, svc: &Service, body: &Value, what: &'static str) -> Result<Service> {
        tracing::debug!(service = %key(svc), "{what}");
        self.api(svc)
            .patch(&svc.name_any(), &patch_params(), &Patch::Merge(body))
            .await
            .map_err(kube_err(svc, what))
    }

    async fn patch_status(
        &self,
        svc: &Service,
        body: &Value,
        what: &'static str,
    ) -> Result<Service> {
        tracing::debug!(service = %key(svc), "{what}");
        self.api(svc)
            .patch_status(&svc.name_any(), &patch_params(), &Patch::Merge(body))
            .await
            .map_err(kube_err(svc, what))
    }
}
