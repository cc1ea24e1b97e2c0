//! `kos-ccm` as the binary runs it (`kos_ccm::run::run` with parsed flags): cloud.conf and a
//! kubeconfig on disk, kos-sim as OpenStack, kos-kube-fake as Kubernetes. A run initialises
//! nodes, serves `/healthz` and `/metrics` under the upstream metric names, holds the Lease and
//! releases it on SIGTERM; with two replicas, only one leads and the other takes over when it
//! stops. Every check polls with a generous deadline; nothing is timed.

mod support;
use support::{DEADLINE, R, initialised, kubelet_node, wait_for};

use std::path::Path;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kos_ccm::options::RunArgs;
use kos_cloud::model::network::{NetworkCreate, RouterCreate, SubnetCreate};
use kos_cloud::{Env, RetryPolicy, Session};
use kos_kube_fake::FakeKube;
use kos_sim::{Sim, SimConfig};
use tokio::sync::oneshot;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

struct World {
    sim: Sim,
    fake: FakeKube,
    dir: tempfile::TempDir,
    env: Env,
    /// The nodes' network (the load balancers' VIP subnet is on it).
    network: String,
}

/// A session of the project, as a person with the openstack CLI would have.
async fn admin(sim: &Sim, dir: &tempfile::TempDir) -> R<Session> {
    support::connect(sim, dir.path(), RetryPolicy::default()).await
}

async fn world() -> R<World> {
    let sim = Sim::start(SimConfig::fast()).await?;
    let fake = FakeKube::start().await?;
    let mut ns = Namespace::default();
    ns.metadata.name = Some("kube-system".into());
    fake.insert(&ns)?;
    let dir = tempfile::tempdir()?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let s = admin(&sim, &dir).await?;
    let public = s.network().external_network(None).await?.id;
    let net = s
        .network()
        .create_network(&NetworkCreate {
            name: "nodes".into(),
            ..Default::default()
        })
        .await?;
    let subnet = s
        .network()
        .create_subnet(&SubnetCreate::new(&net.id, "nodes", "10.1.0.0/24"))
        .await?;
    let router = s
        .network()
        .create_router(&RouterCreate::with_gateway("r", &public))
        .await?;
    s.network()
        .add_router_interface(&router.id, &subnet.id)
        .await?;
    let c = sim.config();
    std::fs::write(
        dir.path().join("cloud.conf"),
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = Default\nregion = {}\n\n[LoadBalancer]\nsubnet-id = {}\nfloating-network-id = {public}\n",
            sim.auth_url(),
            c.username,
            c.password,
            c.project,
            c.region,
            subnet.id,
        ),
    )?;
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\nusers:\n- name: fake\n  user: {{}}\ncurrent-context: fake\n",
            fake.url()
        ),
    )?;
    Ok(World {
        sim,
        fake,
        dir,
        env,
        network: net.id,
    })
}

fn flags(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        "kos-ccm".to_owned(),
        format!("--cloud-config={}", dir.join("cloud.conf").display()),
        format!("--kubeconfig={}", dir.join("kubeconfig").display()),
        "--cluster-name=prod".to_owned(),
        "--node-status-update-frequency=1s".to_owned(),
        "--node-monitor-period=500ms".to_owned(),
    ];
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

/// A run in a task, and its SIGTERM (send, or drop the sender).
type Running = (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), kos_ccm::run::RunError>>,
);

fn start(w: &World, extra: &[&str]) -> R<Running> {
    let opts = Cli::try_parse_from(flags(w.dir.path(), extra))?
        .run
        .check()?;
    let env = w.env.clone();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        kos_ccm::run::run(opts, &env, async {
            let _ = rx.await;
        })
        .await
    });
    Ok((tx, task))
}

/// An ACTIVE server named `name` on the nodes' network.
async fn server(w: &World, name: &str) -> R<String> {
    let s = admin(&w.sim, &w.dir).await?;
    support::active_server(&s, &w.network, name).await
}

