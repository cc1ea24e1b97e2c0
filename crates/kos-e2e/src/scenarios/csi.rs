//! kos-csi's controller on the target's Cinder (issue 21, item 4): CreateVolume idempotent by name
//! (the same answer twice, another size refused), a snapshot and a volume restored from it, an
//! expansion, publish to a server and unpublish through Nova (each asked twice), and deletes that
//! succeed again when repeated, as the sidecars' retries need. On minicloud this is real Cinder and
//! Nova; on kos-sim, their model.

use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use kos_csi::config::DriverConfig;
use kos_csi::controller::Controller;
use kos_csi::{CsiError, GIB, csi};

use kos_cloud::model::compute::{Boot, Nic, ServerCreate};

use super::network_with_subnet;
use crate::{Ctx, Made};

fn create(name: &str, gib: i64) -> csi::CreateVolumeRequest {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: gib * GIB,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: "ext4".into(),
                ..Default::default()
            })),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }],
        ..Default::default()
    }
}

pub async fn csi_controller(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        // As kos-csi runs: on the credential kos makes for the CCM and the CSI. The checks look
        // as the user, so that every call made with the credential is kos-csi's.
        let ctl = Controller::new(
            super::identity::ccm_session(ctx, made).await?,
            Arc::new(DriverConfig::new(ctx.run.name("csi"), Default::default())),
        );
        let name = ctx.run.name("pvc-a");
        let a = ctl
            .create_volume(create(&name, 1))
            .await?
            .volume
            .ok_or_else(|| anyhow!("CreateVolume answered no volume"))?;
        made.push(Made::Volume(a.volume_id.clone()));
        let again = ctl
            .create_volume(create(&name, 1))
            .await?
            .volume
            .ok_or_else(|| anyhow!("no volume"))?;
        ensure!(
            again.volume_id == a.volume_id,
            "a second volume for one name"
        );
        let bigger = ctl.create_volume(create(&name, 2)).await;
        ensure!(
            matches!(bigger, Err(CsiError::AlreadyExists(_))),
            "another size for one name: {bigger:?}"
        );
        let v = ctx
            .session
            .block_storage()
            .get_volume(&a.volume_id)
            .await?
            .ok_or_else(|| anyhow!("volume {} not in Cinder", a.volume_id))?;
        ensure!(
            v.metadata.get("cinder.csi.openstack.org/cluster") == Some(&ctx.run.name("csi")),
            "upstream's cluster key: {:?}",
            v.metadata
        );

        // Published to a node (a server), twice with one answer, then unpublished twice.
        let sub = network_with_subnet(ctx, made, "csinet", "10.252.0.0/24").await?;
        let (flavor, image) = (ctx.flavor().await?, ctx.image().await?);
        let mut req = ServerCreate::new(
            ctx.run.name("node"),
            &flavor.id,
            Boot::Image(image.id.clone()),
        );
        req.nics = vec![Nic::Network {
            id: sub.network_id.clone(),
            fixed_ip: None,
        }];
        req.tags = ctx.run.tags();
        let node = ctx.session.compute().create_server(&req).await?;
        made.push(Made::Server(node.id.clone()));
        ctx.session
            .compute()
            .wait_for_server_active(&node.id, ctx.deadline())
            .await?;
        let publish = || {
            use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
            csi::ControllerPublishVolumeRequest {
                volume_id: a.volume_id.clone(),
                node_id: node.id.clone(),
                volume_capability: Some(csi::VolumeCapability {
                    access_type: Some(AccessType::Mount(MountVolume::default())),
                    access_mode: Some(AccessMode {
                        mode: Mode::SingleNodeWriter as i32,
                    }),
                }),
                ..Default::default()
            }
        };
        let first = ctl.controller_publish_volume(publish()).await?;
        let device = first.publish_context.get("DevicePath").cloned();
        ensure!(
            device.as_deref().is_some_and(|d| d.starts_with("/dev/")),
            "publish context: {:?}",
            first.publish_context
        );
        let again = ctl.controller_publish_volume(publish()).await?;
        ensure!(
            again.publish_context == first.publish_context,
            "a second publish answered {:?}",
            again.publish_context
        );
        let bs = ctx.session.block_storage();
        let attached = bs
            .get_volume(&a.volume_id)
            .await?
            .ok_or_else(|| anyhow!("volume gone"))?;
        ensure!(
            attached.status.as_str() == "in-use"
                && attached.attachments.iter().any(|x| x.server_id == node.id),
            "after publish: {} {:?}",
            attached.status.as_str(),
            attached.attachments
        );
        for _ in 0..2 {
            ctl.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
                volume_id: a.volume_id.clone(),
                node_id: node.id.clone(),
                ..Default::default()
            })
            .await?;
        }
        ctx.poll("the volume to be available again", || async {
            Ok(bs
                .get_volume(&a.volume_id)
                .await?
                .filter(|v| v.status.as_str() == "available" && v.attachments.is_empty())
                .map(|_| ()))
        })
        .await?;

        // A snapshot, ready once Cinder says so, and a larger volume restored from it.
        let snap = ctl
            .create_snapshot(csi::CreateSnapshotRequest {
                source_volume_id: a.volume_id.clone(),
                name: ctx.run.name("snap-a"),
                ..Default::default()
            })
            .await?
            .snapshot
            .ok_or_else(|| anyhow!("CreateSnapshot answered no snapshot"))?;
        ctx.poll("the snapshot to be ready", || async {
            let listed = ctl
                .list_snapshots(csi::ListSnapshotsRequest {
                    snapshot_id: snap.snapshot_id.clone(),
                    ..Default::default()
                })
                .await?;
            Ok(listed
                .entries
                .iter()
                .filter_map(|e| e.snapshot.as_ref())
                .any(|s| s.ready_to_use)
                .then_some(()))
        })
        .await?;
        let mut restore = create(&ctx.run.name("pvc-b"), 2);
        restore.volume_content_source = Some(csi::VolumeContentSource {
            r#type: Some(csi::volume_content_source::Type::Snapshot(
                csi::volume_content_source::SnapshotSource {
                    snapshot_id: snap.snapshot_id.clone(),
                },
            )),
        });
        let b = ctl
            .create_volume(restore)
            .await?
            .volume
            .ok_or_else(|| anyhow!("no restored volume"))?;
        made.push(Made::Volume(b.volume_id.clone()));
        ensure!(
            b.capacity_bytes == 2 * GIB,
            "restored size {}",
            b.capacity_bytes
        );

        // An expansion of the first, to 3 GiB.
        let grown = ctl
            .controller_expand_volume(csi::ControllerExpandVolumeRequest {
                volume_id: a.volume_id.clone(),
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 3 * GIB,
                    limit_bytes: 0,
                }),
                ..Default::default()
            })
            .await?;
        ensure!(
            grown.capacity_bytes == 3 * GIB,
            "expanded to {}",
            grown.capacity_bytes
        );
        ctx.poll("the volume to be 3 GiB and available", || async {
            Ok(bs
                .get_volume(&a.volume_id)
                .await?
                .filter(|v| v.size == 3 && v.status.as_str() == "available")
                .map(|_| ()))
        })
        .await?;

        // Deletes, each asked twice as a retrying provisioner would.
        for vol in [&b.volume_id, &a.volume_id] {
            if vol == &a.volume_id {
                for _ in 0..2 {
                    ctl.delete_snapshot(csi::DeleteSnapshotRequest {
                        snapshot_id: snap.snapshot_id.clone(),
                        ..Default::default()
                    })
                    .await?;
                }
                ctx.poll("the snapshot to go", || async {
                    Ok(bs
                        .get_snapshot(&snap.snapshot_id)
                        .await?
                        .is_none()
                        .then_some(()))
                })
                .await?;
            }
            for _ in 0..2 {
                ctl.delete_volume(csi::DeleteVolumeRequest {
                    volume_id: vol.clone(),
                    ..Default::default()
                })
                .await?;
            }
            ctx.poll("the volume to go", || async {
                Ok(bs.get_volume(vol).await?.is_none().then_some(()))
            })
            .await?;
        }
        Ok(())
    })
    .await
}
