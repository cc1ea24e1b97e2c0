//! `kos bench operator`: kos-operator with a fleet on one cloud (issue 22's "Performance"). A
//! benchmark, not a test: it measures and reports, it never fails on a figure.
//!
//! One in-process kos-sim (the realistic latency model on a scaled clock, guests that run kos's
//! user_data, quotas sized for the fleet) is the cloud; an in-process kos-kube-fake is the
//! management cluster. The real `kos-operator` binary (beside this one) runs as its own process,
//! as its ServiceAccount, reaching the clusters' APIs through kos-sim's proxy. `--clusters` small
//! Clusters (one control plane, an empty pool) are created at once and the run waits until every
//! one is Ready. Then one idle resync interval (`--resync-period`, nothing changes) is measured:
//! the cloud calls made in it by operation, per cluster; the operator's CPU in it; and its peak
//! RSS (VmHWM) over the whole run. The goals (≤ 2 MiB and ≤ 1 list call per resource type
//! per cluster per resync interval) are printed beside the figures, never judged by an exit code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kos_kube_fake::FakeKube;
use kos_operator::resource::Cluster;
use kos_sim::{LatencyModel, Sim, SimConfig};
use kube::api::{Api, PostParams};
use miette::{IntoDiagnostic, WrapErr, miette};
use serde::Serialize;
use serde_json::{Value, json};

use super::bench_ccm::{cpu_secs, proc_peak_rss_mib, since};
use super::{Exit, Failure};
use crate::cli::BenchOperatorArgs;

const NS: &str = "fleet";

/// Resync periods the idle span lasts.
const IDLE_INTERVALS: u32 = 2;

/// The goals.
const GOAL_MIB_PER_CLUSTER: f64 = 2.0;
const GOAL_LISTS_PER_TYPE: f64 = 1.0;

#[derive(Debug, Serialize)]
struct Report {
    clusters: u32,
    time_scale: f64,
    /// The operator's `--max-runs-per-project`.
    max_runs_per_project: u32,
    /// The operator's `--resync-period` in cloud seconds (its flag takes whole real seconds: this
    /// is what the asked period rounded to).
    resync_period_secs: f64,
    /// Cloud seconds from the Clusters' creation until every one was Ready, and the real seconds.
    all_ready_secs: f64,
    all_ready_wall_secs: f64,
    /// Cloud seconds until the first, and until half, were Ready.
    first_ready_secs: f64,
    half_ready_secs: f64,
    /// OpenStack calls until every Cluster was Ready, by operation.
    create_calls: BTreeMap<String, u64>,
    /// The idle span measured (cloud seconds; two resync periods, after a first one).
    idle_secs: f64,
    /// Reconciles that finished in it (the operator's status writes).
    idle_reconciles: u64,
    /// OpenStack calls in the idle span, by operation.
    idle_calls: BTreeMap<String, u64>,
    /// The same per cluster per resync interval.
    idle_calls_per_cluster: BTreeMap<String, f64>,
    /// The most list calls (a GET of a collection) of one operation per cluster per resync
    /// interval, and which operation.
    max_lists_per_type_per_cluster: f64,
    max_list_operation: Option<String>,
    /// Calls per cluster per resync interval that name one object (`.../{id}`): per-server and the
    /// like, which an idle resync should not need.
    per_object_calls_per_cluster: f64,
    /// Calls in the idle span that are not GETs (Keystone's token POSTs aside): Nova's console
    /// reads are POSTs (`os-getConsoleOutput`, `POST .../servers/{id}/action`), every other one
    /// would be a write.
    idle_non_get_calls: u64,
    /// The operator's process: peak resident set (VmHWM) in MiB over the whole run, and per
    /// cluster.
    operator_peak_rss_mib: Option<f64>,
    operator_mib_per_cluster: Option<f64>,
    /// The operator's CPU seconds (user + system) until every Cluster was Ready.
    operator_cpu_secs_until_ready: Option<f64>,
    /// Its CPU seconds in the idle span, per minute of cloud time (at this resync period),
    /// and per reconcile.
    operator_idle_cpu_secs_per_min: Option<f64>,
    operator_cpu_secs_per_reconcile: Option<f64>,
    /// `operator_mib_per_cluster / 2` and `max_lists_per_type_per_cluster / 1`: ≤ 1 meets the
    /// issue's goal.
    rss_goal_ratio: Option<f64>,
    lists_goal_ratio: f64,
    /// This process's peak resident set (kos-sim with its guests, the Kubernetes API), in MiB.
    peak_rss_mib: Option<f64>,
}

