//! Cinder's behaviour as clients depend on it: the volume state machine, attachment rules, quotas (413),
//! microversions (406), metadata filters and actions.

mod common;

use std::time::Duration;

use common::{Harness, Resp};
use kos_sim::SimConfig;
use serde_json::{Value, json};

fn vols(h: &Harness, rest: &str) -> String {
    format!("/volume/v3/{}/volumes{rest}", h.project_id)
}

async fn create(h: &Harness, spec: Value) -> Resp {
    h.call("POST", &vols(h, ""), Some(json!({ "volume": spec })), None)
        .await
}

async fn show(h: &Harness, id: &str) -> Resp {
    h.call("GET", &vols(h, &format!("/{id}")), None, None).await
}

/// Polls until the volume has `status` (bounded; no timing assertion).
async fn wait_status(h: &Harness, id: &str, status: &str) -> Value {
    for _ in 0..1000 {
        let r = show(h, id).await;
        if r.json["volume"]["status"] == status {
            return r.json["volume"].clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("volume {id} never reached {status}");
}

async fn make_available(h: &Harness, spec: Value) -> String {
    let r = create(h, spec).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!(r.json["volume"]["status"], "creating");
    let id = r.json["volume"]["id"].as_str().expect("id").to_owned();
    wait_status(h, &id, "available").await;
    id
}

#[tokio::test]
async fn attached_volume_cannot_be_deleted_until_detached() {
    let h = Harness::new().await;
    let id = make_available(&h, json!({"size": 1, "name": "data"})).await;
    let att = kos_sim::cinder::attach(&mut h.sim.app().cloud(), &id, "server-1", "/dev/vdb")
        .expect("attach an available volume");
    let v = show(&h, &id).await.json["volume"].clone();
    assert_eq!(v["status"], "in-use");
    let a = &v["attachments"][0];
    assert_eq!(a["server_id"], "server-1");
    assert_eq!(a["attachment_id"], att.as_str());
    assert_eq!(a["device"], "/dev/vdb");
    assert_eq!(a["volume_id"], id.as_str());
    assert!(a["attached_at"].is_string() && a.get("host_name").is_some());

    let again = kos_sim::cinder::attach(&mut h.sim.app().cloud(), &id, "server-2", "/dev/vdc")
        .expect_err("an in-use volume cannot be attached again");
    assert_eq!(again.status.as_u16(), 400);
    assert_eq!(
        again.message,
        format!("Invalid volume: volume {id} status must be available")
    );

    let r = h
        .call("DELETE", &vols(&h, &format!("/{id}")), None, None)
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["badRequest"]["message"],
        "Invalid volume: Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots, awaiting a transfer, or be disassociated from snapshots after volume transfer."
    );
    let ext = h
        .call(
            "POST",
            &vols(&h, &format!("/{id}/action")),
            Some(json!({"os-extend": {"new_size": 2}})),
            None,
        )
        .await;
    assert_eq!(ext.status, 400, "no extend while in-use");

    kos_sim::cinder::detach(&mut h.sim.app().cloud(), &id, "server-1");
    assert_eq!(show(&h, &id).await.json["volume"]["status"], "available");
    let r = h
        .call("DELETE", &vols(&h, &format!("/{id}")), None, None)
        .await;
    assert_eq!(r.status, 202);
    wait_gone(&h, &id).await;
}

async fn wait_gone(h: &Harness, id: &str) {
    for _ in 0..1000 {
        let r = show(h, id).await;
        if r.status == 404 {
            assert_eq!(r.json["itemNotFound"]["code"], 404);
            return;
        }
        assert_eq!(r.json["volume"]["status"], "deleting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("volume {id} was never deleted");
}

#[tokio::test]
async fn creating_volume_cannot_be_deleted() {
    let mut cfg = kos_sim::SimConfig::fast();
    cfg.latency.volume_create_secs = 500.0;
    let h = Harness::with_config(cfg).await;
    let r = create(&h, json!({"size": 1})).await;
    let id = r.json["volume"]["id"].as_str().expect("id");
    let del = h
        .call("DELETE", &vols(&h, &format!("/{id}")), None, None)
        .await;
    assert_eq!(del.status, 400);
}

#[tokio::test]
async fn metadata_filter_finds_csi_volumes() {
    let h = Harness::new().await;
    let key = "cinder.csi.openstack.org/cluster";
    let a = make_available(
        &h,
        json!({"size": 1, "name": "pv-a", "metadata": {key: "kos"}}),
    )
    .await;
    make_available(
        &h,
        json!({"size": 1, "name": "pv-b", "metadata": {key: "other"}}),
    )
    .await;
    make_available(&h, json!({"size": 1, "name": "plain"})).await;

    let filter = url::form_urlencoded::byte_serialize(json!({ key: "kos" }).to_string().as_bytes())
        .collect::<String>();
    let r = h
        .call(
            "GET",
            &vols(&h, &format!("/detail?metadata={filter}")),
            None,
            None,
        )
        .await;
    let ids: Vec<&str> = r.json["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["id"].as_str())
        .collect();
    assert_eq!(ids, vec![a.as_str()]);
    // cinderclient sends a Python dict literal.
    let py = url::form_urlencoded::byte_serialize(format!("{{'{key}': 'kos'}}").as_bytes())
        .collect::<String>();
    let r = h
        .call("GET", &vols(&h, &format!("?metadata={py}")), None, None)
        .await;
    assert_eq!(r.json["volumes"].as_array().map(Vec::len), Some(1));

    // Newest first, with a next link when the page is full.
    let page = h.call("GET", &vols(&h, "?limit=2"), None, None).await.json;
    let names: Vec<&str> = page["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, vec!["plain", "pv-b"]);
    assert!(
        page["volumes_links"][0]["href"]
            .as_str()
            .is_some_and(|h| h.contains("marker="))
    );
    let by_name = h
        .call(
            "GET",
            &vols(&h, "/detail?sort=name:asc&status=available"),
            None,
            None,
        )
        .await
        .json;
    assert_eq!(by_name["volumes"][0]["name"], "plain");

    // Metadata endpoints: merge, replace, key.
    let md = |rest: &str| vols(&h, &format!("/{a}/metadata{rest}"));
    let r = h
        .call(
            "POST",
            &md(""),
            Some(json!({"metadata": {"extra": "1"}})),
            None,
        )
        .await;
    assert_eq!(r.json["metadata"], json!({key: "kos", "extra": "1"}));
    let r = h
        .call(
            "PUT",
            &md(""),
            Some(json!({"metadata": {"only": "this"}})),
            None,
        )
        .await;
    assert_eq!(r.json["metadata"], json!({"only": "this"}));
    assert_eq!(h.call("GET", &md("/gone"), None, None).await.status, 404);
    let r = h
        .call(
            "PUT",
            &md("/only"),
            Some(json!({"meta": {"other": "x"}})),
            None,
        )
        .await;
    assert_eq!(r.status, 400, "body and URI mismatch");
}

#[tokio::test]
async fn quotas_answer_413_in_cinder_words() {
    let h = Harness::new().await;
    make_available(&h, json!({"size": 980})).await;
    let r = create(&h, json!({"size": 50})).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json["overLimit"]["message"],
        "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested 50G, quota is 1000G and 980G has been consumed."
    );
    assert_eq!(r.json["overLimit"]["code"], 413);
    for _ in 0..9 {
        assert_eq!(create(&h, json!({"size": 1})).await.status, 202);
    }
    let r = create(&h, json!({"size": 1})).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json["overLimit"]["message"],
        "VolumeLimitExceeded: Maximum number of volumes allowed (10) exceeded for quota 'volumes'."
    );
    let limits = h
        .call(
            "GET",
            &format!("/volume/v3/{}/limits", h.project_id),
            None,
            None,
        )
        .await;
    assert_eq!(limits.json["limits"]["absolute"]["totalVolumesUsed"], 10);
    assert_eq!(limits.json["limits"]["absolute"]["totalGigabytesUsed"], 989);
}

#[tokio::test]
async fn microversions_are_negotiated() {
    let h = Harness::new().await;
    let id = make_available(&h, json!({"size": 1})).await;
    let path = vols(&h, &format!("/{id}"));
    let r = h.call("GET", &path, None, Some(("volume", "3.99"))).await;
    assert_eq!(r.status, 406);
    let r = h.call("GET", &path, None, Some(("volume", "2.0"))).await;
    assert_eq!(r.status, 406);
    let r = h.call("GET", &path, None, Some(("volume", "3.63"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers
            .get("openstack-api-version")
            .and_then(|v| v.to_str().ok()),
        Some("volume 3.63")
    );
    assert!(r.json["volume"]["volume_type_id"].is_string());
    assert!(r.json["volume"].get("consumes_quota").is_none());
    let r = h.call("GET", &path, None, Some(("volume", "latest"))).await;
    assert_eq!(
        r.headers
            .get("openstack-api-version")
            .and_then(|v| v.to_str().ok()),
        Some("volume 3.70")
    );
    let r = h.call("GET", &path, None, None).await;
    assert!(
        r.json["volume"].get("volume_type_id").is_none(),
        "3.0 by default"
    );
    assert_eq!(r.json["volume"]["bootable"], "false");
    assert_eq!(r.json["volume"]["volume_type"], "__DEFAULT__");
    assert!(
        r.json["volume"].get("os-vol-host-attr:host").is_none(),
        "admin only"
    );
}

#[tokio::test]
async fn extend_and_other_actions() {
    let h = Harness::new().await;
    let id = make_available(&h, json!({"size": 10, "volume_type": "ssd"})).await;
    let act = |body: Value| {
        let h = &h;
        let path = vols(h, &format!("/{id}/action"));
        async move { h.call("POST", &path, Some(body), None).await }
    };
    assert_eq!(
        act(json!({"os-extend": {"new_size": 20}})).await.status,
        202
    );
    assert_eq!(wait_status(&h, &id, "available").await["size"], 20);
    let r = act(json!({"os-extend": {"new_size": 5}})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.json["badRequest"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("greater than current size"))
    );
    assert_eq!(
        act(json!({"os-extend": {"new_size": 5000}})).await.status,
        413
    );
    assert_eq!(
        act(json!({"os-reset_status": {"status": "error"}}))
            .await
            .status,
        403
    );
    assert_eq!(
        act(json!({"os-set_bootable": {"bootable": true}}))
            .await
            .status,
        200
    );
    assert_eq!(show(&h, &id).await.json["volume"]["bootable"], "true");
    assert_eq!(act(json!({"os-frobnicate": {}})).await.status, 400);

    let r = create(&h, json!({"size": 0})).await;
    assert_eq!(r.status, 400);
    // Cinder 29's schema words, as minicloud answered them.
    assert_eq!(
        r.json["badRequest"]["message"],
        "Invalid input for field/attribute size. Value: 0. 0 is less than the minimum of 1"
    );
    assert_eq!(
        create(&h, json!({"size": 1, "volume_type": "gold"}))
            .await
            .status,
        404
    );
    assert_eq!(
        create(&h, json!({"size": 1, "availability_zone": "mars"}))
            .await
            .status,
        400
    );
    assert_eq!(
        create(&h, json!({"size": 1, "snapshot_id": "nope"}))
            .await
            .status,
        404
    );
    let other = h
        .call(
            "GET",
            "/volume/v3/0123456789abcdef0123456789abcdef/volumes",
            None,
            None,
        )
        .await;
    assert_eq!(other.status, 403, "another project's URL");
}

/// Cinder's zones are its own (`volume_zones`), apart from Nova's: the list shows them, and a create in
/// a zone Cinder lacks (a compute zone here) is refused as Cinder refuses it
/// (`InvalidAvailabilityZone`: 400 `badRequest`, "Availability zone 'az1' is invalid.").
#[tokio::test]
async fn volume_zones_are_cinders_own_and_others_are_refused() {
    let h = Harness::with_config(SimConfig {
        zones: vec!["az1".into(), "az2".into()],
        volume_zones: vec!["nova".into()],
        ..SimConfig::fast()
    })
    .await;
    let zones = h
        .call(
            "GET",
            &format!("/volume/v3/{}/os-availability-zone", h.project_id),
            None,
            None,
        )
        .await;
    assert_eq!(zones.status, 200);
    assert_eq!(
        zones.json,
        json!({"availabilityZoneInfo": [{"zoneName": "nova", "zoneState": {"available": true}}]})
    );
    let compute = h
        .call("GET", "/compute/v2.1/os-availability-zone", None, None)
        .await;
    let names: Vec<&str> = compute.json["availabilityZoneInfo"]
        .as_array()
        .map(|a| a.iter().filter_map(|z| z["zoneName"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["az1", "az2"]);

    let r = create(&h, json!({"size": 1, "availability_zone": "az1"})).await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(
        r.json,
        json!({"badRequest": {"code": 400, "message": "Availability zone 'az1' is invalid."}})
    );
    assert_eq!(
        h.call("GET", &vols(&h, ""), None, None).await.json["volumes"],
        json!([]),
        "nothing was made"
    );
    // No zone: Cinder's default zone, its own.
    let id = make_available(&h, json!({"size": 1})).await;
    assert_eq!(
        show(&h, &id).await.json["volume"]["availability_zone"],
        "nova"
    );
}

/// `volume_create_answer_secs`: the volume is listed while its create's answer is still
/// held, the window in which a client killed mid-call leaves a volume it never heard of; lowering the
/// model releases the held answer, which names that volume.
#[tokio::test]
async fn a_volume_exists_before_its_slow_create_answers() {
    let h = std::sync::Arc::new(Harness::new().await);
    let r = h
        .call(
            "PUT",
            "/_sim/latency",
            Some(json!({"volume_create_answer_secs": 1e9})),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let post = tokio::spawn({
        let h = h.clone();
        async move { create(&h, json!({"size": 1, "name": "held"})).await }
    });
    let mut listed = None;
    for _ in 0..2000 {
        let r = h
            .call("GET", &vols(&h, "/detail?name=held"), None, None)
            .await;
        if let Some(v) = r.json["volumes"].as_array().and_then(|a| a.first()) {
            listed = Some(v.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let listed = listed.expect("the volume is listed while its create is unanswered");
    assert!(!post.is_finished(), "the answer is still held");
    let r = h
        .call(
            "PUT",
            "/_sim/latency",
            Some(json!({"volume_create_answer_secs": 0})),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let answer = post.await.expect("the create's task");
    assert_eq!(answer.status, 202, "{}", answer.json);
    assert_eq!(answer.json["volume"]["id"], listed["id"]);
}
