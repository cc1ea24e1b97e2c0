//! The Controller service against kos-sim: what the CSI spec and upstream cinder-csi promise,
//! checked on the cloud's own state.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kos_cloud::{CallObserver, CallRecord};
use kos_csi::config::DriverConfig;
use kos_csi::controller::Controller;

use kos_cloud::model::block_storage::{VolumeFilter, VolumeStatus};
use kos_csi::csi;
use kos_csi::{CLUSTER_KEY, CsiError, GIB, TOPOLOGY_KEY};
use kos_sim::FaultRule;
use support::{R, cloud, create_req, deadline, mount_cap};

fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn create_is_idempotent_by_name_and_tags_the_volume_as_upstream() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let mut req = create_req("pvc-1", 1);
    req.capacity_range = Some(csi::CapacityRange {
        required_bytes: GIB / 2,
        limit_bytes: 0,
    });
    req.parameters = params(&[
        ("csi.storage.k8s.io/pvc/name", "data"),
        ("csi.storage.k8s.io/pvc/namespace", "apps"),
        ("csi.storage.k8s.io/pv/name", "pvc-1"),
        ("unrelated", "x"),
    ]);
    let a = ctl
        .create_volume(req.clone())
        .await?
        .volume
        .ok_or("no volume")?;
    let b = ctl
        .create_volume(req.clone())
        .await?
        .volume
        .ok_or("no volume")?;
    assert_eq!(a.volume_id, b.volume_id);
    assert_eq!(a.capacity_bytes, GIB);
    let vols = c
        .session
        .block_storage()
        .list_volumes(&VolumeFilter {
            name: Some("pvc-1".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(vols.len(), 1, "one volume, whatever the number of calls");
    let v = &vols[0];
    // Answered at once, as upstream: Cinder may still be making it.
    assert_eq!(v.size, 1);
    assert!(
        matches!(v.status, VolumeStatus::Creating | VolumeStatus::Available),
        "{}",
        v.status
    );
    assert_eq!(v.metadata.get(CLUSTER_KEY).map(String::as_str), Some("k1"));
    assert_eq!(
        v.metadata
            .get("csi.storage.k8s.io/pvc/namespace")
            .map(String::as_str),
        Some("apps")
    );
    assert!(!v.metadata.contains_key("unrelated"));
    assert_eq!(v.description, kos_csi::controller::DESCRIPTION);
    // The zone Cinder chose is the volume's topology.
    let zone = v.availability_zone.clone().ok_or("no zone")?;
    assert_eq!(
        a.accessible_topology[0].segments.get(TOPOLOGY_KEY),
        Some(&zone)
    );

    // Same name, another size: ALREADY_EXISTS, and still one volume.
    let e = ctl.create_volume(create_req("pvc-1", 2)).await;
    assert!(matches!(e, Err(CsiError::AlreadyExists(_))), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn requests_missing_what_the_spec_requires_are_invalid() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let mut no_caps = create_req("x", 1);
    no_caps.volume_capabilities.clear();
    let mut no_mode = create_req("x", 1);
    no_mode.volume_capabilities[0].access_mode = None;
    for r in [create_req("", 1), no_caps, no_mode] {
        let e = ctl.create_volume(r).await;
        assert!(matches!(e, Err(CsiError::InvalidArgument(_))), "{e:?}");
    }
    let mut over = create_req("x", 1);
    over.capacity_range = Some(csi::CapacityRange {
        required_bytes: 10,
        limit_bytes: 100,
    });
    assert!(matches!(
        ctl.create_volume(over).await,
        Err(CsiError::OutOfRange(_))
    ));
    let e = ctl.delete_volume(csi::DeleteVolumeRequest::default()).await;
    assert!(matches!(e, Err(CsiError::InvalidArgument(_))), "{e:?}");
    // Nothing was made.
    let all = c
        .session
        .block_storage()
        .list_volumes(&VolumeFilter::default())
        .await?;
    assert!(all.is_empty(), "{all:?}");
    Ok(())
}

#[tokio::test]
async fn zones_come_from_the_class_then_topology_and_ignore_volume_az_keeps_the_request() -> R {
    let c = cloud("").await?;
    let zones = c.session.block_storage().availability_zones().await?;
    let zone = zones.first().ok_or("no volume zone")?.name.clone();
    let ctl = c.controller("k1");
    let topo = |z: &str| csi::Topology {
        segments: HashMap::from([(TOPOLOGY_KEY.to_owned(), z.to_owned())]),
    };
    let mut req = create_req("zoned", 1);
    req.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![topo(&zone)],
        preferred: vec![topo(&zone)],
    });
    let v = ctl.create_volume(req.clone()).await?.volume.ok_or("none")?;
    assert_eq!(v.accessible_topology, vec![topo(&zone)]);

    // A zone Cinder lacks is Cinder's refusal, surfaced.
    let mut bad = create_req("elsewhere", 1);
    bad.parameters = params(&[("availability", "no-such-zone")]);
    let e = ctl.create_volume(bad).await;
    assert!(
        matches!(&e, Err(CsiError::InvalidArgument(m)) if m.contains("no-such-zone")),
        "{e:?}"
    );
    // From the topology: RESOURCE_EXHAUSTED, so the provisioner tries another node's zone.
    let mut far = create_req("far", 1);
    far.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![topo("compute-only-az")],
        preferred: vec![topo("compute-only-az")],
    });
    let e = ctl.create_volume(far).await;
    assert!(
        matches!(&e, Err(CsiError::ResourceExhausted(m)) if m.contains("compute-only-az")),
        "{e:?}"
    );
    // An unknown volume type: the class is wrong.
    let mut typed = create_req("typed", 1);
    typed.parameters = params(&[("type", "no-such-type")]);
    let e = ctl.create_volume(typed).await;
    assert!(
        matches!(&e, Err(CsiError::InvalidArgument(m)) if m.contains("no-such-type")),
        "{e:?}"
    );

    // ignore-volume-az: the request's preferred topology, whatever Cinder chose.
    let c2 = cloud("[BlockStorage]\nignore-volume-az = true\n").await?;
    let ctl2 = c2.controller("k1");
    let mut req2 = create_req("pref", 1);
    req2.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![],
        preferred: vec![topo("compute-az-9")],
    });
    req2.parameters = params(&[("availability", &zone)]);
    let v2 = ctl2.create_volume(req2).await?.volume.ok_or("none")?;
    assert_eq!(v2.accessible_topology, vec![topo("compute-az-9")]);

    // Without topology, none is reported.
    let ctl3 = c.controller_with(|cfg| cfg.with_topology = false, "k1");
    let v3 = ctl3
        .create_volume(create_req("flat", 1))
        .await?
        .volume
        .ok_or("none")?;
    assert!(v3.accessible_topology.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_lost_create_answer_makes_no_second_volume() -> R {
    let c = cloud("").await?;
    c.sim.app().fault_engine().add(FaultRule {
        id: None,
        method: Some("POST".into()),
        path: "/volumes$".into(),
        body: Some("lost-answer".into()),
        status: 502,
        probability: 1.0,
        count: Some(1),
        skip: 0,
        retry_after: None,
        after_side_effect: true,
        build_error: false,
        message: None,
    })?;
    let seen = Arc::new(Creates::default());
    let ctl = Controller::new(
        c.session.clone().with_observer(seen.clone()),
        Arc::new(DriverConfig::new("k1", Default::default())),
    );
    let a = ctl
        .create_volume(create_req("lost-answer", 1))
        .await?
        .volume
        .ok_or("none")?;
    let b = ctl
        .create_volume(create_req("lost-answer", 1))
        .await?
        .volume
        .ok_or("none")?;
    assert_eq!(a.volume_id, b.volume_id);
    let all = c
        .session
        .block_storage()
        .list_volumes(&VolumeFilter::default())
        .await?;
    assert_eq!(all.len(), 1, "{all:?}");
    let statuses = seen.0.lock().map(|v| v.clone()).unwrap_or_default();
    assert_eq!(
        statuses,
        vec![Some(502)],
        "one create, whose answer was lost"
    );
    Ok(())
}

/// The statuses of the volume creates a session sent.
#[derive(Default)]
struct Creates(Mutex<Vec<Option<u16>>>);

impl CallObserver for Creates {
    fn observe(&self, call: &CallRecord<'_>) {
        if call.operation == "volume.create"
            && let Ok(mut v) = self.0.lock()
        {
            v.push(call.status);
        }
    }
}

#[tokio::test]
async fn publish_attaches_through_nova_and_unpublish_detaches() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let node = c.server("node-a", "10.40.0.0/24").await?;
    let other = c.server("node-b", "10.41.0.0/24").await?;
    let vol = ctl
        .create_volume(create_req("pv-a", 1))
        .await?
        .volume
        .ok_or("none")?;
    let publish = |volume: &str, node: &str| csi::ControllerPublishVolumeRequest {
        volume_id: volume.into(),
        node_id: node.into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    let p = ctl
        .controller_publish_volume(publish(&vol.volume_id, &node))
        .await?;
    let cinder = c.session.block_storage();
    let v = cinder.get_volume(&vol.volume_id).await?.ok_or("gone")?;
    assert_eq!(v.status, VolumeStatus::InUse);
    assert_eq!(v.attachments.len(), 1);
    assert_eq!(v.attachments[0].server_id, node);
    let device = v.attachments[0].device.clone().unwrap_or_default();
    assert_eq!(p.publish_context.get("DevicePath"), Some(&device));
    // Again: nothing new, the same answer.
    let again = ctl
        .controller_publish_volume(publish(&vol.volume_id, &node))
        .await?;
    assert_eq!(again.publish_context, p.publish_context);
    let attachments = c.session.compute().list_volume_attachments(&node).await?;
    assert_eq!(attachments.len(), 1);

    // Another node: the volume is not multiattach.
    let e = ctl
        .controller_publish_volume(publish(&vol.volume_id, &other))
        .await;
    assert!(matches!(e, Err(CsiError::FailedPrecondition(_))), "{e:?}");
    // Unknown volume, unknown node: NOT_FOUND.
    let e = ctl
        .controller_publish_volume(publish("00000000-0000-0000-0000-000000000000", &node))
        .await;
    assert!(matches!(e, Err(CsiError::NotFound(_))), "{e:?}");
    let e = ctl
        .controller_publish_volume(publish(
            &vol.volume_id,
            "00000000-0000-0000-0000-000000000000",
        ))
        .await;
    assert!(matches!(e, Err(CsiError::NotFound(_))), "{e:?}");

    // ListVolumes shows where it is published; deleting it now is refused.
    let l = ctl.list_volumes(csi::ListVolumesRequest::default()).await?;
    let entry = l
        .entries
        .iter()
        .find(|e| {
            e.volume
                .as_ref()
                .is_some_and(|v| v.volume_id == vol.volume_id)
        })
        .ok_or("not listed")?;
    assert_eq!(
        entry.status.as_ref().map(|s| s.published_node_ids.clone()),
        Some(vec![node.clone()])
    );
    let del = csi::DeleteVolumeRequest {
        volume_id: vol.volume_id.clone(),
        ..Default::default()
    };
    let e = ctl.delete_volume(del.clone()).await;
    assert!(matches!(e, Err(CsiError::FailedPrecondition(_))), "{e:?}");

    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        node_id: node.clone(),
        ..Default::default()
    };
    ctl.controller_unpublish_volume(unpublish.clone()).await?;
    let v = cinder.get_volume(&vol.volume_id).await?.ok_or("gone")?;
    assert_eq!(
        (v.status, v.attachments.len()),
        (VolumeStatus::Available, 0)
    );
    ctl.controller_unpublish_volume(unpublish).await?;

    ctl.delete_volume(del.clone()).await?;
    ctl.delete_volume(del).await?;
    let left = cinder.get_volume(&vol.volume_id).await?;
    assert!(
        left.as_ref()
            .is_none_or(|v| v.status == VolumeStatus::Deleting),
        "{left:?}"
    );
    Ok(())
}

