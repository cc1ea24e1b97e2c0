//! The driver as the sidecars and the kubelet see it: the `kos-csi` flags, a unix socket, and a
//! gRPC client generated from the same csi.proto, against kos-sim and the in-memory kernel.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use hyper_util::rt::TokioIo;
use kos_ccm::config::CloudConfig;
use kos_cloud::Env;
use kos_cloud::model::block_storage::VolumeStatus;
use kos_csi::csi;
use kos_csi::csi::controller_client::ControllerClient;
use kos_csi::csi::identity_client::IdentityClient;
use kos_csi::csi::node_client::NodeClient;
use kos_csi::metadata::{Fixed, MetaData};
use kos_csi::node::fake::FakeKernel;
use kos_csi::run::{Options, run_with};
use support::{R, cloud, create_req, mount_cap};
use tokio::net::UnixStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    opts: Options,
}

struct Driver {
    channel: Channel,
    socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kos_csi::run::RunError>>,
    kernel: Arc<FakeKernel>,
    _dir: tempfile::TempDir,
}

/// Connects once the driver has bound its socket (it connects to the cloud first); a driver that
/// stopped instead is an error, and a generous bound keeps a broken one from hanging the run.
async fn connect(
    socket: &Path,
    task: &tokio::task::JoinHandle<Result<(), kos_csi::run::RunError>>,
) -> Result<Channel, Box<dyn std::error::Error>> {
    let socket = socket.to_owned();
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    while !socket.exists() {
        if task.is_finished() {
            return Err("the driver stopped before serving".into());
        }
        if tokio::time::Instant::now() > give_up {
            return Err("the driver never bound its socket".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let ch = Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await?;
    Ok(ch)
}

async fn start(conf: &str, node_id: &str) -> Result<Driver, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("csi/csi.sock");
    let flags = Flags::try_parse_from([
        "kos-csi".to_owned(),
        format!("--endpoint=unix://{}", socket.display()),
        "--cloud-config=/etc/config/cloud.conf".to_owned(),
        "--cluster=k1".to_owned(),
        "--with-topology=true".to_owned(),
        "--v=4".to_owned(),
    ])?;
    let loaded = CloudConfig::parse("cloud.conf", conf)?;
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let kernel = Arc::new(FakeKernel::new());
    let md = Arc::new(Fixed(MetaData {
        uuid: node_id.into(),
        availability_zone: "nova".into(),
    }));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let k = kernel.clone();
    let task = tokio::spawn(async move {
        run_with(flags.opts, &env, Some(loaded), k, md, async {
            let _ = rx.await;
        })
        .await
    });
    let channel = connect(&socket, &task).await?;
    Ok(Driver {
        channel,
        socket,
        stop: Some(tx),
        task,
        kernel,
        _dir: dir,
    })
}

impl Driver {
    async fn stop(mut self) -> R {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await??;
        assert!(!self.socket.exists(), "the socket is removed on exit");
        Ok(())
    }
}

#[tokio::test]
async fn identity_and_capabilities_are_upstreams() -> R {
    let c = cloud("").await?;
    let d = start(&c.conf, "n").await?;
    let mut id = IdentityClient::new(d.channel.clone());
    let info = id
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await?
        .into_inner();
    assert_eq!(info.name, "cinder.csi.openstack.org");
    assert!(info.vendor_version.starts_with("2.0.0@kos-"));
    let probe = id.probe(csi::ProbeRequest {}).await?.into_inner();
    assert_eq!(probe.ready, Some(true));
    let caps = id
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await?
        .into_inner()
        .capabilities;
    assert_eq!(caps.len(), 4, "{caps:?}");
    let mut ctl = ControllerClient::new(d.channel.clone());
    let cc = ctl
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await?
        .into_inner()
        .capabilities;
    assert_eq!(cc.len(), 9);
    let e = ctl
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .err()
        .map(|s| s.code());
    assert_eq!(e, Some(Code::Unimplemented));
    let mut node = NodeClient::new(d.channel.clone());
    let nc = node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await?
        .into_inner()
        .capabilities;
    assert_eq!(nc.len(), 3);
    d.stop().await
}

fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Option<Code> {
    r.err().map(|s| s.code())
}

#[tokio::test]
async fn sanity_cases_answer_with_the_spec_codes() -> R {
    let c = cloud("").await?;
    let d = start(&c.conf, "n").await?;
    let mut ctl = ControllerClient::new(d.channel.clone());
    let a = ctl
        .create_volume(create_req("sanity-1", 1))
        .await?
        .into_inner();
    let b = ctl
        .create_volume(create_req("sanity-1", 1))
        .await?
        .into_inner();
    assert_eq!(
        a.volume.map(|v| v.volume_id),
        b.volume.clone().map(|v| v.volume_id)
    );
    assert_eq!(
        code(ctl.create_volume(create_req("sanity-1", 2)).await),
        Some(Code::AlreadyExists)
    );
    assert_eq!(
        code(ctl.create_volume(create_req("", 1)).await),
        Some(Code::InvalidArgument)
    );
    let gone = "00000000-0000-0000-0000-000000000000";
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: gone.into(),
        ..Default::default()
    })
    .await?;
    assert_eq!(
        code(
            ctl.controller_publish_volume(csi::ControllerPublishVolumeRequest {
                volume_id: gone.into(),
                node_id: "n".into(),
                volume_capability: Some(mount_cap()),
                ..Default::default()
            })
            .await
        ),
        Some(Code::NotFound)
    );
    assert_eq!(
        code(
            ctl.validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest {
                volume_id: gone.into(),
                volume_capabilities: vec![mount_cap()],
                ..Default::default()
            })
            .await
        ),
        Some(Code::NotFound)
    );
    assert_eq!(
        code(
            ctl.list_volumes(csi::ListVolumesRequest {
                max_entries: 1,
                starting_token: "bogus".into()
            })
            .await
        ),
        Some(Code::Aborted)
    );
    let mut node = NodeClient::new(d.channel.clone());
    assert_eq!(
        code(
            node.node_stage_volume(csi::NodeStageVolumeRequest {
                volume_id: "v".into(),
                staging_target_path: "/etc".into(),
                volume_capability: Some(mount_cap()),
                ..Default::default()
            })
            .await
        ),
        Some(Code::InvalidArgument)
    );
    d.stop().await
}

