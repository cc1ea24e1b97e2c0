//! kos's one client of a cluster's Kubernetes API, on kube-rs: built in one place
//! ([`Kube::connect`]) from the cluster's endpoint and an admin client certificate signed offline by
//! the cluster CA, trusting that CA only. Everything a run does to a cluster (the API phase of a
//! bootstrap, token and kubeadm-certs pushes, drains, rotations, the Secrets' rewrite, port-forwards
//! to etcd) goes through it.
//!
//! Its errors ([`KubeError`]) are the kinds callers branch on: not found (404), conflict (409),
//! another status, no answer, an unreadable answer. [`From<KubeError>`] gives kos-lifecycle's
//! [`ApiError`](kos_lifecycle::api::ApiError), the error of its seams.

mod client;
mod error;
mod nodes;
mod proxy;

pub use client::{ConnectError, Kube};
pub use error::{KubeError, gone_is_fine};
pub use nodes::NodeStatus;
#[cfg(test)]
pub(crate) use nodes::UNINITIALIZED;
pub use proxy::direct_where_kubectl_is;

#[cfg(test)]
pub(crate) mod tests;
