//! What the driver is told: cloud.conf (read by kos-ccm's reader, the upstream's rules, with
//! `[BlockStorage]`) and the upstream's flags.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use kos_ccm::config::BlockStorage;

/// The driver's settings, from flags and `[BlockStorage]`.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// `--cluster`: written to every volume and snapshot as `cinder.csi.openstack.org/cluster`.
    pub cluster: String,
    /// `--with-topology` (default true): report and honour availability zones.
    pub with_topology: bool,
    /// `--additional-topology key=value`: more segments of the node's topology.
    pub additional_topologies: BTreeMap<String, String>,
    pub block_storage: BlockStorage,
    pub waits: Waits,
    /// How waits on volumes look at Cinder (one shared poller, or upstream's one per volume).
    pub wait_mode: crate::waits::WaitMode,
}

impl DriverConfig {
    pub fn new(cluster: impl Into<String>, block_storage: BlockStorage) -> Self {
        DriverConfig {
            cluster: cluster.into(),
            with_topology: true,
            additional_topologies: BTreeMap::new(),
            block_storage,
            waits: Waits::default(),
            wait_mode: crate::waits::WaitMode::default(),
        }
    }

    /// `max_volumes_per_node` for NodeGetInfo: the configured limit, 0 (no limit) when unset, as
    /// upstream reports it.
    pub fn attach_limit(&self) -> i64 {
        self.block_storage
            .node_volume_attach_limit
            .map_or(0, i64::from)
    }
}

/// How long each wait may last, in the cloud's time (kos-cloud's pace turns it into this
/// machine's). Upstream's are backoffs of about a minute; these are longer, because the
/// sidecars call again anyway and a call that gives up early only repeats the work.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// A new volume becoming `available` (ControllerPublishVolume waits for it; CreateVolume
    /// answers at once, as upstream).
    pub create: Duration,
    /// Nova's attach reaching Cinder's `in-use`.
    pub attach: Duration,
    pub detach: Duration,
    /// A snapshot becoming `available` (past it, CreateSnapshot answers `ready_to_use: false`).
    pub snapshot: Duration,
    /// An extend settling back to `available` or `in-use`.
    pub extend: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            create: Duration::from_secs(300),
            attach: Duration::from_secs(300),
            detach: Duration::from_secs(300),
            snapshot: Duration::from_secs(120),
            extend: Duration::from_secs(300),
        }
    }
}

/// Where the node side finds the kubelet's directories: every path a node request names must lie
/// under this one.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub kubelet_dir: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            kubelet_dir: PathBuf::from("/var/lib/kubelet"),
        }
    }
}