#[tokio::test]
async fn a_claim_walks_from_create_to_delete_through_the_socket() -> R {
    let c = cloud("").await?;
    let server = c.server("node-a", "10.50.0.0/24").await?;
    let d = start(&c.conf, &server).await?;
    let mut ctl = ControllerClient::new(d.channel.clone());
    let mut node = NodeClient::new(d.channel.clone());

    let info = node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await?
        .into_inner();
    assert_eq!(info.node_id, server);
    let vol = ctl
        .create_volume(create_req("pvc-walk", 1))
        .await?
        .into_inner()
        .volume
        .ok_or("none")?;
    let publish = ctl
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: vol.volume_id.clone(),
            node_id: info.node_id.clone(),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await?
        .into_inner();
    let device = publish
        .publish_context
        .get("DevicePath")
        .cloned()
        .ok_or("no DevicePath")?;
    // The hypervisor shows the disk to the node by its serial.
    d.kernel.attach(&vol.volume_id, &device, kos_csi::GIB);
    let staging =
        "/var/lib/kubelet/plugins/kubernetes.io/csi/cinder.csi.openstack.org/x/globalmount";
    let target = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pvc-walk/mount";
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: vol.volume_id.clone(),
        publish_context: publish.publish_context.clone(),
        staging_target_path: staging.into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    })
    .await?;
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        publish_context: publish.publish_context.clone(),
        staging_target_path: staging.into(),
        target_path: target.into(),
        volume_capability: Some(mount_cap()),
        readonly: false,
        ..Default::default()
    })
    .await?;
    assert!(d.kernel.mount_at(Path::new(target)).is_some());
    let v = c
        .session
        .block_storage()
        .get_volume(&vol.volume_id)
        .await?
        .ok_or("gone")?;
    assert_eq!(v.status, VolumeStatus::InUse);

    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        target_path: target.into(),
    })
    .await?;
    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: vol.volume_id.clone(),
        staging_target_path: staging.into(),
    })
    .await?;
    ctl.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        node_id: server.clone(),
        ..Default::default()
    })
    .await?;
    ctl.delete_volume(csi::DeleteVolumeRequest {
        volume_id: vol.volume_id.clone(),
        ..Default::default()
    })
    .await?;
    let left = c.session.block_storage().get_volume(&vol.volume_id).await?;
    assert!(
        left.as_ref()
            .is_none_or(|v| v.status == VolumeStatus::Deleting),
        "{left:?}"
    );
    d.stop().await
}

/// A Python with grpcio-tools: `KOS_CSI_PYTHON`, else the venv scripts/test installs it into.
fn sanity_python() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_CSI_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = std::env::var_os("KOS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/kos/venv")
        });
    venv.join("bin/python")
}

/// The sanity cases, by a client that grpcio-tools generated from the spec's csi.proto: no code
/// of kos's on the client side.
#[tokio::test]
async fn a_client_generated_by_grpcio_tools_passes_the_sanity_cases() -> R {
    let python = sanity_python();
    let has_tools = std::process::Command::new(&python)
        .args(["-c", "import grpc_tools, grpc"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_tools,
        "{} has no grpcio-tools. Install it as scripts/test does:\n  python3 -m venv ~/.cache/kos/venv && \
         ~/.cache/kos/venv/bin/pip install grpcio==1.85.3 grpcio-tools==1.85.1\n\
         or point KOS_CSI_PYTHON at a python that has it",
        python.display()
    );
    let c = cloud("").await?;
    let server = c.server("node-s", "10.60.0.0/24").await?;
    let d = start(&c.conf, &server).await?;
    let work = tempfile::tempdir()?;
    let here =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let proto = format!("{here}/proto");
    let script = format!("{here}/tests/python/csi_sanity.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .arg("--socket")
        .arg(&d.socket)
        .args(["--proto-dir", &proto])
        .arg("--work")
        .arg(work.path())
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sanity failed:\n{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.ends_with(" passed, 0 failed") && !last.starts_with("0 "),
        "{stdout}"
    );
    // What the sanity run made, it deleted.
    let left = c
        .session
        .block_storage()
        .list_volumes(&Default::default())
        .await?;
    assert!(
        left.iter().all(|v| v.status == VolumeStatus::Deleting),
        "{left:?}"
    );
    d.stop().await
}
