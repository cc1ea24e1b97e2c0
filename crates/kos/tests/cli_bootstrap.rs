//! The bootstrap phase of `kos up` as a user sees it: every node's console markers, the cluster's secrets
//! kept 0600 and reused, a re-created worker joining with the same CA and a valid token, a failed step
//! stopping the run with the node's reason, `kos kubeconfig`, and no secret in any output.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kos_bootstrap::ClusterSecrets;
use kos_cloud::model::TagQuery;
use kos_cloud::{CloudProfile, Env, Session};
use serde_json::Value;
use support::*;

const NODES: [&str; 3] = ["cp-0", "workers-0", "workers-1"];

fn minimal() -> PathBuf {
    example("minimal.yaml")
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn secrets(data: &Path) -> ClusterSecrets {
    let pki = cluster_dir(data, "sim", "demo").join("pki.json");
    assert_eq!(mode(&pki), 0o600);
    ClusterSecrets::from_bundle(&std::fs::read_to_string(pki).expect("pki.json")).expect("bundle")
}

/// Every node's markers as the script writes them (the simulated cloud runs the bootstrap through
/// kos-guest), and the cluster checked through its API: nothing skipped.
fn assert_markers(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    let steps = |node: &str| -> Vec<&str> {
        let common = [
            "preflight",
            "packages",
            "kernel",
            "containerd",
            "metadata-block",
        ];
        let role: &[&str] = if node == "cp-0" {
            &["kubeadm-init", "cni", "addons", "bootstrap"]
        } else {
            &["api-wait", "kubeadm-join", "bootstrap"]
        };
        common.iter().chain(role).copied().collect()
    };
    for node in NODES {
        for step in steps(node) {
            assert!(
                err.contains(&format!("kos: {node}: {step} ok")),
                "{node} {step}: {}",
                text(o)
            );
        }
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Kubernetes API: ready; 3 node(s) Ready and initialised"),
        "{}",
        text(o)
    );
    assert!(
        !err.contains("skipped") && !out.contains("skipped"),
        "{}",
        text(o)
    );
}

#[test]
fn wait_infra_stops_at_the_servers_and_wait_bootstrap_at_the_consoles() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let spec = minimal();
    let spec = spec.to_str().expect("utf8");

    // Infra: the servers exist and are ACTIVE; no console is read (an image without cloud-init would
    // otherwise keep `up` waiting for markers that never come).
    let up = kos(
        d,
        None,
        &["up", "-f", spec, "--cloud", "sim", "--wait", "infra"],
    );
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let (out, err) = (
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr),
    );
    assert!(
        out.contains("Bootstrap: not followed (--wait infra)"),
        "{}",
        text(&up)
    );
    assert!(
        !err.contains("kos-bootstrap")
            && !err.contains(": preflight ok")
            && !out.contains("Kubernetes API"),
        "{}",
        text(&up)
    );

    // Bootstrap: a new worker's markers are followed, the API is not waited for.
    let bigger = std::fs::read_to_string(spec).expect("example").replacen(
        "      count: 2",
        "      count: 3",
        1,
    );
    let bigger_path = d.join("bigger.yaml");
    std::fs::write(&bigger_path, bigger).expect("write spec");
    let bigger = bigger_path.to_str().expect("utf8");
    let up = kos(
        d,
        None,
        &["up", "-f", bigger, "--cloud", "sim", "--wait", "bootstrap"],
    );
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let (out, err) = (
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr),
    );
    assert!(
        err.contains("kos: workers-2: bootstrap ok"),
        "{}",
        text(&up)
    );
    assert!(
        out.contains("Kubernetes API: not checked (--wait bootstrap)")
            && !out.contains("Kubernetes API: skipped"),
        "{}",
        text(&up)
    );

    let bad = kos(
        d,
        None,
        &["up", "-f", spec, "--cloud", "sim", "--wait", "forever"],
    );
    assert_eq!(bad.status.code(), Some(3), "{}", text(&bad));
}

