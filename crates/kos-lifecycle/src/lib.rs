//! What a kos run does to a running cluster, as opposed to the cloud objects under it (kos-cluster).
//!
//! - [`formation`]: whether a cluster exists for the spec's control planes, which decides whether a new
//!   control plane runs `kubeadm init` or joins; decided from the cloud and the cluster, never from a name.
//! - [`quorum`]: which etcd members may go, and in what order, so that etcd keeps its quorum at every step.

pub mod formation;
pub mod quorum;
