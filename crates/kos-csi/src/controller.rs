//! The CSI Controller service: Cinder volumes and snapshots, Nova attachments, through one
//! kos-cloud [`Session`]. Behaviour follows upstream cinder-csi's `controllerserver.go`; where
//! the CSI spec names an error code and upstream answers INTERNAL, this follows the spec
//! (docs/storage.md lists each place).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kos_cloud::CloudError;
use kos_cloud::Session;
use kos_cloud::model::block_storage::{
    Snapshot, SnapshotCreate, SnapshotFilter, SnapshotStatus, Volume, VolumeCreate, VolumeFilter,
    VolumeSource, VolumeStatus,
};
use kos_cloud::model::compute::VolumeAttach;
use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::{debug, info};

use crate::config::DriverConfig;
use crate::csi;
use crate::csi::controller_service_capability::rpc::Type as Rpc;
use crate::csi::volume_capability::access_mode::Mode;
use crate::error::{CsiError, required};
use crate::metrics::Metrics;
use crate::waits::VolumeWaits;
use crate::{CLUSTER_KEY, GIB, RESIZE_REQUIRED_KEY, TOPOLOGY_KEY};

/// Upstream's description of every volume and snapshot it makes.
pub const DESCRIPTION: &str = "Created by OpenStack Cinder CSI driver";

/// Parameters the external-provisioner adds with `--extra-create-metadata`; copied to the
/// volume's metadata as upstream does.
pub const PROVISIONER_PARAMS: [&str; 3] = [
    "csi.storage.k8s.io/pvc/name",
    "csi.storage.k8s.io/pvc/namespace",
    "csi.storage.k8s.io/pv/name",
];
/// The external-snapshotter's, copied to the snapshot's metadata.
pub const SNAPSHOTTER_PARAMS: [&str; 3] = [
    "csi.storage.k8s.io/volumesnapshot/name",
    "csi.storage.k8s.io/volumesnapshot/namespace",
    "csi.storage.k8s.io/volumesnapshotcontent/name",
];

/// The controller capabilities, upstream's list.
pub const CAPABILITIES: [Rpc; 9] = [
    Rpc::ListVolumes,
    Rpc::CreateDeleteVolume,
    Rpc::PublishUnpublishVolume,
    Rpc::CreateDeleteSnapshot,
    Rpc::ListSnapshots,
    Rpc::ExpandVolume,
    Rpc::CloneVolume,
    Rpc::ListVolumesPublishedNodes,
    Rpc::GetVolume,
];

/// The access mode the driver serves (a Cinder volume is one node's disk; upstream's only mode).
pub const ACCESS_MODE: Mode = Mode::SingleNodeWriter;

/// The Controller service.
#[derive(Clone)]
pub struct Controller {
    session: Session,
    cfg: Arc<DriverConfig>,
    metrics: Option<Arc<Metrics>>,
    busy: BusySet,
    waits: VolumeWaits,
}

/// The volumes and snapshots calls are working on (by name or id): a second call on one of them
/// meanwhile is ABORTED, the spec's "operation pending", never a race between two.
#[derive(Clone, Default)]
struct BusySet(Arc<Mutex<HashSet<String>>>);

impl BusySet {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims `kind/key` for one call, or ABORTED when another call holds it.
    fn claim(&self, kind: &str, key: &str) -> R<Busy> {
        let key = format!("{kind}/{key}");
        if !self.lock().insert(key.clone()) {
            return Err(CsiError::Aborted(format!(
                "an operation on {key} is already in progress"
            )));
        }
        Ok(Busy {
            set: self.clone(),
            key,
        })
    }
}

/// Holds one key of a [`BusySet`] until dropped, also when the CO cancels the call and its
/// future is dropped.
struct Busy {
    set: BusySet,
    key: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.set.lock().remove(&self.key);
    }
}

type R<T> = Result<T, CsiError>;

impl Controller {
    pub fn new(session: Session, cfg: Arc<DriverConfig>) -> Self {
        let waits = VolumeWaits::new(
            session.clone(),
            cfg.block_storage.ignore_volume_microversion,
            &cfg.cluster,
            cfg.wait_mode,
        );
        Controller {
            session,
            cfg,
            metrics: None,
            busy: BusySet::default(),
            waits,
        }
    }

    /// Counts every call in `m`.
    #[must_use]
    pub fn with_metrics(mut self, m: Arc<Metrics>) -> Self {
        self.metrics = Some(m);
        self
    }

