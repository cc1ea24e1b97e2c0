//! Issue 12, what `kos` does with bad input and a cloud it cannot use: the spec is checked before any cloud
//! is contacted, input is read within bounds and echoed escaped, and each way of not reaching a cloud is
//! told apart, with the exit code that says whose fault it is (1: the cloud's, try again; 3: the input's).

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{
    admin, closed_port, clouds_yaml, cluster_dir, code, example, isolated_umask, kos, requests,
    serve, text,
};

fn write(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, contents).expect("write");
    p
}

/// stderr with miette's line wrapping undone (words joined by single spaces, its `│` gutter dropped).
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr)
        .split(|c: char| c.is_whitespace() || c == '│')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

const BAD_SPEC: &str =
    "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {name: Demo}\nspec: {}\n";

#[test]
fn the_spec_is_checked_before_any_cloud_is_contacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bad = write(d, "bad.yaml", BAD_SPEC);
    let bad = bad.to_str().expect("utf8");

    // An unreachable cloud does not hide the spec's errors.
    let nowhere = clouds_yaml(
        d,
        "nowhere",
        &format!("http://127.0.0.1:{}/v3", closed_port()),
    );
    for cmd in [
        &["plan", "-f", bad][..],
        &["up", "-f", bad],
        &["status", "demo", "-f", bad],
    ] {
        let args: Vec<&str> = cmd.iter().copied().chain(["--cloud", "nowhere"]).collect();
        let o = kos(d, Some(&nowhere), &args);
        assert_eq!(code(&o), 3, "{}", text(&o));
        let err = stderr(&o);
        assert!(
            err.contains("kos::spec::name") && err.contains("bad.yaml"),
            "{err}"
        );
        assert!(!err.contains("auth_url"), "the cloud was contacted: {err}");
    }

    // An invalid spec costs no request.
    let served = serve(d);
    let before = requests(&served.base);
    let o = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", bad, "--cloud", "sim"],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert_eq!(requests(&served.base), before, "requests were sent");
}

