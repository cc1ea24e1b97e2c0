//! Cinder facade: volumes (kos's tags live in their metadata), snapshots, extend, availability
//! zones, quotas with usage, limits, and the waits on volume and snapshot states.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::CloudError;
use crate::model::block_storage::{
    Page, Snapshot, SnapshotCreate, SnapshotFilter, SnapshotStatus, Volume, VolumeCreate,
    VolumeFilter, VolumeLimits, VolumeQuotas, VolumeSource, VolumeStatus, VolumeType, VolumeZone,
    quota_lines,
};
use crate::paging::util::{body, fetch, found, gone, run};
use crate::paging::wait::{self, Step};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;

const SVC: ServiceKind = ServiceKind::BlockStorage;
/// 3.60: the newest fields kos reads exist, and every Cinder since Victoria accepts it.
const MV: &str = "3.60";
/// Extending an `in-use` volume needs this microversion (Cinder's history: 3.42).
const MV_ONLINE_EXTEND: u32 = 42;

/// Cinder, through one session: `session.block_storage()`.
#[derive(Debug, Clone, Copy)]
pub struct BlockStorageApi<'a> {
    session: &'a Session,
    page_size: Option<u32>,
    /// `None`: the base version 3.0 (cinder-csi's `ignore-volume-microversion`, for old clouds).
    mv: Option<&'static str>,
}

impl Session {
    pub fn block_storage(&self) -> BlockStorageApi<'_> {
        BlockStorageApi {
            session: self,
            page_size: None,
            mv: Some(MV),
        }
    }
}

