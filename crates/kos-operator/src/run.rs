//! The operator's process: probes and metrics served, the Lease campaigned for (two replicas, one
//! leads), the Cluster controller run while this replica leads. A replica that loses the Lease
//! stops with an error, as controller-runtime's managers do, and its Deployment starts it again as
//! a standby; the new leader picks every Cluster up from what the cloud, the Secrets and the
//! clusters show.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kos_control::connect::Reach;
use kube::api::Api;
use kube::runtime::Controller;
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};

use crate::metrics::Metrics;
use crate::reconcile::{self, Context, Settings};
use crate::resource::Cluster;

/// How the process runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub settings: Settings,
    /// `None`: this replica always leads (`--leader-elect=false`).
    pub leader: Option<Leader>,
    /// Where `/metrics` is served (`None`: not served).
    pub metrics: Option<SocketAddr>,
    /// Where `/healthz` and `/readyz` are served (`None`: not served).
    pub probes: Option<SocketAddr>,
    /// Where cluster-autoscaler's externalgrpc CloudProvider is served, the directory of its TLS
    /// files, and the address the autoscalers dial (its certificate's host when the operator signs
    /// it) (`None`: not served). Every replica serves it: a change is a guarded patch.
    pub autoscaler: Option<(SocketAddr, std::path::PathBuf, Option<String>)>,
}

/// Leader election on a `coordination.k8s.io/v1` Lease.
#[derive(Debug, Clone)]
pub struct Leader {
    pub namespace: String,
    pub name: String,
    /// Unique per replica.
    pub identity: String,
    pub lease_duration: Duration,
    /// How long before expiry the holder renews.
    pub renew_margin: Duration,
    /// How often a standby looks for a released Lease (client-go's `RetryPeriod`).
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot serve on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    AutoscalerTls(#[from] crate::autoscaler::tls::TlsError),
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// Another replica holds the Lease now: this one stops (its Deployment starts it again).
    #[error("leader election lost (Lease {namespace}/{name})")]
    LostLease { namespace: String, name: String },
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone)]
struct Served {
    metrics: Arc<Metrics>,
    /// Ready once the controller runs, or once this replica stands by (a standby is ready: it
    /// takes over without a restart).
    ready: Arc<AtomicBool>,
}

async fn metrics_text(State(s): State<Served>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], s.metrics.encode())
}

async fn readyz(State(s): State<Served>) -> StatusCode {
    if s.ready.load(Ordering::Relaxed) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, RunError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Bind { addr, source })
}

fn serve(listener: tokio::net::TcpListener, router: Router) {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::warn!("serving stopped: {e}");
        }
    });
}

/// Waits for a campaign to end (it releases the Lease when it holds it), at most
/// [`RELEASE_WAIT`]: an API that no longer answers must not keep a stopping replica alive.
async fn released_within(
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
) {
    if tokio::time::timeout(RELEASE_WAIT, task).await.is_err() {
        tracing::warn!("the Lease was not released within {RELEASE_WAIT:?}: it expires instead");
    }
}

const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// What a standby does next.
enum Standby {
    Won,
    Lost,
    Shutdown,
    Look,
}

type Campaign = (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
);

/// Campaigns for the Lease: whether this replica leads, as it changes.
async fn watch(client: &kube::Client, l: &Leader) -> Result<Campaign, RunError> {
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &l.name)
        .with_namespace(&l.namespace)
        .with_identity(&l.identity)
        .with_duration(l.lease_duration.as_secs().max(1))
        .with_grace(l.renew_margin.as_secs().max(1))
        .build()
        .await
        .map_err(|source| RunError::Lease {
            namespace: l.namespace.clone(),
            name: l.name.clone(),
            source,
        })?;
    Ok(manager.watch().await)
}

/// The Lease has no holder (its last one released it). A failed read says no: the campaign's own
/// reads report the API's trouble.
async fn released(leases: &Api<Lease>, name: &str) -> bool {
    match leases.get_opt(name).await {
        Ok(Some(lease)) => lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_none_or(|h| h.is_empty()),
        Ok(None) => true,
        Err(e) => {
            tracing::debug!("reading Lease {name}: {e}");
            false
        }
    }
}

