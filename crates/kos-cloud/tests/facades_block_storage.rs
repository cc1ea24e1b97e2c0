//! The Cinder facade against kos-sim: create → wait available → get → list by metadata (paged) →
//! metadata merge/replace → delete; quotas with usage; limits; Cinder's own availability zones.

mod facades_support;

use std::collections::BTreeMap;

use facades_support::{R, deadline, start, start_with};
use kos_cloud::model::block_storage::{VolumeCreate, VolumeFilter, VolumeStatus};
use kos_cloud::{ApiErrorKind, CloudError, ServiceKind};
use kos_sim::SimConfig;

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn volume_lifecycle_with_metadata_tags() -> R {
    let c = start().await?;
    let cinder = c.session.block_storage();
    let mut ids = Vec::new();
    for i in 0..3 {
        let v = cinder
            .create_volume(&VolumeCreate {
                size: 1,
                name: Some(format!("kos-t1-v{i}")),
                metadata: meta(&[("kos-cluster", "t1"), ("kos-id", &format!("v{i}"))]),
                ..Default::default()
            })
            .await?;
        ids.push(v.id);
    }
    cinder
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some("other".into()),
            ..Default::default()
        })
        .await?;
    let v = cinder.wait_for_available(&ids[0], deadline()).await?;
    assert_eq!((v.status, v.size), (VolumeStatus::Available, 1));
    assert_eq!(
        cinder.get_volume(&ids[0]).await?.map(|v| v.name),
        Some("kos-t1-v0".to_owned())
    );

    let before = c
        .session
        .counters()
        .operation(ServiceKind::BlockStorage, "volume.list");
    let mine = cinder
        .page_size(2)
        .list_volumes(&VolumeFilter {
            metadata: meta(&[("kos-cluster", "t1")]),
            ..Default::default()
        })
        .await?;
    assert_eq!(
        mine.len(),
        3,
        "{:?}",
        mine.iter().map(|v| &v.name).collect::<Vec<_>>()
    );
    assert_eq!(
        c.session
            .counters()
            .operation(ServiceKind::BlockStorage, "volume.list")
            - before,
        2
    );

    let m = cinder
        .merge_metadata(&ids[0], &meta(&[("role", "etcd")]))
        .await?;
    assert_eq!(m.get("kos-cluster").map(String::as_str), Some("t1"));
    assert_eq!(m.get("role").map(String::as_str), Some("etcd"));
    let m = cinder
        .set_metadata(&ids[0], &meta(&[("only", "this")]))
        .await?;
    assert_eq!(m, meta(&[("only", "this")]));

    let q = cinder.quotas().await?;
    let vols = q.get("volumes").ok_or("no volumes quota")?;
    assert!(vols.used >= 4, "{vols:?}");
    let l = cinder.limits().await?;
    assert!(
        l.max_total_volumes > 0 && l.total_volumes_used >= 4,
        "{l:?}"
    );

    for id in &ids {
        cinder.wait_for_available(id, deadline()).await?;
        cinder.delete_volume(id).await?;
    }
    let gone =
        facades_support::poll(|| async { Ok(cinder.get_volume(&ids[0]).await?.is_none()) }).await?;
    assert!(gone);
    cinder.delete_volume(&ids[0]).await?;
    Ok(())
}

