//! Ports are made in bulk: the ports that become ready together go in one `POST /ports`, their tags in
//! it where Neutron keeps them (`tag-ports-during-bulk-creation`), else one tag PUT each right after,
//! as minicloud's Neutron needs. The load balancer's own ports (its VIP and members) form a batch of
//! their own. A lost bulk answer is looked up before any retry: never a duplicate.

mod engine_support;

use engine_support::*;
use kos_cluster::graph::Kind;
use kos_cluster::observe::observe;
use kos_sim::{FaultRule, SimConfig};

const BULK: &str = "POST /network/v2.0/ports";
const TAG_PUT: &str = "PUT /network/v2.0/ports/{id}/tags";

fn shape(name: &'static str) -> Shape {
    Shape {
        name,
        control_planes: 3,
        load_balancer: true,
        boot_volume: false,
        pools: vec![("workers", 4, "soft-anti-affinity")],
    }
}

/// Calls of the simulator's log with this operation and a 2xx answer, and the bodies' sizes are not
/// needed: the count is what a test asserts.
fn calls(c: &Cloud, operation: &str) -> usize {
    c.sim
        .app()
        .observations()
        .log
        .iter()
        .filter(|e| e.operation == operation && (200..300).contains(&e.status))
        .count()
}

/// The port tag PUTs that are not the router interface's (which Neutron makes, so kos tags it).
fn port_tag_puts(c: &Cloud, router_if: &str) -> usize {
    c.sim
        .app()
        .observations()
        .log
        .iter()
        .filter(|e| e.operation == TAG_PUT && !e.path.contains(router_if))
        .count()
}

async fn router_interface(c: &Cloud, cluster: &str) -> Result<String, E> {
    let o = observe(&c.session, cluster).await?;
    Ok(o.get("router-if")
        .first()
        .map(|r| r.id.clone())
        .ok_or("no router interface")?)
}

/// Every port of the cluster exists once, carries both of kos's tags, and nothing is pending.
async fn all_ports_made_once_and_tagged(c: &Cloud, cluster: &'static str, expect: usize) -> R {
    let g = graph(&c.session, &shape(cluster)).await?;
    assert_eq!(pending(&c.session, &g).await?, 0);
    assert!(duplicates(&c.session, cluster).await?.is_empty());
    let o = observe(&c.session, cluster).await?;
    let ports: Vec<_> = o.all().filter(|r| r.kind == Kind::Port).collect();
    assert_eq!(ports.len(), expect, "{ports:?}");
    for p in ports {
        assert!(p.tagged, "{} is tagged", p.logical_id);
        assert!(
            p.facts.tags.contains(&format!("kos-id={}", p.logical_id)),
            "{}: {:?}",
            p.logical_id,
            p.facts.tags
        );
    }
    Ok(())
}

#[tokio::test]
async fn with_the_extension_ports_are_made_tagged_in_one_request_per_batch() -> R {
    let c = start_with(SimConfig {
        neutron_port_tags_on_create: true,
        ..SimConfig::fast()
    })
    .await?;
    let g = graph(&c.session, &shape("bulk")).await?;
    up(&c.session, &g).await?;
    // Two batches: the load balancer's VIP and the control planes' ports, then the workers'.
    assert_eq!(calls(&c, BULK), 2, "one bulk create per batch");
    let router_if = router_interface(&c, "bulk").await?;
    assert_eq!(port_tag_puts(&c, &router_if), 0, "no tag PUT for a port");
    // 3 control planes, 4 workers, the VIP port.
    all_ports_made_once_and_tagged(&c, "bulk", 8).await?;
    down(&c.session, "bulk").await
}

#[tokio::test]
async fn without_the_extension_each_port_is_tagged_after_its_bulk_create() -> R {
    let c = start().await?;
    let g = graph(&c.session, &shape("fallback")).await?;
    up(&c.session, &g).await?;
    assert_eq!(calls(&c, BULK), 2, "one bulk create per batch");
    let router_if = router_interface(&c, "fallback").await?;
    assert_eq!(port_tag_puts(&c, &router_if), 8, "one tag PUT per port");
    all_ports_made_once_and_tagged(&c, "fallback", 8).await?;
    down(&c.session, "fallback").await
}

/// The answer to the first bulk create is lost after Neutron made the ports (a 500 after the side
/// effect): they are found by name on the network and adopted, not made again.
#[tokio::test]
async fn a_lost_bulk_answer_is_adopted_without_duplicates() -> R {
    for tags_on_create in [false, true] {
        let c = start_with(SimConfig {
            neutron_port_tags_on_create: tags_on_create,
            ..SimConfig::fast()
        })
        .await?;
        c.sim.app().fault_engine().add(FaultRule {
            id: None,
            method: Some("POST".into()),
            path: "/v2.0/ports$".into(),
            body: None,
            status: 500,
            probability: 1.0,
            count: Some(1),
            skip: 0,
            retry_after: None,
            after_side_effect: true,
            build_error: false,
            message: None,
        })?;
        let g = graph(&c.session, &shape("lost")).await?;
        up(&c.session, &g).await?;
        let log = c.sim.app().observations().log.clone();
        let posts: Vec<_> = log.iter().filter(|e| e.operation == BULK).collect();
        assert_eq!(
            posts.iter().filter(|e| e.fault_rule.is_some()).count(),
            1,
            "the fault fired"
        );
        assert_eq!(
            posts.len(),
            2,
            "tags on create {tags_on_create}: the lost batch is adopted, not posted again"
        );
        assert!(
            log.iter().any(|e| e.operation == "GET /network/v2.0/ports"),
            "the outcome was looked up"
        );
        all_ports_made_once_and_tagged(&c, "lost", 8).await?;
        down(&c.session, "lost").await?;
    }
    Ok(())
}