#[tokio::test]
async fn list_volumes_pages_with_tokens_and_refuses_a_bad_one() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(
            ctl.create_volume(create_req(&format!("l{i}"), 1))
                .await?
                .volume
                .ok_or("none")?
                .volume_id,
        );
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut calls = 0;
    loop {
        let page = ctl
            .list_volumes(csi::ListVolumesRequest {
                max_entries: 2,
                starting_token: token.clone(),
            })
            .await?;
        calls += 1;
        assert!(page.entries.len() <= 2);
        seen.extend(
            page.entries
                .iter()
                .filter_map(|e| e.volume.as_ref().map(|v| v.volume_id.clone())),
        );
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    seen.sort();
    made.sort();
    assert_eq!((seen, calls), (made, 3));
    let e = ctl
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 2,
            starting_token: "no-such-marker".into(),
        })
        .await;
    assert!(matches!(e, Err(CsiError::Aborted(_))), "{e:?}");
    let e = ctl
        .list_volumes(csi::ListVolumesRequest {
            max_entries: -1,
            starting_token: String::new(),
        })
        .await;
    assert!(matches!(e, Err(CsiError::InvalidArgument(_))), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn expand_grows_an_available_volume_and_reports_node_expansion() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let vol = ctl
        .create_volume(create_req("grow", 1))
        .await?
        .volume
        .ok_or("none")?;
    c.available(&vol.volume_id).await?;
    let req = csi::ControllerExpandVolumeRequest {
        volume_id: vol.volume_id.clone(),
        capacity_range: support::gib(3),
        ..Default::default()
    };
    let r = ctl.controller_expand_volume(req.clone()).await?;
    assert_eq!(
        (r.capacity_bytes, r.node_expansion_required),
        (3 * GIB, true)
    );
    let v = c
        .session
        .block_storage()
        .get_volume(&vol.volume_id)
        .await?
        .ok_or("gone")?;
    assert_eq!(v.size, 3);
    // Asked again (the answer was lost): already that size, no second extend.
    let again = ctl.controller_expand_volume(req).await?;
    assert_eq!(again.capacity_bytes, 3 * GIB);
    let e = ctl
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: "00000000-0000-0000-0000-000000000000".into(),
            capacity_range: support::gib(3),
            ..Default::default()
        })
        .await;
    assert!(matches!(e, Err(CsiError::NotFound(_))), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn expand_grows_an_attached_volume() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let node = c.server("node-a", "10.40.0.0/24").await?;
    let vol = ctl
        .create_volume(create_req("grow-online", 1))
        .await?
        .volume
        .ok_or("none")?;
    ctl.controller_publish_volume(csi::ControllerPublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        node_id: node,
        volume_capability: Some(mount_cap()),
        ..Default::default()
    })
    .await?;
    let r = ctl
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: vol.volume_id.clone(),
            capacity_range: support::gib(2),
            ..Default::default()
        })
        .await?;
    assert_eq!(r.capacity_bytes, 2 * GIB);
    let v = c
        .session
        .block_storage()
        .wait_for_status(&vol.volume_id, &[VolumeStatus::InUse], deadline())
        .await?;
    assert_eq!(v.size, 2);
    Ok(())
}

