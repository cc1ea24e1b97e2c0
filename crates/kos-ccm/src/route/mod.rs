//! The route controller, when cloud.conf names `[Route] router-id`: every node's pod CIDR is an
//! extra route on that router towards the node's InternalIP, and is allowed on the node's port
//! (port security drops the pods' packets otherwise). As upstream (research/occm.md §1.5), only
//! routes inside `--cluster-cidr` are managed; every other route on the router is left alone.
//!
//! Better than upstream: routes are added and removed with Neutron's atomic `add_extraroutes` /
//! `remove_extraroutes` when the cloud has them (no lost update against another writer of the
//! router), one reconcile costs one router GET and one port list however many nodes there are,
//! and a pass with nothing to change writes nothing.

mod plan;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kos_cloud::model::network::{PortFilter, PortUpdate};
use kos_cloud::{CloudError, Session};
use kube::Api;
use kube::api::{ListParams, Patch};

pub use plan::{NodeRoute, RoutePlan, host_route, plan};

use crate::context::{Context, patch_params};

/// The route controller's API calls (see [`crate::rbac`]): the Nodes' list, and their
/// `NetworkUnavailable` condition (patch of `nodes/status`).
pub const API_CALLS: &[crate::rbac::ApiCall] = &[
    crate::rbac::ApiCall {
        by: "route: the nodes' pod CIDRs",
        verbs: &["list"],
        group: "",
        resource: "nodes",
        scope: crate::rbac::Scope::Cluster,
        names: &[],
    },
    crate::rbac::ApiCall {
        by: "route: NetworkUnavailable",
        verbs: &["patch"],
        group: "",
        resource: "nodes/status",
        scope: crate::rbac::Scope::Cluster,
        names: &[],
    },
];

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("router {router}: {source}")]
    Cloud {
        router: String,
        #[source]
        source: CloudError,
    },
    #[error("router {0} does not exist: fix [Route] router-id in cloud.conf")]
    NoRouter(String),
    #[error(
        "Neutron has neither the extraroute nor the extraroute-atomic extension: routes cannot be managed"
    )]
    NoExtraRoutes,
    #[error("listing nodes: {0}")]
    Kube(#[from] kube::Error),
}

/// The router and the rules the controller manages it by.
#[derive(Debug, Clone)]
pub struct Routes {
    pub router_id: String,
    /// Routes are managed inside this range only.
    pub cluster_cidr: IpNet,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub plan: RoutePlan,
    /// Nodes whose routes exist now.
    pub routed: Vec<String>,
}

impl Routes {
    /// One pass: plans from the router, the ports and `nodes`, then applies the plan.
    pub async fn sync(&self, session: &Session, nodes: &[Node]) -> Result<Report, RouteError> {
        let cloud = |source| RouteError::Cloud {
            router: self.router_id.clone(),
            source,
        };
        let net = session.network();
        let router = net
            .get_router(&self.router_id)
            .await
            .map_err(cloud)?
            .ok_or_else(|| RouteError::NoRouter(self.router_id.clone()))?;
        let node_routes: Vec<NodeRoute> = nodes.iter().filter_map(NodeRoute::of).collect();
        // One list for all ports: the nodes' ports are the ones holding their InternalIPs.
        let ports = net
            .list_ports(&PortFilter::default())
            .await
            .map_err(cloud)?;
        let p = plan(&self.cluster_cidr, &router.routes, &node_routes, &ports);
        if !p.is_empty() {
            self.apply(session, &router.routes, &p)
                .await
                .map_err(cloud)?;
        }
        Ok(Report {
            routed: node_routes.iter().map(|n| n.node.clone()).collect(),
            plan: p,
        })
    }

