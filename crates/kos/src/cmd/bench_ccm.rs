//! `kos bench ccm`: kos-ccm's Service controller at scale, against the way the upstream CCM works.
//! A benchmark, not a test: it measures and reports, it never fails on a time.
//!
//! One in-process kos-sim with the realistic latency model (60 s to provision a load balancer,
//! 5 s per change, 50 ms per call) on a scaled clock, and an in-process Kubernetes API
//! (kos-kube-fake) with `--nodes` Nodes, both served over HTTP. The real controller
//! (`kos_ccm::service::run`, through `kos_ccm::bench`) runs in its own process: the kos-ccm
//! binary's hidden `bench-service` when one is beside this binary, else this binary's hidden
//! `bench ccm-controller` (see [`controller_command`]), so its footprint is its own: peak RSS
//! and CPU seconds from `/proc/<pid>`. First one
//! load balancer is made and waited for alone: its provisioning on this clock is the floor. Then
//! `--services` Services of type LoadBalancer are created at once and the controller runs until
//! each has an address; the ratio to the floor is reported. Then: the OpenStack calls of a resync
//! with nothing to do (writes must be 0), the controller's CPU while idle, the calls when one node
//! joins. The baseline, in the same run on a fresh cloud, is the upstream's behaviour: one Service
//! at a time, its worker blocked until the load balancer is ACTIVE.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Service, ServicePort,
    ServiceSpec,
};
use kos_ccm::CloudConfig;
use kos_ccm::bench::BenchSpec;
use kos_ccm::lb::LoadBalancers;
use kos_cloud::Session;
use kos_cloud::model::load_balancer::{LoadBalancerCreate, ProvisioningStatus, Vip};
use kos_cloud::model::network::{NetworkCreate, RouterCreate, SubnetCreate};
use kos_kube_fake::FakeKube;
use kos_sim::{LatencyModel, Sim, SimConfig};
use miette::{IntoDiagnostic, WrapErr, miette};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Exit, Failure};
use crate::cli::BenchCcmArgs;

/// Real time the baseline may take at most: it runs on a faster clock when it would take longer.
const BASELINE_BUDGET_SECS: f64 = 90.0;
const MIN_TIME_SCALE: f64 = 0.002;

#[derive(Debug, Serialize)]
struct Report {
    services: u32,
    nodes: u32,
    concurrency: u16,
    time_scale: f64,
    /// Cloud seconds between the lists of load balancers' states while Services wait (0: none).
    pending_poll_secs: f64,
    /// Cloud seconds one load balancer took from its create to ACTIVE, alone, on this clock: the
    /// least any controller can take to address a Service.
    floor_secs: f64,
    /// Cloud seconds until every Service had an address.
    kos_secs: f64,
    /// `kos_secs / floor_secs`.
    ratio: f64,
    /// Cloud seconds from the Services' creation to the last load balancer's create (from the
    /// simulator's request log; `None` when the log no longer holds it).
    last_create_secs: Option<f64>,
    /// Cloud seconds until the first Service, and until half of them, had an address.
    first_addressed_secs: f64,
    half_addressed_secs: f64,
    /// Real seconds the simulator's handlers took until every Service had an address, by
    /// operation (what each kind of call costs this machine on the cloud's side).
    sim_handler_secs: BTreeMap<String, f64>,
    /// The same for the one-at-a-time, blocking baseline (`None`: not run).
    baseline_secs: Option<f64>,
    baseline_time_scale: Option<f64>,
    /// OpenStack calls until every Service had an address, by operation.
    create_calls: BTreeMap<String, u64>,
    /// OpenStack calls of one resync with nothing to do, by operation.
    resync_calls: BTreeMap<String, u64>,
    resync_writes: u64,
    /// OpenStack calls of one deep verify of members (`--lb-member-verify-period`, off by
    /// default): a resync that lists every pool whose members look as wanted. Counted apart
    /// from the resync above, which never lists members while nothing changed.
    deep_verify_calls: BTreeMap<String, u64>,
    deep_verify_writes: u64,
    /// OpenStack calls after one node joined, until every pool had it, by operation.
    node_join_calls: BTreeMap<String, u64>,
    node_join_writes: u64,
    /// What ran the controller: the kos-ccm binary (`…/kos-ccm bench-service`) or, without one
    /// beside this binary, `…/kos bench ccm-controller` (the same code in a larger binary).
    controller_binary: String,
    /// The controller process's peak resident set (VmHWM), in MiB.
    ccm_peak_rss_mib: Option<f64>,
    /// The controller process's CPU seconds (user + system): until every Service had an address,
    /// and in all.
    ccm_cpu_secs_addressing: Option<f64>,
    ccm_cpu_secs: Option<f64>,
    /// The controller's CPU seconds of the resync above.
    ccm_resync_cpu_secs: Option<f64>,
    /// The controller's CPU seconds per idle real minute: measured over an idle span with no
    /// resync, plus a fifth of one resync's (one every 5 minutes, the default --lb-resync-period).
    ccm_idle_cpu_secs_per_min: Option<f64>,
    /// This process's peak resident set (kos-sim and the Kubernetes API; the baseline's too), in
    /// MiB.
    peak_rss_mib: Option<f64>,
}

