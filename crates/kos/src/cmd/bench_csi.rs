//! `kos bench csi`: kos-csi's controller when many claims are created at once. A benchmark, not a
//! test: it measures and reports, it never fails on a time.
//!
//! One in-process kos-sim with the realistic latency model (5 s to create a volume, 50 ms per
//! call) on a scaled clock, and the kos-csi controller serving CSI on a unix socket in a temporary
//! directory. A driver does what the external-provisioner does for `--claims` claims created at
//! once: one CreateVolume per claim, at most `--workers` in flight (its `--worker-threads`), each
//! claim Bound when its call answers. CreateVolume answers as upstream's does, the volume still
//! `creating`; so two figures are reported against the latency model's time for one volume: the
//! cloud seconds until every claim was Bound (the target), and until Cinder showed every
//! volume `available` (what a pod waits for). Also: Cinder's calls meanwhile, the calls of an
//! idle spell and of one resync (a full ListVolumes walk) before and after the volumes exist, the
//! pace the driver's session learned, and the process's peak RSS.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use kos_cloud::Session;
use kos_cloud::model::block_storage::VolumeFilter;
use kos_csi::config::DriverConfig;
use kos_csi::controller::Controller;
use kos_csi::csi;
use kos_csi::csi::controller_client::ControllerClient;
use kos_csi::identity::Identity;
use kos_csi::server::{self, Services};
use kos_sim::{LatencyModel, Sim, SimConfig};
use miette::{IntoDiagnostic, WrapErr};
use serde::Serialize;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::bench_ccm::{peak_rss_mib, since};
use super::{Exit, Failure};
use crate::cli::BenchCsiArgs;

/// What the run is held against: every claim Bound within this many times one volume's create.
const TARGET_RATIO: f64 = 1.2;
/// An idle spell, in cloud seconds: long enough for any poller to show.
const IDLE_CLOUD_SECS: f64 = 30.0;
/// How long the run looks for every volume `available`, in cloud seconds.
const AVAILABLE_CLOUD_SECS: f64 = 600.0;

#[derive(Debug, Serialize)]
struct Report {
    claims: u32,
    workers: u32,
    time_scale: f64,
    /// The latency model's time for one volume's create, in cloud seconds.
    one_volume_secs: f64,
    kos: Run,
    /// The whole process's peak resident set (kos-sim included), in MiB.
    peak_rss_mib: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Run {
    /// Cloud seconds from the first CreateVolume until every one answered.
    bound_secs: f64,
    /// The same in this machine's seconds: what the calls cost here, latency model and CPU.
    bound_real_secs: f64,
    /// `bound_secs` over one volume's create time.
    ratio: f64,
    /// Whether `ratio` is within [`TARGET_RATIO`].
    within_target: bool,
    /// Cloud seconds from the first CreateVolume until Cinder showed every volume `available`
    /// (`None`: not within [`AVAILABLE_CLOUD_SECS`]).
    available_secs: Option<f64>,
    /// `available_secs` over one volume's create time.
    available_ratio: Option<f64>,
    /// CreateVolume calls that failed (0 in a sound run).
    failed: u32,
    /// Cinder calls until every claim was Bound, by operation.
    create_calls: BTreeMap<String, u64>,
    /// Cinder reads until every claim was Bound: volume lists, single-volume GETs.
    lists: u64,
    gets: u64,
    /// Cinder calls during an idle spell of 30 cloud seconds after the run.
    idle_calls: u64,
    /// Cinder calls of one resync before any volume existed, and after the run.
    resync_calls_empty: u64,
    resync_calls_full: u64,
    /// Cloud seconds per local second as the driver's session read them from the cloud's `Date`
    /// headers at the end (`1 / time_scale` when read right; 1 when not believed).
    pace: f64,
}

pub async fn csi(args: BenchCsiArgs) -> Result<Exit, Failure> {
    let report = measure(&args).await.map_err(Failure::cloud_diagnostic)?;
    super::bench::emit(args.output, &report, render)
}

async fn measure(args: &BenchCsiArgs) -> miette::Result<Report> {
    let scale = args.time_scale;
    eprintln!(
        "kos bench csi: {} claims at once, {} in flight, 1 cloud s = {scale} real s",
        args.claims, args.workers
    );
    let one_volume_secs = LatencyModel::default().volume_create_secs;
    let kos = run(args, one_volume_secs).await?;
    eprintln!(
        "kos-csi: every claim Bound after {:.1} cloud s",
        kos.bound_secs
    );
    Ok(Report {
        claims: args.claims,
        workers: args.workers,
        time_scale: scale,
        one_volume_secs,
        kos,
        peak_rss_mib: peak_rss_mib(),
    })
}

/// One run on a fresh cloud and a fresh driver.
async fn run(args: &BenchCsiArgs, one_volume_secs: f64) -> miette::Result<Run> {
    let scale = args.time_scale;
    let sim = Sim::start(SimConfig {
        time_scale: scale,
        latency: LatencyModel::default(),
        token_lifetime_secs: 1e9,
        ..SimConfig::default()
    })
    .await
    .into_diagnostic()
    .wrap_err("cannot start the simulated cloud")?;
    {
        let q = &mut sim.app().cloud().quotas;
        q.volumes = i64::from(args.claims) * 2 + 10;
        q.gigabytes = q.volumes;
    }
    let session = super::bench::connect(&sim, scale).await?;
    learn_pace(&session, scale).await;

    let cfg = DriverConfig::new("bench", Default::default());
    let controller = Controller::new(session.clone(), Arc::new(cfg));
    let dir = tempfile::tempdir().into_diagnostic()?;
    let socket = dir.path().join("csi.sock");
    let listener = server::bind(&socket).into_diagnostic()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server::serve(
        listener,
        Services {
            identity: Identity {
                with_topology: true,
            },
            controller: Some(controller),
            node: None,
        },
        async {
            let _ = stopped.await;
        },
    ));
    let client = ControllerClient::new(channel(&socket).await?);

