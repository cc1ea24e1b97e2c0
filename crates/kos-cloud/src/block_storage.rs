//! Cinder facade: volumes (kos's tags live in their metadata), availability zones, quotas with usage,
//! limits.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::CloudError;
use crate::model::block_storage::{
    Volume, VolumeCreate, VolumeFilter, VolumeLimits, VolumeQuotas, VolumeStatus, VolumeType,
    VolumeZone, quota_lines,
};
use crate::paging::util::{body, fetch, found, gone, run};
use crate::paging::wait::{self, Step};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;

const SVC: ServiceKind = ServiceKind::BlockStorage;
/// 3.60: the newest fields kos reads exist, and every Cinder since Victoria accepts it.
const MV: &str = "3.60";

/// Cinder, through one session: `session.block_storage()`.
#[derive(Debug, Clone, Copy)]
pub struct BlockStorageApi<'a> {
    session: &'a Session,
    page_size: Option<u32>,
}

impl Session {
    pub fn block_storage(&self) -> BlockStorageApi<'_> {
        BlockStorageApi {
            session: self,
            page_size: None,
        }
    }
}

fn req(r: ApiRequest) -> ApiRequest {
    r.microversion(MV)
}

impl BlockStorageApi<'_> {
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
            req(ApiRequest::post(
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
                req(ApiRequest::get(SVC, "volume.get", format!("volumes/{id}"))),
                "volume",
            )
            .await,
        )
    }

    /// Volumes with details, filtered (metadata filter = kos's tags), all pages.
    pub async fn list_volumes(&self, f: &VolumeFilter) -> Result<Vec<Volume>, CloudError> {
        let mut r = req(ApiRequest::get(SVC, "volume.list", "volumes/detail"));
        r.query = f.to_query();
        self.session.list_all(r, "volumes", self.page_size).await
    }

    /// Starts the delete; already gone is fine.
    pub async fn delete_volume(&self, id: &str) -> Result<(), CloudError> {
        gone(
            run(
                self.session,
                req(ApiRequest::delete(
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
        let r = req(ApiRequest::put(
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
        let r = req(ApiRequest::post(
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
        let what = format!("volume {id}");
        let what = what.as_str();
        let this = *self;
        wait::until(what, deadline, move || async move {
            let Some(v) = this.get_volume(id).await? else {
                return Err(CloudError::Failed {
                    what: what.to_owned(),
                    detail: "disappeared while waiting for available".into(),
                });
            };
            match &v.status {
                VolumeStatus::Available => Ok(Step::Done(v)),
                s if s.is_error() => Err(CloudError::Failed {
                    what: format!("volume {} ({id})", v.name),
                    detail: format!("went to {s}"),
                }),
                s => Ok(Step::Pending(s.to_string())),
            }
        })
        .await
    }

    /// The volume types the project may use (public ones and those shared with it).
    pub async fn list_volume_types(&self) -> Result<Vec<VolumeType>, CloudError> {
        fetch(
            self.session,
            req(ApiRequest::get(SVC, "volume_type.list", "types")),
            "volume_types",
        )
        .await
    }

    /// Cinder's own availability zones (`openstack availability zone list --volume`): where a volume
    /// may be made, which need not be where servers run.
    pub async fn availability_zones(&self) -> Result<Vec<VolumeZone>, CloudError> {
        fetch(
            self.session,
            req(ApiRequest::get(
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
        let r = req(ApiRequest::get(
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
            req(ApiRequest::get(SVC, "limits.get", "limits")),
            "limits",
        )
        .await?;
        Ok(l.absolute)
    }
}
