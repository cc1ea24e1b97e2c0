//! Bring your own network on kos-sim: examples/byo-network.yaml-like specs on a network, subnet and router
//! the user made first. kos creates none of them, puts its ports there, reaches the API through the user's
//! router, converges to a no-op plan, and its teardown removes everything it made (ports included, and what
//! the CCM made) but never the user's network, subnet, router, router interface or other ports.

mod engine_support;
#[path = "engine_support/user.rs"]
mod user;

use std::collections::BTreeSet;

use engine_support::*;
use kos_cloud::Session;
use kos_cloud::model::load_balancer::{LoadBalancerCreate, Vip};
use kos_cloud::model::network::{PortFilter, RouterFilter};
use kos_cluster::bootstrap::Formation;
use kos_cluster::graph::{DesiredGraph, Kind, desired};
use kos_cluster::observe::observe;
use kos_cluster::plan::Op;
use kos_cluster::preflight::preflight;
use kos_cluster::resolved::ResolvedNetwork;
use kos_cluster::status::status;
use kos_cluster::teardown::{TeardownOptions, teardown_with};
use user::*;

/// examples/byo-network.yaml on the sim's image, named `name`, with `(from, to)` edits (each must apply).
fn spec_text(name: &str, edits: &[(&str, &str)]) -> Result<String, E> {
    let path = format!(
        "{}/../../examples/byo-network.yaml",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    );
    let base = std::fs::read_to_string(path)?
        .replace("name: internal", &format!("name: {name}"))
        .replace("network: private", "network: corp-net")
        .replace("subnet: private-subnet", "subnet: corp-net-subnet")
        .replace("router: router1", "router: corp-net-router");
    edits.iter().try_fold(base, |t, (from, to)| {
        if t.matches(from).count() == 1 {
            Ok(t.replacen(from, to, 1))
        } else {
            Err(format!("`{from}` must occur exactly once").into())
        }
    })
}

/// The spec through validation and the real preflight, into a desired graph.
async fn byo_graph(s: &Session, text: &str, user: &UserNet) -> Result<DesiredGraph, E> {
    let spec = kos_cluster::load("cluster.yaml", text)
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?
        .spec;
    let pre = preflight(s, &spec, "cluster.yaml", text)
        .await
        .map_err(|e| format!("{:?}", miette::Report::new(e)))?;
    assert!(
        matches!(&pre.resolved.network, ResolvedNetwork::Existing { network_id, subnet_id, router_id, .. }
            if *network_id == user.network && *subnet_id == user.subnet && *router_id == user.router),
        "{:?}",
        pre.resolved.network
    );
    Ok(desired(&spec, &pre.resolved, Formation::Fresh)?)
}

