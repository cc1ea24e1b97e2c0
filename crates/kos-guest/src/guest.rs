//! The guest: every simulated server's state (filesystem, power, what it runs, its bootstrap
//! program) and the clusters they make. Events come in through [`Guest::handle`]; progress happens in
//! [`Guest::tick`], at the host's clock. Nothing runs in the background.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use crate::bootstrap::env::Env;
use crate::bootstrap::script::{self, StepCall};
use crate::cloud_init;
use crate::cluster::{Cluster, ClusterId};
use crate::error::GuestError;
use crate::kubelet::{self, Readiness};
use crate::log::{Entry, Logged};
use crate::seam::{Boot, Host, Image, Metadata, ServerEvent, ServerId};
use crate::version::Version;
use crate::vfs::Vfs;

/// Where the bootstrap's log goes (the script's `LOG`).
pub const BOOTSTRAP_LOG: &str = "/var/log/kos-bootstrap.log";
/// Where the bootstrap's parameters are (the script's `ENV_FILE`).
pub const ENV_FILE: &str = "/etc/kos/bootstrap.env";
/// Upper bound of step executions in one tick (a guard against a loop in the model).
const MAX_STEPS_PER_TICK: usize = 100_000;

/// A server's power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Power {
    On,
    Off,
    Deleted,
}

/// Where a server's bootstrap is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramState {
    /// No kos bootstrap ran (no user_data, or a cloud-config without it).
    None,
    /// Running: the step it is at.
    Running { step: String },
    /// `bootstrap ok` written.
    Done,
    /// A step failed (its marker is on the console).
    Failed { step: String },
    /// The server went down mid-run; cloud-init does not run per-instance scripts again.
    Interrupted,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Run {
    pub env: Env,
    pub script: String,
    pub steps: Vec<StepCall>,
    pub idx: usize,
    #[serde(with = "time::serde::rfc3339")]
    pub wake: OffsetDateTime,
    pub attempt: u32,
    #[serde(with = "time::serde::rfc3339::option")]
    pub started: Option<OffsetDateTime>,
    pub spawns_cleanup: bool,
    pub cleanup_step: StepCall,
    pub final_marker: Option<String>,
    /// From this step on, a failure is tried again by the resume unit (the script's `RESUMABLE`).
    #[serde(default)]
    pub resumable_from: Option<usize>,
    #[serde(default)]
    pub resume: Option<crate::bootstrap::script::ResumeUnit>,
    /// The resume unit runs the script now (it was started after a failure).
    #[serde(default)]
    pub resuming: bool,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) enum Program {
    None,
    Running(Box<Run>),
    Done,
    Failed(String),
    Interrupted,
}

/// The background `kos-bootstrap cleanup` of the first control plane.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Cleanup {
    pub env: Env,
    pub step: StepCall,
    #[serde(with = "time::serde::rfc3339")]
    pub deadline: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub wake: OffsetDateTime,
}

/// Which cluster's Node a server's kubelet is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct KubeletOf {
    pub cluster: ClusterId,
    pub node: String,
    /// Whether containerd has the pod sandbox image. Without it no pod starts on the node, the
    /// CNI's included, so the node stays NotReady; the kubelet keeps trying with its backoff.
    #[serde(default)]
    pub sandbox: Sandbox,
}

/// The pod sandbox image on a node: pulled, or wanted since a pull that failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Sandbox {
    /// kubeadm pulled it before the kubelet started (init), or the kubelet has since.
    #[default]
    Pulled,
    /// A worker's kubelet pulls it when its first pod (the CNI's, kube-proxy) starts.
    Wanted {
        /// Failed pulls so far (the backoff doubles from 10 s up to 5 minutes).
        failures: u32,
        #[serde(with = "time::serde::rfc3339")]
        next_try: OffsetDateTime,
        /// containerd's error of the last try.
        last_error: Option<String>,
    },
}

