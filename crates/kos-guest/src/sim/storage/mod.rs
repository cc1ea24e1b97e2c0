//! Storage in a simulated cluster: the CSI driver the addons deploy runs in-process, and what drives
//! a CSI driver in a real cluster is modelled from upstream's code ([`controllers`]).
//!
//! When the addons put a CSI driver into the cluster (a Deployment and a DaemonSet whose driver
//! container runs `/bin/cinder-csi-plugin`, upstream's, or `/bin/kos-csi`; kos-csi is the drop-in
//! for both), and a control plane is up:
//! - the controller plugin runs kos-csi in-process with the pod's arguments and cloud.conf (as
//!   [`super::ccm`] runs kos-ccm), serving CSI on a unix socket of its own as the pod's `socket-dir`
//!   would hold it;
//! - every node whose kubelet runs gets the node plugin, kos-csi's Node service with the node's
//!   identity (instance id, availability zone) and an in-memory kernel whose disks are the Cinder
//!   volumes Nova attached to that server (a disk keeps its filesystem between nodes);
//! - the sidecars the controller pod runs (external-provisioner, external-attacher,
//!   external-resizer) and the parts of Kubernetes that act on storage (the PV binder, the scheduler's
//!   volume binding, the attach-detach controller, the kubelet's volume manager) run as one loop
//!   per cluster, the sidecars with the pod's ServiceAccount so RBAC decides what they may do.
//!
//! Not simulated: the snapshotter sidecar and snapshot-controller, the node plugin's registration
//! socket (the node plugin is registered when it answers `NodeGetInfo`), `/healthz` and metrics.

mod attacher;
mod binder;
mod controllers;
mod kubelet;
mod provisioner;
mod resizer;
mod scheduler;
mod snapshotter;
mod world;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use clap::Parser;
use kos_csi::node::fake::{FakeDisk, FakeKernel};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub(crate) use super::pod::wait_stopped;
use super::pod::{self, BACKOFF_START, Container, Ended, Exit, argv, backoff, ended};
use crate::cluster::{Cluster, ClusterId};
use crate::guest::{Guest, Power};
use crate::seam::ServerId;

/// The binaries whose container is the CSI driver.
const BINARIES: &[&str] = &["/cinder-csi-plugin", "/kos-csi"];

/// The kos-csi command line.
#[derive(Parser)]
#[command(name = "kos-csi")]
struct Cli {
    #[command(flatten)]
    opts: kos_csi::run::Options,
}

/// A driver process: kos-csi serving on `socket` until told to stop.
struct Plugin {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Exit>,
    template: Value,
    socket: PathBuf,
}

impl Plugin {
    fn stop(mut self) -> JoinHandle<Exit> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task
    }
}

/// A node's plugin and the machine it runs on.
struct NodePlugin {
    plugin: Plugin,
    node: String,
    kernel: Arc<FakeKernel>,
    /// The node's kubelet's client (`system:node:<node>`).
    kubelet: kube::Client,
}

/// What the loop of a cluster sees of its nodes' plugins.
#[derive(Clone)]
pub(crate) struct NodeHandle {
    pub socket: PathBuf,
    pub kernel: Arc<FakeKernel>,
    /// The kubelet's client: its requests are the node's, judged by the Node authorizer and
    /// NodeRestriction.
    pub kubelet: kube::Client,
}

pub(crate) type Nodes = Arc<Mutex<BTreeMap<String, NodeHandle>>>;

#[derive(Default)]
struct ClusterStorage {
    controller: Option<Plugin>,
    nodes: BTreeMap<ServerId, NodePlugin>,
    shared: Nodes,
    controllers: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    snapshot_controller: controllers::SnapshotController,
    restarts: u32,
    retry_at: Option<Instant>,
    status: String,
}