    async fn apply(
        &self,
        session: &Session,
        current: &[kos_cloud::model::network::HostRoute],
        p: &RoutePlan,
    ) -> Result<(), CloudError> {
        let net = session.network();
        // Ports first: a route to a node whose port drops the traffic helps nobody.
        for (port, pairs) in &p.ports {
            tracing::info!(port, pairs = pairs.len(), "updating allowed address pairs");
            net.update_port(
                port,
                &PortUpdate {
                    allowed_address_pairs: Some(pairs.clone()),
                    ..PortUpdate::default()
                },
            )
            .await?;
        }
        let atomic = net
            .extension_aliases()
            .await?
            .iter()
            .any(|a| a == "extraroute-atomic");
        if atomic {
            if !p.remove.is_empty() {
                net.remove_router_routes(&self.router_id, &p.remove).await?;
            }
            if !p.add.is_empty() {
                net.add_router_routes(&self.router_id, &p.add).await?;
            }
        } else {
            let mut routes: Vec<_> = current
                .iter()
                .filter(|r| !p.remove.contains(r))
                .cloned()
                .collect();
            routes.extend(p.add.iter().cloned());
            net.set_router_routes(&self.router_id, &routes).await?;
        }
        for r in &p.add {
            tracing::info!(
                destination = r.destination,
                nexthop = r.nexthop,
                "route added"
            );
        }
        for r in &p.remove {
            tracing::info!(
                destination = r.destination,
                nexthop = r.nexthop,
                "route removed"
            );
        }
        Ok(())
    }
}

/// Checks once that the router exists and Neutron can hold extra routes, so that a wrong
/// `router-id` fails at start-up, with its fix, instead of at every pass.
pub async fn check(session: &Session, router_id: &str) -> Result<(), RouteError> {
    let cloud = |source| RouteError::Cloud {
        router: router_id.to_owned(),
        source,
    };
    let net = session.network();
    let aliases = net.extension_aliases().await.map_err(cloud)?;
    if !aliases
        .iter()
        .any(|a| a == "extraroute" || a == "extraroute-atomic")
    {
        return Err(RouteError::NoExtraRoutes);
    }
    net.get_router(router_id)
        .await
        .map_err(cloud)?
        .ok_or_else(|| RouteError::NoRouter(router_id.to_owned()))?;
    Ok(())
}

/// Runs passes every `period` until `shutdown` completes. After each pass, routed nodes get the
/// `NetworkUnavailable=False` condition, as the generic route controller sets it.
pub async fn run(
    ctx: Arc<Context>,
    routes: Routes,
    period: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let passes = async {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let list = match nodes.list(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(e) => {
                    tracing::warn!(error = %e, "route controller: cannot list nodes");
                    continue;
                }
            };
            match routes.sync(&ctx.session, &list).await {
                Ok(report) => mark_routed(&nodes, &list, &report.routed).await,
                Err(e) => tracing::warn!(error = %e, "route controller pass failed"),
            }
        }
    };
    tokio::select! {
        () = passes => {}
        () = shutdown => {}
    }
}

const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// Sets `NetworkUnavailable=False` (reason `RouteCreated`) on routed nodes that lack it.
async fn mark_routed(api: &Api<Node>, nodes: &[Node], routed: &[String]) {
    for n in nodes {
        let Some(name) = n.metadata.name.as_deref() else {
            continue;
        };
        if !routed.iter().any(|r| r == name) {
            continue;
        }
        let already = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == NETWORK_UNAVAILABLE
                    && c.status == "False"
                    && c.reason.as_deref() == Some("RouteCreated")
            });
        if already {
            continue;
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": NETWORK_UNAVAILABLE,
            "status": "False",
            "reason": "RouteCreated",
            "message": "kos-ccm created a route",
            "lastTransitionTime": now.to_string(),
            "lastHeartbeatTime": now.to_string(),
        }]}});
        if let Err(e) = api
            .patch_status(name, &patch_params(), &Patch::Strategic(&patch))
            .await
        {
            tracing::warn!(node = name, error = %e, "cannot set NetworkUnavailable=False");
        }
    }
}
