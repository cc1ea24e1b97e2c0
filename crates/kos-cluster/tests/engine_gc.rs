//! `kos gc` and teardown's reach on kos-sim: orphans are found (tagged leftovers of a cluster whose servers
//! and network are gone, run-time objects of a cluster of which nothing kos-made is left) and removed,
//! while a live cluster, a cluster being made and the user's own objects are never touched; teardown of one
//! cluster never reaches a cluster whose name extends its own; it reports progress, and removes an
//! untagged router interface.

mod engine_support;
#[path = "engine_support/user.rs"]
mod user;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use engine_support::*;
use kos_cloud::Session;
use kos_cloud::model::block_storage::{SnapshotCreate, SnapshotFilter, VolumeCreate};
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
use kos_sim::FaultRule;
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

/// A CSI volume of `cluster` with `snapshots` CSI snapshots of it (available), and their ids.
async fn csi_volume_with_snapshots(
    s: &Session,
    cluster: &str,
    name: &str,
    snapshots: usize,
) -> Result<(String, Vec<String>), E> {
    let cinder = s.block_storage();
    let csi = BTreeMap::from([(CSI.to_owned(), cluster.to_owned())]);
    let vol = cinder
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some(name.into()),
            metadata: csi.clone(),
            ..VolumeCreate::default()
        })
        .await?;
    cinder.wait_for_available(&vol.id, deadline()).await?;
    let mut snaps = Vec::new();
    for i in 0..snapshots {
        let snap = cinder
            .create_snapshot(&SnapshotCreate {
                volume_id: vol.id.clone(),
                name: Some(format!("snapshot-{name}-{i}")),
                metadata: csi.clone(),
                ..SnapshotCreate::default()
            })
            .await?;
        cinder
            .wait_for_snapshot_available(&snap.id, deadline())
            .await?;
        snaps.push(snap.id);
    }
    Ok((vol.id, snaps))
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

/// A fault that lets the DELETE take effect and loses its answer (a 502 kos-cloud retries: DELETE is
/// idempotent), `count` times.
fn lost_delete(path: &str, count: u64) -> FaultRule {
    FaultRule {
        id: None,
        method: Some("DELETE".into()),
        path: path.into(),
        body: None,
        status: 502,
        probability: 1.0,
        count: Some(count),
        skip: 0,
        retry_after: None,
        after_side_effect: true,
        build_error: false,
        message: None,
    }
}

/// Issue 21: `kos down` finds the CSI driver's snapshots (their cluster metadata), lists them in a dry
/// run, deletes them before their volumes (Cinder refuses a volume with snapshots) and waits for their
/// absence. The first DELETE of every snapshot and volume takes effect and its answer is lost: the
/// retried DELETE is refused (Cinder refuses a second delete of what is `deleting`), and teardown waits
/// for the object to go instead of failing or asking again.
#[tokio::test]
async fn teardown_deletes_csi_snapshots_first_and_a_lost_delete_answer_is_progress() -> R {
    let c = start().await?;
    let s = &c.session;
    let (v1, s1) = csi_volume_with_snapshots(s, "snap", "pvc-1", 2).await?;
    let (v2, s2) = csi_volume_with_snapshots(s, "snap", "pvc-2", 1).await?;
    let (other, other_snaps) = csi_volume_with_snapshots(s, "snap-b", "pvc-b", 1).await?;

    let left = leftovers(s, "snap").await?;
    for id in s1.iter().chain(&s2) {
        assert!(
            left.iter()
                .any(|l| l.starts_with("snapshot ") && l.ends_with(id.as_str())),
            "{id} not in the dry run: {left:#?}"
        );
    }
    assert!(!left.iter().any(|l| l.contains("pvc-b")), "{left:#?}");

    // Deletes take a while (5 s here), so the retried DELETE finds them `deleting`.
    let app = c.sim.app();
    let mut slow = app.latency();
    (slow.volume_delete_secs, slow.snapshot_delete_secs) = (5000.0, 5000.0);
    app.set_latency(slow);
    {
        // One rule per object: a retry never takes another object's lost answer.
        let mut f = app.fault_engine();
        for id in s1.iter().chain(&s2) {
            f.add(lost_delete(&format!("/snapshots/{id}$"), 1))?;
        }
        for id in [&v1, &v2] {
            f.add(lost_delete(&format!("/volumes/{id}$"), 1))?;
        }
    }
    app.observations().reset();
    teardown_with(s, "snap", &TeardownOptions::fast()).await?;

    let log = app.observations().log.clone();
    let deletes = |id: &str| {
        log.iter()
            .filter(|e| e.method == "DELETE" && e.path.ends_with(id))
            .collect::<Vec<_>>()
    };
    for id in s1.iter().chain(&s2).chain([&v1, &v2]) {
        let d = deletes(id);
        assert_eq!(
            d.len(),
            2,
            "{id}: the lost DELETE and one retry, no more: {d:#?}"
        );
        assert!(d[0].fault_rule.is_some(), "{id}: the first answer was lost");
        assert_eq!(d[1].status, 400, "{id}: Cinder refuses the retry");
    }
    // Every snapshot was gone before its volume's DELETE.
    let pos = |id: &str| {
        log.iter()
            .position(|e| e.method == "DELETE" && e.path.ends_with(id))
    };
    for (v, snaps) in [(&v1, &s1), (&v2, &s2)] {
        for sid in snaps {
            assert!(
                pos(sid).is_some() && pos(sid) < pos(v),
                "{sid} deleted after its volume {v}"
            );
        }
        assert!(pos(v).is_some(), "{v} was deleted");
    }
    assert!(leftovers(s, "snap").await?.is_empty());
    let cinder = s.block_storage();
    let snaps: Vec<String> = cinder
        .list_snapshots(&SnapshotFilter::default())
        .await?
        .into_iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(snaps, other_snaps, "another cluster's snapshot stays");
    assert!(cinder.get_volume(&other).await?.is_some());
    Ok(())
}

