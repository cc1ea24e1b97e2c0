//! The simulator's own admin API: log, counters, faults, rate limits, token expiry, forced failures.

mod common;

use common::Harness;
use serde_json::json;

#[tokio::test]
async fn faults_counters_and_log() {
    let h = Harness::new().await;
    let r = h.call("POST", "/_sim/faults", Some(json!({"method": "GET", "path": "^/network/v2.0/networks$", "status": 503, "count": 1, "retry_after": 2})), None).await;
    assert_eq!(r.status, 201);
    let first = h.call("GET", "/network/v2.0/networks", None, None).await;
    assert_eq!(first.status, 503);
    assert_eq!(
        first
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("2")
    );
    assert!(
        first.json["NeutronError"]["message"].is_string(),
        "injected faults use the service's error shape: {}",
        first.json
    );
    assert_eq!(
        h.call("GET", "/network/v2.0/networks", None, None)
            .await
            .status,
        200,
        "count 1: fires once"
    );

    let c = h.call("GET", "/_sim/counters", None, None).await.json;
    let net = &c["services"]["network"];
    assert_eq!(net["calls"], 2);
    assert_eq!(net["faults_injected"], 1);
    assert_eq!(net["by_operation"]["GET /network/v2.0/networks"], 2);

    let log = h
        .call("GET", "/_sim/log?service=network", None, None)
        .await
        .json;
    let entries = log["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2);
    assert!(entries[0]["fault_rule"].is_u64());
    assert_eq!(
        h.call("DELETE", "/_sim/counters", None, None).await.status,
        204
    );
    assert_eq!(
        h.call("GET", "/_sim/counters", None, None).await.json["services"],
        json!({})
    );
}

#[tokio::test]
async fn after_side_effect_fault_takes_effect_but_reports_failure() {
    let h = Harness::new().await;
    h.call("POST", "/_sim/faults", Some(json!({"method": "POST", "path": "^/network/v2.0/networks$", "status": 500, "after_side_effect": true, "count": 1})), None).await;
    let r = h
        .call(
            "POST",
            "/network/v2.0/networks",
            Some(json!({"network": {"name": "ambiguous"}})),
            None,
        )
        .await;
    assert_eq!(r.status, 500);
    let list = h
        .call("GET", "/network/v2.0/networks?name=ambiguous", None, None)
        .await
        .json;
    assert_eq!(
        list["networks"].as_array().map(Vec::len),
        Some(1),
        "the network exists although the client saw a 500"
    );
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let h = Harness::new().await;
    assert_eq!(
        h.call(
            "PUT",
            "/_sim/rate-limits",
            // Cloud time: on the fast clock one call per cloud second is a thousand per real
            // second, which a loaded machine never reaches. This is one per 1000 real seconds.
            Some(json!({"compute": 1e-6})),
            None
        )
        .await
        .status,
        204
    );
    let mut limited = None;
    for _ in 0..20 {
        let r = h.call("GET", "/compute/v2.1/flavors", None, None).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("the limit is hit within 20 calls");
    assert!(r.headers.get("retry-after").is_some());
    assert_eq!(r.json["overLimit"]["code"], 429);
    assert_eq!(
        h.call("GET", "/network/v2.0/networks", None, None)
            .await
            .status,
        200,
        "other services unaffected"
    );
}

#[tokio::test]
async fn expired_tokens_get_401() {
    let h = Harness::new().await;
    assert_eq!(
        h.call("GET", "/network/v2.0/networks", None, None)
            .await
            .status,
        200
    );
    assert_eq!(
        h.call("POST", "/_sim/tokens/expire", None, None)
            .await
            .status,
        204
    );
    assert_eq!(
        h.call("GET", "/network/v2.0/networks", None, None)
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn forced_failures_surface_like_real_ones() {
    let h = Harness::new().await;
    let s = h
        .call("POST", "/compute/v2.1/servers", Some(json!({"server": {"name": "vm", "imageRef": image_id(&h).await, "flavorRef": "1", "networks": "none"}})), Some(("compute", "2.79")))
        .await;
    assert_eq!(s.status, 202, "{}", s.json);
    let id = s.json["server"]["id"].as_str().expect("id").to_owned();
    let r = h
        .call(
            "POST",
            &format!("/_sim/servers/{id}/error"),
            Some(json!({"message": "hypervisor lost"})),
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    let shown = h
        .call(
            "GET",
            &format!("/compute/v2.1/servers/{id}"),
            None,
            Some(("compute", "2.79")),
        )
        .await
        .json;
    assert_eq!(shown["server"]["status"], "ERROR");
    assert_eq!(shown["server"]["fault"]["message"], "hypervisor lost");
    assert_eq!(
        h.call(
            "POST",
            "/_sim/servers/nope/error",
            Some(json!({"message": "x"})),
            None
        )
        .await
        .status,
        404
    );
    assert_eq!(
        h.call("POST", "/_sim/loadbalancers/nope/error", None, None)
            .await
            .status,
        404
    );
}

async fn image_id(h: &Harness) -> String {
    let imgs = h
        .call("GET", "/image/v2/images?name=cirros-0.6.2", None, None)
        .await
        .json;
    imgs["images"][0]["id"]
        .as_str()
        .expect("seeded image")
        .to_owned()
}

/// `kos sim serve --config FILE`: faults, rate limits and the time model from YAML, as a person writes it.
#[tokio::test]
async fn faults_and_rate_limits_from_a_config_file() {
    let dir = std::env::temp_dir().join(format!("kos-sim-cfg-{}", kos_sim::ids::hex_id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("sim.yaml");
    std::fs::write(
        &path,
        "time_scale: 0.001\nlatency:\n  per_call_secs: 0\n  server_boot_secs: 20\nrate_limits:\n  load-balancer: 1\nfaults:\n  - method: GET\n    path: ^/network/v2.0/ports$\n    status: 503\n    count: 1\n    retry_after: 3\n",
    )
    .expect("write");
    let cfg = kos_sim::SimConfig::from_yaml_file(&path).expect("valid config");
    assert_eq!(cfg.latency.server_boot_secs, 20.0);
    let h = Harness::with_config(cfg).await;
    let r = h.call("GET", "/network/v2.0/ports", None, None).await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("3")
    );
    assert_eq!(
        h.call("GET", "/network/v2.0/ports", None, None)
            .await
            .status,
        200
    );
    let mut limited = false;
    for _ in 0..20 {
        if h.call("GET", "/load-balancer/v2/lbaas/loadbalancers", None, None)
            .await
            .status
            == 429
        {
            limited = true;
            break;
        }
    }
    assert!(
        limited,
        "1 request/s on load-balancer is exceeded by 20 immediate calls"
    );

    // A typo is an error that names the file, not a silently ignored key.
    std::fs::write(&path, "time_scael: 0.5\n").expect("write");
    let err = kos_sim::SimConfig::from_yaml_file(&path).expect_err("unknown key");
    assert!(err.to_string().contains("sim.yaml"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `/_sim/internet`: an outage of the URLs matching its regexes, for the servers' downloads; a bad
/// regex is refused, `DELETE` ends the outage.
#[tokio::test]
async fn an_internet_outage_is_set_read_and_ended() {
    let h = Harness::new().await;
    let r = h
        .call(
            "PUT",
            "/_sim/internet",
            Some(json!({"unreachable": ["^https://raw\\.githubusercontent\\.com/"]})),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let got = h.call("GET", "/_sim/internet", None, None).await;
    assert_eq!(
        got.json,
        json!({"unreachable": ["^https://raw\\.githubusercontent\\.com/"], "down": []})
    );
    {
        let cloud = h.sim.app().cloud();
        assert!(
            !cloud
                .internet
                .reaches("https://raw.githubusercontent.com/x/calico.yaml")
        );
        assert!(cloud.internet.reaches("https://example.com/calico.yaml"));
    }
    let bad = h
        .call(
            "PUT",
            "/_sim/internet",
            Some(json!({"unreachable": ["("]})),
            None,
        )
        .await;
    assert_eq!(bad.status, 400);
    let bad = h
        .call("PUT", "/_sim/internet", Some(json!({"down": ["("]})), None)
        .await;
    assert_eq!(bad.status, 400, "a bad regex in `down` too");
    // A host down for everyone: out of the servers' reach and no proxy's either.
    let r = h
        .call(
            "PUT",
            "/_sim/internet",
            Some(json!({"unreachable": [], "down": ["^https://quay\\.io/"]})),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    {
        let cloud = h.sim.app().cloud();
        assert!(!cloud.internet.reaches("https://quay.io/v2/"));
        assert!(!cloud.internet.serves("https://quay.io/v2/"));
    }
    let r = h.call("DELETE", "/_sim/internet", None, None).await;
    assert_eq!(r.status, 204);
    assert!(
        h.sim
            .app()
            .cloud()
            .internet
            .reaches("https://raw.githubusercontent.com/x/calico.yaml")
    );
}
