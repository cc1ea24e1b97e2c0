//! kos-csi's OCI image as `scripts/image` builds it, read by tools kos did not write (skopeo, umoci,
//! tar): root as upstream's image (the node plugin mounts), the command, the node tools its `Kernel`
//! runs, each of which starts with the image's own loader and libraries; then the image's binary,
//! started as the upstream node DaemonSet starts cinder-csi-plugin, answers GetPluginInfo on its
//! socket. skopeo and umoci (and the tools copied into the image) are Debian packages that
//! scripts/test-deps installs; a missing one fails the test.

use std::process::{Command, Stdio};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kos_csi::csi;
use kos_csi::csi::identity_client::IdentityClient;
use serde_json::Value;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

#[path = "../../../testdata/rust/oci_image.rs"]
mod oci;
use oci::{R, in_image, json_file, repo, run, tool};

/// What the node service runs (crates/kos-csi/src/node/kernel.rs), with a flag that makes each
/// print its version.
const TOOLS: &[(&str, &str)] = &[
    ("blkid", "--version"),
    ("findmnt", "--version"),
    ("blockdev", "--version"),
    ("mount", "--version"),
    ("umount", "--version"),
    ("mkfs.ext4", "-V"),
    ("mkfs.ext3", "-V"),
    ("resize2fs", "-P"),
    ("mkfs.xfs", "-V"),
    ("xfs_growfs", "-V"),
    ("udevadm", "--version"),
];

#[tokio::test]
async fn the_image_runs_as_root_with_its_node_tools_and_serves_the_socket() -> R {
    let dir = tempfile::tempdir()?;
    let layout = dir.path().join("layout");
    run(Command::new(repo().join("scripts/image"))
        .arg("kos-csi")
        .arg(&layout)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_kos-csi"))
        .current_dir(repo()))?;

    let reference = format!("oci:{}:kos-csi", layout.display());
    let config: Value = serde_json::from_str(&run(
        tool("skopeo").args(["inspect", "--config", &reference])
    )?)?;
    let c = &config["config"];
    assert_eq!(c["User"], "0:0", "the node plugin mounts: {config}");
    assert_eq!(c["Cmd"], serde_json::json!(["/bin/kos-csi"]), "{config}");
    assert!(c.get("Entrypoint").is_none_or(Value::is_null), "{config}");
    assert_eq!(c["Labels"]["org.opencontainers.image.title"], "kos-csi");

    let bundle = dir.path().join("bundle");
    run(tool("umoci")
        .args([
            "unpack",
            "--rootless",
            "--image",
            &format!("{}:kos-csi", layout.display()),
        ])
        .arg(&bundle))?;
    let rootfs = bundle.join("rootfs");
    let runtime = json_file(&bundle.join("config.json"))?;
    assert_eq!(runtime["process"]["user"]["uid"], 0);
    assert!(rootfs.join("bin/cinder-csi-plugin").is_file());
    assert!(
        !rootfs.join("bin/sh").exists() && !rootfs.join("bin/bash").exists(),
        "a shell in the image"
    );
    for (name, flag) in TOOLS {
        let out = in_image(&rootfs, &format!("bin/{name}"))?
            .arg(flag)
            .output()?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.code() != Some(127)
                && !said.contains("error while loading shared libraries"),
            "{name} does not start from the image's own libraries: {said}"
        );
    }

    // As the upstream node DaemonSet starts it: args beginning with the binary's path.
    let socket = dir.path().join("plugin/csi.sock");
    let mut child = tokio::process::Command::from(in_image(&rootfs, "bin/cinder-csi-plugin")?);
    child
        .arg("/bin/cinder-csi-plugin")
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg("--provide-controller-service=false")
        .arg(format!(
            "--kubelet-dir={}",
            dir.path().join("kubelet").display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = child.spawn()?;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(120);
    while !socket.exists() {
        if let Some(s) = child.try_wait()? {
            return Err(format!("the image's kos-csi exited before serving: {s}").into());
        }
        if tokio::time::Instant::now() > give_up {
            return Err("the image's kos-csi never bound its socket".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = socket.clone();
    let ch = Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
        }))
        .await?;
    let info = IdentityClient::new(ch)
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await?
        .into_inner();
    assert_eq!(info.name, "cinder.csi.openstack.org");
    child.kill().await?;
    Ok(())
}
