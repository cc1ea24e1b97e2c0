//! The shared volume waits against kos-sim: concurrent waits cost one Cinder list per tick, each
//! waiter keeps its own outcome and deadline, and the poller runs only while someone waits.
//! CreateVolume answers without waiting (as upstream); ControllerPublishVolume waits for a volume
//! still `creating`. Volumes are held in `creating` (a create latency far past the test) and
//! moved by the test.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kos_cloud::CloudError;
use kos_cloud::model::block_storage::{VolumeCreate, VolumeStatus};
use kos_csi::CsiError;
use kos_csi::controller::Controller;
use kos_csi::csi;
use kos_csi::waits::WaitMode;
use support::{Cloud, E, R, cloud, create_req, mount_cap};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Cinder calls so far: (volume lists, single-volume GETs).
fn cinder_reads(c: &Cloud) -> (u64, u64) {
    let obs = c.sim.app().observations();
    let mut lists = 0;
    let mut gets = 0;
    for (op, n) in obs.counters.values().flat_map(|s| s.by_operation.iter()) {
        if op.starts_with("GET ") && op.ends_with("/volumes/detail") {
            lists += n;
        } else if op.starts_with("GET ") && op.ends_with("/volumes/{id}") {
            gets += n;
        }
    }
    (lists, gets)
}