#[test]
fn each_way_of_not_reaching_keystone_is_named_and_no_password_is_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let port = closed_port();
    let refused = clouds_yaml(
        d,
        "refused",
        &format!("http://admin:pw-in-the-url-42@127.0.0.1:{port}/v3"),
    );
    let o = kos(
        d,
        Some(&refused),
        &["-vv", "plan", "-f", spec, "--cloud", "refused"],
    );
    assert_eq!(code(&o), 1, "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "nothing listens at 127.0.0.1:{port} (connection refused)"
        )),
        "{err}"
    );
    assert!(!text(&o).contains("pw-in-the-url-42"), "{}", text(&o));
    assert!(!err.contains("Service is not working"), "{err}");

    let dns = clouds_yaml(d, "dns", "http://keystone.no-such-host.invalid:5000/v3");
    let o = kos(d, Some(&dns), &["plan", "-f", spec, "--cloud", "dns"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(stderr(&o).contains("DNS lookup failed"), "{}", text(&o));

    let served = serve(d);
    let tls = clouds_yaml(
        d,
        "tls",
        &format!(
            "{}/identity/v3",
            served.base.replacen("http://", "https://", 1)
        ),
    );
    let o = kos(d, Some(&tls), &["plan", "-f", spec, "--cloud", "tls"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(stderr(&o).contains("does not speak TLS"), "{}", text(&o));
}

/// A clouds.yaml named by OS_CLIENT_CONFIG_FILE that does not exist used to send `--cloud sim` to the
/// embedded simulator without a word.
#[test]
fn a_missing_os_client_config_file_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let missing = d.join("no-such-clouds.yaml");
    let spec = example("minimal.yaml");
    let o = kos(
        d,
        Some(&missing),
        &["plan", "-f", spec.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        stderr(&o).contains("$OS_CLIENT_CONFIG_FILE names")
            && stderr(&o).contains("does not exist"),
        "{}",
        text(&o)
    );
}

/// A lookup the cloud keeps failing during preflight is the cloud's failure (exit 1, run again), not an
/// invalid spec (exit 3).
#[test]
fn a_cloud_failing_during_preflight_is_not_an_invalid_spec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let (status, _) = admin(
        &served.base,
        reqwest::Method::POST,
        "/_sim/faults",
        Some(serde_json::json!({"method": "GET", "path": "^/network/v2.0/routers", "status": 503})),
    );
    assert_eq!(status, 201);
    let spec = example("minimal.yaml");
    let o = kos(
        d,
        Some(&served.clouds),
        &["plan", "-f", spec.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(stderr(&o).contains("run the command again"), "{}", text(&o));
}

#[test]
fn hostile_spec_files_end_in_a_readable_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let run = |spec: &str| kos(d, None, &["plan", "-f", spec, "--cloud", "sim"]);

    // An endless stream is read up to the limit, then refused.
    let o = run("/dev/zero");
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(stderr(&o).contains("larger than 1024 KiB"), "{}", text(&o));

    // Escape sequences are shown, not sent to the terminal; a huge line is quoted as an excerpt.
    let esc = write(
        d,
        "esc.yaml",
        format!(
            "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: \"a\\e]2;owned\\a\\e[2J\"}}\n\
             # {}\nspec: {{{}: 1}}\n",
            "\x1b[31m",
            "k".repeat(400_000)
        ),
    );
    let o = run(esc.to_str().expect("utf8"));
    assert_eq!(code(&o), 3, "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    assert!(err.contains("\\u{1b}"), "{err}");
    assert!(err.len() < 40_000, "{} bytes of diagnostics", err.len());

    let latin1 = write(
        d,
        "latin1.yaml",
        b"apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {name: caf\xe9}\n",
    );
    let o = run(latin1.to_str().expect("utf8"));
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        stderr(&o).contains("not UTF-8") && stderr(&o).contains("help: save the file as UTF-8"),
        "{}",
        text(&o)
    );
}

/// Files holding secrets are 0600, and the directories kos makes for them 0700, even under umask 000.
#[test]
fn secrets_live_in_private_directories_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let spec = example("minimal.yaml");
    let o = isolated_umask(
        d,
        None,
        "000",
        &[
            "up",
            "-f",
            spec.to_str().expect("utf8"),
            "--cloud",
            "sim",
            "--wait",
            "infra",
        ],
    )
    .output()
    .expect("kos runs");
    assert_eq!(code(&o), 0, "{}", text(&o));
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let data = d.join("kos-data");
    let cluster = cluster_dir(d, "sim", "demo");
    let project = cluster.parent().expect("project level").to_path_buf();
    for made in [
        data.clone(),
        data.join("clusters"),
        data.join("clusters/sim"),
        project,
        cluster.clone(),
        data.join("sim"),
    ] {
        assert_eq!(mode(&made), 0o700, "{}", made.display());
    }
    for secret in ["pki.json", "ccm-credential.json", "owner.json", "lock"] {
        let p = cluster.join(secret);
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
}

/// A pool with `autoscaling` is sized by cluster-autoscaler through kos-operator: `kos plan` (and
/// `kos up`) say so, naming the pool, rather than leave the user waiting for a scale-up that no CLI
/// run makes; a spec without one gets no such note.
#[test]
fn a_cli_plan_of_an_autoscaled_pool_says_the_operator_scales_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let text_of = std::fs::read_to_string(example("minimal.yaml")).expect("example");
    let autoscaled = d.join("autoscaled.yaml");
    std::fs::write(
        &autoscaled,
        text_of.replace(
            "      count: 2\n",
            "      count: 2\n      autoscaling: {min: 0, max: 5}\n",
        ),
    )
    .expect("spec");
    let o = kos(
        d,
        None,
        &[
            "plan",
            "-f",
            autoscaled.to_str().expect("utf8"),
            "--cloud",
            "sim",
        ],
    );
    assert!(matches!(code(&o), 0 | 2), "{}", text(&o));
    assert!(
        stderr(&o).contains("autoscaling of pool(s) workers takes effect under kos-operator"),
        "{}",
        text(&o)
    );
    let plain = example("minimal.yaml");
    let o = kos(
        d,
        None,
        &[
            "plan",
            "-f",
            plain.to_str().expect("utf8"),
            "--cloud",
            "sim",
        ],
    );
    assert!(!stderr(&o).contains("autoscaling"), "{}", text(&o));
}
