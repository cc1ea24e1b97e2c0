//! The `kos-csi` binary: exit codes, the socket it serves, SIGTERM. Node-only, so nothing of the
//! machine is touched (the node's commands run only when a node call asks).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kos_csi::csi;
use kos_csi::csi::identity_client::IdentityClient;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

const BIN: &str = env!("CARGO_BIN_EXE_kos-csi");

type R = Result<(), Box<dyn std::error::Error>>;

#[test]
fn bad_usage_exits_2_before_serving() -> R {
    for args in [
        vec![
            "--endpoint=tcp://127.0.0.1:10000",
            "--provide-controller-service=false",
        ],
        // The controller needs a cloud.conf.
        vec!["--endpoint=unix:///nonexistent/csi.sock"],
        vec![
            "--endpoint=unix:///nonexistent/csi.sock",
            "--cloud-config=/c",
            "--cloud-name=b",
        ],
    ] {
        let out = Command::new(BIN).args(&args).output()?;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(!out.stderr.is_empty());
    }
    // Upstream's manifests run `[/bin/cinder-csi-plugin, --flags…]`: the path is dropped.
    let out = Command::new(BIN)
        .args(["/bin/cinder-csi-plugin", "--endpoint=tcp://x"])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcp://x"));
    Ok(())
}

#[tokio::test]
async fn a_node_plugin_serves_its_socket_and_stops_on_sigterm() -> R {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("plugin/csi.sock");
    let mut child = tokio::process::Command::new(BIN)
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg("--provide-controller-service=false")
        .arg(format!(
            "--kubelet-dir={}",
            dir.path().join("kubelet").display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(120);
    while !socket.exists() {
        if let Some(s) = child.try_wait()? {
            return Err(format!("exited before serving: {s}").into());
        }
        if tokio::time::Instant::now() > give_up {
            child.kill().await?;
            return Err("never bound its socket".into());
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
    let pid = child.id().ok_or("no pid")?;
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    assert!(term.success());
    // Waited on without blocking this runtime: the client's connection answers the server's
    // HTTP/2 goodbye, and the driver stops at once.
    let status = child.wait().await?;
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(
        !Path::new(&socket).exists(),
        "the socket is removed on exit"
    );
    Ok(())
}
