//! What a kos run does to a running cluster, over kos-cloud and kube-rs, with no terminal and no
//! local files: the one client of a cluster's Kubernetes API ([`kube`]). kos-lifecycle decides;
//! this crate carries its decisions out through kos-lifecycle's traits. Front ends (the `kos` CLI,
//! later an operator) render what it reports and keep arguments, output and exit codes.

/// Drains and Node deletions: kos-lifecycle's drain over [`kube::Kube`].
pub mod drain;
/// Following a bootstrap: node consoles, then the cluster's API.
pub mod follow;
/// The one client of a cluster's Kubernetes API, on kube-rs.
pub mod kube;
/// What a run reports as it goes, for a front end to render.
pub mod report;