impl Sandbox {
    /// Not pulled yet: the kubelet tries at its next pass.
    pub(crate) fn wanted(now: OffsetDateTime) -> Sandbox {
        Sandbox::Wanted {
            failures: 0,
            next_try: now,
            last_error: None,
        }
    }

    /// The kubelet's image-pull backoff after `failures` failed pulls (10 s, doubling, at most 300 s).
    fn backoff(failures: u32) -> time::Duration {
        let secs = 10u64
            .saturating_mul(1 << failures.saturating_sub(1).min(5))
            .min(300);
        time::Duration::seconds(secs as i64)
    }
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Server {
    pub meta: Metadata,
    pub image: Image,
    /// The fixed IPs of its ports (kubeadm advertises the first).
    #[serde(default)]
    pub addresses: Vec<std::net::IpAddr>,
    pub vfs: Vfs,
    pub power: Power,
    /// kubeadm and kubelet, once installed (or baked into the image).
    pub installed: Option<Version>,
    pub program: Program,
    /// Runs an API server and etcd member of this cluster.
    pub api_of: Option<ClusterId>,
    pub kubelet: Option<KubeletOf>,
    pub cleanup: Option<Cleanup>,
    pub console: Vec<String>,
    /// The cluster-wide names in its API server's certificate, as its kubeadm read them from the
    /// ClusterConfiguration when it made the certificate (`init`: its own; `join --control-plane`:
    /// the cluster's `kubeadm-config`). `None`: the cluster's, from before servers kept their own.
    #[serde(default)]
    pub serving: Option<crate::cluster::Serving>,
    /// The netfilter rules the bootstrap set (gone at power-off; the metadata unit sets them again
    /// at boot once it is enabled).
    #[serde(default)]
    pub firewall: Vec<crate::firewall::Rule>,
    /// The metadata-block unit was enabled: its `ExecStart=` words, run at every boot.
    #[serde(default)]
    pub metadata_unit: Option<Vec<String>>,
    #[serde(default)]
    pub config_drive: bool,
    /// Every URL its bootstrap downloaded and every image it pulled from (registry URL), in order:
    /// what a test asserts an air-gapped node fetched.
    #[serde(default)]
    pub fetched: Vec<String>,
}

/// What the enabled metadata unit sets at boot (`kos-bootstrap metadata-block`, the function the
/// script's entry point runs, following the node's own files); nothing when it is not enabled or
/// cannot run.
fn boot_rules(s: &Server) -> Vec<crate::firewall::Rule> {
    let Some([path, arg]) = s.metadata_unit.as_deref() else {
        return Vec::new();
    };
    let (Some(script), Some(env)) = (
        s.vfs.text(path),
        s.vfs.text(ENV_FILE).and_then(|t| Env::parse(t).ok()),
    ) else {
        return Vec::new();
    };
    let Some(function) = crate::firewall::entry_point(script, arg) else {
        return Vec::new();
    };
    crate::firewall::rules_when(script, &function, &env, &|p| s.vfs.exists(p)).unwrap_or_default()
}

impl Server {
    /// Its own API server's address, `<advertise address>:6443` (kubeadm's LocalAPIEndpoint).
    pub(crate) fn local_api_endpoint(&self) -> Option<String> {
        self.addresses.first().map(|a| match a {
            std::net::IpAddr::V6(a) => format!("[{a}]:{}", crate::sim::API_PORT),
            a => format!("{a}:{}", crate::sim::API_PORT),
        })
    }
}

/// Who on a server reaches its metadata service (and so reads its user_data); `None` where the
/// server has no such process (no address, no pod network yet).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MetadataView {
    pub server: String,
    pub hostname: String,
    /// A pod on the pod network.
    pub pod: Option<bool>,
    /// Root, any daemon, a hostNetwork pod: processes in the node's network namespace.
    pub host_network: Option<bool>,
    /// The user_data is also on a config drive, which only root with device access reads.
    pub config_drive: bool,
}

