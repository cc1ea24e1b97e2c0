//! The guest as kos-sim's guest runtime: [`SimGuests`] implements `kos_sim::guests::GuestRuntime`,
//! so a simulated cloud's servers run kos's user_data for real (as far as the guest simulates it) and
//! the clusters they make are reachable:
//! - every control plane whose API server runs serves its cluster's API over TLS ([`apiserver`]):
//!   a serving certificate issued from the CA on its disk, as kubeadm issues it, client
//!   certificates checked against that CA;
//! - every API endpoint (the API floating IP or VIP) has a local address on this machine that
//!   forwards, at L4 like the load balancer, to a backend that the cloud's network reaches from
//!   "anywhere" ([`forward`]); `GET /_sim/kube-endpoints` lists them;
//! - the cloud controller the addons deploy runs in-process against its cluster's API, with the
//!   configuration a pod would get ([`ccm`]).
//!
//! Time: steps, retries and background jobs are due on the cloud's clock, anchored to the wall clock
//! when the runtime first ran (`epoch + simulated seconds`), so a saved cloud resumes with its
//! guests where both stopped. The date the cluster stamps and compares (bootstrap-token
//! expirations, Node conditions) is the cloud's, the one its `Date` header shows
//! ([`Host::calendar`]): a real cloud's servers keep the time its API servers keep, and kos stamps
//! what the cluster compares (a token's expiration) by that clock.

pub mod apiserver;
pub mod ccm;
pub mod etcd;
pub mod forward;
pub mod invariants;
mod pod;
mod storage;
mod workloads;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kos_sim::SimTime;
use kos_sim::guests::{
    BootInfo, BoxFuture, GuestEvent, GuestHost, GuestRuntime, KubeEndpoint, Source,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::cluster::ClusterId;
use crate::guest::{Guest, Power};
use crate::persist::GuestState;
use crate::seam::{Boot, Host, Image, Metadata, ServerEvent, ServerId};

/// The port kube-apiserver listens on (kubeadm's default `bindPort`; kos does not change it).
pub const API_PORT: u16 = 6443;

/// Why a runtime could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SimGuestsError {
    #[error(
        "the simulated guests' saved state is damaged ({detail}); delete it (and the cloud's state) to start afresh"
    )]
    Damaged { detail: String },
    #[error(transparent)]
    Guest(#[from] crate::GuestError),
    #[error("the simulated guests need a tokio runtime")]
    NoRuntime,
}

/// kos-guest attached to a kos-sim cloud.
pub struct SimGuests {
    /// Shared (weakly) with the etcd endpoints and port-forward backends, which act on the model.
    inner: Arc<Mutex<Inner>>,
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for SimGuests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimGuests").finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    guest: Guest,
    /// Wall-clock time at simulated second 0 (set when the runtime first runs).
    epoch: Option<OffsetDateTime>,
    /// The local port each endpoint had, reused when free (a kubeconfig stays valid across a
    /// restart of the simulator when it can).
    ports: BTreeMap<String, u16>,
    fronts: apiserver::Fronts,
    etcds: etcd::Etcds,
    /// The clusters whose API has this runtime's port-forward backend.
    wired: std::collections::BTreeSet<ClusterId>,
    forwards: forward::Forwards,
    ccms: ccm::Ccms,
    storage: storage::Storage,
    invariants: invariants::Invariants,
}

/// What is saved of a runtime.
#[derive(Serialize, Deserialize)]
struct Saved {
    #[serde(with = "time::serde::rfc3339::option")]
    epoch: Option<OffsetDateTime>,
    ports: BTreeMap<String, u16>,
    guest: GuestState,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SimGuests {
    /// A runtime with no servers yet. Call it inside a tokio runtime.
    ///
    /// # Errors
    /// [`SimGuestsError::NoRuntime`] outside a tokio runtime.
    pub fn new() -> Result<SimGuests, SimGuestsError> {
        Self::with(Guest::new(), None, BTreeMap::new())
    }

    /// The runtime a [`GuestRuntime::snapshot`] saved; its clusters' APIs are served again.
    ///
    /// # Errors
    /// [`SimGuestsError::Damaged`] when `saved` is not a snapshot; a cluster's API that cannot
    /// start.
    pub fn restore(saved: &[u8]) -> Result<SimGuests, SimGuestsError> {
        let s: Saved = serde_json::from_slice(saved).map_err(|e| SimGuestsError::Damaged {
            detail: e.to_string(),
        })?;
        tokio::runtime::Handle::try_current().map_err(|_| SimGuestsError::NoRuntime)?;
        let guest = Guest::restore(s.guest)?;
        Self::with(guest, s.epoch, s.ports)
    }

    fn with(
        guest: Guest,
        epoch: Option<OffsetDateTime>,
        ports: BTreeMap<String, u16>,
    ) -> Result<SimGuests, SimGuestsError> {
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| SimGuestsError::NoRuntime)?;
        Ok(SimGuests {
            inner: Arc::new(Mutex::new(Inner {
                guest,
                epoch,
                ports,
                fronts: apiserver::Fronts::default(),
                etcds: etcd::Etcds::default(),
                wired: Default::default(),
                forwards: forward::Forwards::default(),
                ccms: ccm::Ccms::default(),
                storage: storage::Storage::default(),
                invariants: invariants::Invariants::default(),
            })),
            handle,
        })
    }

