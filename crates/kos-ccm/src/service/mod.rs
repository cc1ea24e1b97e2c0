//! The Service controller: the Kubernetes side of the load-balancer controller (what the upstream
//! runs as the generic `service` controller over OCCM's `LoadBalancer`), as one kube-rs
//! `Controller` over the Services of all namespaces, driving [`LoadBalancers`].
//!
//! For every Service of `type: LoadBalancer` whose `loadBalancerClass` is kos-ccm's:
//! - the finalizer [`FINALIZER`] is added before anything is sent to the cloud;
//! - [`LoadBalancers::ensure_service`] runs with the cluster's Nodes; its `status.loadBalancer`
//!   and its `load-balancer-id` / `load-balancer-address` annotations are written back, each only
//!   when it differs from what the Service carries, and every Event note becomes an Event on the
//!   Service (a note repeated while nothing changed is recorded again only after
//!   [`ServiceSettings::event_repeat_interval`]);
//! - a requeue the pass asks for (Octavia busy) is a requeue of the Service, never a wait.
//!
//! A Service being deleted, or one that is no longer `type: LoadBalancer` (or has another class),
//! but still carries the finalizer, is cleaned up with [`LoadBalancers::ensure_service_deleted`];
//! the finalizer goes only once that reports everything gone. A live Service cleaned up that way
//! also loses its `status.loadBalancer` and the annotations that named the deleted load balancer.
//!
//! Triggers besides Service changes:
//! - a change of the Nodes that can alter pool members (added, removed, addresses, labels, the
//!   exclude label, the autoscaler's deletion taint; not readiness, which the core does not use)
//!   reconciles every Service;
//! - a Service whose pass left (or found) its load balancer in PENDING_* is reconciled as soon as
//!   it has settled: while any is awaited, one light list of the project's load balancers every
//!   [`ServiceSettings::pending_poll`] (see `settle`);
//! - every [`ServiceSettings::resync_period`] the shared cloud observation is dropped and every
//!   Service reconciled, so drift made behind kos-ccm's back is repaired. A resync that finds
//!   nothing to do writes nothing, to the cloud or to Kubernetes.
//!
//! Services are reconciled only once the Nodes have been listed: an empty node list would empty
//! every pool.
//!
//! Entry point: [`run`]. The binary builds the [`LoadBalancers`] (with [`cluster_id`] as
//! `LbSettings::cluster_id`), adds flags, metrics and leader election around it.

mod error;
mod events;
mod nodes;
mod reconcile;
mod settle;
mod writeback;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::runtime::{Controller, WatchStreamExt, controller, reflector, watcher};
use kube::{Api, Client, ResourceExt};

pub use error::Error;

use crate::context::Context;
use crate::lb::LoadBalancers;
use crate::metrics::Metrics;
use reconcile::ServiceController;

/// The upstream's finalizer: a load balancer exists (or may) for the Service.
pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// The Event `action` of each kind of pass.
pub mod action {
    pub const ENSURE: &str = "EnsureLoadBalancer";
    pub const DELETE: &str = "EnsureLoadBalancerDeleted";
}

/// How the Service controller runs.
#[derive(Debug, Clone, Copy)]
pub struct ServiceSettings {
    /// Services reconciled at once (`--concurrent-service-syncs`); at least 1.
    pub concurrency: u16,
    /// Every this long all Services are compared with a fresh observation of the cloud
    /// (`--lb-resync-period`).
    pub resync_period: Duration,
    /// First retry delay after a failure; doubled per consecutive failure up to `retry_max`
    /// (the upstream's work queue: 5 s to 300 s).
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// An Event note repeated by a Service that did not change is recorded again only after this
    /// long (Events expire after an hour by default), so resyncs do not flood the Event stream.
    pub event_repeat_interval: Duration,
    /// While a pass waits on a load balancer in PENDING_*, the project's load balancers' states
    /// are listed this often (one light call for all of them), and a Service whose load balancer
    /// settled is reconciled at once.
    pub pending_poll: Duration,
}

impl Default for ServiceSettings {
    fn default() -> ServiceSettings {
        ServiceSettings {
            concurrency: 8,
            resync_period: Duration::from_secs(5 * 60),
            retry_min: Duration::from_secs(5),
            retry_max: Duration::from_secs(5 * 60),
            event_repeat_interval: Duration::from_secs(60 * 60),
            pending_poll: Duration::from_secs(1),
        }
    }
}

/// The cluster's unique id for `LbSettings::cluster_id`: the `kube-system` namespace's UID (what
/// CAPO and Gardener use too). `None` when that namespace cannot be seen.
pub async fn cluster_id(client: &Client) -> Result<Option<String>, kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    Ok(namespaces
        .get_opt("kube-system")
        .await?
        .and_then(|n| n.metadata.uid))
}

