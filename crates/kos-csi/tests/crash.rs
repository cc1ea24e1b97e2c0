//! The real `kos-csi` binary killed (SIGKILL) between Cinder's create of a volume and its answer:
//! the provisioner's retry of the same CreateVolume, answered by a restarted driver, names the
//! volume the dead one made, and Cinder holds exactly one volume of that name.
//!
//! kos-sim holds the create's answer (`latency.volume_create_answer_secs`) after the volume is
//! listed, as a real Cinder does between its row's commit and its answer; the kill lands while the
//! volume is visible and the call still open. No step is timed: every wait polls a condition.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kos_cloud::model::block_storage::{VolumeFilter, VolumeStatus};
use kos_csi::csi::controller_client::ControllerClient;
use support::{E, R, create_req};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint, Uri};

const BIN: &str = env!("CARGO_BIN_EXE_kos-csi");
/// Generous: the machine is slow and loaded; only a hang reaches it.
const PATIENCE: Duration = Duration::from_secs(120);

/// The controller alone (no node service, so nothing of this machine is touched), on `socket`.
fn spawn(conf: &Path, socket: &Path, home: &Path) -> Result<Child, E> {
    Ok(Command::new(BIN)
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg(format!("--cloud-config={}", conf.display()))
        .arg("--cluster=crash")
        .arg("--provide-node-service=false")
        .env_clear()
        .env("HOME", home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}

/// A channel to the driver once it serves `socket` (a restarted driver replaces the stale one).
async fn connect(child: &mut Child, socket: &Path) -> Result<Channel, E> {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(s) = child.try_wait()? {
            return Err(format!("kos-csi exited before serving: {s}").into());
        }
        if UnixStream::connect(socket).await.is_ok() {
            break;
        }
        if tokio::time::Instant::now() > give_up {
            return Err("kos-csi never served its socket".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path: PathBuf = socket.to_owned();
    Ok(Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
        }))
        .await?)
}

#[tokio::test]
async fn a_driver_killed_before_cinder_answers_makes_no_second_volume() -> R {
    let c = support::cloud("").await?;
    let dir = tempfile::tempdir()?;
    let conf = dir.path().join("cloud.conf");
    std::fs::write(&conf, &c.conf)?;
    let socket = dir.path().join("csi/csi.sock");
    let name = "pvc-7d3c2a90-crash";
    let named = VolumeFilter {
        name: Some(name.into()),
        ..VolumeFilter::default()
    };
    let app = c.sim.app();
    let mut slow = app.latency();
    slow.volume_create_answer_secs = 1e9;
    app.set_latency(slow);

    let mut first = spawn(&conf, &socket, dir.path())?;
    let ch = connect(&mut first, &socket).await?;
    let call = tokio::spawn(async move {
        ControllerClient::new(ch)
            .create_volume(create_req(name, 1))
            .await
    });
    // Cinder has made the volume; the driver has not heard back.
    let give_up = tokio::time::Instant::now() + PATIENCE;
    let made = loop {
        let found = c.session.block_storage().list_volumes(&named).await?;
        if let [v] = found.as_slice() {
            break v.id.clone();
        }
        assert!(found.is_empty(), "{} volumes named {name}", found.len());
        assert!(
            !call.is_finished(),
            "CreateVolume answered: {:?}",
            call.await
        );
        assert!(
            tokio::time::Instant::now() < give_up,
            "no volume {name} in Cinder"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!call.is_finished(), "the call is still open at the kill");
    first.start_kill()?; // SIGKILL
    let status = first.wait().await?;
    assert!(!status.success(), "{status}");
    let lost = call.await?;
    assert!(lost.is_err(), "the killed driver answered: {lost:?}");
    // Cinder answers at once again: a second create would now be made, and counted below.
    let mut normal = app.latency();
    normal.volume_create_answer_secs = 0.0;
    app.set_latency(normal);

    // The external-provisioner retries the same name against the restarted driver.
    let mut second = spawn(&conf, &socket, dir.path())?;
    let ch = connect(&mut second, &socket).await?;
    let retry = tokio::time::timeout(
        PATIENCE,
        ControllerClient::new(ch).create_volume(create_req(name, 1)),
    )
    .await??
    .into_inner();
    let vol = retry.volume.ok_or("CreateVolume answered no volume")?;
    assert_eq!(
        vol.volume_id, made,
        "the answer names the volume first made"
    );
    assert_eq!(vol.capacity_bytes, kos_csi::GIB);
    let all = c.session.block_storage().list_volumes(&named).await?;
    assert_eq!(
        all.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        [made.as_str()],
        "exactly one volume named {name}"
    );
    let v = c
        .session
        .block_storage()
        .wait_for_available(&made, tokio::time::Instant::now() + PATIENCE)
        .await?;
    assert_eq!(v.status, VolumeStatus::Available);
    assert_eq!(
        v.metadata
            .get("cinder.csi.openstack.org/cluster")
            .map(String::as_str),
        Some("crash")
    );
    second.start_kill()?;
    second.wait().await?;
    Ok(())
}