/// Cinder's zones are listed from Cinder, not Nova: a cloud with compute zones `az1, az2` and one
/// volume zone `nova` shows `nova` here, and refuses a volume in `az1` as Cinder does (400).
#[tokio::test]
async fn volume_zones_are_cinders_own() -> R {
    let c = start_with(SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        volume_zones: vec!["nova".into()],
        ..SimConfig::fast()
    })
    .await?;
    let cinder = c.session.block_storage();
    let zones = cinder.availability_zones().await?;
    let names: Vec<(&str, bool)> = zones
        .iter()
        .map(|z| (z.name.as_str(), z.state.available))
        .collect();
    assert_eq!(names, [("nova", true)]);
    let compute = c.session.compute().availability_zones().await?;
    assert_eq!(compute.len(), 2);

    let refused = cinder
        .create_volume(&VolumeCreate {
            size: 1,
            availability_zone: Some("az1".into()),
            ..Default::default()
        })
        .await;
    match refused {
        Err(CloudError::Api {
            kind: ApiErrorKind::BadRequest,
            ref message,
            ..
        }) => assert!(
            message.contains("Availability zone 'az1' is invalid."),
            "{message}"
        ),
        other => panic!("expected Cinder's 400, got {other:?}"),
    }
    let v = cinder
        .create_volume(&VolumeCreate {
            size: 1,
            availability_zone: Some("nova".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(v.availability_zone.as_deref(), Some("nova"));
    Ok(())
}

#[tokio::test]
async fn pages_hand_on_their_marker_and_extend_grows_a_volume() -> R {
    let c = start().await?;
    let cinder = c.session.block_storage();
    let mut ids = Vec::new();
    for i in 0..3 {
        let v = cinder
            .create_volume(&VolumeCreate {
                size: 1,
                name: Some(format!("p{i}")),
                ..Default::default()
            })
            .await?;
        ids.push(v.id);
    }
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    let mut pages = 0;
    loop {
        let p = cinder
            .list_volumes_page(&VolumeFilter::default(), Some(2), marker.as_deref())
            .await?;
        pages += 1;
        seen.extend(p.items.into_iter().map(|v| v.id));
        match p.next_marker {
            Some(m) => marker = Some(m),
            None => break,
        }
    }
    seen.sort();
    ids.sort();
    assert_eq!((seen, pages), (ids.clone(), 2));

    cinder.wait_for_available(&ids[0], deadline()).await?;
    cinder.extend_volume(&ids[0], 3, false).await?;
    let v = cinder
        .wait_for_status(
            &ids[0],
            &[VolumeStatus::Available, VolumeStatus::InUse],
            deadline(),
        )
        .await?;
    assert_eq!(v.size, 3);
    // Growing to the same size is Cinder's 400, never a silent success.
    let again = cinder.extend_volume(&ids[0], 3, false).await;
    assert!(
        matches!(&again, Err(e) if e.status() == Some(400)),
        "{again:?}"
    );
    // Without a microversion, an in-use volume is refused before sending.
    let old = cinder
        .without_microversion()
        .extend_volume(&ids[0], 4, true)
        .await;
    assert!(matches!(old, Err(CloudError::Invalid { .. })), "{old:?}");
    Ok(())
}

#[tokio::test]
async fn snapshots_are_made_listed_and_deleted() -> R {
    use kos_cloud::model::block_storage::{SnapshotCreate, SnapshotFilter, SnapshotStatus};
    let c = start().await?;
    let cinder = c.session.block_storage();
    let v = cinder
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some("src".into()),
            ..Default::default()
        })
        .await?;
    cinder.wait_for_available(&v.id, deadline()).await?;
    let s = cinder
        .create_snapshot(&SnapshotCreate {
            volume_id: v.id.clone(),
            name: Some("snap".into()),
            metadata: meta(&[("k", "v")]),
            ..Default::default()
        })
        .await?;
    let s = cinder
        .wait_for_snapshot_available(&s.id, deadline())
        .await?;
    assert_eq!(
        (s.status, s.size, s.volume_id.as_str()),
        (SnapshotStatus::Available, 1, v.id.as_str())
    );
    let named = cinder
        .list_snapshots(&SnapshotFilter {
            name: Some("snap".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(named.len(), 1);
    cinder.delete_snapshot(&s.id).await?;
    // While it is `deleting`, Cinder refuses another delete (400, as real Cinder does); once it is
    // gone, a delete is a no-op.
    let gone =
        facades_support::poll(|| async { Ok(cinder.get_snapshot(&s.id).await?.is_none()) }).await?;
    assert!(gone);
    cinder.delete_snapshot(&s.id).await?;
    Ok(())
}
