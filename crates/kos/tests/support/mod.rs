//! What the `kos` binary's tests share: running it isolated from the developer's machine, and a
//! `kos sim serve` in the background.
// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub const KOS: &str = env!("CARGO_BIN_EXE_kos");

/// python-openstackclient: `KOS_OPENSTACK_CLI`, then `$HOME/.cache/kos/venv/bin/openstack` (where `.ci/run`
/// installs it), then `PATH`. Without it the calling test fails, saying how to install it.
pub fn openstack_cli() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_OPENSTACK_CLI") {
        return PathBuf::from(p);
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/kos/venv/bin/openstack");
        if p.exists() {
            return p;
        }
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("openstack"))
                .find(|p| p.exists())
        })
        .unwrap_or_default();
    on_path.unwrap_or_else(|| {
        panic!(
            "python-openstackclient is not installed. Install it as .ci/run does:\n  python3 -m venv ~/.cache/kos/venv && \
             ~/.cache/kos/venv/bin/pip install python-openstackclient==10.5.0 python-octaviaclient==3.15.0\n\
             or point KOS_OPENSTACK_CLI at an `openstack` binary."
        )
    })
}

pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// `kos <args>` that sees no clouds.yaml but `clouds` (none from the developer's machine: not in the
/// working directory, not under HOME), its own data directory and no kubeconfig, so `--cloud sim`
/// means what the test intends.
pub fn isolated(data: &Path, clouds: Option<&Path>, args: &[&str]) -> Command {
    let mut cmd = Command::new(KOS);
    cmd.args(args)
        .current_dir(data)
        .env("HOME", data)
        .env("XDG_CONFIG_HOME", data.join(".config"))
        .env("KOS_DATA_DIR", data.join("kos-data"))
        .env_remove("OS_CLOUD")
        .env_remove("OS_CLIENT_CONFIG_FILE")
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG");
    if let Some(c) = clouds {
        cmd.env("OS_CLIENT_CONFIG_FILE", c);
    }
    cmd
}

pub fn kos(data: &Path, clouds: Option<&Path>, args: &[&str]) -> Output {
    isolated(data, clouds, args).output().expect("kos runs")
}

pub fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// `kos sim serve` in the background: a cloud that outlives the `kos` processes of a test, which the
/// test can change between and during their runs.
pub struct Served {
    child: Child,
    pub clouds: PathBuf,
    /// The simulator's base URL (its admin endpoint lives under it).
    pub base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts it with its clouds.yaml in `dir`, 20x faster than real time: an HA `up` takes seconds, a
/// wide window to kill it in.
pub fn serve(dir: &Path) -> Served {
    serve_scaled(dir, "0.05")
}

/// As [`serve`], at `time_scale` real seconds per cloud second.
pub fn serve_scaled(dir: &Path, time_scale: &str) -> Served {
    let clouds = dir.join("clouds.yaml");
    let mut child = Command::new(KOS)
        .args([
            "sim",
            "serve",
            "--port",
            "0",
            "--time-scale",
            time_scale,
            "--clouds-yaml",
        ])
        .arg(&clouds)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kos sim serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(first.contains("listening"), "{first}");
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    // Drain what it prints so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served {
        child,
        clouds,
        base,
    }
}
