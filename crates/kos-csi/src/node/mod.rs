//! The CSI Node service: finds the attached Cinder disk by its serial, formats it only when it is
//! empty, mounts it at the staging path, bind-mounts it for pods, grows it, reports usage.
//! Upstream's `nodeserver.go` behaviour; every path a request names must lie under the kubelet's
//! directory, and every effect goes through [`Kernel`].

pub mod fake;
pub mod kernel;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use tracing::{debug, info};

use crate::config::{DriverConfig, NodeConfig};
use crate::controller::observed;
use crate::csi;
use crate::csi::node_service_capability::rpc::Type as Rpc;
use crate::csi::volume_capability::AccessType;
use crate::error::{CsiError, required};
use crate::metadata::NodeMetadata;
use crate::metrics::Metrics;
use crate::{RESIZE_REQUIRED_KEY, TOPOLOGY_KEY};

pub use kernel::{FsStats, Kernel, KernelError, SystemKernel};

/// Upstream's node capabilities.
pub const CAPABILITIES: [Rpc; 3] = [
    Rpc::StageUnstageVolume,
    Rpc::ExpandVolume,
    Rpc::GetVolumeStats,
];

/// The filesystem when the capability names none (upstream's default).
pub const DEFAULT_FS: &str = "ext4";

/// Volume context marking an inline ephemeral volume, which upstream no longer serves.
const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";

/// The names under `/dev/disk/by-id` a hypervisor gives a Cinder volume (upstream's list: KVM
/// virtio with the id cut to 20 characters or whole, virtio-scsi likewise, ESXi's wwn).
pub fn device_candidates(volume_id: &str) -> Vec<String> {
    let short: String = volume_id.chars().take(20).collect();
    vec![
        format!("virtio-{short}"),
        format!("virtio-{volume_id}"),
        format!("scsi-0QEMU_QEMU_HARDDISK_{short}"),
        format!("scsi-0QEMU_QEMU_HARDDISK_{volume_id}"),
        format!("wwn-0x{}", volume_id.replace('-', "")),
    ]
}

/// The Node service.
#[derive(Clone)]
pub struct NodeService {
    kernel: Arc<dyn Kernel>,
    metadata: Arc<dyn NodeMetadata>,
    cfg: Arc<DriverConfig>,
    node: NodeConfig,
    /// How many times the disk is looked for before giving up, with udev probed between.
    device_tries: u32,
    device_pause: Duration,
    metrics: Option<Arc<Metrics>>,
}

type R<T> = Result<T, CsiError>;

impl NodeService {
    pub fn new(
        kernel: Arc<dyn Kernel>,
        metadata: Arc<dyn NodeMetadata>,
        cfg: Arc<DriverConfig>,
        node: NodeConfig,
    ) -> Self {
        NodeService {
            kernel,
            metadata,
            cfg,
            node,
            device_tries: 10,
            device_pause: Duration::from_secs(1),
            metrics: None,
        }
    }

    /// Counts every call in `m`.
    #[must_use]
    pub fn with_metrics(mut self, m: Arc<Metrics>) -> Self {
        self.metrics = Some(m);
        self
    }

    /// Looks for a missing disk `tries` times, `pause` apart.
    #[must_use]
    pub fn with_device_search(mut self, tries: u32, pause: Duration) -> Self {
        self.device_tries = tries.max(1);
        self.device_pause = pause;
        self
    }

    /// `p` as a path under the kubelet's directory, or INVALID_ARGUMENT: a request never makes
    /// the driver act elsewhere on the machine.
    fn kubelet_path(&self, p: &str, what: &str) -> R<PathBuf> {
        let path = Path::new(required(p, what)?);
        // `Path::components` hides `.`; the text is checked too, so only normal forms pass.
        let clean = path.is_absolute()
            && !p.split('/').any(|s| s == "." || s == "..")
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !clean || !path.starts_with(&self.node.kubelet_dir) || path == self.node.kubelet_dir {
            return Err(CsiError::InvalidArgument(format!(
                "{what} {p:?} is not a clean absolute path under {}",
                self.node.kubelet_dir.display()
            )));
        }
        Ok(path.to_owned())
    }

