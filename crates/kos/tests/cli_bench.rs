//! `kos bench apply` runs end to end and reports in JSON. A smoke test of the plumbing only: the figures
//! are a benchmark's, never asserted (the clock runs 500x fast here, so they are noisy anyway).

use std::process::Command;

const KOS: &str = env!("CARGO_BIN_EXE_kos");

#[test]
fn bench_apply_reports_the_bound_the_runs_and_their_calls() {
    let out = Command::new(KOS)
        .args(["bench", "apply", "--workers", "2", "--time-scale", "0.002"])
        .args(["--baselines", "--output", "json"])
        .env_remove("RUST_LOG")
        .output()
        .expect("kos runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let bound = &r["lower_bound"];
    assert!(bound["secs"].as_f64().is_some_and(|s| s > 60.0), "{bound}");
    let path: Vec<&str> = bound["path"]
        .as_array()
        .expect("a path")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(path.last(), Some(&"api-members"), "{path:?}");
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
