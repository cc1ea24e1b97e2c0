//! Glance's wire format against its API-reference samples, endpoint by endpoint.

mod common;

use common::{Harness, load_sample, missing_keys};
use kos_sim::Service;
use serde_json::{Value, json};

const PATCH_TYPE: &str = "application/openstack-images-v2.1-json-patch";

async fn raw(
    h: &Harness,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let r = h
        .http
        .request(method, h.url(path))
        .header("x-auth-token", &h.token)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("glance answers");
    let status = r.status().as_u16();
    let bytes = r.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn image_endpoints_match_samples() {
    let h = Harness::new().await;

    // Version discovery answers 300 at the root, as Glance does; the harness wants 2xx, so check by hand.
    for path in ["/image", "/image/"] {
        let r = h.call("GET", path, None, None).await;
        assert_eq!(r.status, 300, "{path}");
        let v2 = r.json["versions"]
            .as_array()
            .and_then(|a| a.iter().find(|v| v["status"] == "CURRENT"))
            .expect("a CURRENT version");
        assert!(
            v2["links"][0]["href"]
                .as_str()
                .is_some_and(|h| h.ends_with("/image/v2/")),
            "{v2}"
        );
        h.mark_covered("GET", path);
    }
    let v = h
        .check("GET", "/image/versions", "/image/versions", None)
        .await;
    assert!(v["versions"].as_array().is_some_and(|a| !a.is_empty()));

    h.check("GET", "/image/v2/images", "/image/v2/images", None)
        .await;
    // Glance shows `locations` only with show_multiple_locations=True, which devstack leaves off.
    let img = h
        .check_allowing(
            "POST",
            "/image/v2/images",
            "/image/v2/images",
            Some(json!({"name": "Ubuntu", "container_format": "bare", "disk_format": "raw"})),
            &["locations"],
        )
        .await;
    assert_eq!(img["status"], "queued");
    let id = img["id"].as_str().expect("id").to_owned();

    // Upload needs application/octet-stream, which the checker does not send.
    let (status, _) = raw(
        &h,
        reqwest::Method::PUT,
        &format!("/image/v2/images/{id}/file"),
        "application/octet-stream",
        b"hello image".to_vec(),
    )
    .await;
    assert_eq!(status, 204);
    h.mark_covered("PUT", "/image/v2/images/{id}/file");

    let shown = h
        .check(
            "GET",
            "/image/v2/images/{id}",
            &format!("/image/v2/images/{id}"),
            None,
        )
        .await;
    assert_eq!(shown["status"], "active");
    assert_eq!(shown["size"], 11);
    assert_eq!(shown["checksum"], "1a8170f6b425d667b1aba297dbe4ff88");
    assert_eq!(
        shown["os_hash_value"],
        "a129ae015ca66bad61900fd30d1312f2229283d72ffc4f69583b274050fa61b53fd5eb1681918f681c20c1961be5112007d6a99852b706065c01c6713e6f5d97"
    );

    // JSON-patch needs its own media type: call by hand, check against the sample.
    let patch = json!([
        {"op": "replace", "path": "/name", "value": "Fedora 17"},
        {"op": "replace", "path": "/tags", "value": ["fedora", "beefy"]},
        {"op": "add", "path": "/os_distro", "value": "fedora"},
    ]);
    let (status, body) = raw(
        &h,
        reqwest::Method::PATCH,
        &format!("/image/v2/images/{id}"),
        PATCH_TYPE,
        serde_json::to_vec(&patch).expect("json"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let missing = missing_keys(
        &load_sample("image/v2/samples/image-update-response.json"),
        &body,
    );
    assert!(missing.is_empty(), "PATCH lacks {missing:?}: {body}");
    assert_eq!(body["name"], "Fedora 17");
    assert_eq!(body["os_distro"], "fedora");
    h.mark_covered("PATCH", "/image/v2/images/{id}");

    h.check(
        "PUT",
        "/image/v2/images/{id}/tags/{tag}",
        &format!("/image/v2/images/{id}/tags/kos"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/image/v2/images/{id}/tags/{tag}",
        &format!("/image/v2/images/{id}/tags/kos"),
        None,
    )
    .await;
    for (path, sample) in [
        (
            "/image/v2/schemas/image",
            "schemas-image-show-response.json",
        ),
        (
            "/image/v2/schemas/images",
            "schemas-images-list-response.json",
        ),
    ] {
        let r = h.check("GET", path, path, None).await;
        assert_eq!(r, load_sample(&format!("image/v2/samples/{sample}")));
    }
    h.check(
        "DELETE",
        "/image/v2/images/{id}",
        &format!("/image/v2/images/{id}"),
        None,
    )
    .await;

    h.assert_all_covered(Service::Image);
}
