//! Issue 19, "names and local state that cannot hurt": a cluster NAME is checked before anything runs,
//! local secrets live under the cloud's identity, `kos down` removes them only for a cluster it found
//! in that project, a second run of one cluster stops naming the first, secrets the cloud shows no
//! trace of are not reused silently, and a spec that never arrives does not hold kos forever.
//!
//! Every name given to the binary here has its worst case inside the test's temporary directory: the
//! "is this path ours" decision itself is tested as a pure function (crates/kos/src/local.rs).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use support::{admin, cluster_dir, code, example, kos, serve, spawn, text};

/// Every file under `root` with its contents: what "nothing changed on disk" compares.
fn tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).expect("metadata");
            if meta.is_dir() {
                todo.push(p.clone());
                out.insert(p, Vec::new());
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.insert(p, bytes);
            }
        }
    }
    out
}

fn no_raw_escapes(o: &Output) {
    for s in [&o.stdout, &o.stderr] {
        assert!(
            !s.contains(&0x1b) && !s.contains(&0x07),
            "a raw escape reached the terminal: {}",
            text(o)
        );
    }
}

fn spec_named(d: &Path, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(example("minimal.yaml"))
        .expect("minimal.yaml")
        .replace("name: demo", &format!("name: {name}"))
        // Its own addresses: the question is its secrets, not a collision with demo.
        .replace("10.0.0.0/24", "10.0.1.0/24");
    let p = d.join(format!("{name}.yaml"));
    std::fs::write(&p, text).expect("write spec");
    p
}

fn up_infra(d: &Path, spec: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "up",
        "-f",
        spec.to_str().expect("utf8"),
        "--cloud",
        "sim",
        "--wait",
        "infra",
    ];
    args.extend_from_slice(extra);
    kos(d, None, &args)
}

#[test]
fn hostile_names_are_refused_before_anything_and_change_nothing_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = up_infra(d, &example("minimal.yaml"), &[]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    let victim = d.join("victim");
    std::fs::create_dir_all(&victim).expect("victim");
    std::fs::write(victim.join("keep"), "precious").expect("write");
    let before = tree(d);

    let absolute = victim.to_str().expect("utf8").to_owned();
    let hostile = [
        "",
        ".",
        "..",
        "../x",
        "../sim",
        "demo/",
        // Never "/" or a path outside the temporary directory: on broken code this very test would
        // delete it. The pure `check_ours` tests cover those.
        absolute.as_str(),
        "Demo",
        "\u{1b}]52;c;aGVsbG8=\u{7}",
        "a\u{1b}[2J",
    ];
    for name in hostile {
        for args in [
            vec!["down", name, "--cloud", "sim"],
            vec!["down", name, "--cloud", "sim", "--forget"],
            vec!["status", name, "--cloud", "sim"],
            vec!["kubeconfig", name, "--cloud", "sim"],
            vec!["rotate", "credential", name, "--cloud", "sim"],
            vec!["doctor", name, "--cloud", "sim"],
            vec!["gc", "--cluster", name, "--cloud", "sim"],
        ] {
            let o = kos(d, None, &args);
            assert_eq!(code(&o), 3, "{args:?}: {}", text(&o));
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("metadata.name"),
                "{args:?}: the error says what a name may be: {}",
                text(&o)
            );
            no_raw_escapes(&o);
        }
    }
    assert_eq!(tree(d), before, "a refused name changed files on disk");
    assert!(cluster_dir(d, "sim", "demo").join("pki.json").exists());

    // A cluster that does not exist is not a success, and its name is not a path either.
    let o = kos(d, None, &["status", "ghost", "--cloud", "sim"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains("No cluster ghost"), "{}", text(&o));
    let json = kos(
        d,
        None,
        &["status", "ghost", "--cloud", "sim", "--output", "json"],
    );
    assert_eq!(code(&json), 3, "{}", text(&json));
}