pub async fn operator(args: BenchOperatorArgs) -> Result<Exit, Failure> {
    let report = measure(&args).await.map_err(Failure::cloud_diagnostic)?;
    super::bench::emit(args.output, &report, render)
}

/// `kos-operator` beside this binary (cargo puts both in one target directory; a release
/// archive ships them side by side).
fn operator_exe() -> miette::Result<PathBuf> {
    let me = std::env::current_exe()
        .into_diagnostic()
        .wrap_err("where this binary is")?;
    let name = format!("kos-operator{}", std::env::consts::EXE_SUFFIX);
    let path = me
        .parent()
        .map(|d| d.join(&name))
        .ok_or_else(|| miette!("this binary has no directory"))?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(miette!(
            help = "build it beside kos: `cargo build -p kos-operator` (with `--release` for a \
                    release kos)",
            "the kos-operator binary is not at {}",
            path.display()
        ))
    }
}

async fn measure(args: &BenchOperatorArgs) -> miette::Result<Report> {
    let scale = args.time_scale;
    let n = args.clusters;
    let exe = operator_exe()?;
    // The operator's periods are whole real seconds.
    let resync_real = (args.resync_period * scale).round().max(1.0);
    let resync_period_secs = resync_real / scale;
    eprintln!(
        "kos bench operator: {n} Clusters, 1 cloud s = {scale} real s, resync every \
         {resync_period_secs:.0} cloud s"
    );
    let world = World::start(scale, n).await?;
    let dir = tempfile::tempdir().into_diagnostic()?;
    let mut op = world.spawn_operator(
        &exe,
        dir.path(),
        resync_real,
        (60.0 * scale).round().max(1.0),
        args.max_runs_per_project,
    )?;

    let before = world.cloud_calls();
    let t0 = Instant::now();
    world.create_clusters(n)?;
    let (first_ready_secs, half_ready_secs) = world.wait_all_ready(n, t0, scale, &mut op).await?;
    let all_ready_wall_secs = t0.elapsed().as_secs_f64();
    let all_ready_secs = all_ready_wall_secs / scale;
    let create_calls = since(&world.cloud_calls(), &before);
    let operator_cpu_secs_until_ready = op.cpu_secs();
    eprintln!("every Cluster Ready after {all_ready_secs:.0} cloud s ({all_ready_wall_secs:.0} s)");

    // Idle: one resync period for the last Clusters' first resyncs, then the span measured,
    // IDLE_INTERVALS periods (more than one, so that a resync cut by either end weighs less).
    tokio::time::sleep(Duration::from_secs_f64(resync_real)).await;
    let before = world.cloud_calls();
    let status0 = world.status_writes();
    let cpu0 = op.cpu_secs();
    let seq0 = world
        .sim
        .app()
        .observations()
        .log
        .back()
        .map_or(0, |e| e.seq);
    let idle = Duration::from_secs_f64(resync_real * f64::from(IDLE_INTERVALS));
    let w0 = Instant::now();
    tokio::time::sleep(idle).await;
    let idle_real = w0.elapsed().as_secs_f64();
    let idle_calls = since(&world.cloud_calls(), &before);
    let idle_reconciles = world.status_writes().saturating_sub(status0);
    if std::env::var_os("KOS_BENCH_TRACE").is_some() {
        for e in world
            .sim
            .app()
            .observations()
            .log
            .iter()
            .filter(|e| e.seq > seq0)
        {
            eprintln!("{:.1} {} {}", e.at, e.operation, e.path);
        }
    }
    let cpu = op.cpu_secs().zip(cpu0).map(|(a, b)| a - b);
    let operator_peak_rss_mib = op.peak_rss_mib();
    op.stop();
    let peak_rss_mib = super::bench_ccm::peak_rss_mib();

    // Per cluster per resync interval.
    let per = |x: u64| x as f64 / f64::from(n) / f64::from(IDLE_INTERVALS);
    let idle_calls_per_cluster: BTreeMap<String, f64> = idle_calls
        .iter()
        .map(|(k, v)| (k.clone(), per(*v)))
        .collect();
    let (max_list_operation, max_lists) = idle_calls
        .iter()
        .filter(|(op, _)| is_list(op))
        .max_by_key(|(_, n)| **n)
        .map_or((None, 0), |(op, n)| (Some(op.clone()), *n));
    let max_lists_per_type_per_cluster = per(max_lists);
    let per_object_calls_per_cluster = per(idle_calls
        .iter()
        .filter(|(op, _)| names_one_object(op))
        .map(|(_, n)| n)
        .sum());
    let idle_non_get_calls = idle_calls
        .iter()
        .filter(|(op, _)| !op.starts_with("GET ") && !op.contains("/identity/"))
        .map(|(_, n)| n)
        .sum();
    let operator_mib_per_cluster = operator_peak_rss_mib.map(|m| m / f64::from(n));
    Ok(Report {
        clusters: n,
        time_scale: scale,
        max_runs_per_project: args.max_runs_per_project,
        resync_period_secs,
        all_ready_secs,
        all_ready_wall_secs,
        first_ready_secs,
        half_ready_secs,
        create_calls,
        idle_secs: idle_real / scale,
        idle_reconciles,
        idle_calls,
        idle_calls_per_cluster,
        max_lists_per_type_per_cluster,
        max_list_operation,
        per_object_calls_per_cluster,
        idle_non_get_calls,
        operator_peak_rss_mib,
        operator_mib_per_cluster,
        operator_cpu_secs_until_ready,
        operator_idle_cpu_secs_per_min: cpu.map(|c| c * 60.0 / (idle_real / scale)),
        operator_cpu_secs_per_reconcile: cpu
            .filter(|_| idle_reconciles > 0)
            .map(|c| c / idle_reconciles as f64),
        rss_goal_ratio: operator_mib_per_cluster.map(|m| m / GOAL_MIB_PER_CLUSTER),
        lists_goal_ratio: max_lists_per_type_per_cluster / GOAL_LISTS_PER_TYPE,
        peak_rss_mib,
    })
}