#[tokio::test]
async fn validate_confirms_only_the_single_node_writer_mode() -> R {
    use csi::volume_capability::access_mode::Mode;
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let vol = ctl
        .create_volume(create_req("v", 1))
        .await?
        .volume
        .ok_or("none")?;
    let mut req = csi::ValidateVolumeCapabilitiesRequest {
        volume_id: vol.volume_id.clone(),
        volume_capabilities: vec![mount_cap()],
        ..Default::default()
    };
    let ok = ctl.validate_volume_capabilities(req.clone()).await?;
    assert_eq!(
        ok.confirmed.map(|c| c.volume_capabilities),
        Some(vec![mount_cap()])
    );
    if let Some(m) = req.volume_capabilities[0].access_mode.as_mut() {
        m.mode = Mode::MultiNodeMultiWriter as i32;
    }
    let no = ctl.validate_volume_capabilities(req.clone()).await?;
    assert!(no.confirmed.is_none() && !no.message.is_empty());
    req.volume_id = "00000000-0000-0000-0000-000000000000".into();
    let e = ctl.validate_volume_capabilities(req).await;
    assert!(matches!(e, Err(CsiError::NotFound(_))), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn a_missing_content_source_is_not_found() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    for source in [csi::volume_content_source::Type::Volume(
        csi::volume_content_source::VolumeSource {
            volume_id: "00000000-0000-0000-0000-000000000000".into(),
        },
    )] {
        let mut req = create_req("from-nothing", 1);
        req.volume_content_source = Some(csi::VolumeContentSource {
            r#type: Some(source),
        });
        let e = ctl.create_volume(req).await;
        assert!(matches!(e, Err(CsiError::NotFound(_))), "{e:?}");
    }
    Ok(())
}

#[tokio::test]
async fn snapshots_are_idempotent_by_name_and_restore_into_a_volume() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let vol = ctl
        .create_volume(create_req("src", 1))
        .await?
        .volume
        .ok_or("none")?;
    c.available(&vol.volume_id).await?;
    let snap_req = csi::CreateSnapshotRequest {
        source_volume_id: vol.volume_id.clone(),
        name: "snap-1".into(),
        parameters: params(&[("csi.storage.k8s.io/volumesnapshot/name", "s1")]),
        ..Default::default()
    };
    let s = ctl
        .create_snapshot(snap_req.clone())
        .await?
        .snapshot
        .ok_or("none")?;
    assert!(s.ready_to_use);
    assert_eq!(
        (s.size_bytes, s.source_volume_id.as_str()),
        (GIB, vol.volume_id.as_str())
    );
    assert!(s.creation_time.is_some());
    let again = ctl
        .create_snapshot(snap_req)
        .await?
        .snapshot
        .ok_or("none")?;
    assert_eq!(again.snapshot_id, s.snapshot_id);
    let snap = c
        .session
        .block_storage()
        .get_snapshot(&s.snapshot_id)
        .await?
        .ok_or("gone")?;
    assert_eq!(
        snap.metadata.get(CLUSTER_KEY).map(String::as_str),
        Some("k1")
    );

    // Same name, another volume: ALREADY_EXISTS.
    let other = ctl
        .create_volume(create_req("other", 1))
        .await?
        .volume
        .ok_or("none")?;
    let e = ctl
        .create_snapshot(csi::CreateSnapshotRequest {
            source_volume_id: other.volume_id.clone(),
            name: "snap-1".into(),
            ..Default::default()
        })
        .await;
    assert!(matches!(e, Err(CsiError::AlreadyExists(_))), "{e:?}");

    // Listed by id, by source volume, and in pages.
    let by_id = ctl
        .list_snapshots(csi::ListSnapshotsRequest {
            snapshot_id: s.snapshot_id.clone(),
            ..Default::default()
        })
        .await?;
    assert_eq!(by_id.entries.len(), 1);
    let by_src = ctl
        .list_snapshots(csi::ListSnapshotsRequest {
            source_volume_id: other.volume_id.clone(),
            ..Default::default()
        })
        .await?;
    assert!(by_src.entries.is_empty());

    // Restore into a larger volume: the source is echoed and a resize asked of the node.
    let mut restore = create_req("restored", 2);
    restore.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: s.snapshot_id.clone(),
            },
        )),
    });
    let r = ctl.create_volume(restore).await?.volume.ok_or("none")?;
    assert_eq!(
        r.volume_context
            .get(kos_csi::RESIZE_REQUIRED_KEY)
            .map(String::as_str),
        Some("true")
    );
    assert!(r.content_source.is_some());

    ctl.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: "00000000-0000-0000-0000-000000000000".into(),
        ..Default::default()
    })
    .await?;

    // Deleted, then deleted again while Cinder is still at it (a CO's retry): Cinder would refuse a
    // second delete of a `deleting` snapshot, the driver answers success.
    let mut slow = c.sim.app().latency();
    slow.snapshot_delete_secs = 1e6;
    c.sim.app().set_latency(slow);
    for _ in 0..2 {
        ctl.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: s.snapshot_id.clone(),
            ..Default::default()
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn novas_refusal_of_an_attach_is_surfaced_with_its_message() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    let node = c.server("node-r", "10.42.0.0/24").await?;
    let vol = ctl
        .create_volume(create_req("refused", 1))
        .await?
        .volume
        .ok_or("none")?;
    c.sim.app().fault_engine().add(FaultRule {
        id: None,
        method: Some("POST".into()),
        path: "/os-volume_attachments$".into(),
        body: None,
        status: 403,
        probability: 1.0,
        count: Some(1),
        skip: 0,
        retry_after: None,
        after_side_effect: false,
        build_error: false,
        message: Some(
            "The maximum allowed number of disk devices (2) to attach to a single instance has been exceeded."
                .into(),
        ),
    })?;
    let e = ctl
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: vol.volume_id.clone(),
            node_id: node.clone(),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await;
    match e {
        Err(CsiError::ResourceExhausted(m)) => assert!(m.contains("maximum allowed"), "{m}"),
        other => return Err(format!("want RESOURCE_EXHAUSTED, got {other:?}").into()),
    }
    let v = c
        .session
        .block_storage()
        .get_volume(&vol.volume_id)
        .await?
        .ok_or("gone")?;
    assert_eq!(
        (v.status, v.attachments.len()),
        (VolumeStatus::Available, 0)
    );
    Ok(())
}

