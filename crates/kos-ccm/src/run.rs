//! A `kos-ccm` run: cloud.conf → OpenStack session (with metrics, a rate limit and API timeouts),
//! Kubernetes client, `/healthz` and `/metrics`, leader election, then the controllers until
//! SIGTERM (graceful: reconciles in flight finish, the Lease is released) or lost leadership
//! (exit non-zero, so the kubelet restarts the pod and it campaigns again, as upstream does).

use std::future::Future;
use std::sync::Arc;

use kos_cloud::{Env, RetryPolicy, Session};
use kube::runtime::events::Reporter;
use tokio::sync::watch;

use crate::config::{CloudConfig, ConfigError};
use crate::context::Context;
use crate::lb::{LbSettings, LoadBalancers};
use crate::leader::{Elector, LeaderError, LeaseElector, Unelected};
use crate::metrics::Metrics;
use crate::options::{Controller, Options};
use crate::{node, route, serve, service};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("connecting to OpenStack: {0}")]
    Cloud(#[from] kos_cloud::CloudError),
    #[error("Kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    #[error("Kubernetes client configuration: {0}")]
    KubeConfig(String),
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("route controller: {0}")]
    Route(#[from] route::RouteError),
    #[error("--cluster-cidr is required when the route controller runs ([Route] router-id is set)")]
    NoClusterCidr,
    #[error("serving /healthz and /metrics on {addr}: {source}")]
    Serve {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("leadership lost: stopping so that the pod restarts and campaigns again")]
    LostLeadership,
}

/// Runs until `terminate` completes (SIGTERM in the binary) or leadership is lost.
pub async fn run(
    opts: Options,
    env: &Env,
    terminate: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let loaded = CloudConfig::load(&opts.cloud_config)?;
    let client = kube_client(&opts).await?;
    run_with(opts, env, loaded, client, terminate).await
}

/// As [`run`], with the cloud.conf already read and the Kubernetes client already made: for a
/// caller that hosts kos-ccm in its own process (the simulated cloud runs it against a simulated
/// cluster, with the cloud.conf of that cluster's `cloud-config` Secret). `opts.cloud_config` and
/// `opts.kubeconfig` are not read.
pub async fn run_with(
    opts: Options,
    env: &Env,
    loaded: crate::config::Loaded,
    client: kube::Client,
    terminate: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    let config = loaded.config;
    let mut profile = config.profile(env)?;
    profile.api_timeout = Some(opts.openstack_api_timeout);
    let metrics = Arc::new(Metrics::new());
    let session = Session::connect(&profile)
        .await?
        .with_observer(metrics.clone())
        .with_rate_limit(opts.openstack_rate_limit, opts.openstack_rate_burst)
        // Controllers requeue a busy load balancer rather than wait for it in a worker.
        .with_retry_policy(RetryPolicy {
            retry_busy_load_balancer: false,
            ..RetryPolicy::default()
        });
    tracing::info!(cloud = %profile.name, region = ?session.region(), "connected to OpenStack");

    // Stops every task: SIGTERM, or leadership lost.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let server = match opts.serve_on {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| RunError::Serve { addr, source })?;
            let m = metrics.clone();
            let stop = stopped();
            Some(tokio::spawn(async move {
                if let Err(e) = serve::serve_on(listener, m, stop).await {
                    tracing::warn!(error = %e, "/healthz and /metrics stopped");
                }
            }))
        }
        None => None,
    };

    let identity = identity();
    let elector: Box<dyn Elector> = match &opts.leader_election {
        Some(le) => Box::new(LeaseElector {
            client: client.clone(),
            namespace: le.namespace.clone(),
            name: le.name.clone(),
            identity: identity.clone(),
            lease_duration: le.lease_duration,
            renew_margin: le.renew_margin,
            retry_period: le.retry_period,
        }),
        None => Box::new(Unelected),
    };
    let mut leadership = elector.campaign().await?;
    let terminate = async move {
        terminate.await;
    };
    tokio::pin!(terminate);
    tracing::info!(%identity, "waiting for leadership");
    let leading = tokio::select! {
        got = leadership.acquired() => got,
        () = &mut terminate => false,
    };
    if !leading {
        let _ = stop_tx.send(true);
        leadership.step_down().await;
        if let Some(s) = server {
            let _ = s.await;
        }
        return Ok(());
    }
    tracing::info!(%identity, "leading: starting controllers");

    let ctx = Arc::new(Context::new(
        session.clone(),
        config,
        opts.cluster_name.clone(),
        client.clone(),
        Reporter {
            controller: "kos-ccm".into(),
            instance: Some(identity.clone()),
        },
    ));
    let mut tasks = tokio::task::JoinSet::new();
    let on = |c: Controller| opts.controllers.contains(&c);
    if on(Controller::CloudNode) || on(Controller::CloudNodeLifecycle) {
        let settings = node::Settings {
            cloud_node: on(Controller::CloudNode),
            lifecycle: on(Controller::CloudNodeLifecycle),
            status_update_frequency: opts.node_status_update_frequency,
            monitor_period: opts.node_monitor_period,
            regional_provider_id: env
                .get(node::REGIONAL_PROVIDER_ID_ENV)
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            ..node::Settings::default()
        };
        tasks.spawn(node::run(ctx.clone(), settings, stopped()));
    }
    if on(Controller::Service) {
        // Tags every load balancer with the cluster's identity, not only its name. Without the
        // permission (an older ClusterRole), the name alone is used, as upstream.
        let cluster_id = match service::cluster_id(&client).await {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the kube-system namespace: load balancers are owned by cluster name only");
                None
            }
        };
        let mut lb_settings = LbSettings::new(opts.cluster_name.clone());
        lb_settings.cluster_id = cluster_id;
        lb_settings.member_verify_interval = opts.lb_member_verify_period;
        let lbs = Arc::new(LoadBalancers::new(
            session.clone(),
            ctx.config.clone(),
            lb_settings,
        ));
        let settings = service::ServiceSettings {
            concurrency: u16::try_from(opts.concurrent_service_syncs).unwrap_or(u16::MAX),
            resync_period: opts.lb_resync_period,
            ..service::ServiceSettings::default()
        };
        tasks.spawn(service::run(
            ctx.clone(),
            lbs,
            settings,
            Some(metrics.clone()),
            stopped(),
        ));
    }
    if on(Controller::Route)
        && opts.configure_cloud_routes
        && let Some(router_id) = ctx.config.route.router_id.clone()
    {
        let cluster_cidr = opts.cluster_cidr.ok_or(RunError::NoClusterCidr)?;
        route::check(&session, &router_id).await?;
        let routes = route::Routes {
            router_id,
            cluster_cidr,
        };
        tasks.spawn(route::run(
            ctx.clone(),
            routes,
            opts.route_reconciliation_period,
            stopped(),
        ));
    }

    let lost = tokio::select! {
        () = leadership.lost() => true,
        () = &mut terminate => false,
    };
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    leadership.step_down().await;
    if let Some(s) = server {
        let _ = s.await;
    }
    if lost {
        Err(RunError::LostLeadership)
    } else {
        tracing::info!("stopped");
        Ok(())
    }
}

