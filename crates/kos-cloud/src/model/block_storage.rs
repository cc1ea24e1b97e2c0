//! Cinder: volumes, snapshots, metadata, availability zones, quotas with usage, limits.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::common::{Link, QuotaUsage, nullable, string_enum};

string_enum!(
    /// Cinder volume status.
    VolumeStatus {
        Creating = "creating",
        Available = "available",
        Reserved = "reserved",
        Attaching = "attaching",
        Detaching = "detaching",
        InUse = "in-use",
        Maintenance = "maintenance",
        Deleting = "deleting",
        AwaitingTransfer = "awaiting-transfer",
        Error = "error",
        ErrorDeleting = "error_deleting",
        BackingUp = "backing-up",
        RestoringBackup = "restoring-backup",
        ErrorBackingUp = "error_backing-up",
        ErrorRestoring = "error_restoring",
        ErrorExtending = "error_extending",
        Downloading = "downloading",
        Uploading = "uploading",
        Retyping = "retyping",
        Extending = "extending",
    }
);

impl VolumeStatus {
    pub fn is_error(&self) -> bool {
        self.as_str().starts_with("error")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeAttachmentInfo {
    pub server_id: String,
    pub attachment_id: Option<String>,
    pub device: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Volume {
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub status: VolumeStatus,
    /// GiB.
    pub size: u64,
    pub volume_type: Option<String>,
    pub availability_zone: Option<String>,
    /// Cinder sends `"true"`/`"false"` strings.
    #[serde(deserialize_with = "bool_string")]
    pub bootable: bool,
    pub multiattach: bool,
    pub encrypted: bool,
    #[serde(deserialize_with = "nullable")]
    pub metadata: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub attachments: Vec<VolumeAttachmentInfo>,
    pub snapshot_id: Option<String>,
    pub source_volid: Option<String>,
    /// The image a volume was made from (`image_id`, `image_name`, ...); Cinder sends it only for
    /// volumes made from an image.
    #[serde(deserialize_with = "nullable")]
    pub volume_image_metadata: BTreeMap<String, Value>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    #[serde(rename = "os-vol-tenant-attr:tenant_id")]
    pub project_id: Option<String>,
    pub links: Vec<Link>,
}

impl Volume {
    /// The image the volume was made from, as Cinder records it.
    #[must_use]
    pub fn image_id(&self) -> Option<&str> {
        self.volume_image_metadata
            .get("image_id")
            .and_then(Value::as_str)
    }
}

fn bool_string<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::Bool(b)) => b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    })
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VolumeCreate {
    /// GiB.
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Make a bootable volume from this image.
    #[serde(rename = "imageRef", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// kos's tags live here (Cinder volumes have no tags).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// What a new volume is made from, besides nothing or an image: one source at most, as Cinder
/// takes one (`snapshot_id` or `source_volid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    Snapshot(String),
    Volume(String),
}

impl VolumeSource {
    /// The create request's key and value.
    pub fn key_value(&self) -> (&'static str, &str) {
        match self {
            VolumeSource::Snapshot(id) => ("snapshot_id", id),
            VolumeSource::Volume(id) => ("source_volid", id),
        }
    }
}

string_enum!(
    /// Cinder snapshot status.
    SnapshotStatus {
        Creating = "creating",
        Available = "available",
        BackingUp = "backing-up",
        Deleting = "deleting",
        Deleted = "deleted",
        Error = "error",
        ErrorDeleting = "error_deleting",
        Unmanaging = "unmanaging",
        Restoring = "restoring",
    }
);

impl SnapshotStatus {
    pub fn is_error(&self) -> bool {
        self.as_str().starts_with("error")
    }
}

/// A Cinder volume snapshot (`GET /snapshots/{id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub status: SnapshotStatus,
    /// GiB: the source volume's size when the snapshot was taken.
    pub size: u64,
    pub volume_id: String,
    #[serde(deserialize_with = "nullable")]
    pub metadata: BTreeMap<String, String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