    /// Reads the guest (tests, diagnostics).
    pub fn with_guest<T>(&self, f: impl FnOnce(&Guest) -> T) -> T {
        f(&lock(&self.inner).guest)
    }

    /// What the cloud controller of each cluster is doing, by cluster (for diagnostics and tests).
    pub fn ccm_status(&self) -> BTreeMap<ClusterId, String> {
        lock(&self.inner).ccms.status()
    }

    /// What the CSI driver of each cluster is doing, by cluster (for diagnostics and tests).
    pub fn csi_status(&self) -> BTreeMap<ClusterId, String> {
        lock(&self.inner).storage.status()
    }
}

/// The guest's [`Host`] over kos-sim's host, for one call.
struct HostView<'h, 'a> {
    host: Mutex<&'h mut GuestHost<'a>>,
    now: OffsetDateTime,
    calendar: OffsetDateTime,
}

impl Host for HostView<'_, '_> {
    fn now(&self) -> OffsetDateTime {
        self.now
    }

    /// The cloud's date (its `Date` header), at its time scale.
    fn calendar(&self) -> OffsetDateTime {
        self.calendar
    }

    fn console(&self, server: &ServerId, line: &str) {
        self.host
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .console(&server.0, line);
    }

    fn api_backends(&self, from: &ServerId, endpoint: &str) -> Vec<ServerId> {
        self.host
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reach(&Source::Server(from.0.clone()), endpoint)
            .into_iter()
            .filter(|b| b.port == API_PORT)
            .map(|b| ServerId(b.server))
            .collect()
    }
    fn internet_reaches(&self, _from: &ServerId, url: &str) -> bool {
        self.host
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .internet_reaches(url)
    }
    fn internet_serves(&self, url: &str) -> bool {
        self.host
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .internet_serves(url)
    }
}

fn guest_time(epoch: OffsetDateTime, t: SimTime) -> OffsetDateTime {
    epoch + time::Duration::seconds_f64(t.0.max(0.0))
}

/// What the image says about itself: `os_distro` is the OS cloud-init reports (`/etc/os-release`'s
/// `ID`), `os_version` its release.
fn image_of(info: &BootInfo) -> Image {
    let prop = |k: &str| info.image_properties.get(k).cloned().unwrap_or_default();
    let os_id = prop("os_distro");
    Image {
        release: Image::codename(&os_id, &prop("os_version")).to_owned(),
        os_id,
        kubernetes: None,
    }
}

impl Inner {
    fn epoch(&mut self, now: SimTime) -> OffsetDateTime {
        *self.epoch.get_or_insert_with(|| {
            OffsetDateTime::now_utc() - time::Duration::seconds_f64(now.0.max(0.0))
        })
    }

    /// Applies `f` to the guest with a host view at `host.now()`.
    fn with_host(
        &mut self,
        host: &mut GuestHost<'_>,
        f: impl FnOnce(&mut Guest, &HostView<'_, '_>) -> Result<(), crate::GuestError>,
    ) {
        let now = guest_time(self.epoch(host.now()), host.now());
        let date = host.cloud().date_at(host.now());
        let calendar = OffsetDateTime::from_unix_timestamp_nanos(
            date.timestamp_nanos_opt().map_or(0, i128::from),
        )
        .unwrap_or(now);
        let view = HostView {
            host: Mutex::new(host),
            now,
            calendar,
        };
        if let Err(e) = f(&mut self.guest, &view) {
            tracing::warn!("kos-guest: {e}");
        }
    }

