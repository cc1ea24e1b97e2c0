//! kubeadm on a simulated node: its configuration types and validation ([`config`], [`schema`]),
//! `copycerts` ([`copycerts`]) and what `init` and `join` do to the node and its cluster (`ops`).

pub mod config;
pub mod copycerts;
pub mod images;
mod ops;

// What a kubelet does through the node's containerd, as kubeadm's pulls do.
pub(crate) use ops::{pull, sandbox_image};
pub mod rbac;
pub mod schema;
