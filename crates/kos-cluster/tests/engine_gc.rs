//! `kos gc` and teardown's reach on kos-sim: orphans are found (tagged leftovers of a cluster whose servers
//! and network are gone, run-time objects of a cluster of which nothing kos-made is left) and removed,
//! while a live cluster, a cluster being made and the user's own objects are never touched; teardown of one
//! cluster never reaches a cluster whose name extends its own; it reports progress, and removes an
//! untagged router interface.

mod engine_support;
#[path = "engine_support/user.rs"]
mod user;

use std::collections::{BTreeMap, BTreeSet};

use engine_support::*;
use kos_cloud::Session;
use kos_cloud::model::block_storage::VolumeCreate;
use kos_cloud::model::load_balancer::{LoadBalancerCreate, Vip};
use kos_cloud::model::network::{
    FloatingIpCreate, NetworkCreate, PortCreate, PortFilter, SecurityGroupCreate, TaggedKind,
};
use kos_cluster::events::{Event, Phase};
use kos_cluster::graph::Kind;
use kos_cluster::observe::observe;
use kos_cluster::plan::Op;
use kos_cluster::teardown::{
    Orphan, TeardownOptions, delete_orphans, orphans, teardown_with, teardown_with_events,
};
use user::*;

const CSI: &str = "cinder.csi.openstack.org/cluster";

/// What the CCM and the CSI driver of `cluster` make: an LB on `subnet`, a floating IP (associated with
/// `port` when given) and a volume. Returns their ids.
async fn run_time(
    s: &Session,
    cluster: &str,
    subnet: &str,
    port: Option<&str>,
) -> Result<Vec<String>, E> {
    let mut lb = LoadBalancerCreate::new(
        format!("kube_service_{cluster}_default_web"),
        Vip::Subnet(subnet.into()),
    );
    lb.description = Some(format!(
        "Kubernetes external service default/web from cluster {cluster}"
    ));
    let lb = s.load_balancer().create_load_balancer(&lb).await?;
    let fip = s
        .network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: s.network().external_network(None).await?.id,
            description: Some(format!(
                "Floating IP for Kubernetes external service default/web from cluster {cluster}"
            )),
            port_id: port.map(str::to_owned),
            ..FloatingIpCreate::default()
        })
        .await?;
    let vol = s
        .block_storage()
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some(format!("pvc-{cluster}")),
            metadata: BTreeMap::from([(CSI.into(), cluster.into())]),
            ..VolumeCreate::default()
        })
        .await?;
    Ok(vec![lb.id, fip.id, vol.id])
}

fn ids_of<'a>(orphans: &'a [Orphan], cluster: &str) -> BTreeSet<&'a str> {
    orphans
        .iter()
        .filter(|o| o.cluster == cluster)
        .map(|o| o.id.as_str())
        .collect()
}