    let resync_calls_empty = resync(&sim, &client).await?;

    let before = cloud_calls(&sim);
    let t0 = Instant::now();
    let available = tokio::spawn(every_volume_available(
        sim.app().clone(),
        args.claims,
        t0,
        scale,
    ));
    let failed = provision(&client, args.claims, args.workers).await?;
    let bound_real_secs = t0.elapsed().as_secs_f64();
    let bound_secs = bound_real_secs / scale;
    let create_calls = since(&cloud_calls(&sim), &before);
    let available_secs = available.await.into_diagnostic()?;

    let before = cloud_calls(&sim);
    tokio::time::sleep(Duration::from_secs_f64(IDLE_CLOUD_SECS * scale)).await;
    let idle_calls = since(&cloud_calls(&sim), &before).values().sum();
    let resync_calls_full = resync(&sim, &client).await?;

    let _ = stop.send(());
    let _ = served.await;
    let reads = |suffix: &str| -> u64 {
        create_calls
            .iter()
            .filter(|(op, _)| op.starts_with("GET ") && op.ends_with(suffix))
            .map(|(_, n)| n)
            .sum()
    };
    let ratio = bound_secs / one_volume_secs;
    Ok(Run {
        bound_secs,
        bound_real_secs,
        ratio,
        within_target: ratio <= TARGET_RATIO,
        available_secs,
        available_ratio: available_secs.map(|s| s / one_volume_secs),
        failed,
        lists: reads("/volumes/detail"),
        gets: reads("/volumes/{id}"),
        create_calls,
        idle_calls,
        resync_calls_empty,
        resync_calls_full,
        pace: session.pace().rate(),
    })
}

/// Cloud seconds from `t0` until the cloud holds `claims` volumes of the run, all `available`:
/// looked at in the simulator's own state (no API call, so none is counted), every twentieth of a
/// cloud second (at least every millisecond here). `None` past [`AVAILABLE_CLOUD_SECS`].
async fn every_volume_available(
    app: kos_sim::SharedApp,
    claims: u32,
    t0: Instant,
    scale: f64,
) -> Option<f64> {
    let every = Duration::from_secs_f64(0.05 * scale).max(Duration::from_millis(1));
    let give_up = t0 + Duration::from_secs_f64(AVAILABLE_CLOUD_SECS * scale);
    let want = usize::try_from(claims).unwrap_or(usize::MAX);
    loop {
        let ready = {
            let cloud = app.cloud();
            cloud
                .cinder
                .volumes
                .iter()
                .filter(|v| v.name.as_deref().is_some_and(is_claim) && v.status == "available")
                .count()
        };
        let now = Instant::now();
        if ready >= want {
            return Some(now.duration_since(t0).as_secs_f64() / scale);
        }
        if now > give_up {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Whether a volume name is one of [`claim`]'s.
fn is_claim(name: &str) -> bool {
    name.starts_with("pvc-") && name.ends_with("-bench")
}

/// Answers every 2 cloud seconds until the session believes the cloud's pace, so that the run
/// starts with it known (the driver's waits and the shared poller's tick are in cloud time, and
/// kos-cloud reads the pace over windows of 10 cloud seconds of whole-second `Date` headers): at
/// most 40 cloud seconds, and 1 to 10 real ones (a clock near real time stays at pace 1).
async fn learn_pace(session: &Session, scale: f64) {
    let give_up = Instant::now()
        + Duration::from_secs_f64(40.0 * scale)
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
    let every = Duration::from_secs_f64(2.0 * scale).max(Duration::from_millis(10));
    while session.pace().rate() <= 1.0 && Instant::now() < give_up {
        let _ = session
            .block_storage()
            .list_volumes(&VolumeFilter::default())
            .await;
        tokio::time::sleep(every).await;
    }
    tracing::debug!(rate = session.pace().rate(), "the cloud's pace");
}

async fn channel(socket: &Path) -> miette::Result<Channel> {
    let socket = socket.to_owned();
    Endpoint::try_from("http://[::]:50051")
        .into_diagnostic()?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await
        .into_diagnostic()
        .wrap_err("cannot connect to the driver's socket")
}

/// What the external-provisioner sends for `n` claims created at once, `workers` at a time:
/// returns how many calls failed.
async fn provision(
    client: &ControllerClient<Channel>,
    n: u32,
    workers: u32,
) -> miette::Result<u32> {
    let gate = Arc::new(tokio::sync::Semaphore::new(
        usize::try_from(workers).unwrap_or(1).max(1),
    ));
    let mut calls = Vec::new();
    for i in 0..n {
        let gate = gate.clone();
        let mut client = client.clone();
        calls.push(tokio::spawn(async move {
            let _slot = gate.acquire_owned().await.ok()?;
            client.create_volume(claim(i)).await.err()
        }));
    }
    let mut failed = 0;
    let mut first = None;
    for c in calls {
        if let Some(e) = c.await.into_diagnostic()? {
            failed += 1;
            first.get_or_insert(e);
        }
    }
    if let Some(e) = first {
        eprintln!("{failed} CreateVolume calls failed; the first: {e}");
    }
    Ok(failed)
}

/// A claim's CreateVolume as the external-provisioner makes it (`pvc-<uid>`, 1 GiB, mount, the
/// `--extra-create-metadata` parameters).
fn claim(i: u32) -> csi::CreateVolumeRequest {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    let pv = format!("pvc-{i:08}-bench");
    csi::CreateVolumeRequest {
        name: pv.clone(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: kos_csi::GIB,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: "ext4".into(),
                ..Default::default()
            })),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }],
        parameters: [
            ("csi.storage.k8s.io/pvc/name", format!("data-{i}")),
            ("csi.storage.k8s.io/pvc/namespace", "default".to_owned()),
            ("csi.storage.k8s.io/pv/name", pv),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        ..Default::default()
    }
}