    /// The disk of `volume_id` under /dev/disk/by-id, probing udev between looks.
    async fn device(&self, volume_id: &str) -> R<PathBuf> {
        let candidates = device_candidates(volume_id);
        for attempt in 0..self.device_tries {
            let (dir, names) = self
                .kernel
                .disks_by_id()
                .await
                .map_err(CsiError::kernel("listing /dev/disk/by-id"))?;
            if let Some(c) = candidates.iter().find(|c| names.contains(c)) {
                return Ok(dir.join(c));
            }
            if attempt + 1 < self.device_tries {
                if let Err(e) = self.kernel.probe_devices().await {
                    debug!(error = %e, "probing devices failed");
                }
                tokio::time::sleep(self.device_pause).await;
            }
        }
        Err(CsiError::NotFound(format!(
            "no disk of volume {volume_id} under /dev/disk/by-id (looked for {}): is it attached to this node?",
            candidates.join(", ")
        )))
    }

    pub async fn node_stage_volume(
        &self,
        req: csi::NodeStageVolumeRequest,
    ) -> R<csi::NodeStageVolumeResponse> {
        let id = required(&req.volume_id, "NodeStageVolume: the volume id")?;
        let staging =
            self.kubelet_path(&req.staging_target_path, "NodeStageVolume: staging path")?;
        let cap = req.volume_capability.as_ref().ok_or_else(|| {
            CsiError::InvalidArgument("NodeStageVolume: volume capability must be provided".into())
        })?;
        let device = self.device(id).await?;
        let mount = match &cap.access_type {
            Some(AccessType::Block(_)) => return Ok(csi::NodeStageVolumeResponse {}),
            Some(AccessType::Mount(m)) => m,
            None => {
                return Err(CsiError::InvalidArgument(
                    "NodeStageVolume: access type must be provided".into(),
                ));
            }
        };
        let fs = Some(mount.fs_type.as_str())
            .filter(|f| !f.is_empty())
            .unwrap_or(DEFAULT_FS);
        let k = &self.kernel;
        if !k
            .is_mount_point(&staging)
            .await
            .map_err(CsiError::kernel("checking the staging path"))?
        {
            k.make_dir(&staging)
                .await
                .map_err(CsiError::kernel("making the staging directory"))?;
            match k
                .fs_type(&device)
                .await
                .map_err(CsiError::kernel(format!("reading {}", device.display())))?
            {
                None => {
                    info!(volume = %id, device = %device.display(), fs, "formatting an empty disk");
                    k.format(&device, fs)
                        .await
                        .map_err(CsiError::kernel(format!("formatting {}", device.display())))?;
                }
                Some(found) if found == fs => {}
                Some(found) => {
                    return Err(CsiError::FailedPrecondition(format!(
                        "volume {id}: {} holds {found}, not the {fs} asked for; it is not formatted again",
                        device.display()
                    )));
                }
            }
            let mut options = mount.mount_flags.clone();
            // Two xfs volumes from one snapshot share a UUID (upstream's collectMountOptions).
            if fs == "xfs" {
                options.push("nouuid".into());
            }
            k.mount(&device, &staging, Some(fs), &options)
                .await
                .map_err(CsiError::kernel(format!("mounting volume {id}")))?;
            info!(volume = %id, staging = %staging.display(), "NodeStageVolume: mounted");
        }
        if req
            .volume_context
            .get(RESIZE_REQUIRED_KEY)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            k.resize_fs(&device, &staging, fs)
                .await
                .map_err(CsiError::kernel(format!("growing volume {id}")))?;
        }
        Ok(csi::NodeStageVolumeResponse {})
    }

    pub async fn node_unstage_volume(
        &self,
        req: csi::NodeUnstageVolumeRequest,
    ) -> R<csi::NodeUnstageVolumeResponse> {
        required(&req.volume_id, "NodeUnstageVolume: the volume id")?;
        let staging =
            self.kubelet_path(&req.staging_target_path, "NodeUnstageVolume: staging path")?;
        self.unmount_and_remove(&staging).await?;
        Ok(csi::NodeUnstageVolumeResponse {})
    }

    /// mount-utils' CleanupMountPoint: unmount when mounted, then remove the mount point.
    async fn unmount_and_remove(&self, p: &Path) -> R<()> {
        let k = &self.kernel;
        if k.is_mount_point(p)
            .await
            .map_err(CsiError::kernel(format!("checking {}", p.display())))?
        {
            k.unmount(p)
                .await
                .map_err(CsiError::kernel(format!("unmounting {}", p.display())))?;
        }
        k.remove(p)
            .await
            .map_err(CsiError::kernel(format!("removing {}", p.display())))
    }

    pub async fn node_publish_volume(
        &self,
        req: csi::NodePublishVolumeRequest,
    ) -> R<csi::NodePublishVolumeResponse> {
        let id = required(&req.volume_id, "NodePublishVolume: the volume id")?;
        let target = self.kubelet_path(&req.target_path, "NodePublishVolume: target path")?;
        let cap = req.volume_capability.as_ref().ok_or_else(|| {
            CsiError::InvalidArgument(
                "NodePublishVolume: volume capability must be provided".into(),
            )
        })?;
        if req
            .volume_context
            .get(EPHEMERAL_KEY)
            .is_some_and(|v| v == "true")
        {
            return Err(CsiError::Unimplemented(
                "CSI inline ephemeral volumes are not supported (removed upstream in 1.31)".into(),
            ));
        }
        let staging =
            self.kubelet_path(&req.staging_target_path, "NodePublishVolume: staging path")?;
        let options = vec![
            "bind".to_owned(),
            if req.readonly { "ro" } else { "rw" }.to_owned(),
        ];
        let k = &self.kernel;
        if k.is_mount_point(&target)
            .await
            .map_err(CsiError::kernel("checking the target path"))?
        {
            return Ok(csi::NodePublishVolumeResponse {});
        }
        match &cap.access_type {
            Some(AccessType::Block(_)) => {
                let device = self.device(id).await?;
                if let Some(parent) = target.parent() {
                    k.make_dir(parent)
                        .await
                        .map_err(CsiError::kernel("making the target's directory"))?;
                }
                k.make_file(&target)
                    .await
                    .map_err(CsiError::kernel("making the target file"))?;
                if let Err(e) = k.mount(&device, &target, None, &options).await {
                    let _ = k.remove(&target).await;
                    return Err(CsiError::kernel(format!("bind-mounting volume {id}"))(e));
                }
            }
            Some(AccessType::Mount(m)) => {
                let fs = Some(m.fs_type.as_str())
                    .filter(|f| !f.is_empty())
                    .unwrap_or(DEFAULT_FS);
                k.make_dir(&target)
                    .await
                    .map_err(CsiError::kernel("making the target directory"))?;
                k.mount(&staging, &target, Some(fs), &options)
                    .await
                    .map_err(CsiError::kernel(format!("bind-mounting volume {id}")))?;
            }
            None => {
                return Err(CsiError::InvalidArgument(
                    "NodePublishVolume: access type must be provided".into(),
                ));
            }
        }
        info!(volume = %id, target = %target.display(), readonly = req.readonly, "NodePublishVolume: mounted");
        Ok(csi::NodePublishVolumeResponse {})
    }

    pub async fn node_unpublish_volume(
        &self,
        req: csi::NodeUnpublishVolumeRequest,
    ) -> R<csi::NodeUnpublishVolumeResponse> {
        required(&req.volume_id, "NodeUnpublishVolume: the volume id")?;
        let target = self.kubelet_path(&req.target_path, "NodeUnpublishVolume: target path")?;
        self.unmount_and_remove(&target).await?;
        Ok(csi::NodeUnpublishVolumeResponse {})
    }

    pub async fn node_get_info(&self) -> R<csi::NodeGetInfoResponse> {
        let m = self
            .metadata
            .get()
            .await
            .map_err(|e| CsiError::Internal(format!("NodeGetInfo: {e}")))?;
        let topology = self.cfg.with_topology.then(|| {
            let mut segments: HashMap<String, String> = self
                .cfg
                .additional_topologies
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            segments.insert(TOPOLOGY_KEY.to_owned(), m.availability_zone.clone());
            csi::Topology { segments }
        });
        Ok(csi::NodeGetInfoResponse {
            node_id: m.uuid,
            max_volumes_per_node: self.cfg.attach_limit(),
            accessible_topology: topology,
        })
    }

    pub async fn node_expand_volume(
        &self,
        req: csi::NodeExpandVolumeRequest,
    ) -> R<csi::NodeExpandVolumeResponse> {
        let id = required(&req.volume_id, "NodeExpandVolume: the volume id")?;
        let path = self.kubelet_path(&req.volume_path, "NodeExpandVolume: volume path")?;
        let k = &self.kernel;
        if !k
            .exists(&path)
            .await
            .map_err(CsiError::kernel("checking the volume path"))?
        {
            return Err(CsiError::NotFound(format!(
                "volume path {} not found",
                path.display()
            )));
        }
        let block = matches!(
            req.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(AccessType::Block(_))
        );
        let device = k
            .mount_source(&path)
            .await
            .map_err(CsiError::kernel("finding the volume's device"))?
            .ok_or_else(|| {
                CsiError::NotFound(format!("nothing is mounted at {}", path.display()))
            })?;
        if self.cfg.block_storage.rescan_on_resize {
            k.rescan(&device)
                .await
                .map_err(CsiError::kernel(format!("rescanning {}", device.display())))?;
            let want = req.capacity_range.map_or(0, |r| r.required_bytes);
            let have = k
                .device_size(&device)
                .await
                .map_err(CsiError::kernel("reading the device size"))?;
            if have < want {
                return Err(CsiError::Internal(format!(
                    "volume {id}: {} has {have} bytes after a rescan, {want} asked",
                    device.display()
                )));
            }
        }
        let size = k
            .device_size(&device)
            .await
            .map_err(CsiError::kernel("reading the device size"))?;
        if block {
            return Ok(csi::NodeExpandVolumeResponse {
                capacity_bytes: size,
            });
        }
        let fs = k
            .fs_type(&device)
            .await
            .map_err(CsiError::kernel("reading the filesystem type"))?
            .unwrap_or_default();
        k.resize_fs(&device, &path, &fs)
            .await
            .map_err(CsiError::kernel(format!("growing volume {id}")))?;
        info!(volume = %id, size, "NodeExpandVolume: grown");
        Ok(csi::NodeExpandVolumeResponse {
            capacity_bytes: size,
        })
    }

    pub async fn node_get_volume_stats(
        &self,
        req: csi::NodeGetVolumeStatsRequest,
    ) -> R<csi::NodeGetVolumeStatsResponse> {
        use csi::volume_usage::Unit;
        required(&req.volume_id, "NodeGetVolumeStats: the volume id")?;
        let path = self.kubelet_path(&req.volume_path, "NodeGetVolumeStats: volume path")?;
        let k = &self.kernel;
        if !k
            .exists(&path)
            .await
            .map_err(CsiError::kernel("checking the volume path"))?
        {
            return Err(CsiError::NotFound(format!(
                "volume path {} not found",
                path.display()
            )));
        }
        if k.is_block_device(&path)
            .await
            .map_err(CsiError::kernel("checking the volume path"))?
        {
            let total = k
                .device_size(&path)
                .await
                .map_err(CsiError::kernel("reading the device size"))?;
            return Ok(csi::NodeGetVolumeStatsResponse {
                usage: vec![csi::VolumeUsage {
                    total,
                    unit: Unit::Bytes as i32,
                    ..csi::VolumeUsage::default()
                }],
                volume_condition: None,
            });
        }
        let s = k
            .fs_stats(&path)
            .await
            .map_err(CsiError::kernel("reading filesystem usage"))?;
        Ok(csi::NodeGetVolumeStatsResponse {
            usage: vec![
                csi::VolumeUsage {
                    available: s.available_bytes,
                    total: s.total_bytes,
                    used: s.used_bytes,
                    unit: Unit::Bytes as i32,
                },
                csi::VolumeUsage {
                    available: s.free_inodes,
                    total: s.total_inodes,
                    used: s.used_inodes,
                    unit: Unit::Inodes as i32,
                },
            ],
            volume_condition: None,
        })
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for NodeService {
    async fn node_stage_volume(
        &self,
        r: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "NodeStageVolume",
            self.node_stage_volume(r.into_inner()),
        )
        .await
    }
    async fn node_unstage_volume(
        &self,
        r: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "NodeUnstageVolume",
            self.node_unstage_volume(r.into_inner()),
        )
        .await
    }
    async fn node_publish_volume(
        &self,
        r: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "NodePublishVolume",
            self.node_publish_volume(r.into_inner()),
        )
        .await
    }
    async fn node_unpublish_volume(
        &self,
        r: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "NodeUnpublishVolume",
            self.node_unpublish_volume(r.into_inner()),
        )
        .await
    }
    async fn node_get_volume_stats(
        &self,
        r: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "NodeGetVolumeStats",
            self.node_get_volume_stats(r.into_inner()),
        )
        .await
    }
    async fn node_expand_volume(
        &self,
        r: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "NodeExpandVolume",
            self.node_expand_volume(r.into_inner()),
        )
        .await
    }
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        use csi::node_service_capability::{Rpc as RpcCap, Type};
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: CAPABILITIES
                .iter()
                .map(|t| csi::NodeServiceCapability {
                    r#type: Some(Type::Rpc(RpcCap { r#type: *t as i32 })),
                })
                .collect(),
        }))
    }
    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        observed(self.metrics.as_deref(), "NodeGetInfo", self.node_get_info()).await
    }
}
