//! Cinder's wire format against its API-reference samples, endpoint by endpoint (volume samples at
//! their v3.69 folder's microversion).

mod common;

use std::time::Duration;

use common::Harness;
use kos_sim::Service;
use serde_json::json;

/// Host and migration attributes and provider_id are admin-only in Cinder (checked against Cinder 29);
/// the harness user is a project member.
const ADMIN_ONLY: &[&str] = &[
    "volume.migration_status",
    "volume.provider_id",
    "volumes[].migration_status",
    "volumes[].provider_id",
    "volume.os-vol-host-attr:host",
    "volume.os-vol-mig-status-attr:migstat",
    "volume.os-vol-mig-status-attr:name_id",
    "volumes[].os-vol-host-attr:host",
    "volumes[].os-vol-mig-status-attr:migstat",
    "volumes[].os-vol-mig-status-attr:name_id",
];

/// A type's QoS specs id is admin-only too (Cinder's `volume_extension:access_types_qos_specs_id`).
const QOS_ADMIN_ONLY: &[&str] = &["volume_types[].qos_specs_id", "volume_type.qos_specs_id"];

/// The sample's `links` list starts with the `describedby` link, which has a `type`; the checker holds every
/// link to that first one, but Cinder's `self` link has no `type`.
const LINK_TYPE: &[&str] = &["versions[].links[].type"];

