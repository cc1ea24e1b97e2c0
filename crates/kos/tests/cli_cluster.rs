//! `kos plan / up / status / down / gc` as a user runs them: the real binary, against the embedded
//! `--cloud sim` (state kept between invocations) and against a standalone `kos sim serve` that keeps
//! running while `kos` itself is killed at random moments.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use support::*;

/// A copy of the minimal example with the worker pool resized.
fn with_workers(dir: &Path, n: u32) -> PathBuf {
    let spec = std::fs::read_to_string(example("minimal.yaml")).expect("example");
    let spec = spec.replacen("      count: 2", &format!("      count: {n}"), 1);
    let p = dir.join(format!("demo-{n}.yaml"));
    std::fs::write(&p, spec).expect("write spec");
    p
}

#[test]
fn embedded_sim_walkthrough_plan_up_status_scale_down() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8 path");

    let plan = kos(
        d,
        None,
        &["plan", "-f", spec, "--cloud", "sim", "--detailed-exitcode"],
    );
    assert_eq!(code(&plan), 2, "changes pending: {}", text(&plan));
    assert!(
        String::from_utf8_lossy(&plan.stdout).contains("to create"),
        "{}",
        text(&plan)
    );

    let up = kos(d, None, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    // The README's first command speaks in progress lines only: no log line of kos's own or of the
    // simulated cluster's components (once: "WARN cloud controller exited: panicked: task … was
    // cancelled" as the embedded simulator shut down).
    let logged: Vec<&str> = std::str::from_utf8(&up.stderr)
        .expect("utf8")
        .lines()
        .filter(|l| {
            [" TRACE ", " DEBUG ", " INFO ", " WARN ", " ERROR "]
                .iter()
                .any(|lvl| l.contains(lvl))
        })
        .collect();
    assert!(logged.is_empty(), "log lines in `kos up`: {logged:#?}");
    assert!(
        String::from_utf8_lossy(&up.stdout).contains("API endpoint: https://"),
        "{}",
        text(&up)
    );
    let cred = cluster_dir(d, "sim", "demo").join("ccm-credential.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cred)
            .expect("CCM credential stored")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    // The cloud was saved: a second process sees the cluster, and nothing is left to do.
    let again = kos(
        d,
        None,
        &["plan", "-f", spec, "--cloud", "sim", "--detailed-exitcode"],
    );
    assert_eq!(code(&again), 0, "no-op plan: {}", text(&again));
    let st = kos(d, None, &["status", "demo", "--cloud", "sim", "-f", spec]);
    assert_eq!(code(&st), 0, "{}", text(&st));
    assert!(
        String::from_utf8_lossy(&st.stdout).contains("Converged."),
        "{}",
        text(&st)
    );

    // Scale the pool up, then down: the plan names what changes.
    let bigger = with_workers(d, 4);
    let bigger = bigger.to_str().expect("utf8");
    assert_eq!(
        code(&kos(d, None, &["up", "-f", bigger, "--cloud", "sim"])),
        0
    );
    let smaller = with_workers(d, 1);
    let smaller = smaller.to_str().expect("utf8");
    let p = kos(d, None, &["plan", "-f", smaller, "--cloud", "sim"]);
    let out = String::from_utf8_lossy(&p.stdout);
    for gone in ["workers-1", "workers-2", "workers-3"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with('-') && l.contains(gone)),
            "scale-down deletes {gone}: {out}"
        );
    }
    assert!(
        !out.lines()
            .any(|l| l.trim_start().starts_with('-') && l.contains("workers-0 ")),
        "keeps the oldest: {out}"
    );
    assert_eq!(
        code(&kos(d, None, &["up", "-f", smaller, "--cloud", "sim"])),
        0
    );

    let json = kos(
        d,
        None,
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("status JSON");
    let servers = v["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter(|r| r["kind"] == "server")
        .count();
    assert_eq!(servers, 2, "1 control plane + 1 worker: {v}");

    let dry = kos(d, None, &["down", "demo", "--cloud", "sim", "--dry-run"]);
    assert_eq!(code(&dry), 0, "{}", text(&dry));
    assert!(String::from_utf8_lossy(&dry.stdout).contains("would be deleted"));
    // The same dry run for a script: one JSON object, the servers among its resources.
    let dry = kos(
        d,
        None,
        &[
            "down",
            "demo",
            "--cloud",
            "sim",
            "--dry-run",
            "--output",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("down JSON");
    assert_eq!(
        (&v["dryRun"], &v["localData"]),
        (&serde_json::json!(true), &serde_json::json!("unchanged")),
        "{v}"
    );
    let listed = v["resources"].as_array().expect("resources");
    assert_eq!(
        listed.iter().filter(|r| r["kind"] == "server").count(),
        2,
        "{v}"
    );
    let down = kos(
        d,
        None,
        &["down", "demo", "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&down), 0, "{}", text(&down));
    let v: serde_json::Value = serde_json::from_slice(&down.stdout).expect("down JSON");
    assert_eq!(
        (
            &v["dryRun"],
            &v["localData"],
            v["resources"].as_array().map(Vec::len)
        ),
        (
            &serde_json::json!(false),
            &serde_json::json!("removed"),
            Some(listed.len())
        ),
        "{v}"
    );
    assert!(
        !cred.exists(),
        "local secrets of a deleted cluster are removed"
    );
    let gc = kos(d, None, &["gc", "--cloud", "sim", "--output", "json"]);
    assert_eq!(code(&gc), 0, "{}", text(&gc));
    let v: serde_json::Value = serde_json::from_slice(&gc.stdout).expect("gc JSON");
    assert_eq!(v, serde_json::json!({"orphans": [], "deleted": false}));
    let after = kos(
        d,
        None,
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&after.stdout).expect("status JSON");
    assert_eq!(v["resources"], serde_json::json!([]), "nothing left: {v}");
    let human = kos(d, None, &["status", "demo", "--cloud", "sim"]);
    // No such cluster: the name given is wrong now (3), not a success.
    assert_eq!(code(&human), 3, "{}", text(&human));
    assert!(
        String::from_utf8_lossy(&human.stdout).contains("No cluster demo here"),
        "{}",
        text(&human)
    );
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let data = tempfile::tempdir().expect("tempdir");
    let spec = example("minimal.yaml");
    let o = kos(
        data.path(),
        None,
        &[
            "plan",
            "-f",
            spec.to_str().expect("utf8"),
            "--cloud",
            "sim",
            "-vv",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("DEBUG"), "-vv logs: {}", text(&o));
    assert!(
        !err.contains('\x1b'),
        "escape codes in a captured log: {err:?}"
    );
}

#[test]
fn bad_input_exits_3_and_creates_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let bad = d.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {name: Demo}\nspec: {}\n",
    )
    .expect("write");
    let o = kos(
        d,
        None,
        &["up", "-f", bad.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.yaml"),
        "names the file: {}",
        text(&o)
    );

    // Valid spec, impossible on this cloud: preflight refuses before anything is created.
    let spec = std::fs::read_to_string(example("minimal.yaml"))
        .expect("example")
        .replace("flavor: m1.medium", "flavor: m9.huge");
    let p = d.join("noflavor.yaml");
    std::fs::write(&p, spec).expect("write");
    let o = kos(
        d,
        None,
        &["up", "-f", p.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("m9.huge"),
        "{}",
        text(&o)
    );
    let st = kos(
        d,
        None,
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("status JSON");
    assert_eq!(
        v["resources"],
        serde_json::json!([]),
        "preflight failure created nothing: {v}"
    );

    let usage = kos(d, None, &["up", "--no-such-flag"]);
    assert_eq!(code(&usage), 3);
}

/// Runs `kos <args>` and SIGKILLs it after `after`.
fn killed(clouds: &Path, data: &Path, args: &[&str], after: Duration) {
    let mut child = isolated(data, Some(clouds), args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kos");
    std::thread::sleep(after);
    let _ = child.kill(); // SIGKILL: no cleanup, no goodbye
    let _ = child.wait();
}

#[test]
fn sigkill_during_up_and_down_then_rerun_converges_without_duplicates_or_leaks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    // The HA example needs flavors and zones this cloud lacks; a 3-control-plane LB variant of the minimal one.
    let ha = std::fs::read_to_string(example("minimal.yaml"))
        .expect("example")
        .replace("    type: floatingIP", "    type: loadBalancer")
        .replace("    count: 1\n", "    count: 3\n");
    let spec = d.join("ha-sim.yaml");
    std::fs::write(&spec, ha).expect("write");
    let spec = spec.to_str().expect("utf8");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b6f73);
    let mut interrupted_mid_run = 0;

    for round in 0..4 {
        // Kill `up` somewhere between its first calls and its end, a few times in a row.
        for _ in 0..3 {
            let ms = rng.random_range(100..2500);
            killed(
                &served.clouds,
                d,
                &["up", "-f", spec, "--cloud", "sim"],
                Duration::from_millis(ms),
            );
            let st = kos(
                d,
                Some(&served.clouds),
                &[
                    "status", "demo", "--cloud", "sim", "-f", spec, "--output", "json",
                ],
            );
            let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("status JSON");
            let present = v["resources"].as_array().map_or(0, Vec::len);
            // Half made: objects missing, or nodes still bootstrapping (the creates take well under
            // a second here; most kills land while the nodes boot, which the next run follows).
            let pending = |k: &str| v[k].as_array().is_some_and(|a| !a.is_empty());
            if present > 0 && (pending("not_converged") || pending("bootstrap_unfinished")) {
                interrupted_mid_run += 1;
            }
        }
        let up = kos(
            d,
            Some(&served.clouds),
            &["up", "-f", spec, "--cloud", "sim"],
        );
        assert_eq!(
            code(&up),
            0,
            "round {round}: re-run converges: {}",
            text(&up)
        );
        let st = kos(
            d,
            Some(&served.clouds),
            &[
                "status", "demo", "--cloud", "sim", "-f", spec, "--output", "json",
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("status JSON");
        assert_eq!(
            v["duplicates"],
            serde_json::json!([]),
            "round {round}: no duplicates: {v}"
        );
        assert_eq!(
            v["not_converged"],
            serde_json::json!([]),
            "round {round}: converged: {v}"
        );

        let ms = rng.random_range(50..1500);
        killed(
            &served.clouds,
            d,
            &["down", "demo", "--cloud", "sim"],
            Duration::from_millis(ms),
        );
        let down = kos(d, Some(&served.clouds), &["down", "demo", "--cloud", "sim"]);
        assert_eq!(
            code(&down),
            0,
            "round {round}: re-run of down finishes: {}",
            text(&down)
        );
        let left = rt.block_on(leftovers(&served.clouds, "demo"));
        assert!(left.is_empty(), "round {round}: leaks after down: {left:?}");
    }
    // Otherwise the kills all landed before the first create or after the last: nothing was tested.
    assert!(
        interrupted_mid_run > 0,
        "no kill left a half-made cluster; widen the kill window"
    );
}

/// `kos down` lists the project once: it used to list everything twice (a dry run to record that
/// it found the cluster, then the teardown), which put a whole listing on its critical path. It
/// still records the find before its first delete (the next `kos down` of a cluster already gone
/// removes its secrets: `cli_local`).
#[test]
fn down_lists_the_project_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", spec, "--cloud", "sim"],
    );
    assert_eq!(code(&up), 0, "{}", text(&up));
    let entries = |since: u64| -> Vec<serde_json::Value> {
        let v = sim_admin(&served.base, &format!("/_sim/log?since={since}"));
        v["entries"].as_array().cloned().unwrap_or_default()
    };
    let before = entries(0)
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .unwrap_or(0);
    let down = kos(d, Some(&served.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
    let lists: Vec<String> = entries(before)
        .iter()
        .filter(|e| e["method"] == "GET")
        .filter_map(|e| e["operation"].as_str())
        .filter(|op| op.ends_with("/v2.0/networks") || op.ends_with("/v2.0/security-groups"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lists.len(),
        2,
        "one listing of networks and one of security groups: {lists:?}"
    );
    assert!(
        !cluster_dir(d, "sim", "demo").join("pki.json").exists(),
        "its secrets are gone"
    );
}
