//! Issue 12: after `kos up` is killed, one plain `kos up` finishes the job, whatever the killed run left:
//! a CCM credential whose secret it had just been given, volumes still creating, a load balancer still
//! PENDING_CREATE, servers still in BUILD whose bootstrap nobody followed.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use kos_cloud::Session;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::VolumeStatus;
use kos_cloud::model::compute::ServerStatus;
use kos_cloud::model::load_balancer::ProvisioningStatus;
use serde_json::{Value, json};
use support::{admin, cluster_dir, code, example, kill, kos, serve_with, session, spawn, text};

/// The minimal example behind a load balancer, its workers on boot volumes.
fn spec(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(example("minimal.yaml"))
        .expect("example")
        .replace("    type: floatingIP", "    type: loadBalancer")
        .replace(
            "      count: 2\n",
            "      count: 2\n      bootVolume:\n        sizeGB: 20\n",
        );
    let path = dir.join("resume.yaml");
    std::fs::write(&path, text).expect("write spec");
    path
}

/// Slow enough that a run can be killed while each kind of object is still in progress.
fn slow_cloud(dir: &Path) -> PathBuf {
    let path = dir.join("sim.yaml");
    std::fs::write(
        &path,
        "latency:\n  per_call_secs: 0.0\n  server_boot_secs: 200\n  lb_create_secs: 300\n  \
         volume_create_secs: 100\n  server_delete_secs: 5\n  lb_delete_secs: 10\n  volume_delete_secs: 3\n",
    )
    .expect("write sim config");
    path
}

/// What of cluster `demo` is still in progress, as kos-cloud sees it.
async fn in_progress(s: &Session) -> Vec<&'static str> {
    let tag = TagQuery::all(["kos-cluster=demo"]);
    let mut found = Vec::new();
    if let Ok(volumes) = s.block_storage().list_volumes(&Default::default()).await
        && volumes.iter().any(|v| v.status == VolumeStatus::Creating)
    {
        found.push("volume");
    }
    if let Ok(lbs) = s
        .load_balancer()
        .list_load_balancers(&Default::default())
        .await
        && lbs
            .iter()
            .any(|l| l.provisioning_status == ProvisioningStatus::PendingCreate)
    {
        found.push("load balancer");
    }
    if let Ok(servers) = s.compute().list_servers(&tag).await
        && servers.iter().any(|x| x.status == ServerStatus::Build)
    {
        found.push("server");
    }
    found
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every node's bootstrap was followed to its end ("exit 0 means the cluster is up").
fn assert_followed(o: &Output, nodes: &[&str]) {
    let out = stdout(o);
    for n in nodes {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(n) && l.contains("bootstrap ok")),
            "{n} not followed to its end: {}",
            text(o)
        );
    }
    assert!(!text(o).contains("not followed"), "{}", text(o));
}

fn assert_converged(d: &Path, clouds: &Path, spec: &str) {
    let st = kos(
        d,
        Some(clouds),
        &[
            "status", "demo", "--cloud", "sim", "-f", spec, "--output", "json",
        ],
    );
    let v: Value = serde_json::from_slice(&st.stdout).expect("status JSON");
    assert_eq!(v["duplicates"], json!([]), "{v}");
    assert_eq!(v["not_converged"], json!([]), "{v}");
}

#[test]
fn a_rerun_waits_for_what_a_killed_run_left_in_progress_and_follows_every_bootstrap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve_with(d, "0.02", Some(&slow_cloud(d)));
    let spec = spec(d);
    let spec = spec.to_str().expect("utf8");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let s = rt.block_on(session(&served.clouds));
    for target in ["volume", "load balancer", "server"] {
        let run = spawn(d, &served.clouds, &["up", "-f", spec, "--cloud", "sim"]);
        let deadline = Instant::now() + Duration::from_secs(180);
        while !rt.block_on(in_progress(&s)).contains(&target) {
            assert!(
                Instant::now() < deadline,
                "no {target} in progress within 180 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        kill(run);
        let left = rt.block_on(in_progress(&s));
        let up = kos(
            d,
            Some(&served.clouds),
            &["up", "-f", spec, "--cloud", "sim"],
        );
        assert_eq!(
            code(&up),
            0,
            "killed with {left:?} in progress: {}",
            text(&up)
        );
        assert_followed(&up, &["cp-0", "workers-0", "workers-1"]);
        assert_converged(d, &served.clouds, spec);
        let down = kos(d, Some(&served.clouds), &["down", "demo", "--cloud", "sim"]);
        assert_eq!(code(&down), 0, "{}", text(&down));
    }
}

fn ccm_file(d: &Path) -> PathBuf {
    cluster_dir(d, "sim", "demo").join("ccm-credential.json")
}

/// Blocks every server create for a while (Retry-After), so that a run sits between making the CCM
/// credential and booting the first server.
fn hold_server_creates(base: &str) {
    let (status, _) = admin(
        base,
        reqwest::Method::POST,
        "/_sim/faults",
        Some(
            json!({"method": "POST", "path": "^/compute/v2.1/servers$", "status": 503, "retry_after": 30}),
        ),
    );
    assert_eq!(status, 201);
}

fn release_server_creates(base: &str) {
    let (status, _) = admin(base, reqwest::Method::DELETE, "/_sim/faults", None);
    assert_eq!(status, 204);
}

#[test]
fn the_ccm_credential_survives_a_kill_and_a_lost_one_is_replaced_while_nothing_uses_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve_with(d, "0.05", None);
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = || {
        kos(
            d,
            Some(&served.clouds),
            &["up", "-f", spec, "--cloud", "sim"],
        )
    };

    // Killed after Keystone returned the secret, before any server: the secret was stored at once.
    hold_server_creates(&served.base);
    let run = spawn(d, &served.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ccm_file(d).exists() {
        assert!(
            Instant::now() < deadline,
            "the credential's secret was not stored while the run went on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(run);
    release_server_creates(&served.base);
    let o = up();
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        !text(&o).contains("recreate-ccm-credential"),
        "{}",
        text(&o)
    );
    let down = kos(d, Some(&served.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));

    // The secret lost (say, another machine's run was killed) while no server uses the credential:
    // the next run replaces it without being asked.
    hold_server_creates(&served.base);
    let run = spawn(d, &served.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ccm_file(d).exists() {
        assert!(Instant::now() < deadline, "no credential stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(run);
    std::fs::remove_file(ccm_file(d)).expect("lose the secret");
    release_server_creates(&served.base);
    let o = up();
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("replacing it"), "{}", text(&o));
    // The new one is stored at once, and the run says where (on stderr).
    let stored = format!(
        "kos: the CCM's application credential is stored in {} (0600)",
        ccm_file(d).display()
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&stored),
        "{}",
        text(&o)
    );
    assert!(ccm_file(d).exists());
    assert_converged(d, &served.clouds, spec);
}
