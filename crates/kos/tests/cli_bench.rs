//! `kos bench apply`, `kos bench ccm`, `kos bench csi` and `kos bench operator` run end to end and report in JSON. Figures are a benchmark's,
//! never asserted (the clock runs 500x fast here, so they are noisy anyway).

use std::process::Command;

const KOS: &str = env!("CARGO_BIN_EXE_kos");

/// `kos <args>`, which must succeed and print its report as JSON on stdout.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(KOS)
        .args(args)
        .env_remove("RUST_LOG")
        // `kos bench ccm`'s controller in this binary: a kos-ccm binary beside it may be from
        // another build (kos-ccm's own tests run its `bench-service`).
        .env("KOS_BENCH_CCM_BINARY", "")
        .output()
        .expect("kos runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn bench_apply_reports_the_bound_the_runs_and_their_calls() {
    let r = bench_json(&[
        "bench",
        "apply",
        "--workers",
        "2",
        "--time-scale",
        "0.002",
        "--baselines",
        "--output",
        "json",
    ]);
    let bound = &r["lower_bound"];
    assert!(bound["secs"].as_f64().is_some_and(|s| s > 60.0), "{bound}");
    let path: Vec<&str> = bound["path"]
        .as_array()
        .expect("a path")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    // The load balancer is made with its children in one call and ends the path: its floating IP
    // was created on kos's VIP port before it, and needs nothing after.
    assert_eq!(path.last(), Some(&"api-lb"), "{path:?}");
    let runs = r["runs"].as_array().expect("runs");
    let names: Vec<&str> = runs
        .iter()
        .filter_map(|x| x["variant"]["name"].as_str())
        .collect();
    assert_eq!(names, ["kos", "sequential", "terraform-like"]);
    for run in runs {
        assert!(run["ratio"].as_f64().is_some_and(|x| x > 0.0), "{run}");
        let compute = &run["calls"]["compute"];
        // Three control planes and two workers: five creates at least, as both sides count them.
        assert!(compute["client"].as_u64().is_some_and(|n| n >= 5), "{run}");
        assert_eq!(compute["client"], compute["cloud"], "{run}");
    }
}