impl BlockStorageApi<'_> {
    fn req(&self, r: ApiRequest) -> ApiRequest {
        match self.mv {
            Some(v) => r.microversion(v),
            None => r,
        }
    }

    /// Sends no microversion (Cinder then answers as 3.0): for clouds whose Cinder refuses
    /// kos's. What needs a newer one (extending an `in-use` volume) is refused before sending.
    pub fn without_microversion(self) -> Self {
        BlockStorageApi { mv: None, ..self }
    }

    /// Lists ask for pages of `n` (default: the service's own page size).
    pub fn page_size(self, n: u32) -> Self {
        BlockStorageApi {
            page_size: Some(n),
            ..self
        }
    }

    /// Starts the create (`creating`).
    pub async fn create_volume(&self, v: &VolumeCreate) -> Result<Volume, CloudError> {
        fetch(
            self.session,
            self.req(ApiRequest::post(
                SVC,
                "volume.create",
                "volumes",
                body("volume", v)?,
            )),
            "volume",
        )
        .await
    }

    pub async fn get_volume(&self, id: &str) -> Result<Option<Volume>, CloudError> {
        found(
            fetch(
                self.session,
                self.req(ApiRequest::get(SVC, "volume.get", format!("volumes/{id}"))),
                "volume",
            )
            .await,
        )
    }

    /// Volumes with details, filtered (metadata filter = kos's tags), all pages.
    pub async fn list_volumes(&self, f: &VolumeFilter) -> Result<Vec<Volume>, CloudError> {
        let mut r = self.req(ApiRequest::get(SVC, "volume.list", "volumes/detail"));
        r.query = f.to_query();
        self.session.list_all(r, "volumes", self.page_size).await
    }

    /// Starts the delete; already gone is fine.
    pub async fn delete_volume(&self, id: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                self.req(ApiRequest::delete(
                    SVC,
                    "volume.delete",
                    format!("volumes/{id}"),
                )),
            )
            .await,
        )
    }

    /// Replaces all metadata.
    pub async fn set_metadata(
        &self,
        id: &str,
        m: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, CloudError> {
        let r = self.req(ApiRequest::put(
            SVC,
            "volume.metadata.replace",
            format!("volumes/{id}/metadata"),
            json!({"metadata": m}),
        ));
        fetch(self.session, r, "metadata").await
    }

    /// Adds or overwrites these keys, keeping the others.
    pub async fn merge_metadata(
        &self,
        id: &str,
        m: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, CloudError> {
        let r = self
            .req(ApiRequest::post(
                SVC,
                "volume.metadata.merge",
                format!("volumes/{id}/metadata"),
                json!({"metadata": m}),
            ))
            .idempotent(true);
        fetch(self.session, r, "metadata").await
    }

    /// Polls until `available`; an error status ends the wait.
    pub async fn wait_for_available(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<Volume, CloudError> {
        self.wait_for_status(id, &[VolumeStatus::Available], deadline)
            .await
    }

    /// Polls until the volume is in one of `wanted`; an error status, or the volume gone, ends
    /// the wait with [`CloudError::Failed`] naming the state.
    pub async fn wait_for_status(
        &self,
        id: &str,
        wanted: &[VolumeStatus],
        deadline: Instant,
    ) -> Result<Volume, CloudError> {
        let names: Vec<&str> = wanted.iter().map(VolumeStatus::as_str).collect();
        let names = names.join(" or ");
        let names = names.as_str();
        let what = format!("volume {id} to be {names}");
        let what = what.as_str();
        let this = *self;
        wait::until(what, deadline, move || async move {
            let Some(v) = this.get_volume(id).await? else {
                return Err(CloudError::Failed {
                    what: format!("volume {id}"),
                    detail: format!("disappeared while waiting for {names}"),
                });
            };
            match &v.status {
                s if wanted.contains(s) => Ok(Step::Done(v)),
                s if s.is_error() => Err(CloudError::Failed {
                    what: format!("volume {} ({id})", v.name),
                    detail: format!("went to {s}"),
                }),
                s => Ok(Step::Pending(s.to_string())),
            }
        })
        .await
    }

    /// Polls until Cinder shows the volume attached to `server_id` (`attached`) or no longer
    /// attached to it, and in a settled state (`in-use`, or `available` once nothing is attached).
    /// A volume in an error state ends the wait with that state; a volume gone ends it with
    /// [`CloudError::Failed`] when attaching and succeeds when detaching.
    pub async fn wait_for_attachment(
        &self,
        volume_id: &str,
        server_id: &str,
        attached: bool,
        deadline: Instant,
    ) -> Result<Option<Volume>, CloudError> {
        let what = if attached {
            format!("volume {volume_id} to be attached to server {server_id}")
        } else {
            format!("volume {volume_id} to be detached from server {server_id}")
        };
        let what = what.as_str();
        let this = *self;
        wait::until(what, deadline, move || async move {
            let Some(v) = this.get_volume(volume_id).await? else {
                return if attached {
                    Err(CloudError::Failed {
                        what: format!("volume {volume_id}"),
                        detail: "disappeared while being attached".into(),
                    })
                } else {
                    Ok(Step::Done(None))
                };
            };
            if v.status.is_error() {
                return Err(CloudError::Failed {
                    what: format!("volume {} ({volume_id})", v.name),
                    detail: format!("went to {}", v.status),
                });
            }
            let on_server = v.attachments.iter().any(|a| a.server_id == server_id);
            let settled = match (&v.status, attached) {
                (VolumeStatus::InUse, true) => on_server,
                (VolumeStatus::InUse, false) => !on_server,
                (VolumeStatus::Available, false) => true,
                // Nova gave up: the attach rolled back, the volume is free again.
                (VolumeStatus::Available, true) if !on_server => {
                    return Err(CloudError::Failed {
                        what: format!("volume {} ({volume_id})", v.name),
                        detail: format!(
                            "is available again: Nova did not attach it to server {server_id}"
                        ),
                    });
                }
                _ => false,
            };
            if settled {
                Ok(Step::Done(Some(v)))
            } else {
                Ok(Step::Pending(format!(
                    "{}{}",
                    v.status,
                    if on_server {
                        ", attached"
                    } else {
                        ", not attached"
                    }
                )))
            }
        })
        .await
    }

    /// Starts the create of a volume made from a snapshot or another volume (`creating`).
    pub async fn create_volume_from(
        &self,
        v: &VolumeCreate,
        source: &VolumeSource,
    ) -> Result<Volume, CloudError> {
        let mut b = body("volume", v)?;
        let (k, id) = source.key_value();
        if let Some(o) = b.get_mut("volume").and_then(Value::as_object_mut) {
            o.insert(k.to_owned(), Value::from(id));
        }
        fetch(
            self.session,
            self.req(ApiRequest::post(SVC, "volume.create", "volumes", b)),
            "volume",
        )
        .await
    }

    /// One page of volumes with details (`limit`, `marker`), and the marker of the next.
    pub async fn list_volumes_page(
        &self,
        f: &VolumeFilter,
        limit: Option<u32>,
        marker: Option<&str>,
    ) -> Result<Page<Volume>, CloudError> {
        let mut r = self.req(ApiRequest::get(SVC, "volume.list", "volumes/detail"));
        r.query = f.to_query();
        let (items, next_marker) = self.session.list_page(r, "volumes", limit, marker).await?;
        Ok(Page { items, next_marker })
    }

    /// Starts growing the volume to `new_size` GiB (`extending`). `in_use`: the volume is
    /// attached, which Cinder allows only from microversion 3.42 on.
    pub async fn extend_volume(
        &self,
        id: &str,
        new_size: u64,
        in_use: bool,
    ) -> Result<(), CloudError> {
        if in_use && self.mv.is_none_or(|v| minor(v) < MV_ONLINE_EXTEND) {
            return Err(CloudError::Invalid {
                what: format!("extending volume {id}"),
                detail: "an in-use volume needs Cinder microversion 3.42 or newer, and this session sends none (ignore-volume-microversion)".into(),
            });
        }
        run(
            self.session,
            self.req(ApiRequest::post(
                SVC,
                "volume.extend",
                format!("volumes/{id}/action"),
                json!({"os-extend": {"new_size": new_size}}),
            )),
        )
        .await
    }

    // ------------------------------------------------------------ snapshots

    /// Starts the snapshot (`creating`).
    pub async fn create_snapshot(&self, s: &SnapshotCreate) -> Result<Snapshot, CloudError> {
        fetch(
            self.session,
            self.req(ApiRequest::post(
                SVC,
                "snapshot.create",
                "snapshots",
                body("snapshot", s)?,
            )),
            "snapshot",
        )
        .await
    }

    pub async fn get_snapshot(&self, id: &str) -> Result<Option<Snapshot>, CloudError> {
        found(
            fetch(
                self.session,
                self.req(ApiRequest::get(
                    SVC,
                    "snapshot.get",
                    format!("snapshots/{id}"),
                )),
                "snapshot",
            )
            .await,
        )
    }

    /// Snapshots with details, filtered, all pages.
    pub async fn list_snapshots(&self, f: &SnapshotFilter) -> Result<Vec<Snapshot>, CloudError> {
        let mut r = self.req(ApiRequest::get(SVC, "snapshot.list", "snapshots/detail"));
        r.query = f.to_query();
        self.session.list_all(r, "snapshots", self.page_size).await
    }

    /// One page of snapshots with details, and the marker of the next.
    pub async fn list_snapshots_page(
        &self,
        f: &SnapshotFilter,
        limit: Option<u32>,
        marker: Option<&str>,
    ) -> Result<Page<Snapshot>, CloudError> {
        let mut r = self.req(ApiRequest::get(SVC, "snapshot.list", "snapshots/detail"));
        r.query = f.to_query();
        let (items, next_marker) = self
            .session
            .list_page(r, "snapshots", limit, marker)
            .await?;
        Ok(Page { items, next_marker })
    }

    /// Starts the delete; already gone is fine.
    pub async fn delete_snapshot(&self, id: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                self.req(ApiRequest::delete(
                    SVC,
                    "snapshot.delete",
                    format!("snapshots/{id}"),
                )),
            )
            .await,
        )
    }

    /// Polls until the snapshot is `available`; an error state or the snapshot gone ends the wait.
    pub async fn wait_for_snapshot_available(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<Snapshot, CloudError> {
        let what = format!("snapshot {id} to be available");
        let what = what.as_str();
        let this = *self;
        wait::until(what, deadline, move || async move {
            let Some(s) = this.get_snapshot(id).await? else {
                return Err(CloudError::Failed {
                    what: format!("snapshot {id}"),
                    detail: "disappeared while waiting for available".into(),
                });
            };
            match &s.status {
                SnapshotStatus::Available => Ok(Step::Done(s)),
                st if st.is_error() => Err(CloudError::Failed {
                    what: format!("snapshot {} ({id})", s.name),
                    detail: format!("went to {st}"),
                }),
                st => Ok(Step::Pending(st.to_string())),
            }
        })
        .await
    }

    /// The volume types the project may use (public ones and those shared with it).
    pub async fn list_volume_types(&self) -> Result<Vec<VolumeType>, CloudError> {
        fetch(
            self.session,
            self.req(ApiRequest::get(SVC, "volume_type.list", "types")),
            "volume_types",
        )
        .await
    }

    /// Cinder's own availability zones (`openstack availability zone list --volume`): where a volume
    /// may be made, which need not be where servers run.
    pub async fn availability_zones(&self) -> Result<Vec<VolumeZone>, CloudError> {
        fetch(
            self.session,
            self.req(ApiRequest::get(
                SVC,
                "availability_zone.list",
                "os-availability-zone",
            )),
            "availabilityZoneInfo",
        )
        .await
    }

    /// Limits and usage of the session's project.
    pub async fn quotas(&self) -> Result<VolumeQuotas, CloudError> {
        let r = self
            .req(ApiRequest::get(
                SVC,
                "quota.get",
                format!("os-quota-sets/{}", self.session.project_id()),
            ))
            .query("usage", "true");
        let set: BTreeMap<String, Value> = fetch(self.session, r, "quota_set").await?;
        Ok(quota_lines(set))
    }

    pub async fn limits(&self) -> Result<VolumeLimits, CloudError> {
        #[derive(serde::Deserialize)]
        struct Limits {
            absolute: VolumeLimits,
        }
        let l: Limits = fetch(
            self.session,
            self.req(ApiRequest::get(SVC, "limits.get", "limits")),
            "limits",
        )
        .await?;
        Ok(l.absolute)
    }
}

/// The minor of a "3.N" microversion.
fn minor(v: &str) -> u32 {
    v.split_once('.')
        .and_then(|(_, m)| m.parse().ok())
        .unwrap_or(0)
}
