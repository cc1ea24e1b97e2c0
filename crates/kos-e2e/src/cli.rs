//! The `kos` CLI as a user runs it: the real binary, `--cloud <name>` with a clouds.yaml, and a private
//! data directory (PKI, CCM credential) per scenario.
//!
//! kos-e2e is another package than `kos`, so cargo gives its tests no `CARGO_BIN_EXE_kos`: the binary is
//! built with `cargo build --workspace --bin kos` once per test process (a no-op when it is fresh), so a
//! scenario never runs a stale one. `--workspace` resolves features as `cargo test --workspace` does, so
//! this reuses that build instead of compiling a second variant. `KOS_E2E_KOS_BIN` names a prebuilt
//! binary instead.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;

/// Names a prebuilt `kos` binary (skips the build).
pub const BIN_VAR: &str = "KOS_E2E_KOS_BIN";
/// How far `kos up` follows a cluster on a real cloud (`infra`, `bootstrap` or `ready`).
pub const WAIT_VAR: &str = "KOS_E2E_WAIT";

/// Which cloud the CLI is pointed at.
#[derive(Debug, Clone)]
pub struct CliCloud {
    /// The name in clouds.yaml (`--cloud`).
    pub name: String,
    /// `OS_CLIENT_CONFIG_FILE`; `None`: the usual search path.
    pub file: Option<PathBuf>,
    /// The hermetic target: the process sees no `OS_*` variable and no HOME of the developer's.
    pub isolated: bool,
    /// `kos up --wait`.
    pub wait: String,
    /// The longest one command may take.
    pub timeout: Duration,
    /// `HTTPS_PROXY` for kos: the way to the clusters' APIs (a simulated cloud's CONNECT proxy);
    /// `None` keeps the caller's environment.
    pub proxy: Option<String>,
}

/// A `kos` CLI with its own data directory.
pub struct Kos {
    bin: PathBuf,
    data: tempfile::TempDir,
    cloud: CliCloud,
}

/// One finished command.
#[derive(Debug)]
pub struct Ran {
    pub line: String,
    /// `None`: killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Nova gave up placing a server: concurrent boots into a hard anti-affinity group race for the
    /// same host and are rescheduled until the hosts run out (a cloud with as many hosts as the
    /// group has members, like minicloud's three). kos boots such a server again itself, three boots
    /// at most; should all three lose, `kos up` again is the remedy its error gives.
    pub fn hit_scheduling_race(&self) -> bool {
        self.code == Some(1)
            && (self
                .stderr
                .contains("Exhausted all hosts available for retrying build failures")
                || self.stderr.contains("Exceeded max scheduling attempts")
                || self.stderr.contains("No valid host was found"))
    }

    /// Fails with the whole output unless the command exited with `code`.
    pub fn expect(self, code: i32) -> Result<Ran> {
        if self.code == Some(code) {
            Ok(self)
        } else {
            Err(anyhow!(
                "`{}` exited with {:?}, expected {code}\n{}",
                self.line,
                self.code,
                self.output()
            ))
        }
    }

    /// Both streams, for error messages (kos never prints a secret).
    pub fn output(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}\n",
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

impl Kos {
    /// A CLI for `cloud` with a fresh data directory (building the binary if needed).
    pub async fn new(cloud: CliCloud) -> Result<Kos> {
        Ok(Kos {
            bin: binary().await?,
            data: tempfile::Builder::new().prefix("kos-e2e-data-").tempdir()?,
            cloud,
        })
    }

    pub fn cloud(&self) -> &CliCloud {
        &self.cloud
    }