#[tokio::test]
async fn block_storage_endpoints_match_samples() {
    let h = Harness::new().await;
    // The root answers 300 Multiple Choices, as Cinder does; the checker wants 2xx, so check by hand.
    for p in ["/volume", "/volume/"] {
        let r = h.call("GET", p, None, None).await;
        assert_eq!(r.status, 300);
        let missing = common::missing_keys(
            &common::load_sample("block-storage/versions/versions-response.json"),
            &r.json,
        );
        assert_eq!(missing, LINK_TYPE);
        h.mark_covered("GET", p);
    }
    for p in ["/volume/v3", "/volume/v3/"] {
        let v = h.check_allowing("GET", p, p, None, LINK_TYPE).await;
        assert_eq!(v["versions"][0]["version"], "3.70");
    }

    let pid = h.project_id.clone();
    let t = |s: &str| format!("/volume/v3/{{project_id}}{s}");
    let p = |s: &str| format!("/volume/v3/{pid}{s}");
    let created = h
        .check_allowing(
            "POST",
            &t("/volumes"),
            &p("/volumes"),
            Some(
                json!({"volume": {"size": 10, "name": "shape", "description": "d",
                "metadata": {"name": "metadata0"}, "volume_type": "ssd"}}),
            ),
            ADMIN_ONLY,
        )
        .await;
    for hidden in [
        "migration_status",
        "provider_id",
        "os-vol-tenant-attr:tenant_id",
    ] {
        assert!(
            created["volume"].get(hidden).is_none(),
            "{hidden} shown to a member at create"
        );
    }
    let id = created["volume"]["id"].as_str().expect("id").to_owned();
    assert_eq!(created["volume"]["status"], "creating");
    let vp = |s: &str| p(&format!("/volumes/{id}{s}"));
    let settle = |path: String, key: &'static str| {
        let h = &h;
        async move {
            for _ in 0..400 {
                let r = h.call("GET", &path, None, None).await;
                if r.json[key]["status"] == "available" {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("{path} never became available");
        }
    };
    settle(vp(""), "volume").await;
    let shown = h
        .check_allowing("GET", &t("/volumes/{id}"), &vp(""), None, ADMIN_ONLY)
        .await;
    assert_eq!(shown["volume"]["status"], "available");
    h.check("GET", &t("/volumes"), &p("/volumes"), None).await;
    h.check_allowing(
        "GET",
        &t("/volumes/detail"),
        &p("/volumes/detail"),
        None,
        ADMIN_ONLY,
    )
    .await;
    h.check_allowing(
        "PUT",
        &t("/volumes/{id}"),
        &vp(""),
        Some(json!({"volume": {"name": "vol-003", "description": "This is yet, another volume."}})),
        ADMIN_ONLY,
    )
    .await;

    h.check("GET", &t("/volumes/{id}/metadata"), &vp("/metadata"), None)
        .await;
    h.check(
        "POST",
        &t("/volumes/{id}/metadata"),
        &vp("/metadata"),
        Some(json!({"metadata": {"name": "metadata0"}})),
    )
    .await;
    h.check(
        "PUT",
        &t("/volumes/{id}/metadata"),
        &vp("/metadata"),
        Some(json!({"metadata": {"name": "metadata1"}})),
    )
    .await;
    h.check(
        "GET",
        &t("/volumes/{id}/metadata/{key}"),
        &vp("/metadata/name"),
        None,
    )
    .await;
    h.check(
        "PUT",
        &t("/volumes/{id}/metadata/{key}"),
        &vp("/metadata/name"),
        Some(json!({"meta": {"name": "new_name"}})),
    )
    .await;
    h.check(
        "DELETE",
        &t("/volumes/{id}/metadata/{key}"),
        &vp("/metadata/name"),
        None,
    )
    .await;
    h.check(
        "POST",
        &t("/volumes/{id}/action"),
        &vp("/action"),
        Some(json!({"os-extend": {"new_size": 20}})),
    )
    .await;
    settle(vp(""), "volume").await;

    // Snapshots, at the v3.65 samples' microversion.
    let snap = h
        .check(
            "POST",
            &t("/snapshots"),
            &p("/snapshots"),
            Some(
                json!({"snapshot": {"name": "snap-001", "description": "Daily backup",
                "volume_id": id, "metadata": {"key": "v3"}}}),
            ),
        )
        .await;
    let sid = snap["snapshot"]["id"]
        .as_str()
        .expect("snapshot id")
        .to_owned();
    let sp = |s: &str| p(&format!("/snapshots/{sid}{s}"));
    settle(sp(""), "snapshot").await;
    let st = |s: &str| t(&format!("/snapshots{s}"));
    h.check("GET", &st("/{id}"), &sp(""), None).await;
    h.check("GET", &st(""), &p("/snapshots"), None).await;
    h.check("GET", &st("/detail"), &p("/snapshots/detail"), None)
        .await;
    h.check(
        "PUT",
        &st("/{id}"),
        &sp(""),
        Some(json!({"snapshot": {"name": "snap-002", "description": "This is yet, another snapshot."}})),
    )
    .await;
    h.check("GET", &st("/{id}/metadata"), &sp("/metadata"), None)
        .await;
    h.check(
        "POST",
        &st("/{id}/metadata"),
        &sp("/metadata"),
        Some(json!({"metadata": {"key": "v3"}})),
    )
    .await;
    h.check(
        "PUT",
        &st("/{id}/metadata"),
        &sp("/metadata"),
        Some(json!({"metadata": {"key": "v3"}})),
    )
    .await;
    h.check(
        "GET",
        &st("/{id}/metadata/{key}"),
        &sp("/metadata/key"),
        None,
    )
    .await;
    h.check(
        "PUT",
        &st("/{id}/metadata/{key}"),
        &sp("/metadata/key"),
        Some(json!({"meta": {"key": "v3"}})),
    )
    .await;
    h.check(
        "DELETE",
        &st("/{id}/metadata/{key}"),
        &sp("/metadata/key"),
        None,
    )
    .await;
    h.check("DELETE", &st("/{id}"), &sp(""), None).await;
    for _ in 0..400 {
        if h.call("GET", &sp(""), None, None).await.status == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let types = h
        .check_allowing("GET", &t("/types"), &p("/types"), None, QOS_ADMIN_ONLY)
        .await;
    let type_id = types["volume_types"][0]["id"].as_str().expect("type id");
    h.check_allowing(
        "GET",
        &t("/types/{id}"),
        &p(&format!("/types/{type_id}")),
        None,
        QOS_ADMIN_ONLY,
    )
    .await;
    let az = h
        .check(
            "GET",
            &t("/os-availability-zone"),
            &p("/os-availability-zone"),
            None,
        )
        .await;
    assert_eq!(az["availabilityZoneInfo"][0]["zoneName"], "nova");
    assert_eq!(
        az["availabilityZoneInfo"][0]["zoneState"]["available"],
        true
    );
    let limits = h.check("GET", &t("/limits"), &p("/limits"), None).await;
    assert_eq!(limits["limits"]["absolute"]["totalGigabytesUsed"], 20);
    h.check(
        "GET",
        &t("/os-quota-sets/{id}"),
        &p(&format!("/os-quota-sets/{pid}")),
        None,
    )
    .await;
    let usage = h
        .call(
            "GET",
            &p(&format!("/os-quota-sets/{pid}?usage=true")),
            None,
            None,
        )
        .await;
    assert_eq!(usage.status, 200);
    let missing = common::missing_keys(
        &common::load_sample("block-storage/quota_sets/quotas-show-usage-response.json"),
        &usage.json,
    );
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(usage.json["quota_set"]["volumes"]["in_use"], 1);
    h.check(
        "GET",
        &t("/os-quota-sets/{id}/defaults"),
        &p(&format!("/os-quota-sets/{pid}/defaults")),
        None,
    )
    .await;

    h.check("DELETE", &t("/volumes/{id}"), &vp(""), None).await;
    h.assert_all_covered(Service::BlockStorage);
}
