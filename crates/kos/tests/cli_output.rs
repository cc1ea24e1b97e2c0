//! Issue 24 (5): `--output json` for the commands that run (`kos up`, `kos rotate`): stdout carries
//! exactly one JSON document at the end, the run's outcome, also when it fails or is refused;
//! progress stays on stderr; the exit codes are those of the text output; no secret in it.

mod support;

use serde_json::Value;
use support::{cluster_dir, code, example, kos, text};

/// stdout as the one JSON document it must be (trailing text fails the parse).
fn doc(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("one JSON document ({e}): {}", text(o)))
}

#[test]
fn up_and_rotate_report_one_json_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");

    let up = kos(
        d,
        None,
        &["up", "-f", spec, "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&up), 0, "{}", text(&up));
    let v = doc(&up);
    assert_eq!(v["cluster"], "demo", "{v}");
    assert_eq!(v["outcome"], "ok", "{v}");
    assert!(v["changes"].as_u64().is_some_and(|c| c > 0), "{v}");
    assert!(
        v["api_endpoint"]
            .as_str()
            .is_some_and(|a| a.starts_with("https://") && a.ends_with(":6443")),
        "{v}"
    );
    assert_eq!(v["bootstrap"]["followed"], true, "{v}");
    let nodes = v["bootstrap"]["nodes"].as_object().expect("nodes");
    assert_eq!(nodes.len(), 3, "{v}");
    for (id, n) in nodes {
        assert_eq!(n["state"], "done", "{id}: {v}");
        assert_eq!(n["last_marker"], "bootstrap ok", "{id}: {v}");
    }
    assert_eq!(v["kubernetes"]["state"], "ready", "{v}");
    assert_eq!(v["nodes_ready"], 3, "{v}");
    assert!(v.get("error").is_none(), "{v}");
    // The progress and the outcome lines a person reads stay on stderr.
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(err.contains("kos: phase bootstrap"), "{err}");
    assert!(err.contains("Cluster demo is up"), "{err}");

    // Nothing to change: the same document, no change made.
    let again = kos(
        d,
        None,
        &["up", "-f", spec, "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&again), 0, "{}", text(&again));
    let v = doc(&again);
    assert_eq!(v["outcome"], "ok", "{v}");
    assert_eq!(v["changes"], 0, "{v}");

    // The cheapest rotation: the CCM credential. Its id and name, never its secret.
    let rot = kos(
        d,
        None,
        &[
            "rotate",
            "credential",
            "demo",
            "--cloud",
            "sim",
            "--output",
            "json",
        ],
    );
    assert_eq!(code(&rot), 0, "{}", text(&rot));
    let v = doc(&rot);
    assert_eq!(v["cluster"], "demo", "{v}");
    assert_eq!(v["outcome"], "ok", "{v}");
    assert_eq!(v["credential"]["name"], "kos-demo-ccm-b", "{v}");
    assert_eq!(
        v["credential"]["deleted"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(cluster_dir(d, "sim", "demo").join("ccm-credential.json"))
            .expect("stored credential"),
    )
    .expect("json");
    assert_eq!(v["credential"]["id"], stored["id"], "{v}");
    let secret = stored["secret"].as_str().expect("a secret");
    assert!(!text(&rot).contains(secret), "{}", text(&rot));
    assert!(
        String::from_utf8_lossy(&rot.stderr).contains("uses application credential"),
        "{}",
        text(&rot)
    );
}

#[test]
fn a_refused_run_ends_with_its_json_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();

    // A spec that cannot be read: refused (exit 3) before any cloud is contacted.
    let up = kos(
        d,
        None,
        &[
            "up",
            "-f",
            "missing.yaml",
            "--cloud",
            "sim",
            "--output",
            "json",
        ],
    );
    assert_eq!(code(&up), 3, "{}", text(&up));
    let v = doc(&up);
    assert_eq!(v["outcome"], "refused", "{v}");
    assert_eq!(v["cluster"], Value::Null, "{v}");
    assert_eq!(v["changes"], 0, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot read the cluster spec missing.yaml")),
        "{v}"
    );
    assert_eq!(v["error"]["help"], "check the path given to -f", "{v}");
    // The diagnostic still goes to stderr, as without --output json.
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("check the path given to -f"),
        "{}",
        text(&up)
    );

    // An invalid spec: each problem under the error.
    let bad = d.join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(example("minimal.yaml"))
            .expect("example")
            .replace("name: demo", "name: Demo_"),
    )
    .expect("write");
    let up = kos(
        d,
        None,
        &[
            "up",
            "-f",
            bad.to_str().expect("utf8"),
            "--cloud",
            "sim",
            "--output",
            "json",
        ],
    );
    assert_eq!(code(&up), 3, "{}", text(&up));
    let v = doc(&up);
    assert_eq!(v["outcome"], "refused", "{v}");
    assert!(
        v["error"]["details"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "{v}"
    );

    // A rotation of a cluster this machine has no secrets of: refused, nothing changed.
    let rot = kos(
        d,
        None,
        &[
            "rotate",
            "credential",
            "nothere",
            "--cloud",
            "sim",
            "--output",
            "json",
        ],
    );
    let v = doc(&rot);
    assert_eq!(v["cluster"], "nothere", "{v}");
    assert_eq!(
        v["outcome"],
        if code(&rot) == 3 { "refused" } else { "failed" },
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );

    // kos rotate encryption-key refuses a cluster whose one control plane cannot be replaced.
    let spec = example("minimal.yaml");
    let enc = kos(
        d,
        None,
        &[
            "rotate",
            "encryption-key",
            "demo",
            "-f",
            spec.to_str().expect("utf8"),
            "--cloud",
            "sim",
            "--output",
            "json",
        ],
    );
    assert_eq!(code(&enc), 3, "{}", text(&enc));
    let v = doc(&enc);
    assert_eq!(v["cluster"], "demo", "{v}");
    assert_eq!(v["outcome"], "refused", "{v}");
    assert!(
        v["error"]["help"]
            .as_str()
            .is_some_and(|h| h.contains("loadBalancer")),
        "{v}"
    );

    // Other commands' --output json end a failure the same way: outcome and error.
    let doctor = kos(
        d,
        None,
        &["doctor", "nothere", "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&doctor), 3, "{}", text(&doctor));
    let v = doc(&doctor);
    assert_eq!(v["outcome"], "refused", "{v}");
    assert!(
        v["error"]["help"]
            .as_str()
            .is_some_and(|h| h.contains("metadata.name")),
        "{v}"
    );
}
