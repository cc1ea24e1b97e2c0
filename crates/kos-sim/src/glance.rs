//! Glance subset (placeholder: the cross-service interface below is fixed; bodies are filled in).

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::routes::Routes;
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::Image;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct GlanceState {}

#[derive(Debug, Clone)]
pub struct ImageView {
    pub id: String,
    pub name: String,
    pub status: String,
    pub min_disk_gb: u64,
    pub min_ram_mb: u64,
    pub size_bytes: u64,
}

pub fn seed(_cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {}

pub fn versions() -> Routes {
    Routes::new(SVC)
}

pub fn routes() -> Routes {
    Routes::new(SVC)
}

pub fn image_view(_cloud: &Cloud, _image_id: &str) -> Option<ImageView> {
    None
}