    fn cinder(&self) -> kos_cloud::block_storage::BlockStorageApi<'_> {
        let api = self.session.block_storage();
        if self.cfg.block_storage.ignore_volume_microversion {
            api.without_microversion()
        } else {
            api
        }
    }

    /// The volume waits of this controller (and its clones).
    pub fn waits(&self) -> &VolumeWaits {
        &self.waits
    }

    /// A deadline `cloud` away in the cloud's time.
    fn deadline(&self, cloud: Duration) -> Instant {
        Instant::now() + self.session.pace().local_deadline(cloud)
    }

    // ------------------------------------------------------------ volumes

    pub async fn create_volume(
        &self,
        req: csi::CreateVolumeRequest,
    ) -> R<csi::CreateVolumeResponse> {
        let name = required(&req.name, "CreateVolume: the volume name")?;
        let _busy = self.busy.claim("volume-name", name)?;
        if req.volume_capabilities.is_empty() {
            return Err(CsiError::InvalidArgument(
                "CreateVolume: volume capabilities must be provided".into(),
            ));
        }
        for c in &req.volume_capabilities {
            check_capability(c)?;
        }
        let size = size_gib(req.capacity_range.as_ref())?;
        let params = &req.parameters;
        let volume_type = params.get("type").filter(|t| !t.is_empty()).cloned();
        let (zone, zone_from_topology_req) =
            match params.get("availability").filter(|z| !z.is_empty()) {
                Some(z) => (Some(z.clone()), false),
                None if self.cfg.with_topology => (
                    req.accessibility_requirements
                        .as_ref()
                        .and_then(zone_from_topology),
                    true,
                ),
                None => (None, false),
            };
        let source = content_source(req.volume_content_source.as_ref())?;

        let existing = self
            .cinder()
            .list_volumes(&VolumeFilter {
                name: Some(name.to_owned()),
                ..VolumeFilter::default()
            })
            .await
            .map_err(CsiError::cloud(format!("listing volumes named {name}")))?;
        let vol = match existing.as_slice() {
            [v] => {
                if v.size != size {
                    return Err(CsiError::AlreadyExists(format!(
                        "volume {name} ({}) exists with {} GiB, not {size} GiB",
                        v.id, v.size
                    )));
                }
                if let Some(s) = &source
                    && source_of(v).as_ref() != Some(s)
                {
                    return Err(CsiError::AlreadyExists(format!(
                        "volume {name} ({}) exists from another source than {s:?}",
                        v.id
                    )));
                }
                debug!(volume = %v.id, %name, "CreateVolume: exists");
                v.clone()
            }
            [] => {
                let asked = Asked {
                    name,
                    size,
                    volume_type,
                    zone,
                    zone_from_topology: zone_from_topology_req,
                    source,
                };
                self.make_volume(asked, params).await?
            }
            many => {
                return Err(CsiError::Internal(format!(
                    "{} volumes named {name} in Cinder: {}",
                    many.len(),
                    many.iter()
                        .map(|v| v.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        };
        // Answered as Cinder shows it, most often still `creating`, as upstream answers: the
        // claim is Bound now, and ControllerPublishVolume waits until the volume is usable.
        let topology = self.topology_of(&vol, req.accessibility_requirements.as_ref());
        Ok(csi::CreateVolumeResponse {
            volume: Some(csi_volume(&vol, topology)),
        })
    }

    async fn make_volume(&self, a: Asked<'_>, params: &HashMap<String, String>) -> R<Volume> {
        let Asked {
            name,
            size,
            volume_type,
            zone,
            zone_from_topology,
            source,
        } = a;
        match &source {
            Some(VolumeSource::Snapshot(id)) => {
                let snap = self
                    .cinder()
                    .get_snapshot(id)
                    .await
                    .map_err(CsiError::cloud(format!("reading snapshot {id}")))?
                    .ok_or_else(|| {
                        CsiError::NotFound(format!("content source snapshot {id} not found"))
                    })?;
                if snap.status != SnapshotStatus::Available {
                    return Err(CsiError::Unavailable(format!(
                        "content source snapshot {id} is not yet available: {}",
                        snap.status
                    )));
                }
                if snap.size > size {
                    return Err(CsiError::OutOfRange(format!(
                        "{size} GiB is smaller than snapshot {id} ({} GiB)",
                        snap.size
                    )));
                }
            }
            Some(VolumeSource::Volume(id)) => {
                let src = self
                    .cinder()
                    .get_volume(id)
                    .await
                    .map_err(CsiError::cloud(format!("reading volume {id}")))?
                    .ok_or_else(|| {
                        CsiError::NotFound(format!("content source volume {id} not found"))
                    })?;
                if src.size > size {
                    return Err(CsiError::OutOfRange(format!(
                        "{size} GiB is smaller than source volume {id} ({} GiB)",
                        src.size
                    )));
                }
            }
            None => {}
        }
        let mut metadata = BTreeMap::from([(CLUSTER_KEY.to_owned(), self.cfg.cluster.clone())]);
        for k in PROVISIONER_PARAMS {
            if let Some(v) = params.get(k) {
                metadata.insert(k.to_owned(), v.clone());
            }
        }
        let create = VolumeCreate {
            size,
            name: Some(name.to_owned()),
            description: Some(DESCRIPTION.to_owned()),
            volume_type: volume_type.clone(),
            availability_zone: zone.clone(),
            metadata,
            ..VolumeCreate::default()
        };
        let cinder = self.cinder();
        let made = match &source {
            Some(s) => cinder.create_volume_from(&create, s).await,
            None => cinder.create_volume(&create).await,
        };
        match made {
            Ok(v) => {
                info!(volume = %v.id, %name, size, "CreateVolume: created");
                Ok(v)
            }
            // The create may have happened: the name finds it, so a retry never makes a second.
            Err(e) if maybe_created(&e) => {
                let found = cinder
                    .list_volumes(&VolumeFilter {
                        name: Some(name.to_owned()),
                        ..VolumeFilter::default()
                    })
                    .await
                    .map_err(CsiError::cloud(format!(
                        "looking up volume {name} after {e}"
                    )))?;
                match <[Volume; 1]>::try_from(found) {
                    Ok([v]) => Ok(v),
                    Err(_) => Err(CsiError::cloud(format!("creating volume {name}"))(e)),
                }
            }
            // Cinder's refusals of what the class or the topology asked, as the spec's codes: an
            // unknown type (404) or zone (400) from the class is the request's fault; a zone from
            // the topology Cinder lacks is "cannot provision there" (the provisioner reschedules).
            Err(e) if e.status() == Some(404) && volume_type.is_some() => {
                Err(CsiError::InvalidArgument(format!(
                    "creating volume {name}: parameter type {:?}: {e}",
                    volume_type.unwrap_or_default()
                )))
            }
            // The source was there a moment ago.
            Err(e) if e.status() == Some(404) && source.is_some() => Err(CsiError::NotFound(
                format!("creating volume {name}: content source: {e}"),
            )),
            Err(e) if e.status() == Some(400) && zone.is_some() && zone_from_topology => {
                Err(CsiError::ResourceExhausted(format!(
                    "creating volume {name} in zone {:?} of the topology: {e}",
                    zone.unwrap_or_default()
                )))
            }
            Err(e) if e.status() == Some(400) => Err(CsiError::InvalidArgument(format!(
                "creating volume {name}: {e}"
            ))),
            Err(e) => Err(CsiError::cloud(format!("creating volume {name}"))(e)),
        }
    }

    /// Waits for a volume still being made (CreateVolume answered without waiting) until it can
    /// be attached; a volume in an error state, now or meanwhile, is an error naming the state.
    async fn usable(&self, v: Volume) -> R<Volume> {
        match &v.status {
            VolumeStatus::Creating | VolumeStatus::Downloading => {
                let deadline = self.deadline(self.cfg.waits.create);
                self.waits
                    .wait_for_status(
                        &v.id,
                        &[VolumeStatus::Available, VolumeStatus::InUse],
                        deadline,
                    )
                    .await
                    .map_err(CsiError::cloud(format!("volume {} to be created", v.id)))
            }
            s if s.is_error() => Err(CsiError::Internal(format!(
                "volume {} ({}) is in Cinder's state {s}: it cannot be attached",
                v.name, v.id
            ))),
            _ => Ok(v),
        }
    }

    fn topology_of(
        &self,
        v: &Volume,
        req: Option<&csi::TopologyRequirement>,
    ) -> Vec<csi::Topology> {
        if !self.cfg.with_topology {
            return Vec::new();
        }
        if self.cfg.block_storage.ignore_volume_az {
            return req.map(|r| r.preferred.clone()).unwrap_or_default();
        }
        // The zone Cinder gave, not the one asked for: Cinder may fall back to its default.
        match v.availability_zone.as_deref().filter(|z| !z.is_empty()) {
            Some(z) => vec![csi::Topology {
                segments: HashMap::from([(TOPOLOGY_KEY.to_owned(), z.to_owned())]),
            }],
            None => Vec::new(),
        }
    }

    pub async fn delete_volume(
        &self,
        req: csi::DeleteVolumeRequest,
    ) -> R<csi::DeleteVolumeResponse> {
        let id = required(&req.volume_id, "DeleteVolume: the volume id")?;
        let _busy = self.busy.claim("volume", id)?;
        let cinder = self.cinder();
        let Some(v) = cinder
            .get_volume(id)
            .await
            .map_err(CsiError::cloud(format!("reading volume {id}")))?
        else {
            debug!(volume = %id, "DeleteVolume: already gone");
            return Ok(csi::DeleteVolumeResponse {});
        };
        if v.status == VolumeStatus::Deleting {
            return Ok(csi::DeleteVolumeResponse {});
        }
        if let Some(a) = v.attachments.first() {
            return Err(CsiError::FailedPrecondition(format!(
                "volume {id} is still attached to server {}",
                a.server_id
            )));
        }
        cinder
            .delete_volume(id)
            .await
            .map_err(CsiError::cloud(format!("deleting volume {id}")))?;
        info!(volume = %id, "DeleteVolume: deleted");
        Ok(csi::DeleteVolumeResponse {})
    }

    pub async fn controller_publish_volume(
        &self,
        req: csi::ControllerPublishVolumeRequest,
    ) -> R<csi::ControllerPublishVolumeResponse> {
        let id = required(&req.volume_id, "ControllerPublishVolume: the volume id")?;
        let node = required(&req.node_id, "ControllerPublishVolume: the node id")?;
        let cap = req.volume_capability.as_ref().ok_or_else(|| {
            CsiError::InvalidArgument(
                "ControllerPublishVolume: the volume capability must be provided".into(),
            )
        })?;
        check_capability(cap)?;
        let _busy = self.busy.claim("volume", id)?;
        let cinder = self.cinder();
        let v = cinder
            .get_volume(id)
            .await
            .map_err(CsiError::cloud(format!("reading volume {id}")))?
            .ok_or_else(|| CsiError::NotFound(format!("volume {id} not found")))?;
        self.session
            .compute()
            .get_server(node)
            .await
            .map_err(CsiError::cloud(format!("reading server {node}")))?
            .ok_or_else(|| CsiError::NotFound(format!("node {node} (a Nova server) not found")))?;
        // Nova refuses to attach a volume Cinder is still making (upstream asks anyway and the
        // attacher retries): wait for it here, through the shared poller.
        let v = self.usable(v).await?;
        let here = v.attachments.iter().any(|a| a.server_id == node);
        if !here {
            if let Some(a) = v.attachments.first().filter(|_| !v.multiattach) {
                return Err(CsiError::FailedPrecondition(format!(
                    "volume {id} is attached to server {}, and is not multiattach",
                    a.server_id
                )));
            }
            let attach = VolumeAttach {
                volume_id: id.to_owned(),
                device: None,
                tag: None,
                delete_on_termination: false,
            };
            match self.session.compute().attach_volume(node, &attach).await {
                Ok(_) => info!(volume = %id, %node, "ControllerPublishVolume: attaching"),
                // A lost answer: the wait below sees whether Nova took it.
                Err(e) if maybe_created(&e) => {
                    debug!(volume = %id, %node, error = %e, "attach outcome unknown, waiting")
                }
                Err(e) => return Err(attach_error(id, node, e)),
            }
        }
        let deadline = self.deadline(self.cfg.waits.attach);
        let v = cinder
            .wait_for_attachment(id, node, true, deadline)
            .await
            .map_err(CsiError::cloud(format!("attaching volume {id} to {node}")))?
            .ok_or_else(|| CsiError::NotFound(format!("volume {id} not found")))?;
        let device = v
            .attachments
            .iter()
            .find(|a| a.server_id == node)
            .and_then(|a| a.device.clone())
            .unwrap_or_default();
        Ok(csi::ControllerPublishVolumeResponse {
            publish_context: HashMap::from([("DevicePath".to_owned(), device)]),
        })
    }

    pub async fn controller_unpublish_volume(
        &self,
        req: csi::ControllerUnpublishVolumeRequest,
    ) -> R<csi::ControllerUnpublishVolumeResponse> {
        let id = required(&req.volume_id, "ControllerUnpublishVolume: the volume id")?;
        let _busy = self.busy.claim("volume", id)?;
        let cinder = self.cinder();
        let Some(v) = cinder
            .get_volume(id)
            .await
            .map_err(CsiError::cloud(format!("reading volume {id}")))?
        else {
            debug!(volume = %id, "ControllerUnpublishVolume: volume gone, so detached");
            return Ok(csi::ControllerUnpublishVolumeResponse {});
        };
        // An attach still under way may not list its server yet: answering "detached" now would
        // leave it attached once it lands (upstream refuses any state but in-use/available too).
        if matches!(v.status, VolumeStatus::Attaching | VolumeStatus::Reserved) {
            return Err(CsiError::Unavailable(format!(
                "volume {id} is {}: detach once the attach settled",
                v.status
            )));
        }
        // An empty node id means every node (the spec).
        let servers: Vec<String> = v
            .attachments
            .iter()
            .map(|a| a.server_id.clone())
            .filter(|s| req.node_id.is_empty() || *s == req.node_id)
            .collect();
        for server in servers {
            self.session
                .compute()
                .detach_volume(&server, id)
                .await
                .map_err(CsiError::cloud(format!(
                    "detaching volume {id} from {server}"
                )))?;
            info!(volume = %id, %server, "ControllerUnpublishVolume: detaching");
            let deadline = self.deadline(self.cfg.waits.detach);
            cinder
                .wait_for_attachment(id, &server, false, deadline)
                .await
                .map_err(CsiError::cloud(format!(
                    "detaching volume {id} from {server}"
                )))?;
        }
        Ok(csi::ControllerUnpublishVolumeResponse {})
    }

    pub async fn validate_volume_capabilities(
        &self,
        req: csi::ValidateVolumeCapabilitiesRequest,
    ) -> R<csi::ValidateVolumeCapabilitiesResponse> {
        let id = required(&req.volume_id, "ValidateVolumeCapabilities: the volume id")?;
        if req.volume_capabilities.is_empty() {
            return Err(CsiError::InvalidArgument(
                "ValidateVolumeCapabilities: volume capabilities must be provided".into(),
            ));
        }
        self.cinder()
            .get_volume(id)
            .await
            .map_err(CsiError::cloud(format!("reading volume {id}")))?
            .ok_or_else(|| CsiError::NotFound(format!("volume {id} not found")))?;
        for c in &req.volume_capabilities {
            check_capability(c)?;
            if c.access_mode.map(|m| m.mode) != Some(ACCESS_MODE as i32) {
                return Ok(csi::ValidateVolumeCapabilitiesResponse {
                    confirmed: None,
                    message: "Requested Volume Capability not supported".into(),
                });
            }
        }
        Ok(csi::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: req.mutable_parameters,
            }),
            message: String::new(),
        })
    }

    pub async fn list_volumes(&self, req: csi::ListVolumesRequest) -> R<csi::ListVolumesResponse> {
        let limit = page_limit(req.max_entries, "ListVolumes")?;
        let marker = Some(req.starting_token.as_str()).filter(|t| !t.is_empty());
        let page = self
            .cinder()
            .list_volumes_page(&VolumeFilter::default(), limit, marker)
            .await
            .map_err(|e| bad_token(e, marker, "listing volumes"))?;
        Ok(csi::ListVolumesResponse {
            entries: page
                .items
                .iter()
                .map(|v| csi::list_volumes_response::Entry {
                    volume: Some(csi::Volume {
                        volume_id: v.id.clone(),
                        capacity_bytes: bytes(v.size),
                        ..csi::Volume::default()
                    }),
                    status: Some(csi::list_volumes_response::VolumeStatus {
                        published_node_ids: published(v),
                        volume_condition: None,
                    }),
                })
                .collect(),
            next_token: page.next_marker.unwrap_or_default(),
        })
    }

    pub async fn controller_get_volume(
        &self,
        req: csi::ControllerGetVolumeRequest,
    ) -> R<csi::ControllerGetVolumeResponse> {
        let id = required(&req.volume_id, "ControllerGetVolume: the volume id")?;
        let v = self
            .cinder()
            .get_volume(id)
            .await
            .map_err(CsiError::cloud(format!("reading volume {id}")))?
            .ok_or_else(|| CsiError::NotFound(format!("volume {id} not found")))?;
        Ok(csi::ControllerGetVolumeResponse {
            volume: Some(csi::Volume {
                volume_id: v.id.clone(),
                capacity_bytes: bytes(v.size),
                ..csi::Volume::default()
            }),
            status: Some(csi::controller_get_volume_response::VolumeStatus {
                published_node_ids: published(&v),
                volume_condition: None,
            }),
        })
    }

    pub async fn controller_expand_volume(
        &self,
        req: csi::ControllerExpandVolumeRequest,
    ) -> R<csi::ControllerExpandVolumeResponse> {
        let id = required(&req.volume_id, "ControllerExpandVolume: the volume id")?;
        let range = req.capacity_range.as_ref().ok_or_else(|| {
            CsiError::InvalidArgument("ControllerExpandVolume: capacity range not provided".into())
        })?;
        let size = size_gib(Some(range))?;
        let _busy = self.busy.claim("volume", id)?;
        let cinder = self.cinder();
        let v = cinder
            .get_volume(id)
            .await
            .map_err(CsiError::cloud(format!("reading volume {id}")))?
            .ok_or_else(|| CsiError::NotFound(format!("volume {id} not found")))?;
        if v.size >= size {
            return Ok(csi::ControllerExpandVolumeResponse {
                capacity_bytes: bytes(v.size),
                node_expansion_required: true,
            });
        }
        let in_use = match v.status {
            VolumeStatus::InUse => true,
            VolumeStatus::Available => false,
            ref s => {
                return Err(CsiError::FailedPrecondition(format!(
                    "volume {id} cannot be extended while {s}"
                )));
            }
        };
        cinder
            .extend_volume(id, size, in_use)
            .await
            .map_err(CsiError::cloud(format!(
                "extending volume {id} to {size} GiB"
            )))?;
        info!(volume = %id, size, "ControllerExpandVolume: extending");
        let deadline = self.deadline(self.cfg.waits.extend);
        let v = self
            .waits
            .wait_for_status(
                id,
                &[VolumeStatus::Available, VolumeStatus::InUse],
                deadline,
            )
            .await
            .map_err(CsiError::cloud(format!(
                "extending volume {id} to {size} GiB"
            )))?;
        Ok(csi::ControllerExpandVolumeResponse {
            capacity_bytes: bytes(v.size),
            node_expansion_required: true,
        })
    }

    // ------------------------------------------------------------ snapshots

    pub async fn create_snapshot(
        &self,
        req: csi::CreateSnapshotRequest,
    ) -> R<csi::CreateSnapshotResponse> {
        let name = required(&req.name, "CreateSnapshot: the snapshot name")?;
        let volume_id = required(
            &req.source_volume_id,
            "CreateSnapshot: the source volume id",
        )?;
        let _busy = self.busy.claim("snapshot-name", name)?;
        match req.parameters.get("type").map(String::as_str) {
            None | Some("" | "snapshot") => {}
            Some("backup") => {
                return Err(CsiError::FailedPrecondition(
                    "snapshots of type backup are not supported by kos-csi".into(),
                ));
            }
            Some(t) => {
                return Err(CsiError::InvalidArgument(format!(
                    "snapshot type must be 'snapshot', 'backup' or not defined, not {t:?}"
                )));
            }
        }
        let force = match req.parameters.get("force-create") {
            None => false,
            Some(v) => parse_go_bool(v).ok_or_else(|| {
                CsiError::InvalidArgument(format!("force-create: {v:?} is not a boolean"))
            })?,
        };
        let cinder = self.cinder();
        let existing = cinder
            .list_snapshots(&SnapshotFilter {
                name: Some(name.to_owned()),
                ..SnapshotFilter::default()
            })
            .await
            .map_err(CsiError::cloud(format!("listing snapshots named {name}")))?;
        let snap = match existing.as_slice() {
            [s] if s.volume_id != volume_id => {
                return Err(CsiError::AlreadyExists(format!(
                    "snapshot {name} ({}) exists, of volume {}",
                    s.id, s.volume_id
                )));
            }
            [s] => s.clone(),
            [] => {
                cinder
                    .get_volume(volume_id)
                    .await
                    .map_err(CsiError::cloud(format!("reading volume {volume_id}")))?
                    .ok_or_else(|| {
                        CsiError::NotFound(format!("source volume {volume_id} not found"))
                    })?;
                let mut metadata =
                    BTreeMap::from([(CLUSTER_KEY.to_owned(), self.cfg.cluster.clone())]);
                for k in SNAPSHOTTER_PARAMS {
                    if let Some(v) = req.parameters.get(k) {
                        metadata.insert(k.to_owned(), v.clone());
                    }
                }
                let create = SnapshotCreate {
                    volume_id: volume_id.to_owned(),
                    force,
                    name: Some(name.to_owned()),
                    description: Some(DESCRIPTION.to_owned()),
                    metadata,
                };
                match cinder.create_snapshot(&create).await {
                    Ok(s) => {
                        info!(snapshot = %s.id, %name, volume = %volume_id, "CreateSnapshot: created");
                        s
                    }
                    Err(e) if maybe_created(&e) => {
                        let found = cinder
                            .list_snapshots(&SnapshotFilter {
                                name: Some(name.to_owned()),
                                ..SnapshotFilter::default()
                            })
                            .await
                            .map_err(CsiError::cloud(format!(
                                "looking up snapshot {name} after {e}"
                            )))?;
                        match <[Snapshot; 1]>::try_from(found) {
                            Ok([s]) => s,
                            Err(_) => {
                                return Err(CsiError::cloud(format!("creating snapshot {name}"))(
                                    e,
                                ));
                            }
                        }
                    }
                    Err(e) => {
                        return Err(CsiError::cloud(format!("creating snapshot {name}"))(e));
                    }
                }
            }
            many => {
                return Err(CsiError::Internal(format!(
                    "{} snapshots named {name} in Cinder",
                    many.len()
                )));
            }
        };
        let snap = match snap.status {
            SnapshotStatus::Available => snap,
            ref s if s.is_error() => {
                return Err(CsiError::Internal(format!(
                    "snapshot {name} ({}) is in state {s}",
                    snap.id
                )));
            }
            _ => {
                let deadline = self.deadline(self.cfg.waits.snapshot);
                match cinder.wait_for_snapshot_available(&snap.id, deadline).await {
                    Ok(s) => s,
                    // Not ready yet: the snapshotter asks again (ready_to_use false).
                    Err(CloudError::Timeout { .. }) => snap,
                    Err(e) => {
                        return Err(CsiError::cloud(format!("creating snapshot {name}"))(e));
                    }
                }
            }
        };
        Ok(csi::CreateSnapshotResponse {
            snapshot: Some(csi_snapshot(&snap)),
        })
    }

    pub async fn delete_snapshot(
        &self,
        req: csi::DeleteSnapshotRequest,
    ) -> R<csi::DeleteSnapshotResponse> {
        let id = required(&req.snapshot_id, "DeleteSnapshot: the snapshot id")?;
        let _busy = self.busy.claim("snapshot", id)?;
        // A retried call finds it gone or `deleting`, which Cinder would refuse to delete again.
        match self
            .cinder()
            .get_snapshot(id)
            .await
            .map_err(CsiError::cloud(format!("reading snapshot {id}")))?
        {
            None => return Ok(csi::DeleteSnapshotResponse {}),
            Some(s) if s.status == SnapshotStatus::Deleting => {
                return Ok(csi::DeleteSnapshotResponse {});
            }
            Some(_) => {}
        }
        self.cinder()
            .delete_snapshot(id)
            .await
            .map_err(|e| match e.status() {
                // Cinder refuses a snapshot that volumes were made from, or one being made.
                Some(400) => CsiError::FailedPrecondition(format!("deleting snapshot {id}: {e}")),
                _ => CsiError::cloud(format!("deleting snapshot {id}"))(e),
            })?;
        Ok(csi::DeleteSnapshotResponse {})
    }

    pub async fn list_snapshots(
        &self,
        req: csi::ListSnapshotsRequest,
    ) -> R<csi::ListSnapshotsResponse> {
        let limit = page_limit(req.max_entries, "ListSnapshots")?;
        let cinder = self.cinder();
        if !req.snapshot_id.is_empty() {
            let id = &req.snapshot_id;
            let found = cinder
                .get_snapshot(id)
                .await
                .map_err(CsiError::cloud(format!("reading snapshot {id}")))?;
            return Ok(csi::ListSnapshotsResponse {
                entries: found
                    .iter()
                    .filter(|s| {
                        req.source_volume_id.is_empty() || s.volume_id == req.source_volume_id
                    })
                    .map(|s| csi::list_snapshots_response::Entry {
                        snapshot: Some(csi_snapshot(s)),
                    })
                    .collect(),
                next_token: String::new(),
            });
        }
        let filter = SnapshotFilter {
            status: Some(SnapshotStatus::Available),
            volume_id: Some(req.source_volume_id.clone()).filter(|v| !v.is_empty()),
            ..SnapshotFilter::default()
        };
        let marker = Some(req.starting_token.as_str()).filter(|t| !t.is_empty());
        let page = cinder
            .list_snapshots_page(&filter, limit, marker)
            .await
            .map_err(|e| bad_token(e, marker, "listing snapshots"))?;
        Ok(csi::ListSnapshotsResponse {
            entries: page
                .items
                .iter()
                .map(|s| csi::list_snapshots_response::Entry {
                    snapshot: Some(csi_snapshot(s)),
                })
                .collect(),
            next_token: page.next_marker.unwrap_or_default(),
        })
    }
}

// ------------------------------------------------------------ pure helpers

/// What CreateVolume asks Cinder for.
struct Asked<'a> {
    name: &'a str,
    size: u64,
    volume_type: Option<String>,
    zone: Option<String>,
    /// The zone came from the request's topology, not the class's `availability`.
    zone_from_topology: bool,
    source: Option<VolumeSource>,
}