pub async fn ccm(args: BenchCcmArgs) -> Result<Exit, Failure> {
    let report = measure(&args).await.map_err(Failure::cloud_diagnostic)?;
    super::bench::emit(args.output, &report, render)
}

async fn measure(args: &BenchCcmArgs) -> miette::Result<Report> {
    let scale = args.time_scale;
    eprintln!(
        "kos bench ccm: {} Services, {} nodes, {} at once, 1 cloud s = {scale} real s",
        args.services, args.nodes, args.concurrency
    );
    let world = World::start(scale, args.services, args.nodes).await?;
    let floor_secs = world.floor(scale).await?;
    eprintln!("one load balancer alone: ACTIVE after {floor_secs:.1} cloud s (the floor)");
    let mut ccm = world
        .spawn_controller(args.concurrency, scale, args.pending_poll)
        .await?;

    let t0 = Instant::now();
    let before = world.cloud_calls();
    let sim_t0 = world.sim.app().now().0;
    let seq0 = world
        .sim
        .app()
        .observations()
        .log
        .back()
        .map_or(0, |e| e.seq);
    world.create_services(args.services)?;
    let (first_addressed_secs, half_addressed_secs) =
        world.wait_all_addressed(args.services, t0, scale).await?;
    let kos_secs = t0.elapsed().as_secs_f64() / scale;
    let create_calls = since(&world.cloud_calls(), &before);
    let (last_create_secs, sim_handler_secs) = world.timeline(seq0, sim_t0);
    let ccm_cpu_secs_addressing = ccm.cpu_secs();
    eprintln!(
        "kos-ccm: every Service has an address after {kos_secs:.1} cloud s ({:.2}x the floor)",
        kos_secs / floor_secs
    );

    // Passes still queued (a last status write, a requeue) are not part of what follows.
    world.quiesce(scale).await;
    // A resync with nothing to do: a fresh observation, then one pass per Service, as the
    // controller's periodic resync does (in the controller's process, with its caches).
    let before = world.cloud_calls();
    let cpu = ccm.cpu_secs();
    ccm.command("resync").await?;
    let resync_calls = since(&world.cloud_calls(), &before);
    let resync_writes = writes(&resync_calls);
    let ccm_resync_cpu_secs = ccm.cpu_secs().zip(cpu).map(|(a, b)| a - b);

    // Idle: nothing changes; what does the controller spend? (No resync in this span.)
    world.quiesce(scale).await;
    let idle = Duration::from_secs_f64((60.0 * scale).max(3.0));
    let cpu = ccm.cpu_secs();
    tokio::time::sleep(idle).await;
    let ccm_idle_cpu_secs_per_min = ccm
        .cpu_secs()
        .zip(cpu)
        .map(|(a, b)| (a - b) * 60.0 / idle.as_secs_f64())
        .zip(ccm_resync_cpu_secs)
        .map(|(idle, resync)| idle + resync / 5.0);

    // A deep verify (what --lb-member-verify-period does when it is due): a resync that lists
    // every pool whose members look as wanted.
    world.quiesce(scale).await;
    let before = world.cloud_calls();
    ccm.command("verify").await?;
    let deep_verify_calls = since(&world.cloud_calls(), &before);
    let deep_verify_writes = writes(&deep_verify_calls);

    // One node joins: every pool gets it, one batch member PUT each.
    world.quiesce(scale).await;
    let before = world.cloud_calls();
    world
        .fake
        .insert(&node(args.nodes))
        .into_diagnostic()
        .wrap_err("adding a node")?;
    let pools = u64::from(args.services);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let calls = since(&world.cloud_calls(), &before);
        if member_puts(&calls) >= pools || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the passes in flight finish before counting.
    world.quiesce(scale).await;
    let node_join_calls = since(&world.cloud_calls(), &before);
    let node_join_writes = writes(&node_join_calls);
    let ccm_peak_rss_mib = ccm.peak_rss_mib();
    let ccm_cpu_secs = ccm.cpu_secs();
    let controller_binary = ccm.binary.clone();
    ccm.stop().await;
    let peak_rss_mib = peak_rss_mib();

    let (baseline_secs, baseline_time_scale) = if args.no_baseline {
        (None, None)
    } else {
        // Sequential: ~70 cloud s per Service. Keep the real time within the budget.
        let estimate = 70.0 * f64::from(args.services);
        let bscale = scale
            .min(BASELINE_BUDGET_SECS / estimate)
            .max(MIN_TIME_SCALE);
        eprintln!(
            "baseline: one Service at a time, blocking (1 cloud s = {bscale} real s): this takes a while"
        );
        let w = World::start(bscale, args.services, args.nodes).await?;
        let lbs = w.load_balancers(bscale);
        w.create_services(args.services)?;
        let nodes: Vec<Node> = w.fake.list(None).into_diagnostic()?;
        let services: Vec<Service> = w.fake.list(Some("default")).into_diagnostic()?;
        let t0 = Instant::now();
        for s in &services {
            // Upstream's EnsureLoadBalancer: the worker polls until the load balancer is ACTIVE
            // before it moves on (with one worker, the default).
            loop {
                let o = lbs.ensure_service(s, &nodes).await.into_diagnostic()?;
                if o.converged {
                    break;
                }
                tokio::time::sleep(Duration::from_secs_f64(bscale)).await;
            }
        }
        let secs = t0.elapsed().as_secs_f64() / bscale;
        eprintln!("baseline: every Service has an address after {secs:.0} cloud s");
        (Some(secs), Some(bscale))
    };

    Ok(Report {
        services: args.services,
        nodes: args.nodes,
        concurrency: args.concurrency,
        time_scale: scale,
        pending_poll_secs: args.pending_poll,
        floor_secs,
        kos_secs,
        ratio: kos_secs / floor_secs,
        last_create_secs,
        first_addressed_secs,
        half_addressed_secs,
        sim_handler_secs,
        create_calls,
        baseline_secs,
        baseline_time_scale,
        resync_calls,
        resync_writes,
        deep_verify_calls,
        deep_verify_writes,
        node_join_calls,
        node_join_writes,
        controller_binary,
        ccm_peak_rss_mib,
        ccm_cpu_secs_addressing,
        ccm_cpu_secs,
        ccm_resync_cpu_secs,
        ccm_idle_cpu_secs_per_min,
        peak_rss_mib,
    })
}

