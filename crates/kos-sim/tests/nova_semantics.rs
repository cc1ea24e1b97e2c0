//! Nova's behaviour beyond wire shapes: the server state machine, validation limits, scheduling with
//! server groups, quotas, ports and volumes, microversion negotiation, keypairs and paging. Polls are
//! bounded loops; nothing asserts on timing.

mod common;

use std::time::Duration;

use base64::Engine;
use common::{Harness, Resp};
use kos_sim::SimConfig;
use serde_json::{Value, json};

const P: &str = "/compute/v2.1";
const KEY: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDx8nkQv/zgGgB4rMYmIf+6A4l6Rr+o/6lHBQdW5aYd44bd8JttDCE/F/pNRr0lRE+PiqSPO8nDPHw0010JeMH9gYgnnFlyY3/OcJ02RhIPyyxYpv9FhY+2YiUkpwFOcLImyrxEsYXpD/0d3ac30bNH6Sw9JD9UZHYcpSxsIbECHw== Generated-by-Nova";
const LATEST: Option<(&str, &str)> = Some(("compute", "latest"));

async fn image_id(h: &Harness) -> String {
    let r = h
        .call("GET", "/image/v2/images?name=cirros-0.6.2", None, None)
        .await;
    r.json["images"][0]["id"]
        .as_str()
        .expect("seeded image")
        .to_owned()
}