/// A capability must name its access type and mode (the spec's required fields).
fn check_capability(c: &csi::VolumeCapability) -> R<()> {
    if c.access_type.is_none() {
        return Err(CsiError::InvalidArgument(
            "volume capability: access type (block or mount) must be provided".into(),
        ));
    }
    match c.access_mode.map(|m| Mode::try_from(m.mode)) {
        Some(Ok(m)) if m != Mode::Unknown => Ok(()),
        _ => Err(CsiError::InvalidArgument(
            "volume capability: access mode must be provided".into(),
        )),
    }
}

/// The size in whole GiB: `required_bytes` rounded up, 1 GiB when nothing is asked, refused when
/// that exceeds `limit_bytes`.
pub fn size_gib(r: Option<&csi::CapacityRange>) -> R<u64> {
    let (required, limit) = r.map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
    if required < 0 || limit < 0 {
        return Err(CsiError::InvalidArgument(
            "capacity range: bytes must not be negative".into(),
        ));
    }
    if limit > 0 && limit < required {
        return Err(CsiError::InvalidArgument(format!(
            "capacity range: limit {limit} is below required {required}"
        )));
    }
    let asked = if required > 0 {
        required
    } else {
        GIB.min(if limit > 0 { limit } else { GIB })
    };
    let gib = asked / GIB + i64::from(asked % GIB != 0);
    if limit > 0 && gib * GIB > limit {
        return Err(CsiError::OutOfRange(format!(
            "capacity range: {gib} GiB (Cinder sizes are whole GiB) exceeds the limit of {limit} bytes"
        )));
    }
    u64::try_from(gib.max(1))
        .map_err(|_| CsiError::InvalidArgument("capacity range out of bounds".into()))
}

