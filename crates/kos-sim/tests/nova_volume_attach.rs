//! Nova's volume attach and detach as a CSI driver's ControllerPublish/Unpublish meet them: the checks
//! Nova 34 makes (already attached, multiattach by type and microversion, `cross_az_attach`,
//! `max_disk_devices_to_attach`, the root disk) and the states Cinder shows meanwhile (`attaching`,
//! `in-use`, `detaching`). Polls are bounded loops; nothing asserts on timing.

mod common;

use std::time::Duration;

use common::{Harness, Resp};
use kos_sim::SimConfig;
use serde_json::{Value, json};

const P: &str = "/compute/v2.1";
const LATEST: Option<(&str, &str)> = Some(("compute", "latest"));

fn message(r: &Resp) -> String {
    r.json
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(|v| v["message"].as_str())
        .unwrap_or("")
        .to_owned()
}

fn vol_url(h: &Harness, id: &str) -> String {
    format!("/volume/v3/{}/volumes/{id}", h.project_id)
}

/// An ACTIVE server with no network, in `zone` when given.
async fn server(h: &Harness, name: &str, zone: Option<&str>) -> String {
    let img = h
        .call("GET", "/image/v2/images?name=cirros-0.6.2", None, None)
        .await
        .json["images"][0]["id"]
        .as_str()
        .expect("seeded image")
        .to_owned();
    let mut s = json!({"name": name, "imageRef": img, "flavorRef": "1", "networks": "none"});
    if let Some(z) = zone {
        s["availability_zone"] = json!(z);
    }
    let r = h
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(json!({ "server": s })),
            LATEST,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    let id = r.json["server"]["id"].as_str().expect("id").to_owned();
    for _ in 0..2000 {
        let s = h
            .call("GET", &format!("{P}/servers/{id}"), None, LATEST)
            .await;
        if s.json["server"]["status"] == "ACTIVE" {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("server {id} never became ACTIVE");
}

async fn volume(h: &Harness, spec: Value) -> String {
    let r = h
        .call(
            "POST",
            &format!("/volume/v3/{}/volumes", h.project_id),
            Some(json!({ "volume": spec })),
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    let id = r.json["volume"]["id"].as_str().expect("id").to_owned();
    wait_volume(h, &id, "available").await;
    id
}

async fn wait_volume(h: &Harness, id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..2000 {
        let r = h.call("GET", &vol_url(h, id), None, None).await;
        if r.json["volume"]["status"] == status {
            return r.json["volume"].clone();
        }
        last = r.json;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("volume {id} never reached {status}: {last}");
}

async fn attach(h: &Harness, server: &str, vol: &str, mv: Option<(&str, &str)>) -> Resp {
    h.call(
        "POST",
        &format!("{P}/servers/{server}/os-volume_attachments"),
        Some(json!({"volumeAttachment": {"volumeId": vol}})),
        mv,
    )
    .await
}

async fn detach(h: &Harness, server: &str, vol: &str) -> Resp {
    h.call(
        "DELETE",
        &format!("{P}/servers/{server}/os-volume_attachments/{vol}"),
        None,
        LATEST,
    )
    .await
}

async fn attachments(h: &Harness, server: &str) -> Vec<Value> {
    h.call(
        "GET",
        &format!("{P}/servers/{server}/os-volume_attachments"),
        None,
        LATEST,
    )
    .await
    .json["volumeAttachments"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn attach_then_detach_passes_through_cinders_states() {
    let h = Harness::new().await;
    let sid = server(&h, "a", None).await;
    let vid = volume(&h, json!({"size": 1})).await;

    let r = attach(&h, &sid, &vid, LATEST).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["volumeAttachment"]["device"], "/dev/vdb");
    // Nova lists the mapping at once; Cinder lists the attachment once it is attached.
    assert_eq!(attachments(&h, &sid).await.len(), 1);
    let v = wait_volume(&h, &vid, "in-use").await;
    assert_eq!(v["attachments"][0]["server_id"], sid.as_str());
    assert_eq!(v["attachments"][0]["device"], "/dev/vdb");
    assert_eq!(v["multiattach"], false);

    // In use: no delete; no second attach to this or another server.
    let del = h.call("DELETE", &vol_url(&h, &vid), None, None).await;
    assert_eq!(del.status, 400);
    let r = attach(&h, &sid, &vid, LATEST).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        format!("Invalid volume: volume {vid} is already attached to instances: {sid}")
    );
    let other = server(&h, "b", None).await;
    assert_eq!(attach(&h, &other, &vid, LATEST).await.status, 400);

    // Detach: not from a server it is not on; then detaching, then available and unlisted.
    let r = detach(&h, &other, &vid).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        message(&r),
        format!("Instance {other} is not attached to volume {vid}")
    );
    assert_eq!(detach(&h, &sid, &vid).await.status, 202);
    let v = wait_volume(&h, &vid, "available").await;
    assert_eq!(v["attachments"], json!([]));
    assert!(attachments(&h, &sid).await.is_empty());

    // Nova's own checks before Cinder is asked.
    let r = h
        .call(
            "POST",
            &format!("{P}/servers/{sid}/os-volume_attachments"),
            Some(json!({"volumeAttachment": {"volumeId": vid, "device": "vdb"}})),
            LATEST,
        )
        .await;
    assert_eq!(r.status, 400);
    // Nova 34's schema, as minicloud answered.
    assert_eq!(
        message(&r),
        "Invalid input for field/attribute device. Value: vdb. 'vdb' does not match '(^/dev/x{0,1}[a-z]{0,1}d{0,1})([a-z]+)[0-9]*$'"
    );
    let ghost = "3c8d8f1e-2d8f-4a5e-9b1e-2f2b7f1f0a11";
    let r = attach(&h, &sid, ghost, LATEST).await;
    assert_eq!(r.status, 404);
    assert_eq!(message(&r), format!("Volume {ghost} could not be found."));
}

#[tokio::test]
async fn a_pending_attach_or_detach_holds_the_volume() {
    // Attaches and detaches that never finish: the states in between are stable to look at.
    let mut cfg = SimConfig::fast();
    cfg.latency.volume_attach_secs = 1e9;
    let h = Harness::with_config(cfg).await;
    let sid = server(&h, "a", None).await;
    let vid = volume(&h, json!({"size": 1})).await;
    assert_eq!(attach(&h, &sid, &vid, LATEST).await.status, 200);
    // `reserved` until the compute host sends its connector (half-way), as minicloud shows it.
    let v = wait_volume(&h, &vid, "reserved").await;
    assert_eq!(
        v["attachments"],
        json!([]),
        "Cinder lists attached ones only"
    );
    assert_eq!(
        h.call("DELETE", &vol_url(&h, &vid), None, None)
            .await
            .status,
        400
    );
    let r = detach(&h, &sid, &vid).await;
    assert_eq!(r.status, 400);
    let m = message(&r);
    assert!(
        m.starts_with("Invalid volume: Invalid input received: Invalid volume: Unable to detach volume. Volume status must be 'in-use' and attach_status must be 'attached' to detach. (HTTP 400) (Request-ID: req-"),
        "{m}"
    );

    // A volume attached at once (as at boot), then a detach that does not finish.
    let v2 = volume(&h, json!({"size": 1})).await;
    kos_sim::cinder::attach(&mut h.sim.app().cloud(), &v2, "elsewhere", "/dev/vdb")
        .expect("attach");
    let other = server(&h, "b", None).await;
    // Cinder refuses a volume already in use by a server Nova does not know of (its 400, wrapped).
    let r = attach(&h, &other, &v2, LATEST).await;
    assert_eq!(r.status, 400);
    assert!(
        message(&r).starts_with(&format!(
            "Invalid input received: Invalid volume: Volume {v2} status must be available or downloading to reserve, but the current status is in-use. (HTTP 400)"
        )),
        "{}",
        message(&r)
    );
}

#[tokio::test]
async fn multiattach_needs_the_type_and_2_60() {
    let h = Harness::new().await;
    let (a, b) = (server(&h, "a", None).await, server(&h, "b", None).await);
    let vid = volume(&h, json!({"size": 1, "volume_type": "multiattach"})).await;
    let r = attach(&h, &a, &vid, Some(("compute", "2.59"))).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "Multiattach volumes are only supported starting with compute API version 2.60."
    );
    assert_eq!(
        attach(&h, &a, &vid, Some(("compute", "2.60"))).await.status,
        200
    );
    wait_volume(&h, &vid, "in-use").await;
    let r = attach(&h, &a, &vid, LATEST).await;
    assert_eq!(
        message(&r),
        format!("Invalid volume: volume {vid} already attached")
    );
    assert_eq!(attach(&h, &b, &vid, LATEST).await.status, 200);
    let v = wait_volume(&h, &vid, "in-use").await;
    let mut on: Vec<&str> = v["attachments"]
        .as_array()
        .expect("attachments")
        .iter()
        .filter_map(|x| x["server_id"].as_str())
        .collect();
    on.sort_unstable();
    let mut want = vec![a.as_str(), b.as_str()];
    want.sort_unstable();
    // The second attach made it `attaching` again; `in-use` now means both are attached.
    assert_eq!(on, want);
    assert_eq!(detach(&h, &a, &vid).await.status, 202);
    for _ in 0..2000 {
        let v = h.call("GET", &vol_url(&h, &vid), None, None).await.json;
        if v["volume"]["attachments"].as_array().map(Vec::len) == Some(1)
            && v["volume"]["status"] == "in-use"
        {
            assert_eq!(v["volume"]["attachments"][0]["server_id"], b.as_str());
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the volume never stayed in-use on the other server alone");
}

#[tokio::test]
async fn cross_az_attach_false_keeps_volumes_in_their_servers_zone() {
    let h = Harness::with_config(SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        cross_az_attach: false,
        ..SimConfig::fast()
    })
    .await;
    let sid = server(&h, "a", Some("az1")).await;
    let far = volume(&h, json!({"size": 1, "availability_zone": "az2"})).await;
    let r = attach(&h, &sid, &far, LATEST).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        format!(
            "Invalid volume: Instance {sid} and volume {far} are not in the same availability_zone. Instance is in az1. Volume is in az2"
        )
    );
    let near = volume(&h, json!({"size": 1, "availability_zone": "az1"})).await;
    assert_eq!(attach(&h, &sid, &near, LATEST).await.status, 200);

    // The default (True) attaches across zones.
    let h = Harness::with_config(SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        ..SimConfig::fast()
    })
    .await;
    let sid = server(&h, "a", Some("az1")).await;
    let far = volume(&h, json!({"size": 1, "availability_zone": "az2"})).await;
    assert_eq!(attach(&h, &sid, &far, LATEST).await.status, 200);
}

#[tokio::test]
async fn max_disk_devices_counts_the_root_disk() {
    let h = Harness::with_config(SimConfig {
        max_disk_devices_to_attach: 2,
        ..SimConfig::fast()
    })
    .await;
    let sid = server(&h, "a", None).await;
    let (v1, v2) = (
        volume(&h, json!({"size": 1})).await,
        volume(&h, json!({"size": 1})).await,
    );
    assert_eq!(attach(&h, &sid, &v1, LATEST).await.status, 200);
    let r = attach(&h, &sid, &v2, LATEST).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        message(&r),
        "The maximum allowed number of disk devices (2) to attach to a single instance has been exceeded."
    );
    assert_eq!(
        h.call("GET", &vol_url(&h, &v2), None, None).await.json["volume"]["status"],
        "available",
        "a refused attach leaves the volume alone"
    );
}