struct World {
    sim: Sim,
    fake: FakeKube,
    session: Session,
    config: Arc<CloudConfig>,
    cloud_conf: String,
}

impl World {
    async fn start(scale: f64, services: u32, nodes: u32) -> miette::Result<World> {
        let sim = Sim::start(SimConfig {
            time_scale: scale,
            latency: LatencyModel::default(),
            // Tokens that outlive the run at any scale.
            token_lifetime_secs: 1e9,
            ..SimConfig::default()
        })
        .await
        .into_diagnostic()
        .wrap_err("cannot start the simulated cloud")?;
        {
            // A project sized for the run (a fresh one allows 50 floating IPs).
            let mut cloud = sim.app().cloud();
            let q = &mut cloud.quotas;
            let n = i64::from(services) * 2 + 10;
            q.floating_ips = n;
            q.load_balancers = n;
            q.listeners = n;
            q.pools = n;
            q.health_monitors = n;
            q.members = n * (i64::from(nodes) + 2);
            q.ports = n * 2 + 100;
            // devstack's public /24 holds ~250 floating IPs: 1000 Services need a public range
            // sized for them, as a cloud that hosts that many load balancers has.
            for sub in &mut cloud.neutron.subnets {
                if sub.cidr == "172.24.4.0/24" {
                    sub.cidr = "172.24.0.0/20".into();
                    if let Some(pool) = sub.allocation_pools.first_mut() {
                        pool.end = "172.24.15.254".into();
                    }
                }
            }
        }
        let session = super::bench::connect(&sim, scale).await?;
        let net = session.network();
        let public = net.external_network(None).await.into_diagnostic()?.id;
        let n = net
            .create_network(&NetworkCreate {
                name: "nodes".into(),
                ..Default::default()
            })
            .await
            .into_diagnostic()?;
        let subnet = net
            .create_subnet(&SubnetCreate::new(&n.id, "nodes", "10.1.0.0/16"))
            .await
            .into_diagnostic()?;
        let router = net
            .create_router(&RouterCreate::with_gateway("nodes", &public))
            .await
            .into_diagnostic()?;
        net.add_router_interface(&router.id, &subnet.id)
            .await
            .into_diagnostic()?;
        let c = sim.config();
        let conf = format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = Default\n\n[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {public}\n",
            sim.auth_url(),
            c.username,
            c.password,
            c.project,
            subnet.id
        );
        let config = CloudConfig::parse("cloud.conf", &conf)
            .map_err(|e| miette!("{e}"))?
            .config;
        let fake = FakeKube::start()
            .await
            .map_err(|e| miette!("cannot start the Kubernetes API: {e}"))?;
        let mut ns = Namespace::default();
        ns.metadata.name = Some("kube-system".into());
        fake.insert(&ns).into_diagnostic()?;
        for i in 0..nodes {
            fake.insert(&node(i)).into_diagnostic()?;
        }
        Ok(World {
            sim,
            fake,
            session,
            config: Arc::new(config),
            cloud_conf: conf,
        })
    }

