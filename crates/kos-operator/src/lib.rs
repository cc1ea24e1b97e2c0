//! kos-operator: kos as a Kubernetes controller. A `clusters.kos.dev` resource holds the cluster
//! document `kos up -f` reads; the operator runs the same turn as `kos up` for each, continuously,
//! and reports in its status.

#![forbid(unsafe_code)]

pub mod apply;
pub mod autoscaler;
pub mod events;
pub mod identity;
pub mod manifests;
pub mod metrics;
pub mod nodes;
pub mod rbac;
pub mod reconcile;
pub mod resource;
pub mod run;
pub mod slots;
pub mod status;
pub mod store;
pub mod transfer;