fn openssl(args: &[&str], dir: &Path) -> Output {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs")
}

#[test]
fn up_shows_every_nodes_markers_and_kubeconfig_is_signed_by_the_cluster_ca() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let spec = minimal();
    let spec = spec.to_str().expect("utf8");

    let up = kos(d, None, &["up", "-f", spec, "--cloud", "sim", "-vv"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    assert_markers(&up);
    let first = secrets(d);

    // Re-run: same CA, same token (not expired), nothing to follow but what is on the consoles.
    let plan = kos(d, None, &["plan", "-f", spec, "--cloud", "sim", "-vv"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
    let again = kos(d, None, &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(secrets(d), first, "secrets are reused, not regenerated");

    // No secret in any output, logs at -vv included.
    let ccm: Value = serde_json::from_str(
        &std::fs::read_to_string(cluster_dir(d, "sim", "demo").join("ccm-credential.json"))
            .expect("ccm credential"),
    )
    .expect("json");
    let canaries = [
        ccm["secret"].as_str().expect("secret").to_owned(),
        first.token.secret.expose().to_owned(),
        first.certificate_key.expose().to_owned(),
        first
            .ca
            .key_pem
            .expose()
            .lines()
            .nth(1)
            .expect("key body")
            .to_owned(),
    ];
    for o in [&up, &plan, &again] {
        let all = text(o);
        for c in &canaries {
            assert!(!all.contains(c.as_str()), "a secret leaked into the output");
        }
    }

    // kubeconfig: 0600, YAML, context kos-demo, client certificate signed by the cluster CA.
    let kc = kos(d, None, &["kubeconfig", "demo", "--cloud", "sim"]);
    assert_eq!(kc.status.code(), Some(0), "{}", text(&kc));
    let file = d.join("kubeconfig-demo");
    assert_eq!(mode(&file), 0o600);
    let doc: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&file).expect("kubeconfig")).expect("YAML");
    assert_eq!(doc["current-context"], "kos-demo");
    assert_eq!(doc["contexts"][0]["name"], "kos-demo");
    // The endpoint itself, as on any cloud (kubectl gets to a simulated one through the simulator's
    // proxy, `HTTPS_PROXY`): no local address, no server name of its own.
    let server = doc["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("server")
        .to_owned();
    let host = server
        .strip_prefix("https://")
        .and_then(|h| h.strip_suffix(":6443"))
        .expect("https://<address>:6443");
    assert!(host.parse::<std::net::IpAddr>().is_ok(), "{doc}");
    assert!(!host.starts_with("127."), "{doc}");
    assert!(
        doc["clusters"][0]["cluster"]
            .get("tls-server-name")
            .is_none(),
        "{doc}"
    );
    use base64::Engine;
    let b64 = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 field"))
            .expect("base64")
    };
    let ca = b64(&doc["clusters"][0]["cluster"]["certificate-authority-data"]);
    assert_eq!(String::from_utf8_lossy(&ca), first.ca.cert_pem);
    std::fs::write(d.join("ca.pem"), &ca).expect("write");
    std::fs::write(
        d.join("client.pem"),
        b64(&doc["users"][0]["user"]["client-certificate-data"]),
    )
    .expect("write");
    let v = openssl(&["verify", "-CAfile", "ca.pem", "client.pem"], d);
    assert!(v.status.success(), "{}", text(&v));
    let subj = openssl(&["x509", "-in", "client.pem", "-noout", "-subject"], d);
    assert!(
        String::from_utf8_lossy(&subj.stdout).contains("kubernetes-admin"),
        "{}",
        text(&subj)
    );

    // Merge: another context is kept, ours is added once, the file stays 0600.
    let kube = d.join(".kube");
    std::fs::create_dir_all(&kube).expect("mkdir");
    let other = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example:6443\nusers:\n- name: prod\n  user:\n    token: t\ncontexts:\n- name: prod\n  context:\n    cluster: prod\n    user: prod\ncurrent-context: prod\n";
    std::fs::write(kube.join("config"), other).expect("write");
    for _ in 0..2 {
        let m = kos(
            d,
            None,
            &["kubeconfig", "demo", "--cloud", "sim", "--merge"],
        );
        assert_eq!(m.status.code(), Some(0), "{}", text(&m));
    }
    assert_eq!(mode(&kube.join("config")), 0o600);
    let merged: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(kube.join("config")).expect("read"))
            .expect("YAML");
    let names: Vec<&str> = merged["contexts"]
        .as_array()
        .expect("contexts")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["prod", "kos-demo"]);
    assert_eq!(merged["current-context"], "kos-demo");

    // KUBECONFIG's first file is the one merged into.
    let first_file = d.join("first.yaml");
    let m = isolated(
        d,
        None,
        &["kubeconfig", "demo", "--cloud", "sim", "--merge"],
    )
    .env(
        "KUBECONFIG",
        format!("{}:{}", first_file.display(), kube.join("config").display()),
    )
    .output()
    .expect("kos");
    assert_eq!(m.status.code(), Some(0), "{}", text(&m));
    assert_eq!(mode(&first_file), 0o600);

    // A cluster whose secrets are not here: a clear error, exit 3.
    let none = kos(d, None, &["kubeconfig", "nosuch", "--cloud", "sim"]);
    assert_eq!(none.status.code(), Some(3), "{}", text(&none));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("not on this machine"),
        "{}",
        text(&none)
    );
}