#[tokio::test]
async fn gc_finds_and_removes_exactly_the_orphans() -> R {
    let c = start().await?;
    let s = &c.session;
    let live = graph(s, &Shape::small("live", 1)).await?;
    up(s, &live).await?;
    let mut gone_shape = Shape::small("gone", 1);
    gone_shape.boot_volume = true;
    up(s, &graph(s, &gone_shape).await?).await?;

    // The user's own objects: untagged, never kos's.
    let user = user_network(s, "corp", "192.168.50.0/24", true).await?;
    let user_port_id = user_port(s, &user.network, "corp-db").await?;
    let user_sg = s
        .network()
        .create_security_group(&SecurityGroupCreate {
            name: "corp-web".into(),
            description: Some("the user's".into()),
            tags: vec!["team=web".into()],
        })
        .await?
        .id;
    let user_vol = s
        .block_storage()
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some("corp-data".into()),
            ..VolumeCreate::default()
        })
        .await?
        .id;
    // A cluster being made: its network exists, no server yet. Not gone.
    let building = s
        .network()
        .create_network(&NetworkCreate {
            name: "kos-building-network".into(),
            tags: vec!["kos-cluster=building".into(), "kos-id=network".into()],
            ..NetworkCreate::default()
        })
        .await?
        .id;

    // `gone` loses its servers and network behind kos's back; its router, security groups, volumes,
    // keypair, server groups, credential and floating IP stay, plus a port it left on the user's network.
    let o = observe(s, "gone").await?;
    let one = |id: &str| -> Result<String, E> {
        Ok(o.get(id).first().ok_or(format!("no {id}"))?.id.clone())
    };
    let (router, subnet, network) = (one("router")?, one("subnet")?, one("network")?);
    delete_servers(s, "gone").await?;
    s.network()
        .disassociate_floating_ip(&one("api-fip")?)
        .await?;
    s.network()
        .remove_router_interface(&router, &subnet)
        .await?;
    for p in s
        .network()
        .list_ports(&PortFilter {
            network_id: Some(network.clone()),
            ..PortFilter::default()
        })
        .await?
    {
        if !p.device_owner.starts_with("network:") {
            s.network().delete_port(&p.id).await?;
        }
    }
    s.network().delete_subnet(&subnet).await?;
    s.network().delete_network(&network).await?;
    let stray = s
        .network()
        .create_port(&PortCreate {
            tags: vec!["kos-cluster=gone".into(), "kos-id=port-workers-7".into()],
            ..PortCreate::new(&user.network, "kos-gone-port-workers-7")
        })
        .await?
        .id;
    let gone_runtime = run_time(s, "gone", &user.subnet, None).await?;
    let mut gone_expected: BTreeSet<String> = [
        "router",
        "sg-cp",
        "sg-node",
        "vol-cp-0",
        "vol-workers-0",
        "keypair",
        "sgroup-workers",
        "appcred-ccm",
        "api-fip",
    ]
    .into_iter()
    .map(one)
    .collect::<Result<_, _>>()?;
    gone_expected.insert(stray);
    gone_expected.extend(gone_runtime);

    // Run-time objects: of a cluster of which nothing kos-made is left (`ghost`), one of its floating IPs
    // still associated (in use: never an orphan), and of the live cluster.
    let ghost = run_time(s, "ghost", &user.subnet, None).await?;
    // As the CCM does: the floating IP points at its LB's VIP (which goes with the LB).
    let vip = s
        .load_balancer()
        .get_load_balancer(&ghost[0])
        .await?
        .and_then(|l| l.vip_port_id)
        .ok_or("no VIP port")?;
    s.network()
        .associate_floating_ip(&ghost[1], &vip, None)
        .await?;
    let ghost_in_use = run_time(s, "ghost2", &user.subnet, Some(&user_port_id)).await?;
    let live_subnet = observe(s, "live").await?.get("subnet")[0].id.clone();
    let live_runtime = run_time(s, "live", &live_subnet, None).await?;
    let before_gc = census(s).await?;

    let found = orphans(s).await?;
    let clusters: BTreeSet<&str> = found.iter().map(|o| o.cluster.as_str()).collect();
    assert_eq!(
        clusters,
        BTreeSet::from(["ghost", "ghost2", "gone"]),
        "{found:#?}"
    );
    let gone_found = ids_of(&found, "gone");
    let missing: Vec<_> = gone_expected
        .iter()
        .filter(|id| !gone_found.contains(id.as_str()))
        .collect();
    assert!(missing.is_empty(), "not found: {missing:?} in {found:#?}");
    assert!(
        gone_found.iter().all(|id| gone_expected.contains(*id)),
        "{found:#?}"
    );
    assert_eq!(
        ids_of(&found, "ghost"),
        ghost.iter().map(String::as_str).collect(),
        "{found:#?}"
    );
    // The floating IP pointing at the user's port is in use; its LB and volume are not.
    assert_eq!(
        ids_of(&found, "ghost2"),
        BTreeSet::from([ghost_in_use[0].as_str(), ghost_in_use[2].as_str()])
    );
    // An orphan load balancer takes its VIP port with it, and its amphora's port (Octavia's, on the VIP
    // network, the VIP as its allowed address pair).
    let mut goes: BTreeSet<String> = found.iter().map(|o| o.id.clone()).collect();
    let ports = s.network().list_ports(&PortFilter::default()).await?;
    for o in found.iter().filter(|o| o.kind == Kind::LoadBalancer) {
        let Some(lb) = s.load_balancer().get_load_balancer(&o.id).await? else {
            continue;
        };
        let vip = lb.vip_address.unwrap_or_default();
        let amphora = ports
            .iter()
            .filter(|p| p.name.starts_with("octavia-lb-vrrp-"))
            .filter(|p| p.allowed_address_pairs.iter().any(|a| a.ip_address == vip));
        goes.extend(amphora.map(|p| p.id.clone()));
        goes.extend(lb.vip_port_id);
    }
    let kept: BTreeSet<String> = before_gc.difference(&goes).cloned().collect();
    for id in [
        &user.network,
        &user.subnet,
        &user_port_id,
        &user_sg,
        &user_vol,
        &building,
    ]
    .into_iter()
    .chain(&live_runtime)
    .chain(&user.router)
    .chain(&user.interface)
    .chain(&ghost_in_use[1..2])
    {
        assert!(kept.contains(id), "{id} is listed as an orphan");
    }

    let reports = delete_orphans(s, &found, &TeardownOptions::fast()).await?;
    assert_eq!(reports.len(), 3);
    assert!(orphans(s).await?.is_empty());
    let after = census(s).await?;
    assert_eq!(after, kept, "gc removed exactly the orphans");
    assert_eq!(pending(s, &live).await?, 0, "the live cluster is untouched");
    Ok(())
}

