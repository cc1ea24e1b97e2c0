//! The seam to an attached guest runtime: what runs *inside* the simulated servers (kos-guest's
//! cloud-init, kubeadm and kubelet, and the clusters they make). kos-sim knows nothing of Kubernetes;
//! it tells the runtime what happens to a server ([`GuestEvent`]) and when time passes, and answers
//! through [`GuestHost`] what the clock says, where a console line goes, and what an endpoint reaches
//! on its network ([`reach`]).
//!
//! # Guarantees
//! - Without an attached runtime nothing here runs: servers print the stand-in boot of `nova::boot`.
//! - The runtime is only ever called with the cloud's lock held (from [`crate::App::cloud`]), so a
//!   runtime sees the cloud's state at one instant and its calls are serialised; it must not call
//!   back into the simulator's HTTP API from those calls.
//! - Events reach the runtime in simulated-time order, each at the time it happened (a server that
//!   became ACTIVE at `t` boots at `t`, even when the cloud noticed later), and the runtime's own
//!   wake-ups in between are run at their time: progress does not depend on how often the cloud is
//!   called.

pub mod reach;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use base64::Engine as _;
use serde::Serialize;

use crate::clock::SimTime;
use crate::state::Cloud;

pub use reach::{Backend, Source};

/// What the metadata service and the image tell a booting server.
#[derive(Clone)]
pub struct BootInfo {
    /// The bytes after Nova's base64 (gzip or not), `None` without user_data.
    pub user_data: Option<Vec<u8>>,
    pub hostname: String,
    pub availability_zone: String,
    /// The fixed IPs of the server's ports, in port order.
    pub addresses: Vec<IpAddr>,
    /// The Glance properties of the image it booted from (through its boot volume when it has no
    /// image), e.g. `os_distro`.
    pub image_properties: std::collections::BTreeMap<String, String>,
    /// It was created with `config_drive: true`: a `config-2` disk with its metadata and user_data.
    pub config_drive: bool,
}

impl std::fmt::Debug for BootInfo {
    // user_data holds the cluster's secrets: only its size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootInfo")
            .field("user_data_bytes", &self.user_data.as_ref().map(Vec::len))
            .field("hostname", &self.hostname)
            .field("availability_zone", &self.availability_zone)
            .field("addresses", &self.addresses)
            .field("image_properties", &self.image_properties)
            .field("config_drive", &self.config_drive)
            .finish_non_exhaustive()
    }
}

/// What happens to a server, as its guest feels it.
#[derive(Debug, Clone)]
pub enum GuestEvent {
    /// First ACTIVE: powered on with its user_data.
    Boot(BootInfo),
    /// A reboot finished (the guest went down and came back).
    Reboot,
    /// Powered off (os-stop finished), or the hypervisor failed it (ERROR).
    Shutdown,
    /// Powered on again (os-start finished).
    Start,
    /// Gone.
    Delete,
}

/// An API endpoint of a simulated cluster and the workstation's local address for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeEndpoint {
    /// The endpoint as the cluster knows it (`172.24.4.10:6443`).
    pub endpoint: String,
    /// Where the workstation reaches it (`127.0.0.1:41234`).
    pub local: SocketAddr,
}