fn server<'a>(state: &'a Value, name: &str) -> Option<&'a Value> {
    state["nova"]["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name && s["vm_state"] != "deleted")
}

/// The content of `path` in a cloud-config's write_files.
fn written(user_data: &str, path: &str) -> String {
    let doc: Value = serde_saphyr::from_str(user_data).expect("cloud-config YAML");
    doc["write_files"]
        .as_array()
        .expect("write_files")
        .iter()
        .find(|f| f["path"] == path)
        .and_then(|f| f["content"].as_str())
        .unwrap_or_else(|| panic!("{path} not written"))
        .to_owned()
}

#[test]
fn a_recreated_worker_joins_with_the_same_ca_and_a_valid_token() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let spec = minimal();
    let spec = spec.to_str().expect("utf8");
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    assert_markers(&up);
    // Once bootstrapped, no process on a node reaches the metadata service (its user_data holds
    // that node's secrets): not a pod, not a hostNetwork pod; later boots read the config drive
    // (issue 19). kos-guest applies the rules the script's own functions set.
    let views = sim_admin(&sim.base, "/_sim/metadata");
    let views = views
        .as_array()
        .unwrap_or_else(|| panic!("metadata views: {views}"));
    assert_eq!(views.len(), 3, "{views:?}");
    for v in views {
        assert_eq!(v["host_network"], false, "{v}");
        assert_eq!(v["pod"], false, "{v}");
        assert_eq!(v["config_drive"], true, "{v}");
    }
    let stored = secrets(d);
    let state = sim_state(&sim.base);
    let cp = server(&state, "kos-demo-cp-0").expect("cp-0");
    let cp_ud = cp["user_data_decoded"].as_str().expect("user_data kept");
    assert!(
        cp_ud.starts_with("## template: jinja\n#cloud-config\n"),
        "gzip inflated by the sim"
    );

    // Delete one worker behind kos's back, through the facade.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let profile =
            CloudProfile::load(&Env::process(), Some("sim"), Some(&sim.clouds)).expect("profile");
        let s = Session::connect(&profile).await.expect("session");
        let c = s.compute();
        let victim = c
            .list_servers(&TagQuery::default())
            .await
            .expect("servers")
            .into_iter()
            .find(|x| x.name == "kos-demo-workers-1")
            .expect("workers-1");
        c.delete_server(&victim.id).await.expect("delete");
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.get_server(&victim.id).await.expect("get").is_some() {
            assert!(Instant::now() < deadline, "server deleted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    // Meanwhile the join window closed: the re-run renews the token and keeps every CA.
    let pki = cluster_dir(d, "sim", "demo").join("pki.json");
    let mut bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(&pki).expect("pki")).expect("json");
    bundle["token"]["expires_unix"] = (time::OffsetDateTime::now_utc().unix_timestamp() - 1).into();
    std::fs::write(&pki, bundle.to_string()).expect("write");

    let again = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("kos: workers-1: kubeadm-join ok"),
        "{}",
        text(&again)
    );
    assert!(
        err.contains("the join token is in the cluster before the new node(s) boot (renewed)"),
        "{}",
        text(&again)
    );
    let renewed = secrets(d);
    assert_eq!(
        (
            &renewed.ca,
            &renewed.etcd_ca,
            &renewed.front_proxy_ca,
            &renewed.service_account
        ),
        (
            &stored.ca,
            &stored.etcd_ca,
            &stored.front_proxy_ca,
            &stored.service_account
        ),
        "the CAs are kept"
    );
    assert_ne!(renewed.token, stored.token, "the expired token is replaced");
    let stored = renewed;

    let state = sim_state(&sim.base);
    let ud = server(&state, "kos-demo-workers-1")
        .and_then(|s| s["user_data_decoded"].as_str())
        .expect("the recreated worker's user_data");
    let kubeadm = written(ud, "/etc/kos/kubeadm.yaml");
    let hash = stored.discovery_hash().expect("hash");
    assert!(kubeadm.contains(&hash), "same CA (discovery hash {hash})");
    assert!(
        kubeadm.contains(stored.token.value().expose()),
        "the stored token"
    );
    assert!(
        !stored
            .token
            .is_expired(time::OffsetDateTime::now_utc(), Duration::from_secs(600)),
        "and it is valid"
    );
    // Workers get the token and hash only: no CA key.
    assert!(!ud.contains("/etc/kubernetes/pki/ca.key"));
}

