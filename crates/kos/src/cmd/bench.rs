//! `kos bench apply`: how close kos's parallel apply comes to the best any tool could do. A benchmark,
//! not a test: it measures and reports, it never fails on a time.
//!
//! Each run gets a fresh in-process kos-sim with the realistic [`LatencyModel::default`] (per-call
//! latency, 30 s server boot, 60 s LB provisioning, …) on a scaled clock, and optionally a per-service
//! rate limit. It runs validation, preflight, the desired graph and a plan, then an apply from zero, and
//! reports the apply's wall time in cloud seconds against the lower bound of
//! [`kos_cluster::critical_path`], with the API calls per service as kos counted them and as the cloud
//! did. Baselines run the same engine the way other tools work: one node at a time, and Terraform's
//! (ten nodes at a time, each holding its slot while it waits, one GET per resource per poll).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kos_cloud::{ServiceKind, Session};
use kos_cluster::apply::{ApplyOptions, Deadlines, PollMode};
use kos_cluster::bootstrap::MarkerBootstrap;
use kos_cluster::critical_path::{CostModel, LowerBound, earliest_finish, lower_bound};
use kos_cluster::events::Event;
use kos_cluster::graph::{DesiredGraph, Kind};
use kos_sim::{LatencyModel, Service, Sim, SimConfig};
use miette::{IntoDiagnostic, WrapErr, miette};
use serde::Serialize;

use super::{Exit, Failure};
use crate::cli::{BenchApplyArgs, Output};

/// Real seconds per cloud second by default. A 3 + 100 apply (~85 cloud s) then takes ~9 s of real
/// time, while 1 ms of real overhead (scheduling, HTTP, JSON on a small machine) is 0.01 cloud s: a
/// fifth of one modelled call, and ~0.01 % of the run.
pub const DEFAULT_TIME_SCALE: f64 = 0.1;

/// Real time a baseline may take at most: a slow baseline runs on a faster clock (never below
/// [`MIN_TIME_SCALE`]), so a 3 + 100 sequential run (~1 cloud hour) stays around a minute.
const BASELINE_BUDGET_SECS: f64 = 60.0;
const MIN_TIME_SCALE: f64 = 0.005;

/// One way of running the apply.
#[derive(Debug, Clone, Copy, Serialize)]
struct Variant {
    name: &'static str,
    parallelism: usize,
    poll: PollMode,
    waits_hold_slots: bool,
}

const KOS: Variant = Variant {
    name: "kos",
    parallelism: 10,
    poll: PollMode::ListPerKind,
    waits_hold_slots: false,
};
const SEQUENTIAL: Variant = Variant {
    name: "sequential",
    parallelism: 1,
    poll: PollMode::ListPerKind,
    waits_hold_slots: true,
};
const TERRAFORM_LIKE: Variant = Variant {
    name: "terraform-like",
    parallelism: 10,
    poll: PollMode::GetPerResource,
    waits_hold_slots: true,
};

/// Calls to one service during the apply.
#[derive(Debug, Default, Serialize)]
struct Calls {
    /// Sent by kos (every attempt; from `Session::counters`).
    client: u64,
    /// Received by the cloud (from the simulator's counters).
    cloud: u64,
    /// Answered 429 by the cloud's rate limit.
    rate_limited: u64,
}

