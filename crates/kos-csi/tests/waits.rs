//! The shared volume waits against kos-sim: concurrent waits cost one Cinder list per tick, each
//! waiter keeps its own outcome and deadline, and the poller runs only while someone waits.
//! Volumes are held in `creating` (a create latency far past the test) and moved by the test.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kos_cloud::CloudError;
use kos_cloud::model::block_storage::{VolumeCreate, VolumeStatus};
use kos_csi::CsiError;
use kos_csi::waits::WaitMode;
use kos_sim::LatencyModel;
use support::{Cloud, E, R, cloud, create_req};
use tokio::time::Instant;

/// Volumes stay `creating` until the test moves them; a project with room for them.
fn hold_creates(c: &Cloud) {
    {
        let mut cloud = c.sim.app().cloud();
        cloud.quotas.volumes = 1000;
        cloud.quotas.gigabytes = 10_000;
    }
    c.sim.app().set_latency(LatencyModel {
        volume_create_secs: 1e9,
        ..LatencyModel::instant()
    });
}

fn set_status(c: &Cloud, id: &str, status: &str) -> R {
    let mut cloud = c.sim.app().cloud();
    let v = cloud
        .cinder
        .volumes
        .iter_mut()
        .find(|v| v.id == id)
        .ok_or("no such volume in the sim")?;
    v.status = status.into();
    Ok(())
}

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

#[tokio::test]
async fn concurrent_creates_share_one_list_per_tick() -> R {
    const N: usize = 20;
    let c = cloud("").await?;
    hold_creates(&c);
    let ctl = c.controller("k1");
    let calls: Vec<_> = (0..N)
        .map(|i| {
            let ctl = ctl.clone();
            tokio::spawn(async move { ctl.create_volume(create_req(&format!("pvc-{i}"), 1)).await })
        })
        .collect();
    eventually("every create waits", || ctl.waits().waiting() == N).await?;
    let (lists0, gets0) = cinder_reads(&c);
    let ticks0 = ctl.waits().ticks();
    let t = ticks0 + 5;
    eventually("five ticks", || ctl.waits().ticks() >= t).await?;
    let ids: Vec<String> = c
        .sim
        .app()
        .cloud()
        .cinder
        .volumes
        .iter()
        .map(|v| v.id.clone())
        .collect();
    assert_eq!(ids.len(), N);
    for id in &ids {
        set_status(&c, id, "available")?;
    }
    for call in calls {
        let v = call.await??.volume.ok_or("no volume")?;
        assert!(ids.contains(&v.volume_id));
    }
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
    eventually("the poller stops", || !ctl.waits().polling()).await?;
    Ok(())
}

#[tokio::test]
async fn the_per_volume_baseline_gets_each_volume() -> R {
    const N: usize = 5;
    let c = cloud("").await?;
    hold_creates(&c);
    let ctl = c.controller_with(|cfg| cfg.wait_mode = WaitMode::PerVolume, "k1");
    assert_eq!(ctl.waits().mode(), WaitMode::PerVolume);
    let calls: Vec<_> = (0..N)
        .map(|i| {
            let ctl = ctl.clone();
            tokio::spawn(async move { ctl.create_volume(create_req(&format!("pvc-{i}"), 1)).await })
        })
        .collect();
    // Each wait GETs its own volume.
    eventually("a GET of every volume", || cinder_reads(&c).1 >= N as u64).await?;
    let ids: Vec<String> = c
        .sim
        .app()
        .cloud()
        .cinder
        .volumes
        .iter()
        .map(|v| v.id.clone())
        .collect();
    for id in &ids {
        set_status(&c, id, "available")?;
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
    hold_creates(&c);
    let ctl = c.controller("k1");
    let calls: Vec<_> = ["good-1", "bad", "good-2"]
        .into_iter()
        .map(|n| {
            let ctl = ctl.clone();
            tokio::spawn(async move { ctl.create_volume(create_req(n, 1)).await })
        })
        .collect();
    eventually("every create waits", || ctl.waits().waiting() == 3).await?;
    let by_name: BTreeMap<String, String> = c
        .sim
        .app()
        .cloud()
        .cinder
        .volumes
        .iter()
        .map(|v| (v.name.clone().unwrap_or_default(), v.id.clone()))
        .collect();
    set_status(&c, &by_name["bad"], "error")?;
    eventually("the failed one is answered", || ctl.waits().waiting() == 2).await?;
    set_status(&c, &by_name["good-1"], "available")?;
    set_status(&c, &by_name["good-2"], "available")?;
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
    hold_creates(&c);
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
    set_status(&c, &long, "available")?;
    let v = patient.await??;
    assert_eq!(v.id, long);
    Ok(())
}

#[tokio::test]
async fn a_dropped_call_leaves_the_poller_to_the_others_and_the_last_stops_it() -> R {
    let c = cloud("").await?;
    hold_creates(&c);
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
    set_status(&c, &b, "available")?;
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
    hold_creates(&c);
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
    set_status(&c, &other, "available")?;
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
