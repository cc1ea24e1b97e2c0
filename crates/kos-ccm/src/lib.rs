//! kos-ccm: an OpenStack cloud-controller-manager that reads the upstream CCM's cloud.conf and
//! honours its annotations, so switching is a change of image.

pub mod check;
pub mod config;

pub use config::{CloudConfig, ConfigError, Diagnostic, Loaded};
