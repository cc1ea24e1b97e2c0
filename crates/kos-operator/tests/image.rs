//! kos-operator's OCI image as `scripts/image` builds it, read by tools kos did not write: skopeo
//! for the image's configuration, tar for its layer, umoci to unpack it. Then the container its
//! Deployment (`kos-operator manifests`) describes runs from the unpacked image, with the image's
//! own loader and libraries, its command and arguments as the manifest gives them, as its
//! ServiceAccount against kos-kube-fake: it takes the Lease, is ready, and stops on SIGTERM.
//! skopeo and umoci are Debian packages that scripts/test-deps installs; a missing one fails.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::Value;

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    assert!(
        found,
        "`{name}` is required by this test and is missing: run scripts/test-deps, or \
         `apt-get install -y {name}`"
    );
    Command::new(name)
}

fn run(cmd: &mut Command) -> R<String> {
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

fn json_file(p: &Path) -> R<Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(p)?)?)
}

/// Kills the image's process when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_its_deployment_says() -> R {
    let dir = tempfile::tempdir()?;
    let layout = dir.path().join("image");
    run(Command::new(repo().join("scripts/image"))
        .arg("kos-operator")
        .arg(&layout)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_kos-operator"))
        .current_dir(repo()))?;

    let reference = format!("oci:{}:kos-operator", layout.display());
    let config: Value = serde_json::from_str(&run(
        tool("skopeo").args(["inspect", "--config", &reference])
    )?)?;
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532", "{config}");
    assert_eq!(
        c["Cmd"],
        serde_json::json!(["/bin/kos-operator"]),
        "{config}"
    );
    assert_eq!(
        c["Labels"]["org.opencontainers.image.title"],
        "kos-operator"
    );
    assert_eq!(
        c["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );

    // One layer, owned by root, the binary and the CA bundle in it, no shell.
    let index = json_file(&layout.join("index.json"))?;
    let digest = |d: &Value| -> R<PathBuf> {
        let hex = d
            .as_str()
            .and_then(|d| d.strip_prefix("sha256:"))
            .ok_or("not a sha256 digest")?;
        Ok(layout.join("blobs/sha256").join(hex))
    };
    let manifest = json_file(&digest(&index["manifests"][0]["digest"])?)?;
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    assert_eq!(layers.len(), 1, "{manifest}");
    let listing = run(tool("tar")
        .args(["--numeric-owner", "-tvzf"])
        .arg(digest(&layers[0]["digest"])?))?;
    for line in listing.lines() {
        assert!(line.contains(" 0/0 "), "an entry not owned by root: {line}");
    }
    for want in [
        "bin/kos-operator",
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
    ] {
        assert!(listing.contains(want), "{want} missing:\n{listing}");
    }
    assert!(
        !listing
            .lines()
            .any(|l| l.contains("bin/sh") || l.contains("bin/bash")),
        "a shell in the image:\n{listing}"
    );

    // The Deployment's container, as `kos-operator manifests` renders it for this image.
    let fake = kos_kube_fake::FakeKube::start().await?;
    let docs = support::apply_manifests(&fake);
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .ok_or("no Deployment")?;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    // Kubernetes runs `command` (the image has no entrypoint), then `args`.
    let command = strings(&container["command"]);
    assert_eq!(command, ["/bin/kos-operator"], "{container}");
    let (probes, metrics) = (free_port()?, free_port()?);
    // The ports the manifest names, on loopback ports free here.
    let args: Vec<String> = strings(&container["args"])
        .into_iter()
        .map(|a| {
            if a.starts_with("--metrics-bind-address=") {
                format!("--metrics-bind-address=127.0.0.1:{metrics}")
            } else if a.starts_with("--health-probe-bind-address=") {
                format!("--health-probe-bind-address=127.0.0.1:{probes}")
            } else {
                a
            }
        })
        .collect();
    assert!(args.iter().any(|a| a == "--leader-elect"), "{args:?}");

    let bundle = dir.path().join("bundle");
    run(tool("umoci")
        .args([
            "unpack",
            "--rootless",
            "--image",
            &format!("{}:kos-operator", layout.display()),
        ])
        .arg(&bundle))?;
    let rootfs = bundle.join("rootfs");
    assert_eq!(
        json_file(&bundle.join("config.json"))?["process"]["user"]["uid"],
        65532
    );
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
    // Outside a pod there is no mounted ServiceAccount token: the same token in a kubeconfig.
    let kubeconfig = support::operator_kubeconfig(&fake, dir.path());
    let mut op = Running(
        Command::new(&loader)
            .arg("--library-path")
            .arg(&libs)
            .arg(rootfs.join(command[0].trim_start_matches('/')))
            .args(&args)
            .env_clear()
            .env("HOME", "/nonexistent")
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAMESPACE", "kos-system")
            .env("POD_NAME", "kos-operator-0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let leases: Api<Lease> = Api::namespaced(fake.client()?, "kos-system");
    let ready = format!("http://127.0.0.1:{probes}/readyz");
    let mut led = false;
    for _ in 0..600 {
        let holder = leases
            .get_opt(kos_operator::rbac::LEASE_NAME)
            .await?
            .and_then(|l| l.spec?.holder_identity);
        let is_ready = reqwest::get(&ready)
            .await
            .is_ok_and(|r| r.status().is_success());
        if is_ready && holder.is_some_and(|h| h.starts_with("kos-operator-0_")) {
            led = true;
            break;
        }
        assert!(
            op.0.try_wait()?.is_none(),
            "the image's kos-operator exited"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(led, "the image's kos-operator never led and was ready");
    let metrics_text = reqwest::get(format!("http://127.0.0.1:{metrics}/metrics"))
        .await?
        .text()
        .await?;
    assert!(
        metrics_text.contains("leader_election_master_status{name=\"kos-operator\"} 1"),
        "{metrics_text}"
    );

    // The kubelet's SIGTERM: exit 0.
    run(Command::new("kill").args(["-TERM", &op.0.id().to_string()]))?;
    for _ in 0..600 {
        if let Some(status) = op.0.try_wait()? {
            assert!(status.success(), "exited {status}");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the image's kos-operator did not stop on SIGTERM".into())
}

fn free_port() -> R<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