    /// Brings what runs on the servers in line with the guest: API servers, local addresses, cloud
    /// controllers; forgets servers that are gone and clusters nothing runs any more.
    fn reconcile(
        &mut self,
        host: &mut GuestHost<'_>,
        handle: &tokio::runtime::Handle,
        model: &etcd::Model,
    ) {
        let _entered = handle.enter();
        // Before pruning: a deleted server's member is seen gone from that moment.
        self.invariants.observe(&self.guest, host.now());
        self.guest.prune();
        self.fronts.reconcile(&mut self.guest);
        self.etcds.reconcile(&mut self.guest, model);
        self.wired.retain(|c| self.guest.clusters.contains_key(c));
        for (id, c) in &self.guest.clusters {
            if self.wired.insert(*id) {
                c.kube.set_port_forward(Arc::new(etcd::Kubelets {
                    model: model.clone(),
                    cluster: *id,
                }));
            }
        }
        // Where the workstation reaches each endpoint: the API servers of the backends the cloud's
        // network forwards it to.
        let mut routes: BTreeMap<forward::Key, Vec<SocketAddr>> = BTreeMap::new();
        for c in self.guest.clusters.values() {
            if let Some(ep) = &c.endpoint {
                let fronts: Vec<SocketAddr> = host
                    .reach(&Source::Workstation, ep)
                    .into_iter()
                    .filter(|b| b.port == API_PORT)
                    .filter_map(|b| self.fronts.addr_of(&ServerId(b.server), c.id))
                    .collect();
                routes
                    .entry(forward::Key::Endpoint(ep.clone()))
                    .or_default()
                    .extend(fronts);
            }
            // The cluster's `kubernetes` Service: every API server of the cluster.
            routes.insert(forward::Key::Service(c.id), self.fronts.of_cluster(c.id));
        }
        self.forwards.reconcile(routes, &mut self.ports);
        let services: BTreeMap<ClusterId, SocketAddr> = self
            .guest
            .clusters
            .keys()
            .filter_map(|id| {
                self.forwards
                    .local(&forward::Key::Service(*id))
                    .map(|a| (*id, a))
            })
            .collect();
        self.ccms.reconcile(&self.guest, &services);
        self.storage.reconcile(&self.guest, &services, host.cloud());
        for c in self.guest.clusters.values() {
            workloads::report_rolled_out(&c.kube, ccm::daemonset(c).as_ref());
            // Claims whose pods are gone lose their protection, as kube-controller-manager's
            // pvc-protection and pv-protection controllers do.
            if let Err(e) = c.kube.reconcile_storage_protection() {
                tracing::debug!(cluster = %c.id, "storage protection: {e}");
            }
        }
    }
}

impl GuestRuntime for SimGuests {
    fn handle(&self, host: &mut GuestHost<'_>, server: &str, event: GuestEvent) {
        let mut inner = lock(&self.inner);
        let id = ServerId(server.to_owned());
        let region = host.region().to_owned();
        inner.with_host(host, |guest, view| {
            let known = guest.servers.contains_key(&id);
            match event {
                GuestEvent::Boot(info) => {
                    let boot = Boot {
                        metadata: Metadata {
                            instance_id: id.0.clone(),
                            local_hostname: info.hostname.clone(),
                            availability_zone: info.availability_zone.clone(),
                            region,
                        },
                        image: image_of(&info),
                        user_data: info.user_data,
                        addresses: info.addresses,
                        config_drive: info.config_drive,
                    };
                    guest.handle(&id, ServerEvent::Boot(Box::new(boot)), view)
                }
                // A server that booted before the runtime was attached runs nothing of ours.
                _ if !known => Ok(()),
                // Processes die on the way down; services come back on the way up.
                GuestEvent::Reboot => guest
                    .handle(&id, ServerEvent::Shutdown, view)
                    .and_then(|()| guest.handle(&id, ServerEvent::Reboot, view)),
                GuestEvent::Shutdown => guest.handle(&id, ServerEvent::Shutdown, view),
                GuestEvent::Start => guest.handle(&id, ServerEvent::Start, view),
                GuestEvent::Delete => guest.handle(&id, ServerEvent::Delete, view),
            }
        });
        inner.reconcile(host, &self.handle, &Arc::downgrade(&self.inner));
    }

    fn tick(&self, host: &mut GuestHost<'_>) {
        let mut inner = lock(&self.inner);
        inner.with_host(host, |guest, view| guest.tick(view));
        inner.reconcile(host, &self.handle, &Arc::downgrade(&self.inner));
    }

