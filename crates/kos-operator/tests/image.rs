//! kos-operator's OCI image as `scripts/image` builds it, read by tools kos did not write: skopeo
//! for the image's configuration, tar for its layer, umoci to unpack it. Then the container its
//! Deployment (`kos-operator manifests`) describes runs from the unpacked image, with the image's
//! own loader and libraries, its command and arguments as the manifest gives them, as its
//! ServiceAccount against kos-kube-fake: it takes the Lease, is ready, and stops on SIGTERM.
//! skopeo and umoci are Debian packages that scripts/test-deps installs; a missing one fails.

#[path = "../../../testdata/rust/oci_image.rs"]
mod oci;
mod support;
use oci::{R, Running, in_image, json_file, run, tool};

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_its_deployment_says() -> R {
    let dir = tempfile::tempdir()?;
    let layout = dir.path().join("image");
    oci::build("kos-operator", env!("CARGO_BIN_EXE_kos-operator"), &layout)?;

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
    let digest = |d: &Value| oci::blob(&layout, d.as_str().unwrap_or_default());
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
    // Outside a pod there is no mounted ServiceAccount token: the same token in a kubeconfig.
    let kubeconfig = support::operator_kubeconfig(&fake, dir.path());
    let mut op = Running(
        in_image(&rootfs, &command[0])?
            .args(&args)
            .env("HOME", "/nonexistent")
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAMESPACE", "kos-system")
            .env("POD_NAME", "kos-operator-0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("operator.log"))?)
            .spawn()?,
    );
    // What it said, when it stopped: a port taken between `free_port` and its bind, say.
    let said = || std::fs::read_to_string(dir.path().join("operator.log")).unwrap_or_default();
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
            "the image's kos-operator exited: {}",
            said()
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