#[test]
fn a_failed_step_stops_up_with_the_nodes_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let spec = minimal();
    let child = isolated(
        d,
        Some(&sim.clouds),
        &["up", "-f", spec.to_str().expect("utf8"), "--cloud", "sim"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("kos up");
    // As soon as the worker exists, a failure marker lands on its console (the admin API's stand-in
    // for a guest's line), before any of its real ones: kos up stops at the first failure.
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        if let Some(id) =
            server(&sim_state(&sim.base), "kos-demo-workers-1").and_then(|s| s["id"].as_str())
        {
            break id.to_owned();
        }
        assert!(Instant::now() < deadline, "workers-1 was never created");
        std::thread::sleep(Duration::from_millis(20));
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{}/_sim/servers/{id}/console", sim.base))
            .json(&serde_json::json!({"message": "kos-bootstrap: kubeadm-join failed: couldn't validate the identity of the API Server"}))
            .send()
            .await
            .expect("inject");
        assert!(r.status().is_success());
    });
    let out = child.wait_with_output().expect("kos up");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    // The error names the node and step (miette wraps its text), the progress line its own reason.
    assert!(
        err.contains("bootstrap: workers-1 failed at kubeadm-join:"),
        "{}",
        text(&out)
    );
    assert!(
        err.contains(
            "kos: workers-1: kubeadm-join failed: couldn't validate the identity of the API Server"
        ),
        "{}",
        text(&out)
    );
}

