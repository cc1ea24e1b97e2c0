//! Issue 23: "kill -9 of the operator at random moments of each of these, and the next leader
//! finishes", for the repair path and the autoscaler's.
//!
//! Two real `kos-operator` processes (leader election on, as their ServiceAccount, every replica
//! serving cluster-autoscaler's externalgrpc endpoint over mutual TLS) manage one Cluster on
//! kos-sim (servers running kos's user_data, its clusters' APIs through kos-sim's proxy as
//! `HTTPS_PROXY`), kos-kube-fake the management cluster. The leader is killed with SIGKILL at
//! moments drawn from a seeded RNG (the seed is printed; `KOS_KILL_SEED` repeats a run) and a fresh
//! replica is started in its place, as a Deployment would:
//!
//! - a worker's server deleted behind kos's back: two leaders killed while it is made again; the
//!   Cluster ends Ready on its two workers, the server made again, no other server touched, none
//!   leaked;
//! - the autoscaler's `IncreaseSize` of a pool at 0, at the leader's endpoint: the leader killed
//!   while the node is made (or while it answers: the call is made again, as the autoscaler would);
//!   the next leader serves the endpoint, the target size kept, and the node joins Ready with the
//!   pool's labels;
//! - its `DeleteNodes` of that node: the leader killed while it leaves (or while it answers); that
//!   node and no other is gone, the pool's count 0, never lowered twice.
//!
//! After each, the cloud holds exactly the servers the spec asks for and the simulated cluster
//! recorded no invariant violation (`/_sim/clusters`). Nothing here asserts a duration: the waits
//! are bounded only so that a hang fails.

mod support;
use support::SimReach;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::events::v1::Event;
use kos_cloud::model::TagQuery;
use kos_operator::autoscaler::proto::cloud_provider_client::CloudProviderClient;
use kos_operator::autoscaler::proto::*;
use kos_operator::resource::Cluster;
use kos_sim::{Sim, SimConfig};
use kube::api::{Api, Patch, PatchParams};
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// The namespace of the Cluster (support's `workload` reads `demo-kubeconfig` from it).
const NS: &str = "default";
const NAME: &str = "demo";
/// The autoscaled pool.
const POOL: &str = "batch";
/// How long any one wait may take before the test fails (a hang, not a slow machine).
const PATIENCE: Duration = Duration::from_secs(20 * 60);