/// `POST /snapshots`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SnapshotCreate {
    pub volume_id: String,
    /// Snapshot an `in-use` volume too (Cinder refuses one without it).
    pub force: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotFilter {
    pub name: Option<String>,
    pub status: Option<SnapshotStatus>,
    pub volume_id: Option<String>,
}

impl SnapshotFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = Vec::new();
        if let Some(n) = &self.name {
            q.push(("name".into(), n.clone()));
        }
        if let Some(s) = &self.status {
            q.push(("status".into(), s.as_str().to_owned()));
        }
        if let Some(v) = &self.volume_id {
            q.push(("volume_id".into(), v.clone()));
        }
        q
    }
}

/// One page of a list and the marker of the next, for callers that hand pages on (a CSI
/// `ListVolumes` token).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// `None` on the last page.
    pub next_marker: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeFilter {
    pub name: Option<String>,
    pub status: Option<VolumeStatus>,
    /// Volumes whose metadata has all of these pairs.
    pub metadata: BTreeMap<String, String>,
}

impl VolumeFilter {
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q = Vec::new();
        if let Some(n) = &self.name {
            q.push(("name".into(), n.clone()));
        }
        if let Some(s) = &self.status {
            q.push(("status".into(), s.as_str().to_owned()));
        }
        if !self.metadata.is_empty() {
            // Cinder parses this with ast.literal_eval; a JSON object of strings is a valid Python dict.
            q.push((
                "metadata".into(),
                serde_json::Value::from(serde_json::Map::from_iter(
                    self.metadata
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::from(v.as_str()))),
                ))
                .to_string(),
            ));
        }
        q
    }
}

/// `GET os-quota-sets/{project}?usage=true`: resource → limit and usage (keys like `volumes`,
/// `gigabytes`, `volumes___DEFAULT__`).
pub type VolumeQuotas = BTreeMap<String, QuotaUsage>;

/// Keeps only the quota lines (the set also carries `"id": <project>`).
pub(crate) fn quota_lines(v: BTreeMap<String, Value>) -> VolumeQuotas {
    v.into_iter()
        .filter_map(|(k, v)| serde_json::from_value::<QuotaUsage>(v).ok().map(|q| (k, q)))
        .collect()
}

/// Cinder's absolute limits (`GET /limits`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeLimits {
    pub max_total_volumes: i64,
    pub total_volumes_used: i64,
    pub max_total_volume_gigabytes: i64,
    pub total_gigabytes_used: i64,
    pub max_total_snapshots: i64,
    pub total_snapshots_used: i64,
}

/// A Cinder volume type (`GET /types`); `extra_specs` are admin-only and not read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeType {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    pub is_public: bool,
}