/// One node of the lower bound's path, with when the run actually finished it.
#[derive(Debug, Serialize)]
struct PathStep {
    id: String,
    bound_finish_secs: f64,
    actual_finish_secs: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Run {
    variant: Variant,
    time_scale: f64,
    /// Preflight, observe and plan (cloud seconds; not part of the ratio).
    prepare_secs: f64,
    /// The apply from zero (cloud seconds).
    wall_secs: f64,
    ratio: f64,
    /// When the last server was ACTIVE (cloud seconds from the apply's start).
    servers_ready_secs: f64,
    real_secs: f64,
    calls: BTreeMap<String, Calls>,
    /// The bound's critical path with this run's finish times.
    path: Vec<PathStep>,
    /// Every node's finish time (cloud seconds from the apply's start).
    #[serde(skip)]
    done: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    control_planes: u32,
    workers: u32,
    rate_limit: Option<f64>,
    model: LatencyModel,
    lower_bound: LowerBound,
    /// Every node's cost one after another (what a fully sequential tool needs at least).
    serial_secs: f64,
    /// The earliest the last server can be ACTIVE.
    servers_bound_secs: f64,
    runs: Vec<Run>,
}

pub async fn apply(args: BenchApplyArgs) -> Result<Exit, Failure> {
    let usage = |m: String| Failure::input(miette!("{m}"));
    if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        return Err(usage(format!(
            "--time-scale must be a positive number, got {}",
            args.time_scale
        )));
    }
    let rate = (args.rate_limit > 0.0).then_some(args.rate_limit);
    let text = spec_yaml(args.control_planes, args.workers);
    let spec = kos_cluster::load("bench.yaml", &text)
        .map_err(|e| Failure::input(miette::Report::new(e)))?
        .spec;
    let (first, graph) = run(KOS, args.time_scale, rate, &spec, &text).await?;
    let model = LatencyModel::default();
    let cost = CostModel {
        per_call_secs: model.per_call_secs,
        server_boot_secs: model.server_boot_secs,
        lb_create_secs: model.lb_create_secs,
        lb_update_secs: model.lb_update_secs,
        volume_create_secs: model.volume_create_secs,
        rate_limit: rate,
    };
    let mut report = Report {
        control_planes: args.control_planes,
        workers: args.workers,
        rate_limit: rate,
        model,
        lower_bound: lower_bound(&graph, &cost),
        serial_secs: graph.nodes.values().map(|n| cost.cost(n)).sum(),
        servers_bound_secs: earliest_finish(&graph, &cost)
            .iter()
            .filter(|(id, _)| graph.node(id).is_some_and(|n| n.kind == Kind::Server))
            .map(|(_, f)| *f)
            .fold(0.0, f64::max),
        runs: Vec::new(),
    };
    let mut runs = vec![first];
    if args.baselines {
        for v in [SEQUENTIAL, TERRAFORM_LIKE] {
            let scale = baseline_scale(args.time_scale, v, &report);
            runs.push(run(v, scale, rate, &spec, &text).await?.0);
        }
    }
    for r in &mut runs {
        r.ratio = r.wall_secs / report.lower_bound.secs.max(f64::MIN_POSITIVE);
        r.path = report
            .lower_bound
            .path
            .iter()
            .map(|p| PathStep {
                id: p.id.clone(),
                bound_finish_secs: p.finish_secs,
                actual_finish_secs: r.done.get(&p.id).copied(),
            })
            .collect();
    }
    report.runs = runs;
    emit(args.output, &report, render)
}

/// The benchmark's cluster: `cp` control planes behind a public Octavia LB, one pool of `workers`.
fn spec_yaml(cp: u32, workers: u32) -> String {
    format!(
        "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: bench\nspec:\n  kubernetesVersion: \"1.36.4\"\n  network:\n    create:\n      cidr: 10.0.0.0/20\n  apiEndpoint:\n    type: loadBalancer\n  controlPlane:\n    count: {cp}\n    flavor: m1.medium\n    image: ubuntu-24.04\n  nodePools:\n    - name: workers\n      count: {workers}\n      flavor: m1.small\n      image: ubuntu-24.04\n"
    )
}

/// A baseline's time scale: the default unless its estimated length (every node's cost over its slots,
/// at least the bound) would take longer than the budget in real time.
fn baseline_scale(scale: f64, v: Variant, r: &Report) -> f64 {
    let slots = if v.waits_hold_slots {
        v.parallelism as f64
    } else {
        f64::INFINITY
    };
    let estimate = (r.serial_secs / slots).max(r.lower_bound.secs).max(1.0);
    scale
        .min(BASELINE_BUDGET_SECS / estimate)
        .max(MIN_TIME_SCALE.min(scale))
}