/// A GET of a collection (`GET /network/v2.0/ports`, `GET /compute/v2.1/servers/detail`), not
/// of one object (`.../{id}`) nor a version document (`GET /network/`).
fn is_list(op: &str) -> bool {
    op.starts_with("GET ")
        && !op.ends_with('}')
        && !op.ends_with('/')
        && !op.ends_with("/v3")
        && !op.contains("/identity/")
}

/// A call about one object of a kind the idle resync lists (`GET /network/v2.0/ports/{id}`,
/// `POST /compute/v2.1/servers/{id}/action`): one per object, not one per cluster. (`{id}` also
/// stands for the project in Cinder's paths and Neutron's quotas: those are not objects.)
fn names_one_object(op: &str) -> bool {
    const KINDS: &[&str] = &[
        "servers",
        "ports",
        "networks",
        "subnets",
        "routers",
        "floatingips",
        "security-groups",
        "security-group-rules",
        "loadbalancers",
        "listeners",
        "pools",
        "healthmonitors",
        "volumes",
        "os-server-groups",
        "os-keypairs",
        "images",
    ];
    let parts: Vec<&str> = op.split('/').collect();
    parts
        .windows(2)
        .any(|w| w[1] == "{id}" && KINDS.contains(&w[0]))
}

struct World {
    sim: Sim,
    fake: FakeKube,
}

