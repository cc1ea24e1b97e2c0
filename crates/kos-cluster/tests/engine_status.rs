//! `kos status` on kos-sim: the API endpoint, every resource, duplicates (and which one a re-run keeps),
//! and what is not converged on a half-made cluster.

mod engine_support;

use engine_support::*;
use kos_cloud::model::network::{FloatingIpCreate, PortCreate};
use kos_cluster::graph::Kind;
use kos_cluster::observe::observe;
use kos_cluster::plan::Op;
use kos_cluster::status::status;
use kos_sim::FaultRule;

#[tokio::test]
async fn status_shows_endpoint_resources_and_duplicates() -> R {
    let c = start().await?;
    let s = &c.session;
    let g = graph(s, &Shape::small("st", 1)).await?;
    let report = up(s, &g).await?;

    let bare = status(s, "st", None).await?;
    assert_eq!(bare.api_endpoint, report.api_address);
    assert!(
        bare.api_endpoint
            .as_deref()
            .is_some_and(|a| a.starts_with("172.24.4."))
    );
    assert_eq!(
        (bare.converged(), bare.not_converged.is_none()),
        (None, true)
    );
    let keys: Vec<_> = bare
        .resources
        .iter()
        .map(|r| (r.kind, r.logical_id.as_str()))
        .collect();
    assert!(keys.is_sorted(), "sorted by kind, then id");
    for id in g.nodes.keys() {
        assert!(keys.iter().any(|(_, l)| l == id), "{id} not shown");
    }
    assert!(bare.resources.iter().all(|r| r.tagged && !r.failed));
    let server = bare
        .resources
        .iter()
        .find(|r| r.logical_id == "workers-0")
        .ok_or("no workers-0")?;
    assert_eq!(
        (server.kind, server.state.as_str()),
        (Kind::Server, "ACTIVE")
    );
    let st = status(s, "st", Some(&g)).await?;
    assert_eq!(st.converged(), Some(true));
    assert!(st.duplicates.is_empty());

    // Two more ports with port-workers-0's tags, made behind kos's back.
    let o = observe(s, "st").await?;
    let original = &o.get("port-workers-0")[0];
    let network = original.facts.network_id.clone().ok_or("no network")?;
    let mut extra = Vec::new();
    for _ in 0..2 {
        let p = s
            .network()
            .create_port(&PortCreate {
                tags: original.facts.tags.clone(),
                ..PortCreate::new(&network, &original.name)
            })
            .await?;
        extra.push(p.id);
    }
    let st = status(s, "st", Some(&g)).await?;
    assert_eq!(st.duplicates, ["port-workers-0"]);
    assert_eq!(st.converged(), Some(false));
    let pending = st.not_converged.as_deref().unwrap_or_default();
    let mut deleted: Vec<&str> = pending
        .iter()
        .map(|a| {
            assert_eq!(
                (a.op, a.logical_id.as_str()),
                (Op::Delete, "port-workers-0")
            );
            a.existing.as_ref().map_or("", |r| r.id.as_str())
        })
        .collect();
    deleted.sort_unstable();
    extra.sort();
    assert_eq!(deleted, extra, "the port the server uses is kept");

    up(s, &g).await?;
    let st = status(s, "st", Some(&g)).await?;
    assert_eq!(st.converged(), Some(true));
    let port = observe(s, "st").await?.get("port-workers-0")[0].clone();
    assert_eq!(
        (port.id, port.facts.device_id.is_some()),
        (original.id.clone(), true)
    );
    down(s, "st").await
}

#[tokio::test]
async fn status_of_a_half_made_cluster_lists_what_is_missing() -> R {
    let c = start().await?;
    let s = &c.session;
    let g = graph(s, &Shape::small("half", 2)).await?;
    let rule = c.sim.app().fault_engine().add(FaultRule {
        id: None,
        method: Some("POST".into()),
        path: "/servers$".into(),
        body: None,
        status: 500,
        probability: 1.0,
        count: None,
        skip: 0,
        retry_after: None,
        after_side_effect: false,
        build_error: false,
        message: None,
    })?;
    assert!(up_once(s, &g).await?.is_err(), "no server can be made");

    let st = status(s, "half", Some(&g)).await?;
    assert!(
        st.api_endpoint
            .as_deref()
            .is_some_and(|a| a.starts_with("172.24.4.")),
        "the floating IP is allocated first: {:?}",
        st.api_endpoint
    );
    assert!(!st.resources.iter().any(|r| r.kind == Kind::Server));
    assert_eq!(st.converged(), Some(false));
    let mut missing: Vec<&str> = st
        .not_converged
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|a| a.op == Op::Create)
        .map(|a| a.logical_id.as_str())
        .collect();
    missing.sort_unstable();
    assert_eq!(missing, ["cp-0", "workers-0", "workers-1"]);

    c.sim.app().fault_engine().remove(rule);
    up(s, &g).await?;
    assert_eq!(status(s, "half", Some(&g)).await?.converged(), Some(true));
    down(s, "half").await
}

/// A public load-balancer endpoint is its floating IP: without it, there is no endpoint (the VIP is
/// private), and status says what to create.
#[tokio::test]
async fn a_public_endpoint_without_its_floating_ip_is_unknown() -> R {
    let c = start().await?;
    let s = &c.session;
    let mut shape = Shape::small("pub", 1);
    shape.load_balancer = true;
    let g = graph(s, &shape).await?;
    let report = up(s, &g).await?;
    assert_eq!(
        status(s, "pub", Some(&g)).await?.api_endpoint,
        report.api_address
    );

    let fip = observe(s, "pub").await?.get("api-fip")[0].id.clone();
    s.network().delete_floating_ip(&fip).await?;
    let st = status(s, "pub", Some(&g)).await?;
    assert_eq!(st.api_endpoint, None);
    let vip = observe(s, "pub").await?.get("api-lb")[0]
        .facts
        .address
        .clone();
    assert_eq!(
        status(s, "pub", None).await?.api_endpoint,
        vip,
        "without the spec: the VIP"
    );
    let creates: Vec<&str> = st
        .not_converged
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|a| a.op == Op::Create)
        .map(|a| a.logical_id.as_str())
        .collect();
    assert_eq!(creates, ["api-fip", "fip-assoc"]);

    // A user's floating IP is not the cluster's.
    s.network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: s.network().external_network(None).await?.id,
            ..FloatingIpCreate::default()
        })
        .await?;
    up(s, &g).await?;
    let st = status(s, "pub", Some(&g)).await?;
    assert_eq!(st.converged(), Some(true));
    assert_ne!(st.api_endpoint, report.api_address, "a new address");
    down(s, "pub").await
}
