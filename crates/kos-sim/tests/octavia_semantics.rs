//! Octavia's behaviour as clients depend on it: the provisioning state machine and its 409s, cascade
//! delete, batch member update, fully-populated create, validation, filters, pagination and quotas.

mod common;

use std::time::Duration;

use common::{Harness, Resp};
use kos_sim::SimConfig;
use serde_json::{Value, json};

const LBAAS: &str = "/load-balancer/v2/lbaas";

async fn make_subnet(h: &Harness, cidr: &str) -> String {
    let net = h
        .call(
            "POST",
            "/network/v2.0/networks",
            Some(json!({"network": {"name": "lb-net"}})),
            None,
        )
        .await;
    let net_id = net.json["network"]["id"].as_str().expect("network id");
    let sub = h
        .call(
            "POST",
            "/network/v2.0/subnets",
            Some(json!({"subnet": {"network_id": net_id, "cidr": cidr, "ip_version": 4}})),
            None,
        )
        .await;
    sub.json["subnet"]["id"]
        .as_str()
        .expect("subnet id")
        .to_owned()
}

async fn post(h: &Harness, path: &str, body: Value) -> Resp {
    h.call("POST", &format!("{LBAAS}{path}"), Some(body), None)
        .await
}

async fn get(h: &Harness, path: &str) -> Resp {
    h.call("GET", &format!("{LBAAS}{path}"), None, None).await
}

