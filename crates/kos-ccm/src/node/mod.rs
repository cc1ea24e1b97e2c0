//! The node controllers: what the upstream runs as `cloud-node` and `cloud-node-lifecycle`
//! (`k8s.io/cloud-provider` controllers over OCCM's InstancesV2), as one kube-rs `Controller`
//! over Nodes.
//!
//! For every Node:
//! - **Initialisation** of a node carrying `node.cloudprovider.kubernetes.io/uninitialized`: find
//!   its server (providerID, else name), write `status.addresses` first, then in one optimistic
//!   update the labels (`node.kubernetes.io/instance-type`, `topology.kubernetes.io/zone`,
//!   `topology.kubernetes.io/region`, their beta twins, `topology.openstack.org/host-id`), the
//!   providerID if empty, and the removal of the taint. A node whose server cannot be found stays
//!   tainted, gets a Warning Event and is retried with backoff.
//! - **Address refresh** every [`Settings::status_update_frequency`] (upstream
//!   `--node-status-update-frequency`, 5 min), writing only when the addresses changed.
//! - **Lifecycle**, checked every [`Settings::monitor_period`] for NotReady nodes (upstream
//!   `--node-monitor-period`, 5 s): a node whose providerID names a server that no longer exists
//!   is deleted; a server in `SHUTOFF` gets the node the `node.cloudprovider.kubernetes.io/shutdown`
//!   NoSchedule taint, removed when the server runs again or the node is Ready.
//!
//! Deliberate differences from the upstream, each for safety:
//! - a NotReady node *without* providerID whose name matches no server is reported, not deleted
//!   (upstream deletes it since PR #3083; a name mismatch then removes healthy nodes, OCCM #2062);
//! - the shutdown taint also goes when the server is ACTIVE again, not only once the node is Ready
//!   (the NotReady taint kubelet's absence brings still keeps pods away);
//! - addresses are written before the uninitialized taint is removed, never after.
//!
//! Entry point: [`run`], with a [`Context`] and [`Settings`]; the binary adds flags, metrics and
//! leader election around it.

mod addresses;
mod error;
mod instances;
pub mod labels;
mod provider_id;
mod reconcile;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::{Controller, controller, watcher};

pub use addresses::{Address, AddressType, ProvidedIpError};
pub use error::Error;
pub use instances::{InstanceMetadata, Instances, Lookup};
pub use provider_id::{PROVIDER_NAME, ProviderId, ProviderIdError, REGIONAL_PROVIDER_ID_ENV};
pub use reconcile::NodeController;

use crate::context::Context;

/// The node controllers' API calls (see [`crate::rbac`]): the Nodes' list-watch, initialisation and
/// taints (patch), addresses (patch of `nodes/status`), and the lifecycle's delete.
pub const API_CALLS: &[crate::rbac::ApiCall] = &[
    crate::rbac::ApiCall {
        by: "node: list-watch, initialise and taint, delete a node whose server is gone",
        verbs: &["list", "watch", "patch", "delete"],
        group: "",
        resource: "nodes",
        scope: crate::rbac::Scope::Cluster,
        names: &[],
    },
    crate::rbac::ApiCall {
        by: "node: status.addresses",
        verbs: &["patch"],
        group: "",
        resource: "nodes/status",
        scope: crate::rbac::Scope::Cluster,
        names: &[],
    },
];

/// Event reasons, as `kubectl describe node` shows them.
pub mod reason {
    /// The node was initialised (upstream's reason and wording).
    pub const SYNCED: &str = "Synced";
    /// The node's server is gone and the NotReady node is deleted (upstream).
    pub const DELETING_NODE: &str = "DeletingNode";
    pub const DELETING_NODE_FAILED: &str = "DeletingNodeFailed";
    /// No server for the node: it stays uninitialised and is retried.
    pub const INSTANCE_NOT_FOUND: &str = "InstanceNotFound";
    /// The node's providerID or name cannot lead to one server (bad format, other region,
    /// several servers of that name).
    pub const INSTANCE_LOOKUP_FAILED: &str = "InstanceLookupFailed";
    /// kubelet's `--node-ip` is not among the server's addresses.
    pub const PROVIDED_NODE_IP_INVALID: &str = "ProvidedNodeIPInvalid";
    /// The server is shut off: the node is tainted.
    pub const INSTANCE_SHUTDOWN: &str = "InstanceShutdown";
}

/// What the node controller does, how often and how hard.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The upstream `cloud-node` controller's part: initialisation and address refresh.
    pub cloud_node: bool,
    /// The upstream `cloud-node-lifecycle` controller's part: deletion and the shutdown taint.
    pub lifecycle: bool,
    /// Address refresh period (`--node-status-update-frequency`).
    pub status_update_frequency: Duration,
    /// Lifecycle check period for NotReady nodes (`--node-monitor-period`).
    pub monitor_period: Duration,
    /// `openstack://<region>/<id>` instead of `openstack:///<id>` for new providerIDs
    /// (the upstream's `OS_CCM_REGIONAL=true`).
    pub regional_provider_id: bool,
    /// First retry delay after a failure; doubled per consecutive failure up to `retry_max`.
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// Nodes reconciled at once (`--concurrent-node-syncs`).
    pub concurrency: u16,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            cloud_node: true,
            lifecycle: true,
            status_update_frequency: Duration::from_secs(5 * 60),
            monitor_period: Duration::from_secs(5),
            regional_provider_id: false,
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(5 * 60),
            concurrency: 4,
        }
    }
}

/// Runs the node controller until `shutdown` completes (reconciles in flight finish first).
pub async fn run(
    ctx: Arc<Context>,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let controller = Controller::new(nodes, watcher::Config::default());
    let state = Arc::new(NodeController::new(ctx, settings, controller.store()));
    controller
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, state)
        .for_each(|res| async move {
            match res {
                Ok((node, action)) => {
                    tracing::debug!(node = %node.name, ?action, "node reconciled")
                }
                // Reconcile failures are logged by the error policy; these are the controller's own.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!(error = %e, "node controller"),
            }
        })
        .await;
}
