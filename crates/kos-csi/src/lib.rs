//! kos-csi: a CSI driver for Cinder volumes, a drop-in for cloud-provider-openstack's
//! cinder-csi-plugin: the same driver name, cloud.conf, StorageClass parameters, topology key and
//! volume metadata. Every OpenStack call goes through kos-cloud; the node side reaches the kernel
//! only through [`node::Kernel`], so tests stand in for it.
//!
//! CreateVolume answers as upstream's does, with the volume still `creating`; ControllerPublish
//! waits for it to be usable before asking Nova (upstream asks at once, Nova refuses, the attacher
//! retries). Waits on volumes differ from upstream's on purpose: upstream polls
//! `GET /volumes/{id}` once per waiting call, so 200 volumes attached at once are 200 pollers.
//! Here the calls of one controller share one poller ([`waits`]), which lists the cluster's
//! volumes once per tick and wakes each call whose volume settled; each call keeps its own
//! deadline and error. `kos bench csi` measures many claims at once (docs/benchmarks.md).

pub mod config;
pub mod controller;
pub mod error;
pub mod identity;
pub mod metadata;
pub mod metrics;
pub mod node;
pub mod run;
pub mod server;
pub mod waits;

/// The generated CSI v1 messages and services (proto/csi.proto, spec v1.12.0).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

pub use error::CsiError;

/// The driver's name, as upstream's: volumes, CSIDriver objects and PVs carry it.
pub const DRIVER_NAME: &str = "cinder.csi.openstack.org";
/// The topology segment that holds a volume's or a node's availability zone.
pub const TOPOLOGY_KEY: &str = "topology.cinder.csi.openstack.org/zone";
/// Volume metadata naming the cluster that made the volume (upstream's key).
pub const CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";
/// Volume context asking the node to grow the filesystem on stage (a volume made from a snapshot
/// or another volume may be larger than its source's filesystem).
pub const RESIZE_REQUIRED_KEY: &str = "cinder.csi.openstack.org/resizeRequired";
/// The CSI spec version the driver implements (the proto's tag).
pub const SPEC_VERSION: &str = "1.12.0";
/// The version reported by GetPluginInfo: upstream's driver version, then kos's.
pub const VENDOR_VERSION: &str = concat!("2.0.0@kos-", env!("CARGO_PKG_VERSION"));

/// Bytes in a GiB: Cinder sizes are whole GiB.
pub const GIB: i64 = 1024 * 1024 * 1024;