#[tokio::test]
async fn calls_and_the_cloud_calls_behind_them_are_counted() -> R {
    use kos_csi::csi::controller_server::Controller as Grpc;
    let c = cloud("").await?;
    let m = Arc::new(kos_csi::metrics::Metrics::new());
    let ctl = Controller::new(
        c.session.clone().with_observer(m.clone()),
        Arc::new(DriverConfig::new("k1", Default::default())),
    )
    .with_metrics(m.clone());
    Grpc::create_volume(&ctl, tonic::Request::new(create_req("m", 1))).await?;
    let e = Grpc::create_volume(&ctl, tonic::Request::new(create_req("m", 2))).await;
    assert_eq!(e.err().map(|s| s.code()), Some(tonic::Code::AlreadyExists));
    let text = m.encode();
    for want in [
        r#"csi_rpc_total{rpc="CreateVolume",code="ok"} 1"#,
        r#"csi_rpc_total{rpc="CreateVolume",code="already_exists"} 1"#,
        r#"openstack_api_requests_total{request="volume_create"} 1"#,
    ] {
        assert!(text.contains(want), "{want} not in\n{text}");
    }
    Ok(())
}

#[tokio::test]
async fn a_call_on_a_volume_already_being_worked_on_is_aborted() -> R {
    let c = cloud("").await?;
    let ctl = c.controller("k1");
    // Both start before either reaches the cloud: the second finds the name taken.
    let (a, b) = tokio::join!(
        ctl.create_volume(create_req("twice", 1)),
        ctl.create_volume(create_req("twice", 1))
    );
    assert!(a.is_ok(), "{a:?}");
    assert!(matches!(b, Err(CsiError::Aborted(_))), "{b:?}");
    // Once the first ended, the name is free again: the same volume.
    let again = ctl.create_volume(create_req("twice", 1)).await?;
    assert_eq!(
        again.volume.map(|v| v.volume_id),
        a?.volume.map(|v| v.volume_id)
    );
    let all = c
        .session
        .block_storage()
        .list_volumes(&VolumeFilter::default())
        .await?;
    assert_eq!(all.len(), 1);
    Ok(())
}

#[tokio::test]
async fn without_microversions_volumes_are_still_made_and_attached() -> R {
    let c = cloud("[BlockStorage]\nignore-volume-microversion = true\n").await?;
    let ctl = c.controller("k1");
    let node = c.server("node-old", "10.43.0.0/24").await?;
    let v = ctl
        .create_volume(create_req("old-cloud", 1))
        .await?
        .volume
        .ok_or("none")?;
    let again = ctl
        .create_volume(create_req("old-cloud", 1))
        .await?
        .volume
        .ok_or("none")?;
    assert_eq!(v.volume_id, again.volume_id);
    ctl.controller_publish_volume(csi::ControllerPublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: node,
        volume_capability: Some(mount_cap()),
        ..Default::default()
    })
    .await?;
    // Growing it attached needs 3.42: refused, and the volume keeps its size.
    let e = ctl
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            capacity_range: support::gib(2),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(
            &e,
            Err(CsiError::Cloud {
                source: kos_cloud::CloudError::Invalid { .. },
                ..
            })
        ),
        "{e:?}"
    );
    let now = c
        .session
        .block_storage()
        .get_volume(&v.volume_id)
        .await?
        .ok_or("gone")?;
    assert_eq!(now.size, 1);
    Ok(())
}
