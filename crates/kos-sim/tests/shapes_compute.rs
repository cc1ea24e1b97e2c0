//! Nova's wire format against its API-reference samples, endpoint by endpoint, each at the microversion
//! of its sample. The last part needs Neutron (a network for addresses and interfaces) and Cinder (a
//! volume to attach).

mod common;

use std::time::Duration;

use common::Harness;
use kos_sim::Service;
use serde_json::{Value, json};

const P: &str = "/compute/v2.1";
/// The public key of Nova's keypair import sample.
const KEY: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDx8nkQv/zgGgB4rMYmIf+6A4l6Rr+o/6lHBQdW5aYd44bd8JttDCE/F/pNRr0lRE+PiqSPO8nDPHw0010JeMH9gYgnnFlyY3/OcJ02RhIPyyxYpv9FhY+2YiUkpwFOcLImyrxEsYXpD/0d3ac30bNH6Sw9JD9UZHYcpSxsIbECHw== Generated-by-Nova";

async fn image_id(h: &Harness, name: &str) -> String {
    let r = h
        .call("GET", &format!("/image/v2/images?name={name}"), None, None)
        .await;
    r.json["images"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("image {name}: {}", r.json))
        .to_owned()
}

/// Polls a server until it has `status` (bounded; no timing assertions).
async fn wait_status(h: &Harness, id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        let r = h
            .call(
                "GET",
                &format!("{P}/servers/{id}"),
                None,
                Some(("compute", "latest")),
            )
            .await;
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

#[tokio::test]
async fn compute_endpoints_match_samples() {
    let h = Harness::new().await;

    for path in ["/compute", "/compute/", P, "/compute/v2.1/"] {
        h.check("GET", path, path, None).await;
    }

    // Flavors.
    h.check(
        "GET",
        "/compute/v2.1/flavors",
        &format!("{P}/flavors"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/flavors/detail",
        &format!("{P}/flavors/detail"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/flavors/{id}",
        &format!("{P}/flavors/1"),
        None,
    )
    .await;
    let specs = h
        .check(
            "GET",
            "/compute/v2.1/flavors/{id}/os-extra_specs",
            &format!("{P}/flavors/1/os-extra_specs"),
            None,
        )
        .await;
    assert!(specs["extra_specs"].is_object());

    // Keypairs.
    h.check(
        "POST",
        "/compute/v2.1/os-keypairs",
        &format!("{P}/os-keypairs"),
        Some(json!({"keypair": {"name": "kos key", "type": "ssh", "public_key": KEY}})),
    )
    .await;
    h.call(
        "POST",
        &format!("{P}/os-keypairs"),
        Some(json!({"keypair": {"name": "kos-key-2", "public_key": KEY}})),
        Some(("compute", "2.92")),
    )
    .await;
    // limit=1 so that the page carries keypairs_links, as the sample does.
    h.check(
        "GET",
        "/compute/v2.1/os-keypairs",
        &format!("{P}/os-keypairs?limit=1"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/os-keypairs/{name}",
        &format!("{P}/os-keypairs/kos%20key"),
        None,
    )
    .await;

    // Server groups.
    let g = h
        .check(
            "POST",
            "/compute/v2.1/os-server-groups",
            &format!("{P}/os-server-groups"),
            Some(json!({"server_group": {"name": "spread", "policy": "anti-affinity", "rules": {"max_server_per_host": 3}}})),
        )
        .await;
    let gid = g["server_group"]["id"]
        .as_str()
        .expect("group id")
        .to_owned();
    h.check(
        "GET",
        "/compute/v2.1/os-server-groups",
        &format!("{P}/os-server-groups"),
        None,
    )
    .await;

    // Limits, quotas, zones.
    h.check("GET", "/compute/v2.1/limits", &format!("{P}/limits"), None)
        .await;
    h.check(
        "GET",
        "/compute/v2.1/os-quota-sets/{project_id}",
        &format!("{P}/os-quota-sets/{}", h.project_id),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/os-quota-sets/{project_id}/detail",
        &format!("{P}/os-quota-sets/{}/detail", h.project_id),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/os-availability-zone",
        &format!("{P}/os-availability-zone"),
        None,
    )
    .await;

    // Servers (no network: nothing here depends on Neutron).
    let image = image_id(&h, "cirros-0.6.2").await;
    let create = |name: &str| {
        json!({
            "server": {
                "name": name, "imageRef": image, "flavorRef": "1", "networks": "none",
                "key_name": "kos key", "availability_zone": "nova",
                "accessIPv4": "1.2.3.4", "accessIPv6": "80fe::",
                "metadata": {"My Server Name": "Apache1"},
                "user_data": "IyEvYmluL2Jhc2gKL2Jpbi9zdQplY2hvICJJIGFtIGluIHlvdSEiCg==",
                "hostname": "custom-hostname",
            },
            "os:scheduler_hints": {"group": gid},
        })
    };
    let s1 = h
        .check(
            "POST",
            "/compute/v2.1/servers",
            &format!("{P}/servers"),
            Some(create("shape-1")),
        )
        .await;
    let id = s1["server"]["id"].as_str().expect("server id").to_owned();
    let s2 = h
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(create("shape-2")),
            Some(("compute", "2.94")),
        )
        .await;
    assert_eq!(s2.status, 202, "{}", s2.json);
    wait_status(&h, &id, "ACTIVE").await;

    h.check(
        "GET",
        "/compute/v2.1/os-server-groups/{id}",
        &format!("{P}/os-server-groups/{gid}"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers",
        &format!("{P}/servers?limit=1"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/detail",
        &format!("{P}/servers/detail?limit=1"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}",
        &format!("{P}/servers/{id}"),
        None,
    )
    .await;
    let upd = h
        .check(
            "PUT",
            "/compute/v2.1/servers/{id}",
            &format!("{P}/servers/{id}"),
            Some(json!({"server": {"name": "renamed", "description": "d", "hostname": "new-server-hostname"}})),
        )
        .await;
    assert_eq!(upd["server"]["name"], "renamed");
    let out = h
        .check(
            "POST",
            "/compute/v2.1/servers/{id}/action",
            &format!("{P}/servers/{id}/action"),
            Some(json!({"os-getConsoleOutput": {"length": 50}})),
        )
        .await;
    assert!(out["output"].as_str().is_some_and(|o| o.contains("login:")));

    // Tags.
    let tags = format!("{P}/servers/{id}/tags");
    h.check(
        "PUT",
        "/compute/v2.1/servers/{id}/tags",
        &tags,
        Some(json!({"tags": ["tag1", "tag2"]})),
    )
    .await;
    h.check("GET", "/compute/v2.1/servers/{id}/tags", &tags, None)
        .await;
    // The per-tag endpoints have no body (no sample folder names their microversion): call at 2.26.
    for (method, template, path, status) in [
        (
            "PUT",
            "/compute/v2.1/servers/{id}/tags/{tag}",
            format!("{tags}/tag3"),
            201,
        ),
        (
            "PUT",
            "/compute/v2.1/servers/{id}/tags/{tag}",
            format!("{tags}/tag3"),
            204,
        ),
        (
            "GET",
            "/compute/v2.1/servers/{id}/tags/{tag}",
            format!("{tags}/tag3"),
            204,
        ),
        (
            "DELETE",
            "/compute/v2.1/servers/{id}/tags/{tag}",
            format!("{tags}/tag3"),
            204,
        ),
        (
            "GET",
            "/compute/v2.1/servers/{id}/tags/{tag}",
            format!("{tags}/tag3"),
            404,
        ),
        (
            "DELETE",
            "/compute/v2.1/servers/{id}/tags",
            tags.clone(),
            204,
        ),
    ] {
        let r = h.call(method, &path, None, Some(("compute", "2.26"))).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.json);
        h.mark_covered(method, template);
    }

    // Metadata.
    let meta = format!("{P}/servers/{id}/metadata");
    h.check("GET", "/compute/v2.1/servers/{id}/metadata", &meta, None)
        .await;
    h.check(
        "POST",
        "/compute/v2.1/servers/{id}/metadata",
        &meta,
        Some(json!({"metadata": {"foo": "Foo Value"}})),
    )
    .await;
    h.check(
        "PUT",
        "/compute/v2.1/servers/{id}/metadata",
        &meta,
        Some(json!({"metadata": {"foo": "Foo Value"}})),
    )
    .await;
    h.check(
        "PUT",
        "/compute/v2.1/servers/{id}/metadata/{key}",
        &format!("{meta}/foo"),
        Some(json!({"meta": {"foo": "Bar Value"}})),
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/metadata/{key}",
        &format!("{meta}/foo"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/compute/v2.1/servers/{id}/metadata/{key}",
        &format!("{meta}/foo"),
        None,
    )
    .await;

    // Addresses, interfaces and volume attachments of a server without ports (empty collections).
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/ips",
        &format!("{P}/servers/{id}/ips"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/os-interface",
        &format!("{P}/servers/{id}/os-interface"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/os-volume_attachments",
        &format!("{P}/servers/{id}/os-volume_attachments"),
        None,
    )
    .await;

    // Needs Neutron: a server on a network, for addresses and interfaces.
    let net = h
        .call(
            "POST",
            "/network/v2.0/networks",
            Some(json!({"network": {"name": "private"}})),
            None,
        )
        .await;
    assert_eq!(net.status, 201, "Neutron creates a network: {}", net.json);
    let net_id = net.json["network"]["id"]
        .as_str()
        .expect("net id")
        .to_owned();
    let sub = h
        .call(
            "POST",
            "/network/v2.0/subnets",
            Some(
                json!({"subnet": {"network_id": net_id, "cidr": "10.20.0.0/24", "ip_version": 4}}),
            ),
            None,
        )
        .await;
    assert_eq!(sub.status, 201, "Neutron creates a subnet: {}", sub.json);
    let on_net = h
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(
                json!({"server": {"name": "on-net", "imageRef": image, "flavorRef": "1",
                "networks": [{"uuid": net_id, "tag": "public"}]}}),
            ),
            Some(("compute", "2.94")),
        )
        .await;
    assert_eq!(on_net.status, 202, "{}", on_net.json);
    let nid = on_net.json["server"]["id"].as_str().expect("id").to_owned();
    let shown = wait_status(&h, &nid, "ACTIVE").await;
    assert!(
        shown["addresses"]["private"][0]["addr"].is_string(),
        "{shown}"
    );
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/ips/{network}",
        &format!("{P}/servers/{nid}/ips/private"),
        None,
    )
    .await;
    let ifs = h
        .check(
            "GET",
            "/compute/v2.1/servers/{id}/os-interface",
            &format!("{P}/servers/{nid}/os-interface"),
            None,
        )
        .await;
    let port_id = ifs["interfaceAttachments"][0]["port_id"]
        .as_str()
        .expect("port")
        .to_owned();
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/os-interface/{port_id}",
        &format!("{P}/servers/{nid}/os-interface/{port_id}"),
        None,
    )
    .await;

    // Needs Cinder: a volume to attach.
    let vol = h
        .call(
            "POST",
            &format!("/volume/v3/{}/volumes", h.project_id),
            Some(json!({"volume": {"size": 1, "name": "data"}})),
            None,
        )
        .await;
    assert_eq!(vol.status, 202, "Cinder creates a volume: {}", vol.json);
    let vid = vol.json["volume"]["id"]
        .as_str()
        .expect("vol id")
        .to_owned();
    for _ in 0..300 {
        let v = h
            .call(
                "GET",
                &format!("/volume/v3/{}/volumes/{vid}", h.project_id),
                None,
                None,
            )
            .await;
        if v.json["volume"]["status"] == "available" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let atts = format!("{P}/servers/{id}/os-volume_attachments");
    h.check(
        "POST",
        "/compute/v2.1/servers/{id}/os-volume_attachments",
        &atts,
        Some(json!({"volumeAttachment": {"volumeId": vid, "tag": "foo", "delete_on_termination": true}})),
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/os-volume_attachments",
        &atts,
        None,
    )
    .await;
    h.check(
        "GET",
        "/compute/v2.1/servers/{id}/os-volume_attachments/{volume_id}",
        &format!("{atts}/{vid}"),
        None,
    )
    .await;
    // Nova detaches only what is attached: the volume `in-use`, no longer `attaching`.
    for _ in 0..300 {
        let v = h
            .call(
                "GET",
                &format!("/volume/v3/{}/volumes/{vid}", h.project_id),
                None,
                None,
            )
            .await;
        if v.json["volume"]["status"] == "in-use" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h.check(
        "DELETE",
        "/compute/v2.1/servers/{id}/os-volume_attachments/{volume_id}",
        &format!("{atts}/{vid}"),
        None,
    )
    .await;

    // Deletes last.
    h.check(
        "DELETE",
        "/compute/v2.1/servers/{id}",
        &format!("{P}/servers/{id}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/compute/v2.1/os-server-groups/{id}",
        &format!("{P}/os-server-groups/{gid}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/compute/v2.1/os-keypairs/{name}",
        &format!("{P}/os-keypairs/kos%20key"),
        None,
    )
    .await;

    h.assert_all_covered(Service::Compute);
}
