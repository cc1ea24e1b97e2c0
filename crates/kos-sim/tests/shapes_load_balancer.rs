//! Octavia's wire format against its API-reference samples, endpoint by endpoint, under both the
//! `/v2/lbaas` and `/v2.0/lbaas` prefixes.

mod common;

use std::time::Duration;

use common::Harness;
use kos_sim::Service;
use serde_json::{Value, json};

/// A network with one subnet, through the Neutron API; returns the subnet id.
pub async fn make_subnet(h: &Harness, cidr: &str) -> String {
    let net = h
        .call(
            "POST",
            "/network/v2.0/networks",
            Some(json!({"network": {"name": format!("lb-net-{cidr}")}})),
            None,
        )
        .await;
    assert_eq!(net.status, 201, "network create: {}", net.json);
    let net_id = net.json["network"]["id"].as_str().expect("network id");
    let sub = h
        .call(
            "POST",
            "/network/v2.0/subnets",
            Some(json!({"subnet": {"network_id": net_id, "cidr": cidr, "ip_version": 4, "name": "lb-subnet"}})),
            None,
        )
        .await;
    assert_eq!(sub.status, 201, "subnet create: {}", sub.json);
    sub.json["subnet"]["id"]
        .as_str()
        .expect("subnet id")
        .to_owned()
}

