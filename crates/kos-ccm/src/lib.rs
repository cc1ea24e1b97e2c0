//! kos-ccm: an OpenStack cloud-controller-manager that reads the upstream CCM's cloud.conf and
//! honours its annotations, so switching is a change of image.

// The binary sets the allocator up (`malloc`); the library itself has no `unsafe`.
#![forbid(unsafe_code)]

/// Per-object retry delays after failures.
pub mod backoff;
/// The controller side of `kos bench ccm` (`kos-ccm bench-service`, hidden).
pub mod bench;
pub mod check;
pub mod config;
/// What every controller shares at run time (session, cloud.conf, client, Event recorder).
pub mod context;
/// The Service load-balancer controller's core (decide and act, no Kubernetes IO).
pub mod lb;
pub mod leader;
/// glibc allocator settings the binary applies before any thread starts.
pub mod malloc;
pub mod metrics;
/// The node controllers: initialisation, address refresh, lifecycle.
pub mod node;
pub mod options;
/// The Kubernetes API calls kos-ccm makes: what its RBAC must grant.
pub mod rbac;
/// Events, as client-go's recorder writes them (a repeat is a series), remembering little.
pub mod recorder;
/// The route controller (`[Route] router-id`): pod-CIDR routes and allowed address pairs.
pub mod route;
/// A kos-ccm run: session, client, leader election, controllers.
pub mod run;
pub mod serve;
/// The Service controller: Kubernetes wiring of the load-balancer core.
pub mod service;
mod suggest;

pub use config::{CloudConfig, ConfigError, Diagnostic, Loaded};