    /// The controller's core for the baseline, its waits and requeues on the scaled clock.
    fn load_balancers(&self, scale: f64) -> LoadBalancers {
        kos_ccm::bench::scaled_load_balancers(&self.session, self.config.clone(), scale)
    }

    /// One load balancer, created and waited for alone (polled every tenth of a cloud second):
    /// cloud seconds from its create to ACTIVE. Deleted again.
    async fn floor(&self, scale: f64) -> miette::Result<f64> {
        let lb = self.session.load_balancer();
        let subnet = self
            .config
            .load_balancer
            .subnet_id
            .clone()
            .unwrap_or_default();
        let t0 = Instant::now();
        let made = lb
            .create_load_balancer(&LoadBalancerCreate::new("floor", Vip::Subnet(subnet)))
            .await
            .into_diagnostic()
            .wrap_err("creating the floor's load balancer")?;
        let deadline = Instant::now() + Duration::from_secs_f64(600.0 * scale + 60.0);
        loop {
            let got = lb.get_load_balancer(&made.id).await.into_diagnostic()?;
            if got.is_some_and(|l| l.provisioning_status == ProvisioningStatus::Active) {
                break;
            }
            if Instant::now() > deadline {
                return Err(miette!("the floor's load balancer never became ACTIVE"));
            }
            tokio::time::sleep(Duration::from_secs_f64(0.1 * scale)).await;
        }
        let secs = t0.elapsed().as_secs_f64() / scale;
        lb.delete_load_balancer(&made.id, true)
            .await
            .into_diagnostic()?;
        Ok(secs)
    }

