//! What the image tests of kos-ccm, kos-csi and kos-operator share (each includes this file with
//! `#[path]`): the repository, the outside tools they read an image with, and how a program of an
//! unpacked image is started with the image's own loader and libraries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

pub type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The workspace root (the test's crate is `crates/<name>`).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An outside tool (skopeo, umoci, tar): a missing one fails the test and says how to install it.
pub fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    assert!(
        found,
        "`{name}` is required by this test and is missing: run scripts/test-deps, or \
         `apt-get install -y {name}`"
    );
    Command::new(name)
}

/// Runs `cmd`; its stdout, or an error with everything it said.
pub fn run(cmd: &mut Command) -> R<String> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `scripts/image NAME OUT --binary BINARY`: the image of the binary the test was built with.
pub fn build(name: &str, binary: &str, out: &Path) -> R {
    run(Command::new(repo().join("scripts/image"))
        .arg(name)
        .arg(out)
        .arg("--binary")
        .arg(binary)
        .current_dir(repo()))?;
    Ok(())
}

pub fn json_file(p: &Path) -> R<Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(p)?)?)
}

/// The blob behind `sha256:<hex>` in an OCI layout.
pub fn blob(layout: &Path, digest: &str) -> R<PathBuf> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("not a sha256 digest: {digest}"))?;
    Ok(layout.join("blobs/sha256").join(hex))
}

/// `<rootfs loader> --library-path <rootfs libs> <rootfs program>`: runs a program of the image with
/// nothing of this machine's libraries (and no environment).
pub fn in_image(rootfs: &Path, program: &str) -> R<Command> {
    let loader = ["lib64/ld-linux-x86-64.so.2", "lib/ld-linux-aarch64.so.1"]
        .iter()
        .map(|l| rootfs.join(l))
        .find(|p| p.is_file())
        .ok_or("no dynamic loader in the image")?;
    let libs = [
        "lib",
        "lib64",
        "lib/x86_64-linux-gnu",
        "lib/aarch64-linux-gnu",
    ]
    .iter()
    .map(|d| rootfs.join(d).display().to_string())
    .collect::<Vec<_>>()
    .join(":");
    let mut c = Command::new(loader);
    c.arg("--library-path")
        .arg(libs)
        .arg(rootfs.join(program.trim_start_matches('/')))
        .env_clear();
    Ok(c)
}

/// Kills the image's process when the test ends, however it ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