/// Runs the Service controller until `shutdown` completes (reconciles in flight finish first).
/// `lbs` should be built with `ctx.session`, `ctx.config` and `ctx.cluster_name`.
pub async fn run(
    ctx: Arc<Context>,
    lbs: Arc<LoadBalancers>,
    settings: ServiceSettings,
    metrics: Option<Arc<Metrics>>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = shutdown.shared();
    let (node_task, nodes) = nodes::spawn(Api::all(ctx.client.clone()));
    let mut ready = nodes.clone();
    let listed = async move { ready.wait_for(Option::is_some).await.is_ok() };
    tokio::select! {
        ok = listed => if !ok {
            tracing::error!("the node watch ended before the nodes were listed");
            return;
        },
        () = shutdown.clone() => {
            node_task.abort();
            return;
        }
    }
    tracing::info!("nodes listed, starting the Service controller");

    let (store, services) = cached(Api::all(ctx.client.clone()));
    let controller = Controller::for_stream(services, store);
    let state = Arc::new(ServiceController::new(
        ctx,
        lbs,
        settings,
        metrics,
        nodes.clone(),
        controller.store(),
    ));
    controller
        .with_config(controller::Config::default().concurrency(settings.concurrency.max(1)))
        .reconcile_all_on(nodes::changes(nodes))
        .reconcile_all_on(resync(settings.resync_period, state.clone()))
        .reconcile_on(settle::settled(state.clone(), settings.pending_poll))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, state)
        .for_each(|res| async move {
            match res {
                Ok((svc, action)) => {
                    tracing::debug!(service = %svc, ?action, "service reconciled");
                }
                // Logged by the error policy.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                // A requeue of a Service deleted meanwhile.
                Err(controller::Error::ObjectNotFound(r)) => {
                    tracing::debug!(service = %r, "service gone before its requeue");
                }
                Err(e) => tracing::warn!(error = %e, "service controller"),
            }
        })
        .await;
    node_task.abort();
}

/// The Services the controller sees and their cache: what Controller::new makes, with each
/// Service's managedFields dropped before the cache keeps it. Nothing here reads them, and they
/// are a good part of a cached Service (a tree per field manager: the creator, kos-ccm's
/// finalizer, its status).
fn cached(
    api: Api<Service>,
) -> (
    reflector::Store<Service>,
    impl Stream<Item = Result<Service, watcher::Error>> + Send + 'static,
) {
    let (store, writer) = reflector::store();
    let services = watcher(api, watcher::Config::default())
        .modify(|svc| svc.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    (store, services)
}

/// A tick every `period` (the first one a period after the start: the controller's initial list
/// reconciles everything anyway). Each tick first drops the shared observation, so the passes it
/// triggers look at the cloud afresh.
fn resync(period: Duration, state: Arc<ServiceController>) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold(state, move |state| async move {
        tokio::time::sleep(period).await;
        state.resync_started();
        Some(((), state))
    })
}

#[cfg(test)]
mod tests {
    use kube::api::{Patch, PatchParams, PostParams};
    use kube::runtime::reflector::ObjectRef;

    use super::*;

    /// The cache keeps each Service without its managedFields (what the API server holds has
    /// them), and with everything a pass reads.
    #[tokio::test]
    async fn the_cache_keeps_services_without_their_managed_fields() {
        let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
        let client = fake.client().expect("client");
        let api: Api<Service> = Api::namespaced(client.clone(), "default");
        let mut svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "annotations": {"a": "b"}},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
        }))
        .expect("service");
        svc = api
            .create(&PostParams::default(), &svc)
            .await
            .expect("create");
        let patch = serde_json::json!({"metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}});
        api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("finalizer");
        let stored = api.get("web").await.expect("get");
        assert!(!stored.managed_fields().is_empty(), "the fake keeps none");

        let (store, services) = cached(Api::all(client));
        let drive = tokio::spawn(services.for_each(|_| async {}));
        let key = ObjectRef::from_obj(&svc);
        let cached = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                // The first listing lands in the cache as a whole, once it is complete.
                if let Some(s) = store.get(&key).filter(|s| !s.finalizers().is_empty()) {
                    break s;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the Service never reached the cache");
        drive.abort();
        assert!(cached.managed_fields().is_empty());
        assert_eq!(cached.finalizers(), stored.finalizers());
        assert_eq!(cached.annotations(), stored.annotations());
        assert_eq!(cached.spec, stored.spec);
        assert_eq!(cached.resource_version(), stored.resource_version());
    }
}
