//! Issue 12: `scripts/test` on a fresh machine installs what the tests call (through `scripts/test-deps`)
//! with apt-get when it may, and otherwise says in one line what to install. Run against stand-ins for
//! `id`, `sudo` and `apt-get` on a PATH where none of the tools exist.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// scripts/test-deps of the checkout under test (see `CARGO_MANIFEST_DIR` at run time).
fn script() -> String {
    format!(
        "{}/../../scripts/test-deps",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    )
}
const ALL: &str = "cloud-init shellcheck kubernetes-client openssl curl skopeo umoci e2fsprogs xfsprogs udev python3-venv";

fn stub(bin: &Path, name: &str, body: &str) {
    let p = bin.join(name);
    std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).expect("write stub");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A PATH with `env` and the given stand-ins only; apt-get's calls are logged to `apt.log`.
fn machine(uid: u32, sudo: bool, apt: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::os::unix::fs::symlink("/usr/bin/env", bin.join("env")).expect("env");
    stub(&bin, "id", &format!("echo {uid}"));
    let log = dir.path().join("apt.log");
    if apt {
        stub(
            &bin,
            "apt-get",
            &format!("echo \"$(/usr/bin/id -u):$*\" >> {}", log.display()),
        );
    }
    if sudo {
        stub(
            &bin,
            "sudo",
            "[ \"$1\" = -n ] && shift; [ \"$1\" = true ] && exit 0; exec \"$@\"",
        );
    }
    (dir, bin)
}

fn run(bin: &Path) -> Output {
    Command::new("/bin/bash")
        .arg(script())
        .env_clear()
        .env("PATH", bin)
        .output()
        .expect("bash runs")
}

fn apt_calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("apt.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_once(':').map_or(l, |(_, c)| c).to_owned())
        .collect()
}

#[test]
fn as_root_the_missing_packages_are_installed_with_apt_get() {
    let (dir, bin) = machine(0, false, true);
    let o = run(&bin);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        apt_calls(dir.path()),
        [
            "update -qq".to_owned(),
            format!("install -y -qq --no-install-recommends {ALL}")
        ]
    );
}

#[test]
fn with_passwordless_sudo_they_are_installed_through_it() {
    let (dir, bin) = machine(1000, true, true);
    let o = run(&bin);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(apt_calls(dir.path()).len(), 2, "{o:?}");
}

#[test]
fn otherwise_one_line_says_what_to_install_and_it_fails() {
    let (dir, bin) = machine(1000, false, true);
    let o = run(&bin);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        format!(
            "scripts/test-deps: the tests need {ALL}: run `sudo apt-get install -y {ALL}`, then run again\n"
        )
    );
    assert!(apt_calls(dir.path()).is_empty());

    let (_, bin) = machine(0, false, false);
    let o = run(&bin);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "scripts/test-deps: the tests need {ALL}: install them with your package manager, then run again\n"
        )
    );
}