/// One resync: a full ListVolumes walk, following `next_token` until it is empty, with the
/// driver's page size (`max_entries` 0), as a sidecar's periodic resync does. Returns the Cinder
/// calls it made.
async fn resync(sim: &Sim, client: &ControllerClient<Channel>) -> miette::Result<u64> {
    let before = cloud_calls(sim);
    let mut client = client.clone();
    let mut token = String::new();
    loop {
        let page = client
            .list_volumes(csi::ListVolumesRequest {
                max_entries: 0,
                starting_token: token,
            })
            .await
            .into_diagnostic()
            .wrap_err("ListVolumes")?
            .into_inner();
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    Ok(since(&cloud_calls(sim), &before).values().sum())
}

/// Every call the cloud received, by `METHOD /path-template`, Keystone's left out (a token now and
/// then is not the driver's doing).
fn cloud_calls(sim: &Sim) -> BTreeMap<String, u64> {
    let obs = sim.app().observations();
    obs.counters
        .values()
        .flat_map(|c| c.by_operation.iter())
        .filter(|(op, _)| !op.contains("/identity/"))
        .map(|(op, n)| (op.clone(), *n))
        .collect()
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    let run = &r.kos;
    let _ = writeln!(
        out,
        "kos bench csi: {} claims created at once, {} CreateVolume calls in flight (cloud seconds; 1 cloud s = {} real s)",
        r.claims, r.workers, r.time_scale
    );
    let _ = writeln!(
        out,
        "  one volume's create in the latency model: {:.1} s; target: every claim Bound within {TARGET_RATIO}x\n",
        r.one_volume_secs
    );
    let _ = writeln!(
        out,
        "  every claim Bound after        {:>7.1} s ({:.2}x{}; {:.2} real s){}",
        run.bound_secs,
        run.ratio,
        if run.within_target {
            ", within target"
        } else {
            ", NOT within target"
        },
        run.bound_real_secs,
        if run.failed > 0 {
            format!(", {} calls FAILED", run.failed)
        } else {
            String::new()
        }
    );
    match (run.available_secs, run.available_ratio) {
        (Some(s), Some(x)) => {
            let _ = writeln!(
                out,
                "  every volume available after   {s:>7.1} s ({x:.2}x; CreateVolume answers `creating`, as upstream)"
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "  every volume available: not within {AVAILABLE_CLOUD_SECS:.0} s"
            );
        }
    }
    let _ = writeln!(
        out,
        "  Cinder reads until Bound: {} lists, {} single-volume GETs; idle {IDLE_CLOUD_SECS:.0} s: {} calls; resync: {} calls empty, {} calls with the volumes",
        run.lists, run.gets, run.idle_calls, run.resync_calls_empty, run.resync_calls_full
    );
    let _ = writeln!(
        out,
        "  the driver's pace: {:.1} cloud s per real s (the clock's: {:.1})",
        run.pace,
        1.0 / r.time_scale
    );
    let _ = writeln!(out, "\n  Cinder calls until every claim was Bound:");
    for (op, n) in &run.create_calls {
        let _ = writeln!(out, "    {n:>6}  {op}");
    }
    if let Some(m) = r.peak_rss_mib {
        let _ = writeln!(
            out,
            "\n  peak RSS of the whole process (kos-sim included): {m:.0} MiB"
        );
    }
    out
}
