//! The operator's process as its Deployment runs it, two replicas as their ServiceAccount against
//! kos-kube-fake: the probes and `/metrics` answer as a kubelet and Prometheus read them, the
//! standby is ready and not leading, and SIGTERM (a rollout, a drained node) ends a replica with
//! exit 0 and its Lease released, so the standby leads at once rather than after the Lease runs
//! out (ten minutes here, past the test's waits: a standby that leads proves the release).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const NS: &str = "kos-system";

struct Replica {
    name: &'static str,
    child: Child,
    probes: u16,
    metrics: u16,
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

fn start(name: &'static str, kubeconfig: &std::path::Path, logs: &std::path::Path) -> Replica {
    let (probes, metrics) = (free_port(), free_port());
    let log = std::fs::File::create(logs.join(format!("{name}.log"))).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{probes}"))
        .args([
            "--leader-elect",
            "--leader-elect-namespace=kos-system",
            "--leader-elect-lease-duration=600",
            "--leader-elect-renew-margin=60",
        ])
        .env("POD_NAME", name)
        .env("RUST_LOG", "kos_operator=debug,info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn kos-operator");
    Replica {
        name,
        child,
        probes,
        metrics,
    }
}

/// `GET` on a replica's port: status, `Content-Type`, body; `None` while nothing answers.
async fn get(port: u16, path: &str) -> Option<(u16, String, String)> {
    let r = reqwest::Client::builder()
        .no_proxy()
        .build()
        .ok()?
        .get(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    let ty = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Some((status, ty, r.text().await.ok()?))
}

/// Waits (bounded, so a hang fails rather than blocks) until `done` says yes.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    logs: &std::path::Path,
    done: impl Fn() -> F,
) {
    for _ in 0..600 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut text = String::new();
    for e in std::fs::read_dir(logs).expect("logs").flatten() {
        text += &format!(
            "--- {}\n{}\n",
            e.path().display(),
            std::fs::read_to_string(e.path()).unwrap_or_default()
        );
    }
    panic!("never {what}\n{text}");
}

fn leading_line(value: u8) -> String {
    format!(
        "leader_election_master_status{{name=\"{}\"}} {value}",
        kos_operator::rbac::LEASE_NAME
    )
}

async fn metrics_say(r: &Replica, line: &str) -> bool {
    get(r.metrics, "/metrics")
        .await
        .is_some_and(|(s, _, body)| s == 200 && body.lines().any(|l| l == line))
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(kos_operator::rbac::LEASE_NAME)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

/// SIGTERM, as the kubelet sends it, then the exit status (bounded wait).
async fn terminate(r: &mut Replica) -> std::process::ExitStatus {
    let sent = Command::new("kill")
        .args(["-TERM", &r.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    for _ in 0..600 {
        if let Some(s) = r.child.try_wait().expect("wait") {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} did not stop on SIGTERM", r.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_metrics_and_sigterm_hand_the_lease_over() {
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
    support::apply_manifests(&fake);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = support::operator_kubeconfig(&fake, dir.path());
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("logs");
    let client = fake.client().expect("client");
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);

    let mut a = start("op-a", &kubeconfig, &logs);
    until("op-a leads", &logs, || async {
        holder(&leases)
            .await
            .is_some_and(|h| h.starts_with("op-a_"))
    })
    .await;
    let mut b = start("op-b", &kubeconfig, &logs);
    let (standing_by, leading) = (leading_line(0), leading_line(1));

    // The kubelet's probes: both live, both ready (a standby takes over without a restart).
    for r in [&a, &b] {
        until(&format!("{} ready", r.name), &logs, || async {
            get(r.probes, "/readyz")
                .await
                .is_some_and(|(s, _, _)| s == 200)
        })
        .await;
        let (status, _, body) = get(r.probes, "/healthz").await.expect("healthz");
        assert_eq!((status, body.as_str()), (200, "ok"), "{}", r.name);
    }
    until("op-b stands by", &logs, || metrics_say(&b, &standing_by)).await;

    // The leader reconciles: a Cluster whose spec kos refuses needs no cloud.
    let mut spec = support::example("minimal.yaml")["spec"].clone();
    spec["identityRef"] = json!({"name": "cloud", "cloudName": "sim"});
    spec["nodePools"][0]["labels"] = json!({"-tier": "web"});
    let cluster = json!({
        "apiVersion": "kos.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "refused", "namespace": "default"},
        "spec": spec,
    });
    Api::<kos_operator::resource::Cluster>::namespaced(client.clone(), "default")
        .patch(
            "refused",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(&cluster),
        )
        .await
        .expect("apply");
    let reconciled =
        "controller_runtime_reconcile_total{controller=\"cluster\",result=\"success\"}";
    until("op-a counts its reconcile", &logs, || async {
        get(a.metrics, "/metrics")
            .await
            .is_some_and(|(_, _, body)| {
                body.lines()
                    .any(|l| l.starts_with(reconciled) && !l.ends_with(" 0"))
            })
    })
    .await;
    let (status, ty, body) = get(a.metrics, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    // Prometheus's scrape negotiates OpenMetrics; the body ends as the format requires.
    assert!(ty.starts_with("application/openmetrics-text"), "{ty}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    for line in [
        leading.clone(),
        "controller_runtime_active_workers{controller=\"cluster\"}".to_owned(),
        "# TYPE controller_runtime_reconcile_time_seconds histogram".to_owned(),
    ] {
        assert!(
            body.lines().any(|l| l.starts_with(&line)),
            "no {line:?} in\n{body}"
        );
    }
    assert!(
        !metrics_say(&b, reconciled).await
            && get(b.metrics, "/metrics")
                .await
                .is_some_and(|(_, _, body)| !body
                    .lines()
                    .any(|l| l.starts_with(reconciled) && !l.ends_with(" 0"))),
        "the standby reconciled"
    );

    // SIGTERM: exit 0, the Lease released, and the standby leads long before it would expire.
    let status = terminate(&mut a).await;
    assert!(status.success(), "op-a exited {status}");
    until("op-b leads", &logs, || async {
        holder(&leases)
            .await
            .is_some_and(|h| h.starts_with("op-b_"))
    })
    .await;
    until("op-b says it leads", &logs, || metrics_say(&b, &leading)).await;
    let status = terminate(&mut b).await;
    assert!(status.success(), "op-b exited {status}");
}