/// Every simulated server and cluster.
#[derive(Default)]
pub struct Guest {
    pub(crate) servers: BTreeMap<ServerId, Server>,
    pub(crate) clusters: BTreeMap<ClusterId, Cluster>,
    pub(crate) log: Vec<Entry>,
    pub(crate) next_cluster: u32,
}

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .field("clusters", &self.clusters.values().collect::<Vec<_>>())
            .finish()
    }
}

/// The console line of a failed or passed step.
pub fn marker(step: &str, outcome: Result<(), &str>) -> String {
    match outcome {
        Ok(()) => format!("kos-bootstrap: {step} ok"),
        Err(reason) => format!("kos-bootstrap: {step} failed: {reason}"),
    }
}

/// The script's reason: the last output line, printable characters only, at most 300.
pub(crate) fn reason_of(output: &[String]) -> String {
    let last = output.last().map(String::as_str).unwrap_or_default();
    let r: String = last
        .chars()
        .filter(|c| !c.is_control() && c.is_ascii())
        .take(300)
        .collect();
    if r.is_empty() { "no output".into() } else { r }
}

/// Python logging's default `asctime` (`2026-11-30 12:00:00,123`), as cloud-init stamps its console lines.
fn asctime(t: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02},{:03}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

pub(crate) fn secs(n: u64) -> time::Duration {
    time::Duration::seconds(i64::try_from(n).unwrap_or(i64::MAX))
}

impl Guest {
    pub fn new() -> Guest {
        Guest::default()
    }

    // ------------------------------------------------------------------ queries

    /// The console lines the guest wrote for a server (also given to [`Host::console`]).
    pub fn console(&self, server: &ServerId) -> &[String] {
        self.servers
            .get(server)
            .map(|s| s.console.as_slice())
            .unwrap_or_default()
    }

    /// The `kos-bootstrap:` markers of a server, in order.
    pub fn markers(&self, server: &ServerId) -> Vec<&str> {
        self.console(server)
            .iter()
            .filter(|l| l.starts_with("kos-bootstrap: "))
            .map(String::as_str)
            .collect()
    }

    /// What each powered-on server's processes get from the metadata service, by the rules its
    /// bootstrap set (crate::firewall).
    pub fn metadata_views(&self) -> Vec<MetadataView> {
        let meta = std::net::IpAddr::from([169, 254, 169, 254]);
        self.servers
            .iter()
            .filter(|(_, s)| s.power == Power::On)
            .map(|(id, s)| {
                let env = s.vfs.text(ENV_FILE).and_then(|t| Env::parse(t).ok());
                // A pod's address: the first of the cluster's pod network (any address in it is
                // treated alike by the rules).
                let pod = env
                    .as_ref()
                    .and_then(|e| e.get("KOS_POD_CIDR").ok())
                    .and_then(|c| c.parse::<ipnet::IpNet>().ok())
                    .and_then(|n| n.hosts().nth(1));
                let node = s.addresses.first().copied();
                let reach = |origin: Option<crate::firewall::Origin>| {
                    origin.map(|o| crate::firewall::passes(&s.firewall, o, meta))
                };
                MetadataView {
                    server: id.0.clone(),
                    hostname: s.meta.local_hostname.clone(),
                    pod: reach(pod.map(crate::firewall::Origin::Pod)),
                    host_network: reach(node.map(crate::firewall::Origin::Local)),
                    config_drive: s.config_drive,
                }
            })
            .collect()
    }

    /// Everything logged, oldest first.
    pub fn log(&self) -> &[Entry] {
        &self.log
    }

