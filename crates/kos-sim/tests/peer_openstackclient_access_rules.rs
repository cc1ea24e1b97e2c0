//! The peer-client test for access rules: python-openstackclient, a client kos did not write,
//! makes an application credential with `--access-rules` on kos-sim, reads the rules back, and
//! then works as that credential: what the rule allows is served, the rest is refused (401).
//!
//! The `openstack` CLI: `KOS_OPENSTACK_CLI`, then `~/.cache/kos/venv/bin/openstack` (where `.ci/run`
//! installs it), then `PATH`. Without it the test fails, saying how to install it: never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use kos_sim::{Sim, SimConfig};
use serde_json::Value;

fn openstack_cli() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_OPENSTACK_CLI") {
        return PathBuf::from(p);
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/kos/venv/bin/openstack");
        if p.exists() {
            return p;
        }
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("openstack"))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| {
            panic!(
                "python-openstackclient is not installed. Install it as .ci/run does:\n  python3 -m venv ~/.cache/kos/venv && \
                 ~/.cache/kos/venv/bin/pip install python-openstackclient==10.5.0 python-octaviaclient==3.15.0\n\
                 or point KOS_OPENSTACK_CLI at an `openstack` binary."
            )
        })
}

/// `openstack --os-cloud <cloud> <args>`: (success, stdout, stderr).
fn osc(
    bin: &Path,
    clouds: &Path,
    home: &Path,
    cloud: &str,
    args: &[&str],
) -> (bool, String, String) {
    let out = Command::new(bin)
        .args(["--os-cloud", cloud])
        .args(args)
        .env("OS_CLIENT_CONFIG_FILE", clouds)
        .env_remove("OS_CLOUD")
        .env_remove("OS_AUTH_URL")
        .env_remove("OS_PASSWORD")
        .env("HOME", home)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(ok: bool, out: &str, err: &str, what: &str) -> Value {
    assert!(ok, "{what} failed:\nstdout: {out}\nstderr: {err}");
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {out}"))
}

#[test]
fn openstackclient_makes_a_credential_with_access_rules_and_is_held_to_them() {
    let bin = openstack_cli();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sim = rt
        .block_on(Sim::start(SimConfig::fast()))
        .expect("simulator starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim")).expect("clouds.yaml");
    let home = dir.path();
    let run = |cloud: &str, args: &[&str]| osc(&bin, &clouds, home, cloud, args);

    let rules = r#"[{"service": "network", "method": "GET", "path": "/network/v2.0/networks"}]"#;
    let (ok, out, err) = run(
        "sim",
        &[
            "application",
            "credential",
            "create",
            "probe",
            "--access-rules",
            rules,
            "-f",
            "json",
        ],
    );
    let created = json_of(ok, &out, &err, "application credential create");
    // The client's column names.
    let id = created["ID"]
        .as_str()
        .unwrap_or_else(|| panic!("no ID: {created}"))
        .to_owned();
    let secret = created["Secret"]
        .as_str()
        .unwrap_or_else(|| panic!("no Secret: {created}"))
        .to_owned();
    assert!(
        created["Access Rules"]
            .to_string()
            .contains("/network/v2.0/networks"),
        "{created}"
    );
    let (ok, out, err) = run(
        "sim",
        &["application", "credential", "show", "probe", "-f", "json"],
    );
    let shown = json_of(ok, &out, &err, "application credential show");
    assert!(shown["Access Rules"].to_string().contains("GET"), "{shown}");

    // Keystone refuses what its schema refuses; the client shows the 400.
    let (ok, _, err) = run(
        "sim",
        &[
            "application",
            "credential",
            "create",
            "bad",
            "--access-rules",
            r#"[{"service": "network", "method": "FETCH", "path": "/network/v2.0/networks"}]"#,
        ],
    );
    assert!(!ok && err.contains("400"), "{err}");

    // Working as the credential: the rule's call is served, any other is refused.
    let c = sim.config();
    let as_cred = format!(
        "{}  probe:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: {}\n      application_credential_id: {id}\n      application_credential_secret: {secret}\n    region_name: {}\n    interface: public\n    identity_api_version: 3\n",
        sim.clouds_yaml("sim"),
        sim.auth_url(),
        c.region,
    );
    std::fs::write(&clouds, as_cred).expect("clouds.yaml");
    let (ok, out, err) = run("probe", &["network", "list", "-f", "json"]);
    let nets = json_of(ok, &out, &err, "network list as the credential");
    assert!(nets.as_array().is_some_and(|n| !n.is_empty()), "{nets}");
    let (ok, _, err) = run("probe", &["subnet", "list"]);
    assert!(
        !ok && err.contains("401"),
        "subnet list was not refused: {err}"
    );
}