/// A snapshot a user took by hand of a CSI volume is not kos's: `kos down` deletes the CSI driver's
/// snapshot of that volume, keeps the user's, and fails at once naming it (not at the deadline,
/// Cinder refusing the volume all the while); once the user deletes it, `kos down` finishes.
#[tokio::test]
async fn teardown_never_deletes_a_users_snapshot_and_names_it() -> R {
    let c = start().await?;
    let s = &c.session;
    let cinder = s.block_storage();
    let (vol, csi_snaps) = csi_volume_with_snapshots(s, "hand", "pvc-h", 1).await?;
    let users = cinder
        .create_snapshot(&SnapshotCreate {
            volume_id: vol.clone(),
            name: Some("before-upgrade".into()),
            ..SnapshotCreate::default()
        })
        .await?;
    cinder
        .wait_for_snapshot_available(&users.id, deadline())
        .await?;
    assert!(
        !leftovers(s, "hand")
            .await?
            .iter()
            .any(|l| l.contains(&users.id)),
        "the user's snapshot is not listed"
    );

    // The deadline is far: only the refusal's cause, read at once, ends the run.
    let patient = TeardownOptions {
        deadline: Duration::from_secs(3600),
        ..TeardownOptions::fast()
    };
    let err = tokio::time::timeout(Duration::from_secs(300), teardown_with(s, "hand", &patient))
        .await?
        .expect_err("the volume is held by the user's snapshot");
    let text = err.to_string();
    assert!(
        text.contains("before-upgrade") && text.contains(&users.id) && text.contains("pvc-h"),
        "{text}"
    );
    assert!(cinder.get_snapshot(&csi_snaps[0]).await?.is_none());
    assert!(cinder.get_snapshot(&users.id).await?.is_some());
    assert!(cinder.get_volume(&vol).await?.is_some());

    cinder.delete_snapshot(&users.id).await?;
    down(s, "hand").await
}

/// `kos gc`: the CSI snapshots of a cluster of which nothing is left are orphans with their volume,
/// and go before it.
#[tokio::test]
async fn gc_removes_an_orphan_csi_volume_with_its_snapshots() -> R {
    let c = start().await?;
    let s = &c.session;
    let (vol, snaps) = csi_volume_with_snapshots(s, "ghost", "pvc-g", 2).await?;
    let found = orphans(s).await?;
    let mut want: BTreeSet<&str> = snaps.iter().map(String::as_str).collect();
    want.insert(&vol);
    assert_eq!(ids_of(&found, "ghost"), want, "{found:#?}");
    assert!(
        found
            .iter()
            .filter(|o| snaps.contains(&o.id))
            .all(|o| o.kind == Kind::Snapshot)
    );
    delete_orphans(s, &found, &TeardownOptions::fast()).await?;
    assert!(orphans(s).await?.is_empty());
    assert!(
        s.block_storage()
            .list_snapshots(&SnapshotFilter::default())
            .await?
            .is_empty()
    );
    assert!(s.block_storage().get_volume(&vol).await?.is_none());
    Ok(())
}