impl World {
    async fn start(scale: f64, clusters: u32) -> miette::Result<World> {
        let n = i64::from(clusters);
        let mut cfg = SimConfig {
            time_scale: scale,
            latency: LatencyModel::default(),
            // Tokens that outlive the run at any scale.
            token_lifetime_secs: 1e9,
            // Room for every control plane (m1.medium: 2 vCPUs, 4 GiB).
            compute_hosts: clusters / 16 + 3,
            ..SimConfig::demo()
        };
        let q = &mut cfg.quotas;
        // Each cluster: a server, a network, a subnet, a router, a floating IP, a few security
        // groups and their rules, a few ports; with room for a surge.
        q.instances = 2 * n + 10;
        q.cores = 4 * q.instances;
        q.ram_mb = 8192 * q.instances;
        q.server_groups = 2 * n + 10;
        q.server_group_members = 2 * n + 10;
        q.networks = 2 * n + 10;
        q.subnets = 2 * n + 10;
        q.routers = 2 * n + 10;
        q.floating_ips = 2 * n + 10;
        q.ports = 10 * n + 100;
        q.security_groups = 5 * n + 10;
        q.security_group_rules = 100 * n + 100;
        q.volumes = 2 * n + 10;
        q.gigabytes = 100 * q.volumes;
        let mut sim = Sim::start(cfg)
            .await
            .into_diagnostic()
            .wrap_err("cannot start the simulated cloud")?;
        let guests = kos_guest::sim::SimGuests::new().map_err(|e| miette!("{e}"))?;
        sim.attach_guests(Arc::new(guests));
        {
            // devstack's public /24 holds ~250 addresses; a router gateway and a floating IP
            // each per cluster need a public range sized for the fleet.
            let mut cloud = sim.app().cloud();
            for sub in &mut cloud.neutron.subnets {
                if sub.cidr == "172.24.4.0/24" {
                    sub.cidr = "172.24.0.0/20".into();
                    if let Some(pool) = sub.allocation_pools.first_mut() {
                        pool.end = "172.24.15.254".into();
                    }
                }
            }
        }
        let fake = FakeKube::start()
            .await
            .map_err(|e| miette!("cannot start the Kubernetes API: {e}"))?;
        // What `kubectl apply` of `kos-operator manifests` makes, but the Deployment: the
        // operator runs here as a process.
        for d in kos_operator::manifests::objects("kos-operator:bench")
            .iter()
            .filter(|d| d["kind"] != "Deployment")
        {
            fake.apply_json(d, "kubectl").into_diagnostic()?;
        }
        fake.apply_json(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
            "kubectl",
        )
        .into_diagnostic()?;
        let identity: Secret = serde_json::from_value(json!({
            "metadata": {"name": "cloud", "namespace": NS},
            "stringData": {"clouds.yaml": sim.clouds_yaml("sim")},
        }))
        .into_diagnostic()?;
        let secrets: Api<Secret> = Api::namespaced(fake.client().into_diagnostic()?, NS);
        secrets
            .create(&PostParams::default(), &identity)
            .await
            .into_diagnostic()
            .wrap_err("the identity Secret")?;
        Ok(World { sim, fake })
    }