/// The first zone among the preferred, then the requisite, topologies (upstream's order).
pub fn zone_from_topology(r: &csi::TopologyRequirement) -> Option<String> {
    r.preferred
        .iter()
        .chain(&r.requisite)
        .find_map(|t| t.segments.get(TOPOLOGY_KEY).cloned())
}

fn content_source(s: Option<&csi::VolumeContentSource>) -> R<Option<VolumeSource>> {
    use csi::volume_content_source::Type;
    match s.and_then(|s| s.r#type.as_ref()) {
        None => Ok(None),
        Some(Type::Snapshot(s)) => Ok(Some(VolumeSource::Snapshot(
            required(&s.snapshot_id, "content source: the snapshot id")?.to_owned(),
        ))),
        Some(Type::Volume(v)) => Ok(Some(VolumeSource::Volume(
            required(&v.volume_id, "content source: the volume id")?.to_owned(),
        ))),
    }
}

fn source_of(v: &Volume) -> Option<VolumeSource> {
    let some = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    some(&v.snapshot_id)
        .map(VolumeSource::Snapshot)
        .or_else(|| some(&v.source_volid).map(VolumeSource::Volume))
}

fn bytes(gib: u64) -> i64 {
    i64::try_from(gib).unwrap_or(i64::MAX / GIB) * GIB
}

