//! `kos bench ccm`: kos-ccm's Service controller at scale, against the way the upstream CCM works.
//! A benchmark, not a test: it measures and reports, it never fails on a time.
//!
//! One in-process kos-sim with the realistic latency model (60 s to provision a load balancer,
//! 5 s per change, 50 ms per call) on a scaled clock, and an in-process Kubernetes API
//! (kos-kube-fake) with `--nodes` Nodes. `--services` Services of type LoadBalancer are created at
//! once and the real controller (`kos_ccm::service::run`) runs until each has an address. Then:
//! the OpenStack calls of a resync with nothing to do (writes must be 0), the calls when one node
//! joins, and the process's peak RSS. The baseline, in the same run on a fresh cloud, is the
//! upstream's behaviour: one Service at a time, its worker blocked until the load balancer is
//! ACTIVE.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Service, ServicePort,
    ServiceSpec,
};
use kos_ccm::CloudConfig;
use kos_ccm::context::Context;
use kos_ccm::lb::{LbSettings, LoadBalancers};
use kos_ccm::service::{self, ServiceSettings};
use kos_cloud::model::network::{NetworkCreate, RouterCreate, SubnetCreate};
use kos_cloud::{RetryPolicy, Session};
use kos_kube_fake::FakeKube;
use kos_sim::{LatencyModel, Sim, SimConfig};
use kube::runtime::events::Reporter;
use miette::{IntoDiagnostic, WrapErr, miette};
use serde::Serialize;

use super::{Exit, Failure};
use crate::cli::{BenchCcmArgs, Output};

/// Real time the baseline may take at most: it runs on a faster clock when it would take longer.
const BASELINE_BUDGET_SECS: f64 = 90.0;
const MIN_TIME_SCALE: f64 = 0.002;

#[derive(Debug, Serialize)]
struct Report {
    services: u32,
    nodes: u32,
    concurrency: u16,
    time_scale: f64,
    /// Cloud seconds until every Service had an address.
    kos_secs: f64,
    /// The same for the one-at-a-time, blocking baseline (`None`: not run).
    baseline_secs: Option<f64>,
    baseline_time_scale: Option<f64>,
    /// OpenStack calls until every Service had an address, by operation.
    create_calls: BTreeMap<String, u64>,
    /// OpenStack calls of one resync with nothing to do, by operation.
    resync_calls: BTreeMap<String, u64>,
    resync_writes: u64,
    /// OpenStack calls after one node joined, until every pool had it, by operation.
    node_join_calls: BTreeMap<String, u64>,
    node_join_writes: u64,
    /// The whole process's peak resident set (kos-sim and the fake API included), in MiB.
    peak_rss_mib: Option<f64>,
}

pub async fn ccm(args: BenchCcmArgs) -> Result<Exit, Failure> {
    let report = measure(&args).await.map_err(Failure::cloud_diagnostic)?;
    match args.output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .into_diagnostic()
                .map_err(Failure::cloud_diagnostic)?
        ),
        Output::Text => print!("{}", render(&report)),
    }
    Ok(Exit::Ok)
}

async fn measure(args: &BenchCcmArgs) -> miette::Result<Report> {
    let scale = args.time_scale;
    eprintln!(
        "kos bench ccm: {} Services, {} nodes, {} at once, 1 cloud s = {scale} real s",
        args.services, args.nodes, args.concurrency
    );
    let world = World::start(scale, args.services, args.nodes).await?;
    let lbs = Arc::new(world.load_balancers(scale));
    let (stop, controller) = world.controller(lbs.clone(), args.concurrency, scale)?;

    let t0 = Instant::now();
    let before = world.cloud_calls();
    world.create_services(args.services)?;
    world.wait_all_addressed(args.services).await?;
    let kos_secs = t0.elapsed().as_secs_f64() / scale;
    let create_calls = since(&world.cloud_calls(), &before);
    eprintln!("kos-ccm: every Service has an address after {kos_secs:.0} cloud s");

    // Passes still queued (a last status write, a requeue) are not part of what follows.
    world.quiesce(scale).await;
    // A resync with nothing to do: a fresh observation, then one pass per Service, as the
    // controller's periodic resync does.
    let nodes: Vec<Node> = world.fake.list(None).into_diagnostic()?;
    let services: Vec<Service> = world.fake.list(Some("default")).into_diagnostic()?;
    let before = world.cloud_calls();
    lbs.invalidate_snapshot();
    for s in &services {
        lbs.ensure_service(s, &nodes).await.into_diagnostic()?;
    }
    let resync_calls = since(&world.cloud_calls(), &before);
    let resync_writes = writes(&resync_calls);

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
    let _ = stop.send(());
    let _ = controller.await;
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
        kos_secs,
        create_calls,
        baseline_secs,
        baseline_time_scale,
        resync_calls,
        resync_writes,
        node_join_calls,
        node_join_writes,
        peak_rss_mib,
    })
}

