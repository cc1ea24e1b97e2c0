//! The peer-client test for block storage: python-openstackclient, a client kos did not write, drives
//! kos-sim's Cinder and Nova through what a CSI driver does (a volume of a type, a snapshot, a volume
//! from it, an extend, an attach and a detach) and deletes it all again.
//!
//! The `openstack` CLI: `KOS_OPENSTACK_CLI`, then `~/.cache/kos/venv/bin/openstack` (where `.ci/run`
//! installs it), then `PATH`. Without it the test fails, saying how to install it: never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

struct Osc {
    bin: PathBuf,
    clouds_yaml: PathBuf,
    home: PathBuf,
}

impl Osc {
    /// `openstack <args>`: (success, stdout, stderr).
    fn try_run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(&self.bin)
            .args(args)
            .env("OS_CLIENT_CONFIG_FILE", &self.clouds_yaml)
            .env("OS_CLOUD", "sim")
            .env_remove("OS_AUTH_URL")
            .env_remove("OS_PASSWORD")
            .env_remove("OS_VOLUME_API_VERSION")
            .env_remove("OS_COMPUTE_API_VERSION")
            .env("HOME", &self.home)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn run(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.try_run(args);
        assert!(
            ok,
            "openstack {} failed:\nstdout: {out}\nstderr: {err}",
            args.join(" ")
        );
        out
    }

    /// Fails, and the error names `want`.
    fn refused(&self, args: &[&str], want: &str) {
        let (ok, out, err) = self.try_run(args);
        assert!(!ok, "openstack {} succeeded: {out}", args.join(" "));
        assert!(
            err.contains(want),
            "openstack {}: expected {want:?} in: {err}",
            args.join(" ")
        );
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-f", "json"]);
        let out = self.run(&a);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("openstack {}: not JSON ({e}): {out}", args.join(" ")))
    }

    fn id(&self, args: &[&str]) -> String {
        let v = self.json(args);
        v["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {v}"))
            .to_owned()
    }

    /// Polls `show` until `field` equals `want` (bounded; fails loudly rather than hanging).
    fn wait_for(&self, args: &[&str], field: &str, want: &str) -> Value {
        for _ in 0..120 {
            let v = self.json(args);
            // Strings and numbers alike (`status`, `size`).
            if v[field].as_str() == Some(want)
                || v[field].as_u64().is_some_and(|n| n.to_string() == want)
            {
                return v;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("openstack {} never reached {field}={want}", args.join(" "));
    }

    fn wait_gone(&self, args: &[&str]) {
        for _ in 0..120 {
            if !self.try_run(args).0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("openstack {} never stopped finding it", args.join(" "));
    }
}

#[test]
fn openstackclient_drives_snapshots_extend_and_attachments() {
    let bin = openstack_cli();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // 50x faster than a real cloud: a volume is ready in 0.1 s, a server in 0.6 s.
    let cfg = SimConfig {
        time_scale: 0.02,
        token_lifetime_secs: 1e7,
        latency: kos_sim::LatencyModel::instant(),
        ..SimConfig::default()
    };
    let sim = rt.block_on(Sim::start(cfg)).expect("simulator starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let clouds_yaml = dir.path().join("clouds.yaml");
    std::fs::write(&clouds_yaml, sim.clouds_yaml("sim")).expect("clouds.yaml");
    let osc = Osc {
        bin,
        clouds_yaml,
        home: dir.path().to_path_buf(),
    };

    // Types: the multiattach one says so to a member.
    let types = osc.json(&["volume", "type", "list", "--long"]);
    let multi = types
        .as_array()
        .expect("types")
        .iter()
        .find(|t| t["Name"] == "multiattach")
        .unwrap_or_else(|| panic!("no multiattach type in {types}"));
    assert!(
        multi["Properties"].to_string().contains("<is> True"),
        "{multi}"
    );
    osc.refused(
        &["volume", "create", "--size", "1", "--type", "nvme", "x"],
        "Volume type with name nvme could not be found.",
    );

    // A volume of a type, a snapshot of it, a volume from the snapshot.
    let vol = osc.id(&[
        "volume", "create", "--size", "1", "--type", "ssd", "peer-vol",
    ]);
    osc.wait_for(&["volume", "show", &vol], "status", "available");
    let snap = osc.id(&[
        "volume",
        "snapshot",
        "create",
        "--volume",
        &vol,
        "peer-snap",
    ]);
    let s = osc.wait_for(
        &["volume", "snapshot", "show", &snap],
        "status",
        "available",
    );
    assert_eq!(s["size"], 1);
    osc.refused(&["volume", "delete", &vol], "have snapshots");
    let listed = osc.json(&["volume", "snapshot", "list", "--volume", &vol]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    let copy = osc.id(&[
        "volume",
        "create",
        "--snapshot",
        &snap,
        "--size",
        "2",
        "peer-copy",
    ]);
    let c = osc.wait_for(&["volume", "show", &copy], "status", "available");
    assert_eq!(c["snapshot_id"], snap.as_str());
    assert_eq!(c["type"], "ssd");

    // Extend: through `extending` to the new size.
    osc.run(&["volume", "set", "--size", "3", &copy]);
    osc.wait_for(&["volume", "show", &copy], "size", "3");

    // Attach to a server and detach again.
    let image = osc.id(&["image", "show", "cirros-0.6.2"]);
    let server = osc.id(&[
        "server",
        "create",
        "--image",
        &image,
        "--flavor",
        "m1.tiny",
        "--nic",
        "none",
        "--wait",
        "peer-server",
    ]);
    osc.run(&["server", "add", "volume", &server, &copy]);
    let c = osc.wait_for(&["volume", "show", &copy], "status", "in-use");
    assert!(c["attachments"].to_string().contains(&server), "{c}");
    osc.refused(
        &["server", "add", "volume", &server, &copy],
        "already attached",
    );
    // An attached volume grows (volume API 3.42 on; the CLI refuses older ones itself).
    osc.run(&[
        "--os-volume-api-version",
        "3.42",
        "volume",
        "set",
        "--size",
        "4",
        &copy,
    ]);
    osc.wait_for(&["volume", "show", &copy], "size", "4");
    osc.wait_for(&["volume", "show", &copy], "status", "in-use");
    osc.run(&["server", "remove", "volume", &server, &copy]);
    osc.wait_for(&["volume", "show", &copy], "status", "available");

    // Everything goes.
    osc.run(&["server", "delete", "--wait", &server]);
    osc.run(&["volume", "delete", &copy]);
    osc.run(&["volume", "snapshot", "delete", &snap]);
    osc.wait_gone(&["volume", "snapshot", "show", &snap]);
    osc.run(&["volume", "delete", &vol]);
    osc.wait_gone(&["volume", "show", &vol]);
    osc.wait_gone(&["volume", "show", &copy]);
    rt.block_on(sim.stop());
}