/// `kos bench ccm` end to end: the real Service controller over an in-process Kubernetes API and
/// kos-sim. Behaviour is asserted (a resync with nothing to do writes nothing, a node join is one
/// member PUT per pool), never a time.
#[test]
fn bench_ccm_reports_addresses_resync_and_node_join() {
    let r = bench_json(&[
        "bench",
        "ccm",
        "--services",
        "3",
        "--nodes",
        "2",
        "--time-scale",
        "0.002",
        "--output",
        "json",
    ]);
    assert!(r["kos_secs"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    assert!(r["baseline_secs"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    assert_eq!(r["resync_writes"], 0, "{r}");
    // Whole-project lists only, the same number of each of the five, never a call per Service. (How
    // many observations a resync takes depends on the clock: on this 500x clock the snapshot's
    // 10 cloud seconds can run out in the middle of a sequential resync; docs/benchmarks.md.)
    let resync = r["resync_calls"].as_object().expect("calls");
    let lists = [
        "GET /load-balancer/v2/lbaas/loadbalancers",
        "GET /load-balancer/v2/lbaas/listeners",
        "GET /load-balancer/v2/lbaas/pools",
        "GET /load-balancer/v2/lbaas/healthmonitors",
        "GET /network/v2.0/floatingips",
    ];
    let mut ops: Vec<&str> = resync.keys().map(String::as_str).collect();
    ops.sort_unstable();
    let mut want = lists.to_vec();
    want.sort_unstable();
    assert_eq!(ops, want, "{r}");
    let n = resync[lists[0]].as_u64().expect("count");
    assert!(
        lists.iter().all(|op| resync[*op].as_u64() == Some(n)),
        "{r}"
    );
    let puts: u64 = r["node_join_calls"]
        .as_object()
        .expect("calls")
        .iter()
        .filter(|(op, _)| op.starts_with("PUT ") && op.ends_with("/members"))
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    assert_eq!(puts, 3, "one member PUT per pool: {r}");
    assert!(
        r["controller_binary"]
            .as_str()
            .is_some_and(|b| b.ends_with("bench ccm-controller")),
        "{r}"
    );
    assert_eq!(r["node_join_writes"], 3, "{r}");
}

/// `kos bench csi` end to end: the real CSI controller on a unix socket over kos-sim. Behaviour is
/// asserted (every claim answered and every volume available, one name check per claim and no
/// wait behind CreateVolume, nothing polls when idle, a resync is one list), never a time.
#[test]
fn bench_csi_binds_every_claim_with_shared_lists() {
    let r = bench_json(&[
        "bench",
        "csi",
        "--claims",
        "5",
        "--workers",
        "3",
        "--output",
        "json",
    ]);
    assert_eq!(r["claims"], 5, "{r}");
    let run = &r["kos"];
    assert_eq!(run["failed"], 0, "{r}");
    assert!(run["bound_secs"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    assert!(
        run["available_secs"].as_f64().is_some_and(|s| s > 0.0),
        "{r}"
    );
    assert_eq!(
        run["create_calls"]["POST /volume/v3/{id}/volumes"], 5,
        "{r}"
    );
    // CreateVolume answers without waiting: its name check is the only read.
    assert_eq!(run["lists"], 5, "{r}");
    assert_eq!(run["gets"], 0, "{r}");
    assert_eq!(run["idle_calls"], 0, "{r}");
    assert_eq!(run["resync_calls_empty"], 1, "{r}");
    assert_eq!(run["resync_calls_full"], 1, "{r}");
}

/// `kos bench operator` end to end: the real kos-operator binary (cargo builds it beside kos for
/// the workspace's tests) over kos-kube-fake and kos-sim with guests. Behaviour only: the report
/// has every field, the Cluster became Ready and the idle span wrote nothing; never a figure.
#[test]
fn bench_operator_reports_ready_idle_calls_and_the_goals() {
    let operator = std::path::Path::new(KOS).with_file_name("kos-operator");
    assert!(
        operator.is_file(),
        "this test runs the kos-operator binary beside kos: `cargo build -p kos-operator` \
         (the workspace's `cargo test` builds it)"
    );
    let r = bench_json(&[
        "bench",
        "operator",
        "--clusters",
        "1",
        "--resync-period",
        "10",
        "--time-scale",
        "0.05",
        "--output",
        "json",
    ]);
    for field in [
        "clusters",
        "time_scale",
        "max_runs_per_project",
        "resync_period_secs",
        "all_ready_secs",
        "all_ready_wall_secs",
        "first_ready_secs",
        "half_ready_secs",
        "create_calls",
        "idle_secs",
        "idle_reconciles",
        "idle_calls",
        "idle_calls_per_cluster",
        "max_lists_per_type_per_cluster",
        "max_list_operation",
        "per_object_calls_per_cluster",
        "idle_non_get_calls",
        "operator_peak_rss_mib",
        "operator_mib_per_cluster",
        "operator_cpu_secs_until_ready",
        "operator_idle_cpu_secs_per_min",
        "operator_cpu_secs_per_reconcile",
        "rss_goal_ratio",
        "lists_goal_ratio",
        "peak_rss_mib",
    ] {
        assert!(r.get(field).is_some(), "no {field}: {r}");
    }
    assert_eq!(r["clusters"], 1, "{r}");
    assert!(r["all_ready_secs"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    // The Cluster was made: servers, networks, … were created until it was Ready.
    assert!(
        r["create_calls"]["POST /compute/v2.1/servers"].as_u64() == Some(1),
        "{r}"
    );
    // Idle changes nothing: every call that is not a GET is a console read (a POST action).
    let idle = r["idle_calls"].as_object().expect("calls");
    let writes: Vec<&String> = idle
        .keys()
        .filter(|op| !op.starts_with("GET ") && !op.contains("/identity/"))
        .filter(|op| op.as_str() != "POST /compute/v2.1/servers/{id}/action")
        .collect();
    assert!(writes.is_empty(), "{r}");
}

/// `kos bench autoscale` on a fast clock: a scale-up from zero asked over the autoscaler's mutual
/// TLS, and a dead node, each reported with its own floor (never judged: a figure, not a pass).
#[test]
fn bench_autoscale_reports_a_scale_up_and_a_repair_against_their_floors() {
    let r = bench_json(&[
        "bench",
        "autoscale",
        "--time-scale",
        "0.01",
        "--output",
        "json",
    ]);
    for field in [
        "time_scale",
        "scale_up_secs",
        "scale_up_boot_join_secs",
        "scale_up_ratio",
        "repair_secs",
        "repair_window_secs",
        "repair_boot_join_secs",
        "repair_ratio",
    ] {
        assert!(
            r[field].as_f64().is_some_and(|x| x > 0.0),
            "no positive {field}: {r}"
        );
    }
    assert_eq!(r["repair_window_secs"], 300.0, "{r}");
}
