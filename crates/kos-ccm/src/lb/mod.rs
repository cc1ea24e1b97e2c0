//! The Service load-balancer controller's core: from a `Service`, the cluster's `Node`s and
//! cloud.conf to an Octavia load balancer (and its floating IP), as a library the Kubernetes wiring
//! calls. Nothing here talks to Kubernetes: a pass returns an [`Outcome`] (status, annotations,
//! events, requeue) for the wiring to apply.
//!
//! The pipeline: [`annotations::parse`] (typed options or every problem) → [`nodes::backends`] →
//! [`desired::desired`] → [`observed::Observed`] (one list per resource type, shared by all
//! Services) → [`plan::plan`] (pure) → [`LoadBalancers::ensure`] applies the first action and
//! requeues while Octavia is busy; [`LoadBalancers::ensure_deleted`] removes what is the
//! Service's. Names, descriptions and tags follow the upstream CCM ([`naming`]), so its load
//! balancers are adopted; ownership tags keep clusters apart.
//! With `manage-security-groups`, [`security_groups`] keeps a per-Service Neutron security group on
//! the member nodes' ports once the load balancer is in place, and removes it on delete.
//!
//! ```no_run
//! # async fn demo(session: kos_cloud::Session, cfg: std::sync::Arc<kos_ccm::CloudConfig>,
//! #   svc: k8s_openapi::api::core::v1::Service, nodes: Vec<k8s_openapi::api::core::v1::Node>)
//! #   -> Result<(), kos_ccm::lb::LbError> {
//! use kos_ccm::lb::{LbSettings, LoadBalancers};
//! let lbs = LoadBalancers::new(session, cfg, LbSettings::new("kubernetes"));
//! let outcome = lbs.ensure_service(&svc, &nodes).await?;
//! if let Some(after) = outcome.requeue_after { /* requeue the Service */ }
//! # Ok(()) }
//! ```

pub mod annotations;
pub mod desired;
pub mod error;
pub mod fip;
pub mod naming;
pub mod nodes;
pub mod observed;
pub mod outcome;
pub mod plan;
pub mod reconcile;
pub mod security_groups;
#[cfg(test)]
mod testutil;

pub use error::LbError;
pub use observed::Observed;
pub use outcome::{EventNote, EventType, Outcome, reasons};
pub use reconcile::{LbSettings, LoadBalancers};