#[test]
fn down_removes_local_secrets_only_of_a_cluster_it_found_in_that_project() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let up = up_infra(d, &example("minimal.yaml"), &[]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    let demo = cluster_dir(d, "sim", "demo");
    let demo_before = tree(&demo);

    // Secrets of a cluster this project shows nothing of (a wrong project, or one deleted outside kos):
    // the same files as demo's, under the name ghost.
    let ghost = demo.with_file_name("ghost");
    std::fs::create_dir_all(&ghost).expect("ghost dir");
    for f in ["pki.json", "cluster.json", "owner.json"] {
        std::fs::copy(demo.join(f), ghost.join(f)).expect("copy");
    }
    let down = kos(d, None, &["down", "ghost", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
    assert!(ghost.join("pki.json").exists(), "{}", text(&down));
    assert!(text(&down).contains("--forget"), "{}", text(&down));

    // Nor are they reused for a new cluster of that name without being asked.
    let ghost_spec = spec_named(d, "ghost");
    let refused = up_infra(d, &ghost_spec, &[]);
    assert_eq!(code(&refused), 3, "{}", text(&refused));
    assert!(
        text(&refused).contains("--reuse-local-secrets"),
        "{}",
        text(&refused)
    );
    let status = kos(d, None, &["status", "ghost", "--cloud", "sim"]);
    assert_eq!(code(&status), 3, "nothing was created: {}", text(&status));

    // --forget deletes them; demo's stay as they were.
    let forget = kos(d, None, &["down", "ghost", "--cloud", "sim", "--forget"]);
    assert_eq!(code(&forget), 0, "{}", text(&forget));
    assert!(!ghost.exists(), "{}", text(&forget));
    assert_eq!(tree(&demo), demo_before);

    // The layout of earlier releases (<cloud>/<name>) is taken over once the cloud shows the cluster.
    let old = d.join("kos-data/clusters/sim/demo");
    std::fs::rename(&demo, &old).expect("move to the old layout");
    let plan = kos(
        d,
        None,
        &[
            "plan",
            "-f",
            example("minimal.yaml").to_str().expect("utf8"),
            "--cloud",
            "sim",
        ],
    );
    assert_eq!(code(&plan), 0, "{}", text(&plan));
    assert!(!old.exists(), "{}", text(&plan));
    assert!(demo.join("pki.json").exists(), "{}", text(&plan));

    // A cluster found is deleted with its secrets, and the empty levels above them go too.
    let down = kos(d, None, &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
    assert!(!demo.exists(), "{}", text(&down));
    assert!(!d.join("kos-data/clusters/sim").exists(), "{}", text(&down));
}

#[test]
fn a_spec_fifo_that_nobody_writes_ends_in_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let fifo = d.join("spec.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let mut child = support::isolated(
        d,
        None,
        &["plan", "-f", fifo.to_str().expect("utf8"), "--cloud", "sim"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("kos");
    // Generous: this bounds a hang, it times nothing.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kos plan -f <fifo> still waits after 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().expect("output");
    assert_eq!(code(&o), 3, "{}", text(&o));
}

#[test]
fn a_second_run_of_one_cluster_stops_naming_the_first_and_one_ca_is_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    // The first run waits at its first server create for as long as the test needs.
    let (status, _) = admin(
        &served.base,
        reqwest::Method::POST,
        "/_sim/faults",
        Some(serde_json::json!({
            "method": "POST", "path": "^/compute/v2.1/servers$", "status": 503, "retry_after": 30
        })),
    );
    assert_eq!(status, 201);
    let mut first = spawn(d, &served.clouds, &["up", "-f", spec, "--cloud", "sim"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let lock = || cluster_dir(d, "sim", "demo").join("lock");
    let pki = || cluster_dir(d, "sim", "demo").join("pki.json");
    // Its lock taken and its CA written: it is past the point a second run could race it to.
    while !(std::fs::read_to_string(lock()).is_ok_and(|t| t.contains("kos up")) && pki().exists()) {
        assert!(
            Instant::now() < deadline,
            "the first run never took its lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pki = pki();
    // Compared, never printed: it holds private keys.
    let ca_before = std::fs::read(&pki).expect("pki.json");
    let same_ca = || std::fs::read(&pki).is_ok_and(|now| now == ca_before);
    for args in [
        vec!["up", "-f", spec, "--cloud", "sim"],
        vec!["down", "demo", "--cloud", "sim"],
    ] {
        let second = kos(d, Some(&served.clouds), &args);
        assert_eq!(code(&second), 3, "{args:?}: {}", text(&second));
        assert!(
            text(&second).contains(&format!("pid {}: kos up", first.id())),
            "{args:?}: {}",
            text(&second)
        );
    }
    assert!(
        first.try_wait().expect("wait").is_none(),
        "the first run ended before the second was tried"
    );
    let _ = first.kill();
    let _ = first.wait();
    assert!(same_ca(), "the second run wrote a CA");
    // Its lock died with it: the next run goes on.
    let (status, _) = admin(&served.base, reqwest::Method::DELETE, "/_sim/faults", None);
    assert_eq!(status, 204);
    let again = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", spec, "--cloud", "sim", "--wait", "infra"],
    );
    assert_eq!(code(&again), 0, "{}", text(&again));
    assert!(same_ca(), "one CA throughout");
}

/// A run stopped after it wrote the cluster's CA and rehearsed every server's user_data, before
/// the cloud had anything of it (here every create is refused), handed the secrets to no one: the
/// next plain run takes them as its own. The rehearsal used to record them as delivered, so that
/// run refused ("were given to servers of a cluster the cloud shows no trace of").
#[test]
fn secrets_of_a_run_that_made_nothing_are_the_next_runs_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let (status, _) = admin(
        &served.base,
        reqwest::Method::POST,
        "/_sim/faults",
        Some(serde_json::json!({
            "method": "POST",
            "path": "^/(network|compute|load-balancer|volume)/|/application_credentials$",
            "status": 403
        })),
    );
    assert_eq!(status, 201);
    let refused = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", spec, "--cloud", "sim"],
    );
    assert_ne!(code(&refused), 0, "{}", text(&refused));
    let pki = cluster_dir(d, "sim", "demo").join("pki.json");
    assert!(
        pki.exists(),
        "the run stopped before its CA: {}",
        text(&refused)
    );
    // Compared, never printed: it holds private keys.
    let ca = std::fs::read(&pki).expect("pki.json");
    let (status, _) = admin(&served.base, reqwest::Method::DELETE, "/_sim/faults", None);
    assert_eq!(status, 204);
    let o = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", spec, "--cloud", "sim", "--wait", "infra"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        std::fs::read(&pki).expect("pki.json"),
        ca,
        "one CA throughout"
    );
}
