//! The API load balancer's children (listener, pool, health monitor, members): their requests, one at a
//! time or all at once.
//!
//! A load balancer that does not exist yet is made with Octavia's fully populated create: one call with
//! its listener, pool, monitor and members (whose addresses are the control planes' ports, known before
//! any server boots), then one wait for ACTIVE. One at a time, every child is another call and another
//! wait while the load balancer is PENDING_UPDATE (measured on minicloud: 2.4 s more for the four, after
//! an LB that took 10.7 s). The children keep their own logical ids: a populated run finds them by their
//! tags instead of creating them, and later runs diff and update them one by one as before.

use std::collections::HashMap;

use kos_cloud::CloudError;
use kos_cloud::model::load_balancer::{
    HealthMonitorCreate, LbAlgorithm, ListenerCreate, MemberSpec, MonitorType, PoolCreate,
    PoolParent, Protocol,
};

use super::{Ctx, Output};
use crate::graph::{Desired, DesiredGraph, Node, Source};
use crate::plan::{Op, Plan};

type R<T> = Result<T, CloudError>;

/// A load balancer created with its children in one call, and those children.
#[derive(Debug, Clone)]
pub(crate) struct Populated {
    pub listener: Node,
    pub pool: Node,
    pub monitor: Node,
    pub members: Node,
}

/// The load balancers (by logical id) that this plan creates together with all their children.
pub(crate) fn populated(desired: &DesiredGraph, plan: &Plan) -> HashMap<String, Populated> {
    let creates = |id: &str| {
        plan.for_node(id)
            .is_some_and(|a| a.op == Op::Create && a.existing.is_none())
    };
    let child = |lb: &str, pick: fn(&Desired) -> Option<&str>| {
        let mut found = desired.nodes.values().filter(|n| pick(&n.spec) == Some(lb));
        match (found.next(), found.next()) {
            (Some(n), None) if creates(&n.id) => Some(n.clone()),
            _ => None,
        }
    };
    desired
        .nodes
        .values()
        .filter(|n| matches!(n.spec, Desired::LoadBalancer { .. }) && creates(&n.id))
        .filter_map(|n| {
            let p = Populated {
                listener: child(&n.id, |d| match d {
                    Desired::Listener { lb, .. } => Some(lb),
                    _ => None,
                })?,
                pool: child(&n.id, |d| match d {
                    Desired::Pool { lb, .. } => Some(lb),
                    _ => None,
                })?,
                monitor: child(&n.id, |d| match d {
                    Desired::HealthMonitor { lb, .. } => Some(lb),
                    _ => None,
                })?,
                members: child(&n.id, |d| match d {
                    Desired::Members { lb, .. } => Some(lb),
                    _ => None,
                })?,
            };
            Some((n.id.clone(), p))
        })
        .collect()
}

fn dep(ctx: &Ctx, id: &str) -> R<Output> {
    ctx.output(id).ok_or_else(|| CloudError::Invalid {
        what: format!("dependency {id}"),
        detail: "has not been created".into(),
    })
}

fn not_a(node: &Node, what: &str) -> CloudError {
    CloudError::Invalid {
        what: format!("node {}", node.id),
        detail: format!("is not a {what}"),
    }
}

/// A listener's allowed CIDRs, router gateways resolved from the router's output.
pub(super) fn allowed(ctx: &Ctx, sources: &[Source]) -> R<Vec<String>> {
    sources
        .iter()
        .map(|s| {
            s.resolve(|r| ctx.output(r).and_then(|o| o.address))
                .ok_or_else(|| CloudError::Invalid {
                    what: "the API listener's allowed CIDRs".into(),
                    detail: "the router's external gateway address is not known".into(),
                })
        })
        .collect()
}

/// The listener; `lb_id` empty inside a populated create.
pub(super) fn listener(ctx: &Ctx, node: &Node, lb_id: &str) -> R<ListenerCreate> {
    let Desired::Listener {
        port,
        allowed_cidrs,
        ..
    } = &node.spec
    else {
        return Err(not_a(node, "listener"));
    };
    let mut req = ListenerCreate::new(lb_id, &node.name, Protocol::Tcp, *port);
    req.allowed_cidrs = allowed(ctx, allowed_cidrs)?;
    req.tags.clone_from(&node.tags);
    Ok(req)
}

/// The pool, under `parent`.
pub(super) fn pool(node: &Node, parent: PoolParent) -> R<PoolCreate> {
    let Desired::Pool { ovn, .. } = &node.spec else {
        return Err(not_a(node, "pool"));
    };
    // OVN supports only SOURCE_IP_PORT.
    let algorithm = if *ovn {
        LbAlgorithm::SourceIpPort
    } else {
        LbAlgorithm::RoundRobin
    };
    let mut req = PoolCreate::new(parent, &node.name, Protocol::Tcp, algorithm);
    req.tags.clone_from(&node.tags);
    Ok(req)
}

/// The health monitor; `pool_id` empty inside a populated create.
pub(super) fn monitor(node: &Node, pool_id: String) -> HealthMonitorCreate {
    HealthMonitorCreate {
        name: node.name.clone(),
        tags: node.tags.clone(),
        ..HealthMonitorCreate::new(pool_id, MonitorType::Tcp, 10, 5, 3)
    }
}

/// The members: the control planes' port addresses on the node subnet.
pub(super) fn members(ctx: &Ctx, node: &Node) -> R<Vec<MemberSpec>> {
    let Desired::Members {
        subnet,
        ports,
        port,
        ..
    } = &node.spec
    else {
        return Err(not_a(node, "member set"));
    };
    let subnet_id = dep(ctx, subnet)?.id;
    ports
        .iter()
        .map(|p| {
            let o = dep(ctx, p)?;
            let address = o.address.ok_or_else(|| CloudError::Invalid {
                what: format!("port {p}"),
                detail: "has no fixed IP".into(),
            })?;
            Ok(MemberSpec {
                name: p.clone(),
                subnet_id: Some(subnet_id.clone()),
                ..MemberSpec::new(address, *port)
            })
        })
        .collect()
}

/// The one listener of a populated create, with its pool, monitor and members inline.
pub(super) fn populated_listener(ctx: &Ctx, p: &Populated) -> R<ListenerCreate> {
    let mut pool = pool(&p.pool, PoolParent::Inline)?;
    pool.healthmonitor = Some(monitor(&p.monitor, String::new()));
    pool.members = members(ctx, &p.members)?;
    let mut listener = listener(ctx, &p.listener, "")?;
    listener.default_pool = Some(pool);
    Ok(listener)
}

/// Whether `node` (a listener, pool, monitor or member set) was made by its load balancer's populated
/// create in this run.
pub(super) fn made_with_its_lb(ctx: &Ctx, node: &Node) -> bool {
    let lb = match &node.spec {
        Desired::Listener { lb, .. }
        | Desired::Pool { lb, .. }
        | Desired::HealthMonitor { lb, .. }
        | Desired::Members { lb, .. } => lb,
        _ => return false,
    };
    ctx.populated.get(lb).is_some_and(|p| {
        [&p.listener, &p.pool, &p.monitor, &p.members]
            .iter()
            .any(|c| c.id == node.id)
    })
}