    /// The operator as its ServiceAccount, with a kubeconfig in `dir`.
    fn spawn_operator(
        &self,
        exe: &Path,
        dir: &Path,
        resync_real: f64,
        retry_real: f64,
        per_project: u32,
    ) -> miette::Result<Operator> {
        let token = self
            .fake
            .service_account_token(
                kos_operator::manifests::NAMESPACE,
                kos_operator::manifests::NAME,
            )
            .into_diagnostic()?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: op\n\
                 users:\n- name: op\n  user:\n    token: {token}\ncurrent-context: fake\n",
                self.fake.url()
            ),
        )
        .into_diagnostic()?;
        let child = std::process::Command::new(exe)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--metrics-bind-address=0".to_owned(),
                "--health-probe-bind-address=0".to_owned(),
                format!("--resync-period={resync_real}"),
                format!("--retry-period={retry_real}"),
                format!("--max-runs-per-project={per_project}"),
            ])
            // The clusters' API addresses are the simulated cloud's: reached through its proxy,
            // as from behind a bastion.
            .env("HTTPS_PROXY", self.sim.proxy_url())
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .into_diagnostic()
            .wrap_err_with(|| format!("starting {}", exe.display()))?;
        Ok(Operator { child })
    }

    fn create_clusters(&self, n: u32) -> miette::Result<()> {
        for i in 0..n {
            self.fake
                .apply_json(&cluster(i), "kubectl")
                .into_diagnostic()
                .wrap_err("creating a Cluster")?;
        }
        Ok(())
    }

    /// Waits until `n` Clusters are Ready; the cloud seconds since `t0` when the first, and half
    /// of them, were.
    async fn wait_all_ready(
        &self,
        n: u32,
        t0: Instant,
        scale: f64,
        op: &mut Operator,
    ) -> miette::Result<(f64, f64)> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let mut milestones = super::bench::Milestones::default();
        let deadline = Instant::now() + Duration::from_secs(3600);
        let mut said = (Instant::now(), 0);
        loop {
            if let Some(status) = op.child.try_wait().into_diagnostic()? {
                return Err(miette!(
                    "kos-operator ended ({status}); its errors are above"
                ));
            }
            let clusters: Vec<Cluster> = self.fake.list(Some(NS)).into_diagnostic()?;
            let ready = clusters.iter().filter(|c| is_ready(c)).count();
            let now = t0.elapsed().as_secs_f64() / scale;
            if let Some(times) = milestones.saw(ready, n, now) {
                return Ok(times);
            }
            // A line now and then: a fleet takes a while on a small machine.
            if ready != said.1 && said.0.elapsed() > Duration::from_secs(30) {
                eprintln!("{ready} of {n} Ready after {now:.0} cloud s");
                said = (Instant::now(), ready);
            }
            if Instant::now() > deadline {
                let stuck: Vec<String> = clusters
                    .iter()
                    .filter(|c| !is_ready(c))
                    .take(5)
                    .map(|c| format!("{}: {}", c.metadata.name.as_deref().unwrap_or("?"), told(c)))
                    .collect();
                return Err(miette!(
                    "only {ready} of {n} Clusters became Ready; for example {stuck:#?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The operator's status writes so far: one per reconcile of a Ready Cluster.
    fn status_writes(&self) -> u64 {
        self.fake
            .requests()
            .iter()
            .filter(|r| {
                r.method == "PATCH"
                    && r.resource.as_deref() == Some("clusters")
                    && r.subresource.as_deref() == Some("status")
                    && (200..300).contains(&r.status)
            })
            .count() as u64
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

/// Cluster `i`: one control plane behind a floating IP, an empty pool, its own node subnet
/// (kos refuses one that overlaps another's in the project).
fn cluster(i: u32) -> Value {
    json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": format!("c{i:04}"), "namespace": NS},
        "spec": {
            "kubernetesVersion": "1.36.4",
            "network": {"create": {"cidr": format!("10.{}.{}.0/24", 20 + i / 250, i % 250)}},
            "apiEndpoint": {"type": "floatingIP"},
            "controlPlane": {"count": 1, "flavor": "m1.medium", "image": "ubuntu-24.04"},
            "nodePools": [
                {"name": "workers", "count": 0, "flavor": "m1.medium", "image": "ubuntu-24.04"}
            ],
            "identityRef": {"name": "cloud", "cloudName": "sim"},
        },
    })
}

fn is_ready(c: &Cluster) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.observed_generation == c.metadata.generation
            && s.conditions
                .iter()
                .any(|x| x.kind == "Ready" && x.status == "True")
    })
}