fn published(v: &Volume) -> Vec<String> {
    v.attachments.iter().map(|a| a.server_id.clone()).collect()
}

/// The CSI volume of a Cinder volume, with the content source and the resize hint upstream sets.
fn csi_volume(v: &Volume, topology: Vec<csi::Topology>) -> csi::Volume {
    use csi::volume_content_source::{SnapshotSource, Type, VolumeSource as Vs};
    let mut context = HashMap::new();
    let content_source = source_of(v).map(|s| {
        context.insert(RESIZE_REQUIRED_KEY.to_owned(), "true".to_owned());
        csi::VolumeContentSource {
            r#type: Some(match s {
                VolumeSource::Snapshot(id) => Type::Snapshot(SnapshotSource { snapshot_id: id }),
                VolumeSource::Volume(id) => Type::Volume(Vs { volume_id: id }),
            }),
        }
    });
    csi::Volume {
        capacity_bytes: bytes(v.size),
        volume_id: v.id.clone(),
        volume_context: context,
        content_source,
        accessible_topology: topology,
    }
}

fn csi_snapshot(s: &Snapshot) -> csi::Snapshot {
    csi::Snapshot {
        size_bytes: bytes(s.size),
        snapshot_id: s.id.clone(),
        source_volume_id: s.volume_id.clone(),
        creation_time: s.created_at.as_deref().and_then(timestamp),
        ready_to_use: s.status == SnapshotStatus::Available,
        group_snapshot_id: String::new(),
    }
}