fn holder(fake: &FakeKube) -> R<Option<String>> {
    Ok(fake
        .get::<Lease>(Some("kube-system"), "cloud-controller-manager")?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

fn free_port() -> R<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::test]
async fn a_run_initialises_nodes_serves_metrics_and_releases_its_lease() -> R {
    let w = world().await?;
    let id = server(&w, "node-a").await?;
    w.fake.insert(&kubelet_node("node-a"))?;
    let port = free_port()?.to_string();
    let (stop, task) = start(
        &w,
        &["--bind-address=127.0.0.1", &format!("--secure-port={port}")],
    )?;
    let node = wait_for("node-a initialised", || initialised(&w.fake, "node-a")).await?;
    assert_eq!(
        node.spec.and_then(|s| s.provider_id),
        Some(format!("openstack:///{id}"))
    );
    let held_by = wait_for("the Lease held", || holder(&w.fake)).await?;
    assert!(!held_by.is_empty());

    // The Service controller runs too: a LoadBalancer Service gets its floating IP.
    w.fake.insert(&support::web_service())?;
    let ip = wait_for("the Service's address", || {
        Ok(w.fake
            .get::<Service>(Some("default"), "web")?
            .and_then(|s| s.status)
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|i| i.into_iter().next())
            .and_then(|i| i.ip))
    })
    .await?;
    assert!(
        ip.starts_with("172.24.4."),
        "a floating IP of `public`: {ip}"
    );

    let base = format!("http://127.0.0.1:{port}");
    assert_eq!(reqwest::get(format!("{base}/healthz")).await?.status(), 200);
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains("openstack_api_requests_total{request=\"server_get\"}")
            || metrics.contains("openstack_api_requests_total{request=\"server_list\"}"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("cloudprovider_openstack_reconcile_total{operation=\"loadbalancer_ensure\"}"),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&w.sim.config().password),
        "no secret in metrics"
    );

    // SIGTERM: a clean stop that releases the Lease for the next replica.
    let _ = stop.send(());
    let result = tokio::time::timeout(DEADLINE, task).await??;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(holder(&w.fake)?, None, "the Lease is released on shutdown");
    Ok(())
}

#[tokio::test]
async fn leadership_hands_over_when_the_leader_stops() -> R {
    let w = world().await?;
    // A renewal margin of 5 s: a loaded machine must not make the first leader lose its Lease.
    let le = [
        "--secure-port=0",
        "--leader-elect-lease-duration=10s",
        "--leader-elect-renew-deadline=5s",
    ];
    let (stop_a, task_a) = start(&w, &le)?;
    let first = wait_for("a leader", || holder(&w.fake)).await?;
    let (stop_b, task_b) = start(&w, &le)?;
    // The first leader keeps the Lease while it runs: the second one waits.
    w.fake.insert(&kubelet_node("node-b"))?;
    server(&w, "node-b").await?;
    wait_for("node-b initialised by the leader", || {
        initialised(&w.fake, "node-b")
    })
    .await?;
    assert_eq!(holder(&w.fake)?.as_deref(), Some(first.as_str()));

    // The leader stops; the other replica takes the Lease and does the work from then on.
    let _ = stop_a.send(());
    tokio::time::timeout(DEADLINE, task_a)
        .await??
        .map_err(|e| e.to_string())?;
    let second = wait_for("a new leader", || {
        Ok(holder(&w.fake)?.filter(|h| *h != first))
    })
    .await?;
    assert_ne!(second, first);
    server(&w, "node-c").await?;
    w.fake.insert(&kubelet_node("node-c"))?;
    wait_for("node-c initialised by the new leader", || {
        initialised(&w.fake, "node-c")
    })
    .await?;

    let _ = stop_b.send(());
    tokio::time::timeout(DEADLINE, task_b)
        .await??
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// `kos-ccm bench-service`, the controller `kos bench ccm` runs so that it measures this binary:
/// told where the cloud and the API are on stdin, it answers `ready`, gives a Service its
/// address, answers a `resync` with `done`, and stops when its input ends.
#[tokio::test]
async fn the_bench_service_subcommand_serves_a_service_and_resyncs_on_stdin() -> R {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let w = world().await?;
    w.fake.insert(&support::node("node-1", "10.1.0.11"))?;
    let c = w.sim.config();
    let spec = kos_ccm::bench::BenchSpec {
        auth_url: w.sim.auth_url(),
        username: c.username.clone(),
        password: c.password.clone().into(),
        project: c.project.clone(),
        cloud_conf: std::fs::read_to_string(w.dir.path().join("cloud.conf"))?,
        kube_url: w.fake.url(),
        // The fast simulator's clock: its waits in thousandths.
        time_scale: 0.001,
        concurrency: 2,
        pending_poll_secs: 1.0,
    };
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kos-ccm"))
        .arg("bench-service")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    stdin
        .write_all(format!("{}\n", serde_json::to_string(&spec)?).as_bytes())
        .await
        .map_err(|e| format!("writing the spec: {e}"))?;
    let next = |line: Option<String>| line.ok_or("the process ended");
    let ready = tokio::time::timeout(DEADLINE, stdout.next_line()).await??;
    assert_eq!(next(ready)?, "ready");

    w.fake.insert(&support::web_service())?;
    wait_for("the Service's address", || {
        Ok(w.fake
            .get::<Service>(Some("default"), "web")?
            .and_then(|s| s.status?.load_balancer?.ingress)
            .filter(|i| !i.is_empty()))
    })
    .await?;

    stdin.write_all(b"resync\n").await?;
    let done = tokio::time::timeout(DEADLINE, stdout.next_line()).await??;
    assert_eq!(next(done)?, "done");
    drop(stdin);
    let status = tokio::time::timeout(DEADLINE, child.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}