    /// The controller in its own process ([`controller_command`]), told where the cloud and the
    /// Kubernetes API are on its stdin.
    async fn spawn_controller(
        &self,
        concurrency: u16,
        scale: f64,
        pending_poll_secs: f64,
    ) -> miette::Result<Ccm> {
        let c = self.sim.config();
        let spec = BenchSpec {
            auth_url: self.sim.auth_url(),
            username: c.username.clone(),
            password: c.password.clone().into(),
            project: c.project.clone(),
            cloud_conf: self.cloud_conf.clone(),
            kube_url: self.fake.url(),
            time_scale: scale,
            concurrency,
            pending_poll_secs,
        };
        let controller = controller_command()?;
        // KOS_BENCH_CCM_WRAPPER runs the controller under a profiler (`perf record -g -o
        // ccm.data`, `heaptrack -o ccm`): the figures below are then the wrapper's process's.
        let wrapper = std::env::var("KOS_BENCH_CCM_WRAPPER").unwrap_or_default();
        let mut argv: Vec<String> = wrapper.split_whitespace().map(str::to_owned).collect();
        argv.extend(controller.argv.iter().cloned());
        let mut cmd = tokio::process::Command::new(&argv[0]);
        // The kos-ccm binary sets glibc's allocator up itself before its runtime starts. This
        // binary's runtime is running before it knows it is the controller, so for it the same
        // settings go in through the environment (glibc reads them at its start, as mallopt
        // would set them). Set in this environment (`env -u GLIBC_TUNABLES` in the wrapper:
        // glibc's defaults), they are the run's own.
        if !controller.kos_ccm && !kos_ccm::malloc::tuned_by_env(|k| std::env::var_os(k)) {
            cmd.env("GLIBC_TUNABLES", kos_ccm::malloc::glibc_tunables());
        }
        let mut child = cmd
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its warnings (a lost write race, requeued) are the run's business, not the reader's.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "error".into()),
            )
            .kill_on_drop(true)
            .spawn()
            .into_diagnostic()
            .wrap_err("starting the controller's process")?;
        let mut stdin = child.stdin.take().ok_or_else(|| miette!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| miette!("no stdout"))?;
        let mut line = serde_json::to_string(&spec).into_diagnostic()?;
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.into_diagnostic()?;
        stdin.flush().await.into_diagnostic()?;
        let mut ccm = Ccm {
            binary: controller.argv.join(" "),
            pid: child.id(),
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
        };
        ccm.answer("ready").await?;
        Ok(ccm)
    }

    fn create_services(&self, n: u32) -> miette::Result<()> {
        for i in 0..n {
            let mut s = Service::default();
            s.metadata.name = Some(format!("svc-{i}"));
            s.metadata.namespace = Some("default".into());
            s.spec = Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    node_port: Some(30000 + i32::try_from(i % 2000).unwrap_or(0)),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            });
            self.fake.insert(&s).into_diagnostic()?;
        }
        Ok(())
    }

    /// Waits until `n` Services have an address; returns the cloud seconds since `t0` when the
    /// first, and half of them, had one.
    async fn wait_all_addressed(
        &self,
        n: u32,
        t0: Instant,
        scale: f64,
    ) -> miette::Result<(f64, f64)> {
        use futures::StreamExt as _;
        use kube::runtime::{WatchStreamExt as _, watcher};
        // A watch, not a list per poll: listing every Service every few milliseconds would
        // itself cost this machine what is being measured.
        let api: kube::Api<Service> =
            kube::Api::namespaced(self.fake.client().into_diagnostic()?, "default");
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let mut addressed = std::collections::HashSet::new();
        let mut milestones = super::bench::Milestones::default();
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1800);
        loop {
            let next = tokio::time::timeout_at(deadline, stream.next()).await;
            let s = match next {
                Ok(Some(Ok(s))) => s,
                Ok(Some(Err(e))) => return Err(miette!("watching the Services: {e}")),
                Ok(None) => return Err(miette!("the Service watch ended")),
                Err(_) => {
                    return Err(miette!(
                        "only {} of {n} Services got an address",
                        addressed.len()
                    ));
                }
            };
            let has = s
                .status
                .as_ref()
                .and_then(|st| st.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty());
            if has {
                addressed.insert(s.metadata.name.clone().unwrap_or_default());
            }
            let done = addressed.len();
            let now = t0.elapsed().as_secs_f64() / scale;
            if let Some(times) = milestones.saw(done, n, now) {
                return Ok(times);
            }
        }
    }

    /// From the simulator's request log after `seq0`: cloud seconds from `sim_t0` to the last
    /// load-balancer create, and the real seconds its handlers took by operation.
    fn timeline(&self, seq0: u64, sim_t0: f64) -> (Option<f64>, BTreeMap<String, f64>) {
        let obs = self.sim.app().observations();
        let mut last = None;
        let mut handlers: BTreeMap<String, f64> = BTreeMap::new();
        for e in obs.log.iter().filter(|e| e.seq > seq0) {
            if e.method == "POST" && e.operation.ends_with("/lbaas/loadbalancers") {
                last = Some(e.at - sim_t0);
            }
            *handlers.entry(e.operation.clone()).or_default() += e.real_ms / 1000.0;
        }
        // The log is bounded: when its first entry is not the first of the run, it is partial.
        let complete = obs.log.front().is_none_or(|e| e.seq <= seq0 + 1);
        (last.filter(|_| complete), handlers)
    }

    /// Waits until the cloud has received no call for 30 cloud seconds (at least 0.3 s).
    async fn quiesce(&self, scale: f64) {
        let quiet = Duration::from_secs_f64((30.0 * scale).max(0.3));
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut last = self.cloud_calls();
        while Instant::now() < deadline {
            tokio::time::sleep(quiet).await;
            let now = self.cloud_calls();
            if now == last {
                return;
            }
            last = now;
        }
    }

    /// Every call the cloud received, by `METHOD /path-template`.
    fn cloud_calls(&self) -> BTreeMap<String, u64> {
        let obs = self.sim.app().observations();
        obs.counters
            .values()
            .flat_map(|c| c.by_operation.iter())
            .map(|(op, n)| (op.clone(), *n))
            .collect()
    }
}

