//! Secrets encrypted at rest, through the real binary on the simulated cloud: after `kos up` a Secret
//! made with kubectl is stored sealed under the cluster's key (the simulated etcd's bytes, `GET
//! /_sim/at-rest`), and `kos rotate encryption-key`, killed in the middle and run again, leaves every
//! Secret sealed under the new key, the old one gone from every control plane's configuration and the
//! cluster working.

mod support;

use serde_json::Value;
use support::*;

/// The simulated cluster `demo` as `/_sim/at-rest` shows it.
fn at_rest(base: &str) -> Value {
    let all = sim_admin(base, "/_sim/at-rest");
    all.as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "demo")
        .cloned()
        .unwrap_or_else(|| panic!("no cluster demo: {all}"))
}

/// Every Secret's key name, and the key names of every running API server.
fn keys(c: &Value) -> (Vec<(String, Value)>, Vec<Value>) {
    let secrets = c["secrets"]
        .as_array()
        .expect("secrets")
        .iter()
        .map(|s| {
            (
                format!(
                    "{}/{}",
                    s["namespace"].as_str().unwrap_or_default(),
                    s["name"].as_str().unwrap_or_default()
                ),
                s["key"].clone(),
            )
        })
        .collect();
    let servers = c["apiservers"]
        .as_array()
        .expect("apiservers")
        .iter()
        .map(|a| a["keys"].clone())
        .collect();
    (secrets, servers)
}

fn plain_text_of(c: &Value, name: &str) -> String {
    let s = c["secrets"]
        .as_array()
        .expect("secrets")
        .iter()
        .find(|s| s["namespace"] == "default" && s["name"] == name)
        .unwrap_or_else(|| panic!("no Secret {name}: {c}"));
    let raw = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        s["value"].as_str().expect("value"),
    )
    .expect("base64");
    String::from_utf8_lossy(&raw).into_owned()
}

#[test]
fn secrets_are_sealed_under_the_clusters_key_and_a_rotation_moves_every_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    // One control plane behind a load balancer (so it can be replaced with a successor first) and
    // one worker.
    let minimal = std::fs::read_to_string(example("minimal.yaml")).expect("minimal.yaml");
    let spec_text = minimal
        .replacen("  apiEndpoint:\n    type: floatingIP\n", "", 1)
        .replacen("      count: 2\n", "      count: 1\n", 1);
    assert!(!spec_text.contains("floatingIP") && spec_text.contains("count: 1\n      flavor"));
    let spec = d.join("demo.yaml");
    std::fs::write(&spec, &spec_text).expect("write");
    let spec = spec.to_str().expect("utf8");

    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));
    let made = kubectl(
        d,
        &[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=password=hunter2-canary",
        ],
    );
    assert!(made.status.success(), "{}", text(&made));

    let c = at_rest(&sim.base);
    let (secrets, servers) = keys(&c);
    assert!(secrets.iter().any(|(n, _)| n == "default/s1"), "{c}");
    assert!(
        secrets.iter().all(|(_, k)| k == "key-1"),
        "every Secret sealed under key-1: {secrets:?}"
    );
    assert!(!plain_text_of(&c, "s1").contains("hunter2-canary"));
    assert!(!servers.is_empty());
    assert!(
        servers
            .iter()
            .all(|k| *k == serde_json::json!(["key-1", "identity"])),
        "{c}"
    );
    let status = kos(d, Some(&sim.clouds), &["status", "demo", "--cloud", "sim"]);
    assert!(
        text(&status).contains("Encryption at rest: Secrets encrypted with key-1.identity"),
        "{}",
        text(&status)
    );
    // The key itself is never printed.
    let stored = std::fs::read_to_string(cluster_dir(d, "sim", "demo").join("encryption.json"))
        .expect("encryption.json");
    let doc: Value = serde_json::from_str(&stored).expect("json");
    let secret = doc["current"]["secret"].as_str().expect("key").to_owned();
    assert!(!text(&up).contains(&secret) && !text(&status).contains(&secret));

    // Killed in the middle (once the rotation's second step is stored, while control planes are
    // replaced for it), then run again: it continues the rotation under way.
    let keys_file = cluster_dir(d, "sim", "demo").join("encryption.json");
    let args = [
        "rotate",
        "encryption-key",
        "demo",
        "-f",
        spec,
        "--cloud",
        "sim",
    ];
    let child = spawn(d, &sim.clouds, &args);
    eventually(600, "the rotation's second step", || {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&keys_file).ok()?).ok()?;
        (doc["phase"] == "promote").then_some(())
    });
    kill(child);
    let status = kos(d, Some(&sim.clouds), &["status", "demo", "--cloud", "sim"]);
    assert!(
        text(&status).contains("rotating to key-2"),
        "{}",
        text(&status)
    );
    let rotate = kos(d, Some(&sim.clouds), &args);
    let out = text(&rotate);
    assert_eq!(code(&rotate), 0, "{out}");
    assert!(out.contains("continuing the rotation under way"), "{out}");
    assert!(
        out.contains("Secret(s) written again under the new key"),
        "{out}"
    );
    assert!(!out.contains(&secret), "{out}");

    let c = at_rest(&sim.base);
    let (secrets, servers) = keys(&c);
    assert!(
        secrets.iter().all(|(_, k)| k == "key-2"),
        "every Secret sealed under key-2: {secrets:?}"
    );
    assert!(
        servers
            .iter()
            .all(|k| *k == serde_json::json!(["key-2", "identity"])),
        "key-1 gone from every API server: {c}"
    );
    // The cluster works: the Secret reads back through the API.
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));
    let got = kubectl(
        d,
        &["get", "secret", "s1", "-o", "jsonpath={.data.password}"],
    );
    assert!(got.status.success(), "{}", text(&got));
    let value = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        String::from_utf8_lossy(&got.stdout).trim(),
    )
    .expect("base64");
    assert_eq!(value, b"hunter2-canary");
    let status = kos(d, Some(&sim.clouds), &["status", "demo", "--cloud", "sim"]);
    assert!(
        text(&status).contains("Secrets encrypted with key-2.identity"),
        "{}",
        text(&status)
    );
    let plan = kos(
        d,
        Some(&sim.clouds),
        &["plan", "-f", spec, "--cloud", "sim", "--detailed-exitcode"],
    );
    assert_eq!(code(&plan), 0, "nothing left to do: {}", text(&plan));
}

/// The refusal for a single control plane behind a floating IP names a fix the spec accepts: the
/// help used to suggest `controlPlane.maxSurge`, which validation refuses behind a floating IP.
/// Refused before any cloud is touched: nothing is written under the data directory.
#[test]
fn a_floating_ip_cluster_is_refused_with_a_fix_the_spec_accepts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let out = kos(
        d,
        None,
        &[
            "rotate",
            "encryption-key",
            "demo",
            "-f",
            spec,
            "--cloud",
            "sim",
        ],
    );
    let said = text(&out);
    assert_ne!(code(&out), 0, "{said}");
    assert!(said.contains("behind a floating IP"), "{said}");
    assert!(said.contains("apiEndpoint.type: loadBalancer"), "{said}");
    assert!(
        !said.contains("maxSurge"),
        "a fix validation refuses: {said}"
    );
    assert!(
        !cluster_dir(d, "sim", "demo").exists(),
        "nothing made for the cluster"
    );
}
