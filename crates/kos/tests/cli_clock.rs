//! kos stamps what a cluster compares with its own clock (a join token's expiration) by the
//! cloud's clock, the one its answers' `Date` shows and its servers keep, not this machine's,
//! which may be hours off.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::{code, example, kos, serve_scaled, text};

/// The minimal example behind a load balancer (control planes can be added), `control_planes` of
/// them and one worker.
fn spec(dir: &Path, control_planes: u32) -> PathBuf {
    let text = std::fs::read_to_string(example("minimal.yaml"))
        .expect("example")
        .replace("    type: floatingIP", "    type: loadBalancer")
        .replace(
            "  controlPlane:\n    count: 1\n",
            &format!("  controlPlane:\n    count: {control_planes}\n"),
        )
        .replace("      count: 2\n", "      count: 1\n");
    let path = dir.join(format!("clock-{control_planes}.yaml"));
    std::fs::write(&path, text).expect("write spec");
    path
}

/// The cloud's date, as its `Date` header shows it, minus this machine's, in seconds.
fn cloud_ahead(base: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let rsp = reqwest::Client::new()
            .get(format!("{base}/identity/v3"))
            .send()
            .await
            .expect("the simulator answers");
        let date = rsp.headers()["date"].to_str().expect("ascii").to_owned();
        let cloud = chrono::DateTime::parse_from_rfc2822(&date).expect("a Date");
        cloud.timestamp() - chrono::Utc::now().timestamp()
    })
}

/// Control planes join a running cluster with the CAs kos puts there under a token that lives two
/// hours. On a cloud whose clock is more than two hours ahead of this machine's (here a simulator
/// at 500 times real time), that token, stamped by this machine's clock, was expired on arrival:
/// the cluster's token cleaner deleted it and with it the CAs, and the new control planes could
/// not join.
#[test]
fn control_planes_join_a_cluster_whose_cloud_is_hours_ahead() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve_scaled(d, "0.002");
    let up = |spec: &Path| {
        kos(
            d,
            Some(&served.clouds),
            &["up", "-f", spec.to_str().expect("utf8"), "--cloud", "sim"],
        )
    };
    let o = up(&spec(d, 1));
    assert_eq!(code(&o), 0, "{}", text(&o));
    let deadline = Instant::now() + Duration::from_secs(120);
    while cloud_ahead(&served.base) < 3 * 3600 {
        assert!(
            Instant::now() < deadline,
            "the cloud's clock does not run ahead"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let o = up(&spec(d, 3));
    assert_eq!(code(&o), 0, "{}", text(&o));
    let status = kos(
        d,
        Some(&served.clouds),
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&status), 0, "{}", text(&status));
}
