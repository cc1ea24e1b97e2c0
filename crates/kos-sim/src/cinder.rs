//! Cinder subset (placeholder: the cross-service interface below is fixed; bodies are filled in).

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::error::{SimError, SimResult};
use crate::routes::Routes;
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::BlockStorage;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CinderState {}

/// A volume another service creates (Nova's block_device_mapping_v2 with destination_type=volume).
#[derive(Debug, Clone, Default)]
pub struct InternalVolume {
    pub project_id: String,
    pub name: String,
    pub size_gb: u64,
    pub image_id: Option<String>,
    pub volume_type: Option<String>,
    pub availability_zone: Option<String>,
}

pub fn seed(_cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {}

pub fn advance(_cloud: &mut Cloud, _cfg: &SimConfig) {}

pub fn versions() -> Routes {
    Routes::new(SVC)
}

pub fn routes() -> Routes {
    Routes::new(SVC)
}

/// Quota-checked like POST /volumes; the volume starts `creating`. Errors are Cinder errors.
pub fn create_volume_internal(_cloud: &mut Cloud, _spec: InternalVolume) -> SimResult<String> {
    Err(SimError::not_found(SVC, "not implemented"))
}

pub fn volume_status(_cloud: &Cloud, _volume_id: &str) -> Option<String> {
    None
}

pub fn volume_size(_cloud: &Cloud, _volume_id: &str) -> Option<u64> {
    None
}

/// Attaches an `available` volume to a server: `in-use`, with an attachment record. Errors (400 for a
/// volume in the wrong state) are Cinder errors.
pub fn attach(
    _cloud: &mut Cloud,
    _volume_id: &str,
    _server_id: &str,
    _device: &str,
) -> SimResult<String> {
    Err(SimError::not_found(SVC, "not implemented"))
}

/// Back to `available`.
pub fn detach(_cloud: &mut Cloud, _volume_id: &str, _server_id: &str) {}

/// Deletes a volume regardless of API rules (delete_on_termination).
pub fn delete_volume_internal(_cloud: &mut Cloud, _volume_id: &str) {}