/// A CA that signs the endpoint's certificate and the autoscaler's.
struct Ca {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// `(cert PEM, key PEM)` for `cn`.
    fn sign(&self, cn: &str, sans: &[&str], client: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// One `kos-operator` process.
struct Replica {
    name: String,
    child: Child,
    /// Its externalgrpc endpoint.
    grpc: SocketAddr,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free now (the replica binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The operator's replicas, as its Deployment keeps them: two running, one that died replaced by a
/// fresh one (a new name, so each process has its own log).
struct Fleet {
    replicas: Vec<Replica>,
    started: usize,
    kubeconfig: PathBuf,
    proxy: String,
    logs: PathBuf,
    tls: PathBuf,
    leases: Api<Lease>,
}

impl Fleet {
    fn spawn(&mut self) {
        let name = format!("op-{}", self.started);
        self.started += 1;
        let port = free_port();
        let log = std::fs::File::create(self.logs.join(format!("{name}.log"))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--autoscaler-bind-address=127.0.0.1:{port}"))
            .arg(format!("--autoscaler-tls-dir={}", self.tls.display()))
            .args([
                "--leader-elect",
                "--leader-elect-namespace=kos-system",
                // A killed leader's Lease runs out in 6 s (nothing released it); renewed every
                // 3 s, a 3 s stall of a loaded machine is survived.
                "--leader-elect-lease-duration=6",
                "--leader-elect-renew-margin=3",
                "--leader-elect-retry-period=1",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--retry-period=1",
                "--resync-period=5",
            ])
            .env("POD_NAME", &name)
            .env("HTTPS_PROXY", &self.proxy)
            .env("RUST_LOG", "kos_operator=debug,info,openstack_sdk=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn kos-operator");
        eprintln!("kills: started {name}");
        self.replicas.push(Replica {
            name,
            child,
            grpc: SocketAddr::from(([127, 0, 0, 1], port)),
        });
    }

    /// A replica that exited on its own (a Lease lost on a loaded machine ends the process) is
    /// replaced, as its Deployment would.
    fn restart_exited(&mut self) {
        let before = self.replicas.len();
        self.replicas.retain_mut(|r| match r.child.try_wait() {
            Ok(Some(status)) => {
                eprintln!("kills: {} exited on its own ({status})", r.name);
                false
            }
            _ => true,
        });
        for _ in self.replicas.len()..before {
            self.spawn();
        }
    }

    /// Sleeps `d`, keeping two replicas running.
    async fn pause(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.restart_exited();
            let left = end.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_millis(250))).await;
        }
    }

    /// The replica holding the Lease, once a running one does (after a kill the Lease runs out
    /// first: nothing released it).
    async fn leader(&mut self) -> usize {
        let start = Instant::now();
        loop {
            self.restart_exited();
            let holder = self
                .leases
                .get_opt(kos_operator::rbac::LEASE_NAME)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity);
            if let Some(h) = &holder
                && let Some(i) = self
                    .replicas
                    .iter()
                    .position(|r| h.starts_with(&format!("{}_", r.name)))
            {
                return i;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no running replica took the Lease (holder {holder:?})\n{}",
                self.tails()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// kill -9 of the leader, and a fresh replica in its place; the killed one's name.
    async fn kill_leader(&mut self) -> String {
        let i = self.leader().await;
        let mut r = self.replicas.remove(i);
        r.child.kill().expect("kill -9");
        let _ = r.child.wait();
        let name = format!("{} (at {})", r.name, time::OffsetDateTime::now_utc());
        drop(r);
        self.spawn();
        name
    }

    /// Waits, bounded so that a hang fails, until `done` gives something; keeps two replicas.
    async fn until<T, F: Future<Output = Option<T>>>(
        &mut self,
        what: &str,
        mut done: impl FnMut() -> F,
    ) -> T {
        let start = Instant::now();
        loop {
            self.restart_exited();
            if let Some(t) = done().await {
                eprintln!("kills: {what} after {:.1?}", start.elapsed());
                return t;
            }
            if start.elapsed() > PATIENCE {
                let events = timeline(&self.leases.clone().into_client()).await;
                panic!(
                    "never {what}\n{}the Cluster's Events:\n{events}",
                    self.tails()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The last lines of every replica's log.
    fn tails(&self) -> String {
        let mut said = String::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.logs)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.sort();
        for p in files {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            said.push_str(&format!(
                "--- {}\n{}\n",
                p.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        said
    }
}

/// The autoscaler's client of the endpoint at `addr`, with a certificate for this Cluster.
async fn dial(addr: SocketAddr, ca: &Ca) -> Option<CloudProviderClient<Channel>> {
    let (cert, key) = ca.sign(&format!("{NS}/{NAME}"), &[], true);
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .identity(Identity::from_pem(cert, key))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{addr}"))
        .expect("uri")
        .tls_config(tls)
        .expect("tls")
        .connect()
        .await
        .ok()?;
    let mut client = CloudProviderClient::new(channel);
    // TLS 1.3 completes the client's handshake before the server has looked: a call says.
    client.refresh(RefreshRequest {}).await.ok()?;
    Some(client)
}

/// The Cluster's servers: name → id.
async fn servers(session: &kos_cloud::Session) -> BTreeMap<String, String> {
    session
        .compute()
        .list_servers(&TagQuery::all([format!("kos-cluster={NAME}")]))
        .await
        .expect("servers")
        .into_iter()
        .map(|s| (s.name, s.id))
        .collect()
}

/// `GET /_sim/clusters`: the simulated clusters as the guest runtime knows them.
async fn sim_clusters(sim: &Sim) -> Value {
    reqwest::get(format!("{}/_sim/clusters", sim.base_url()))
        .await
        .expect("clusters")
        .json()
        .await
        .expect("json")
}

/// Every node of the simulated cluster: name → (the server its kubelet runs on, Ready).
async fn nodes(sim: &Sim) -> BTreeMap<String, (Option<String>, bool)> {
    let clusters = sim_clusters(sim).await;
    clusters
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == NAME)
        .flat_map(|c| c["nodes"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| {
            let name = n["name"].as_str()?.to_owned();
            let server = n["server"].as_str().map(str::to_owned);
            Some((name, (server, n["ready"] == true)))
        })
        .collect()
}

/// No simulated cluster recorded an invariant violation.
async fn no_violation(sim: &Sim) {
    let clusters = sim_clusters(sim).await;
    for c in clusters.as_array().expect("clusters") {
        assert_eq!(c["violations"], json!([]), "{}: {c:#}", c["name"]);
    }
}

/// The cloud's servers are the ones the spec asks for, each with a Ready node on it, and the
/// Cluster says Ready at its generation: what "finished" means here.
async fn settled(
    api: &Api<Cluster>,
    session: &kos_cloud::Session,
    sim: &Sim,
    want: &[&str],
) -> Option<BTreeMap<String, String>> {
    let c = api.get_opt(NAME).await.ok()??;
    let status = c.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True");
    if !ready || status.observed_generation != c.metadata.generation {
        return None;
    }
    let servers = servers(session).await;
    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    if names != want {
        return None;
    }
    let nodes = nodes(sim).await;
    let all_ready = nodes.len() == want.len()
        && servers
            .iter()
            .all(|(name, id)| nodes.get(name) == Some(&(Some(id.clone()), true)));
    all_ready.then_some(servers)
}

/// The pool's `count` in the Cluster's spec.
async fn count(api: &Api<Cluster>, pool: &str) -> u32 {
    let c = api.get(NAME).await.expect("cluster");
    c.spec
        .cluster
        .node_pools
        .expect("pools")
        .iter()
        .find(|p| p.name == pool)
        .expect("pool")
        .count
}

/// The Cluster's Events, oldest first: when, which replica, what (says where each kill landed).
async fn timeline(client: &kube::Client) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let mut list = events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.sort_by_key(|e| {
        e.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    });
    list.iter()
        .map(|e| {
            let at = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0.to_string())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                .unwrap_or_default();
            format!(
                "  {at} {} {}: {}\n",
                e.reporting_instance.as_deref().unwrap_or("?"),
                e.reason.as_deref().unwrap_or("?"),
                e.note.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// The autoscaled pool's id, as the autoscaler names it.
fn pool() -> String {
    POOL.to_owned()
}

/// The autoscaler's client of the leader's endpoint (every replica serves it; the leader's shows
/// that the one that took over does).
async fn dial_leader(fleet: &mut Fleet, ca: &Ca) -> CloudProviderClient<Channel> {
    let leader = fleet.leader().await;
    let addr = fleet.replicas[leader].grpc;
    fleet
        .until("the leader's endpoint answers", || dial(addr, ca))
        .await
}

/// The pool's target size, after a `Refresh` (the start of the autoscaler's loop).
async fn target(ca: &mut CloudProviderClient<Channel>) -> i32 {
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    ca.node_group_target_size(NodeGroupTargetSizeRequest { id: pool() })
        .await
        .expect("target size")
        .into_inner()
        .target_size
}

/// The pool's instances, after a `Refresh`.
async fn group_nodes(ca: &mut CloudProviderClient<Channel>) -> Vec<Instance> {
    ca.refresh(RefreshRequest {}).await.expect("refresh");
    ca.node_group_nodes(NodeGroupNodesRequest { id: pool() })
        .await
        .expect("nodes")
        .into_inner()
        .instances
}

/// A moment drawn in `[0, span]`.
fn moment(rng: &mut rand::rngs::StdRng, span: Duration) -> Duration {
    span.mul_f64(rng.random_range(0.0..=1.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_leader_finishes_a_repair_and_the_autoscalers_changes_after_kill_9() {
    let seed = match std::env::var("KOS_KILL_SEED") {
        Ok(s) => s.trim().parse::<u64>().expect("KOS_KILL_SEED: a u64"),
        Err(_) => rand::random(),
    };
    eprintln!("kills: seed {seed} (KOS_KILL_SEED={seed} repeats its moments)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let mut cfg = SimConfig::fast();
    cfg.project_network = true;
    // 10x real time: a worker's bootstrap outlasts the Lease a killed leader leaves behind, so
    // the next leader takes over a repair or a scale the cloud has not finished on its own.
    cfg.time_scale = 0.1;
    cfg.quotas = SimConfig::demo().quotas;
    let mut sim = Sim::start(cfg).await.expect("sim");
    assert!(sim.attach_guests(Arc::new(kos_guest::sim::SimGuests::new().expect("guests"))));
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    support::apply_manifests(&fake);
    let client = fake.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let identity = support::create_identity(&secrets, &sim).await;

    let dir = tempfile::tempdir().expect("tempdir");
    // KOS_KILL_LOGS keeps the replicas' logs where it says (they go with the tempdir otherwise).
    let logs = match std::env::var_os("KOS_KILL_LOGS") {
        Some(p) => PathBuf::from(p),
        None => dir.path().join("logs"),
    };
    std::fs::create_dir_all(&logs).expect("logs");
    eprintln!("kills: logs in {}", logs.display());
    // The endpoint's TLS directory, every replica's: one CA signs its certificate and the
    // autoscaler's.
    let ca = Ca::new("kos-autoscalers");
    let tls = dir.path().join("autoscaler-tls");
    std::fs::create_dir(&tls).expect("tls dir");
    let (cert, key) = ca.sign("kos-operator", &["localhost"], false);
    std::fs::write(tls.join("tls.crt"), cert).expect("tls.crt");
    std::fs::write(tls.join("tls.key"), key).expect("tls.key");
    std::fs::write(tls.join("ca.crt"), &ca.pem).expect("ca.crt");
    let mut fleet = Fleet {
        replicas: Vec::new(),
        started: 0,
        kubeconfig: support::operator_kubeconfig(&fake, dir.path()),
        proxy: sim.proxy_url(),
        logs: logs.clone(),
        tls,
        leases: Api::namespaced(client.clone(), "kos-system"),
    };
    fleet.spawn();
    fleet.spawn();

    // One control plane, two workers, and a pool the autoscaler grows from 0.
    let mut spec = support::example("minimal.yaml")["spec"].clone();
    let workers = spec["nodePools"][0].clone();
    let mut batch = workers.clone();
    batch["name"] = json!(POOL);
    batch["count"] = json!(0);
    batch["autoscaling"] = json!({"min": 0, "max": 2});
    batch["labels"] = json!({"tier": "batch"});
    spec["nodePools"] = json!([workers, batch]);
    spec["identityRef"] = json!({"name": identity.name, "cloudName": identity.cloud_name});
    let api: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let applied = Instant::now();
    api.patch(
        NAME,
        &PatchParams::apply("kubectl"),
        &Patch::Apply(json!({
            "apiVersion": "kos.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": spec,
        })),
    )
    .await
    .expect("apply");
    let session = support::session(&sim).await;
    let shape = ["kos-demo-cp-0", "kos-demo-workers-0", "kos-demo-workers-1"];
    let formed = fleet
        .until("the Cluster Ready on two workers", || {
            settled(&api, &session, &sim, &shape)
        })
        .await;
    // The spans the kills are drawn in follow how long this machine took to make the cluster
    // (about 20 s at 10x on an idle one). A worker made again takes about two thirds of that, a
    // killed leader's Lease 6 s more, during which the cloud goes on making it: the first kill is
    // drawn in the first quarter, the second in the next leader's first eighth, so that both land
    // while the repair is under way (a kill that lands after it is said so, and still counts).
    let formed_in = applied.elapsed();
    let span = formed_in / 4;
    eprintln!("kills: formed in {formed_in:.1?}, moments drawn in spans of {span:.1?}");
    let objects = support::tagged(&sim, NAME).await;

    // The repair: workers-0's server deleted behind kos's back, two leaders killed meanwhile.
    let deleted = formed["kos-demo-workers-0"].clone();
    session
        .compute()
        .delete_server(&deleted)
        .await
        .expect("delete workers-0's server");
    let repair = Instant::now();
    for k in 1..=2 {
        // Each moment is drawn from when a replica leads (the first, or the one that took over).
        fleet.leader().await;
        let at = moment(&mut rng, span / k);
        fleet.pause(at).await;
        let done = settled(&api, &session, &sim, &shape)
            .await
            .is_some_and(|s| s["kos-demo-workers-0"] != deleted);
        let killed = fleet.kill_leader().await;
        eprintln!(
            "kills: repair kill {k}: {killed} at {at:.1?} after a leader, {:.1?} into the repair{}",
            repair.elapsed(),
            if done {
                " (the repair had finished)"
            } else {
                ""
            }
        );
    }
    let repaired = fleet
        .until("the repair finished by the next leader", || async {
            settled(&api, &session, &sim, &shape)
                .await
                .filter(|s| s["kos-demo-workers-0"] != deleted)
        })
        .await;
    for w in ["kos-demo-cp-0", "kos-demo-workers-1"] {
        assert_eq!(repaired[w], formed[w], "{w}'s server was replaced");
    }
    assert_eq!(
        support::tagged(&sim, NAME).await,
        objects,
        "the cloud holds another number of the cluster's objects than before the repair"
    );
    no_violation(&sim).await;

    // The autoscaler grows the pool from 0, at the leader's endpoint; the leader killed at a
    // moment drawn from the call on (it may be serving the call).
    let mut ca_client = dial_leader(&mut fleet, &ca).await;
    assert_eq!(target(&mut ca_client).await, 0);
    let grown = [
        "kos-demo-batch-0",
        "kos-demo-cp-0",
        "kos-demo-workers-0",
        "kos-demo-workers-1",
    ];
    let scale = Instant::now();
    // A node made and joined: about two thirds of the cluster's making.
    let at = moment(&mut rng, span * 2);
    let (answer, (killed, done)) = tokio::join!(
        ca_client.node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 1,
            id: pool()
        }),
        async {
            fleet.pause(at).await;
            let done = settled(&api, &session, &sim, &grown).await.is_some();
            (fleet.kill_leader().await, done)
        }
    );
    eprintln!(
        "kills: scale-up kill: {killed}, {at:.1?} after IncreaseSize{}",
        if done { " (the node had joined)" } else { "" }
    );
    // The next leader serves the endpoint, and the target size holds there. A call the kill cut
    // off is made again, as the autoscaler does at its next loop when its target is not there.
    let mut ca_client = dial_leader(&mut fleet, &ca).await;
    if let Err(e) = answer {
        eprintln!("kills: IncreaseSize cut off by the kill ({e}): asked again");
        if target(&mut ca_client).await == 0 {
            ca_client
                .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                    delta: 1,
                    id: pool(),
                })
                .await
                .expect("increase, again");
        }
    }
    assert_eq!(count(&api, POOL).await, 1);
    assert_eq!(target(&mut ca_client).await, 1);
    let scaled = fleet
        .until("the scale-up finished by the next leader", || {
            settled(&api, &session, &sim, &grown)
        })
        .await;
    eprintln!("kills: scale-up took {:.1?}", scale.elapsed());
    for (w, id) in &repaired {
        assert_eq!(&scaled[w], id, "{w}'s server was replaced");
    }
    // The node has the pool's labels, and the autoscaler sees it running in its group.
    let workload = support::workload(&secrets, &SimReach(sim.app().clone())).await;
    let node = Api::<Node>::all(workload)
        .get("kos-demo-batch-0")
        .await
        .expect("the pool's node");
    let labels = node.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("tier").map(String::as_str),
        Some("batch"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("kos/pool").map(String::as_str),
        Some(POOL),
        "{labels:?}"
    );
    let server = scaled["kos-demo-batch-0"].clone();
    let instances = group_nodes(&mut ca_client).await;
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0].id, format!("openstack:///{server}"));
    assert_eq!(
        instances[0].status.clone().expect("status").instance_state,
        instance_status::InstanceState::InstanceRunning as i32
    );
    no_violation(&sim).await;

    // The autoscaler removes exactly that node; the leader killed at a moment drawn from the call
    // on, in a shorter span: a drain of an empty node and a deletion take about a second.
    let delete = NodeGroupDeleteNodesRequest {
        nodes: vec![ExternalGrpcNode {
            provider_id: format!("openstack:///{server}"),
            name: "kos-demo-batch-0".into(),
            ..Default::default()
        }],
        id: pool(),
    };
    let shrink = Instant::now();
    let at = moment(&mut rng, span / 5);
    let (answer, (killed, done)) =
        tokio::join!(ca_client.node_group_delete_nodes(delete.clone()), async {
            fleet.pause(at).await;
            let done = settled(&api, &session, &sim, &shape).await.is_some();
            (fleet.kill_leader().await, done)
        });
    eprintln!(
        "kills: scale-down kill: {killed}, {at:.1?} after DeleteNodes{}",
        if done { " (the node had gone)" } else { "" }
    );
    let mut ca_client = dial_leader(&mut fleet, &ca).await;
    if let Err(e) = answer {
        // Asked again, as the autoscaler does for a node it still finds unneeded; a call that
        // had lowered the count before it was cut off must not lower it twice.
        eprintln!("kills: DeleteNodes cut off by the kill ({e}): asked again");
        match ca_client.node_group_delete_nodes(delete).await {
            Ok(_) => {}
            // Only once it is gone: the first call took effect.
            Err(e) if e.code() == tonic::Code::NotFound => assert!(
                !servers(&session).await.contains_key("kos-demo-batch-0"),
                "DeleteNodes, again: {e:?}"
            ),
            Err(e) => panic!("DeleteNodes, again: {e:?}"),
        }
    }
    assert_eq!(count(&api, POOL).await, 0);
    let shrunk = fleet
        .until("the scale-down finished by the next leader", || {
            settled(&api, &session, &sim, &shape)
        })
        .await;
    eprintln!("kills: scale-down took {:.1?}", shrink.elapsed());
    assert_eq!(shrunk, repaired, "another server than the named one went");
    assert_eq!(count(&api, POOL).await, 0);
    assert_eq!(target(&mut ca_client).await, 0);
    let instances = group_nodes(&mut ca_client).await;
    assert!(instances.is_empty(), "{instances:?}");
    assert_eq!(
        support::tagged(&sim, NAME).await,
        objects,
        "the cloud holds another number of the cluster's objects than before the scale-up"
    );
    no_violation(&sim).await;

    // Turns go by (a resync every 5 s): nothing more changes.
    fleet.pause(Duration::from_secs(20)).await;
    let later = fleet
        .until("the cluster settled, turns later", || {
            settled(&api, &session, &sim, &shape)
        })
        .await;
    assert_eq!(
        later, repaired,
        "a server changed after the cluster had settled"
    );
    no_violation(&sim).await;
    eprintln!("kills: the Cluster's Events\n{}", timeline(&client).await);
    drop(fleet);
}
