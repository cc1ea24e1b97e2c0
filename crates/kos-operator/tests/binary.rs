//! Two `kos-operator` processes (the real binary, leader election on, as their ServiceAccount with
//! the RBAC `kos-operator manifests` renders) manage a fleet: kos-kube-fake is the management
//! cluster, kos-sim (servers running kos's user_data) the cloud, reached as a real cloud and its
//! clusters' APIs through kos-sim's HTTP proxy (`HTTPS_PROXY`, as behind a bastion).
//!
//! Three Clusters applied with the real kubectl become Ready (`kubectl get clusters` shows them so),
//! one the CRD refuses is refused by kubectl with kos plan's message; a fourth whose spec kos refuses
//! (and the CRD cannot) is Degraded and costs nothing in the cloud; then one is upgraded 1.35 → 1.36 while another scales a pool and a
//! third is deleted; the leader is killed (-9) during the upgrade and the standby finishes it, with
//! no invariant of the simulated clusters violated (`/_sim/clusters`), nothing of the deleted one
//! left in the cloud, and no request outside the RBAC table.

mod support;
use support::{example, tagged};

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kos_operator::rbac::{CALLS, Scope};
use kos_operator::resource::Cluster;
use kos_sim::{Sim, SimConfig};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const NS: &str = "fleet";

