//! Nova subset (placeholder until the service is filled in).

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::routes::Routes;
use crate::service::Service;
use crate::state::Cloud;

const SVC: Service = Service::Compute;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NovaState {}

pub fn seed(_cloud: &mut Cloud, _cfg: &SimConfig, _project_id: &str) {}

pub fn advance(_cloud: &mut Cloud, _cfg: &SimConfig) {}

pub fn versions() -> Routes {
    Routes::new(SVC)
}

pub fn routes() -> Routes {
    Routes::new(SVC)
}