/// Ids of the networks, subnets and routers of the project, and the ports of the user's router.
async fn topology(s: &Session, user: &UserNet) -> Result<BTreeSet<String>, E> {
    let n = s.network();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    ids.extend(
        n.list_networks(&Default::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_subnets(&Default::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    ids.extend(
        n.list_routers(&RouterFilter::default())
            .await?
            .into_iter()
            .map(|x| x.id),
    );
    let on_router = PortFilter {
        device_id: user.router.clone(),
        ..PortFilter::default()
    };
    ids.extend(n.list_ports(&on_router).await?.into_iter().map(|x| x.id));
    Ok(ids)
}

/// Up, a no-op plan, the user's objects untouched, ports on the user's subnet; returns kos's port ids.
async fn up_on_users_network(
    s: &Session,
    g: &DesiredGraph,
    user: &UserNet,
) -> Result<Vec<String>, E> {
    for id in ["network", "subnet", "router"] {
        let node = g.node(id).ok_or(format!("no {id} node"))?;
        assert!(node.is_external(), "{id} is the user's");
    }
    assert!(
        g.node("router-if").is_none(),
        "the user's router has its interface"
    );
    let first = plan_for(s, g).await?;
    for a in &first.actions {
        if matches!(a.kind, Kind::Network | Kind::Subnet | Kind::Router) {
            assert_eq!(a.op, Op::NoOp, "{}", first.diff(true));
            assert!(a.reason.starts_with("bring your own"), "{}", a.reason);
        }
    }
    let before = topology(s, user).await?;
    let report = up(s, g).await?;
    assert_eq!(
        topology(s, user).await?,
        before,
        "kos made no network, subnet, router or router interface"
    );
    assert_eq!(pending(s, g).await?, 0);
    assert!(duplicates(s, &g.cluster).await?.is_empty());

    let o = observe(s, &g.cluster).await?;
    assert!(
        o.get("network").is_empty() && o.get("subnet").is_empty() && o.get("router").is_empty()
    );
    let ports: Vec<_> = o.all().filter(|r| r.kind == Kind::Port).collect();
    assert_eq!(
        ports.len(),
        g.nodes.values().filter(|n| n.kind == Kind::Port).count()
    );
    for p in &ports {
        assert_eq!(
            p.facts.network_id.as_ref(),
            Some(&user.network),
            "{}",
            p.name
        );
        assert_eq!(p.facts.subnet_id.as_ref(), Some(&user.subnet), "{}", p.name);
    }
    let st = status(s, &g.cluster, Some(g)).await?;
    assert_eq!(st.converged(), Some(true));
    assert_eq!(st.api_endpoint, report.api_address);
    Ok(ports.iter().map(|p| p.id.clone()).collect())
}

/// Teardown removes kos's objects (its ports and what the CCM made included), never the user's.
async fn down_keeps_the_users_network(
    s: &Session,
    cluster: &str,
    user: &UserNet,
    kos_ports: &[String],
) -> R {
    let users_port = user_port(s, &user.network, "corp-db").await?;
    let mut lb = LoadBalancerCreate::new(
        format!("kube_service_{cluster}_default_web"),
        Vip::Subnet(user.subnet.clone()),
    );
    lb.description = Some(format!(
        "Kubernetes external service default/web from cluster {cluster}"
    ));
    let ccm_lb = s.load_balancer().create_load_balancer(&lb).await?.id;
    let topo = topology(s, user).await?;

    let dry = TeardownOptions {
        dry_run: true,
        ..TeardownOptions::fast()
    };
    let listed = teardown_with(s, cluster, &dry).await?.resources;
    let listed_ids: BTreeSet<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    for r in &listed {
        assert!(
            !matches!(
                r.kind,
                Kind::Network | Kind::Subnet | Kind::Router | Kind::RouterInterface
            ),
            "teardown would delete {} {}",
            r.kind.as_str(),
            r.name
        );
    }
    assert!(kos_ports.iter().all(|p| listed_ids.contains(p.as_str())));
    assert!(listed_ids.contains(ccm_lb.as_str()) && !listed_ids.contains(users_port.as_str()));

    down(s, cluster).await?;
    let left = census(s).await?;
    assert!(
        topo.iter().all(|id| left.contains(id)),
        "the user's network, subnet, router and interface stay"
    );
    assert!(left.contains(&users_port), "the user's port stays");
    assert!(
        kos_ports.iter().all(|p| !left.contains(p)),
        "kos's ports go"
    );
    assert!(!left.contains(&ccm_lb));
    // The user's router still routes the subnet.
    let iface = s
        .network()
        .list_ports(&PortFilter {
            device_id: user.router.clone(),
            device_owner: Some("network:router_interface".into()),
            ..PortFilter::default()
        })
        .await?;
    assert_eq!(iface.len(), 1);
    assert_eq!(Some(&iface[0].id), user.interface.as_ref());
    Ok(())
}

#[tokio::test]
async fn byo_network_private_ovn_load_balancer() -> R {
    let c = start().await?;
    let s = &c.session;
    let user = user_network(s, "corp-net", "10.10.0.0/24", true).await?;
    let g = byo_graph(s, &spec_text("internal", &[])?, &user).await?;
    let ports = up_on_users_network(s, &g, &user).await?;
    let o = observe(s, "internal").await?;
    let vip = o.get("api-lb")[0].facts.address.clone().ok_or("no VIP")?;
    assert!(
        vip.starts_with("10.10.0."),
        "the VIP is on the user's subnet: {vip}"
    );
    assert!(
        o.get("api-fip").is_empty(),
        "a private endpoint has no floating IP"
    );
    down_keeps_the_users_network(s, "internal", &user, &ports).await
}

#[tokio::test]
async fn byo_network_public_floating_ip_through_the_users_router() -> R {
    let c = start().await?;
    let s = &c.session;
    let user = user_network(s, "corp-net", "10.10.0.0/24", true).await?;
    let text = spec_text(
        "edge",
        &[
            (
                "type: loadBalancer\n    provider: ovn\n    public: false\n    allowedCIDRs: [172.16.0.0/12]",
                "type: floatingIP",
            ),
            (
                "  controlPlane:\n    count: 3",
                "  controlPlane:\n    count: 1",
            ),
        ],
    )?;
    let g = byo_graph(s, &text, &user).await?;
    let fip_deps = &g.node("fip-assoc").ok_or("no fip-assoc")?.deps;
    assert!(!fip_deps.iter().any(|d| d == "router-if"), "{fip_deps:?}");
    let ports = up_on_users_network(s, &g, &user).await?;
    let o = observe(s, "edge").await?;
    let fip = &o.get("api-fip")[0];
    assert!(
        fip.facts
            .address
            .as_deref()
            .is_some_and(|a| a.starts_with("172.24.4."))
    );
    assert_eq!(
        fip.facts.port_id.as_ref(),
        Some(&o.get("port-cp-0")[0].id),
        "associated through the user's router"
    );
    down_keeps_the_users_network(s, "edge", &user, &ports).await
}