/// Polls `cond` every 10 ms, for at most a minute (a bound against hanging, not a time asserted).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) -> R {
    let end = Instant::now() + Duration::from_secs(60);
    while !cond() {
        if Instant::now() > end {
            return Err(format!("never: {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

async fn volume(c: &Cloud, name: &str, cluster: Option<&str>) -> Result<String, E> {
    let metadata = cluster
        .map(|k| BTreeMap::from([(kos_csi::CLUSTER_KEY.to_owned(), k.to_owned())]))
        .unwrap_or_default();
    let v = c
        .session
        .block_storage()
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some(name.into()),
            metadata,
            ..VolumeCreate::default()
        })
        .await?;
    Ok(v.id)
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

/// The volume ids the sim holds, by name.
fn ids_by_name(c: &Cloud) -> BTreeMap<String, String> {
    c.sim
        .app()
        .cloud()
        .cinder
        .volumes
        .iter()
        .map(|v| (v.name.clone().unwrap_or_default(), v.id.clone()))
        .collect()
}

/// CreateVolume for each name (answered at once), then a ControllerPublishVolume of each to
/// `node`, spawned: they wait while the volumes are `creating`.
async fn create_and_publish(
    ctl: &Controller,
    node: &str,
    names: &[String],
) -> Result<Vec<JoinHandle<Result<csi::ControllerPublishVolumeResponse, CsiError>>>, E> {
    let mut calls = Vec::new();
    for name in names {
        let v = ctl
            .create_volume(create_req(name, 1))
            .await?
            .volume
            .ok_or("no volume")?;
        let ctl = ctl.clone();
        let req = csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id,
            node_id: node.to_owned(),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        };
        calls.push(tokio::spawn(async move {
            ctl.controller_publish_volume(req).await
        }));
    }
    Ok(calls)
}

#[tokio::test]
async fn create_answers_while_the_volume_is_creating_from_any_source() -> R {
    let c = cloud("").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let a = ctl
        .create_volume(create_req("pvc-a", 1))
        .await?
        .volume
        .ok_or("no volume")?;
    let cinder = c.session.block_storage();
    let v = cinder.get_volume(&a.volume_id).await?.ok_or("gone")?;
    assert_eq!(
        v.status,
        VolumeStatus::Creating,
        "answered before Cinder made it"
    );
    assert_eq!(a.capacity_bytes, kos_csi::GIB);
    // Nothing waited, and nothing polls.
    assert_eq!((ctl.waits().ticks(), ctl.waits().polling()), (0, false));
    // Asked again while it is still `creating`: the same volume, at once.
    let again = ctl
        .create_volume(create_req("pvc-a", 1))
        .await?
        .volume
        .ok_or("no volume")?;
    assert_eq!(again.volume_id, a.volume_id);

    // From a snapshot and from a volume: the sources must be usable, the new volume need not.
    c.set_status(&a.volume_id, "available")?;
    let snap = cinder
        .create_snapshot(&kos_cloud::model::block_storage::SnapshotCreate {
            volume_id: a.volume_id.clone(),
            force: false,
            name: Some("snap".into()),
            description: None,
            metadata: BTreeMap::new(),
        })
        .await?;
    cinder
        .wait_for_snapshot_available(&snap.id, support::deadline())
        .await?;
    let from = |name: &str, source: csi::volume_content_source::Type| {
        let mut r = create_req(name, 1);
        r.volume_content_source = Some(csi::VolumeContentSource {
            r#type: Some(source),
        });
        r
    };
    use csi::volume_content_source::{SnapshotSource, Type, VolumeSource};
    for req in [
        from(
            "pvc-from-snap",
            Type::Snapshot(SnapshotSource {
                snapshot_id: snap.id.clone(),
            }),
        ),
        from(
            "pvc-from-vol",
            Type::Volume(VolumeSource {
                volume_id: a.volume_id.clone(),
            }),
        ),
    ] {
        let name = req.name.clone();
        let made = ctl.create_volume(req).await?.volume.ok_or("no volume")?;
        let v = cinder.get_volume(&made.volume_id).await?.ok_or("gone")?;
        assert_eq!(v.status, VolumeStatus::Creating, "{name}");
        assert!(made.content_source.is_some(), "{name}");
    }
    assert_eq!(ctl.waits().ticks(), 0);

    // A volume of that name Cinder failed to make is answered as it is (upstream checks only
    // its size): the claim is Bound, and publishing it fails (below).
    let b = ctl
        .create_volume(create_req("pvc-b", 1))
        .await?
        .volume
        .ok_or("no volume")?;
    c.set_status(&b.volume_id, "error")?;
    let again = ctl
        .create_volume(create_req("pvc-b", 1))
        .await?
        .volume
        .ok_or("no volume")?;
    assert_eq!(again.volume_id, b.volume_id);
    Ok(())
}

#[tokio::test]
async fn publish_waits_for_a_creating_volume_before_asking_nova() -> R {
    let c = cloud("").await?;
    let node = c.server("node-w", "10.50.0.0/24").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let calls = create_and_publish(&ctl, &node, &["pvc-w".to_owned()]).await?;
    eventually("the publish waits", || ctl.waits().waiting() == 1).await?;
    let t = ctl.waits().ticks() + 3;
    eventually("three ticks", || ctl.waits().ticks() >= t).await?;
    // Nova was not asked meanwhile.
    assert!(
        c.session
            .compute()
            .list_volume_attachments(&node)
            .await?
            .is_empty()
    );
    let id = ids_by_name(&c)["pvc-w"].clone();
    c.set_status(&id, "available")?;
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await??);
    }
    assert!(answers[0].publish_context.contains_key("DevicePath"));
    let v = c
        .session
        .block_storage()
        .get_volume(&id)
        .await?
        .ok_or("gone")?;
    assert_eq!(v.status, VolumeStatus::InUse);
    assert_eq!(
        v.attachments.first().map(|a| a.server_id.as_str()),
        Some(node.as_str())
    );
    eventually("the poller stops", || !ctl.waits().polling()).await?;
    Ok(())
}

