//! kos-sim: a simulated OpenStack cloud.
//!
//! One axum server on 127.0.0.1 serves Keystone v3 and the Nova, Neutron, Glance, Octavia and Cinder
//! subsets kos uses, in the real services' wire format (checked against their API-reference samples),
//! with their state machines on a scalable clock, a latency model, fault injection, rate limits, and a
//! request log with per-service counters under `/_sim/`.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let sim = kos_sim::Sim::start(kos_sim::SimConfig::fast()).await?;
//! println!("auth_url: {}", sim.auth_url());
//! # Ok(()) }
//! ```
//!
//! A second listener on 127.0.0.1 is an HTTP CONNECT proxy ([`proxy`], [`Sim::proxy_url`]) into the
//! API endpoints of the clusters an attached guest runtime forms: a process that is not kos
//! (kubectl, kos-operator) reaches `172.24.4.x:6443`, not routable here, with
//! `HTTPS_PROXY=http://127.0.0.1:PORT`, as it would through a bastion's proxy, and no product code
//! names a simulator address. It tunnels only to listed endpoints: it is not an open proxy.
//!
//! It shares no code with kos-cloud on purpose: a misreading of OpenStack must not be able to hide by
//! agreeing with itself.

pub mod admin;
mod admin_clusters;
pub mod app;
pub mod cinder;
pub mod clock;
pub mod config;
pub mod error;
pub mod faults;
pub mod glance;
pub mod guests;
pub mod ids;
pub mod keystone;
pub mod neutron;
pub mod nova;
pub mod octavia;
pub mod paging;
pub mod persist;
pub mod proxy;
pub mod query;
pub mod routes;
pub mod service;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub use app::{App, AuthCtx, LogEntry, ServiceCounters, SharedApp};
pub use clock::SimTime;
pub use config::{LatencyModel, Quotas, SchedulerModel, SimConfig};
pub use faults::FaultRule;
pub use service::Service;
pub use state::Cloud;

/// A running simulator. Dropping it stops the server.
pub struct Sim {
    app: SharedApp,
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Drives an attached guest runtime while nobody calls the cloud.
    ticker: Option<tokio::task::JoinHandle<()>>,
    /// The CONNECT proxy's accept loop (its tunnels end with it).
    proxy: Option<tokio::task::JoinHandle<()>>,
}

impl Sim {
    /// Starts a fresh cloud on 127.0.0.1 with a free port.
    pub async fn start(cfg: SimConfig) -> std::io::Result<Sim> {
        Self::serve(cfg, SocketAddr::from(([127, 0, 0, 1], 0)), None).await
    }