/// A fresh simulator, the whole pipeline up to an apply from zero, and what it cost.
async fn run(
    v: Variant,
    scale: f64,
    rate: Option<f64>,
    spec: &kos_cluster::ClusterSpec,
    text: &str,
) -> Result<(Run, DesiredGraph), Failure> {
    eprintln!(
        "kos bench: {} (parallelism {}{}), time scale {scale:.4}…",
        v.name,
        v.parallelism,
        if v.waits_hold_slots {
            ", waits hold slots"
        } else {
            ""
        }
    );
    let cloud = |e: miette::Report| Failure::cloud_report(e);
    let mut cfg = SimConfig {
        time_scale: scale,
        latency: LatencyModel::default(),
        token_lifetime_secs: 1e9,
        compute_hosts: 3 + spec.node_pools.iter().map(|p| p.count.value).sum::<u32>() / 50,
        rate_limits: rate
            .map(|r| Service::CLOUD.iter().map(|s| (*s, r)).collect())
            .unwrap_or_default(),
        ..SimConfig::default()
    };
    let q = &mut cfg.quotas;
    for x in [
        &mut q.instances,
        &mut q.cores,
        &mut q.ram_mb,
        &mut q.ports,
        &mut q.volumes,
        &mut q.gigabytes,
        &mut q.server_group_members,
        &mut q.security_groups,
        &mut q.security_group_rules,
        &mut q.floating_ips,
    ] {
        *x = -1;
    }
    let sim = Sim::start(cfg)
        .await
        .into_diagnostic()
        .wrap_err("cannot start the simulated cloud")
        .map_err(cloud)?;
    let session = connect(&sim, scale).await.map_err(cloud)?;
    let app = sim.app().clone();
    let t0 = app.now().0;

    let pre = kos_cluster::preflight::preflight(&session, spec, "bench.yaml", text)
        .await
        .map_err(|e| Failure::input(miette::Report::new(e.report)))?;
    // Every measurement starts on a new simulated cloud: nothing of the cluster exists.
    let fresh = kos_cluster::bootstrap::Formation::Fresh;
    let graph = kos_cluster::graph::desired(spec, &pre.resolved, fresh)
        .map_err(|e| Failure::input(miette!("cannot build the graph: {e}")))?;
    let observed = kos_cluster::observe::observe(&session, &graph.cluster)
        .await
        .map_err(Failure::cloud)?;
    let plan = kos_cluster::plan::plan(&graph, &observed);

    let scaled = |d: Duration| d.mul_f64(scale);
    let defaults = ApplyOptions::default();
    let opts = ApplyOptions {
        parallelism: v.parallelism,
        poll_interval: scaled(defaults.poll_interval),
        poll: v.poll,
        waits_hold_slots: v.waits_hold_slots,
        // Scaled above from the simulator's time scale, which the benchmark chose.
        clock: kos_cluster::apply::WaitClock::Local,
        deadlines: Deadlines {
            server: scaled(defaults.deadlines.server),
            load_balancer: scaled(defaults.deadlines.load_balancer),
            volume: scaled(defaults.deadlines.volume),
            delete: scaled(defaults.deadlines.delete),
        },
        scheduler_sync: scaled(defaults.scheduler_sync),
        ..defaults
    };
    // Done times of every node, in cloud seconds from the apply's start.
    let done: Arc<Mutex<BTreeMap<String, f64>>> = Arc::default();
    let (tx, mut rx) = tokio::sync::mpsc::channel(4096);
    let before = session.counters();
    app.observations().reset();
    let real = Instant::now();
    let start = app.now().0;
    let recorder = {
        let (app, done) = (app.clone(), done.clone());
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if let Event::Done { id, .. } = e {
                    let at = app.now().0 - start;
                    done.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id, at);
                }
            }
        })
    };
    let result =
        kos_cluster::apply::apply(&session, &graph, &plan, &MarkerBootstrap, opts, tx).await;
    let wall_secs = app.now().0 - start;
    let real_secs = real.elapsed().as_secs_f64();
    let _ = recorder.await;
    result.map_err(|e| Failure::cloud_report(miette!("the {} run failed: {e}", v.name)))?;

    let client = session.counters().since(&before);
    let mut calls: BTreeMap<String, Calls> = BTreeMap::new();
    for (svc, n) in &client.by_service {
        calls.entry(kind_name(*svc)).or_default().client = *n;
    }
    for (svc, c) in &app.observations().counters {
        let e = calls.entry(service_name(*svc)).or_default();
        e.cloud = c.calls;
        e.rate_limited = c.rate_limited;
    }
    let done = done.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let servers_ready_secs = done
        .iter()
        .filter(|(id, _)| graph.node(id).is_some_and(|n| n.kind == Kind::Server))
        .map(|(_, f)| *f)
        .fold(0.0, f64::max);
    sim.stop().await;
    Ok((
        Run {
            variant: v,
            time_scale: scale,
            prepare_secs: start - t0,
            wall_secs,
            ratio: 0.0,
            servers_ready_secs,
            real_secs,
            calls,
            path: Vec::new(),
            done,
        },
        graph,
    ))
}

/// A session on the simulator, with kos's retry timings on the simulator's clock. The simulator's
/// Retry-After is in cloud seconds (1 at any rate of at least 1/s): the cap makes it one cloud second.
pub(crate) async fn connect(sim: &Sim, scale: f64) -> miette::Result<Session> {
    let c = sim.config();
    connect_to(&sim.auth_url(), &c.username, &c.password, &c.project, scale).await
}

/// A session of the simulated cloud at `auth_url` (the benches' user), its retries on the clock.
pub(crate) async fn connect_to(
    auth_url: &str,
    user: &str,
    password: &str,
    project: &str,
    scale: f64,
) -> miette::Result<Session> {
    let password = secrecy::SecretString::from(password.to_owned());
    kos_ccm::bench::connect(auth_url, user, &password, project, scale)
        .await
        .into_diagnostic()
        .wrap_err("cannot connect to the simulated cloud")
}