/// A bootstrap too large for Nova is refused before anything is created, naming the node, the limit
/// and what takes the room, and the cloud is left untouched.
#[test]
fn an_oversized_bootstrap_is_refused_before_anything_is_created() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    // Thousands of distinct node labels: valid, but kubelet's flags no longer fit the user_data
    // limit even gzipped (hex digests do not compress much).
    let mut labels = String::new();
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random_hex = || {
        // splitmix64: incompressible enough, and reproducible.
        (0..3)
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                format!("{:016x}", z ^ (z >> 31))
            })
            .collect::<String>()
    };
    for _ in 0..2500 {
        let (k, v) = (random_hex(), random_hex());
        labels.push_str(&format!(
            "        example.com/l{}: v{}\n",
            &k[..40],
            &v[..40]
        ));
    }
    let spec = std::fs::read_to_string(minimal())
        .expect("example")
        .replace(
            "      count: 2\n",
            &format!("      count: 2\n      labels:\n{labels}"),
        );
    assert!(
        spec.contains("example.com/l"),
        "the example changed: adapt this test"
    );
    let file = d.join("huge.yaml");
    std::fs::write(&file, spec).expect("write spec");
    let out = kos(
        d,
        Some(&sim.clouds),
        &["up", "-f", file.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).replace('\n', " ");
    assert!(err.contains("workers-0"), "{}", text(&out));
    assert!(err.contains("nothing was created"), "{}", text(&out));
    assert!(err.contains("65535"), "names the limit: {}", text(&out));
    let state = sim_state(&sim.base);
    for (service, kind) in [
        ("nova", "servers"),
        ("neutron", "networks"),
        ("neutron", "floatingips"),
    ] {
        let live = state[service][kind]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|o| o["name"].as_str().is_some_and(|n| n.contains("demo")))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(live, 0, "{service} {kind} created: {}", text(&out));
    }
}

/// A spec like minimal.yaml with `workers` workers.
fn with_workers(d: &Path, workers: u32) -> PathBuf {
    let text = std::fs::read_to_string(minimal())
        .expect("example")
        .replacen("      count: 2", &format!("      count: {workers}"), 1);
    let p = d.join(format!("workers-{workers}.yaml"));
    std::fs::write(&p, text).expect("write spec");
    p
}

