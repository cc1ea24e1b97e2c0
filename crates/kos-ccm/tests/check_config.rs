//! `kos-ccm check-config`: exit status, output, and that no secret ever shows.

use std::path::Path;
use std::process::Command;

use kos_ccm::check::{Format, check_config};
use kos_cloud::Env;

const CANARY: &str = "Canary-Pw-7f3a9c";

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    p
}

fn no_env() -> Env {
    Env::from_vars::<&str, &str>([])
}

#[test]
fn canary_never_printed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let head = "[Global]\nauth-url = https://k:5000/v3\nregion = r\nusername = u\n";
    let cases = [
        format!("{head}password = {CANARY}\n"),
        format!("{head}password = \"{CANARY};#\"\n"),
        format!("{head}password = {CANARY}\n[LoadBalancer]\nlb-method = foo\n"),
        format!("{head}password = \"{CANARY}\n"),
        format!("{head}password = \"{CANARY}\\q\"\n"),
        format!("{head}password = {CANARY}\\x\n"),
        format!("{head}password = {CANARY}\npassword = {CANARY}2\n"),
        format!(
            "{head}password = {CANARY}\napplication-credential-id = i\napplication-credential-secret = {CANARY}\n"
        ),
        format!(
            "[Global]\nauth-url = https://k\napplication-credential-id = i\napplication-credential-secret = {CANARY}\n"
        ),
        format!("{head}password {CANARY}\n"),
        format!("{head}trustee-password = {CANARY}\ntrust-id = t\npassword = p\n"),
        format!("{head}token = {CANARY}\n"),
        format!(
            "{head}password = {CANARY}\n[Foo]\nsecret = {CANARY}\n[Global]\npasswd = {CANARY}\n"
        ),
        // Issue 12: a secret on a line of its own, or cut off its key by a stray quote, used to be
        // echoed as a key name.
        format!("{head}password = p\n{CANARY}\n"),
        format!("{head}password = \"abc\n{CANARY}\"\n"),
        format!("{CANARY} = x\n{head}password = p\n"),
        format!("{head}password = p\n{CANARY} tail\n"),
        format!("{head}password = p\n{CANARY}\"\n"),
    ];
    for (i, text) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("c{i}.conf"), text);
        for format in [Format::Table, Format::Yaml] {
            let out = check_config(&p, format, &no_env());
            assert!(
                !out.stdout.contains(CANARY) && !out.stderr.contains(CANARY),
                "case {i} leaks:\n{}\n{}",
                out.stdout,
                out.stderr
            );
        }
    }
}

#[test]
fn good_file_prints_effective_config() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = write(
        dir.path(),
        "cloud.conf",
        &format!(
            "[Global]\nauth-url = https://k:5000/v3\nregion = r\napplication-credential-id = abc\napplication-credential-secret = {CANARY}\n[LoadBalancerClass \"dmz\"]\nfloating-subnet-id = s1\n"
        ),
    );
    let out = check_config(&p, Format::Table, &no_env());
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("application-credential-secret       <redacted>"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("[LoadBalancerClass \"dmz\"]"));
    assert!(
        out.stdout
            .contains("authentication: application credential id abc")
    );
    let yaml = check_config(&p, Format::Yaml, &no_env());
    assert!(
        yaml.stdout
            .contains("  floating-subnet-id: \"s1\"  # line 7"),
        "{}",
        yaml.stdout
    );
}

#[test]
fn use_clouds_reads_clouds_yaml_and_global_wins() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let clouds = write(
        dir.path(),
        "clouds.yaml",
        "clouds:\n  mine:\n    auth:\n      auth_url: https://from-yaml:5000/v3\n      username: yu\n      password: yp\n      project_name: yproj\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: yaml-region\n",
    );
    let conf = write(
        dir.path(),
        "cloud.conf",
        &format!(
            "[Global]\nuse-clouds = true\nclouds-file = {}\ncloud = mine\nregion = conf-region\n",
            clouds.display()
        ),
    );
    let loaded = kos_ccm::CloudConfig::load(&conf).unwrap_or_else(|e| panic!("{e}"));
    let p = loaded
        .config
        .profile(&no_env())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.auth_url, "https://from-yaml:5000/v3");
    assert_eq!(p.region_name.as_deref(), Some("conf-region"));
    match p.auth {
        kos_cloud::ProfileAuth::Password { user, project, .. } => {
            assert_eq!(user, kos_cloud::IdOrName::Name("yu".into()));
            assert_eq!(project, Some(kos_cloud::IdOrName::Name("yproj".into())));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn binary_exit_status() {
    let bin = env!("CARGO_BIN_EXE_kos-ccm");
    let fixtures = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("tests/fixtures");
    for seed in ["seed-000.conf", "seed-001.conf", "seed-002.conf"] {
        let out = Command::new(bin)
            .args(["check-config", "--cloud-config"])
            .arg(fixtures.join(seed))
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{seed}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("<redacted>"), "{stdout}");
        assert!(!stdout.contains("xxxxxxxxxxxxxxxxx") && !stdout.contains("password=pass"));
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bad = write(
        dir.path(),
        "bad.conf",
        "[Global]\nauth-url = https://k\nregion = r\nusername = u\npassword = p\n[LoadBalancer]\nlb-method = foo\n[Extra]\nx = 1\n",
    );
    let out = Command::new(bin)
        .args(["check-config", "--cloud-config"])
        .arg(&bad)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[Extra]: unknown section"), "{stderr}");
    assert!(
        stderr.contains(":7: [LoadBalancer] lb-method: value \"foo\" is not one of"),
        "{stderr}"
    );
}

/// A container's log is a pipe: what kos-ccm logs there carries no colour codes.
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let out = Command::new(env!("CARGO_BIN_EXE_kos-ccm"))
        .args(["--cloud-config", "/nonexistent/cloud.conf"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ERROR") && stderr.contains("/nonexistent/cloud.conf"),
        "{stderr}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}

/// Issue 12: a `ca-file` that does not exist or is not a certificate is an error here, not a TLS
/// failure naming neither when the CCM runs.
#[test]
fn ca_file_must_be_a_certificate() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let conf = |ca: &Path| {
        format!(
            "[Global]\nauth-url = https://k:5000/v3\nregion = r\nusername = u\npassword = p\nca-file = {}\n",
            ca.display()
        )
    };
    let missing = dir.path().join("missing.pem");
    let not_pem = write(dir.path(), "ca.txt", "just text\n");
    let pem = write(
        dir.path(),
        "ca.pem",
        "-----BEGIN CERTIFICATE-----\nMIIBCgKCAQEA\n-----END CERTIFICATE-----\n",
    );
    for (ca, why) in [
        (&missing, "does not exist"),
        (&not_pem, "is not a PEM certificate bundle"),
    ] {
        let p = write(dir.path(), "c.conf", &conf(ca));
        let out = check_config(&p, Format::Table, &no_env());
        assert!(!out.ok, "{}", out.stderr);
        assert!(
            out.stderr
                .contains(&format!("[Global] ca-file: {} {why}", ca.display())),
            "{}",
            out.stderr
        );
    }
    let p = write(dir.path(), "c.conf", &conf(&pem));
    let out = check_config(&p, Format::Table, &no_env());
    assert!(out.ok, "{}", out.stderr);
}