async fn create_lb(h: &Harness, subnet: &str, extra: Value) -> String {
    let mut spec = json!({"name": "lb", "vip_subnet_id": subnet});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let r = post(h, "/loadbalancers", json!({ "loadbalancer": spec })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    r.json["loadbalancer"]["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

async fn lb(h: &Harness, id: &str) -> Value {
    get(h, &format!("/loadbalancers/{id}")).await.json["loadbalancer"].clone()
}

/// Polls until the LB is ACTIVE (bounded; no timing assertion).
async fn wait_active(h: &Harness, id: &str) -> Value {
    for _ in 0..1000 {
        let v = lb(h, id).await;
        if v["provisioning_status"] == "ACTIVE" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("load balancer {id} never became ACTIVE");
}

async fn wait_gone(h: &Harness, id: &str) {
    for _ in 0..1000 {
        if get(h, &format!("/loadbalancers/{id}")).await.status == 404 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("load balancer {id} was never deleted");
}

fn assert_immutable(r: &Resp, lb_id: &str) {
    assert_eq!(r.status, 409, "{}", r.json);
    assert_eq!(
        r.json["faultstring"],
        format!("Load Balancer {lb_id} is immutable and cannot be updated.")
    );
    assert_eq!(r.json["faultcode"], "Client");
}

/// Pending windows long enough (a few hundred real ms) that a follow-up request surely lands in them.
fn slow() -> SimConfig {
    let mut cfg = SimConfig::fast();
    cfg.latency.lb_create_secs = 400.0;
    cfg.latency.lb_update_secs = 300.0;
    cfg.latency.lb_delete_secs = 300.0;
    cfg
}

#[tokio::test]
async fn pending_load_balancer_is_immutable_until_active() {
    let h = Harness::with_config(slow()).await;
    let subnet = make_subnet(&h, "10.1.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({})).await;
    let v = lb(&h, &id).await;
    assert_eq!(v["provisioning_status"], "PENDING_CREATE");
    assert_eq!(v["operating_status"], "OFFLINE");
    let listener =
        json!({"listener": {"protocol": "TCP", "protocol_port": 80, "loadbalancer_id": id}});
    assert_immutable(&post(&h, "/listeners", listener.clone()).await, &id);
    let upd = h
        .call(
            "PUT",
            &format!("{LBAAS}/loadbalancers/{id}"),
            Some(json!({"loadbalancer": {"name": "x"}})),
            None,
        )
        .await;
    assert_immutable(&upd, &id);

    let v = wait_active(&h, &id).await;
    assert_eq!(v["operating_status"], "ONLINE");
    // The VIP is a real Neutron port owned by Octavia.
    let port = h
        .call(
            "GET",
            &format!(
                "/network/v2.0/ports/{}",
                v["vip_port_id"].as_str().expect("port")
            ),
            None,
            None,
        )
        .await;
    assert_eq!(port.status, 200);
    assert_eq!(port.json["port"]["device_owner"], "Octavia");
    assert_eq!(port.json["port"]["name"], format!("octavia-lb-{id}"));
    assert_eq!(
        port.json["port"]["fixed_ips"][0]["ip_address"],
        v["vip_address"]
    );

    let r = post(&h, "/listeners", listener).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json["listener"]["provisioning_status"], "PENDING_CREATE");
    assert_eq!(lb(&h, &id).await["provisioning_status"], "PENDING_UPDATE");
    let pool =
        json!({"pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "loadbalancer_id": id}});
    assert_immutable(&post(&h, "/pools", pool.clone()).await, &id);
    wait_active(&h, &id).await;
    let r = get(
        &h,
        &format!(
            "/listeners/{}",
            r.json["listener"]["id"].as_str().expect("id")
        ),
    )
    .await;
    assert_eq!(r.json["listener"]["provisioning_status"], "ACTIVE");

    let r = post(&h, "/pools", pool).await;
    let pool_id = r.json["pool"]["id"].as_str().expect("pool").to_owned();
    wait_active(&h, &id).await;
    let member = |addr: &str| json!({"member": {"address": addr, "protocol_port": 8080}});
    let members = format!("/pools/{pool_id}/members");
    assert_eq!(post(&h, &members, member("10.1.0.10")).await.status, 201);
    // A member change while the LB is PENDING_UPDATE is refused.
    assert_immutable(&post(&h, &members, member("10.1.0.11")).await, &id);
    let batch = h
        .call(
            "PUT",
            &format!("{LBAAS}{members}"),
            Some(json!({"members": []})),
            None,
        )
        .await;
    assert_immutable(&batch, &id);
}

#[tokio::test]
async fn children_block_delete_and_cascade_removes_everything() {
    // Slow enough that PENDING_DELETE is still there when the test looks (fast() is ~10 ms).
    let h = Harness::with_config(slow()).await;
    let subnet = make_subnet(&h, "10.2.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({})).await;
    let vip_port = wait_active(&h, &id).await["vip_port_id"]
        .as_str()
        .expect("port")
        .to_owned();
    post(
        &h,
        "/listeners",
        json!({"listener": {"protocol": "HTTP", "protocol_port": 80, "loadbalancer_id": id}}),
    )
    .await;
    wait_active(&h, &id).await;
    let path = format!("{LBAAS}/loadbalancers/{id}");
    let r = h.call("DELETE", &path, None, None).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json["faultstring"],
        format!("Cannot delete Load Balancer {id} - it has children")
    );
    let r = h
        .call("DELETE", &format!("{path}?cascade=true"), None, None)
        .await;
    assert_eq!(r.status, 204);
    let v = lb(&h, &id).await;
    assert_eq!(v["provisioning_status"], "PENDING_DELETE");
    wait_gone(&h, &id).await;
    assert_eq!(
        get(&h, &format!("/listeners?loadbalancer_id={id}"))
            .await
            .json["listeners"],
        json!([])
    );
    let port = h
        .call(
            "GET",
            &format!("/network/v2.0/ports/{vip_port}"),
            None,
            None,
        )
        .await;
    assert_eq!(port.status, 404, "VIP port deleted with the LB");
}

#[tokio::test]
async fn batch_member_update_replaces_the_member_set() {
    // Slow enough to observe the PENDING_* statuses of one batch cycle.
    let h = Harness::with_config(slow()).await;
    let subnet = make_subnet(&h, "10.3.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({})).await;
    wait_active(&h, &id).await;
    let r = post(
        &h,
        "/pools",
        json!({"pool": {"protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "loadbalancer_id": id}}),
    )
    .await;
    let pool = r.json["pool"]["id"].as_str().expect("pool").to_owned();
    wait_active(&h, &id).await;
    let members = format!("/pools/{pool}/members");
    for addr in ["10.3.0.10", "10.3.0.11"] {
        let r = post(
            &h,
            &members,
            json!({"member": {"address": addr, "protocol_port": 80, "weight": 5}}),
        )
        .await;
        assert_eq!(r.status, 201);
        wait_active(&h, &id).await;
    }
    let dup = post(
        &h,
        &members,
        json!({"member": {"address": "10.3.0.10", "protocol_port": 80}}),
    )
    .await;
    assert_eq!(dup.status, 409);
    assert!(
        dup.json["faultstring"]
            .as_str()
            .is_some_and(|s| s.contains("Duplicate member")),
        "{}",
        dup.json
    );

    let r = h
        .call(
            "PUT",
            &format!("{LBAAS}{members}"),
            Some(json!({"members": [
                {"address": "10.3.0.11", "protocol_port": 80, "weight": 50},
                {"address": "10.3.0.12", "protocol_port": 80, "name": "new"},
            ]})),
            None,
        )
        .await;
    assert_eq!(r.status, 202);
    assert_eq!(r.json, Value::Null, "202 with an empty body");
    let listed = get(&h, &members).await.json["members"].clone();
    let status = |addr: &str| {
        listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["address"] == addr)
            .map(|m| m["provisioning_status"].clone())
    };
    assert_eq!(status("10.3.0.10"), Some(json!("PENDING_DELETE")));
    assert_eq!(status("10.3.0.11"), Some(json!("PENDING_UPDATE")));
    assert_eq!(status("10.3.0.12"), Some(json!("PENDING_CREATE")));
    assert_eq!(lb(&h, &id).await["provisioning_status"], "PENDING_UPDATE");
    wait_active(&h, &id).await;
    let listed = get(&h, &members).await.json["members"].clone();
    let mut got: Vec<(String, i64)> = listed
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["address"].as_str().unwrap_or_default().to_owned(),
                m["weight"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![("10.3.0.11".to_owned(), 50), ("10.3.0.12".to_owned(), 1)]
    );
    assert!(listed.as_array().into_iter().flatten().all(|m| {
        m["provisioning_status"] == "ACTIVE" && m["operating_status"] == "NO_MONITOR"
    }));
}

#[tokio::test]
async fn fully_populated_create_and_operating_statuses() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.4.0.0/24").await;
    let id = create_lb(
        &h,
        &subnet,
        json!({"listeners": [{"protocol": "HTTP", "protocol_port": 80, "default_pool": {
            "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN",
            "healthmonitor": {"type": "HTTP", "delay": 5, "timeout": 3, "max_retries": 3},
            "members": [{"address": "10.4.0.5", "protocol_port": 8080}],
        }}]}),
    )
    .await;
    let tree = get(&h, &format!("/loadbalancers/{id}/status")).await.json;
    let l = &tree["statuses"]["loadbalancer"]["listeners"][0];
    assert_eq!(l["provisioning_status"], "PENDING_CREATE");
    assert_eq!(
        l["pools"][0]["members"][0]["provisioning_status"],
        "PENDING_CREATE"
    );
    wait_active(&h, &id).await;
    let tree = get(&h, &format!("/loadbalancers/{id}/status")).await.json;
    let root = &tree["statuses"]["loadbalancer"];
    assert_eq!(root["operating_status"], "ONLINE");
    let pool = &root["listeners"][0]["pools"][0];
    assert_eq!(pool["provisioning_status"], "ACTIVE");
    assert_eq!(pool["operating_status"], "ONLINE");
    assert_eq!(pool["healthmonitor"]["type"], "HTTP");
    assert_eq!(
        pool["members"][0]["operating_status"], "ONLINE",
        "monitored member"
    );

    // A disabled LB is OFFLINE.
    let r = h
        .call(
            "PUT",
            &format!("{LBAAS}/loadbalancers/{id}"),
            Some(json!({"loadbalancer": {"admin_state_up": false}})),
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(wait_active(&h, &id).await["operating_status"], "OFFLINE");

    // A graph that fails validation leaves nothing behind.
    let r = post(
        &h,
        "/loadbalancers",
        json!({"loadbalancer": {"name": "bad-graph", "vip_subnet_id": subnet, "listeners": [
            {"protocol": "HTTP", "protocol_port": 81},
            {"protocol": "HTTP", "protocol_port": 81},
        ]}}),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.json);
    let listed = get(&h, "/loadbalancers?name=bad-graph").await;
    assert_eq!(listed.json["loadbalancers"], json!([]));
}

#[tokio::test]
async fn validation_errors() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.5.0.0/24").await;
    let bad = |r: Resp, needle: &str| {
        assert_eq!(r.status, 400, "{}", r.json);
        let msg = r.json["faultstring"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
    };
    bad(
        post(&h, "/loadbalancers", json!({"loadbalancer": {"name": "x"}})).await,
        "VIP must contain one of",
    );
    bad(
        post(
            &h,
            "/loadbalancers",
            json!({"loadbalancer": {"vip_subnet_id": subnet, "provider": "f5"}}),
        )
        .await,
        "Provider 'f5' is not enabled.",
    );
    bad(
        post(
            &h,
            "/loadbalancers",
            json!({"loadbalancer": {"vip_subnet_id": subnet, "flavor_id": "nope"}}),
        )
        .await,
        "Invalid flavor_id",
    );
    bad(
        post(
            &h,
            "/loadbalancers",
            json!({"loadbalancer": {"vip_subnet_id": subnet, "colour": "red"}}),
        )
        .await,
        "Unknown attribute",
    );

    let id = create_lb(&h, &subnet, json!({})).await;
    wait_active(&h, &id).await;
    let listener = |extra: Value| {
        let mut l = json!({"protocol": "HTTP", "protocol_port": 80, "loadbalancer_id": id});
        if let (Some(m), Some(e)) = (l.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        json!({ "listener": l })
    };
    bad(
        post(&h, "/listeners", listener(json!({"protocol_port": 70000}))).await,
        "protocol_port",
    );
    bad(
        post(
            &h,
            "/listeners",
            listener(json!({"allowed_cidrs": ["10.0.0.0/33"]})),
        )
        .await,
        "CIDR",
    );
    bad(
        post(
            &h,
            "/listeners",
            listener(json!({"protocol": "TCP", "insert_headers": {"X-Forwarded-For": "true"}})),
        )
        .await,
        "headers are not supported",
    );
    bad(
        post(
            &h,
            "/listeners",
            listener(json!({"protocol": "TERMINATED_HTTPS", "protocol_port": 443})),
        )
        .await,
        "TERMINATED_HTTPS",
    );

    let r = post(&h, "/listeners", listener(json!({}))).await;
    assert_eq!(r.status, 201);
    wait_active(&h, &id).await;
    let dup = post(&h, "/listeners", listener(json!({"protocol": "TCP"}))).await;
    assert_eq!(dup.status, 409);
    assert_eq!(
        dup.json["faultstring"],
        "Another Listener on this Load Balancer is already using protocol_port 80"
    );
    // Another protocol family may share the port number.
    let udp = post(&h, "/listeners", listener(json!({"protocol": "UDP"}))).await;
    assert_eq!(udp.status, 201, "{}", udp.json);
    wait_active(&h, &id).await;

    let r = post(
        &h,
        "/pools",
        json!({"pool": {"protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "loadbalancer_id": id}}),
    )
    .await;
    let pool = r.json["pool"]["id"].as_str().expect("pool").to_owned();
    wait_active(&h, &id).await;
    let hm = |extra: Value| {
        let mut m =
            json!({"pool_id": pool, "type": "HTTP", "delay": 5, "timeout": 3, "max_retries": 3});
        if let (Some(o), Some(e)) = (m.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        json!({ "healthmonitor": m })
    };
    bad(
        post(&h, "/healthmonitors", hm(json!({"timeout": 10}))).await,
        "timeout",
    );
    bad(
        post(&h, "/healthmonitors", hm(json!({"max_retries": 11}))).await,
        "max_retries",
    );
    bad(
        post(
            &h,
            "/healthmonitors",
            hm(json!({"type": "TCP", "url_path": "/"})),
        )
        .await,
        "url_path",
    );
    assert_eq!(post(&h, "/healthmonitors", hm(json!({}))).await.status, 201);
    wait_active(&h, &id).await;
    let again = post(&h, "/healthmonitors", hm(json!({}))).await;
    assert_eq!(again.status, 409);

    // The OVN provider balances with SOURCE_IP_PORT only (its driver raises UnsupportedOptionError,
    // which Octavia answers with 501).
    let ovn = create_lb(&h, &subnet, json!({"provider": "ovn"})).await;
    wait_active(&h, &ovn).await;
    let r = post(
        &h,
        "/pools",
        json!({"pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "loadbalancer_id": ovn}}),
    )
    .await;
    assert_eq!(r.status, 501, "{}", r.json);
    assert!(
        r.json
            .to_string()
            .contains("OVN provider does not support ROUND_ROBIN algorithm")
    );
    let ok = post(
        &h,
        "/pools",
        json!({"pool": {"protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "loadbalancer_id": ovn}}),
    )
    .await;
    assert_eq!(ok.status, 201, "{}", ok.json);
}

#[tokio::test]
async fn tag_filters_and_pagination() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.6.0.0/24").await;
    for (name, tags) in [
        ("a", json!(["x", "y"])),
        ("b", json!(["x"])),
        ("c", json!(["z"])),
    ] {
        create_lb(&h, &subnet, json!({"name": name, "tags": tags})).await;
    }
    let names = |v: &Value| -> Vec<String> {
        v["loadbalancers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["name"].as_str().map(str::to_owned))
            .collect()
    };
    for (q, want) in [
        ("tags=x,y", vec!["a"]),
        ("tags=x", vec!["a", "b"]),
        ("tags-any=y,z", vec!["a", "c"]),
        ("not-tags=x,y", vec!["b", "c"]),
        ("not-tags-any=x", vec!["c"]),
    ] {
        assert_eq!(
            names(&get(&h, &format!("/loadbalancers?{q}")).await.json),
            want,
            "{q}"
        );
    }
    let page = get(&h, "/loadbalancers?limit=2").await.json;
    assert_eq!(names(&page), vec!["a", "b"]);
    let next = page["loadbalancers_links"][0]["href"]
        .as_str()
        .expect("next link");
    assert_eq!(page["loadbalancers_links"][0]["rel"], "next");
    let rest = next.split_once("/lbaas").map(|(_, p)| p).expect("path");
    let page2 = get(&h, rest).await.json;
    assert_eq!(names(&page2), vec!["c"]);
    assert_eq!(page2["loadbalancers_links"], json!([]));
    let only = get(&h, "/loadbalancers?fields=id&fields=name").await.json;
    let first = only["loadbalancers"][0].as_object().expect("object");
    assert_eq!(first.len(), 2, "{first:?}");
    // A marker Octavia does not know (its object deleted between two pages): `InvalidMarker`,
    // a 400, not a 404.
    let gone = "0b7d0b5e-0000-4000-8000-000000000000";
    let r = get(&h, &format!("/pools?limit=1&marker={gone}")).await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert!(
        r.json.to_string().contains("pagination marker"),
        "{}",
        r.json
    );
}

/// A pool list pages as every list, and each pool on a page shows its own members' ids (the
/// simulator adds them to the page's pools only, after filtering and paging).
#[tokio::test]
async fn a_pool_list_pages_and_each_pool_shows_its_own_members() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.9.0.0/24").await;
    let pool = |members: Value| json!({"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members});
    let id = create_lb(
        &h,
        &subnet,
        json!({"listeners": [
            {"protocol": "TCP", "protocol_port": 80, "default_pool": pool(json!([
                {"address": "10.9.0.5", "protocol_port": 30080}]))},
            {"protocol": "TCP", "protocol_port": 81, "default_pool": pool(json!([
                {"address": "10.9.0.5", "protocol_port": 30081},
                {"address": "10.9.0.6", "protocol_port": 30081}]))},
        ]}),
    )
    .await;
    wait_active(&h, &id).await;
    let ids = |v: &Value| -> Vec<String> {
        let mut ids: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    };
    let mut seen = Vec::new();
    let mut path = "/pools?limit=1".to_owned();
    for _ in 0..3 {
        let page = get(&h, &path).await.json;
        for p in page["pools"].as_array().into_iter().flatten() {
            let pid = p["id"].as_str().expect("pool id");
            let own = get(&h, &format!("/pools/{pid}/members")).await.json;
            assert_eq!(ids(&p["members"]), ids(&own["members"]), "pool {pid}");
            assert_eq!(
                p["members"],
                get(&h, &format!("/pools/{pid}")).await.json["pool"]["members"]
            );
            seen.push(ids(&p["members"]).len());
        }
        let Some(next) = page["pools_links"][0]["href"].as_str() else {
            break;
        };
        path = next
            .split_once("/lbaas")
            .map(|(_, p)| p)
            .expect("path")
            .to_owned();
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![1, 2]);
    // `fields` picks the member references as any other key.
    let only = get(&h, "/pools?fields=members").await.json;
    let counts: Vec<usize> = only["pools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            assert_eq!(p.as_object().map(|o| o.len()), Some(1), "{p}");
            ids(&p["members"]).len()
        })
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), 3);
}

#[tokio::test]
async fn quota_is_enforced_with_403() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.7.0.0/24").await;
    let r = h
        .http
        .put(h.url("/_sim/quotas"))
        .json(&json!({"load_balancers": 1}))
        .send()
        .await
        .expect("admin api");
    assert!(r.status().is_success());
    let q = get(&h, &format!("/quotas/{}", h.project_id)).await;
    assert_eq!(q.json["quota"]["loadbalancer"], 1);
    create_lb(&h, &subnet, json!({})).await;
    let r = post(
        &h,
        "/loadbalancers",
        json!({"loadbalancer": {"vip_subnet_id": subnet}}),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json["faultstring"],
        "Quota has been met for resources: Load Balancer"
    );
}

#[tokio::test]
async fn errored_load_balancer_can_only_be_deleted() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.8.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({})).await;
    wait_active(&h, &id).await;
    assert!(kos_sim::octavia::force_lb_error(
        &mut h.sim.app().cloud(),
        &id
    ));
    let v = lb(&h, &id).await;
    assert_eq!(v["provisioning_status"], "ERROR");
    assert_eq!(v["operating_status"], "ERROR");
    let r = post(
        &h,
        "/listeners",
        json!({"listener": {"protocol": "HTTP", "protocol_port": 80, "loadbalancer_id": id}}),
    )
    .await;
    assert_immutable(&r, &id);
    let r = h
        .call("DELETE", &format!("{LBAAS}/loadbalancers/{id}"), None, None)
        .await;
    assert_eq!(r.status, 204);
    wait_gone(&h, &id).await;
}

async fn ports_on(h: &Harness, network: &str) -> Vec<Value> {
    let r = h
        .call(
            "GET",
            &format!("/network/v2.0/ports?network_id={network}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["ports"].as_array().cloned().unwrap_or_default()
}

fn named<'a>(ports: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    ports
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .collect()
}

/// As minicloud shows an amphora load balancer: the amphora's `octavia-lb-vrrp-<id>` port, owned by
/// Octavia's project, appears among the network owner's ports, untouchable by them; the VIP port is
/// administratively down and both carry Octavia's `lb-<lb id>` group, which the user cannot show.
#[tokio::test]
async fn amphora_plugs_its_own_port_into_the_vip_network() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.9.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({})).await;
    let v = wait_active(&h, &id).await;
    let network = v["vip_network_id"]
        .as_str()
        .expect("vip network")
        .to_owned();
    let ports = ports_on(&h, &network).await;
    let vip = named(&ports, &format!("octavia-lb-{id}"));
    let vrrp = named(&ports, "octavia-lb-vrrp-");
    assert_eq!((vip.len(), vrrp.len()), (1, 1), "{ports:#?}");
    let (vip, vrrp) = (vip[0], vrrp[0]);
    assert_eq!(vip["admin_state_up"], false);
    assert_eq!(vip["project_id"], h.project_id.as_str());
    assert_eq!(vrrp["device_owner"], "compute:nova");
    assert_eq!(vrrp["status"], "ACTIVE");
    assert_ne!(vrrp["project_id"], h.project_id.as_str());
    assert_eq!(
        vrrp["allowed_address_pairs"][0]["ip_address"],
        v["vip_address"]
    );
    assert_eq!(vrrp["security_groups"], vip["security_groups"]);
    let sg = vip["security_groups"][0].as_str().expect("the lb- group");
    let r = h
        .call(
            "GET",
            &format!("/network/v2.0/security-groups/{sg}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 404, "another project's group: {}", r.json);
    let vrrp_id = vrrp["id"].as_str().expect("port id").to_owned();
    let path = format!("/network/v2.0/ports/{vrrp_id}");
    let r = h
        .call("PUT", &path, Some(json!({"port": {"name": "x"}})), None)
        .await;
    assert_eq!(r.status, 403, "{}", r.json);
    let r = h.call("DELETE", &path, None, None).await;
    assert_eq!(r.status, 403, "{}", r.json);
    // The user's port quota is not charged for Octavia's port.
    let r = h
        .call(
            "GET",
            &format!("/network/v2.0/quotas/{}/details", h.project_id),
            None,
            None,
        )
        .await;
    let own = ports
        .iter()
        .filter(|p| p["project_id"] == h.project_id.as_str())
        .count();
    assert_eq!(ports.len(), own + 1);
    assert_eq!(r.json["quota"]["port"]["used"], own, "{}", r.json);

    // A member may not fail it over; an admin's failover replaces the amphora, and its port with it.
    let r = h
        .call(
            "PUT",
            &format!("{LBAAS}/loadbalancers/{id}/failover"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.json);
    kos_sim::octavia::fail_over(&mut h.sim.app().cloud(), &id).expect("failover");
    assert_eq!(lb(&h, &id).await["provisioning_status"], "PENDING_UPDATE");
    wait_active(&h, &id).await;
    let after = ports_on(&h, &network).await;
    let vrrp = named(&after, "octavia-lb-vrrp-");
    assert_eq!(vrrp.len(), 1, "{after:#?}");
    assert_ne!(vrrp[0]["id"], vrrp_id.as_str());

    // Deleting the load balancer takes its ports and group with it: the network can go.
    let r = h
        .call("DELETE", &format!("{LBAAS}/loadbalancers/{id}"), None, None)
        .await;
    assert_eq!(r.status, 204);
    wait_gone(&h, &id).await;
    let left = ports_on(&h, &network).await;
    assert!(named(&left, "octavia-").is_empty(), "{left:#?}");
    let r = h
        .call(
            "DELETE",
            &format!("/network/v2.0/subnets/{subnet}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.json);
}

#[tokio::test]
async fn ovn_load_balancer_has_no_amphora_port() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.10.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({"provider": "ovn"})).await;
    let v = wait_active(&h, &id).await;
    let ports = ports_on(&h, v["vip_network_id"].as_str().expect("network")).await;
    assert!(named(&ports, "octavia-lb-vrrp-").is_empty(), "{ports:#?}");
}

/// As ovn-octavia-provider does (`helper.py`: `_ensure_hm_ovn_port`, `_clean_up_hm_port`): a monitor on
/// an OVN load balancer gets a port `ovn-lb-hm-<subnet id>` on each member subnet (port security off, in
/// the member port's project), the source of its health checks; it goes when no monitor needs it.
#[tokio::test]
async fn ovn_health_monitor_plugs_a_health_check_port_into_the_member_subnet() {
    let h = Harness::new().await;
    let subnet = make_subnet(&h, "10.11.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({"provider": "ovn"})).await;
    let network = wait_active(&h, &id).await["vip_network_id"]
        .as_str()
        .expect("network")
        .to_owned();
    let member = h
        .call(
            "POST",
            "/network/v2.0/ports",
            Some(json!({"port": {"network_id": network, "name": "node-0"}})),
            None,
        )
        .await;
    assert_eq!(member.status, 201, "{}", member.json);
    let address = member.json["port"]["fixed_ips"][0]["ip_address"].clone();
    let r = post(
        &h,
        "/listeners",
        json!({"listener": {"loadbalancer_id": id, "protocol": "TCP", "protocol_port": 80}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let listener = r.json["listener"]["id"].clone();
    wait_active(&h, &id).await;
    let r = post(
        &h,
        "/pools",
        json!({"pool": {"listener_id": listener, "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT"}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let pool = r.json["pool"]["id"].as_str().expect("pool").to_owned();
    wait_active(&h, &id).await;
    let r = post(
        &h,
        &format!("/pools/{pool}/members"),
        json!({"member": {"address": address, "protocol_port": 30080, "subnet_id": subnet}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.json);
    wait_active(&h, &id).await;
    let hm_name = format!("ovn-lb-hm-{subnet}");
    assert!(
        named(&ports_on(&h, &network).await, &hm_name).is_empty(),
        "no monitor, no health-check port"
    );

    let r = post(
        &h,
        "/healthmonitors",
        json!({"healthmonitor": {"pool_id": pool, "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 1}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let monitor = r.json["healthmonitor"]["id"]
        .as_str()
        .expect("monitor")
        .to_owned();
    wait_active(&h, &id).await;
    let ports = ports_on(&h, &network).await;
    let hm = named(&ports, &hm_name);
    assert_eq!(hm.len(), 1, "{ports:#?}");
    let hm = hm[0];
    assert_eq!(hm["device_owner"], "ovn-lb-hm:distributed");
    assert_eq!(hm["device_id"], hm_name.as_str());
    assert_eq!(hm["port_security_enabled"], false);
    assert_eq!(hm["security_groups"], json!([]));
    assert_eq!(hm["fixed_ips"][0]["subnet_id"], subnet.as_str());
    assert_eq!(hm["project_id"], h.project_id.as_str());

    let r = h
        .call(
            "DELETE",
            &format!("{LBAAS}/healthmonitors/{monitor}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.json);
    wait_active(&h, &id).await;
    let left = ports_on(&h, &network).await;
    assert!(named(&left, &hm_name).is_empty(), "{left:#?}");
}

/// ovn-octavia-provider refuses listener `allowed_cidrs` (its driver's `_check_for_allowed_cidrs`
/// raises UnsupportedOptionError, which Octavia answers with 501), on create and on update.
#[tokio::test]
async fn an_ovn_listener_refuses_allowed_cidrs_with_501() {
    let h = Harness::with_config(SimConfig::fast()).await;
    let subnet = make_subnet(&h, "10.70.0.0/24").await;
    let lb = create_lb(&h, &subnet, json!({"provider": "ovn"})).await;
    wait_active(&h, &lb).await;
    let r = post(
        &h,
        "/listeners",
        json!({"listener": {"loadbalancer_id": lb, "protocol": "TCP", "protocol_port": 6443,
            "allowed_cidrs": ["198.51.100.0/24"]}}),
    )
    .await;
    assert_eq!(r.status, 501, "{}", r.json);
    assert!(
        r.json.to_string().contains(
            "Provider 'ovn' does not support a requested option: OVN provider does not support allowed_cidrs option"
        ),
        "{}",
        r.json
    );
    // Without them it is made; an update that adds them is refused the same way.
    let r = post(
        &h,
        "/listeners",
        json!({"listener": {"loadbalancer_id": lb, "protocol": "TCP", "protocol_port": 6443}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let id = r.json["listener"]["id"].as_str().expect("id").to_owned();
    wait_active(&h, &lb).await;
    let r = h
        .call(
            "PUT",
            &format!("{LBAAS}/listeners/{id}"),
            Some(json!({"listener": {"allowed_cidrs": ["198.51.100.0/24"]}})),
            None,
        )
        .await;
    assert_eq!(r.status, 501, "{}", r.json);
}

/// `/_sim/latency`: Octavia turns slow while the simulator runs (a cloud under load), and a load balancer
/// already pending waits for the new duration; `DELETE` restores the configured model. Bad input is
/// refused and changes nothing.
#[tokio::test]
async fn octavia_turns_slow_at_runtime_and_back() {
    let h = Harness::with_config(SimConfig::fast()).await;
    let configured = h.call("GET", "/_sim/latency", None, None).await;
    assert_eq!(configured.status, 200);
    assert_eq!(configured.json["lb_create_secs"], json!(60.0));

    for bad in [
        json!({"lb_create_secs": -1}),
        json!({"lb_create_secs": "slow"}),
        json!({"lb_crate_secs": 10}),
    ] {
        let r = h
            .call("PUT", "/_sim/latency", Some(bad.clone()), None)
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.json);
    }
    let unchanged = h.call("GET", "/_sim/latency", None, None).await;
    assert_eq!(unchanged.json, configured.json);

    let r = h
        .call(
            "PUT",
            "/_sim/latency",
            Some(json!({"lb_create_secs": 1e6})),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["lb_create_secs"], json!(1e6));
    assert_eq!(r.json["lb_delete_secs"], configured.json["lb_delete_secs"]);

    let subnet = make_subnet(&h, "10.9.0.0/24").await;
    let id = create_lb(&h, &subnet, json!({})).await;
    let made = h.sim.app().now();
    // Twice the configured provisioning time passes: the slow Octavia is still at it.
    while !h.sim.app().now().reached(made.after(120.0)) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(lb(&h, &id).await["provisioning_status"], "PENDING_CREATE");

    let r = h.call("DELETE", "/_sim/latency", None, None).await;
    assert_eq!(r.status, 204);
    assert_eq!(
        h.call("GET", "/_sim/latency", None, None).await.json,
        configured.json
    );
    wait_active(&h, &id).await;
}
