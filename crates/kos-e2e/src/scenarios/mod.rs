//! Facade-level scenarios. Each is an async fn over a [`Ctx`]: it creates what it needs (named and
//! tagged with the run's prefix), checks the behaviour kos relies on, and deletes everything through
//! [`Ctx::guarded`], which also proves that nothing tagged is left.
//!
//! Cluster-level scenarios (`kos plan / up / down / gc` of the example clusters, scale up and down, a
//! teardown that leaves nothing tagged) are in [`cluster`]: same signature, same two targets (see
//! docs/testing.md, "Adding a scenario"). [`ccm`] drives kos-ccm's Service load-balancer core on
//! the target's Octavia, without Kubernetes.

mod ccm;
mod ccm_nodes;
mod cluster;
mod compute;
mod csi;
mod floating_ip;
mod identity;
mod load_balancer;
mod network;
mod quotas;
mod rotation;
mod volume;

pub use ccm::{ccm_load_balancer, ccm_load_balancer_changes};
pub use ccm_nodes::ccm_nodes;
pub use cluster::{cluster_byo_network, cluster_gc, cluster_ha, cluster_minimal};
pub(crate) use compute::PUBLIC_KEY;
pub use compute::server_on_port;
pub use csi::csi_controller;
pub use floating_ip::floating_ip;
pub use identity::identity;
pub use load_balancer::load_balancer;
pub use network::network;
pub use quotas::quotas;
pub use rotation::credential_rotation;
pub use volume::volume;

use anyhow::Result;
use kos_cloud::model::network::{NetworkCreate, Subnet, SubnetCreate};

use crate::{Cleanup, Ctx, Made};

/// A tagged network with one tagged subnet, both registered for cleanup.
pub(crate) async fn network_with_subnet(
    ctx: &Ctx,
    made: &mut Cleanup,
    what: &str,
    cidr: &str,
) -> Result<Subnet> {
    let net = ctx.session.network();
    let n = net
        .create_network(&NetworkCreate {
            name: ctx.run.name(what),
            tags: ctx.run.tags(),
            ..Default::default()
        })
        .await?;
    made.push(Made::Network(n.id.clone()));
    let sub = net
        .create_subnet(&SubnetCreate {
            tags: ctx.run.tags(),
            ..SubnetCreate::new(&n.id, ctx.run.name(&format!("{what}-subnet")), cidr)
        })
        .await?;
    made.push(Made::Subnet(sub.id.clone()));
    Ok(sub)
}
