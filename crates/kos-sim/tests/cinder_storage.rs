//! What a CSI driver drives in Cinder, as strict as Cinder 29: volume types (by name or id, multiattach
//! from the type only), snapshots (state machine, force, quotas, filters, paging), volumes from a
//! snapshot or a volume (size, zone, type), a delete refused while snapshots remain unless cascaded, and
//! extend (states by microversion). Polls are bounded loops; nothing asserts on timing.

mod common;

use std::time::Duration;

use common::{Harness, Resp};
use kos_sim::SimConfig;
use serde_json::{Value, json};

fn url(h: &Harness, rest: &str) -> String {
    format!("/volume/v3/{}{rest}", h.project_id)
}

fn message(r: &Resp) -> String {
    r.json
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(|v| v["message"].as_str())
        .unwrap_or("")
        .to_owned()
}

async fn create_volume(h: &Harness, spec: Value) -> Resp {
    h.call(
        "POST",
        &url(h, "/volumes"),
        Some(json!({ "volume": spec })),
        None,
    )
    .await
}

/// Polls `/{kind}s/{id}` until its status is `status` (bounded; no timing assertion).
async fn wait(h: &Harness, kind: &str, id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..2000 {
        let r = h
            .call("GET", &url(h, &format!("/{kind}s/{id}")), None, None)
            .await;
        if r.json[kind]["status"] == status {
            return r.json[kind].clone();
        }
        last = r.json;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{kind} {id} never reached {status}: {last}");
}

async fn wait_gone(h: &Harness, kind: &str, id: &str) {
    for _ in 0..2000 {
        let r = h
            .call("GET", &url(h, &format!("/{kind}s/{id}")), None, None)
            .await;
        if r.status == 404 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{kind} {id} was never removed");
}

async fn available_volume(h: &Harness, spec: Value) -> String {
    let r = create_volume(h, spec).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let id = r.json["volume"]["id"].as_str().expect("id").to_owned();
    wait(h, "volume", &id, "available").await;
    id
}

async fn snapshot(h: &Harness, body: Value, mv: Option<(&str, &str)>) -> Resp {
    h.call(
        "POST",
        &url(h, "/snapshots"),
        Some(json!({ "snapshot": body })),
        mv,
    )
    .await
}

#[tokio::test]
async fn volume_types_come_from_the_config_and_decide_multiattach() {
    let mut cfg = SimConfig::fast();
    cfg.volume_types.push(kos_sim::config::VolumeTypeConfig {
        name: "gold".into(),
        description: "fast".into(),
        extra_specs: [("volume_backend_name".to_owned(), "gold".to_owned())].into(),
    });
    cfg.volume_types.push(kos_sim::config::VolumeTypeConfig {
        name: "plain".into(),
        description: String::new(),
        extra_specs: Default::default(),
    });
    let h = Harness::with_config(cfg).await;
    let types = h.call("GET", &url(&h, "/types"), None, None).await.json;
    let names: Vec<&str> = types["volume_types"]
        .as_array()
        .expect("types")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["__DEFAULT__", "ssd", "multiattach", "gold", "plain"]
    );
    assert_eq!(types["volume_types"][4]["description"], Value::Null);
    let multi = &types["volume_types"][2];
    // A member sees the user-visible specs only, not the backend name (Cinder's default policy).
    assert_eq!(multi["extra_specs"], json!({"multiattach": "<is> True"}));
    assert!(multi.get("qos_specs_id").is_none());
    let gold = &types["volume_types"][3];
    assert_eq!(gold["description"], "fast");
    assert_eq!(
        gold["extra_specs"],
        json!({}),
        "the backend name is admin-only"
    );

    // By name or by id; the multiattach type makes multiattach volumes.
    let by_id = create_volume(&h, json!({"size": 1, "volume_type": multi["id"]})).await;
    assert_eq!(by_id.status, 202, "{}", by_id.json);
    assert_eq!(by_id.json["volume"]["volume_type"], "multiattach");
    assert_eq!(by_id.json["volume"]["multiattach"], true);
    let plain = create_volume(&h, json!({"size": 1, "volume_type": "gold"})).await;
    assert_eq!(plain.json["volume"]["multiattach"], false);

    // Unknown: a name is named as a name, a UUID as an id (404 both).
    let r = create_volume(&h, json!({"size": 1, "volume_type": "nvme"})).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        message(&r),
        "Volume type with name nvme could not be found."
    );
    let ghost = "3c8d8f1e-2d8f-4a5e-9b1e-2f2b7f1f0a11";
    let r = create_volume(&h, json!({"size": 1, "volume_type": ghost})).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        message(&r),
        format!("Volume type {ghost} could not be found.")
    );

    // The `multiattach` parameter was removed from Cinder: the type decides.
    let r = create_volume(&h, json!({"size": 1, "multiattach": true})).await;
    assert_eq!(r.status, 400);
    assert!(message(&r).starts_with("multiattach parameter has been removed."));
    let r = create_volume(&h, json!({"size": 1, "multiattach": false})).await;
    assert_eq!(r.status, 202);

    // A zone Cinder lacks is a 400 naming it.
    let r = create_volume(&h, json!({"size": 1, "availability_zone": "az9"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(message(&r), "Availability zone 'az9' is invalid.");
}

#[tokio::test]
async fn snapshots_follow_cinders_states_and_rules() {
    let h = Harness::new().await;
    let vid = available_volume(&h, json!({"size": 2, "name": "data"})).await;

    let r = snapshot(
        &h,
        json!({"volume_id": vid, "name": "s1", "metadata": {"k": "v"}}),
        None,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.json);
    let s = &r.json["snapshot"];
    assert_eq!(
        (s["status"].as_str(), s["size"].as_u64()),
        (Some("creating"), Some(2))
    );
    assert!(s.get("user_id").is_none(), "user_id from 3.41");
    let sid = s["id"].as_str().expect("id").to_owned();

    // A snapshot in progress cannot be deleted, nor can its volume.
    let r = h
        .call("DELETE", &url(&h, &format!("/snapshots/{sid}")), None, None)
        .await;
    if r.status == 400 {
        assert_eq!(
            message(&r),
            "Invalid snapshot: Snapshot status must be available or error and must not be part of a group."
        );
    }
    let shown = wait(&h, "snapshot", &sid, "available").await;
    assert_eq!(shown["os-extended-snapshot-attributes:progress"], "100%");
    assert_eq!(
        shown["os-extended-snapshot-attributes:project_id"],
        h.project_id.as_str()
    );
    let del = h
        .call("DELETE", &url(&h, &format!("/volumes/{vid}")), None, None)
        .await;
    assert_eq!(del.status, 400);
    assert!(
        message(&del).contains("have snapshots"),
        "{}",
        message(&del)
    );

    // Limits and quotas count the snapshot and its gigabytes.
    let limits = h.call("GET", &url(&h, "/limits"), None, None).await.json;
    assert_eq!(limits["limits"]["absolute"]["totalSnapshotsUsed"], 1);
    assert_eq!(limits["limits"]["absolute"]["totalGigabytesUsed"], 4);
    let q = h
        .call(
            "GET",
            &url(&h, &format!("/os-quota-sets/{}?usage=true", h.project_id)),
            None,
            None,
        )
        .await
        .json;
    assert_eq!(q["quota_set"]["snapshots"]["in_use"], 1);
    assert_eq!(q["quota_set"]["snapshots___DEFAULT__"]["in_use"], 1);
    assert_eq!(q["quota_set"]["gigabytes___DEFAULT__"]["in_use"], 4);

    // Filters, summary vs detail, paging.
    snapshot(&h, json!({"volume_id": vid, "name": "s2"}), None).await;
    let list = h
        .call("GET", &url(&h, "/snapshots?name=s1"), None, None)
        .await
        .json;
    assert_eq!(list["snapshots"].as_array().map(Vec::len), Some(1));
    assert!(
        list["snapshots"][0]
            .get("os-extended-snapshot-attributes:progress")
            .is_none()
    );
    let page = h
        .call(
            "GET",
            &url(&h, &format!("/snapshots/detail?volume_id={vid}&limit=1")),
            None,
            None,
        )
        .await
        .json;
    assert_eq!(page["snapshots"][0]["name"], "s2", "newest first");
    assert!(
        page["snapshots_links"][0]["href"]
            .as_str()
            .is_some_and(|l| l.contains("marker="))
    );
    let meta = url::form_urlencoded::byte_serialize(br#"{"k": "v"}"#).collect::<String>();
    let by_meta = h
        .call(
            "GET",
            &url(&h, &format!("/snapshots?metadata={meta}")),
            None,
            Some(("volume", "3.22")),
        )
        .await
        .json;
    assert_eq!(by_meta["snapshots"][0]["id"], sid.as_str());
    let r = h
        .call("GET", &url(&h, "/snapshots?marker=nope"), None, None)
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(message(&r), "Snapshot nope could not be found.");

    // Update: name and description only.
    let r = h
        .call(
            "PUT",
            &url(&h, &format!("/snapshots/{sid}")),
            Some(json!({"snapshot": {"size": 9}})),
            None,
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "Invalid input for field/attribute snapshot. Value: {'size': 9}. Additional properties are not allowed ('size' was unexpected)"
    );
    let r = h
        .call(
            "PUT",
            &url(&h, &format!("/snapshots/{sid}")),
            Some(json!({"snapshot": {"name": "renamed"}})),
            None,
        )
        .await;
    assert_eq!(r.json["snapshot"]["name"], "renamed");

    // Unknown volume, bad volume id.
    let r = snapshot(
        &h,
        json!({"volume_id": "3c8d8f1e-2d8f-4a5e-9b1e-2f2b7f1f0a11"}),
        None,
    )
    .await;
    assert_eq!(r.status, 404);
    let r = snapshot(&h, json!({"volume_id": "nope"}), None).await;
    assert_eq!(r.status, 400);

    // A cascade delete takes the snapshots with the volume.
    let s2 = h
        .call("GET", &url(&h, "/snapshots?name=s2"), None, None)
        .await
        .json["snapshots"][0]["id"]
        .as_str()
        .expect("s2")
        .to_owned();
    wait(&h, "snapshot", &s2, "available").await;
    let r = h
        .call(
            "DELETE",
            &url(&h, &format!("/volumes/{vid}?cascade=true")),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    wait_gone(&h, "volume", &vid).await;
    wait_gone(&h, "snapshot", &sid).await;
    wait_gone(&h, "snapshot", &s2).await;
}

#[tokio::test]
async fn an_in_use_volume_needs_force_before_3_66() {
    let h = Harness::new().await;
    let vid = available_volume(&h, json!({"size": 1})).await;
    kos_sim::cinder::attach(&mut h.sim.app().cloud(), &vid, "server-1", "/dev/vdb")
        .expect("attach");
    let r = snapshot(&h, json!({"volume_id": vid}), None).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        format!(
            "Invalid volume: Volume {vid} status must be available, but current status is: in-use."
        )
    );
    let r = snapshot(&h, json!({"volume_id": vid, "force": "yes"}), None).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let r = snapshot(&h, json!({"volume_id": vid}), Some(("volume", "3.66"))).await;
    assert_eq!(r.status, 202, "in-use allowed from 3.66: {}", r.json);
    let r = snapshot(
        &h,
        json!({"volume_id": vid, "force": false}),
        Some(("volume", "3.66")),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(message(&r).starts_with("Since microversion 3.66 the 'force' flag is invalid"));
    let r = snapshot(&h, json!({"volume_id": vid, "force": "maybe"}), None).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn snapshot_quota_is_413() {
    let mut cfg = SimConfig::fast();
    cfg.quotas.snapshots = 1;
    cfg.quotas.gigabytes = 5;
    let h = Harness::with_config(cfg).await;
    let vid = available_volume(&h, json!({"size": 2})).await;
    assert_eq!(
        snapshot(&h, json!({"volume_id": vid}), None).await.status,
        202
    );
    let r = snapshot(&h, json!({"volume_id": vid}), None).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        message(&r),
        "SnapshotLimitExceeded: Maximum number of snapshots allowed (1) exceeded"
    );
    // Volume 2G + snapshot 2G: a 2G volume more is over 5G.
    let r = create_volume(&h, json!({"size": 2})).await;
    assert_eq!(r.status, 413);
}

#[tokio::test]
async fn volumes_copy_a_snapshot_or_a_volume_in_its_zone() {
    let h = Harness::with_config(SimConfig {
        volume_zones: vec!["nova".into(), "other".into()],
        ..SimConfig::fast()
    })
    .await;
    let vid = available_volume(
        &h,
        json!({"size": 2, "availability_zone": "other", "volume_type": "ssd"}),
    )
    .await;
    let sid = snapshot(&h, json!({"volume_id": vid}), None).await.json["snapshot"]["id"]
        .as_str()
        .expect("sid")
        .to_owned();

    wait(&h, "snapshot", &sid, "available").await;

    // No size: the snapshot's; no zone: the source's; no type: the source's.
    let r = create_volume(&h, json!({"snapshot_id": sid})).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let v = &r.json["volume"];
    assert_eq!(
        (
            v["size"].as_u64(),
            v["availability_zone"].as_str(),
            v["volume_type"].as_str(),
            v["snapshot_id"].as_str()
        ),
        (Some(2), Some("other"), Some("ssd"), Some(sid.as_str()))
    );
    let r = create_volume(&h, json!({"snapshot_id": sid, "size": 1})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "Invalid input received: Volume size '1'GB cannot be smaller than the snapshot size 2GB. They must be >= original snapshot size."
    );
    let r = create_volume(&h, json!({"snapshot_id": sid, "availability_zone": "nova"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "Invalid input received: Volume must be in the same availability zone as the snapshot"
    );
    // The seeded types have two backends: `ssd` cannot become `multiattach`.
    let r = create_volume(
        &h,
        json!({"snapshot_id": sid, "volume_type": "multiattach"}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(
        message(&r).contains("requested type is not compatible"),
        "{}",
        message(&r)
    );
    let r = create_volume(&h, json!({"snapshot_id": sid, "source_volid": vid})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "Invalid input received: May specify only one of backup, imageRef, snapshot, source volume"
    );
    let r = create_volume(
        &h,
        json!({"snapshot_id": "3c8d8f1e-2d8f-4a5e-9b1e-2f2b7f1f0a11"}),
    )
    .await;
    assert_eq!(r.status, 404);

    // A clone: the source's size at least, in its zone.
    let r = create_volume(&h, json!({"source_volid": vid, "size": 3})).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!(r.json["volume"]["availability_zone"], "other");
    assert_eq!(r.json["volume"]["source_volid"], vid.as_str());
    let r = create_volume(&h, json!({"source_volid": vid, "size": 1})).await;
    assert_eq!(r.status, 400);
}

/// While the backend grows a volume it stays `extending` at its old size, and a second extend is
/// refused. The backend never finishes here, so no poll races the state (one that did failed in CI).
/// A snapshot still being made is no source yet. Its own cloud, whose backend never finishes it:
/// on the tests' clock `creating` lasts 5 ms, which a loaded machine missed (a 202).
#[tokio::test]
async fn a_snapshot_being_made_is_no_volume_source_yet() {
    let mut cfg = SimConfig::fast();
    cfg.latency.snapshot_create_secs = 1e9;
    let h = Harness::with_config(cfg).await;
    let vid = available_volume(&h, json!({"size": 1})).await;
    let sid = snapshot(&h, json!({"volume_id": vid}), None).await.json["snapshot"]["id"]
        .as_str()
        .expect("sid")
        .to_owned();
    let r = create_volume(&h, json!({"snapshot_id": sid})).await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(
        message(&r),
        "Invalid snapshot: Originating snapshot status must be one of 'available' values"
    );
}

#[tokio::test]
async fn a_volume_being_extended_keeps_its_size_and_refuses_another_extend() {
    let mut cfg = SimConfig::fast();
    cfg.latency.volume_extend_secs = 1e9;
    let h = Harness::with_config(cfg).await;
    let vid = available_volume(&h, json!({"size": 1})).await;
    let path = url(&h, &format!("/volumes/{vid}/action"));
    let extend = |size: u32| {
        h.call(
            "POST",
            &path,
            Some(json!({"os-extend": {"new_size": size}})),
            None,
        )
    };
    let r = extend(2).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let mid = h
        .call("GET", &url(&h, &format!("/volumes/{vid}")), None, None)
        .await;
    assert_eq!(mid.json["volume"]["status"], "extending");
    assert_eq!(
        mid.json["volume"]["size"], 1,
        "the size changes when the backend is done"
    );
    let again = extend(3).await;
    assert_eq!(
        (again.status, message(&again)),
        (
            400,
            format!(
                "Invalid volume: Volume {vid} status must be '{{'status': 'available'}}' to extend, currently extending."
            )
        )
    );
}

#[tokio::test]
async fn extend_goes_through_extending_and_needs_3_42_when_attached() {
    let h = Harness::new().await;
    let vid = available_volume(&h, json!({"size": 1})).await;
    let extend = |size: Value, mv: Option<(&'static str, &'static str)>| {
        let h = &h;
        let path = url(h, &format!("/volumes/{vid}/action"));
        async move {
            h.call(
                "POST",
                &path,
                Some(json!({"os-extend": {"new_size": size}})),
                mv,
            )
            .await
        }
    };
    let r = extend(json!("2"), None).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!(wait(&h, "volume", &vid, "available").await["size"], 2);

    // Cinder 29's schema words, as minicloud answered them.
    for (bad, words) in [
        (
            json!(0),
            "Invalid input for field/attribute new_size. Value: 0. 0 is less than the minimum of 1",
        ),
        (
            json!("x"),
            "Invalid input for field/attribute new_size. Value: x. 'x' does not match '^[0-9]+$'",
        ),
        (
            json!(-1),
            "Invalid input for field/attribute new_size. Value: -1. -1 is less than the minimum of 1",
        ),
    ] {
        let r = extend(bad, None).await;
        assert_eq!((r.status, message(&r).as_str()), (400, words));
    }
    let r = h
        .call(
            "POST",
            &url(&h, &format!("/volumes/{vid}/action")),
            Some(json!({"os-extend": {}})),
            None,
        )
        .await;
    assert_eq!(
        message(&r),
        "Invalid input for field/attribute os-extend. Value: {}. 'new_size' is a required property"
    );
    let r = extend(json!(2), None).await;
    assert_eq!(
        message(&r),
        "Invalid input received: New size for extend must be greater than current size. (current: 2, extended: 2)."
    );

    kos_sim::cinder::attach(&mut h.sim.app().cloud(), &vid, "server-1", "/dev/vdb")
        .expect("attach");
    let r = extend(json!(3), None).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        format!(
            "Invalid volume: Volume {vid} status must be '{{'status': 'available'}}' to extend, currently in-use."
        )
    );
    let r = extend(json!(3), Some(("volume", "3.42"))).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let v = wait(&h, "volume", &vid, "in-use").await;
    assert_eq!(v["size"], 3);
    assert_eq!(v["attachments"][0]["server_id"], "server-1");
}