async fn kube_client(opts: &Options) -> Result<kube::Client, RunError> {
    let mut config = match &opts.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| RunError::KubeConfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::KubeConfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RunError::KubeConfig(e.to_string()))?,
    };
    if let Some(master) = &opts.master {
        config.cluster_url = master
            .parse()
            .map_err(|e| RunError::KubeConfig(format!("--master {master}: {e}")))?;
    }
    bounded(&mut config);
    Ok(kube::Client::try_from(config)?)
}

/// kube-rs sets no read timeout (watches have their own idle timeout): a request the API server
/// accepted and never answers would hold a reconcile, or the lease's renewal, forever. Cut it after
/// longer than a watch's 290 s, counted from when the request went out.
fn bounded(config: &mut kube::Config) {
    config
        .read_timeout
        .get_or_insert(std::time::Duration::from_secs(300));
    config.reset_reader_on_write = true;
}

/// The Lease holder's identity: host name (the pod's, with hostNetwork the node's) plus a random
/// suffix, so two processes on one host never both think they hold the Lease.
fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kos-ccm".into());
    let suffix: u32 = rand_suffix();
    format!("{host}_{suffix:08x}")
}

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS: enough to tell two processes apart.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kube_request_has_a_read_timeout() {
        let mut c = kube::Config::new("https://127.0.0.1:6443".parse().expect("url"));
        assert_eq!(
            c.read_timeout, None,
            "kube-rs's default, which kos-ccm must not keep"
        );
        bounded(&mut c);
        assert_eq!(c.read_timeout, Some(std::time::Duration::from_secs(300)));
        assert!(c.reset_reader_on_write);
        // One the user's configuration set stays.
        let mut c = kube::Config::new("https://127.0.0.1:6443".parse().expect("url"));
        c.read_timeout = Some(std::time::Duration::from_secs(20));
        bounded(&mut c);
        assert_eq!(c.read_timeout, Some(std::time::Duration::from_secs(20)));
    }
}
