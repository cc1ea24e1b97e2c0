//! The guest's own errors: what stops it from simulating at all (a cluster's API cannot start, an
//! event for a server it does not know). What a node does wrong is never an error here: it is a
//! console marker and a log entry, as on a real node.

use crate::seam::ServerId;

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error(transparent)]
    Kube(#[from] kos_kube_fake::FakeError),
    #[error("server {server} is not known to the guest (it never booted)")]
    UnknownServer { server: ServerId },
    #[error("server {server} already booted: a re-created server is a new instance id")]
    AlreadyBooted { server: ServerId },
}