fn kind_name(s: ServiceKind) -> String {
    s.catalog_type().to_owned()
}

fn service_name(s: Service) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{s:?}"))
}

fn render(r: &Report) -> String {
    let b = &r.lower_bound;
    let m = &r.model;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kos bench apply: {} control planes behind a load balancer + {} workers, {}",
        r.control_planes,
        r.workers,
        r.rate_limit.map_or("no rate limit".to_owned(), |x| format!(
            "{x} requests/s per service"
        ))
    );
    let _ = writeln!(
        out,
        "model: {} s per call, server boot {} s, LB create {} s, LB child update {} s, volume {} s",
        m.per_call_secs,
        m.server_boot_secs,
        m.lb_create_secs,
        m.lb_update_secs,
        m.volume_create_secs
    );
    let _ = writeln!(
        out,
        "lower bound: {:.2} s = max(critical path {:.2} s, busiest service at the rate limit {:.2} s)",
        b.secs, b.path_secs, b.rate_secs
    );
    let kos = r.runs.first();
    let _ = writeln!(out, "critical path (bound finish / kos finish, cloud s):");
    for s in &b.path {
        let actual = kos
            .and_then(|k| k.done.get(&s.id))
            .map_or("-".to_owned(), |a| format!("{a:.2}"));
        let _ = writeln!(
            out,
            "  {:<14} {:<16} {:>8.2} / {actual}",
            s.id,
            s.kind.as_str(),
            s.finish_secs
        );
    }
    let services: Vec<&String> = {
        let mut s: Vec<&String> = r.runs.iter().flat_map(|x| x.calls.keys()).collect();
        s.sort();
        s.dedup();
        s
    };
    let _ = writeln!(
        out,
        "servers: the last can be ACTIVE at {:.2} s at the earliest; every node one after another: {:.2} s",
        r.servers_bound_secs, r.serial_secs
    );
    let _ = write!(
        out,
        "\n{:<15} {:>5} {:>6} {:>10} {:>7} {:>11} {:>8} {:>7}",
        "run", "par.", "scale", "wall (s)", "ratio", "servers (s)", "prep (s)", "real(s)"
    );
    for s in &services {
        let _ = write!(out, " {s:>14}");
    }
    let _ = writeln!(out, " {:>6}", "429s");
    for x in &r.runs {
        let _ = write!(
            out,
            "{:<15} {:>5} {:>6.3} {:>10.2} {:>7.3} {:>11.2} {:>8.2} {:>7.1}",
            x.variant.name,
            x.variant.parallelism,
            x.time_scale,
            x.wall_secs,
            x.ratio,
            x.servers_ready_secs,
            x.prepare_secs,
            x.real_secs
        );
        for s in &services {
            let c = x.calls.get(*s);
            let _ = write!(
                out,
                " {:>14}",
                c.map_or("-".to_owned(), |c| format!("{}/{}", c.client, c.cloud))
            );
        }
        let limited: u64 = x.calls.values().map(|c| c.rate_limited).sum();
        let _ = writeln!(out, " {limited:>6}");
    }
    out.push_str(
        "\nwall: the apply from zero in cloud seconds (real / time scale); ratio: wall / lower bound; calls: sent by kos / received by the cloud, apply only\n",
    );
    if r.runs.len() > 1 {
        out.push_str("sequential: one node at a time, waits included; terraform-like: 10 nodes at a time, each holding its slot while it waits, one GET per resource per poll\n");
    }
    out
}

/// When the first and half of `n` things were done, while a bench waits for all of them.
#[derive(Debug, Default)]
pub(super) struct Milestones {
    first: Option<f64>,
    half: Option<f64>,
}

impl Milestones {
    /// `done` of `n` at `now`: the first's and the half's times once all are done.
    pub(super) fn saw(&mut self, done: usize, n: usize, now: f64) -> Option<(f64, f64)> {
        if done > 0 {
            self.first.get_or_insert(now);
        }
        if done * 2 >= n {
            self.half.get_or_insert(now);
        }
        (done >= n).then(|| (self.first.unwrap_or(now), self.half.unwrap_or(now)))
    }
}

/// A benchmark's report on stdout: as JSON under `--output json`, else as `render` writes it.
pub(super) fn emit<R: serde::Serialize>(
    output: Output,
    report: &R,
    render: impl Fn(&R) -> String,
) -> Result<Exit, Failure> {
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(report)
                .into_diagnostic()
                .map_err(Failure::cloud_report)?
        ),
        Output::Text => print!("{}", render(report)),
    }
    Ok(Exit::Ok)
}