    /// Writes a spec into the data directory and gives its path.
    pub fn write_spec(&self, file: &str, text: &str) -> Result<PathBuf> {
        let p = self.data.path().join(file);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    /// The directory kos keeps a cluster's local secrets in.
    pub fn cluster_dir(&self, cluster: &str) -> PathBuf {
        self.data
            .path()
            .join("kos-data/clusters")
            .join(&self.cloud.name)
            .join(cluster)
    }

    /// `kos <args> --cloud <name>`, with the whole output.
    pub async fn run(&self, args: &[&str]) -> Result<Ran> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .args(["--cloud", &self.cloud.name])
            .current_dir(self.data.path())
            .env("KOS_DATA_DIR", self.data.path().join("kos-data"))
            .env_remove("OS_CLOUD")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A timed-out or abandoned command must not outlive the scenario.
            .kill_on_drop(true);
        if self.cloud.isolated {
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("OS_") {
                    cmd.env_remove(&k);
                }
            }
            cmd.env("HOME", self.data.path())
                .env("XDG_CONFIG_HOME", self.data.path().join(".config"));
        }
        if let Some(f) = &self.cloud.file {
            cmd.env("OS_CLIENT_CONFIG_FILE", f);
        }
        if let Some(p) = &self.cloud.proxy {
            for var in ["https_proxy", "NO_PROXY", "no_proxy"] {
                cmd.env_remove(var);
            }
            cmd.env("HTTPS_PROXY", p);
        }
        let line = format!("kos {} --cloud {}", args.join(" "), self.cloud.name);
        let child = cmd.spawn().with_context(|| format!("starting `{line}`"))?;
        let started = std::time::Instant::now();
        let out = tokio::time::timeout(self.cloud.timeout, child.wait_with_output())
            .await
            .map_err(|_| anyhow!("`{line}` did not finish within {:?}", self.cloud.timeout))?
            .with_context(|| format!("running `{line}`"))?;
        // Captured by the test harness; shown for a failed scenario (and with --nocapture).
        eprintln!(
            "{line}: exit {:?} after {:.1}s",
            out.status.code(),
            started.elapsed().as_secs_f64()
        );
        Ok(Ran {
            line,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// `kos up -f <spec> --wait <target's>`, which must succeed.
    pub async fn up(&self, spec: &Path) -> Result<Ran> {
        self.try_up(spec).await?.expect(0)
    }

    /// `kos up -f <spec> --wait <target's>`, whatever its exit code.
    pub async fn try_up(&self, spec: &Path) -> Result<Ran> {
        let spec = utf8(spec)?;
        self.run(&["up", "-f", spec, "--wait", &self.cloud.wait])
            .await
    }

    /// `kos plan -f <spec> --detailed-exitcode`: its exit code (0 nothing to do, 2 changes) and output.
    pub async fn plan(&self, spec: &Path) -> Result<Ran> {
        self.run(&["plan", "-f", utf8(spec)?, "--detailed-exitcode"])
            .await
    }

    /// `kos plan -f <spec> --output json`, parsed.
    pub async fn plan_json(&self, spec: &Path) -> Result<Value> {
        let ran = self
            .run(&["plan", "-f", utf8(spec)?, "--output", "json"])
            .await?
            .expect(0)?;
        serde_json::from_str(&ran.stdout)
            .with_context(|| format!("plan JSON of `{}`\n{}", ran.line, ran.output()))
    }

    /// `kos doctor <cluster> -f <spec>`, whatever its exit code (2: a needed flow is blocked).
    pub async fn doctor(&self, cluster: &str, spec: &Path) -> Result<Ran> {
        self.run(&["doctor", cluster, "-f", utf8(spec)?]).await
    }

    /// `kos down <cluster>`, which must succeed.
    pub async fn down(&self, cluster: &str) -> Result<Ran> {
        self.run(&["down", cluster]).await?.expect(0)
    }

    /// `kos gc [args]`, which must succeed; its orphans as (cluster, line).
    pub async fn gc(&self, args: &[&str]) -> Result<(Ran, Vec<(String, String)>)> {
        let mut all = vec!["gc"];
        all.extend_from_slice(args);
        let ran = self.run(&all).await?.expect(0)?;
        let orphans = gc_lines(&ran.stdout);
        Ok((ran, orphans))
    }
}

/// The orphan lines of `kos gc`'s output (`<cluster> <kind> <name> <reason>`), keyed by cluster.
fn gc_lines(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter(|l| {
            !(l.is_empty()
                || l.starts_with("No orphans.")
                || l.contains(" orphan(s)")
                || l.starts_with("Deleted "))
        })
        .filter_map(|l| {
            let cluster = l.split_whitespace().next()?;
            Some((cluster.to_owned(), l.to_owned()))
        })
        .collect()
}

fn utf8(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// The `kos` binary: `KOS_E2E_KOS_BIN`, else built once per process.
async fn binary() -> Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    tokio::task::spawn_blocking(|| BIN.get_or_init(build).clone())
        .await?
        .map_err(|e| anyhow!(e))
}

fn build() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(BIN_VAR) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{BIN_VAR}={} is not a file", p.display()))
        };
    }
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let manifest = crate::workspace().join("Cargo.toml");
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--workspace", "--bin", "kos"])
        .arg("--message-format=json-render-diagnostics")
        .arg("--manifest-path")
        .arg(&manifest)
        .stdin(Stdio::null());
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run cargo to build kos: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(40).collect();
        return Err(format!(
            "`cargo build --bin kos` failed:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "kos")
        .and_then(|v| v["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "`cargo build --bin kos` named no kos executable".to_owned())
}

/// `kos up --wait` on a real cloud: `KOS_E2E_WAIT`, else `infra` (a test image runs no kos bootstrap,
/// and minicloud's servers never run cloud-init).
pub fn real_cloud_wait() -> Result<String> {
    match std::env::var(WAIT_VAR) {
        Err(_) => Ok("infra".into()),
        Ok(w) if ["infra", "bootstrap", "ready"].contains(&w.as_str()) => Ok(w),
        Ok(w) => bail!("{WAIT_VAR}={w:?}: expected infra, bootstrap or ready"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_lines_are_the_orphans_only() {
        let out = "e2e-1-og        security group         kos-e2e-1-og-sg-node                     its cluster has no servers and no network\n\
                   other           volume                 pvc-x                                    made at run time by a cluster of which nothing is left\n\
                   2 orphan(s); `kos gc --delete` removes them.\n";
        let l = gc_lines(out);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].0, "e2e-1-og");
        assert_eq!(l[1].0, "other");
        assert!(gc_lines("No orphans.\n").is_empty());
        assert!(gc_lines("Deleted 2 orphan(s).\n").is_empty());
    }
}