/// Cinder's timestamps: ISO 8601 in UTC, with or without fraction and offset.
pub fn timestamp(s: &str) -> Option<prost_types::Timestamp> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").map(|t| t.and_utc())
        })
        .ok()?;
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).ok()?,
    })
}

fn page_limit(max_entries: i32, rpc: &str) -> R<Option<u32>> {
    match u32::try_from(max_entries) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(CsiError::InvalidArgument(format!(
            "{rpc}: max_entries {max_entries} must not be negative"
        ))),
    }
}

/// A 400 for a request with a starting token is a marker Cinder does not know: ABORTED (the CO
/// starts over), as the spec asks.
fn bad_token(e: CloudError, marker: Option<&str>, what: &str) -> CsiError {
    match marker {
        Some(m) if e.status() == Some(400) => {
            CsiError::Aborted(format!("starting token {m:?} is not valid: {e}"))
        }
        _ => CsiError::cloud(what)(e),
    }
}

/// Whether a failed create may have taken effect (the answer was lost).
fn maybe_created(e: &CloudError) -> bool {
    matches!(
        e,
        CloudError::Ambiguous { .. } | CloudError::Transport { .. } | CloudError::Decode { .. }
    ) || e.status().is_some_and(|s| s >= 500)
}

/// Nova's refusals mapped to the spec's codes: its 403 on a full server is the attach limit.
fn attach_error(id: &str, node: &str, e: CloudError) -> CsiError {
    let what = format!("attaching volume {id} to {node}");
    match e.status() {
        Some(403) if e.to_string().contains("maximum") => {
            CsiError::ResourceExhausted(format!("{what}: {e}"))
        }
        Some(409) => CsiError::FailedPrecondition(format!("{what}: {e}")),
        Some(404) => CsiError::NotFound(format!("{what}: {e}")),
        _ => CsiError::cloud(what)(e),
    }
}