/// How the controller's process is started.
struct ControllerCommand {
    argv: Vec<String>,
    /// The kos-ccm binary (it sets its allocator up itself), not this one.
    kos_ccm: bool,
}

/// The kos-ccm binary beside this one (as `cargo build --release -p kos -p kos-ccm` leaves it),
/// or the one `KOS_BENCH_CCM_BINARY` names, runs the controller: its footprint is the one that
/// ships. Without one, or with `KOS_BENCH_CCM_BINARY` set empty, this binary's `bench
/// ccm-controller` runs the same code.
fn controller_command() -> miette::Result<ControllerCommand> {
    let exe = std::env::current_exe().into_diagnostic()?;
    let beside = exe.with_file_name("kos-ccm");
    let kos_ccm = match std::env::var_os("KOS_BENCH_CCM_BINARY") {
        Some(v) if v.is_empty() => None,
        Some(p) => {
            let p = std::path::PathBuf::from(p);
            if !p.is_file() {
                return Err(miette!(
                    "KOS_BENCH_CCM_BINARY={}: no such file; build it with `cargo build --release \
                     -p kos-ccm`, or set the variable empty to run the controller in this binary",
                    p.display()
                ));
            }
            Some(p)
        }
        None => beside.is_file().then_some(beside),
    };
    Ok(match kos_ccm {
        Some(p) => ControllerCommand {
            argv: vec![p.to_string_lossy().into_owned(), "bench-service".into()],
            kos_ccm: true,
        },
        None => ControllerCommand {
            argv: vec![
                exe.to_string_lossy().into_owned(),
                "bench".into(),
                "ccm-controller".into(),
            ],
            kos_ccm: false,
        },
    })
}

/// The controller's process, seen from the benchmark.
struct Ccm {
    /// What runs the controller: `…/kos-ccm bench-service` or `…/kos bench ccm-controller`.
    binary: String,
    child: tokio::process::Child,
    pid: Option<u32>,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: BufReader<tokio::process::ChildStdout>,
}

impl Ccm {
    /// Waits for the controller to print `want` on a line of its own.
    async fn answer(&mut self, want: &str) -> miette::Result<()> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).await.into_diagnostic()?;
            if n == 0 {
                return Err(miette!(
                    "the controller's process (`{}`) ended; its errors are above (a kos-ccm \
                     binary from another build may lack `bench-service`: rebuild it with `cargo \
                     build --release -p kos -p kos-ccm`, or set KOS_BENCH_CCM_BINARY empty)",
                    self.binary
                ));
            }
            if line.trim() == want {
                return Ok(());
            }
        }
    }

    async fn command(&mut self, what: &str) -> miette::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| miette!("stopped"))?;
        stdin
            .write_all(format!("{what}\n").as_bytes())
            .await
            .into_diagnostic()?;
        stdin.flush().await.into_diagnostic()?;
        self.answer("done").await
    }

    fn cpu_secs(&self) -> Option<f64> {
        cpu_secs(&self.pid?.to_string())
    }

    fn peak_rss_mib(&self) -> Option<f64> {
        proc_peak_rss_mib(&self.pid?.to_string())
    }

    /// Closing its stdin stops the controller (reconciles in flight finish).
    async fn stop(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// `kos bench ccm-controller`: the controller process of `kos bench ccm` where no kos-ccm binary
/// is beside this one: `kos_ccm::bench`'s protocol over stdin and stdout.
pub async fn controller() -> Result<Exit, Failure> {
    let input = BufReader::new(tokio::io::stdin());
    kos_ccm::bench::serve(input, tokio::io::stdout())
        .await
        .map_err(|e| Failure::cloud_diagnostic(miette!("{e}")))?;
    Ok(Exit::Ok)
}

pub(super) fn since(
    now: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    now.iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0).min(*n)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn writes(calls: &BTreeMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(op, _)| !op.starts_with("GET ") && !op.contains("/identity/"))
        .map(|(_, n)| n)
        .sum()
}