/// `demo` and `demo-b`: names of one start with the other's `kos-demo-`. Some of `demo-b`'s objects lost
/// their tags (a crash between create and tag), so only their names identify them.
#[tokio::test]
async fn teardown_never_reaches_a_cluster_whose_name_extends_its_own() -> R {
    let c = start().await?;
    let s = &c.session;
    let demo = graph(s, &Shape::small("demo", 1)).await?;
    let demo_b = graph(s, &Shape::small("demo-b", 1)).await?;
    up(s, &demo).await?;
    up(s, &demo_b).await?;
    let o = observe(s, "demo-b").await?;
    let untagged = [
        (TaggedKind::Network, "network"),
        (TaggedKind::SecurityGroup, "sg-node"),
        (TaggedKind::Port, "port-workers-0"),
        (TaggedKind::FloatingIp, "api-fip"),
    ];
    for (kind, id) in untagged {
        strip_tags(s, kind, &o.get(id)[0].id).await?;
    }
    let demo_b_ids: BTreeSet<String> = o.all().map(|r| r.id.clone()).collect();

    // Each dry run lists only its own cluster's objects.
    let dry = TeardownOptions {
        dry_run: true,
        ..TeardownOptions::fast()
    };
    let of_demo = teardown_with(s, "demo", &dry).await?.resources;
    assert!(!of_demo.is_empty());
    for r in &of_demo {
        assert!(
            !demo_b_ids.contains(&r.id) && !r.name.starts_with("kos-demo-b-"),
            "demo's teardown reaches {} {}",
            r.kind.as_str(),
            r.name
        );
    }
    let of_demo_b = teardown_with(s, "demo-b", &dry).await?.resources;
    assert!(of_demo_b.iter().all(|r| demo_b_ids.contains(&r.id)));
    assert_eq!(of_demo_b.len(), of_demo.len(), "same shape, same count");

    down(s, "demo").await?;
    // demo-b only needs its tags back: adopt, nothing created or deleted.
    let p = plan_for(s, &demo_b).await?;
    let adopted: BTreeSet<&str> = p
        .actions
        .iter()
        .filter(|a| a.op != Op::NoOp)
        .map(|a| {
            assert_eq!(a.op, Op::Adopt, "{}", p.diff(false));
            a.logical_id.as_str()
        })
        .collect();
    assert_eq!(adopted, untagged.iter().map(|(_, id)| *id).collect());
    up(s, &demo_b).await?;
    assert_eq!(pending(s, &demo_b).await?, 0);
    let o = observe(s, "demo-b").await?;
    assert!(
        o.all()
            .filter(|r| r.kind == Kind::Server)
            .all(|r| r.state == "ACTIVE")
    );
    down(s, "demo-b").await
}

#[tokio::test]
async fn teardown_reports_progress_and_removes_an_untagged_router_interface() -> R {
    let c = start().await?;
    let s = &c.session;
    let g = graph(s, &Shape::small("ev", 1)).await?;
    up(s, &g).await?;
    // A crash between adding the router interface and tagging it: the port has no tag and no name.
    let iface = observe(s, "ev").await?.get("router-if")[0].id.clone();
    strip_tags(s, TaggedKind::Port, &iface).await?;

    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let report = teardown_with_events(s, "ev", &TeardownOptions::fast(), tx).await?;
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    assert!(matches!(
        events.first(),
        Some(Event::Phase {
            phase: Phase::Teardown
        })
    ));
    assert!(matches!(
        events.last(),
        Some(Event::Phase { phase: Phase::Done })
    ));
    let deleted: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Deleted { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted.len(), report.resources.len());
    assert!(deleted.contains(&"router-if") && deleted.contains(&"cp-0"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Waiting { what, .. } if what.contains("server")))
    );
    assert!(!events.iter().any(|e| matches!(e, Event::Failed { .. })));
    assert!(leftovers(s, "ev").await?.is_empty());
    Ok(())
}