    /// Starts on `addr` (port 0 picks a free one), from saved state when `cloud` is given.
    pub async fn serve(
        cfg: SimConfig,
        addr: SocketAddr,
        cloud: Option<Cloud>,
    ) -> std::io::Result<Sim> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let base_url = format!("http://{addr}");
        // Loopback only, whatever `addr` is: it tunnels into the clusters and asks nobody who calls.
        let proxy_listener =
            TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], cfg.proxy_port))).await?;
        let proxy_url = format!("http://{}", proxy_listener.local_addr()?);
        let cloud = cloud.unwrap_or_else(|| Cloud::seeded(&cfg));
        let app = Arc::new(App::new(cfg, base_url, proxy_url, cloud));
        let proxy = proxy::spawn(proxy_listener, Arc::downgrade(&app));
        let router = router(app.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!("kos-sim server stopped: {e}");
            }
        });
        Ok(Sim {
            app,
            addr,
            shutdown: Some(tx),
            task: Some(task),
            ticker: None,
            proxy: Some(proxy),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn base_url(&self) -> &str {
        &self.app.base_url
    }

    /// The HTTP CONNECT proxy into the clusters' API endpoints (`http://127.0.0.1:PORT`, see
    /// [`proxy`]): what `HTTPS_PROXY` is set to for a client that must reach `172.24.4.x:6443`.
    pub fn proxy_url(&self) -> String {
        self.app.proxy_url.clone()
    }

    /// Keystone's URL, as `auth_url` in clouds.yaml.
    pub fn auth_url(&self) -> String {
        format!("{}/identity/v3", self.app.base_url)
    }

    pub fn app(&self) -> &SharedApp {
        &self.app
    }

    pub fn config(&self) -> &SimConfig {
        &self.app.cfg
    }

    /// A clouds.yaml with one cloud, `name`, using the simulator's password credentials.
    pub fn clouds_yaml(&self, name: &str) -> String {
        let c = &self.app.cfg;
        format!(
            "clouds:\n  {name}:\n    auth:\n      auth_url: {auth}\n      username: {user}\n      password: {pw}\n      project_name: {project}\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: {region}\n    interface: public\n    identity_api_version: 3\n",
            auth = self.auth_url(),
            user = c.username,
            pw = c.password,
            project = c.project,
            region = c.region,
        )
    }

    /// Attaches what runs inside the servers (see [`guests`]): servers that become ACTIVE from now on
    /// boot through it, and it is driven as the clock moves, by the cloud's calls and by a task of
    /// its own while nobody calls. Returns `false` when a runtime was attached before.
    pub fn attach_guests(&mut self, rt: Arc<dyn guests::GuestRuntime>) -> bool {
        if !self.app.attach_guests(rt) {
            return false;
        }
        let weak = Arc::downgrade(&self.app);
        // A cloud second of real time, within what keeps a demo lively and the machine idle.
        let every = self
            .app
            .clock
            .real(1.0)
            .clamp(Duration::from_millis(10), Duration::from_millis(100));
        self.ticker = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match weak.upgrade() {
                    Some(app) => drop(app.cloud()),
                    None => return,
                }
            }
        }));
        true
    }

    /// Saves the cloud's state to `path` (see [`persist`]) and, with a guest runtime attached, its
    /// snapshot next to it ([`persist::guests_path`]), both at one instant; [`persist::load`] and
    /// [`Sim::serve`] bring the cloud back, with the clock resumed where it stopped.
    pub fn save(&self, path: &std::path::Path) -> Result<(), persist::PersistError> {
        let cloud = self.app.cloud();
        persist::save(&cloud, path)?;
        if let Some(rt) = self.app.guests() {
            let snapshot = rt
                .snapshot()
                .map_err(|detail| persist::PersistError::Snapshot {
                    path: persist::guests_path(path).display().to_string(),
                    detail,
                })?;
            persist::save_bytes(&snapshot, &persist::guests_path(path))?;
        }
        Ok(())
    }

    /// Stops what the guest runtime runs in the background (its clusters' controllers), so that a
    /// snapshot taken afterwards is what they left behind.
    pub async fn shutdown_guests(&self) {
        if let Some(rt) = self.app.guests() {
            rt.shutdown().await;
        }
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        if let Some(t) = self.proxy.take() {
            t.abort();
        }
        self.shutdown_guests().await;
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.abort();
        }
        if let Some(t) = self.proxy.take() {
            t.abort();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Every service's routes, and whether they sit behind token validation (Keystone checks its own).
fn all_routes() -> Vec<(routes::Routes, Option<Service>)> {
    vec![
        (keystone::routes(), None),
        (nova::versions(), None),
        (nova::routes(), Some(Service::Compute)),
        (neutron::versions(), None),
        (neutron::routes(), Some(Service::Network)),
        (glance::versions(), None),
        (glance::routes(), Some(Service::Image)),
        (octavia::versions(), None),
        (octavia::version_docs(), Some(Service::LoadBalancer)),
        (octavia::routes(), Some(Service::LoadBalancer)),
        (cinder::versions(), None),
        (cinder::version_docs(), Some(Service::BlockStorage)),
        (cinder::routes(), Some(Service::BlockStorage)),
    ]
}

/// Every OpenStack endpoint the simulator serves, with the sample its response is checked against.
pub fn endpoints() -> Vec<routes::EndpointDoc> {
    all_routes()
        .into_iter()
        .flat_map(|(r, _)| r.into_parts().1)
        .collect()
}

/// The whole HTTP surface: every service under its prefix, behind the gate.
pub fn router(app: SharedApp) -> Router {
    let mut r = Router::new();
    for (routes, auth) in all_routes() {
        let svc = routes.service();
        let (sub, _) = routes.into_parts();
        r = r.merge(match auth {
            Some(svc) => sub.layer(from_fn_with_state((app.clone(), svc), app::authenticate)),
            // Keystone checks its own tokens, access rules included.
            None if svc == Service::Identity => {
                sub.layer(from_fn_with_state(app.clone(), keystone::access_rules_gate))
            }
            None => sub,
        });
    }
    r.merge(admin::router())
        .fallback(not_found)
        .layer(from_fn(app::request_id))
        .layer(from_fn_with_state(app.clone(), app::gate))
        .with_state(app)
}

/// No route: under a service other than Keystone, its keystonemiddleware still runs first, so a
/// caller without a valid token (or whose access rules do not allow the path) gets the 401, as
/// from every real service; then the 404.
async fn not_found(
    axum::extract::State(app): axum::extract::State<app::SharedApp>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = req.uri().path().to_owned();
    let svc = Service::from_path(&path).unwrap_or(Service::Admin);
    if !matches!(svc, Service::Identity | Service::Admin) && app::caller(&app, svc, &req).is_none()
    {
        return error::SimError::unauthorized(svc).into_response();
    }
    error::SimError::not_found(svc, format!("The resource could not be found: {path}"))
        .into_response()
}