fn member_puts(calls: &BTreeMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(op, _)| op.starts_with("PUT ") && op.ends_with("/members"))
        .map(|(_, n)| n)
        .sum()
}

fn node(i: u32) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(format!("node-{i}"));
    n.spec = Some(NodeSpec::default());
    n.status = Some(NodeStatus {
        addresses: Some(vec![NodeAddress {
            type_: "InternalIP".into(),
            address: format!("10.1.{}.{}", 1 + i / 250, 1 + i % 250),
        }]),
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

/// VmHWM of this process (Linux), in MiB.
pub(super) fn peak_rss_mib() -> Option<f64> {
    proc_peak_rss_mib("self")
}

/// VmHWM of process `pid` (or `self`), in MiB.
pub(super) fn proc_peak_rss_mib(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// User plus system CPU seconds of process `pid` so far (Linux: `/proc/<pid>/stat` fields 14
/// and 15, in USER_HZ ticks, 100 a second on Linux).
pub(super) fn cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are the 12th and 13th here.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kos bench ccm: {} Services of type LoadBalancer, {} nodes (cloud seconds; 1 cloud s = {} real s)\n",
        r.services, r.nodes, r.time_scale
    );
    let _ = writeln!(
        out,
        "  one load balancer alone (the floor)      ACTIVE after                  {:>8.1} s",
        r.floor_secs
    );
    let _ = writeln!(
        out,
        "  kos-ccm ({} at once, never blocking)   every Service addressed after {:>8.1} s   ({:.2}x the floor)",
        r.concurrency, r.kos_secs, r.ratio
    );
    let _ = writeln!(
        out,
        "    first address after {:.1} s, half after {:.1} s; last load balancer created after {}",
        r.first_addressed_secs,
        r.half_addressed_secs,
        r.last_create_secs
            .map_or_else(|| "(not in the log)".to_owned(), |x| format!("{x:.1} s")),
    );
    if let Some(b) = r.baseline_secs {
        let _ = writeln!(
            out,
            "  baseline (one at a time, blocking)     every Service addressed after {b:>8.0} s   ({:.1}x kos-ccm)",
            b / r.kos_secs.max(f64::EPSILON)
        );
    }
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    let _ = writeln!(
        out,
        "\n  until every Service had an address: {} calls, {} writes",
        total(&r.create_calls),
        writes(&r.create_calls)
    );
    for (op, n) in &r.create_calls {
        let ms = r.sim_handler_secs.get(op).copied().unwrap_or(0.0) * 1000.0;
        let _ = writeln!(
            out,
            "    {n:>6}  {op}   (the cloud's handlers: {ms:.0} ms real)"
        );
    }
    let _ = writeln!(
        out,
        "\n  resync with nothing to do: {} calls, {} writes",
        total(&r.resync_calls),
        r.resync_writes
    );
    for (op, n) in &r.resync_calls {
        let _ = writeln!(out, "    {n:>6}  {op}");
    }
    let _ = writeln!(
        out,
        "\n  a deep verify of members (--lb-member-verify-period, off by default): {} calls, {} writes",
        total(&r.deep_verify_calls),
        r.deep_verify_writes
    );
    for (op, n) in &r.deep_verify_calls {
        let _ = writeln!(out, "    {n:>6}  {op}");
    }
    let _ = writeln!(
        out,
        "\n  one node joins: {} calls, {} writes",
        total(&r.node_join_calls),
        r.node_join_writes
    );
    for (op, n) in &r.node_join_calls {
        let _ = writeln!(out, "    {n:>6}  {op}");
    }
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "unknown".to_owned(), |x| format!("{x:.digits$}"))
    };
    let _ = writeln!(
        out,
        "\n  kos-ccm's own process ({}): peak RSS {} MiB; CPU {} s until every Service had an \
         address, {} s in all; a resync {} s; idle {} CPU s per minute (a resync every 5 min \
         included)",
        r.controller_binary,
        opt(r.ccm_peak_rss_mib, 0),
        opt(r.ccm_cpu_secs_addressing, 2),
        opt(r.ccm_cpu_secs, 2),
        opt(r.ccm_resync_cpu_secs, 2),
        opt(r.ccm_idle_cpu_secs_per_min, 3),
    );
    if let Some(m) = r.peak_rss_mib {
        let _ = writeln!(
            out,
            "  peak RSS of the benchmark's process (kos-sim and the Kubernetes API): {m:.0} MiB"
        );
    }
    out
}