    fn next_wake(&self) -> Option<SimTime> {
        let inner = lock(&self.inner);
        let epoch = inner.epoch?;
        inner
            .guest
            .next_wake()
            .map(|t| SimTime((t - epoch).as_seconds_f64()))
    }

    fn clusters(&self, now: SimTime) -> serde_json::Value {
        let mut inner = lock(&self.inner);
        let Inner {
            guest, invariants, ..
        } = &mut *inner;
        invariants.observe(guest, now);
        invariants.report(guest)
    }

    fn kube_endpoints(&self) -> Vec<KubeEndpoint> {
        lock(&self.inner).forwards.endpoints()
    }

    fn at_rest(&self) -> serde_json::Value {
        lock(&self.inner).guest.at_rest_view()
    }

    fn metadata(&self) -> serde_json::Value {
        serde_json::to_value(lock(&self.inner).guest.metadata_views())
            .unwrap_or(serde_json::Value::Null)
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        let inner = lock(&self.inner);
        let saved = Saved {
            epoch: inner.epoch,
            ports: inner.ports.clone(),
            guest: inner.guest.state(),
        };
        serde_json::to_vec(&saved).map_err(|e| e.to_string())
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        let (stopping, drivers) = {
            let mut inner = lock(&self.inner);
            (inner.ccms.stop_all(), inner.storage.stop_all())
        };
        Box::pin(async move {
            ccm::wait_stopped(stopping).await;
            storage::wait_stopped(drivers).await;
        })
    }
}

impl Guest {
    /// Per cluster: each Secret's stored bytes (base64, with the key name of its prefix), and the
    /// key names of each running control plane's API server configuration.
    pub fn at_rest_view(&self) -> serde_json::Value {
        let clusters: Vec<serde_json::Value> = self
            .clusters
            .values()
            .map(|c| {
                let secrets: Vec<serde_json::Value> = c
                    .kube
                    .at_rest()
                    .iter()
                    .map(|a| {
                        serde_json::json!({
                            "namespace": a.namespace,
                            "name": a.name,
                            "key": a.key_name(),
                            "prefix": a.prefix(),
                            "value": a.value,
                        })
                    })
                    .collect();
                let apiservers: Vec<serde_json::Value> = self
                    .servers
                    .iter()
                    .filter(|(_, s)| s.api_of == Some(c.id) && s.power == crate::guest::Power::On)
                    .map(|(id, s)| {
                        let keys = crate::static_pods::apiserver_encryption(&s.vfs)
                            .map(|e| e.key_names("secrets"));
                        serde_json::json!({
                            "server": id.to_string(),
                            "keys": keys.as_ref().ok(),
                            "error": keys.err(),
                        })
                    })
                    .collect();
                serde_json::json!({
                    "cluster": c.id.to_string(),
                    "name": c.name,
                    "secrets": secrets,
                    "apiservers": apiservers,
                })
            })
            .collect();
        serde_json::Value::Array(clusters)
    }

    /// Forgets deleted servers and the clusters that no server runs any more (their etcd went with
    /// their disks).
    pub(crate) fn prune(&mut self) {
        self.servers.retain(|_, s| s.power != Power::Deleted);
        let live: Vec<ClusterId> = self
            .servers
            .values()
            .flat_map(|s| {
                s.api_of
                    .into_iter()
                    .chain(s.kubelet.as_ref().map(|k| k.cluster))
            })
            .collect();
        self.clusters.retain(|id, _| live.contains(id));
    }
}

/// A serving certificate and key as kubeadm keeps them on the node: read from `cert` and `key` when
/// both are there, else issued by `issue` (given the CA key read from `ca_key`) and written as kubeadm
/// writes them (the certificate 0644, the key 0600), so the node serves the same pair after a restart.
pub(crate) fn serving_pair(
    srv: &mut crate::guest::Server,
    cert: &str,
    key: &str,
    ca_key: &str,
    issue: impl FnOnce(&crate::guest::Server, &str) -> Result<(String, String), String>,
) -> Result<(String, String), String> {
    if let (Some(c), Some(k)) = (srv.vfs.text(cert), srv.vfs.text(key)) {
        return Ok((c.to_owned(), k.to_owned()));
    }
    let ca_key_pem = srv
        .vfs
        .text(ca_key)
        .ok_or_else(|| format!("no CA key at {ca_key}"))?
        .to_owned();
    let (c, k) = issue(srv, &ca_key_pem)?;
    srv.vfs.write(cert, c.as_bytes(), 0o644, "root:root", false);
    srv.vfs.write(key, k.as_bytes(), 0o600, "root:root", false);
    Ok((c, k))
}