#[tokio::test]
async fn publish_of_a_volume_in_error_fails_naming_the_state() -> R {
    let c = cloud("").await?;
    let node = c.server("node-e", "10.51.0.0/24").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let v = ctl
        .create_volume(create_req("pvc-broken", 1))
        .await?
        .volume
        .ok_or("no volume")?;
    c.set_status(&v.volume_id, "error")?;
    let e = ctl
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: node.clone(),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await;
    let Err(e) = e else {
        return Err(format!("published a volume in error: {e:?}").into());
    };
    assert_eq!(e.code(), tonic::Code::Internal);
    assert!(e.to_string().contains("state error"), "{e}");
    assert_eq!(ctl.waits().ticks(), 0, "nothing to wait for");
    assert!(
        c.session
            .compute()
            .list_volume_attachments(&node)
            .await?
            .is_empty()
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_publishes_share_one_list_per_tick() -> R {
    const N: usize = 20;
    let c = cloud("").await?;
    let node = c.server("node-n", "10.52.0.0/24").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let names: Vec<String> = (0..N).map(|i| format!("pvc-{i}")).collect();
    let calls = create_and_publish(&ctl, &node, &names).await?;
    eventually("every publish waits", || ctl.waits().waiting() == N).await?;
    let (lists0, gets0) = cinder_reads(&c);
    let ticks0 = ctl.waits().ticks();
    let t = ticks0 + 5;
    eventually("five ticks", || ctl.waits().ticks() >= t).await?;
    let (lists, gets) = cinder_reads(&c);
    let ticks = ctl.waits().ticks() - ticks0;
    // One list per tick (give or take the tick in flight at each end), whatever N; the cluster's
    // list shows every volume, so none is looked up by itself.
    let lists = lists - lists0;
    assert!(
        lists + 1 >= ticks && lists <= ticks + 1,
        "{lists} lists in {ticks} ticks"
    );
    assert_eq!(gets - gets0, 0, "single-volume GETs");
    let ids = ids_by_name(&c);
    assert_eq!(ids.len(), N);
    for id in ids.values() {
        c.set_status(id, "available")?;
    }
    for call in calls {
        call.await??;
    }
    eventually("the poller stops", || !ctl.waits().polling()).await?;
    Ok(())
}

#[tokio::test]
async fn the_per_volume_baseline_gets_each_volume() -> R {
    const N: usize = 5;
    let c = cloud("").await?;
    let node = c.server("node-p", "10.53.0.0/24").await?;
    c.hold_creates();
    let ctl = c.controller_with(|cfg| cfg.wait_mode = WaitMode::PerVolume, "k1");
    assert_eq!(ctl.waits().mode(), WaitMode::PerVolume);
    let names: Vec<String> = (0..N).map(|i| format!("pvc-{i}")).collect();
    let gets0 = cinder_reads(&c).1;
    let calls = create_and_publish(&ctl, &node, &names).await?;
    // Each publish GETs its volume once, then its wait GETs it again.
    eventually("a wait's GET of every volume", || {
        cinder_reads(&c).1 >= gets0 + 2 * N as u64
    })
    .await?;
    for id in ids_by_name(&c).values() {
        c.set_status(id, "available")?;
    }
    for call in calls {
        call.await??;
    }
    assert_eq!(ctl.waits().ticks(), 0, "no shared poller");
    Ok(())
}

#[tokio::test]
async fn a_volume_in_error_fails_only_its_own_waiter() -> R {
    let c = cloud("").await?;
    let node = c.server("node-x", "10.54.0.0/24").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let names: Vec<String> = ["good-1", "bad", "good-2"].map(String::from).to_vec();
    let calls = create_and_publish(&ctl, &node, &names).await?;
    eventually("every publish waits", || ctl.waits().waiting() == 3).await?;
    let by_name = ids_by_name(&c);
    c.set_status(&by_name["bad"], "error")?;
    eventually("the failed one is answered", || ctl.waits().waiting() == 2).await?;
    c.set_status(&by_name["good-1"], "available")?;
    c.set_status(&by_name["good-2"], "available")?;
    let mut out = Vec::new();
    for call in calls {
        out.push(call.await?);
    }
    assert!(out[0].is_ok(), "{:?}", out[0]);
    assert!(
        matches!(&out[1], Err(CsiError::Cloud { source: CloudError::Failed { detail, .. }, .. })
            if detail == "went to error"),
        "{:?}",
        out[1]
    );
    assert!(out[2].is_ok(), "{:?}", out[2]);
    Ok(())
}

#[tokio::test]
async fn each_waiter_keeps_its_own_deadline() -> R {
    let c = cloud("").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let waits = ctl.waits().clone();
    let short = volume(&c, "short", Some("k1")).await?;
    let long = volume(&c, "long", Some("k1")).await?;
    let w = waits.clone();
    let long_id = long.clone();
    let patient = tokio::spawn(async move {
        w.wait_for_status(&long_id, &[VolumeStatus::Available], far())
            .await
    });
    let e = waits
        .wait_for_status(
            &short,
            &[VolumeStatus::Available],
            Instant::now() + Duration::from_millis(300),
        )
        .await;
    assert!(
        matches!(&e, Err(CloudError::Timeout { detail, .. }) if detail.contains("creating")),
        "{e:?}"
    );
    // The other waits on, and the poller with it.
    assert_eq!(waits.waiting(), 1);
    assert!(waits.polling());
    c.set_status(&long, "available")?;
    let v = patient.await??;
    assert_eq!(v.id, long);
    Ok(())
}

#[tokio::test]
async fn a_dropped_call_leaves_the_poller_to_the_others_and_the_last_stops_it() -> R {
    let c = cloud("").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let waits = ctl.waits().clone();
    let a = volume(&c, "a", Some("k1")).await?;
    let b = volume(&c, "b", Some("k1")).await?;
    let spawn = |id: String| {
        let w = waits.clone();
        tokio::spawn(async move {
            w.wait_for_status(&id, &[VolumeStatus::Available], far())
                .await
        })
    };
    let wa = spawn(a.clone());
    let wb = spawn(b.clone());
    eventually("both wait", || waits.waiting() == 2).await?;
    wa.abort();
    eventually("the dropped one is gone", || waits.waiting() == 1).await?;
    let t = waits.ticks() + 2;
    eventually("the poller ticks on", || waits.ticks() >= t).await?;
    c.set_status(&b, "available")?;
    assert_eq!(wb.await??.id, b);
    eventually("the poller stops", || !waits.polling()).await?;

    // Dropping the last waiter stops it too, and nothing polls Cinder afterwards.
    let wa = spawn(a.clone());
    eventually("polling again", || waits.polling() && waits.waiting() == 1).await?;
    wa.abort();
    eventually("the poller stops", || !waits.polling()).await?;
    let quiet = cinder_reads(&c);
    let ticks = waits.ticks();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(cinder_reads(&c), quiet);
    assert_eq!(waits.ticks(), ticks);
    Ok(())
}

#[tokio::test]
async fn a_volume_the_list_does_not_show_is_looked_up_by_itself() -> R {
    let c = cloud("").await?;
    c.hold_creates();
    let ctl = c.controller("k1");
    let waits = ctl.waits().clone();
    // Another cluster's volume (extended by this driver, say): not in this cluster's list.
    let other = volume(&c, "other", Some("k2")).await?;
    let gone = volume(&c, "gone", Some("k1")).await?;
    let w = waits.clone();
    let id = other.clone();
    let waiter = tokio::spawn(async move {
        w.wait_for_status(&id, &[VolumeStatus::Available], far())
            .await
    });
    eventually("it is looked up", || cinder_reads(&c).1 >= 1).await?;
    c.set_status(&other, "available")?;
    assert_eq!(waiter.await??.id, other);

    // A volume gone while waited on ends its wait.
    let w = waits.clone();
    let id = gone.clone();
    let waiter = tokio::spawn(async move {
        w.wait_for_status(&id, &[VolumeStatus::Available], far())
            .await
    });
    eventually("it waits", || waits.waiting() == 1).await?;
    c.sim.app().cloud().cinder.volumes.retain(|v| v.id != gone);
    let e = waiter.await?;
    assert!(
        matches!(&e, Err(CloudError::Failed { detail, .. }) if detail.contains("disappeared")),
        "{e:?}"
    );
    Ok(())
}