/// A Cluster's conditions that are True, with their messages.
fn told(c: &Cluster) -> String {
    c.status.as_ref().map_or_else(
        || "no status".to_owned(),
        |s| {
            s.conditions
                .iter()
                .filter(|x| x.status == "True")
                .map(|x| format!("{}: {}", x.kind, x.message))
                .collect::<Vec<_>>()
                .join("; ")
        },
    )
}

struct Operator {
    child: std::process::Child,
}

impl Operator {
    fn cpu_secs(&self) -> Option<f64> {
        cpu_secs(&self.child.id().to_string())
    }

    fn peak_rss_mib(&self) -> Option<f64> {
        proc_peak_rss_mib(&self.child.id().to_string())
    }

    /// Its figures are read: nothing of its state is needed after.
    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        // Never left running after the benchmark (an error on the way, a ^C).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "unknown".to_owned(), |x| format!("{x:.digits$}"))
    };
    let _ = writeln!(
        out,
        "kos bench operator: {} Clusters (1 control plane each) on one cloud, kos-operator \
         --max-runs-per-project {} (cloud seconds; 1 cloud s = {} real s)\n",
        r.clusters, r.max_runs_per_project, r.time_scale
    );
    let _ = writeln!(
        out,
        "  every Cluster Ready after {:.0} s ({:.0} s real); the first after {:.0} s, half after {:.0} s",
        r.all_ready_secs, r.all_ready_wall_secs, r.first_ready_secs, r.half_ready_secs
    );
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    let _ = writeln!(
        out,
        "  until then: {} OpenStack calls ({:.0} per cluster)",
        total(&r.create_calls),
        total(&r.create_calls) as f64 / f64::from(r.clusters)
    );
    let _ = writeln!(
        out,
        "\n  idle for {:.0} s ({} resync periods of {:.0} s): {} reconciles finished, {} calls, {} not GETs",
        r.idle_secs,
        IDLE_INTERVALS,
        r.resync_period_secs,
        r.idle_reconciles,
        total(&r.idle_calls),
        r.idle_non_get_calls
    );
    let _ = writeln!(out, "    per cluster per resync   in all  operation");
    for (op, n) in &r.idle_calls {
        let per = r.idle_calls_per_cluster.get(op).copied().unwrap_or(0.0);
        let _ = writeln!(out, "    {per:>22.2}   {n:>6}  {op}");
    }
    let _ = writeln!(
        out,
        "\n  against issue 22's goals                  measured   goal   ratio"
    );
    let _ = writeln!(
        out,
        "  lists of one type per cluster per resync  {:>8.2}   {:>4.1}   {:.2}   ({})",
        r.max_lists_per_type_per_cluster,
        GOAL_LISTS_PER_TYPE,
        r.lists_goal_ratio,
        r.max_list_operation.as_deref().unwrap_or("no list")
    );
    let _ = writeln!(
        out,
        "  calls naming one object, the same        {:>8.2}      0",
        r.per_object_calls_per_cluster
    );
    let _ = writeln!(
        out,
        "  operator peak RSS per cluster (MiB)      {:>8}   {:>4.1}   {}   ({} MiB in all, over the run)",
        opt(r.operator_mib_per_cluster, 2),
        GOAL_MIB_PER_CLUSTER,
        opt(r.rss_goal_ratio, 2),
        opt(r.operator_peak_rss_mib, 0)
    );
    let _ = writeln!(
        out,
        "\n  kos-operator's CPU: {} s until every Cluster was Ready; idle {} s per cloud minute at \
         this resync period, {} s per reconcile",
        opt(r.operator_cpu_secs_until_ready, 2),
        opt(r.operator_idle_cpu_secs_per_min, 3),
        opt(r.operator_cpu_secs_per_reconcile, 3)
    );
    if let Some(m) = r.peak_rss_mib {
        let _ = writeln!(
            out,
            "  peak RSS of the benchmark's process (kos-sim and its guests, the Kubernetes API): {m:.0} MiB"
        );
    }
    out
}
