//! kos-ccm's OCI image as `scripts/image` builds it, read by tools kos did not write: skopeo for the
//! image's configuration (user, command, architecture, labels), umoci to unpack its filesystem, tar
//! for its layer's owners. Then the image's own binary, loaded with the image's own libraries, runs
//! with the upstream CCM manifest's arguments against kos-sim and kos-kube-fake and answers its
//! health check. The same binary built twice gives the same image digest. skopeo and umoci are
//! Debian packages that scripts/test-deps installs; a missing one fails the test.

mod support;
use support::{R, wait_for_async};
#[path = "../../../testdata/rust/oci_image.rs"]
mod oci;
use oci::{Running, blob, in_image, json_file, repo, run, tool};

use std::process::{Command, Stdio};

use kos_kube_fake::FakeKube;
use kos_sim::{Sim, SimConfig};
use serde_json::Value;

#[tokio::test]
async fn the_image_is_reproducible_non_root_and_its_binary_runs_as_the_manifest_says() -> R {
    let dir = tempfile::tempdir()?;
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    oci::build("kos-ccm", env!("CARGO_BIN_EXE_kos-ccm"), &a)?;
    oci::build("kos-ccm", env!("CARGO_BIN_EXE_kos-ccm"), &b)?;
    let index = json_file(&a.join("index.json"))?;
    assert_eq!(
        index,
        json_file(&b.join("index.json"))?,
        "one binary, two image digests"
    );

    // What skopeo reads from the image's configuration.
    let reference = format!("oci:{}:kos-ccm", a.display());
    let config: Value = serde_json::from_str(&run(
        tool("skopeo").args(["inspect", "--config", &reference])
    )?)?;
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532", "{config}");
    assert_eq!(c["Cmd"], serde_json::json!(["/bin/kos-ccm"]), "{config}");
    assert!(
        c.get("Entrypoint").is_none_or(Value::is_null),
        "no entrypoint: manifests' args are the command: {config}"
    );
    assert_eq!(config["os"], "linux");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!(config["architecture"], arch);
    let labels = &c["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "kos-ccm");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap_or_default();
    assert!(
        revision.len() >= 40 && revision[..40].bytes().all(|b| b.is_ascii_hexdigit()),
        "the source revision: {revision:?}"
    );

    // One layer, every entry owned by root, no shell.
    let manifest_digest = index["manifests"][0]["digest"].as_str().unwrap_or_default();
    let manifest = json_file(&blob(&a, manifest_digest)?)?;
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    assert_eq!(layers.len(), 1, "{manifest}");
    let layer = blob(&a, layers[0]["digest"].as_str().unwrap_or_default())?;
    let listing = run(tool("tar").args(["--numeric-owner", "-tvzf"]).arg(&layer))?;
    for line in listing.lines() {
        assert!(line.contains(" 0/0 "), "an entry not owned by root: {line}");
    }
    for want in [
        "bin/kos-ccm",
        "bin/openstack-cloud-controller-manager",
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
    ] {
        assert!(
            listing.lines().any(|l| l.contains(want)),
            "{want} missing:\n{listing}"
        );
    }
    assert!(
        !listing
            .lines()
            .any(|l| l.contains("bin/sh") || l.contains("bin/bash")),
        "a shell in the image:\n{listing}"
    );

    // umoci unpacks it; the image's binary runs with the image's loader and libraries only, as the
    // upstream CCM's manifest runs it (its first argument the binary's path), and is healthy.
    let bundle = dir.path().join("bundle");
    run(tool("umoci")
        .args([
            "unpack",
            "--rootless",
            "--image",
            &format!("{}:kos-ccm", a.display()),
        ])
        .arg(&bundle))?;
    let rootfs = bundle.join("rootfs");
    let runtime = json_file(&bundle.join("config.json"))?;
    assert_eq!(runtime["process"]["user"]["uid"], 65532);

    let sim = Sim::start(SimConfig::fast()).await?;
    let fake = FakeKube::start().await?;
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some("kube-system".into());
    fake.insert(&ns)?;
    let sc = sim.config();
    let conf = dir.path().join("cloud.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\n\
             domain-name = Default\nregion = {}\n",
            sim.auth_url(),
            sc.username,
            sc.password,
            sc.project,
            sc.region,
        ),
    )?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\nusers:\n\
             - name: fake\n  user: {{}}\ncurrent-context: fake\n",
            fake.url()
        ),
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _ccm = Running(
        in_image(&rootfs, "/bin/openstack-cloud-controller-manager")?
            .arg("/bin/openstack-cloud-controller-manager")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--cluster-name=prod",
                "--bind-address=127.0.0.1",
                &format!("--secure-port={port}"),
                "--v=1",
            ])
            .env("HOME", "/nonexistent")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let health = format!("http://127.0.0.1:{port}/healthz");
    wait_for_async("the image's kos-ccm to answer /healthz", || async {
        Ok(reqwest::get(&health)
            .await
            .ok()
            .filter(|r| r.status().is_success()))
    })
    .await?;
    drop(sim);

    // The push script copies the layout to a reference (a registry's in real use, here another layout).
    let pushed = dir.path().join("pushed");
    run(Command::new(repo().join("scripts/image-push"))
        .arg(&a)
        .arg("kos-ccm")
        .arg(format!("oci:{}:0.1.0", pushed.display())))?;
    let copied: Value = serde_json::from_str(&run(tool("skopeo").args([
        "inspect",
        "--config",
        &format!("oci:{}:0.1.0", pushed.display()),
    ]))?)?;
    assert_eq!(copied, config);
    Ok(())
}