/// A future the runtime returns (kos-sim does not depend on an async-trait crate).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A guest runtime attached to a simulator ([`crate::Sim::attach_guests`]).
pub trait GuestRuntime: Send + Sync {
    /// Something happened to `server` at `host.now()`.
    fn handle(&self, host: &mut GuestHost<'_>, server: &str, event: GuestEvent);
    /// Time passed: run what is due at `host.now()`.
    fn tick(&self, host: &mut GuestHost<'_>);
    /// When the runtime next has something to do, if ever.
    fn next_wake(&self) -> Option<SimTime>;
    /// The clusters' API endpoints and their local addresses (`GET /_sim/kube-endpoints`).
    fn kube_endpoints(&self) -> Vec<KubeEndpoint>;
    /// The clusters as the runtime knows them at `now` (`GET /_sim/clusters`): a JSON array.
    fn clusters(&self, now: SimTime) -> serde_json::Value {
        let _ = now;
        serde_json::Value::Array(Vec::new())
    }
    /// What each running server's processes get from the metadata service (`GET /_sim/metadata`): a
    /// JSON array, one object per server.
    fn metadata(&self) -> serde_json::Value {
        serde_json::Value::Array(Vec::new())
    }
    /// What each simulated cluster's store holds at rest and the keys each of its API servers runs
    /// with (`GET /_sim/at-rest`): a JSON array, for tests of encryption at rest.
    fn at_rest(&self) -> serde_json::Value {
        serde_json::Value::Array(Vec::new())
    }
    /// The runtime's state, for [`crate::persist::save_guests`]; taken with the cloud locked, so it
    /// matches the cloud's state saved with it.
    fn snapshot(&self) -> Result<Vec<u8>, String>;
    /// Stops what runs in the background (controllers in the clusters) before the process ends.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// A queued event.
#[derive(Debug, Clone)]
struct Queued {
    at: SimTime,
    server: String,
    event: GuestEvent,
}

/// The part of the cloud's state the seam keeps: whether a runtime is attached, and the events the
/// services raised since it was last driven. Never saved (a restored runtime carries its own state).
#[derive(Debug, Default)]
pub struct Hooks {
    pub attached: bool,
    queue: Vec<Queued>,
    /// When the runtime last ran (it is ticked at least every [`TICK_EVERY`] cloud seconds).
    last_tick: Option<SimTime>,
}

/// How often, in cloud seconds, the runtime runs when nothing is due (its controllers' heartbeat).
const TICK_EVERY: f64 = 1.0;
/// A guard against a runtime whose wake-ups never pass: at most this many catch-up ticks per drive.
const MAX_CATCH_UP: usize = 10_000;

/// The simulator's side of the seam, given to the runtime for the duration of one call.
pub struct GuestHost<'a> {
    cloud: &'a mut Cloud,
    now: SimTime,
    region: &'a str,
}

impl<'a> GuestHost<'a> {
    /// The host view of `cloud` at `now` (tests drive runtimes through it directly).
    pub fn new(cloud: &'a mut Cloud, now: SimTime, region: &'a str) -> GuestHost<'a> {
        GuestHost { cloud, now, region }
    }

    /// The simulated clock at this call.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// The cloud's region (what the metadata service says).
    pub fn region(&self) -> &str {
        self.region
    }

    /// Appends a line to a server's console (`os-getConsoleOutput`). A server that is gone has no
    /// console: the line is dropped.
    pub fn console(&mut self, server: &str, line: &str) {
        if let Some(s) = self.cloud.nova.server_mut(server) {
            s.console.push(line.to_owned());
        }
    }

    /// Where `endpoint` (`host:port`) leads from `from`, in the order a client reaches the backends
    /// (see [`reach::reach`]).
    pub fn reach(&self, from: &Source, endpoint: &str) -> Vec<Backend> {
        reach::reach(self.cloud, from, endpoint)
    }

    /// Whether a server's download of `url` reaches the internet (see `/_sim/internet`).
    pub fn internet_reaches(&self, url: &str) -> bool {
        self.cloud.internet.reaches(url)
    }

    /// Whether `url`'s host answers a proxy on the internet (not down; see `/_sim/internet`).
    pub fn internet_serves(&self, url: &str) -> bool {
        self.cloud.internet.serves(url)
    }

    /// The cloud's state, read-only (for a runtime's own checks).
    pub fn cloud(&self) -> &Cloud {
        self.cloud
    }
}

/// Raises an event for the attached runtime (nothing without one).
pub(crate) fn raise(cloud: &mut Cloud, at: SimTime, server: &str, event: GuestEvent) {
    if cloud.guests.attached {
        cloud.guests.queue.push(Queued {
            at,
            server: server.to_owned(),
            event,
        });
    }
}

/// A server's first ACTIVE: raises its boot, or returns `false` when no runtime is attached (the
/// caller then plays the stand-in boot).
pub(crate) fn boot(cloud: &mut Cloud, at: SimTime, server_id: &str) -> bool {
    if !cloud.guests.attached {
        return false;
    }
    let Some(s) = cloud.nova.server(server_id) else {
        return true;
    };
    let user_data = s.user_data.as_ref().and_then(|raw| {
        let compact: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .ok()
    });
    let addresses = s
        .ports
        .iter()
        .filter_map(|p| crate::neutron::port_view(cloud, &p.port_id))
        .flat_map(|v| v.fixed_ips.into_iter().map(|(_, ip)| ip))
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let image = s.image_id.clone().or_else(|| {
        s.volumes
            .iter()
            .filter(|v| v.boot)
            .find_map(|v| cloud.cinder.volumes.iter().find(|x| x.id == v.volume_id))
            .and_then(|v| v.image_id.clone())
    });
    let image_properties = image
        .and_then(|id| cloud.glance.images.iter().find(|i| i.id == id))
        .map(|i| i.properties.clone())
        .unwrap_or_default();
    let info = BootInfo {
        user_data,
        hostname: s.hostname.clone(),
        availability_zone: s.availability_zone.clone(),
        addresses,
        image_properties,
        config_drive: s.config_drive,
    };
    raise(cloud, at, server_id, GuestEvent::Boot(info));
    true
}

/// Runs the runtime up to `now`: queued events and the runtime's wake-ups in time order, then a tick
/// at `now` when something was due or it has not run for [`TICK_EVERY`].
pub(crate) fn drive(rt: &dyn GuestRuntime, cloud: &mut Cloud, now: SimTime, region: &str) {
    let mut queue = std::mem::take(&mut cloud.guests.queue);
    queue.sort_by(|a, b| a.at.0.total_cmp(&b.at.0));
    let mut ran = false;
    let mut budget = MAX_CATCH_UP;
    let mut catch_up = |cloud: &mut Cloud, until: SimTime, ran: &mut bool| {
        while let Some(w) = rt.next_wake() {
            if w.0 >= until.0 || budget == 0 {
                break;
            }
            budget -= 1;
            rt.tick(&mut GuestHost::new(cloud, w, region));
            *ran = true;
        }
    };
    for q in queue {
        let at = SimTime(q.at.0.min(now.0));
        catch_up(cloud, at, &mut ran);
        rt.handle(&mut GuestHost::new(cloud, at, region), &q.server, q.event);
        ran = true;
    }
    catch_up(cloud, now, &mut ran);
    let due = rt.next_wake().is_some_and(|w| now.reached(w));
    let quiet_for = cloud
        .guests
        .last_tick
        .map_or(f64::INFINITY, |t| now.0 - t.0);
    if ran || due || quiet_for >= TICK_EVERY {
        rt.tick(&mut GuestHost::new(cloud, now, region));
        cloud.guests.last_tick = Some(now);
    }
}