/// Polls until the LB is ACTIVE again (bounded; no timing assertion).
async fn wait_active(h: &Harness, lb: &str) {
    for _ in 0..400 {
        let r = h
            .call(
                "GET",
                &format!("/load-balancer/v2/lbaas/loadbalancers/{lb}"),
                None,
                None,
            )
            .await;
        if r.json["loadbalancer"]["provisioning_status"] == "ACTIVE" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("load balancer {lb} never became ACTIVE");
}

fn id(v: &Value, key: &str) -> String {
    v[key]["id"].as_str().expect("id").to_owned()
}

async fn scenario(h: &Harness, ver: &str, subnet: &str) {
    let t = |s: &str| format!("/load-balancer/{ver}/lbaas{s}");
    let lb = h
        .check(
            "POST",
            &t("/loadbalancers"),
            &t("/loadbalancers"),
            Some(json!({"loadbalancer": {
                "name": format!("shape-{ver}"), "description": "shape test", "vip_subnet_id": subnet,
                "admin_state_up": true, "tags": ["shape"], "availability_zone": "az1",
                "vip_qos_policy_id": "ec4f78ca-8da8-4e99-8a1a-e3b94595a7a3",
            }})),
        )
        .await;
    let lb_id = id(&lb, "loadbalancer");
    assert_eq!(lb["loadbalancer"]["provisioning_status"], "PENDING_CREATE");
    wait_active(h, &lb_id).await;
    let lbp = |s: &str| t(&format!("/loadbalancers/{lb_id}{s}"));
    h.check("GET", &t("/loadbalancers/{id}"), &lbp(""), None)
        .await;
    let list = h
        .check(
            "GET",
            &t("/loadbalancers"),
            &t(&format!("/loadbalancers?name=shape-{ver}")),
            None,
        )
        .await;
    assert_eq!(list["loadbalancers"].as_array().map(Vec::len), Some(1));
    h.check(
        "PUT",
        &t("/loadbalancers/{id}"),
        &lbp(""),
        Some(json!({"loadbalancer": {"description": "updated", "tags": ["shape", "updated"]}})),
    )
    .await;
    wait_active(h, &lb_id).await;

    let listener = h
        .check(
            "POST",
            &t("/listeners"),
            &t("/listeners"),
            Some(json!({"listener": {
                "name": "http", "protocol": "HTTP", "protocol_port": "80", "loadbalancer_id": lb_id,
                "insert_headers": {"X-Forwarded-For": "true", "X-Forwarded-Port": "true"},
                "allowed_cidrs": ["192.0.2.0/24"], "connection_limit": 200, "tags": ["shape"],
            }})),
        )
        .await;
    let l_id = id(&listener, "listener");
    wait_active(h, &lb_id).await;
    let lp = t(&format!("/listeners/{l_id}"));
    h.check("GET", &t("/listeners/{id}"), &lp, None).await;
    h.check(
        "GET",
        &t("/listeners"),
        &t(&format!("/listeners?loadbalancer_id={lb_id}")),
        None,
    )
    .await;
    h.check(
        "GET",
        &t("/listeners/{id}/stats"),
        &format!("{lp}/stats"),
        None,
    )
    .await;
    h.check(
        "PUT",
        &t("/listeners/{id}"),
        &lp,
        Some(json!({"listener": {"description": "updated", "timeout_client_data": 100000}})),
    )
    .await;
    wait_active(h, &lb_id).await;

    let pool = h
        .check_allowing(
            "POST",
            &t("/pools"),
            &t("/pools"),
            Some(json!({"pool": {
                "name": "pool", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "listener_id": l_id,
                "session_persistence": {"type": "APP_COOKIE", "cookie_name": "ChocolateChip"},
                "tags": ["shape"],
            }})),
            // No monitor yet: Octavia leaves the key out (checked against Octavia 19).
            &["pool.healthmonitor_id"],
        )
        .await;
    assert!(pool["pool"].get("healthmonitor_id").is_none(), "{pool}");
    let p_id = id(&pool, "pool");
    wait_active(h, &lb_id).await;
    let hm = h
        .check(
            "POST",
            &t("/healthmonitors"),
            &t("/healthmonitors"),
            Some(json!({"healthmonitor": {
                "name": "hm", "pool_id": p_id, "type": "HTTP", "delay": "10", "timeout": "5",
                "max_retries": "1", "http_method": "GET", "url_path": "/", "expected_codes": "200",
                "tags": ["shape"], "http_version": 1.1, "domain_name": "testlab.com",
            }})),
        )
        .await;
    let hm_id = id(&hm, "healthmonitor");
    wait_active(h, &lb_id).await;
    let pp = t(&format!("/pools/{p_id}"));
    h.check("GET", &t("/pools/{id}"), &pp, None).await;
    h.check("GET", &t("/pools"), &t("/pools?tags=shape"), None)
        .await;
    h.check(
        "PUT",
        &t("/pools/{id}"),
        &pp,
        Some(json!({"pool": {"lb_algorithm": "LEAST_CONNECTIONS", "session_persistence": {"type": "SOURCE_IP"}}})),
    )
    .await;
    wait_active(h, &lb_id).await;

    let member = h
        .check(
            "POST",
            &t("/pools/{id}/members"),
            &format!("{pp}/members"),
            Some(json!({"member": {
                "name": "web-1", "address": "192.0.2.16", "protocol_port": 80, "subnet_id": subnet,
                "weight": 20, "monitor_port": 8080, "tags": ["shape"],
            }})),
        )
        .await;
    let m_id = id(&member, "member");
    wait_active(h, &lb_id).await;
    let mp = format!("{pp}/members/{m_id}");
    h.check("GET", &t("/pools/{id}/members/{member}"), &mp, None)
        .await;
    h.check(
        "GET",
        &t("/pools/{id}/members"),
        &format!("{pp}/members"),
        None,
    )
    .await;
    h.check(
        "PUT",
        &t("/pools/{id}/members/{member}"),
        &mp,
        Some(json!({"member": {"weight": "0", "admin_state_up": "true", "monitor_address": "192.0.2.40"}})),
    )
    .await;
    wait_active(h, &lb_id).await;
    h.check(
        "PUT",
        &t("/pools/{id}/members"),
        &format!("{pp}/members"),
        Some(json!({"members": [
            {"name": "web-1", "address": "192.0.2.16", "protocol_port": 80, "weight": 10},
            {"name": "web-2", "address": "192.0.2.17", "protocol_port": 80, "subnet_id": subnet},
        ]})),
    )
    .await;
    wait_active(h, &lb_id).await;

    let hp = t(&format!("/healthmonitors/{hm_id}"));
    h.check("GET", &t("/healthmonitors/{id}"), &hp, None).await;
    h.check(
        "GET",
        &t("/healthmonitors"),
        &t(&format!("/healthmonitors?pool_id={p_id}")),
        None,
    )
    .await;
    h.check(
        "PUT",
        &t("/healthmonitors/{id}"),
        &hp,
        Some(json!({"healthmonitor": {"delay": 5, "timeout": 2, "http_method": "HEAD"}})),
    )
    .await;
    wait_active(h, &lb_id).await;

    // Every pool has a monitor here: the status sample's pools all carry one.
    h.check(
        "GET",
        &t("/loadbalancers/{id}/status"),
        &lbp("/status"),
        None,
    )
    .await;
    h.check("GET", &t("/loadbalancers/{id}/stats"), &lbp("/stats"), None)
        .await;
    // Failover is for admins (Octavia's default policy), and no simulated user is one.
    let r = h.call("PUT", &lbp("/failover"), None, None).await;
    assert_eq!(r.status, 403, "{}", r.json);
    assert!(r.json["faultstring"].is_string(), "{}", r.json);
    h.mark_covered("PUT", &t("/loadbalancers/{id}/failover"));

    h.check("DELETE", &t("/pools/{id}/members/{member}"), &mp, None)
        .await;
    wait_active(h, &lb_id).await;
    h.check("DELETE", &t("/healthmonitors/{id}"), &hp, None)
        .await;
    wait_active(h, &lb_id).await;
    h.check("DELETE", &t("/pools/{id}"), &pp, None).await;
    wait_active(h, &lb_id).await;
    h.check("DELETE", &t("/listeners/{id}"), &lp, None).await;
    wait_active(h, &lb_id).await;
    h.check("DELETE", &t("/loadbalancers/{id}"), &lbp(""), None)
        .await;

    let pid = h.project_id.clone();
    h.check("GET", &t("/providers"), &t("/providers"), None)
        .await;
    let flavors = h.check("GET", &t("/flavors"), &t("/flavors"), None).await;
    let f_id = flavors["flavors"][0]["id"]
        .as_str()
        .expect("a seeded flavor");
    h.check(
        "GET",
        &t("/flavors/{id}"),
        &t(&format!("/flavors/{f_id}")),
        None,
    )
    .await;
    h.check(
        "GET",
        &t("/availabilityzones"),
        &t("/availabilityzones"),
        None,
    )
    .await;
    h.check("GET", &t("/quotas"), &t("/quotas"), None).await;
    h.check("GET", &t("/quotas/defaults"), &t("/quotas/defaults"), None)
        .await;
    h.check(
        "GET",
        &t("/quotas/{project_id}"),
        &t(&format!("/quotas/{pid}")),
        None,
    )
    .await;
}

#[tokio::test]
async fn load_balancer_endpoints_match_samples() {
    let h = Harness::new().await;
    for p in [
        "/load-balancer",
        "/load-balancer/",
        "/load-balancer/v2",
        "/load-balancer/v2/",
        "/load-balancer/v2.0/",
    ] {
        let v = h.check("GET", p, p, None).await;
        let ids: Vec<&str> = v["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .filter_map(|x| x["id"].as_str())
            .collect();
        assert!(ids.contains(&"v2.0") && ids.len() > 20, "{ids:?}");
    }
    let subnet = make_subnet(&h, "10.20.0.0/24").await;
    scenario(&h, "v2", &subnet).await;
    scenario(&h, "v2.0", &subnet).await;
    h.assert_all_covered(Service::LoadBalancer);
}

/// The fully-populated create answers with the whole graph (its own sample, checked by hand since the
/// endpoint's registered sample is the plain create).
#[tokio::test]
async fn fully_populated_create_matches_its_sample() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.21.0.0/24").await;
    let r = h
        .call(
            "POST",
            "/load-balancer/v2/lbaas/loadbalancers",
            Some(json!({"loadbalancer": {
                "name": "graph", "vip_subnet_id": subnet, "tags": ["test_tag"],
                "listeners": [
                    {"name": "http_listener", "protocol": "HTTP", "protocol_port": 80, "default_pool": {
                        "name": "rr_pool", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN",
                        "healthmonitor": {"type": "HTTP", "delay": "3", "expected_codes": "200,201,202",
                            "http_method": "GET", "max_retries": 2, "timeout": 1, "url_path": "/index.html"},
                        "members": [{"address": "192.0.2.16", "protocol_port": 80},
                                    {"address": "192.0.2.19", "protocol_port": 80}],
                    }},
                    {"name": "https_listener", "protocol": "HTTPS", "protocol_port": 443,
                     "default_pool": {"name": "https_pool"}, "tags": ["test_tag"]},
                ],
                "pools": [{"name": "https_pool", "protocol": "HTTPS", "lb_algorithm": "ROUND_ROBIN",
                    "healthmonitor": {"type": "HTTPS", "delay": "3", "max_retries": 2, "timeout": 1},
                    "members": [{"address": "192.0.2.51", "protocol_port": 80},
                                {"address": "192.0.2.52", "protocol_port": 80}]}],
            }})),
            None,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let missing = common::missing_keys(
        &common::load_sample("load-balancer/v2/examples/loadbalancer-full-create-response.json"),
        &r.json,
    );
    assert!(missing.is_empty(), "missing {missing:?}\n{:#}", r.json);
    let lb = &r.json["loadbalancer"];
    assert_eq!(lb["listeners"].as_array().map(Vec::len), Some(2));
    assert_eq!(lb["pools"].as_array().map(Vec::len), Some(2));
    for l in lb["listeners"].as_array().into_iter().flatten() {
        assert!(l["default_pool"]["id"].is_string(), "{l}");
        assert_eq!(l["provisioning_status"], "PENDING_CREATE");
    }
}
