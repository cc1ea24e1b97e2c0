//! kubeadm on a simulated node: its configuration types and validation ([`config`], [`schema`]),
//! `copycerts` ([`copycerts`]) and what `init` and `join` do to the node and its cluster (`ops`).

pub mod config;
pub mod copycerts;
pub mod images;
mod ops;
pub mod rbac;
pub mod schema;
