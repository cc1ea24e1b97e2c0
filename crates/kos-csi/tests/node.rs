//! The Node service on the in-memory kernel: what it formats, mounts and refuses.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kos_csi::config::{BlockStorage, DriverConfig, NodeConfig};
use kos_csi::csi;
use kos_csi::metadata::{Fixed, MetaData};
use kos_csi::node::NodeService;
use kos_csi::node::fake::FakeKernel;
use kos_csi::{CsiError, GIB, RESIZE_REQUIRED_KEY, TOPOLOGY_KEY};
use support::{R, block_cap, mount_cap};

const VOL: &str = "8f9a7c1e-2b3d-4e5f-a6b7-c8d9e0f1a2b3";
const KUBELET: &str = "/var/lib/kubelet";

fn staging() -> String {
    format!("{KUBELET}/plugins/kubernetes.io/csi/cinder.csi.openstack.org/abc/globalmount")
}

fn target() -> String {
    format!("{KUBELET}/pods/p1/volumes/kubernetes.io~csi/pvc-1/mount")
}

fn service(bs: BlockStorage) -> (Arc<FakeKernel>, NodeService) {
    let k = Arc::new(FakeKernel::new());
    let mut cfg = DriverConfig::new("k1", bs);
    cfg.additional_topologies
        .insert("topology.kubernetes.io/region".into(), "r1".into());
    let md = Fixed(MetaData {
        uuid: "server-1".into(),
        availability_zone: "az2".into(),
    });
    let svc = NodeService::new(
        k.clone(),
        Arc::new(md),
        Arc::new(cfg),
        NodeConfig {
            kubelet_dir: PathBuf::from(KUBELET),
        },
    )
    .with_device_search(2, Duration::ZERO);
    (k, svc)
}

fn stage_req(cap: csi::VolumeCapability) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: VOL.into(),
        staging_target_path: staging(),
        volume_capability: Some(cap),
        ..Default::default()
    }
}

fn publish_req(cap: csi::VolumeCapability, readonly: bool) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: VOL.into(),
        staging_target_path: staging(),
        target_path: target(),
        volume_capability: Some(cap),
        readonly,
        ..Default::default()
    }
}

#[tokio::test]
async fn stage_formats_an_empty_disk_once_and_publish_bind_mounts_it() -> R {
    let (k, n) = service(BlockStorage::default());
    k.attach(VOL, "/dev/vdb", GIB);
    n.node_stage_volume(stage_req(mount_cap())).await?;
    let m = k.mount_at(Path::new(&staging())).ok_or("not staged")?;
    assert_eq!(
        (m.source, m.fs_type.as_deref()),
        (
            PathBuf::from("/dev/disk/by-id/virtio-8f9a7c1e-2b3d-4e5f-a"),
            Some("ext4")
        )
    );
    // Staged again (kubelet retries): nothing formatted or mounted twice.
    n.node_stage_volume(stage_req(mount_cap())).await?;
    let mkfs: Vec<_> = k
        .log()
        .into_iter()
        .filter(|l| l.starts_with("mkfs"))
        .collect();
    assert_eq!(mkfs, vec!["mkfs.ext4 /dev/vdb".to_owned()]);

    n.node_publish_volume(publish_req(mount_cap(), true))
        .await?;
    let p = k.mount_at(Path::new(&target())).ok_or("not published")?;
    assert_eq!(p.source, PathBuf::from(staging()));
    assert_eq!(p.options, vec!["bind".to_owned(), "ro".to_owned()]);
    n.node_publish_volume(publish_req(mount_cap(), true))
        .await?;

    n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: VOL.into(),
        target_path: target(),
    })
    .await?;
    assert!(k.mount_at(Path::new(&target())).is_none());
    n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: VOL.into(),
        staging_target_path: staging(),
    })
    .await?;
    assert!(k.mount_at(Path::new(&staging())).is_none());
    // Both again: already done is done.
    n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: VOL.into(),
        target_path: target(),
    })
    .await?;
    n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: VOL.into(),
        staging_target_path: staging(),
    })
    .await?;
    // The data survives a restage: the disk is not formatted again.
    n.node_stage_volume(stage_req(mount_cap())).await?;
    let mkfs = k
        .log()
        .into_iter()
        .filter(|l| l.starts_with("mkfs"))
        .count();
    assert_eq!(mkfs, 1);
    Ok(())
}

#[tokio::test]
async fn a_disk_holding_another_filesystem_is_never_formatted() -> R {
    let (k, n) = service(BlockStorage::default());
    k.attach(VOL, "/dev/vdb", GIB);
    k.with_fs("/dev/vdb", "xfs");
    let e = n.node_stage_volume(stage_req(mount_cap())).await;
    assert!(matches!(e, Err(CsiError::FailedPrecondition(_))), "{e:?}");
    assert_eq!(
        k.disk("/dev/vdb").and_then(|d| d.fs).as_deref(),
        Some("xfs")
    );
    assert!(!k.log().iter().any(|l| l.starts_with("mkfs")));
    Ok(())
}