/// Go's `strconv.ParseBool`, which upstream reads `force-create` with.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

// ------------------------------------------------------------ the gRPC service

/// Runs one call: logs it and its outcome, counts it in `metrics`, and turns the error into a
/// gRPC status.
pub(crate) async fn observed<T>(
    metrics: Option<&Metrics>,
    rpc: &'static str,
    call: impl std::future::Future<Output = R<T>>,
) -> Result<Response<T>, Status> {
    let started = std::time::Instant::now();
    let r = call.await;
    if let Some(m) = metrics {
        let code = r.as_ref().map_or_else(CsiError::label, |_| "ok");
        m.rpc(rpc, code, started.elapsed());
    }
    match r {
        Ok(v) => {
            debug!(rpc, "ok");
            Ok(Response::new(v))
        }
        Err(e) => {
            info!(rpc, code = e.label(), error = %e, "failed");
            Err(e.into())
        }
    }
}

#[tonic::async_trait]
impl csi::controller_server::Controller for Controller {
    async fn create_volume(
        &self,
        r: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "CreateVolume",
            self.create_volume(r.into_inner()),
        )
        .await
    }
    async fn delete_volume(
        &self,
        r: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "DeleteVolume",
            self.delete_volume(r.into_inner()),
        )
        .await
    }
    async fn controller_publish_volume(
        &self,
        r: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerPublishVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ControllerPublishVolume",
            self.controller_publish_volume(r.into_inner()),
        )
        .await
    }
    async fn controller_unpublish_volume(
        &self,
        r: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerUnpublishVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ControllerUnpublishVolume",
            self.controller_unpublish_volume(r.into_inner()),
        )
        .await
    }
    async fn validate_volume_capabilities(
        &self,
        r: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ValidateVolumeCapabilities",
            self.validate_volume_capabilities(r.into_inner()),
        )
        .await
    }
    async fn list_volumes(
        &self,
        r: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ListVolumes",
            self.list_volumes(r.into_inner()),
        )
        .await
    }
    async fn get_capacity(
        &self,
        _: Request<csi::GetCapacityRequest>,
    ) -> Result<Response<csi::GetCapacityResponse>, Status> {
        Err(Status::unimplemented(
            "GetCapacity is not implemented (as upstream)",
        ))
    }
    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        use csi::controller_service_capability::{Rpc as RpcCap, Type};
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities: CAPABILITIES
                .iter()
                .map(|t| csi::ControllerServiceCapability {
                    r#type: Some(Type::Rpc(RpcCap { r#type: *t as i32 })),
                })
                .collect(),
        }))
    }
    async fn create_snapshot(
        &self,
        r: Request<csi::CreateSnapshotRequest>,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "CreateSnapshot",
            self.create_snapshot(r.into_inner()),
        )
        .await
    }
    async fn delete_snapshot(
        &self,
        r: Request<csi::DeleteSnapshotRequest>,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "DeleteSnapshot",
            self.delete_snapshot(r.into_inner()),
        )
        .await
    }
    async fn list_snapshots(
        &self,
        r: Request<csi::ListSnapshotsRequest>,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ListSnapshots",
            self.list_snapshots(r.into_inner()),
        )
        .await
    }
    async fn get_snapshot(
        &self,
        _: Request<csi::GetSnapshotRequest>,
    ) -> Result<Response<csi::GetSnapshotResponse>, Status> {
        Err(Status::unimplemented(
            "GetSnapshot is not implemented (as upstream)",
        ))
    }
    async fn controller_expand_volume(
        &self,
        r: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ControllerExpandVolume",
            self.controller_expand_volume(r.into_inner()),
        )
        .await
    }
    async fn controller_get_volume(
        &self,
        r: Request<csi::ControllerGetVolumeRequest>,
    ) -> Result<Response<csi::ControllerGetVolumeResponse>, Status> {
        observed(
            self.metrics.as_deref(),
            "ControllerGetVolume",
            self.controller_get_volume(r.into_inner()),
        )
        .await
    }
    async fn controller_modify_volume(
        &self,
        _: Request<csi::ControllerModifyVolumeRequest>,
    ) -> Result<Response<csi::ControllerModifyVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "ControllerModifyVolume is not implemented (as upstream)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(required: i64, limit: i64) -> csi::CapacityRange {
        csi::CapacityRange {
            required_bytes: required,
            limit_bytes: limit,
        }
    }

    #[test]
    fn sizes_round_up_to_whole_gib_within_the_limit() {
        assert_eq!(size_gib(None).ok(), Some(1));
        assert_eq!(size_gib(Some(&range(1, 0))).ok(), Some(1));
        assert_eq!(size_gib(Some(&range(GIB + 1, 0))).ok(), Some(2));
        assert_eq!(size_gib(Some(&range(5 * GIB, 5 * GIB))).ok(), Some(5));
        assert!(matches!(
            size_gib(Some(&range(GIB + 1, GIB + 2))),
            Err(CsiError::OutOfRange(_))
        ));
        assert!(matches!(
            size_gib(Some(&range(2 * GIB, GIB))),
            Err(CsiError::InvalidArgument(_))
        ));
        assert!(matches!(
            size_gib(Some(&range(0, 1000))),
            Err(CsiError::OutOfRange(_))
        ));
    }

    #[test]
    fn the_zone_comes_from_preferred_then_requisite() {
        let t = |z: &str| csi::Topology {
            segments: HashMap::from([(TOPOLOGY_KEY.to_owned(), z.to_owned())]),
        };
        let other = csi::Topology {
            segments: HashMap::from([("topology.kubernetes.io/region".to_owned(), "r".to_owned())]),
        };
        let r = csi::TopologyRequirement {
            requisite: vec![t("req")],
            preferred: vec![other.clone(), t("pref")],
        };
        assert_eq!(zone_from_topology(&r).as_deref(), Some("pref"));
        let r = csi::TopologyRequirement {
            requisite: vec![t("req")],
            preferred: vec![other],
        };
        assert_eq!(zone_from_topology(&r).as_deref(), Some("req"));
        assert_eq!(
            zone_from_topology(&csi::TopologyRequirement::default()),
            None
        );
    }

    #[test]
    fn cinder_timestamps_parse_with_and_without_offset() {
        let a = timestamp("2019-03-12T04:42:00.809352").map(|t| t.seconds);
        let b = timestamp("2019-03-12T04:42:00Z").map(|t| t.seconds);
        let c = timestamp("2019-03-12T05:42:00+01:00").map(|t| t.seconds);
        assert_eq!(a, Some(1_552_365_720));
        assert_eq!((a, a), (b, c));
        assert_eq!(timestamp("yesterday"), None);
    }

    #[test]
    fn a_second_call_on_a_busy_volume_is_aborted_until_the_first_ends() -> Result<(), CsiError> {
        let busy = BusySet::default();
        let first = busy.claim("volume", "a")?;
        assert!(matches!(
            busy.claim("volume", "a"),
            Err(CsiError::Aborted(_))
        ));
        let _other = busy.claim("volume", "b")?;
        let _by_name = busy.claim("volume-name", "a")?;
        drop(first);
        let _again = busy.claim("volume", "a")?;
        Ok(())
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse_go_bool("True"), Some(true));
        assert_eq!(parse_go_bool("0"), Some(false));
        assert_eq!(parse_go_bool("yes"), None);
    }
}