fn cluster(name: &str, version: &str, workers: u32) -> Value {
    let mut spec = example("minimal.yaml")["spec"].clone();
    // One project, three node subnets: kos refuses one that overlaps another's.
    let n = ["one", "two", "three"]
        .iter()
        .position(|c| *c == name)
        .unwrap_or(9)
        + 1;
    spec["network"]["create"]["cidr"] = json!(format!("10.{n}.0.0/24"));
    // Behind a load balancer, so one control plane can be replaced by a successor (surge): with a
    // floating IP kos refuses to upgrade a lone control plane.
    spec["apiEndpoint"] = json!({"type": "loadBalancer"});
    spec["kubernetesVersion"] = json!(version);
    spec["nodePools"][0]["count"] = json!(workers);
    spec["identityRef"] = json!({"name": "cloud", "cloudName": "sim"});
    json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

struct Operator {
    name: &'static str,
    child: Child,
    kubeconfig: std::path::PathBuf,
    proxy: String,
    logs: std::path::PathBuf,
    /// Killed by the test: not started again.
    killed: bool,
}

impl Operator {
    /// As a Deployment does: a replica that exited on its own (a Lease lost on a loaded machine
    /// ends the process) is started again.
    fn restart_if_exited(&mut self) {
        if self.killed || !matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let again = start(self.name, &self.kubeconfig, &self.proxy, &self.logs);
        *self = again;
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(
    name: &'static str,
    kubeconfig: &std::path::Path,
    proxy: &str,
    logs: &std::path::Path,
) -> Operator {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{name}.log")))
        .expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args([
            "--leader-elect",
            "--leader-elect-namespace=kos-system",
            "--leader-elect-lease-duration=10",
            "--leader-elect-renew-margin=5",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--retry-period=1",
            "--resync-period=5",
        ])
        .env("POD_NAME", name)
        .env("HTTPS_PROXY", proxy)
        .env("RUST_LOG", "kos_operator=debug,info,openstack_sdk=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn kos-operator");
    Operator {
        name,
        child,
        kubeconfig: kubeconfig.to_path_buf(),
        proxy: proxy.to_owned(),
        logs: logs.to_path_buf(),
        killed: false,
    }
}

fn condition(c: &Cluster, kind: &str) -> Option<(String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.kind == kind)
        .map(|x| (x.status.clone(), x.message.clone()))
}

fn ready_at(c: &Cluster, generation: i64) -> bool {
    condition(c, "Ready").is_some_and(|(s, _)| s == "True")
        && c.status.as_ref().and_then(|s| s.observed_generation) == Some(generation)
}

/// Waits, bounded so a hang fails, for `done` over the Clusters; says what it saw last.
async fn until(
    api: &Api<Cluster>,
    what: &str,
    logs: &std::path::Path,
    operators: &mut [Operator],
    done: impl Fn(&[Cluster]) -> bool,
) {
    let mut last = Vec::new();
    for _ in 0..2400 {
        for o in operators.iter_mut() {
            o.restart_if_exited();
        }
        last = api.list(&Default::default()).await.expect("list").items;
        if done(&last) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut said = String::new();
    for f in std::fs::read_dir(logs).expect("logs") {
        let p = f.expect("entry").path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        said.push_str(&format!(
            "--- {}\n{}\n",
            p.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    let states: Vec<_> = last
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone(),
                c.metadata.generation,
                c.status.clone(),
            )
        })
        .collect();
    panic!("never {what}: {states:#?}\n{said}");
}

fn in_table(r: &kos_kube_fake::Request) -> bool {
    let resource = match (&r.resource, &r.subresource) {
        (Some(res), Some(sub)) => format!("{res}/{sub}"),
        (Some(res), None) => res.clone(),
        _ => return true, // discovery
    };
    let verb = format!("{:?}", r.verb).to_lowercase();
    CALLS.iter().any(|c| {
        c.group == r.group.as_deref().unwrap_or_default()
            && c.resource == resource
            && c.verbs.contains(&verb.as_str())
            && (c.names.is_empty() || r.name.as_deref().is_some_and(|n| c.names.contains(&n)))
            && match c.scope {
                Scope::Cluster => true,
                Scope::Own => r.namespace.as_deref() == Some("kos-system"),
            }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_is_made_changed_and_kept_through_a_leader_killed_mid_upgrade() {
    let mut cfg = SimConfig::fast();
    cfg.project_network = true;
    // 50x real time: three clusters' guests (kubelets, leases, controllers) ticking at 1000x would
    // take the simulator's lock more than this machine can give them.
    cfg.time_scale = 0.02;
    // Room for three clusters and their surges (a devstack project's quotas fit one).
    cfg.quotas = SimConfig::demo().quotas;
    let mut sim = Sim::start(cfg).await.expect("sim");
    assert!(sim.attach_guests(Arc::new(kos_guest::sim::SimGuests::new().expect("guests"))));
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    support::apply_manifests(&fake);
    fake.apply_json(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        "kubectl",
    )
    .expect("namespace");
    let client = fake.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    support::create_identity(&secrets, &sim).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = support::operator_kubeconfig(&fake, dir.path());
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("logs");
    let proxy = sim.proxy_url();
    let mut operators = [
        start("op-a", &kubeconfig, &proxy, &logs),
        start("op-b", &kubeconfig, &proxy, &logs),
    ];

    let api: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let apply = PatchParams::apply("kubectl");
    // Applied with the real kubectl (server-side, the field manager of the changes applied below);
    // a spec the CRD's rules refuse is refused by it with kos plan's message, before the operator
    // sees anything.
    let mut bad = cluster("bad", "1.30.2", 1);
    bad["spec"]["network"]["create"]["cidr"] = json!("10.9.0.0/24");
    let (ok, _, err) = support::kubectl(
        &fake,
        &["apply", "--server-side", "-f", "-"],
        Some(&serde_json::to_string(&bad).expect("json")),
    )
    .await;
    assert!(
        !ok && err.contains("`1.30.2` is outside the supported releases"),
        "kubectl apply of a release kos refuses: {err}"
    );
    let docs: Vec<String> = [("one", "1.35.2"), ("two", "1.36.4"), ("three", "1.36.4")]
        .iter()
        .map(|(name, version)| serde_saphyr::to_string(&cluster(name, version, 1)).expect("yaml"))
        .collect();
    let (ok, out, err) = support::kubectl(
        &fake,
        &["apply", "--server-side", "-f", "-"],
        Some(&format!("---\n{}", docs.join("---\n"))),
    )
    .await;
    assert!(ok, "kubectl apply: {out}{err}");
    until(&api, "three Clusters Ready", &logs, &mut operators, |cs| {
        cs.len() == 3 && cs.iter().all(|c| ready_at(c, 1))
    })
    .await;
    // kubectl's table: the CRD's printer columns read the status.
    let (ok, table, err) = support::kubectl(&fake, &["-n", NS, "get", "clusters"], None).await;
    assert!(ok, "kubectl get clusters: {err}");
    for (name, version) in [("one", "1.35.2"), ("two", "1.36.4")] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {table}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.get(1..3), Some(&["True", version][..]), "{table}");
        assert!(
            cells.get(3).is_some_and(|e| e.starts_with("https://")),
            "{table}"
        );
    }

    // A spec kos refuses that the CRD cannot (a label key: no rule reads a map's keys): Degraded
    // with kos's reason, and nothing of it in the cloud.
    let refused = "refused";
    let mut bad_label = cluster(refused, "1.36.4", 1);
    bad_label["spec"]["nodePools"][0]["labels"] = json!({"-tier": "web"});
    api.patch(refused, &apply, &Patch::Apply(bad_label))
        .await
        .expect("apply");
    until(
        &api,
        "the refused spec Degraded",
        &logs,
        &mut operators,
        |cs| {
            cs.iter().any(|c| {
                c.metadata.name.as_deref() == Some(refused)
                    && condition(c, "Degraded").is_some_and(|(s, m)| {
                        s == "True"
                            && m.contains("-tier")
                            && m.contains("must start with a letter or digit")
                    })
            })
        },
    )
    .await;
    assert_eq!(
        tagged(&sim, refused).await,
        0,
        "nothing made for a refused spec"
    );
    api.delete(refused, &DeleteParams::default())
        .await
        .expect("delete the refused one");
    until(&api, "the refused one gone", &logs, &mut operators, |cs| {
        cs.iter()
            .all(|c| c.metadata.name.as_deref() != Some(refused))
    })
    .await;

    // The upgrade, the scale-up and the delete at once.
    api.patch("one", &apply, &Patch::Apply(cluster("one", "1.36.4", 1)))
        .await
        .expect("upgrade");
    api.patch("two", &apply, &Patch::Apply(cluster("two", "1.36.4", 2)))
        .await
        .expect("scale");
    api.delete("three", &DeleteParams::default())
        .await
        .expect("delete");
    // The leader, killed once the upgrade is under way.
    until(&api, "the upgrade under way", &logs, &mut operators, |cs| {
        cs.iter().any(|c| {
            c.metadata.name.as_deref() == Some("one")
                && condition(c, "Progressing").is_some_and(|(s, _)| s == "True")
                && c.metadata.generation == Some(2)
        })
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kos-system");
    let holder = leases
        .get(kos_operator::rbac::LEASE_NAME)
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity)
        .expect("a holder");
    let leader = operators
        .iter()
        .position(|o| holder.starts_with(&format!("{}_", o.name)))
        .expect("the holder is one of ours");
    operators[leader].killed = true;
    operators[leader].child.kill().expect("kill -9");
    let _ = operators[leader].child.wait();

    until(
        &api,
        "the upgrade and the scale-up done, the third gone",
        &logs,
        &mut operators,
        |cs| {
            let one = cs
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some("one"));
            let two = cs
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some("two"));
            cs.len() == 2
                && one.is_some_and(|c| {
                    ready_at(c, 2)
                        && c.status
                            .as_ref()
                            .and_then(|s| s.kubernetes_version.as_deref())
                            == Some("1.36.4")
                })
                && two.is_some_and(|c| ready_at(c, 2))
        },
    )
    .await;
    assert_eq!(
        tagged(&sim, "three").await,
        0,
        "nothing of the deleted Cluster is left"
    );
    let clusters: Value = reqwest::get(format!("{}/_sim/clusters", sim.base_url()))
        .await
        .expect("admin")
        .json()
        .await
        .expect("json");
    for c in clusters.as_array().expect("clusters") {
        assert_eq!(c["violations"], json!([]), "{clusters}");
    }
    let one = clusters
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == "one")
        .expect("one");
    assert!(
        one["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["version"] == "v1.36.4" && n["ready"] == true),
        "{one}"
    );
    let two = clusters
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == "two")
        .expect("two");
    assert_eq!(two["nodes"].as_array().expect("nodes").len(), 3, "{two}");

    let sa = "system:serviceaccount:kos-system:kos-operator";
    let outside: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.user.as_deref() == Some(sa))
        .filter(|r| !in_table(r))
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert!(
        outside.is_empty(),
        "requests outside the RBAC table: {outside:#?}"
    );
    let denied: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.user.as_deref() == Some(sa) && r.status == 403)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(denied.is_empty(), "refused: {denied:#?}");
}