/// The first control plane's cleanup deletes the join token once the first nodes joined; a node
/// added by a later `kos up` still joins: kos puts the token back before the server is made (and
/// keeps it there while it joins), and deletes it again once every node is Ready (before the fix,
/// the join failed on the missing token).
#[test]
fn a_node_added_later_joins_though_the_cleanup_deleted_the_join_token() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let two = with_workers(d, 2);
    let up = kos(
        d,
        None,
        &["up", "-f", two.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let three = with_workers(d, 3);
    let more = kos(
        d,
        None,
        &["up", "-f", three.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(more.status.code(), Some(0), "{}", text(&more));
    let (out, err) = (
        String::from_utf8_lossy(&more.stdout),
        String::from_utf8_lossy(&more.stderr),
    );
    assert!(
        err.contains("kos: workers-2: kubeadm-join ok"),
        "{}",
        text(&more)
    );
    assert!(
        err.contains("the join token is deleted from the cluster"),
        "{}",
        text(&more)
    );
    // In the cluster before the server is made: a node that boots faster than kos follows it must
    // find it (before, it was put back only while kos followed the consoles, and a fast node's
    // joins could run out first).
    let pushed = err.find("the join token is in the cluster before the new node(s) boot");
    let created = err.find("creating server workers-2");
    assert!(
        pushed.is_some_and(|p| created.is_some_and(|c| p < c)),
        "{}",
        text(&more)
    );
    assert!(
        out.contains("Kubernetes API: ready; 4 node(s) Ready and initialised"),
        "{}",
        text(&more)
    );
}

/// A kubeadm failure, provoked: the cluster's CA on this machine is another cluster's (a foreign
/// `pki.json` restored between two runs), so kos cannot reach the cluster's API to put the join token
/// back after the first control plane's cleanup deleted it, and the node added by the second run
/// pins a CA the cluster does not have: its joins fail until kubeadm's last attempt, which no longer
/// finds the token. `kos up` ends with exit 1 naming the node, the step and kubeadm's own error, as
/// the node's console says it.
#[test]
fn a_kubeadm_failure_shows_in_up_with_the_node_and_kubeadms_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let two = with_workers(d, 2);
    // Only the servers: the cluster forms in the next run, with the CA its nodes were given.
    let up = kos(
        d,
        None,
        &[
            "up",
            "-f",
            two.to_str().expect("utf8"),
            "--cloud",
            "sim",
            "--wait",
            "infra",
        ],
    );
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let pki = cluster_dir(d, "sim", "demo").join("pki.json");
    let mut bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(&pki).expect("pki")).expect("json");
    let foreign = ClusterSecrets::generate(
        &mut rand::rng(),
        time::OffsetDateTime::now_utc(),
        kos_bootstrap::DEFAULT_TOKEN_TTL,
    )
    .expect("secrets");
    let foreign: Value = serde_json::from_str(foreign.to_bundle().expose()).expect("json");
    bundle["ca"] = foreign["ca"].clone();
    std::fs::write(&pki, bundle.to_string()).expect("write");

    let three = with_workers(d, 3);
    let o = kos(
        d,
        None,
        &["up", "-f", three.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let token_id = bundle["token"]["id"].as_str().expect("token id").to_owned();
    let reason = format!(
        "kubeadm join failed after 8 attempts: error execution phase preflight: couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ConfigMap for token ID \"{token_id}\""
    );
    assert!(
        err.contains(&format!("kos: workers-2: kubeadm-join failed: {reason}")),
        "{}",
        text(&o)
    );
    // miette wraps the error's text: its start names the node and the step.
    assert!(
        err.contains("bootstrap: workers-2 failed at kubeadm-join: kubeadm join failed after 8"),
        "{}",
        text(&o)
    );
    // The nodes that got the cluster's CA joined.
    assert!(
        err.contains("kos: workers-0: kubeadm-join ok"),
        "{}",
        text(&o)
    );
}

/// The first control plane initialised the cluster, then its CNI step failed (here a manifest URL
/// the simulated internet does not serve) while no kos ran. The next `kos up` does not make it
/// again, which would delete the cluster's first member and join a cluster that never gets its CNI
/// (the fault campaign found a run that then waited half an hour for nodes that could never be
/// Ready): the node tries again by itself, and `kos up` follows it, naming the step and the reason;
/// the server stays.
#[test]
fn a_first_control_plane_that_failed_after_init_is_not_made_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve(d);
    let yaml = std::fs::read_to_string(minimal())
        .expect("example")
        .replacen(
            "  nodePools:",
            &format!(
                "  addons:\n    cniManifest:\n      url: https://example.com/calico.yaml\n      sha256: {}\n  nodePools:",
                "ab".repeat(32)
            ),
            1,
        );
    let spec = d.join("unreachable-cni.yaml");
    std::fs::write(&spec, yaml).expect("write");
    let spec = spec.to_str().expect("utf8");
    let infra = kos(
        d,
        Some(&sim.clouds),
        &["up", "-f", spec, "--cloud", "sim", "--wait", "infra"],
    );
    assert_eq!(code(&infra), 0, "{}", text(&infra));
    let cp0 = || {
        server(&sim_state(&sim.base), "kos-demo-cp-0")
            .and_then(|s| s["id"].as_str())
            .map(str::to_owned)
    };
    let before = cp0().expect("cp-0");
    // A URL that never answers: the node never finishes, and this run would wait until its
    // deadline; what matters is what it follows and that it makes nothing again.
    let mut again = Watched::start(d, &sim.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    let seen = again.until("cp-0: cni retrying: curl: (22)", 300);
    let (_, out) = again.finish(0);
    assert!(seen, "{out}");
    assert!(!out.contains("replacing cp-0"), "{out}");
    assert!(!out.contains("kos down"), "{out}");
    assert_eq!(cp0().as_deref(), Some(before.as_str()), "the same server");
}