/// One Cinder availability zone (`GET /os-availability-zone`). Cinder's zones are its own: a cloud may have
/// one `nova` volume zone and several compute zones, so a volume's zone is never assumed to be its server's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeZone {
    #[serde(rename = "zoneName")]
    pub name: String,
    #[serde(rename = "zoneState")]
    pub state: VolumeZoneState,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeZoneState {
    pub available: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{keys, parse_sample, sample_keys};

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn volumes_parse_across_microversions() -> R {
        for v in [
            "", "v3.13/", "v3.48/", "v3.61/", "v3.63/", "v3.65/", "v3.69/",
        ] {
            let p = format!("block-storage/volumes/{v}volume-show-response.json");
            let vol: Volume = parse_sample(&p, "volume")?;
            assert!(!vol.id.is_empty(), "{p}");
            let l: Vec<Volume> = parse_sample(
                &format!("block-storage/volumes/{v}volumes-list-detailed-response.json"),
                "volumes",
            )?;
            assert!(!l.is_empty());
        }
        let vol: Volume = parse_sample(
            "block-storage/volumes/v3.65/volume-show-response.json",
            "volume",
        )?;
        assert_eq!(
            (vol.status, vol.size, vol.bootable, vol.name.as_str()),
            (VolumeStatus::Creating, 10, false, "")
        );
        Ok(())
    }

    #[test]
    fn quotas_and_limits_parse() -> R {
        let q = quota_lines(parse_sample(
            "block-storage/quota_sets/quotas-show-usage-response.json",
            "quota_set",
        )?);
        assert_eq!(
            q["volumes"],
            QuotaUsage {
                limit: 10,
                used: 0,
                reserved: 0
            }
        );
        assert!(!q.contains_key("id"));
        let l: BTreeMap<String, Value> =
            parse_sample("block-storage/limits/limits-show-response.json", "limits")?;
        let a: VolumeLimits = serde_json::from_value(l["absolute"].clone())?;
        assert_eq!(
            (a.max_total_volumes, a.max_total_volume_gigabytes),
            (10, 1000)
        );
        Ok(())
    }

    #[test]
    fn create_request_uses_the_api_reference_keys() -> R {
        let c = VolumeCreate {
            size: 10,
            name: Some("v".into()),
            description: Some("d".into()),
            volume_type: Some("t".into()),
            image_id: Some("i".into()),
            availability_zone: Some("nova".into()),
            metadata: BTreeMap::from([("kos-cluster".into(), "a".into())]),
        };
        let want = sample_keys("block-storage/volumes/volume-create-request.json", "volume")?;
        let got = keys(&serde_json::to_value(&c)?);
        assert!(got.iter().all(|k| want.contains(k)), "{got:?} ⊄ {want:?}");
        let f = VolumeFilter {
            metadata: BTreeMap::from([("kos-cluster".into(), "a".into())]),
            ..Default::default()
        };
        assert_eq!(
            f.to_query(),
            vec![("metadata".into(), r#"{"kos-cluster":"a"}"#.into())]
        );
        Ok(())
    }

    #[test]
    fn snapshots_parse_and_create_uses_the_api_reference_keys() -> R {
        let s: Snapshot = parse_sample(
            "block-storage/snapshots/snapshot-show-response.json",
            "snapshot",
        )?;
        assert_eq!(
            (s.status, s.size, s.volume_id.as_str(), s.name.as_str()),
            (
                SnapshotStatus::Creating,
                10,
                "b72c48f1-64b7-4cd8-9745-b12e0be82d37",
                "snap-001"
            )
        );
        let l: Vec<Snapshot> = parse_sample(
            "block-storage/snapshots/snapshots-list-detailed-response.json",
            "snapshots",
        )?;
        assert!(!l.is_empty() && l.iter().all(|s| !s.id.is_empty()));
        let c = SnapshotCreate {
            volume_id: "v".into(),
            force: true,
            name: Some("n".into()),
            description: Some("d".into()),
            metadata: BTreeMap::from([("k".into(), "v".into())]),
        };
        assert_eq!(
            keys(&serde_json::to_value(&c)?),
            sample_keys(
                "block-storage/snapshots/snapshot-create-request.json",
                "snapshot"
            )?
        );
        let want = sample_keys("block-storage/volumes/volume-create-request.json", "volume")?;
        for src in [
            VolumeSource::Snapshot("s".into()),
            VolumeSource::Volume("v".into()),
        ] {
            assert!(want.contains(&src.key_value().0.to_owned()), "{src:?}");
        }
        Ok(())
    }

    #[test]
    fn volume_types_parse() -> R {
        let t: Vec<VolumeType> = parse_sample(
            "block-storage/volume_type/volume-types-list-response.json",
            "volume_types",
        )?;
        assert!(t.iter().all(|t| !t.id.is_empty() && !t.name.is_empty()));
        Ok(())
    }

    #[test]
    fn availability_zones_parse() -> R {
        let z: Vec<VolumeZone> = parse_sample(
            "block-storage/availability-zone-list-response.json",
            "availabilityZoneInfo",
        )?;
        assert_eq!((z[0].name.as_str(), z[0].state.available), ("nova", true));
        Ok(())
    }
}