    /// What was logged for one server.
    pub fn log_of<'a>(&'a self, server: &'a ServerId) -> impl Iterator<Item = &'a Logged> + 'a {
        self.log
            .iter()
            .filter(move |e| &e.server == server)
            .map(|e| &e.what)
    }

    /// A server's filesystem.
    pub fn vfs(&self, server: &ServerId) -> Option<&Vfs> {
        self.servers.get(server).map(|s| &s.vfs)
    }

    /// The URLs a server fetched (packages, manifests, images), in order.
    pub fn fetched(&self, server: &ServerId) -> &[String] {
        self.servers.get(server).map_or(&[], |s| &s.fetched)
    }

    pub fn power(&self, server: &ServerId) -> Option<Power> {
        self.servers.get(server).map(|s| s.power)
    }

    /// Where a server's bootstrap is.
    pub fn program(&self, server: &ServerId) -> ProgramState {
        match self.servers.get(server).map(|s| &s.program) {
            None | Some(Program::None) => ProgramState::None,
            Some(Program::Running(r)) => ProgramState::Running {
                step: r
                    .steps
                    .get(r.idx)
                    .map(|s| s.name.clone())
                    .unwrap_or_default(),
            },
            Some(Program::Done) => ProgramState::Done,
            Some(Program::Failed(step)) => ProgramState::Failed { step: step.clone() },
            Some(Program::Interrupted) => ProgramState::Interrupted,
        }
    }

    /// Every cluster, by id.
    pub fn clusters(&self) -> impl Iterator<Item = &Cluster> {
        self.clusters.values()
    }

    pub fn cluster(&self, id: ClusterId) -> Option<&Cluster> {
        self.clusters.get(&id)
    }

    /// The cluster a server belongs to (as a control plane or through its kubelet).
    pub fn cluster_of(&self, server: &ServerId) -> Option<ClusterId> {
        let s = self.servers.get(server)?;
        s.api_of.or(s.kubelet.as_ref().map(|k| k.cluster))
    }

    /// Every split brain logged: (endpoint, the new cluster, the clusters already serving there).
    pub fn split_brains(&self) -> Vec<(String, ClusterId, Vec<ClusterId>)> {
        self.log
            .iter()
            .filter_map(|e| match &e.what {
                Logged::SplitBrain {
                    endpoint,
                    new,
                    existing,
                } => Some((endpoint.clone(), *new, existing.clone())),
                _ => None,
            })
            .collect()
    }

    /// When the guest next has something to do (the host should call [`Guest::tick`] then).
    pub fn next_wake(&self) -> Option<OffsetDateTime> {
        self.servers
            .values()
            .filter(|s| s.power == Power::On)
            .flat_map(|s| {
                let run = match &s.program {
                    Program::Running(r) => Some(r.wake),
                    _ => None,
                };
                run.into_iter().chain(s.cleanup.as_ref().map(|c| c.wake))
            })
            .min()
    }

    // ------------------------------------------------------------------ events

    /// Applies an event, then runs what became due.
    pub fn handle(
        &mut self,
        server: &ServerId,
        event: ServerEvent,
        host: &dyn Host,
    ) -> Result<(), GuestError> {
        match event {
            ServerEvent::Boot(boot) => self.boot(server, *boot, host)?,
            ServerEvent::Reboot | ServerEvent::Start => {
                let s = self.server_mut(server)?;
                if s.power != Power::Deleted {
                    s.power = Power::On;
                    s.firewall = boot_rules(s);
                }
            }
            ServerEvent::Shutdown => self.stop(server, Power::Off)?,
            ServerEvent::Delete => self.stop(server, Power::Deleted)?,
        }
        self.tick(host)
    }

    fn server_mut(&mut self, id: &ServerId) -> Result<&mut Server, GuestError> {
        self.servers
            .get_mut(id)
            .ok_or_else(|| GuestError::UnknownServer { server: id.clone() })
    }

    fn stop(&mut self, id: &ServerId, power: Power) -> Result<(), GuestError> {
        let s = self.server_mut(id)?;
        s.power = power;
        // iptables rules live in the kernel: gone with it.
        s.firewall.clear();
        // Processes die with the machine: the background cleanup and a running bootstrap (cloud-init
        // runs per-instance scripts once, so a reboot does not resume it).
        s.cleanup = None;
        if matches!(s.program, Program::Running(_)) {
            s.program = Program::Interrupted;
        }
        Ok(())
    }

    pub(crate) fn record(&mut self, server: &ServerId, what: Logged, host: &dyn Host) {
        tracing::debug!(server = %server, ?what, "kos-guest");
        self.log.push(Entry {
            at: host.now(),
            server: server.clone(),
            what,
        });
    }

    /// Writes a console line (host, the server's own copy, the log).
    pub(crate) fn say(&mut self, id: &ServerId, srv: &mut Server, line: String, host: &dyn Host) {
        host.console(id, &line);
        srv.console.push(line.clone());
        self.record(id, Logged::Console(line), host);
    }

    fn boot(&mut self, id: &ServerId, boot: Boot, host: &dyn Host) -> Result<(), GuestError> {
        if self.servers.contains_key(id) {
            return Err(GuestError::AlreadyBooted { server: id.clone() });
        }
        let mut srv = Server {
            installed: boot.image.kubernetes.as_deref().and_then(Version::parse),
            meta: boot.metadata,
            image: boot.image,
            addresses: boot.addresses,
            vfs: Vfs::new(),
            power: Power::On,
            program: Program::None,
            api_of: None,
            kubelet: None,
            cleanup: None,
            console: Vec::new(),
            serving: None,
            firewall: Vec::new(),
            metadata_unit: None,
            config_drive: boot.config_drive,
            fetched: Vec::new(),
        };
        let outcome = cloud_init::run(
            boot.user_data.as_deref(),
            &srv.meta,
            &srv.image,
            &mut srv.vfs,
        );
        for r in outcome.reports {
            self.say(id, &mut srv, format!("cloud-init: WARNING: {r}"), host);
            self.record(id, Logged::Reported(r), host);
        }
        let asctime = asctime(host.calendar());
        for f in outcome.failures {
            self.say(id, &mut srv, f.warning(&asctime), host);
            if let Some(d) = f.detail() {
                self.say(id, &mut srv, format!("kos-guest: {d}"), host);
            }
        }
        let mut started = false;
        for cmd in &outcome.commands {
            if started {
                let r = format!(
                    "runcmd entry {} after the bootstrap is not simulated by kos-guest",
                    cmd.program()
                );
                self.say(id, &mut srv, format!("cloud-init: WARNING: {r}"), host);
                self.record(id, Logged::Reported(r), host);
                continue;
            }
            match self.start_command(id, &mut srv, cmd, host) {
                Ok(true) => started = true,
                Ok(false) => {}
                Err(r) => {
                    self.say(id, &mut srv, format!("cloud-init: WARNING: {r}"), host);
                    self.record(id, Logged::Reported(r), host);
                }
            }
        }
        self.servers.insert(id.clone(), srv);
        Ok(())
    }

    /// Starts a runcmd command: `Ok(true)` when it is a kos bootstrap that now runs, `Ok(false)` when
    /// it finished at once, `Err` with the report when the guest cannot run it.
    fn start_command(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        cmd: &cloud_init::config::Command,
        host: &dyn Host,
    ) -> Result<bool, String> {
        let program = cmd.program();
        let Some(words) = cmd.words() else {
            return Err(format!(
                "runcmd shell line running {program} is not simulated by kos-guest (it runs no shell)"
            ));
        };
        let Some(path) = words.first() else {
            return Ok(false);
        };
        let Some(file) = srv.vfs.get(path) else {
            return Err(format!(
                "runcmd {path}: not found (not on the node, and kos-guest runs no other program)"
            ));
        };
        let text = String::from_utf8_lossy(&file.content).into_owned();
        let plan = match script::parse(&text) {
            Ok(p) => p,
            Err(_) => {
                return Err(format!(
                    "runcmd {path} is not simulated by kos-guest (not a kos bootstrap script)"
                ));
            }
        };
        if file.mode & 0o100 == 0 {
            return Err(format!(
                "runcmd {path}: Permission denied (mode {:o})",
                file.mode
            ));
        }
        let arg = words.get(1).map(String::as_str).unwrap_or("run");
        let fail = |this: &mut Guest, srv: &mut Server, why: String| {
            let line =
                format!("cloud-init: Failed to run module scripts_user: {path} {arg}: {why}");
            this.say(id, srv, line, host);
        };
        // `. "$ENV_FILE"` runs before anything else: no marker when it fails.
        let env = match srv.vfs.text(ENV_FILE).map(Env::parse) {
            None => {
                fail(self, srv, format!("{ENV_FILE}: No such file or directory"));
                return Ok(false);
            }
            Some(Err(e)) => {
                fail(self, srv, e);
                return Ok(false);
            }
            Some(Ok(env)) => env,
        };
        match arg {
            "run" => {}
            "metadata-block" | "cleanup" | "resume" => {
                return Err(format!(
                    "runcmd {path} {arg} on its own is not simulated by kos-guest"
                ));
            }
            other => {
                fail(
                    self,
                    srv,
                    format!("usage: {path} run | metadata-block | cleanup (got {other})"),
                );
                return Ok(false);
            }
        }
        srv.vfs.write(BOOTSTRAP_LOG, b"", 0o600, "root:root", true);
        let role = env.get("KOS_ROLE").unwrap_or_default().to_owned();
        // The script's `*)` branch: the common steps run, then "preflight failed: unknown role".
        let script::RoleSteps {
            steps,
            spawns_cleanup,
            resumable_from,
        } = plan.for_role(&role).unwrap_or_else(|| {
            let mut steps = plan.common.clone();
            steps.push(StepCall {
                name: "preflight".into(),
                function: crate::bootstrap::steps::UNKNOWN_ROLE.into(),
            });
            script::RoleSteps {
                steps,
                spawns_cleanup: false,
                resumable_from: None,
            }
        });
        let now = host.now();
        let first = steps.first().map(|s| s.name.clone()).unwrap_or_default();
        srv.program = Program::Running(Box::new(Run {
            env,
            script: text,
            wake: now + secs(crate::bootstrap::steps::duration(&first)),
            steps,
            idx: 0,
            attempt: 0,
            started: None,
            spawns_cleanup,
            // The step the background job runs, read from the script's `cleanup)` entry point; a
            // script without one fails that step visibly instead of never cleaning up.
            cleanup_step: plan.cleanup.clone().unwrap_or_else(|| StepCall {
                name: "cleanup".into(),
                function: "(no cleanup entry point)".into(),
            }),
            final_marker: plan.final_marker,
            resumable_from,
            resume: plan.resume,
            resuming: false,
        }));
        Ok(true)
    }

    // ------------------------------------------------------------------ progress

    /// Runs everything due at the host's current time: the clusters' controllers, then every
    /// server's bootstrap step and background job whose time has come, until nothing is due.
    pub fn tick(&mut self, host: &dyn Host) -> Result<(), GuestError> {
        let mut budget = MAX_STEPS_PER_TICK;
        loop {
            self.run_controllers(host)?;
            let now = host.now();
            let due: Vec<ServerId> = self
                .servers
                .iter()
                .filter(|(_, s)| s.power == Power::On)
                .filter(|(_, s)| {
                    matches!(&s.program, Program::Running(r) if r.wake <= now)
                        || s.cleanup.as_ref().is_some_and(|c| c.wake <= now)
                })
                .map(|(id, _)| id.clone())
                .collect();
            if due.is_empty() || budget == 0 {
                return Ok(());
            }
            for id in due {
                budget = budget.saturating_sub(1);
                let Some(mut srv) = self.servers.remove(&id) else {
                    continue;
                };
                let result = self.advance(&id, &mut srv, host);
                self.servers.insert(id, srv);
                result?;
            }
        }
    }

    /// The controllers of every cluster: token cleaner and garbage collector, the certificate
    /// controllers while a control plane runs, node lifecycle.
    fn run_controllers(&mut self, host: &dyn Host) -> Result<(), GuestError> {
        self.pull_sandboxes(host);
        let now = host.calendar();
        for c in self.clusters.values() {
            c.run_token_cleaner_and_gc(now)?;
            // kube-controller-manager runs on a running control plane, signing with its CA.
            let control_plane = self
                .servers
                .values()
                .find(|s| s.power == Power::On && s.api_of == Some(c.id));
            if let Some(cp) = control_plane {
                let pki = crate::bootstrap::steps::PKI_DIR;
                let ca = cp
                    .vfs
                    .text(&format!("{pki}/ca.crt"))
                    .zip(cp.vfs.text(&format!("{pki}/ca.key")))
                    .map(|(cert, key)| crate::certificates::Ca { cert, key });
                // What it signs is verified in-process by TLS on this machine's clock (rustls
                // reads the system time), which a fast simulated cloud's date runs ahead of.
                let signed_at = OffsetDateTime::now_utc();
                crate::certificates::run_controllers(
                    &c.kube,
                    &c.csrs_seen,
                    ca.as_ref(),
                    signed_at,
                )?;
            }
            let nodes = c.kube.list::<k8s_openapi::api::core::v1::Node>(None)?;
            for n in nodes {
                let Some(name) = n.metadata.name.clone() else {
                    continue;
                };
                let kubelet = self.servers.values().find_map(|s| {
                    s.kubelet
                        .as_ref()
                        .filter(|k| s.power == Power::On && k.cluster == c.id && k.node == name)
                });
                let want = if kubelet.is_none() {
                    Readiness::Unknown
                } else if crate::bootstrap::steps::network_ready(c)
                    && kubelet.is_some_and(|k| k.sandbox == Sandbox::Pulled)
                {
                    Readiness::Ready
                } else {
                    Readiness::NetworkNotReady
                };
                let mut probe = n.clone();
                if kubelet::set_readiness(&mut probe, want, now) {
                    let status = |node: &mut k8s_openapi::api::core::v1::Node| {
                        kubelet::set_readiness(node, want, now);
                    };
                    if want == Readiness::Unknown {
                        // The node lifecycle controller marks a node whose kubelet went silent.
                        crate::cluster::controller(&c.kube, "node-controller")
                            .update(None, &name, true, status)?;
                    } else {
                        // The kubelet posts its own status, as its node.
                        kubelet::acting(&c.kube, &name).update(None, &name, true, status)?;
                    }
                }
            }
            self.mirror_pods_follow_kubelets(c)?;
            c.kube.reconcile_disruption_budgets()?;
        }
        Ok(())
    }

    /// Every running kubelet whose node lacks the sandbox image pulls it when its backoff allows,
    /// through the node's containerd (its mirrors and proxy): a worker's first pods need it.
    fn pull_sandboxes(&mut self, host: &dyn Host) {
        let now = host.now();
        for (id, srv) in self.servers.iter_mut() {
            let due = srv.power == Power::On
                && matches!(
                    srv.kubelet.as_ref().map(|k| &k.sandbox),
                    Some(Sandbox::Wanted { next_try, .. }) if *next_try <= now
                );
            if !due {
                continue;
            }
            let image = crate::kubeadm::sandbox_image(srv);
            let pulled = crate::kubeadm::pull(id, srv, &image, host);
            let Some(k) = srv.kubelet.as_mut() else {
                continue;
            };
            k.sandbox = match (pulled, &k.sandbox) {
                (Ok(()), _) => Sandbox::Pulled,
                (Err(e), Sandbox::Wanted { failures, .. }) => {
                    let failures = failures.saturating_add(1);
                    Sandbox::Wanted {
                        failures,
                        next_try: now + Sandbox::backoff(failures),
                        last_error: Some(format!("failed to get sandbox image \"{image}\": {e}")),
                    }
                }
                (Err(_), Sandbox::Pulled) => Sandbox::Pulled,
            };
        }
    }

    /// Mirror pods follow their kubelet: Ready while it runs, Ready False while its server is off
    /// (the node lifecycle controller marks them), deleted once the kubelet is gone for good (the
    /// server deleted, or the node now runs another cluster's kubelet).
    fn mirror_pods_follow_kubelets(&self, c: &Cluster) -> Result<(), GuestError> {
        use k8s_openapi::api::core::v1::Pod;
        for p in c.kube.list::<Pod>(Some(crate::cluster::KUBE_SYSTEM))? {
            let mirror = p
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(kubelet::MIRROR_ANNOTATION));
            let (Some(name), Some(node)) = (
                p.metadata.name.clone(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
            ) else {
                continue;
            };
            if !mirror {
                continue;
            }
            let server = self.servers.values().find(|s| {
                s.power != Power::Deleted
                    && s.kubelet
                        .as_ref()
                        .is_some_and(|k| k.cluster == c.id && k.node == node)
            });
            match server {
                // The pod garbage collector deletes the pods of a Node whose kubelet is gone.
                None => crate::cluster::controller(&c.kube, "pod-garbage-collector")
                    .delete::<Pod>(Some(crate::cluster::KUBE_SYSTEM), &name)?,
                Some(s) => {
                    let running = s.power == Power::On;
                    if kubelet::pod_ready(&p) != running {
                        let ip = s
                            .addresses
                            .first()
                            .map(ToString::to_string)
                            .unwrap_or_default();
                        let status = |pod: &mut Pod| {
                            pod.status = serde_json::from_value(kubelet::pod_status(running, &ip))
                                .unwrap_or_default();
                        };
                        if running {
                            // The kubelet reports its pods' status, as its node.
                            kubelet::acting(&c.kube, &node).update(
                                Some(crate::cluster::KUBE_SYSTEM),
                                &name,
                                true,
                                status,
                            )?;
                        } else {
                            // The node lifecycle controller marks an unreachable node's pods.
                            crate::cluster::controller(&c.kube, "node-controller").update(
                                Some(crate::cluster::KUBE_SYSTEM),
                                &name,
                                true,
                                status,
                            )?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The clusters answering at `endpoint` from `from`, in the order the host lists the backends:
    /// a backend answers when it is on, runs an API server, and its etcd has quorum (`/readyz`).
    /// `me` is `from`'s state while one of its steps runs (it is out of the map then).
    pub(crate) fn answering(
        &self,
        from: &ServerId,
        me: Option<&Server>,
        endpoint: &str,
        host: &dyn Host,
    ) -> Answer {
        let mut clusters: Vec<ClusterId> = Vec::new();
        let mut without_quorum: Vec<ClusterId> = Vec::new();
        for b in host.api_backends(from, endpoint) {
            let s = if &b == from { me } else { self.servers.get(&b) };
            let Some(s) = s else {
                continue;
            };
            let Some(cid) = s.api_of.filter(|_| s.power == Power::On) else {
                continue;
            };
            let Some(c) = self.clusters.get(&cid) else {
                continue;
            };
            if c.has_quorum(&|m| self.is_up_seen_from(m, from, me)) {
                if !clusters.contains(&cid) {
                    clusters.push(cid);
                }
            } else if !without_quorum.contains(&cid) {
                without_quorum.push(cid);
            }
        }
        Answer {
            clusters,
            without_quorum,
        }
    }

    /// Whether a server is on, `me` standing in for `from` while its step runs.
    pub(crate) fn is_up_seen_from(
        &self,
        server: &ServerId,
        from: &ServerId,
        me: Option<&Server>,
    ) -> bool {
        if server == from {
            return me.is_some_and(|s| s.power == Power::On);
        }
        self.servers
            .get(server)
            .is_some_and(|s| s.power == Power::On)
    }

    pub(crate) fn new_cluster_id(&mut self) -> ClusterId {
        self.next_cluster += 1;
        ClusterId(self.next_cluster)
    }
}

/// Who answers at an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Clusters whose API answers `/readyz`, in backend order.
    pub clusters: Vec<ClusterId>,
    /// Clusters with an API server up behind the endpoint whose etcd lost quorum.
    pub without_quorum: Vec<ClusterId>,
}