/// A server body with no networks; `extra` is merged into `server`.
async fn server_body(h: &Harness, name: &str, extra: Value) -> Value {
    let mut s =
        json!({"name": name, "imageRef": image_id(h).await, "flavorRef": "1", "networks": "none"});
    if let (Some(o), Some(e)) = (s.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    json!({ "server": s })
}

async fn create(h: &Harness, body: Value) -> Resp {
    h.call("POST", &format!("{P}/servers"), Some(body), LATEST)
        .await
}

async fn create_ok(h: &Harness, body: Value) -> String {
    let r = create(h, body).await;
    assert_eq!(r.status, 202, "create: {}", r.json);
    r.json["server"]["id"].as_str().expect("id").to_owned()
}

async fn show(h: &Harness, id: &str) -> Resp {
    h.call("GET", &format!("{P}/servers/{id}"), None, LATEST)
        .await
}

async fn wait_status(h: &Harness, id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    // Bounded (≥ 10 s of real time), generous for a slow, loaded machine.
    for _ in 0..2000 {
        let r = show(h, id).await;
        if r.json["server"]["status"] == status {
            return r.json["server"].clone();
        }
        if r.json["server"]["status"] == "ERROR" {
            panic!("server {id} went to ERROR waiting for {status}: {}", r.json);
        }
        last = r.json;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("server {id} never reached {status}: {last}");
}

async fn wait_gone(h: &Harness, id: &str) {
    for _ in 0..2000 {
        if show(h, id).await.status == 404 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("server {id} was never removed");
}

/// A network with a subnet of `cidr`, and a port on it: (network id, port id).
async fn port_on_new_network(h: &Harness, name: &str, cidr: &str) -> (String, String) {
    let net = h
        .call(
            "POST",
            "/network/v2.0/networks",
            Some(json!({"network": {"name": name}})),
            None,
        )
        .await;
    assert_eq!(net.status, 201, "{}", net.json);
    let net_id = net.json["network"]["id"].as_str().expect("net").to_owned();
    let sub = h
        .call(
            "POST",
            "/network/v2.0/subnets",
            Some(json!({"subnet": {"network_id": net_id, "cidr": cidr, "ip_version": 4}})),
            None,
        )
        .await;
    assert_eq!(sub.status, 201, "{}", sub.json);
    let port = h
        .call(
            "POST",
            "/network/v2.0/ports",
            Some(json!({"port": {"network_id": net_id}})),
            None,
        )
        .await;
    assert_eq!(port.status, 201, "{}", port.json);
    let port_id = port.json["port"]["id"].as_str().expect("port").to_owned();
    (net_id, port_id)
}

fn message(r: &Resp) -> String {
    r.json
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(|v| v["message"].as_str())
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn build_becomes_active_and_console_has_boot_log() {
    let h = Harness::new().await;
    let ud = base64::engine::general_purpose::STANDARD.encode("#cloud-config\nruncmd: [echo hi]\n");
    let id = create_ok(&h, server_body(&h, "boot", json!({"user_data": ud})).await).await;
    let first = show(&h, &id).await.json["server"].clone();
    // The first look may already be ACTIVE on a fast clock; when it is BUILD it says so consistently.
    if first["status"] == "BUILD" {
        assert_eq!(first["OS-EXT-STS:vm_state"], "building");
        assert_eq!(first["OS-EXT-STS:task_state"], "spawning");
        assert_eq!(first["progress"], 0);
    }
    let s = wait_status(&h, &id, "ACTIVE").await;
    assert_eq!(s["OS-EXT-STS:vm_state"], "active");
    assert_eq!(s["OS-EXT-STS:power_state"], 1);
    assert!(s["OS-SRV-USG:launched_at"].is_string());
    assert!(s["OS-EXT-STS:task_state"].is_null());
    assert_eq!(s["OS-EXT-AZ:availability_zone"], "nova");
    assert_eq!(s["hostId"].as_str().map(str::len), Some(56));

    let out = h
        .call(
            "POST",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-getConsoleOutput": {"length": null}})),
            None,
        )
        .await;
    assert_eq!(out.status, 200);
    let log = out.json["output"].as_str().expect("output");
    assert!(log.contains("Linux version"), "{log}");
    assert!(
        log.contains("Cloud-init v.") && log.contains("finished at"),
        "{log}"
    );
    let tail = h
        .call(
            "POST",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-getConsoleOutput": {"length": 3}})),
            None,
        )
        .await;
    assert_eq!(
        tail.json["output"].as_str().map(|o| o.lines().count()),
        Some(3)
    );
    // Later work can append lines (bootstrap markers).
    {
        let mut cloud = h.sim.app().cloud();
        assert!(kos_sim::nova::console_append(
            &mut cloud,
            &id,
            "KOS-BOOTSTRAP-DONE"
        ));
        assert!(
            cloud
                .nova
                .server(&id)
                .and_then(|s| s.user_data_decoded.clone())
                .is_some_and(|u| u.contains("runcmd"))
        );
    }
    let tail = h
        .call(
            "POST",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-getConsoleOutput": {"length": 1}})),
            None,
        )
        .await;
    assert_eq!(tail.json["output"], "KOS-BOOTSTRAP-DONE");

    // Stop, then stopping again is a conflict in Nova's words.
    let stop = h
        .call(
            "POST",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-stop": null})),
            None,
        )
        .await;
    assert_eq!(stop.status, 202);
    wait_status(&h, &id, "SHUTOFF").await;
    let again = h
        .call(
            "POST",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-stop": null})),
            None,
        )
        .await;
    assert_eq!(again.status, 409);
    assert_eq!(
        message(&again),
        format!("Cannot 'stop' instance {id} while it is in vm_state stopped")
    );
    assert!(again.json["conflictingRequest"].is_object());
    let start = h
        .call(
            "POST",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-start": null})),
            None,
        )
        .await;
    assert_eq!(start.status, 202);
    wait_status(&h, &id, "ACTIVE").await;

    // Delete: task_state deleting, then gone; never listed afterwards.
    let del = h
        .call("DELETE", &format!("{P}/servers/{id}"), None, None)
        .await;
    assert_eq!(del.status, 204);
    wait_gone(&h, &id).await;
    let missing = show(&h, &id).await;
    assert_eq!(
        message(&missing),
        format!("Instance {id} could not be found.")
    );
    let list = h
        .call("GET", &format!("{P}/servers/detail"), None, LATEST)
        .await;
    assert_eq!(list.json["servers"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn request_validation() {
    let h = Harness::new().await;
    // user_data over 65535 bytes once encoded.
    let big = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 50_000]);
    let r = create(&h, server_body(&h, "big", json!({"user_data": big})).await).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        message(&r),
        "User data too large. User data must be no larger than 65535 bytes once base64 encoded."
    );
    let r = create(
        &h,
        server_body(&h, "b64", json!({"user_data": "not base64!"})).await,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.json);

    // Tags: too long, forbidden characters, too many; and not at all before 2.52.
    for tags in [
        json!(["x".repeat(61)]),
        json!(["a/b"]),
        json!(["a,b"]),
        json!((0..51).map(|i| format!("t{i}")).collect::<Vec<_>>()),
    ] {
        let r = create(&h, server_body(&h, "t", json!({ "tags": tags })).await).await;
        assert_eq!(r.status, 400, "{tags}: {}", r.json);
    }
    let r = h
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(server_body(&h, "t", json!({"tags": ["ok"]})).await),
            Some(("compute", "2.51")),
        )
        .await;
    assert_eq!(r.status, 400, "tags need 2.52: {}", r.json);

    // networks is required from 2.37 on.
    let mut body = server_body(&h, "n", json!({})).await;
    body["server"].as_object_mut().map(|o| o.remove("networks"));
    let r = create(&h, body).await;
    assert_eq!(r.status, 400);

    // Unknown flavor, image, key, zone, server group; metadata over 128 items.
    for (extra, what) in [
        (json!({"flavorRef": "999"}), "flavor"),
        (
            json!({"imageRef": "00000000-0000-4000-8000-000000000000"}),
            "image",
        ),
        (json!({"key_name": "nope"}), "key"),
        (json!({"availability_zone": "elsewhere"}), "zone"),
    ] {
        let r = create(&h, server_body(&h, "v", extra).await).await;
        assert_eq!(r.status, 400, "{what}: {}", r.json);
    }
    let mut b = server_body(&h, "g", json!({})).await;
    b["os:scheduler_hints"] = json!({"group": "00000000-0000-4000-8000-000000000000"});
    assert_eq!(create(&h, b).await.status, 400);
    let meta: serde_json::Map<String, Value> =
        (0..129).map(|i| (format!("k{i}"), json!("v"))).collect();
    let r = create(&h, server_body(&h, "m", json!({"metadata": meta})).await).await;
    assert_eq!(r.status, 403, "{}", r.json);

    // Unknown body properties are rejected, as Nova's schemas do.
    let r = create(&h, server_body(&h, "x", json!({"colour": "blue"})).await).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn tag_filters() {
    let h = Harness::new().await;
    let a = create_ok(
        &h,
        server_body(&h, "a", json!({"tags": ["k8s", "cp"]})).await,
    )
    .await;
    let b = create_ok(&h, server_body(&h, "b", json!({"tags": ["k8s"]})).await).await;
    let ids = |r: &Resp| -> Vec<String> {
        r.json["servers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    for (q, want) in [
        ("tags=k8s,cp", vec![a.clone()]),
        ("tags=k8s", vec![b.clone(), a.clone()]),
        ("tags-any=cp,zz", vec![a.clone()]),
        ("not-tags=k8s,cp", vec![b.clone()]),
        ("not-tags-any=cp", vec![b.clone()]),
        ("name=^b$", vec![b.clone()]),
    ] {
        let r = h
            .call("GET", &format!("{P}/servers?{q}"), None, LATEST)
            .await;
        assert_eq!(ids(&r), want, "{q}");
    }
    // Per-server tag API.
    let r = h
        .call(
            "PUT",
            &format!("{P}/servers/{b}/tags/{}", "y".repeat(61)),
            None,
            LATEST,
        )
        .await;
    assert_eq!(r.status, 400);
    // Nova takes a tag change on a settled server only: 409 while it is built.
    let r = h
        .call("PUT", &format!("{P}/servers/{b}/tags/new"), None, LATEST)
        .await;
    assert_eq!(r.status, 409, "{}", r.json);
    assert!(
        r.json
            .to_string()
            .contains("while it is in vm_state building"),
        "{}",
        r.json
    );
    wait_status(&h, &b, "ACTIVE").await;
    let r = h
        .call("PUT", &format!("{P}/servers/{b}/tags/new"), None, LATEST)
        .await;
    assert_eq!(r.status, 201);
    let r = h
        .call(
            "GET",
            &format!("{P}/servers/{b}/tags"),
            None,
            Some(("compute", "2.25")),
        )
        .await;
    assert_eq!(r.status, 404, "tags API starts at 2.26");
}

#[tokio::test]
async fn anti_affinity_beyond_hosts_is_no_valid_host() {
    let h = Harness::new().await;
    let hosts = h.sim.config().compute_hosts as usize;
    let g = h
        .call(
            "POST",
            &format!("{P}/os-server-groups"),
            Some(json!({"server_group": {"name": "spread", "policy": "anti-affinity"}})),
            LATEST,
        )
        .await;
    assert_eq!(g.status, 200, "{}", g.json);
    let gid = g.json["server_group"]["id"]
        .as_str()
        .expect("gid")
        .to_owned();
    let mut ids = Vec::new();
    for i in 0..=hosts {
        let mut b = server_body(&h, &format!("s{i}"), json!({})).await;
        b["os:scheduler_hints"] = json!({"group": gid});
        ids.push(create_ok(&h, b).await);
    }
    let mut host_ids = Vec::new();
    for id in &ids[..hosts] {
        let s = wait_status(&h, id, "ACTIVE").await;
        host_ids.push(s["hostId"].as_str().unwrap_or("").to_owned());
    }
    host_ids.sort();
    host_ids.dedup();
    assert_eq!(host_ids.len(), hosts, "one member per host");
    let last = wait_status(&h, &ids[hosts], "ERROR").await;
    assert_eq!(last["fault"]["code"], 500);
    assert_eq!(
        last["fault"]["message"],
        "No valid host was found. There are not enough hosts available."
    );
    assert!(last["fault"]["created"].is_string());
    let group = h
        .call("GET", &format!("{P}/os-server-groups/{gid}"), None, LATEST)
        .await;
    assert_eq!(
        group.json["server_group"]["members"]
            .as_array()
            .map(Vec::len),
        Some(hosts + 1)
    );
    let shown = show(&h, &ids[0]).await;
    assert_eq!(shown.json["server"]["server_groups"][0], gid.as_str());
}

#[tokio::test]
async fn no_capacity_is_no_valid_host() {
    let cfg = SimConfig {
        compute_hosts: 1,
        host_vcpus: 2,
        ..SimConfig::fast()
    };
    let h = Harness::with_config(cfg).await;
    let big = create_ok(&h, server_body(&h, "big", json!({"flavorRef": "3"})).await).await;
    wait_status(&h, &big, "ACTIVE").await;
    let none = create_ok(&h, server_body(&h, "none", json!({})).await).await;
    let s = wait_status(&h, &none, "ERROR").await;
    assert_eq!(
        s["fault"]["message"],
        "No valid host was found. There are not enough hosts available."
    );
}

#[tokio::test]
async fn instance_quota_is_403() {
    let h = Harness::new().await;
    let r = h
        .http
        .put(h.url("/_sim/quotas"))
        .json(&json!({"instances": 1}))
        .send()
        .await
        .expect("admin api");
    assert!(r.status().is_success());
    create_ok(&h, server_body(&h, "one", json!({})).await).await;
    let r = create(&h, server_body(&h, "two", json!({})).await).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        message(&r),
        "Quota exceeded for instances: Requested 1, but already used 1 of 1 instances"
    );
    assert!(r.json["forbidden"].is_object());
    let lim = h.call("GET", &format!("{P}/limits"), None, LATEST).await;
    assert_eq!(lim.json["limits"]["absolute"]["totalInstancesUsed"], 1);
    assert_eq!(lim.json["limits"]["absolute"]["maxTotalInstances"], 1);
}

#[tokio::test]
async fn microversions() {
    let h = Harness::new().await;
    for v in ["2.97", "3.0", "2.0"] {
        let r = h
            .call("GET", &format!("{P}/flavors"), None, Some(("compute", v)))
            .await;
        assert_eq!(r.status, 406, "{v}");
    }
    let r = h
        .call(
            "GET",
            &format!("{P}/flavors"),
            None,
            Some(("compute", "2.x")),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = h.call("GET", &format!("{P}/flavors"), None, LATEST).await;
    assert_eq!(
        r.headers
            .get("openstack-api-version")
            .and_then(|v| v.to_str().ok()),
        Some("compute 2.96")
    );
    assert!(r.headers.get("vary").is_some());
    let r = h
        .call("GET", &format!("{P}/flavors/detail"), None, None)
        .await;
    assert_eq!(
        r.headers
            .get("openstack-api-version")
            .and_then(|v| v.to_str().ok()),
        Some("compute 2.1")
    );
    let tiny = &r.json["flavors"][0];
    assert_eq!(
        (tiny["name"].as_str(), tiny["vcpus"].as_u64()),
        (Some("m1.tiny"), Some(1))
    );
    assert_eq!(tiny["swap"], "", "no swap is \"\" before 2.75");

    // Server shape per microversion: flavor reference before 2.47, embedded from it.
    let id = create_ok(&h, server_body(&h, "mv", json!({})).await).await;
    let old = h
        .call(
            "GET",
            &format!("{P}/servers/{id}"),
            None,
            Some(("compute", "2.46")),
        )
        .await;
    assert_eq!(old.json["server"]["flavor"]["id"], "1");
    assert!(old.json["server"].get("tags").is_some());
    assert!(old.json["server"].get("locked_reason").is_none());
    let new = show(&h, &id).await;
    assert_eq!(new.json["server"]["flavor"]["original_name"], "m1.tiny");
    assert!(new.json["server"].get("pinned_availability_zone").is_some());
    let v = h.call("GET", "/compute/v2.1", None, None).await;
    assert_eq!(v.json["version"]["version"], "2.96");
    assert_eq!(v.json["version"]["min_version"], "2.1");
}

#[tokio::test]
async fn keypairs() {
    let h = Harness::new().await;
    let kp = |name: &str, key: Option<&str>| {
        let mut k = json!({"name": name});
        if let Some(key) = key {
            k["public_key"] = json!(key);
        }
        json!({ "keypair": k })
    };
    let path = format!("{P}/os-keypairs");
    let r = h
        .call("POST", &path, Some(kp("mine", Some(KEY))), LATEST)
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(
        r.json["keypair"]["fingerprint"],
        "1e:2c:9b:56:79:4b:45:77:f9:ca:7a:98:2c:b0:d5:3c"
    );
    assert_eq!(r.json["keypair"]["type"], "ssh");
    let dup = h
        .call("POST", &path, Some(kp("mine", Some(KEY))), LATEST)
        .await;
    assert_eq!(dup.status, 409);
    let bad_name = h
        .call("POST", &path, Some(kp("no/slash", Some(KEY))), LATEST)
        .await;
    assert_eq!(bad_name.status, 400);
    let dotted = h
        .call(
            "POST",
            &path,
            Some(kp("a.b", Some(KEY))),
            Some(("compute", "2.91")),
        )
        .await;
    assert_eq!(dotted.status, 400, "'.' is allowed only from 2.92");
    let no_key = h.call("POST", &path, Some(kp("gen", None)), LATEST).await;
    assert_eq!(no_key.status, 400, "2.92 requires public_key");
    let garbage = h
        .call(
            "POST",
            &path,
            Some(kp("junk", Some("ssh-rsa AAAAnotakey"))),
            LATEST,
        )
        .await;
    assert_eq!(garbage.status, 400);
    let shown = h.call("GET", &format!("{path}/mine"), None, LATEST).await;
    assert_eq!(shown.json["keypair"]["user_id"], h.user_id.as_str());
    let gone = h
        .call("DELETE", &format!("{path}/mine"), None, LATEST)
        .await;
    assert_eq!(gone.status, 204);
    let again = h
        .call("DELETE", &format!("{path}/mine"), None, LATEST)
        .await;
    assert_eq!(again.status, 404);
}

#[tokio::test]
async fn server_group_quotas() {
    let h = Harness::new().await;
    h.http
        .put(h.url("/_sim/quotas"))
        .json(&json!({"server_groups": 1, "server_group_members": 1}))
        .send()
        .await
        .expect("admin api");
    let mk = |name: &str| json!({"server_group": {"name": name, "policy": "affinity"}});
    let g = h
        .call(
            "POST",
            &format!("{P}/os-server-groups"),
            Some(mk("a")),
            LATEST,
        )
        .await;
    assert_eq!(g.status, 200);
    let second = h
        .call(
            "POST",
            &format!("{P}/os-server-groups"),
            Some(mk("b")),
            LATEST,
        )
        .await;
    assert_eq!(second.status, 403);
    assert_eq!(message(&second), "Quota exceeded, too many server groups.");
    let gid = g.json["server_group"]["id"]
        .as_str()
        .expect("gid")
        .to_owned();
    for (i, want) in [(0, 202), (1, 403)] {
        let mut b = server_body(&h, &format!("m{i}"), json!({})).await;
        b["os:scheduler_hints"] = json!({"group": gid});
        assert_eq!(create(&h, b).await.status, want);
    }
    // Rules exist only for anti-affinity; policies only before 2.64.
    let r = h
        .call(
            "POST",
            &format!("{P}/os-server-groups"),
            Some(json!({"server_group": {"name": "x", "policy": "affinity", "rules": {"max_server_per_host": 2}}})),
            LATEST,
        )
        .await;
    assert_eq!(r.status, 400);
    let r = h
        .call(
            "POST",
            &format!("{P}/os-server-groups"),
            Some(json!({"server_group": {"name": "x", "policies": ["affinity"]}})),
            LATEST,
        )
        .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn list_paging_by_marker() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(create_ok(&h, server_body(&h, &format!("p{i}"), json!({})).await).await);
    }
    let first = h
        .call("GET", &format!("{P}/servers?limit=2"), None, LATEST)
        .await;
    let page: Vec<&str> = first.json["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    // Newest first.
    assert_eq!(page, vec![ids[2].as_str(), ids[1].as_str()]);
    let next = first.json["servers_links"][0]["href"]
        .as_str()
        .expect("next link");
    let rel = next.strip_prefix(h.sim.base_url()).expect("absolute link");
    let second = h.call("GET", rel, None, LATEST).await;
    let page: Vec<&str> = second.json["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(page, vec![ids[0].as_str()]);
    assert!(second.json.get("servers_links").is_none());
    let bad = h
        .call("GET", &format!("{P}/servers?marker=nope"), None, LATEST)
        .await;
    assert_eq!(bad.status, 400);
}

/// Needs Neutron: a server on a port the user made binds it; deleting the server frees it.
#[tokio::test]
async fn server_on_premade_port_binds_it() {
    let h = Harness::new().await;
    let (net_id, port_id) = port_on_new_network(&h, "n1", "10.30.0.0/24").await;

    let id = create_ok(
        &h,
        server_body(&h, "p", json!({"networks": [{"port": port_id}]})).await,
    )
    .await;
    let taken = create(
        &h,
        server_body(&h, "q", json!({"networks": [{"port": port_id}]})).await,
    )
    .await;
    assert_eq!(taken.status, 409, "{}", taken.json);
    let s = wait_status(&h, &id, "ACTIVE").await;
    let addr = &s["addresses"]["n1"][0];
    assert_eq!(addr["OS-EXT-IPS:type"], "fixed");
    assert_eq!(addr["version"], 4);
    let p = h
        .call("GET", &format!("/network/v2.0/ports/{port_id}"), None, None)
        .await;
    assert_eq!(p.json["port"]["device_id"], id.as_str());
    assert_eq!(p.json["port"]["status"], "ACTIVE");
    // binding:host_id is admin-only in Neutron's policy, so this user cannot see it.

    // A network request makes Nova create a port, deleted with the server.
    let id2 = create_ok(
        &h,
        server_body(&h, "r", json!({"networks": [{"uuid": net_id}]})).await,
    )
    .await;
    let s2 = wait_status(&h, &id2, "ACTIVE").await;
    let ifs = h
        .call(
            "GET",
            &format!("{P}/servers/{id2}/os-interface"),
            None,
            LATEST,
        )
        .await;
    let nova_port = ifs.json["interfaceAttachments"][0]["port_id"]
        .as_str()
        .expect("port")
        .to_owned();
    assert!(s2["addresses"]["n1"].is_array());

    for sid in [&id, &id2] {
        h.call("DELETE", &format!("{P}/servers/{sid}"), None, None)
            .await;
        wait_gone(&h, sid).await;
    }
    let p = h
        .call("GET", &format!("/network/v2.0/ports/{port_id}"), None, None)
        .await;
    assert_eq!(p.status, 200, "the user's port survives");
    assert_eq!(p.json["port"]["device_id"], "");
    let p = h
        .call(
            "GET",
            &format!("/network/v2.0/ports/{nova_port}"),
            None,
            None,
        )
        .await;
    assert_eq!(p.status, 404, "Nova's port goes with the server");
}

/// Needs Cinder: boot from a volume made from an image; it attaches as /dev/vda and goes with the server.
#[tokio::test]
async fn boot_from_volume() {
    let h = Harness::new().await;
    let image = image_id(&h).await;
    let body = json!({"server": {
        "name": "bfv", "flavorRef": "1", "networks": "none", "imageRef": "",
        "block_device_mapping_v2": [{
            "boot_index": 0, "uuid": image, "source_type": "image", "destination_type": "volume",
            "volume_size": 2, "delete_on_termination": true,
        }],
    }});
    let id = create_ok(&h, body).await;
    let s = wait_status(&h, &id, "ACTIVE").await;
    assert_eq!(s["image"], "");
    let vols = s["os-extended-volumes:volumes_attached"]
        .as_array()
        .expect("volumes");
    assert_eq!(vols.len(), 1);
    let vid = vols[0]["id"].as_str().expect("vol").to_owned();
    let att = h
        .call(
            "GET",
            &format!("{P}/servers/{id}/os-volume_attachments"),
            None,
            LATEST,
        )
        .await;
    assert_eq!(att.json["volumeAttachments"][0]["device"], "/dev/vda");
    let detach = h
        .call(
            "DELETE",
            &format!("{P}/servers/{id}/os-volume_attachments/{vid}"),
            None,
            LATEST,
        )
        .await;
    assert_eq!(detach.status, 400, "the root volume stays");
    h.call("DELETE", &format!("{P}/servers/{id}"), None, None)
        .await;
    wait_gone(&h, &id).await;
    let mut gone = false;
    for _ in 0..300 {
        let v = h
            .call(
                "GET",
                &format!("/volume/v3/{}/volumes/{vid}", h.project_id),
                None,
                None,
            )
            .await;
        if v.status == 404 || v.json["volume"]["status"] == "deleting" {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(gone, "delete_on_termination removes the volume");
}

#[tokio::test]
async fn force_error_sets_fault() {
    let h = Harness::new().await;
    let id = create_ok(&h, server_body(&h, "e", json!({})).await).await;
    {
        let mut cloud = h.sim.app().cloud();
        assert!(kos_sim::nova::force_server_error(
            &mut cloud,
            &id,
            "host died"
        ));
    }
    let s = show(&h, &id).await.json["server"].clone();
    assert_eq!(s["status"], "ERROR");
    assert_eq!(s["fault"]["message"], "host died");
}

/// A `build_error` fault rule: Nova answers 202, then the build fails (here, as an anti-affinity race
/// ends on a real cloud); the server is ERROR on no host and its pre-made port is unbound, kept.
#[tokio::test]
async fn injected_build_failure_errors_the_server_after_202() {
    let h = Harness::new().await;
    let r = h
        .call(
            "POST",
            "/_sim/faults",
            Some(json!({
                "method": "POST", "path": "^/compute/v2.1/servers$", "status": 500, "count": 1,
                "build_error": true,
                "message": "Exceeded maximum number of retries. Exhausted all hosts available for retrying build failures for instance {id}.",
            })),
            None,
        )
        .await;
    assert!(r.status < 300, "{}", r.json);
    let (_, port_id) = port_on_new_network(&h, "b1", "10.31.0.0/24").await;

    let failed = create_ok(
        &h,
        server_body(&h, "f", json!({"networks": [{"port": port_id}]})).await,
    )
    .await;
    let s = show(&h, &failed).await.json["server"].clone();
    assert_eq!(s["status"], "ERROR", "{s}");
    assert_eq!(
        s["fault"]["message"],
        format!(
            "Exceeded maximum number of retries. Exhausted all hosts available for retrying build failures for instance {failed}."
        )
    );
    let p = h
        .call("GET", &format!("/network/v2.0/ports/{port_id}"), None, None)
        .await;
    assert_eq!(p.json["port"]["device_id"], "", "{}", p.json);

    // The rule fired once: the port serves the next server.
    let r = h
        .call(
            "DELETE",
            &format!("/compute/v2.1/servers/{failed}"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    wait_gone(&h, &failed).await;
    let ok = create_ok(
        &h,
        server_body(&h, "g", json!({"networks": [{"port": port_id}]})).await,
    )
    .await;
    wait_status(&h, &ok, "ACTIVE").await;
}

/// Polls until the server leaves BUILD; its view.
async fn wait_built(h: &Harness, id: &str) -> Value {
    for _ in 0..4000 {
        let s = show(h, id).await.json["server"].clone();
        if s["status"] != "BUILD" {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("server {id} never left BUILD");
}

/// A simulator whose scheduler claims a host `claim` cloud seconds after choosing it, on `hosts` hosts,
/// and an anti-affinity group on it.
async fn racing_cloud(hosts: u32, claim: f64) -> (Harness, String) {
    let h = Harness::with_config(SimConfig {
        compute_hosts: hosts,
        scheduler: kos_sim::SchedulerModel {
            claim_delay_secs: claim,
            ..Default::default()
        },
        ..SimConfig::fast()
    })
    .await;
    let g = h
        .call(
            "POST",
            &format!("{P}/os-server-groups"),
            Some(json!({"server_group": {"name": "cp", "policy": "anti-affinity"}})),
            LATEST,
        )
        .await;
    assert_eq!(g.status, 200, "{}", g.json);
    let gid = g.json["server_group"]["id"]
        .as_str()
        .expect("gid")
        .to_owned();
    (h, gid)
}

async fn boot_in_group(h: &Harness, name: &str, gid: &str) -> String {
    let mut b = server_body(h, name, json!({})).await;
    b["os:scheduler_hints"] = json!({"group": gid});
    create_ok(h, b).await
}

/// Three boots into one anti-affinity group at once, three hosts: the scheduler sends all three to the
/// same host (none has claimed yet), Nova's late check on the compute host fails the colliding claims,
/// and the reschedules over the alternates leave one boot out of attempts, in ERROR with Nova's
/// MaxRetriesExceeded message (as seen on minicloud). Two members never share a host; the failed one
/// deleted, a new boot takes the free host.
#[tokio::test]
async fn concurrent_anti_affinity_boots_race_and_one_exceeds_its_attempts() {
    let (h, gid) = racing_cloud(3, 150.0).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(boot_in_group(&h, &format!("cp{i}"), &gid).await);
    }
    let mut views = Vec::new();
    for id in &ids {
        views.push(wait_built(&h, id).await);
    }
    let failed: Vec<&Value> = views.iter().filter(|s| s["status"] == "ERROR").collect();
    assert_eq!(failed.len(), 1, "{views:#?}");
    let f = failed[0];
    let fid = f["id"].as_str().expect("id");
    assert_eq!(
        f["fault"]["message"],
        format!(
            "Exceeded maximum number of retries. Exceeded max scheduling attempts 3 for instance \
             {fid}. Last exception: Anti-affinity instance group policy was violated"
        )
    );
    assert_eq!(f["fault"]["code"], 500);
    assert_eq!(f["OS-EXT-SRV-ATTR:host"], Value::Null, "{f}");
    let mut hosts: Vec<String> = views
        .iter()
        .filter(|s| s["status"] == "ACTIVE")
        .map(|s| s["hostId"].as_str().unwrap_or("").to_owned())
        .collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 2, "the two ACTIVE members on two hosts");

    let r = h
        .call("DELETE", &format!("{P}/servers/{fid}"), None, LATEST)
        .await;
    assert_eq!(r.status, 204);
    wait_gone(&h, fid).await;
    let again = boot_in_group(&h, "cp-again", &gid).await;
    let s = wait_status(&h, &again, "ACTIVE").await;
    let host = s["hostId"].as_str().unwrap_or("").to_owned();
    assert!(!hosts.contains(&host), "the free host: {host} {hosts:?}");
}

/// With fewer hosts than `max_attempts`, the alternates run out first: Nova's "Exhausted all hosts".
#[tokio::test]
async fn racing_boots_on_fewer_hosts_than_attempts_exhaust_the_hosts() {
    let (h, gid) = racing_cloud(2, 150.0).await;
    let a = boot_in_group(&h, "a", &gid).await;
    let b = boot_in_group(&h, "b", &gid).await;
    let views = [wait_built(&h, &a).await, wait_built(&h, &b).await];
    let failed: Vec<&Value> = views.iter().filter(|s| s["status"] == "ERROR").collect();
    assert_eq!(failed.len(), 1, "{views:#?}");
    let fid = failed[0]["id"].as_str().expect("id");
    assert_eq!(
        failed[0]["fault"]["message"],
        format!(
            "Exceeded maximum number of retries. Exhausted all hosts available for retrying build \
             failures for instance {fid}."
        )
    );
}