/// The CSI drivers and storage controllers, by cluster.
#[derive(Default)]
pub(crate) struct Storage {
    by_cluster: BTreeMap<ClusterId, ClusterStorage>,
    /// Where the sockets live (made on first use, removed with the runtime).
    dir: Option<tempfile::TempDir>,
    /// What each Cinder volume holds while no node has it attached.
    disks: BTreeMap<String, FakeDisk>,
    /// Which volume each node's device is.
    devices: BTreeMap<(ServerId, String), String>,
    stopping: Vec<JoinHandle<Exit>>,
}

/// A driver container of a Deployment or DaemonSet.
struct Spec {
    namespace: String,
    name: String,
    template: Value,
    pod: Value,
    container: Value,
}

impl Spec {
    fn view(&self) -> Container<'_> {
        Container {
            namespace: &self.namespace,
            pod: &self.pod,
            container: &self.container,
        }
    }

    /// The containers of the pod.
    fn containers(&self) -> impl Iterator<Item = &Value> {
        self.pod
            .get("containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    }

    /// The image names of the pod's containers: which sidecars run beside the driver.
    fn sidecars(&self) -> Vec<String> {
        self.containers()
            .filter_map(|c| pod::image_name(c).map(str::to_owned))
            .collect()
    }

    /// A sidecar container's arguments, by its image name.
    fn sidecar_args(&self, image: &str) -> Vec<String> {
        self.containers()
            .find(|c| pod::image_name(c) == Some(image))
            .map(argv)
            .unwrap_or_default()
    }
}

/// The first workload of `kind` with a container `is` picks, and that container.
fn find(cluster: &Cluster, kind: &str, is: impl Fn(&Value) -> bool) -> Option<Spec> {
    let sets = cluster.kube.list_json("apps/v1", kind, None).ok()?;
    sets.into_iter().find_map(|o| {
        let pod = o.pointer("/spec/template/spec")?.clone();
        let container = pod
            .get("containers")?
            .as_array()?
            .iter()
            .find(|c| is(c))?
            .clone();
        Some(Spec {
            namespace: o.pointer("/metadata/namespace")?.as_str()?.to_owned(),
            name: o.pointer("/metadata/name")?.as_str()?.to_owned(),
            template: o.pointer("/spec/template")?.clone(),
            pod,
            container,
        })
    })
}

/// The CSI driver's container of a workload of `kind`: it runs one of [`BINARIES`].
fn find_driver(cluster: &Cluster, kind: &str) -> Option<Spec> {
    find(cluster, kind, |c| {
        argv(c)
            .first()
            .is_some_and(|a| BINARIES.iter().any(|b| a.ends_with(b)))
    })
}

/// The sockets' directory of process `pid`: `kos-csi-<pid>-<random>` in the temporary directory.
fn socket_dir_prefix(pid: u32) -> String {
    format!("kos-csi-{pid}-")
}

/// Removes the sockets' directories of runtimes whose process is gone: one killed (a served
/// simulator's SIGKILL, a test process that exits without dropping its runtime) never removes its
/// own. Only directories named as [`socket_dir_prefix`] names them whose process no longer runs
/// (`/proc/<pid>` is gone) are removed; anything else in `temp` is not looked at.
fn sweep_sockets(temp: &Path) {
    if !Path::new("/proc/self").exists() {
        // No way to tell a dead process from a live one here.
        return;
    }
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        // Exactly `kos-csi-<digits>-<tempfile's alphanumeric suffix>`.
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("kos-csi-"))
            .and_then(|rest| rest.split_once('-'))
            .filter(|(pid, suffix)| {
                pid.bytes().all(|b| b.is_ascii_digit())
                    && !suffix.is_empty()
                    && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
            })
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // `file_type` does not follow a symlink: a link named so is left, and so is what it names.
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir
            && !Path::new("/proc").join(pid.to_string()).exists()
            && let Err(err) = std::fs::remove_dir_all(e.path())
        {
            tracing::debug!("stale CSI socket directory {:?} stays: {err}", e.path());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Storage {
    /// Starts and stops the drivers and loops, and gives each node's kernel the disks Nova attached
    /// to its server. `services`: each cluster's `kubernetes` Service address.
    pub fn reconcile(
        &mut self,
        guest: &Guest,
        services: &BTreeMap<ClusterId, SocketAddr>,
        cloud: &kos_sim::state::Cloud,
    ) {
        self.stopping.retain(|t| !t.is_finished());
        for id in self.by_cluster.keys().copied().collect::<Vec<_>>() {
            if !guest.clusters.contains_key(&id)
                && let Some(st) = self.by_cluster.remove(&id)
            {
                self.stop_cluster(st);
            }
        }
        if self.dir.is_none() {
            let temp = std::env::temp_dir();
            sweep_sockets(&temp);
            match tempfile::Builder::new()
                .prefix(&socket_dir_prefix(std::process::id()))
                .tempdir_in(&temp)
            {
                Ok(d) => self.dir = Some(d),
                Err(e) => {
                    tracing::warn!("no directory for the CSI sockets: {e}");
                    return;
                }
            }
        }
        let Some(dir) = self.dir.as_ref().map(|d| d.path().to_owned()) else {
            return;
        };
        let now = Instant::now();
        for (id, cluster) in &guest.clusters {
            let control_plane_up = guest
                .servers
                .values()
                .any(|s| s.power == Power::On && s.api_of == Some(*id));
            let controller = find_driver(cluster, "Deployment");
            let node = find_driver(cluster, "DaemonSet");
            let service = services.get(id).copied();
            let mut st = self.by_cluster.remove(id).unwrap_or_default();
            let wanted = control_plane_up && service.is_some() && controller.is_some();
            if !wanted {
                if st.controller.is_some() {
                    st.status = "stopped: no control plane is up".into();
                }
                self.stop_cluster_parts(&mut st);
            } else if let (Some(spec), Some(service)) = (controller, service) {
                self.controller(&mut st, guest, cluster, &spec, service, &dir, now);
            }
            self.node_plugins(&mut st, guest, cluster, node.as_ref(), &dir, cloud);
            if let Some(service) = service {
                snapshot_controller(&st.snapshot_controller, guest, cluster, service);
            }
            self.by_cluster.insert(*id, st);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn controller(
        &mut self,
        st: &mut ClusterStorage,
        guest: &Guest,
        cluster: &Cluster,
        spec: &Spec,
        service: SocketAddr,
        dir: &Path,
        now: Instant,
    ) {
        if st.controller.as_ref().is_some_and(|p| p.task.is_finished())
            && let Some(p) = st.controller.take()
        {
            self.stop_loop(st);
            match ended(p.task) {
                Ended::Cancelled => {
                    st.status = "stopped: the simulator is shutting down".into();
                    return;
                }
                Ended::Exited(exit) => {
                    let wait = backoff(st.restarts);
                    st.restarts += 1;
                    st.retry_at = Some(now + wait);
                    let why = exit.err().unwrap_or_else(|| "returned".into());
                    st.status = format!("exited: {why}; restarting in {}s", wait.as_secs());
                    tracing::warn!(cluster = %cluster.id, "CSI controller {}", st.status);
                }
            }
        }
        if st
            .controller
            .as_ref()
            .is_some_and(|p| p.template != spec.template)
        {
            self.stop_cluster_parts(st);
            st.restarts = 0;
            st.retry_at = None;
        }
        if st.controller.is_some() || st.retry_at.is_some_and(|t| t > now) {
            return;
        }
        let socket = dir.join(format!("{}-controller.sock", cluster.id.0));
        let started = start(cluster, spec, &socket, None).and_then(|plugin| {
            let lp = controllers::start(controllers::Setup {
                guest,
                cluster,
                spec,
                service,
                socket: socket.clone(),
                nodes: st.shared.clone(),
                snapshot_controller: st.snapshot_controller.clone(),
            });
            match lp {
                Ok(lp) => Ok((plugin, lp)),
                Err(e) => {
                    self.stopping.push(plugin.stop());
                    Err(e)
                }
            }
        });
        match started {
            Ok((plugin, lp)) => {
                tracing::debug!(cluster = %cluster.id, deployment = %spec.name, "CSI controller started");
                st.controller = Some(plugin);
                st.controllers = Some(lp);
                st.retry_at = None;
                st.status = format!("running ({}/{})", spec.namespace, spec.name);
            }
            Err(why) => {
                if st.status != why {
                    tracing::warn!(cluster = %cluster.id, "CSI controller cannot start: {why}");
                }
                st.retry_at = Some(now + BACKOFF_START);
                st.status = why;
            }
        }
    }

    /// One node plugin per running kubelet of the cluster, each with the disks Nova attached.
    fn node_plugins(
        &mut self,
        st: &mut ClusterStorage,
        guest: &Guest,
        cluster: &Cluster,
        spec: Option<&Spec>,
        dir: &Path,
        cloud: &kos_sim::state::Cloud,
    ) {
        let wanted: BTreeMap<ServerId, (String, String)> = guest
            .servers
            .iter()
            .filter(|(_, s)| s.power == Power::On)
            .filter_map(|(id, s)| {
                let k = s.kubelet.as_ref().filter(|k| k.cluster == cluster.id)?;
                Some((
                    id.clone(),
                    (k.node.clone(), s.meta.availability_zone.clone()),
                ))
            })
            .collect();
        for sid in st.nodes.keys().cloned().collect::<Vec<_>>() {
            let keep = spec.is_some_and(|sp| {
                wanted.contains_key(&sid)
                    && st.nodes.get(&sid).is_some_and(|n| {
                        n.plugin.template == sp.template && !n.plugin.task.is_finished()
                    })
            });
            if !keep && let Some(n) = st.nodes.remove(&sid) {
                self.save_disks(&sid, &n.kernel);
                self.stopping.push(n.plugin.stop());
            }
        }
        if let Some(spec) = spec {
            for (sid, (node, zone)) in &wanted {
                if st.nodes.contains_key(sid) {
                    continue;
                }
                let kernel = Arc::new(FakeKernel::new());
                let socket = dir.join(format!("{}-{}.sock", cluster.id.0, short(&sid.0)));
                let meta = kos_csi::metadata::MetaData {
                    uuid: sid.0.clone(),
                    availability_zone: zone.clone(),
                };
                let kubelet = match cluster.kube.user_client(&crate::kubelet::node_user(node)) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(cluster = %cluster.id, node, "no client for the kubelet: {e}");
                        continue;
                    }
                };
                match start(cluster, spec, &socket, Some((kernel.clone(), meta))) {
                    Ok(plugin) => {
                        st.nodes.insert(
                            sid.clone(),
                            NodePlugin {
                                plugin,
                                node: node.clone(),
                                kernel,
                                kubelet,
                            },
                        );
                    }
                    Err(why) => {
                        tracing::debug!(cluster = %cluster.id, node, "CSI node plugin cannot start: {why}");
                    }
                }
            }
        }
        for (sid, n) in &st.nodes {
            self.sync_disks(sid, &n.kernel, cloud);
        }
        let mut shared = lock(&st.shared);
        shared.clear();
        for n in st.nodes.values() {
            shared.insert(
                n.node.clone(),
                NodeHandle {
                    socket: n.plugin.socket.clone(),
                    kernel: n.kernel.clone(),
                    kubelet: n.kubelet.clone(),
                },
            );
        }
    }

    /// The node's disks are the volumes Nova attached to its server: new ones appear (with what
    /// the volume held), detached ones go, extended ones grow.
    fn sync_disks(
        &mut self,
        server: &ServerId,
        kernel: &FakeKernel,
        cloud: &kos_sim::state::Cloud,
    ) {
        let attached: BTreeMap<String, (String, i64)> = cloud
            .cinder
            .volumes
            .iter()
            .flat_map(|v| {
                v.attachments
                    .iter()
                    .filter(|a| a.attached && a.server_id == server.0)
                    .map(|a| {
                        let size = i64::try_from(v.size).unwrap_or(i64::MAX / kos_csi::GIB);
                        (a.device.clone(), (v.id.clone(), size * kos_csi::GIB))
                    })
            })
            .collect();
        let have = kernel.disks();
        for (device, disk) in &have {
            let dev = device.display().to_string();
            match attached.get(&dev) {
                None => {
                    if let Some(d) = kernel.detach(&dev)
                        && let Some(vol) = self.devices.remove(&(server.clone(), dev))
                    {
                        self.disks.insert(vol, d);
                    }
                }
                Some((_, size)) if *size > disk.size => kernel.grow(&dev, *size),
                Some(_) => {}
            }
        }
        for (device, (volume, size)) in &attached {
            if have.contains_key(Path::new(device)) {
                continue;
            }
            match self.disks.remove(volume) {
                Some(mut d) => {
                    d.size = d.size.max(*size);
                    kernel.attach_disk(volume, device, d);
                }
                None => kernel.attach(volume, device, *size),
            }
        }
        // Remember which volume each device is, for when it goes.
        for (device, (volume, _)) in attached {
            self.devices.insert((server.clone(), device), volume);
        }
    }

    /// Keeps what a stopped node's disks hold.
    fn save_disks(&mut self, server: &ServerId, kernel: &FakeKernel) {
        for (device, disk) in kernel.disks() {
            if let Some(vol) = self
                .devices
                .remove(&(server.clone(), device.display().to_string()))
            {
                self.disks.insert(vol, disk);
            }
        }
    }

    fn stop_loop(&mut self, st: &mut ClusterStorage) {
        if let Some((tx, task)) = st.controllers.take() {
            let _ = tx.send(());
            task.abort();
        }
    }

    fn stop_cluster_parts(&mut self, st: &mut ClusterStorage) {
        self.stop_loop(st);
        if let Some(p) = st.controller.take() {
            self.stopping.push(p.stop());
        }
    }

    fn stop_cluster(&mut self, mut st: ClusterStorage) {
        self.stop_cluster_parts(&mut st);
        for (_, n) in std::mem::take(&mut st.nodes) {
            self.stopping.push(n.plugin.stop());
        }
    }

    /// Asks every driver to stop; the tasks to wait for.
    pub fn stop_all(&mut self) -> Vec<JoinHandle<Exit>> {
        for st in std::mem::take(&mut self.by_cluster).into_values() {
            self.stop_cluster(st);
        }
        std::mem::take(&mut self.stopping)
    }

    pub fn status(&self) -> BTreeMap<ClusterId, String> {
        self.by_cluster
            .iter()
            .map(|(id, st)| (*id, st.status.clone()))
            .collect()
    }
}

/// Keeps the client of snapshot-controller's ServiceAccount while its Deployment (found by its
/// image) is there.
fn snapshot_controller(
    slot: &controllers::SnapshotController,
    guest: &Guest,
    cluster: &Cluster,
    service: SocketAddr,
) {
    let spec = find(cluster, "Deployment", |c| {
        pod::image_name(c) == Some("snapshot-controller")
    });
    let mut slot = lock(slot);
    let Some(spec) = spec else {
        *slot = None;
        return;
    };
    if slot.as_ref().is_some_and(|(t, _)| *t == spec.template) {
        return;
    }
    let client = (|| {
        let (ca, _) = crate::sim::apiserver::cluster_ca(guest, cluster.id)
            .ok_or("no control plane of the cluster holds its CA")?;
        let token = pod::service_account_token(cluster, &spec.view())?;
        pod::client(service, &ca, token)
    })();
    match client {
        Ok(c) => *slot = Some((spec.template.clone(), c)),
        Err(e) => tracing::debug!(cluster = %cluster.id, "snapshot-controller cannot start: {e}"),
    }
}

fn short(id: &str) -> String {
    id.chars()
        .filter(char::is_ascii_alphanumeric)
        .take(12)
        .collect()
}

/// Starts kos-csi as the container would run: its arguments, environment and cloud.conf, the
/// socket moved to `socket`. `node`: the node's kernel and identity (the node plugin).
fn start(
    cluster: &Cluster,
    spec: &Spec,
    socket: &Path,
    node: Option<(Arc<FakeKernel>, kos_csi::metadata::MetaData)>,
) -> Result<Plugin, String> {
    let view = spec.view();
    let (args, env) = pod::command_line(&spec.container, BINARIES)?;
    let cli = Cli::try_parse_from(std::iter::once("kos-csi".to_owned()).chain(args))
        .map_err(|e| format!("kos-csi refuses its arguments: {}", e.to_string().trim()))?;
    let mut opts = cli.opts;
    opts.check()
        .map_err(|e| format!("kos-csi refuses its arguments: {e}"))?;
    // The pod's socket-dir is this runtime's; its metrics port is the node's, which this machine
    // does not have.
    opts.endpoint = format!("unix://{}", socket.display());
    opts.http_endpoint = String::new();
    let loaded = match opts.cloud_config.as_slice() {
        [] => None,
        [one] => {
            let path = one.display().to_string();
            match pod::mounted_file(cluster, &view, &path) {
                Ok(text) => {
                    Some(kos_ccm::CloudConfig::parse(&path, &text).map_err(|e| e.to_string())?)
                }
                // A node plugin without its cloud.conf runs with the defaults, as upstream's does.
                Err(_) if node.is_some() => None,
                Err(e) => return Err(e),
            }
        }
        _ => return Err("several --cloud-config files are not simulated".into()),
    };
    let os_env = kos_cloud::Env::from_vars(env);
    let (kernel, metadata): (
        Arc<dyn kos_csi::node::Kernel>,
        Arc<dyn kos_csi::metadata::NodeMetadata>,
    ) = match node {
        Some((k, m)) => (k, Arc::new(kos_csi::metadata::Fixed(m))),
        None => {
            // The controller pod has no node service to offer (upstream's controller plugin
            // serves both; the sidecars never call the node service there).
            (
                Arc::new(FakeKernel::new()),
                Arc::new(kos_csi::metadata::Fixed(kos_csi::metadata::MetaData {
                    uuid: String::new(),
                    availability_zone: String::new(),
                })),
            )
        }
    };
    // kos-csi's bind replaces a stale socket there (and refuses anything else).
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        kos_csi::run::run_with(opts, &os_env, loaded, kernel, metadata, async {
            let _ = rx.await;
        })
        .await
        .map_err(|e| e.to_string())
    });
    Ok(Plugin {
        stop: Some(tx),
        task,
        template: spec.template.clone(),
        socket: socket.to_owned(),
    })
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    #[test]
    fn only_a_dead_runtimes_socket_directory_is_swept() {
        let temp = tempfile::tempdir().expect("tempdir");
        let t = temp.path();
        // Above any pid_max (2^22): no such process.
        let dead = t.join(format!("{}abc", socket_dir_prefix(4_000_000_000)));
        let live = t.join(format!("{}def", socket_dir_prefix(std::process::id())));
        let unlike = [
            t.join("kos-csi-x1Yz"),
            t.join("kos-csi-12"),
            t.join("kos-csi-+4000000000-abc"),
            t.join("kos-csi-4000000000-a.b"),
            t.join("other"),
        ];
        for d in [&dead, &live].into_iter().chain(&unlike) {
            std::fs::create_dir(d).expect("mkdir");
            std::fs::write(d.join("1-a.sock"), b"").expect("write");
        }
        // A file named like a dead runtime's directory is not one.
        let file = t.join(format!("{}file", socket_dir_prefix(4_000_000_001)));
        std::fs::write(&file, b"").expect("write");
        // A link named like a dead runtime's directory is left, and what it points at too.
        let target = t.join("elsewhere");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::write(target.join("keep"), b"").expect("write");
        let link = t.join(format!("{}lnk", socket_dir_prefix(4_000_000_003)));
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        sweep_sockets(t);
        assert!(target.join("keep").exists());
        assert!(link.exists());
        assert!(!dead.exists());
        assert!(live.join("1-a.sock").exists());
        assert!(unlike.iter().all(|d| d.join("1-a.sock").exists()));
        assert!(file.exists());
    }
}
