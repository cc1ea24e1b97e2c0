//! Every file in examples/ works as a newcomer tries it: `kos plan` and `kos up` on `--cloud sim` as
//! written, the cluster forms (its nodes run their user_data) and `kos up` checks it through its API,
//! every node Ready and initialised by the cloud controller; a second `kos up` changes nothing, a
//! second plan is a no-op, `kos doctor` finds every needed flow open, `kos down` removes it. And what
//! kos cannot install is refused before anything is created.

mod support;

use std::path::Path;

use support::{code, example, kos, text};

/// `metadata.name` of an example.
fn cluster_name(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("example");
    let doc: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    doc["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
        .to_owned()
}

#[test]
fn every_example_plans_and_applies_on_the_simulated_cloud_as_written() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let dir = example("");
    let mut examples: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 3, "{examples:?}");
    for path in examples {
        let file = path.to_str().expect("utf8");
        let name = cluster_name(&path);
        let plan = kos(d, None, &["plan", "-f", file, "--cloud", "sim"]);
        assert_eq!(code(&plan), 0, "plan {file}: {}", text(&plan));
        let up = kos(d, None, &["up", "-f", file, "--cloud", "sim"]);
        assert_eq!(code(&up), 0, "up {file}: {}", text(&up));
        let out = String::from_utf8_lossy(&up.stdout);
        assert!(
            out.contains("Kubernetes API: ready;") && out.contains("Ready and initialised"),
            "up {file}: {}",
            text(&up)
        );
        assert!(!text(&up).contains("skipped"), "up {file}: {}", text(&up));
        let again = kos(d, None, &["up", "-f", file, "--cloud", "sim"]);
        assert_eq!(code(&again), 0, "second up of {file}: {}", text(&again));
        let out = String::from_utf8_lossy(&again.stdout);
        assert!(
            out.contains(&format!("Cluster {name} is up: 0 change(s) made."))
                && out.contains("Kubernetes API: ready;"),
            "second up of {file}: {}",
            text(&again)
        );
        let again = kos(
            d,
            None,
            &["plan", "-f", file, "--cloud", "sim", "--detailed-exitcode"],
        );
        assert_eq!(code(&again), 0, "second plan of {file}: {}", text(&again));
        // Every flow the cluster needs passes Neutron's and Octavia's rules (amphora and OVN API load
        // balancers, with and without allowedCIDRs).
        let doctor = kos(d, None, &["doctor", &name, "-f", file, "--cloud", "sim"]);
        assert_eq!(code(&doctor), 0, "doctor {file}: {}", text(&doctor));
        let down = kos(d, None, &["down", &name, "--cloud", "sim"]);
        assert_eq!(code(&down), 0, "down {file}: {}", text(&down));
    }
}

/// Cilium has no verified manifest in kos's pins: `plan` and `up` refuse it at validation (exit 3,
/// naming `spec.addons.cni` and the `cniManifest` fix) and nothing is created; with a pinned manifest
/// the same spec is accepted.
#[test]
fn a_cni_without_a_verified_manifest_is_refused_before_anything_is_created() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    let base = std::fs::read_to_string(example("minimal.yaml")).expect("example");
    let cilium = base.replace("  nodePools:", "  addons:\n    cni: cilium\n  nodePools:");
    assert_ne!(cilium, base);
    let p = d.join("cilium.yaml");
    std::fs::write(&p, &cilium).expect("write");
    let file = p.to_str().expect("utf8");
    for verb in ["plan", "up"] {
        let o = kos(d, None, &[verb, "-f", file, "--cloud", "sim"]);
        assert_eq!(code(&o), 3, "{verb}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("spec.addons.cni") && err.contains("cniManifest"),
            "{verb}: {}",
            text(&o)
        );
    }
    let st = kos(
        d,
        None,
        &["status", "demo", "--cloud", "sim", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("status JSON");
    assert_eq!(
        v["resources"],
        serde_json::json!([]),
        "nothing created: {v}"
    );

    let pinned = cilium.replace(
        "    cni: cilium\n",
        "    cni: cilium\n    cniManifest:\n      url: https://example.com/cilium.yaml\n      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n",
    );
    std::fs::write(&p, pinned).expect("write");
    let o = kos(d, None, &["plan", "-f", file, "--cloud", "sim"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
}