struct World {
    sim: Sim,
    fake: FakeKube,
    session: Session,
    config: Arc<CloudConfig>,
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
            let q = &mut sim.app().cloud().quotas;
            let n = i64::from(services) * 2 + 10;
            q.floating_ips = n;
            q.load_balancers = n;
            q.listeners = n;
            q.pools = n;
            q.health_monitors = n;
            q.members = n * (i64::from(nodes) + 2);
            q.ports = n * 2 + 100;
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
        })
    }

    /// The controller's core, its waits and requeues on the scaled clock, and a session that
    /// requeues on Octavia's busy 409 as kos-ccm's does.
    fn load_balancers(&self, scale: f64) -> LoadBalancers {
        let mut s = LbSettings::new("bench");
        let scaled = |secs: f64| Duration::from_secs_f64(secs * scale);
        s.pending_requeue = scaled(5.0);
        s.retry_requeue = scaled(60.0);
        s.snapshot_max_age = scaled(10.0);
        let session = self.session.clone().with_retry_policy(RetryPolicy {
            retry_busy_load_balancer: false,
            ..self.session.retry_policy().clone()
        });
        LoadBalancers::new(session, self.config.clone(), s)
    }

    fn controller(
        &self,
        lbs: Arc<LoadBalancers>,
        concurrency: u16,
        scale: f64,
    ) -> miette::Result<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )> {
        let client = self.fake.client().into_diagnostic()?;
        let ctx = Arc::new(Context::new(
            self.session.clone(),
            (*self.config).clone(),
            "bench",
            client,
            Reporter {
                controller: "kos-ccm".into(),
                instance: Some("bench".into()),
            },
        ));
        let scaled = |secs: f64| Duration::from_secs_f64(secs * scale);
        let settings = ServiceSettings {
            concurrency,
            // Resyncs are measured separately.
            resync_period: Duration::from_secs(24 * 3600),
            retry_min: scaled(5.0),
            retry_max: scaled(300.0),
            ..ServiceSettings::default()
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(service::run(ctx, lbs, settings, None, async {
            let _ = rx.await;
        }));
        Ok((tx, task))
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

    async fn wait_all_addressed(&self, n: u32) -> miette::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(1800);
        loop {
            let services: Vec<Service> = self.fake.list(Some("default")).into_diagnostic()?;
            let done = services
                .iter()
                .filter(|s| {
                    s.status
                        .as_ref()
                        .and_then(|st| st.load_balancer.as_ref())
                        .and_then(|lb| lb.ingress.as_ref())
                        .is_some_and(|i| !i.is_empty())
                })
                .count();
            if done >= usize::try_from(n).unwrap_or(usize::MAX) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(miette!("only {done} of {n} Services got an address"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
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
        "  kos-ccm ({} at once, never blocking)   every Service addressed after {:>8.0} s",
        r.concurrency, r.kos_secs
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
        let _ = writeln!(out, "    {n:>6}  {op}");
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
        "\n  one node joins: {} calls, {} writes",
        total(&r.node_join_calls),
        r.node_join_writes
    );
    for (op, n) in &r.node_join_calls {
        let _ = writeln!(out, "    {n:>6}  {op}");
    }
    if let Some(m) = r.peak_rss_mib {
        let _ = writeln!(
            out,
            "\n  peak RSS of the whole process (kos-sim and the Kubernetes API included): {m:.0} MiB"
        );
    }
    out
}