#[tokio::test]
async fn a_disk_not_attached_is_not_found() -> R {
    let (k, n) = service(BlockStorage::default());
    let e = n.node_stage_volume(stage_req(mount_cap())).await;
    assert!(matches!(e, Err(CsiError::NotFound(_))), "{e:?}");
    // It probed udev between the looks.
    assert!(k.log().iter().any(|l| l == "udevadm trigger"));
    Ok(())
}

#[tokio::test]
async fn paths_outside_the_kubelet_directory_are_refused() -> R {
    let (k, n) = service(BlockStorage::default());
    k.attach(VOL, "/dev/vdb", GIB);
    for bad in [
        "/etc",
        "/var/lib/kubelet",
        "/var/lib/kubelet/../../../etc",
        "/var/lib/kubeletx/a",
        "relative/path",
        "/var/lib/kubelet/./a",
    ] {
        let mut r = stage_req(mount_cap());
        r.staging_target_path = bad.into();
        let e = n.node_stage_volume(r).await;
        assert!(
            matches!(e, Err(CsiError::InvalidArgument(_))),
            "{bad}: {e:?}"
        );
        let mut p = publish_req(mount_cap(), false);
        p.target_path = bad.into();
        let e = n.node_publish_volume(p).await;
        assert!(
            matches!(e, Err(CsiError::InvalidArgument(_))),
            "{bad}: {e:?}"
        );
    }
    assert!(k.log().is_empty(), "{:?}", k.log());
    Ok(())
}

#[tokio::test]
async fn a_block_volume_is_bind_mounted_as_the_device_itself() -> R {
    let (k, n) = service(BlockStorage::default());
    k.attach(VOL, "/dev/vdb", GIB);
    n.node_stage_volume(stage_req(block_cap())).await?;
    assert!(
        k.mount_at(Path::new(&staging())).is_none(),
        "block volumes are not staged"
    );
    n.node_publish_volume(publish_req(block_cap(), false))
        .await?;
    let m = k.mount_at(Path::new(&target())).ok_or("not published")?;
    assert_eq!(m.fs_type, None);
    assert_eq!(m.options, vec!["bind".to_owned(), "rw".to_owned()]);
    assert_eq!(
        k.disk("/dev/vdb").and_then(|d| d.fs),
        None,
        "never formatted"
    );
    Ok(())
}

#[tokio::test]
async fn node_info_names_the_server_zone_and_attach_limit() -> R {
    let (_, n) = service(BlockStorage {
        node_volume_attach_limit: Some(25),
        ..Default::default()
    });
    let i = n.node_get_info().await?;
    assert_eq!(
        (i.node_id.as_str(), i.max_volumes_per_node),
        ("server-1", 25)
    );
    let seg = i.accessible_topology.ok_or("no topology")?.segments;
    assert_eq!(seg.get(TOPOLOGY_KEY).map(String::as_str), Some("az2"));
    assert_eq!(
        seg.get("topology.kubernetes.io/region").map(String::as_str),
        Some("r1")
    );
    Ok(())
}

#[tokio::test]
async fn expand_rescans_and_grows_the_filesystem_and_stats_follow() -> R {
    let (k, n) = service(BlockStorage {
        rescan_on_resize: true,
        ..Default::default()
    });
    k.attach(VOL, "/dev/vdb", GIB);
    n.node_stage_volume(stage_req(mount_cap())).await?;
    n.node_publish_volume(publish_req(mount_cap(), false))
        .await?;
    let stats = |n: NodeService| async move {
        n.node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: VOL.into(),
            volume_path: target(),
            staging_target_path: String::new(),
        })
        .await
    };
    assert_eq!(stats(n.clone()).await?.usage[0].total, GIB);
    k.grow("/dev/vdb", 2 * GIB);
    let r = n
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: VOL.into(),
            volume_path: target(),
            capacity_range: support::gib(2),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await?;
    assert_eq!(r.capacity_bytes, 2 * GIB);
    assert!(k.log().iter().any(|l| l.starts_with("rescan ")));
    assert_eq!(stats(n.clone()).await?.usage[0].total, 2 * GIB);

    // The disk did not grow (Cinder's extend not seen yet): a rescan shows it, an error says so.
    let e = n
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: VOL.into(),
            volume_path: target(),
            capacity_range: support::gib(5),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await;
    assert!(matches!(e, Err(CsiError::Internal(_))), "{e:?}");
    let missing = n
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: VOL.into(),
            volume_path: format!("{KUBELET}/pods/gone/mount"),
            staging_target_path: String::new(),
        })
        .await;
    assert!(matches!(missing, Err(CsiError::NotFound(_))), "{missing:?}");
    Ok(())
}

#[tokio::test]
async fn a_volume_from_a_snapshot_is_grown_on_stage() -> R {
    let (k, n) = service(BlockStorage::default());
    k.attach(VOL, "/dev/vdb", 2 * GIB);
    k.with_fs("/dev/vdb", "ext4");
    k.grow("/dev/vdb", 4 * GIB);
    let mut r = stage_req(mount_cap());
    r.volume_context
        .insert(RESIZE_REQUIRED_KEY.into(), "true".into());
    n.node_stage_volume(r).await?;
    assert_eq!(k.disk("/dev/vdb").map(|d| d.fs_size), Some(4 * GIB));
    assert!(!k.log().iter().any(|l| l.starts_with("mkfs")));
    Ok(())
}
