//! What a run does to a running kos cluster, beyond making its infrastructure: the day-two
//! operations the CLI (and one day a controller) call. Each is a sequence of idempotent steps decided
//! from what the cloud and the cluster show, so a run killed anywhere is finished by running it again.
//!
//! - [`rotate`]: a new application credential for the cloud controller and CSI, put into the
//!   cluster's `cloud-config` Secret and rolled out before the old one is deleted.

pub mod rotate;