#[tokio::test]
async fn cross_az_attach_false_applies_to_a_servers_boot_volumes() {
    let h = Harness::with_config(SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        volume_zones: vec!["az1".into(), "az2".into(), "nova".into()],
        cross_az_attach: false,
        ..SimConfig::fast()
    })
    .await;
    let img = h
        .call("GET", "/image/v2/images?name=cirros-0.6.2", None, None)
        .await
        .json["images"][0]["id"]
        .as_str()
        .expect("image")
        .to_owned();
    let vol = volume(
        &h,
        json!({"size": 1, "availability_zone": "az2", "imageRef": img}),
    )
    .await;
    let boot = |zone: Option<&str>| {
        let mut s = json!({"name": "bfv", "flavorRef": "1", "networks": "none",
            "block_device_mapping_v2": [{"boot_index": 0, "uuid": vol, "source_type": "volume",
                "destination_type": "volume"}]});
        if let Some(z) = zone {
            s["availability_zone"] = json!(z);
        }
        json!({ "server": s })
    };
    let r = h
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(boot(Some("az1"))),
            LATEST,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "The availability zone between the server and its attached volumes do not match: Server and volumes are not in the same availability zone. Server is in: az1. Volumes are in: az2."
    );
    // No zone asked: the server goes to its volume's.
    let r = h
        .call("POST", &format!("{P}/servers"), Some(boot(None)), LATEST)
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    let id = r.json["server"]["id"].as_str().expect("id").to_owned();
    let mut zone = Value::Null;
    for _ in 0..2000 {
        let s = h
            .call("GET", &format!("{P}/servers/{id}"), None, LATEST)
            .await
            .json;
        if s["server"]["status"] == "ACTIVE" {
            zone = s["server"]["OS-EXT-AZ:availability_zone"].clone();
            break;
        }
        assert_ne!(s["server"]["status"], "ERROR", "{s}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(zone, "az2", "ACTIVE in its volume's zone");

    // A volume Nova makes is asked for in the server's zone, which Cinder may lack.
    let h = Harness::with_config(SimConfig {
        zones: vec!["az1".into()],
        volume_zones: vec!["nova".into()],
        cross_az_attach: false,
        ..SimConfig::fast()
    })
    .await;
    let img = h
        .call("GET", "/image/v2/images?name=cirros-0.6.2", None, None)
        .await
        .json["images"][0]["id"]
        .as_str()
        .expect("image")
        .to_owned();
    let r = h
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(
                json!({"server": {"name": "bfv", "flavorRef": "1", "networks": "none",
                "block_device_mapping_v2": [{"boot_index": 0, "uuid": img, "source_type": "image",
                    "destination_type": "volume", "volume_size": 1}]}}),
            ),
            LATEST,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    let id = r.json["server"]["id"].as_str().expect("id").to_owned();
    let s = h
        .call("GET", &format!("{P}/servers/{id}"), None, LATEST)
        .await
        .json;
    assert_eq!(s["server"]["status"], "ERROR");
    assert!(
        s["server"]["fault"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Availability zone 'az1' is invalid.")),
        "{s}"
    );
}

#[tokio::test]
async fn max_disk_devices_holds_at_boot_too() {
    let h = Harness::with_config(SimConfig {
        max_disk_devices_to_attach: 2,
        ..SimConfig::fast()
    })
    .await;
    let img = h
        .call("GET", "/image/v2/images?name=cirros-0.6.2", None, None)
        .await
        .json["images"][0]["id"]
        .as_str()
        .expect("image")
        .to_owned();
    let boot = |blanks: usize| {
        let bdms: Vec<Value> = (0..blanks)
            .map(
                |_| json!({"source_type": "blank", "destination_type": "volume", "volume_size": 1}),
            )
            .collect();
        json!({"server": {"name": "disks", "imageRef": img, "flavorRef": "1", "networks": "none",
            "block_device_mapping_v2": bdms}})
    };
    // The root disk and two volumes: three disks, over the limit; the build aborts.
    let r = h
        .call("POST", &format!("{P}/servers"), Some(boot(2)), LATEST)
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    let id = r.json["server"]["id"].as_str().expect("id");
    let s = h
        .call("GET", &format!("{P}/servers/{id}"), None, LATEST)
        .await
        .json;
    assert_eq!(s["server"]["status"], "ERROR");
    assert_eq!(
        s["server"]["fault"]["message"],
        format!(
            "Build of instance {id} aborted: The maximum allowed number of disk devices (2) to attach to a single instance has been exceeded."
        )
    );
    // The root disk and one volume fit.
    let r = h
        .call("POST", &format!("{P}/servers"), Some(boot(1)), LATEST)
        .await;
    let id = r.json["server"]["id"].as_str().expect("id").to_owned();
    let mut status = Value::Null;
    for _ in 0..2000 {
        status = h
            .call("GET", &format!("{P}/servers/{id}"), None, LATEST)
            .await
            .json["server"]["status"]
            .clone();
        if status != "BUILD" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(status, "ACTIVE");
}