/// Runs until `shutdown` completes (then releases the Lease) or the Lease is lost.
///
/// # Errors
/// [`RunError`].
pub async fn run(
    client: kube::Client,
    reach: Arc<dyn Reach>,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new());
    let served = Served {
        metrics: metrics.clone(),
        ready: Arc::new(AtomicBool::new(false)),
    };
    if let Some(addr) = opts.metrics {
        let l = bind(addr).await?;
        tracing::info!(address = ?l.local_addr().ok(), "serving /metrics");
        serve(
            l,
            Router::new()
                .route("/metrics", get(metrics_text))
                .with_state(served.clone()),
        );
    }
    if let Some(addr) = opts.probes {
        let l = bind(addr).await?;
        tracing::info!(address = ?l.local_addr().ok(), "serving /healthz and /readyz");
        serve(
            l,
            Router::new()
                .route("/healthz", get(|| async { "ok" }))
                .route("/readyz", get(readyz))
                .with_state(served.clone()),
        );
    }
    if let Some((addr, dir, advertised)) = &opts.autoscaler {
        let tls = crate::autoscaler::tls::Tls::load(dir, advertised.as_deref())?;
        let l = bind(*addr).await?;
        tracing::info!(address = ?l.local_addr().ok(), "serving cluster-autoscaler's externalgrpc");
        let client = client.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::autoscaler::serve(l, tls, client).await {
                tracing::warn!("{e}");
            }
        });
    }
    tokio::pin!(shutdown);
    let campaign = match &opts.leader {
        None => None,
        Some(l) => {
            let (mut leading, mut task) = watch(&client, l).await?;
            served.ready.store(true, Ordering::Relaxed);
            metrics.leading(&l.name, false);
            tracing::info!(identity = %l.identity, lease = %l.name, "standing by for the Lease");
            let leases: Api<Lease> = Api::namespaced(client.clone(), &l.namespace);
            loop {
                let next = tokio::select! {
                    r = leading.wait_for(|l| *l) => {
                        if r.is_ok() { Standby::Won } else { Standby::Lost }
                    }
                    () = &mut shutdown => Standby::Shutdown,
                    () = tokio::time::sleep(l.retry_period) => Standby::Look,
                };
                match next {
                    Standby::Won => break,
                    Standby::Lost => {
                        return Err(RunError::LostLease {
                            namespace: l.namespace.clone(),
                            name: l.name.clone(),
                        });
                    }
                    Standby::Shutdown => {
                        drop(leading);
                        released_within(task).await;
                        return Ok(());
                    }
                    // kube-lease-manager's standby sleeps until the holder's Lease would expire;
                    // a holder that stopped released it, and client-go's standby takes it within
                    // a retry period: so does this one, campaigning afresh.
                    Standby::Look => {
                        if released(&leases, &l.name).await {
                            drop(leading);
                            released_within(task).await;
                            (leading, task) = watch(&client, l).await?;
                        }
                    }
                }
            }
            metrics.leading(&l.name, true);
            tracing::info!(identity = %l.identity, "leading");
            Some((leading, task, l.clone()))
        }
    };
    served.ready.store(true, Ordering::Relaxed);
    let reporter = Reporter {
        controller: "kos-operator".into(),
        instance: opts.leader.as_ref().map(|l| l.identity.clone()),
    };
    let ctx = Arc::new(Context::new(client.clone(), reach, reporter, opts.settings));
    let timed = {
        let metrics = metrics.clone();
        move |c: Arc<Cluster>, ctx: Arc<Context>| {
            let timer = metrics.reconcile(&c.namespace().unwrap_or_default(), &c.name_any());
            async move {
                let r = reconcile::reconcile(c, ctx).await;
                timer.finish(r.is_ok());
                r
            }
        }
    };
    // A node that stops being Ready brings its Cluster's turn (crate::nodes).
    let triggers = ctx.node_watches().triggers();
    let controller = Controller::new(Api::<Cluster>::all(client), watcher::Config::default())
        .reconcile_on(triggers)
        .run(timed, reconcile::error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!("{}: {e}", Cluster::kind(&()));
            }
        });
    tokio::pin!(controller);
    match campaign {
        None => {
            tokio::select! {
                () = &mut controller => {}
                () = &mut shutdown => {}
            }
            Ok(())
        }
        Some((mut leading, task, l)) => {
            let lost = tokio::select! {
                () = &mut controller => false,
                () = &mut shutdown => false,
                _ = leading.wait_for(|l| !*l) => true,
            };
            metrics.leading(&l.name, false);
            // Released on the way out: a standby takes over at once, not after the lease runs out.
            drop(leading);
            released_within(task).await;
            if lost {
                return Err(RunError::LostLease {
                    namespace: l.namespace,
                    name: l.name,
                });
            }
            Ok(())
        }
    }
}
