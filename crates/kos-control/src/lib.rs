//! What a kos run does to a cluster, over kos-cloud and kube-rs, with no terminal and no local
//! files: the run itself ([`up`]: kos-lifecycle's `run::Cluster`, each turn prepared, converged
//! and stepped), the one client of a cluster's Kubernetes API ([`kube`], built in [`connect`]),
//! drains ([`drain`]), bootstrap following ([`follow`]), the join token ([`tokens`]), stale etcd
//! members ([`members`]), the nodes' user_data ([`kubeadm`]), kubeadm-config moves, addon images
//! and unhealthy nodes ([`roll`]), encryption keys ([`encryption`]), the CCM credential's rotation
//! ([`rotate`]). kos-lifecycle decides; this crate carries its decisions out through kos-lifecycle's traits. Secrets come from
//! a [`store::SecretStore`], progress goes out as [`report::Event`]s: front ends (the `kos` CLI,
//! later an operator) render them and keep arguments, output and exit codes.

/// How a run reaches a cluster's API: the cloud session, the way to an address, the client
/// builders.
pub mod backup;
pub mod connect;
/// Drains and Node deletions: kos-lifecycle's drain over [`kube::Kube`].
pub mod drain;
/// Encryption at rest carried out: each turn's keys, the Secrets' rewrite.
pub mod encryption;
/// Following a bootstrap: node consoles, then the cluster's API.
pub mod follow;
/// Whether the cluster exists: the evidence kos-lifecycle decides from.
pub mod formation;
/// The one client of a cluster's Kubernetes API, on kube-rs.
pub mod kube;
/// kubeadm's user_data for a run's turns, rendered with kos-bootstrap.
pub mod kubeadm;
/// Stale etcd members removed before control planes join, through a port-forward.
pub mod members;
/// What a run reports as it goes, for a front end to render.
pub mod report;
/// A rolling replacement's or scale-down's step: drain, kubeadm-config, etcd member, servers, Nodes.
pub mod retire;
/// Unhealthy nodes, kubeadm-config moves and addon images through the cluster's API.
pub mod roll;
/// The CCM credential's rotation carried out: Keystone, the cluster's API, the store.
pub mod rotate;
/// What a run keeps of a cluster besides the cloud: the secret-store seam and its records.
pub mod store;
/// The join token and kubeadm-certs put into a running cluster for new nodes, and taken out.
pub mod tokens;
/// A run (`kos up`'s): its turns prepared, converged and stepped, as kos-lifecycle's
/// `run::Cluster`.
pub mod up;
