//! Neutron behaviour clients trip on: IPAM conflicts and exhaustion, CIDR validation, floating IP
//! reachability, security group rules, tags and tag filters, pagination, quotas, in-use deletions, and the
//! port binding interface Nova and Octavia use.

mod common;

use std::collections::BTreeSet;

use common::{Harness, Resp};
use kos_sim::neutron;
use serde_json::{Value, json};

const N: &str = "/network/v2.0";

async fn call(h: &Harness, method: &str, path: &str, body: Option<Value>) -> Resp {
    h.call(method, &format!("{N}{path}"), body, None).await
}

/// A call that must answer `status`; returns the body.
async fn expect(h: &Harness, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
    let r = call(h, method, path, body).await;
    assert_eq!(r.status, status, "{method} {path}: {}", r.json);
    r.json
}

/// A call that must fail with `status` and Neutron error `kind`; returns the message.
async fn fails(
    h: &Harness,
    method: &str,
    path: &str,
    body: Value,
    status: u16,
    kind: &str,
) -> String {
    let body = (!body.is_null()).then_some(body);
    let r = call(h, method, path, body).await;
    assert_eq!(r.status, status, "{method} {path}: {}", r.json);
    assert_eq!(r.json["NeutronError"]["type"], kind, "{}", r.json);
    r.json["NeutronError"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_owned()
}

async fn network(h: &Harness, name: &str) -> String {
    let v = expect(
        h,
        "POST",
        "/networks",
        Some(json!({"network": {"name": name}})),
        201,
    )
    .await;
    s(&v["network"]["id"])
}

async fn subnet(h: &Harness, net: &str, cidr: &str, extra: Value) -> String {
    let mut body = json!({"network_id": net, "cidr": cidr, "ip_version": 4});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    let v = expect(h, "POST", "/subnets", Some(json!({ "subnet": body })), 201).await;
    s(&v["subnet"]["id"])
}

async fn port(h: &Harness, body: Value) -> Value {
    expect(h, "POST", "/ports", Some(json!({ "port": body })), 201).await["port"].clone()
}

async fn public_network(h: &Harness) -> String {
    let v = expect(h, "GET", "/networks?router:external=true", None, 200).await;
    assert_eq!(v["networks"].as_array().map(Vec::len), Some(1), "{v}");
    s(&v["networks"][0]["id"])
}

fn ids(v: &Value, key: &str) -> BTreeSet<String> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {v}"))
        .iter()
        .map(|x| s(&x["id"]))
        .collect()
}

#[tokio::test]
async fn fixed_ip_conflict_is_409_ip_address_already_allocated() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    let sub = subnet(&h, &net, "10.1.0.0/24", json!({})).await;
    let p = port(
        &h,
        json!({"network_id": net, "fixed_ips": [{"ip_address": "10.1.0.50"}]}),
    )
    .await;
    assert_eq!(
        p["fixed_ips"],
        json!([{"subnet_id": sub, "ip_address": "10.1.0.50"}])
    );
    for fixed in [
        json!({"ip_address": "10.1.0.50"}),
        json!({"subnet_id": sub, "ip_address": "10.1.0.50"}),
    ] {
        let msg = fails(
            &h,
            "POST",
            "/ports",
            json!({"port": {"network_id": net, "fixed_ips": [fixed]}}),
            409,
            "IpAddressAlreadyAllocated",
        )
        .await;
        assert_eq!(
            msg,
            format!("IP address 10.1.0.50 already allocated in subnet {sub}")
        );
    }
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "fixed_ips": [{"subnet_id": sub, "ip_address": "10.9.0.5"}]}}),
        400,
        "InvalidIpForSubnet",
    )
    .await;
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "fixed_ips": [{"ip_address": "10.9.0.5"}]}}),
        400,
        "InvalidIpForNetwork",
    )
    .await;
    // Updating a port's fixed IP to a taken one is the same conflict; keeping its own is fine.
    let q = port(&h, json!({"network_id": net})).await;
    let qid = s(&q["id"]);
    fails(
        &h,
        "PUT",
        &format!("/ports/{qid}"),
        json!({"port": {"fixed_ips": [{"ip_address": "10.1.0.50"}]}}),
        409,
        "IpAddressAlreadyAllocated",
    )
    .await;
    let own = q["fixed_ips"].clone();
    expect(
        &h,
        "PUT",
        &format!("/ports/{qid}"),
        Some(json!({"port": {"fixed_ips": own}})),
        200,
    )
    .await;
    // A MAC is unique on its network.
    let mac = s(&p["mac_address"]);
    assert!(mac.starts_with("fa:16:3e:"), "{mac}");
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "mac_address": mac}}),
        409,
        "MacAddressInUse",
    )
    .await;
}

#[tokio::test]
async fn allocation_pool_is_respected_until_exhausted() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    let sub = subnet(
        &h,
        &net,
        "10.2.0.0/24",
        json!({"enable_dhcp": false, "allocation_pools": [{"start": "10.2.0.10", "end": "10.2.0.12"}]}),
    )
    .await;
    let v = expect(&h, "GET", &format!("/subnets/{sub}"), None, 200).await;
    assert_eq!(v["subnet"]["gateway_ip"], "10.2.0.1");
    let mut got = Vec::new();
    for _ in 0..3 {
        let p = port(&h, json!({"network_id": net})).await;
        got.push(s(&p["fixed_ips"][0]["ip_address"]));
    }
    assert_eq!(got, ["10.2.0.10", "10.2.0.11", "10.2.0.12"]);
    let msg = fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net}}),
        409,
        "IpAddressGenerationFailure",
    )
    .await;
    assert!(msg.contains(&net), "{msg}");
    // An address outside the pools but inside the CIDR can still be asked for.
    let p = port(
        &h,
        json!({"network_id": net, "fixed_ips": [{"ip_address": "10.2.0.100"}]}),
    )
    .await;
    assert_eq!(p["fixed_ips"][0]["ip_address"], "10.2.0.100");

    // The default pool is every host but the gateway; a pool may not contain the gateway.
    let net2 = network(&h, "n2").await;
    let sub2 = subnet(&h, &net2, "10.3.0.0/28", json!({})).await;
    let v = expect(&h, "GET", &format!("/subnets/{sub2}"), None, 200).await;
    assert_eq!(
        v["subnet"]["allocation_pools"],
        json!([{"start": "10.3.0.2", "end": "10.3.0.14"}])
    );
    fails(
        &h,
        "POST",
        "/subnets",
        json!({"subnet": {"network_id": net2, "cidr": "10.4.0.0/24", "ip_version": 4, "allocation_pools": [{"start": "10.4.0.1", "end": "10.4.0.20"}]}}),
        409,
        "GatewayConflictWithAllocationPools",
    )
    .await;
    fails(
        &h,
        "POST",
        "/subnets",
        json!({"subnet": {"network_id": net2, "cidr": "10.4.0.0/24", "ip_version": 4, "allocation_pools": [{"start": "10.4.0.10", "end": "10.4.1.20"}]}}),
        400,
        "OutOfBoundsAllocationPool",
    )
    .await;
    // A DHCP-enabled subnet's DHCP port holds the pool's first address.
    let dhcp = expect(
        &h,
        "GET",
        &format!("/ports?network_id={net2}&device_owner=network:dhcp"),
        None,
        200,
    )
    .await;
    assert_eq!(
        dhcp["ports"][0]["fixed_ips"][0]["ip_address"], "10.3.0.2",
        "{dhcp}"
    );
    let p = port(&h, json!({"network_id": net2})).await;
    assert_eq!(p["fixed_ips"][0]["ip_address"], "10.3.0.3");
    // gateway_ip null: no gateway, the pool starts at the first host.
    let net3 = network(&h, "n3").await;
    let sub3 = subnet(
        &h,
        &net3,
        "10.5.0.0/29",
        json!({"gateway_ip": null, "enable_dhcp": false}),
    )
    .await;
    let v = expect(&h, "GET", &format!("/subnets/{sub3}"), None, 200).await;
    assert_eq!(v["subnet"]["gateway_ip"], Value::Null);
    assert_eq!(v["subnet"]["allocation_pools"][0]["start"], "10.5.0.1");
}

#[tokio::test]
async fn invalid_and_overlapping_cidrs_are_400() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    for cidr in [
        "10.3.0.5/24",
        "not-a-cidr",
        "10.3.0.0/31",
        "10.3.0.0/33",
        "fd00::/64",
    ] {
        let r = call(
            &h,
            "POST",
            "/subnets",
            Some(json!({"subnet": {"network_id": net, "cidr": cidr, "ip_version": 4}})),
        )
        .await;
        assert_eq!(r.status, 400, "{cidr}: {}", r.json);
    }
    fails(
        &h,
        "POST",
        "/subnets",
        json!({"subnet": {"network_id": net, "cidr": "10.3.0.0/24"}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    subnet(&h, &net, "10.3.0.0/24", json!({})).await;
    let msg = fails(
        &h,
        "POST",
        "/subnets",
        json!({"subnet": {"network_id": net, "cidr": "10.3.0.128/25", "ip_version": 4}}),
        400,
        "InvalidInput",
    )
    .await;
    assert!(msg.contains("overlaps"), "{msg}");
    // Another network may reuse the range (overlapping IPs across networks are allowed).
    let other = network(&h, "other").await;
    subnet(&h, &other, "10.3.0.0/24", json!({})).await;
    fails(
        &h,
        "POST",
        "/subnets",
        json!({"subnet": {"network_id": "0b7d0b5e-0000-4000-8000-000000000000", "cidr": "10.6.0.0/24", "ip_version": 4}}),
        404,
        "NetworkNotFound",
    )
    .await;
}

#[tokio::test]
async fn floating_ip_needs_a_router_interface_on_the_ports_subnet() {
    let h = Harness::new().await;
    let public = public_network(&h).await;
    let net = network(&h, "n").await;
    let sub = subnet(&h, &net, "10.7.0.0/24", json!({})).await;
    let p = port(&h, json!({"network_id": net})).await;
    let pid = s(&p["id"]);
    let router = expect(
        &h,
        "POST",
        "/routers",
        Some(json!({"router": {"name": "r", "external_gateway_info": {"network_id": public}}})),
        201,
    )
    .await;
    let rid = s(&router["router"]["id"]);
    let gw_ip =
        s(&router["router"]["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]);
    assert!(gw_ip.starts_with("172.24.4."), "{gw_ip}");

    let msg = fails(
        &h,
        "POST",
        "/floatingips",
        json!({"floatingip": {"floating_network_id": public, "port_id": pid}}),
        404,
        "ExternalGatewayForFloatingIPNotFound",
    )
    .await;
    assert!(
        msg.contains(&format!(
            "External network {public} is not reachable from subnet {sub}"
        )),
        "{msg}"
    );
    let fip = expect(
        &h,
        "POST",
        "/floatingips",
        Some(json!({"floatingip": {"floating_network_id": public, "description": "svc"}})),
        201,
    )
    .await;
    let fid = s(&fip["floatingip"]["id"]);
    assert_eq!(fip["floatingip"]["status"], "DOWN");
    assert_eq!(fip["floatingip"]["port_details"], Value::Null);
    fails(
        &h,
        "PUT",
        &format!("/floatingips/{fid}"),
        json!({"floatingip": {"port_id": pid}}),
        404,
        "ExternalGatewayForFloatingIPNotFound",
    )
    .await;

    let iface = expect(
        &h,
        "PUT",
        &format!("/routers/{rid}/add_router_interface"),
        Some(json!({"subnet_id": sub})),
        200,
    )
    .await;
    assert_eq!(iface["subnet_ids"], json!([sub]));
    let rport = expect(
        &h,
        "GET",
        &format!("/ports/{}", s(&iface["port_id"])),
        None,
        200,
    )
    .await;
    assert_eq!(rport["port"]["fixed_ips"][0]["ip_address"], "10.7.0.1");
    assert_eq!(rport["port"]["device_owner"], "network:router_interface");

    let v = expect(
        &h,
        "PUT",
        &format!("/floatingips/{fid}"),
        Some(json!({"floatingip": {"port_id": pid}})),
        200,
    )
    .await;
    let f = &v["floatingip"];
    // Neutron answers with the status the L3 agent last reported (checked against Neutron 29): the
    // agent makes it ACTIVE a moment later.
    assert_eq!(f["status"], "DOWN");
    assert_eq!(fip_status_after_agent(&h, &fid).await, "ACTIVE");
    assert_eq!(f["router_id"], rid.as_str());
    assert_eq!(f["fixed_ip_address"], p["fixed_ips"][0]["ip_address"]);
    assert_eq!(f["port_details"]["network_id"], net.as_str());
    // Found by its description, as kos finds the CCM's floating IPs.
    let by_desc = expect(&h, "GET", "/floatingips?description=svc", None, 200).await;
    assert_eq!(ids(&by_desc, "floatingips"), BTreeSet::from([fid.clone()]));

    // The same fixed IP cannot take a second floating IP on that network.
    fails(
        &h,
        "POST",
        "/floatingips",
        json!({"floatingip": {"floating_network_id": public, "port_id": pid}}),
        409,
        "FloatingIPPortAlreadyAssociated",
    )
    .await;
    // The interface and router are held by the association.
    fails(
        &h,
        "PUT",
        &format!("/routers/{rid}/remove_router_interface"),
        json!({"subnet_id": sub}),
        409,
        "RouterInterfaceInUseByFloatingIP",
    )
    .await;
    fails(
        &h,
        "DELETE",
        &format!("/routers/{rid}"),
        Value::Null,
        409,
        "RouterInUse",
    )
    .await;
    // Disassociate, then everything comes apart.
    let v = expect(
        &h,
        "PUT",
        &format!("/floatingips/{fid}"),
        Some(json!({"floatingip": {"port_id": null}})),
        200,
    )
    .await;
    assert_eq!(v["floatingip"]["fixed_ip_address"], Value::Null);
    assert_eq!(fip_status_after_agent(&h, &fid).await, "DOWN");
    expect(
        &h,
        "PUT",
        &format!("/routers/{rid}/remove_router_interface"),
        Some(json!({"subnet_id": sub})),
        200,
    )
    .await;
    expect(&h, "DELETE", &format!("/routers/{rid}"), None, 204).await;
    // Floating IPs come from external networks only.
    fails(
        &h,
        "POST",
        "/floatingips",
        json!({"floatingip": {"floating_network_id": net}}),
        400,
        "BadRequest",
    )
    .await;
}

#[tokio::test]
async fn router_gateway_must_be_external_and_interfaces_are_checked() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    let sub = subnet(&h, &net, "10.8.0.0/24", json!({})).await;
    fails(
        &h,
        "POST",
        "/routers",
        json!({"router": {"external_gateway_info": {"network_id": net}}}),
        400,
        "BadRequest",
    )
    .await;
    let r = expect(
        &h,
        "POST",
        "/routers",
        Some(json!({"router": {"name": "r"}})),
        201,
    )
    .await;
    let rid = s(&r["router"]["id"]);
    expect(
        &h,
        "PUT",
        &format!("/routers/{rid}/add_router_interface"),
        Some(json!({"subnet_id": sub})),
        200,
    )
    .await;
    fails(
        &h,
        "PUT",
        &format!("/routers/{rid}/add_router_interface"),
        json!({"subnet_id": sub}),
        400,
        "BadRequest",
    )
    .await;
    // Another router cannot take the same gateway address.
    let r2 = expect(
        &h,
        "POST",
        "/routers",
        Some(json!({"router": {"name": "r2"}})),
        201,
    )
    .await;
    let rid2 = s(&r2["router"]["id"]);
    fails(
        &h,
        "PUT",
        &format!("/routers/{rid2}/add_router_interface"),
        json!({"subnet_id": sub}),
        409,
        "IpAddressAlreadyAllocated",
    )
    .await;
    // Routes need a connected next hop.
    fails(
        &h,
        "PUT",
        &format!("/routers/{rid}"),
        json!({"router": {"routes": [{"destination": "10.50.0.0/24", "nexthop": "192.168.99.1"}]}}),
        400,
        "InvalidRoutes",
    )
    .await;
    expect(
        &h,
        "PUT",
        &format!("/routers/{rid}"),
        Some(
            json!({"router": {"routes": [{"destination": "10.50.0.0/24", "nexthop": "10.8.0.9"}]}}),
        ),
        200,
    )
    .await;
    fails(
        &h,
        "PUT",
        &format!("/routers/{rid}/remove_router_interface"),
        json!({"subnet_id": sub}),
        409,
        "RouterInterfaceInUseByRoute",
    )
    .await;
}

#[tokio::test]
async fn security_group_rules_remote_groups_and_duplicates() {
    let h = Harness::new().await;
    let groups = expect(&h, "GET", "/security-groups?name=default", None, 200).await;
    let default = &groups["security_groups"][0];
    assert_eq!(
        default["security_group_rules"].as_array().map(Vec::len),
        Some(4),
        "{default}"
    );
    let default_id = s(&default["id"]);
    let a = expect(
        &h,
        "POST",
        "/security-groups",
        Some(json!({"security_group": {"name": "a"}})),
        201,
    )
    .await;
    let rules = a["security_group"]["security_group_rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rules.len(), 2);
    assert!(rules.iter().all(|r| r["direction"] == "egress"));
    let a = s(&a["security_group"]["id"]);
    let b = expect(
        &h,
        "POST",
        "/security-groups",
        Some(json!({"security_group": {"name": "b"}})),
        201,
    )
    .await;
    let b = s(&b["security_group"]["id"]);

    let rule = json!({"security_group_id": a, "direction": "ingress", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22, "remote_group_id": b});
    let made = expect(
        &h,
        "POST",
        "/security-group-rules",
        Some(json!({"security_group_rule": rule.clone()})),
        201,
    )
    .await;
    assert_eq!(made["security_group_rule"]["remote_group_id"], b.as_str());
    let rule_id = s(&made["security_group_rule"]["id"]);
    let msg = fails(
        &h,
        "POST",
        "/security-group-rules",
        json!({"security_group_rule": rule}),
        409,
        "SecurityGroupRuleExists",
    )
    .await;
    assert!(msg.contains(&rule_id), "{msg}");
    // Protocol by number is the same rule.
    let by_number = json!({"security_group_id": a, "direction": "ingress", "protocol": "6", "port_range_min": 22, "port_range_max": 22, "remote_group_id": b});
    fails(
        &h,
        "POST",
        "/security-group-rules",
        json!({"security_group_rule": by_number}),
        409,
        "SecurityGroupRuleExists",
    )
    .await;

    let bad_rules = [
        (
            json!({"remote_group_id": b, "remote_ip_prefix": "10.0.0.0/8"}),
            400,
            "SecurityGroupRemoteGroupAndRemoteIpPrefix",
        ),
        (
            json!({"remote_group_id": "5d6b7d55-0000-4000-8000-000000000000"}),
            404,
            "SecurityGroupNotFound",
        ),
        (
            json!({"protocol": "tcp", "port_range_min": 90, "port_range_max": 80}),
            400,
            "SecurityGroupInvalidPortRange",
        ),
        (
            json!({"port_range_min": 80, "port_range_max": 80}),
            400,
            "SecurityGroupProtocolRequiredWithPorts",
        ),
        (
            json!({"protocol": "gre", "port_range_min": 80, "port_range_max": 80}),
            400,
            "SecurityGroupInvalidProtoForPortRange",
        ),
        (
            json!({"protocol": "bogus"}),
            400,
            "SecurityGroupRuleInvalidProtocol",
        ),
        (
            json!({"ethertype": "IPv6", "remote_ip_prefix": "10.0.0.0/8"}),
            400,
            "SecurityGroupRuleParameterConflict",
        ),
    ];
    for (extra, status, kind) in bad_rules {
        let mut r = json!({"security_group_id": a, "direction": "ingress"});
        if let (Some(o), Value::Object(e)) = (r.as_object_mut(), extra) {
            o.extend(e);
        }
        fails(
            &h,
            "POST",
            "/security-group-rules",
            json!({"security_group_rule": r}),
            status,
            kind,
        )
        .await;
    }

    // The default group cannot go; a group a port uses cannot go either.
    fails(
        &h,
        "DELETE",
        &format!("/security-groups/{default_id}"),
        Value::Null,
        409,
        "SecurityGroupCannotRemoveDefault",
    )
    .await;
    let net = network(&h, "n").await;
    subnet(&h, &net, "10.9.0.0/24", json!({})).await;
    let p = port(&h, json!({"network_id": net, "security_groups": [a]})).await;
    fails(
        &h,
        "DELETE",
        &format!("/security-groups/{a}"),
        Value::Null,
        409,
        "SecurityGroupInUse",
    )
    .await;
    // A port without explicit groups gets the project's default group.
    let q = port(&h, json!({"network_id": net})).await;
    assert_eq!(q["security_groups"], json!([default_id]));
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "security_groups": ["5d6b7d55-0000-4000-8000-000000000000"]}}),
        404,
        "SecurityGroupNotFound",
    )
    .await;
    expect(&h, "DELETE", &format!("/ports/{}", s(&p["id"])), None, 204).await;
    expect(&h, "DELETE", &format!("/security-groups/{b}"), None, 204).await;
    // Rules naming a deleted group as remote go with it.
    fails(
        &h,
        "GET",
        &format!("/security-group-rules/{rule_id}"),
        Value::Null,
        404,
        "SecurityGroupRuleNotFound",
    )
    .await;
}

#[tokio::test]
async fn port_security_rules() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    subnet(&h, &net, "10.10.0.0/24", json!({})).await;
    let sgs = expect(&h, "GET", "/security-groups?name=default", None, 200).await;
    let default_id = s(&sgs["security_groups"][0]["id"]);
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "port_security_enabled": false, "security_groups": [default_id]}}),
        400,
        "PortSecurityAndIPRequiredForSecurityGroups",
    )
    .await;
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "port_security_enabled": false, "allowed_address_pairs": [{"ip_address": "10.10.0.99"}]}}),
        409,
        "AddressPairAndPortSecurityRequired",
    )
    .await;
    let open = port(
        &h,
        json!({"network_id": net, "port_security_enabled": false}),
    )
    .await;
    assert_eq!(open["security_groups"], json!([]));
    let p = port(
        &h,
        json!({"network_id": net, "allowed_address_pairs": [{"ip_address": "10.10.0.0/28"}]}),
    )
    .await;
    assert_eq!(
        p["allowed_address_pairs"][0]["mac_address"],
        p["mac_address"]
    );
    let pid = s(&p["id"]);
    fails(
        &h,
        "PUT",
        &format!("/ports/{pid}"),
        json!({"port": {"port_security_enabled": false}}),
        409,
        "PortSecurityPortHasSecurityGroup",
    )
    .await;
    let v = expect(
        &h,
        "PUT",
        &format!("/ports/{pid}"),
        Some(json!({"port": {"port_security_enabled": false, "security_groups": [], "allowed_address_pairs": []}})),
        200,
    )
    .await;
    assert_eq!(v["port"]["port_security_enabled"], false);
    // Binding details are for admins (Nova) only.
    fails(
        &h,
        "PUT",
        &format!("/ports/{pid}"),
        json!({"port": {"binding:host_id": "h1"}}),
        403,
        "PolicyNotAuthorized",
    )
    .await;
}

#[tokio::test]
async fn tag_filters_across_ports_and_networks() {
    let h = Harness::new().await;
    let n1 = network(&h, "t1").await;
    let n2 = network(&h, "t2").await;
    let n3 = network(&h, "t3").await;
    for (id, tags) in [
        (&n1, json!(["a", "b"])),
        (&n2, json!(["a"])),
        (&n3, json!(["c"])),
    ] {
        expect(
            &h,
            "PUT",
            &format!("/networks/{id}/tags"),
            Some(json!({ "tags": tags })),
            200,
        )
        .await;
    }
    let mine = BTreeSet::from([n1.clone(), n2.clone(), n3.clone()]);
    let query = |q: &'static str| {
        let h = &h;
        let mine = mine.clone();
        async move {
            let v = expect(h, "GET", &format!("/networks?{q}"), None, 200).await;
            ids(&v, "networks")
                .intersection(&mine)
                .cloned()
                .collect::<BTreeSet<_>>()
        }
    };
    assert_eq!(query("tags=a,b").await, BTreeSet::from([n1.clone()]));
    assert_eq!(query("tags=a&tags=b").await, BTreeSet::from([n1.clone()]));
    assert_eq!(
        query("tags-any=b,c").await,
        BTreeSet::from([n1.clone(), n3.clone()])
    );
    assert_eq!(
        query("not-tags=a,b").await,
        BTreeSet::from([n2.clone(), n3.clone()])
    );
    assert_eq!(query("not-tags-any=a").await, BTreeSet::from([n3.clone()]));
    assert_eq!(
        query("tags=a&not-tags-any=b").await,
        BTreeSet::from([n2.clone()])
    );

    subnet(&h, &n1, "10.11.0.0/24", json!({"enable_dhcp": false})).await;
    let p1 = s(&port(&h, json!({"network_id": n1})).await["id"]);
    let p2 = s(&port(&h, json!({"network_id": n1})).await["id"]);
    expect(
        &h,
        "PUT",
        &format!("/ports/{p1}/tags/kos-cluster=x"),
        None,
        201,
    )
    .await;
    expect(
        &h,
        "PUT",
        &format!("/ports/{p2}/tags/kos-cluster=y"),
        None,
        201,
    )
    .await;
    let v = expect(&h, "GET", "/ports?tags=kos-cluster=x", None, 200).await;
    assert_eq!(ids(&v, "ports"), BTreeSet::from([p1.clone()]));
    let v = expect(&h, "GET", "/ports?not-tags-any=kos-cluster=x", None, 200).await;
    assert_eq!(ids(&v, "ports"), BTreeSet::from([p2.clone()]));
    let v = expect(
        &h,
        "GET",
        &format!("/ports?id={p1}&id={p2}&tags-any=kos-cluster=y"),
        None,
        200,
    )
    .await;
    assert_eq!(ids(&v, "ports"), BTreeSet::from([p2]));
}

/// As minicloud's Neutron 29 answers: `tags` are `allow_post: False` on every resource but ports, and
/// a port's are validated, then dropped unless the ML2 driver `tag_ports_during_bulk_creation` runs.
#[tokio::test]
async fn tags_in_a_create_body_are_refused_or_ignored_and_put_tags_works() {
    let h = Harness::new().await;
    for (path, body) in [
        (
            "/networks",
            json!({"network": {"name": "n", "tags": ["x"]}}),
        ),
        (
            "/security-groups",
            json!({"security_group": {"name": "g", "tags": ["x"]}}),
        ),
        ("/routers", json!({"router": {"name": "r", "tags": ["x"]}})),
    ] {
        let m = fails(&h, "POST", path, body, 400, "HTTPBadRequest").await;
        assert_eq!(m, "Attribute 'tags' not allowed in POST", "{path}");
    }
    let net = network(&h, "n").await;
    subnet(&h, &net, "10.12.0.0/24", json!({})).await;
    let v = expect(&h, "GET", "/extensions", None, 200).await;
    assert!(
        !v["extensions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["alias"] == "tag-ports-during-bulk-creation"),
        "not advertised by default"
    );
    let m = fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "tags": ["a", "a"]}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    assert_eq!(
        m,
        "Invalid input for tags. Reason: Duplicate items in the list: 'a'."
    );
    let m = fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net, "tags": "a"}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    assert_eq!(m, "Invalid input for tags. Reason: 'a' is not a list.");
    let v = expect(
        &h,
        "POST",
        "/ports",
        Some(json!({"ports": [
            {"network_id": net, "name": "b1", "tags": ["a"]},
            {"network_id": net, "name": "b2", "tags": ["c"]},
        ]})),
        201,
    )
    .await;
    assert_eq!(v["ports"][0]["tags"], json!([]), "bulk: accepted, dropped");
    assert_eq!(v["ports"][1]["tags"], json!([]));
    let p = port(&h, json!({"network_id": net, "tags": ["kos"]})).await;
    assert_eq!(p["tags"], json!([]));
    let pid = s(&p["id"]);
    let rev = p["revision_number"].as_u64().unwrap_or_default();

    let v = expect(
        &h,
        "PUT",
        &format!("/ports/{pid}/tags"),
        Some(json!({"tags": ["kos", "cluster=c1"]})),
        200,
    )
    .await;
    assert_eq!(v, json!({"tags": ["kos", "cluster=c1"]}));
    let shown = expect(&h, "GET", &format!("/ports/{pid}"), None, 200).await;
    assert_eq!(shown["port"]["tags"], json!(["kos", "cluster=c1"]));
    assert!(
        shown["port"]["revision_number"]
            .as_u64()
            .unwrap_or_default()
            > rev
    );
    expect(&h, "PUT", &format!("/ports/{pid}/tags/extra"), None, 201).await;
    expect(&h, "GET", &format!("/ports/{pid}/tags/extra"), None, 204).await;
    fails(
        &h,
        "GET",
        &format!("/ports/{pid}/tags/nope"),
        Value::Null,
        404,
        "TagNotFound",
    )
    .await;
    expect(&h, "DELETE", &format!("/ports/{pid}/tags/kos"), None, 204).await;
    fails(
        &h,
        "DELETE",
        &format!("/ports/{pid}/tags/kos"),
        Value::Null,
        404,
        "TagNotFound",
    )
    .await;
    fails(
        &h,
        "PUT",
        &format!("/ports/{pid}/tags"),
        json!({"tags": ["a,b"]}),
        400,
        "HTTPBadRequest",
    )
    .await;
    fails(
        &h,
        "PUT",
        &format!("/ports/{pid}/tags"),
        json!({"tags": ["x".repeat(256)]}),
        400,
        "HTTPBadRequest",
    )
    .await;
    expect(&h, "DELETE", &format!("/ports/{pid}/tags"), None, 204).await;
    let v = expect(&h, "GET", &format!("/ports/{pid}/tags"), None, 200).await;
    assert_eq!(v, json!({"tags": []}));
    // Tags on the shared external network are not the member's to set.
    let public = public_network(&h).await;
    fails(
        &h,
        "PUT",
        &format!("/networks/{public}/tags/x"),
        Value::Null,
        403,
        "PolicyNotAuthorized",
    )
    .await;
    // Bulk creation ignores tags too.
    let v = expect(
        &h,
        "POST",
        "/ports",
        Some(json!({"ports": [{"network_id": net, "tags": ["a"]}, {"network_id": net}]})),
        201,
    )
    .await;
    assert_eq!(v["ports"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["ports"][0]["tags"], json!([]));
}

#[tokio::test]
async fn pagination_follows_next_links_until_exhausted() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    subnet(&h, &net, "10.13.0.0/24", json!({"enable_dhcp": false})).await;
    let mut want = BTreeSet::new();
    for i in 0..7 {
        want.insert(s(&port(
            &h,
            json!({"network_id": net, "name": format!("p{i}")}),
        )
        .await["id"]));
    }
    let mut seen = Vec::new();
    let mut next = Some(format!("{N}/ports?network_id={net}&limit=3"));
    let mut pages = 0;
    while let Some(path) = next.take() {
        pages += 1;
        assert!(pages < 10, "pagination does not end");
        let r = h.call("GET", &path, None, None).await;
        assert_eq!(r.status, 200, "{}", r.json);
        let items = r.json["ports"].as_array().cloned().unwrap_or_default();
        assert!(items.len() <= 3);
        seen.extend(items.iter().map(|p| s(&p["id"])));
        next = r.json["ports_links"]
            .as_array()
            .and_then(|l| l.iter().find(|x| x["rel"] == "next"))
            .and_then(|x| x["href"].as_str())
            .map(|href| href.trim_start_matches(h.sim.base_url()).to_owned());
    }
    assert_eq!(seen.len(), 7, "no duplicates: {seen:?}");
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), want);
    fails(
        &h,
        "GET",
        "/ports?marker=0b7d0b5e-0000-4000-8000-000000000000",
        Value::Null,
        404,
        "PortNotFound",
    )
    .await;
    // Sorting and field projection.
    let v = expect(
        &h,
        "GET",
        &format!("/ports?network_id={net}&sort_key=name&sort_dir=desc&fields=name&fields=id"),
        None,
        200,
    )
    .await;
    assert_eq!(
        v["ports"][0],
        json!({"name": "p6", "id": v["ports"][0]["id"]})
    );
    fails(
        &h,
        "GET",
        "/ports?bogus=1",
        Value::Null,
        400,
        "HTTPBadRequest",
    )
    .await;
}

#[tokio::test]
async fn quota_exceeded_is_409_over_quota() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    subnet(&h, &net, "10.14.0.0/24", json!({})).await;
    let pid = h.project_id.clone();
    let d = expect(&h, "GET", &format!("/quotas/{pid}/details"), None, 200).await;
    let used = d["quota"]["port"]["used"].as_i64().unwrap_or_default();
    assert_eq!(used, 1, "the DHCP port: {d}");
    let r = h
        .call(
            "PUT",
            "/_sim/quotas",
            Some(json!({"ports": used + 1})),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    port(&h, json!({"network_id": net})).await;
    let msg = fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"network_id": net}}),
        409,
        "OverQuota",
    )
    .await;
    assert_eq!(msg, "Quota exceeded for resources: ['port'].");
    let q = expect(&h, "GET", &format!("/quotas/{pid}"), None, 200).await;
    assert_eq!(q["quota"]["port"], used + 1);
    let d = expect(&h, "GET", &format!("/quotas/{pid}/details"), None, 200).await;
    assert_eq!(d["quota"]["port"]["used"], d["quota"]["port"]["limit"]);
    h.call("PUT", "/_sim/quotas", Some(json!({"networks": 1})), None)
        .await;
    fails(
        &h,
        "POST",
        "/networks",
        json!({"network": {}}),
        409,
        "OverQuota",
    )
    .await;
}

#[tokio::test]
async fn deleting_resources_in_use_is_409() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    let sub = subnet(&h, &net, "10.15.0.0/24", json!({})).await;
    let p = s(&port(&h, json!({"network_id": net})).await["id"]);
    fails(
        &h,
        "DELETE",
        &format!("/networks/{net}"),
        Value::Null,
        409,
        "NetworkInUse",
    )
    .await;
    fails(
        &h,
        "DELETE",
        &format!("/subnets/{sub}"),
        Value::Null,
        409,
        "SubnetInUse",
    )
    .await;
    let r = expect(
        &h,
        "POST",
        "/routers",
        Some(json!({"router": {"name": "r"}})),
        201,
    )
    .await;
    let rid = s(&r["router"]["id"]);
    let iface = expect(
        &h,
        "PUT",
        &format!("/routers/{rid}/add_router_interface"),
        Some(json!({"subnet_id": sub})),
        200,
    )
    .await;
    let rport = s(&iface["port_id"]);
    let msg = fails(
        &h,
        "DELETE",
        &format!("/ports/{rport}"),
        Value::Null,
        409,
        "L3PortInUse",
    )
    .await;
    assert!(msg.contains("network:router_interface"), "{msg}");
    fails(
        &h,
        "DELETE",
        &format!("/routers/{rid}"),
        Value::Null,
        409,
        "RouterInUse",
    )
    .await;
    expect(
        &h,
        "PUT",
        &format!("/routers/{rid}/remove_router_interface"),
        Some(json!({"port_id": rport})),
        200,
    )
    .await;
    expect(&h, "DELETE", &format!("/routers/{rid}"), None, 204).await;
    expect(&h, "DELETE", &format!("/ports/{p}"), None, 204).await;
    // Only the DHCP port is left: the network (and its subnet) can go.
    expect(&h, "DELETE", &format!("/networks/{net}"), None, 204).await;
    fails(
        &h,
        "GET",
        &format!("/subnets/{sub}"),
        Value::Null,
        404,
        "SubnetNotFound",
    )
    .await;
    fails(
        &h,
        "GET",
        &format!("/networks/{net}"),
        Value::Null,
        404,
        "NetworkNotFound",
    )
    .await;
    fails(
        &h,
        "GET",
        &format!("/routers/{rid}"),
        Value::Null,
        404,
        "RouterNotFound",
    )
    .await;
}

#[tokio::test]
async fn bodies_are_validated_like_neutron() {
    let h = Harness::new().await;
    let msg = fails(
        &h,
        "POST",
        "/networks",
        json!({"network": {"name": "n", "colour": "red"}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    assert_eq!(msg, "Unrecognized attribute(s) 'colour'");
    fails(
        &h,
        "POST",
        "/networks",
        json!({"net": {}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    fails(
        &h,
        "POST",
        "/ports",
        json!({"port": {"name": "no-network"}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    let net = network(&h, "n").await;
    let msg = fails(
        &h,
        "PUT",
        &format!("/networks/{net}"),
        json!({"network": {"status": "DOWN"}}),
        400,
        "HTTPBadRequest",
    )
    .await;
    assert!(msg.contains("read-only"), "{msg}");
    fails(
        &h,
        "POST",
        "/networks",
        json!({"network": {"router:external": true}}),
        403,
        "PolicyNotAuthorized",
    )
    .await;
    fails(
        &h,
        "GET",
        "/ports/0b7d0b5e-0000-4000-8000-000000000000",
        Value::Null,
        404,
        "PortNotFound",
    )
    .await;
    fails(
        &h,
        "GET",
        "/floatingips/0b7d0b5e-0000-4000-8000-000000000000",
        Value::Null,
        404,
        "FloatingIPNotFound",
    )
    .await;
    fails(
        &h,
        "GET",
        "/security-groups/0b7d0b5e-0000-4000-8000-000000000000",
        Value::Null,
        404,
        "SecurityGroupNotFound",
    )
    .await;
    // Field filters: repeated keys are OR, fixed_ips by address, the external network visible to all.
    subnet(&h, &net, "10.16.0.0/24", json!({"enable_dhcp": false})).await;
    let a = port(
        &h,
        json!({"network_id": net, "device_owner": "compute:nova", "device_id": "vm-1"}),
    )
    .await;
    let b = port(&h, json!({"network_id": net})).await;
    let ip = s(&a["fixed_ips"][0]["ip_address"]);
    let v = expect(
        &h,
        "GET",
        &format!("/ports?fixed_ips=ip_address={ip}"),
        None,
        200,
    )
    .await;
    assert_eq!(ids(&v, "ports"), BTreeSet::from([s(&a["id"])]));
    let v = expect(
        &h,
        "GET",
        "/ports?device_owner=compute:nova&device_id=vm-1",
        None,
        200,
    )
    .await;
    assert_eq!(ids(&v, "ports"), BTreeSet::from([s(&a["id"])]));
    let v = expect(
        &h,
        "GET",
        &format!("/ports?id={}&id={}", s(&a["id"]), s(&b["id"])),
        None,
        200,
    )
    .await;
    assert_eq!(v["ports"].as_array().map(Vec::len), Some(2));
    let public = public_network(&h).await;
    let v = expect(
        &h,
        "GET",
        &format!("/subnets?network_id={public}"),
        None,
        200,
    )
    .await;
    assert_eq!(v["subnets"][0]["cidr"], "172.24.4.0/24");
    assert_eq!(v["subnets"][0]["name"], "public-subnet");
    assert_ne!(v["subnets"][0]["project_id"], h.project_id.as_str());
}

#[tokio::test]
async fn port_binding_through_the_service_interface() {
    let h = Harness::new().await;
    let net = network(&h, "n").await;
    let sub = subnet(&h, &net, "10.17.0.0/24", json!({"enable_dhcp": false})).await;
    let p = port(&h, json!({"network_id": net})).await;
    let pid = s(&p["id"]);
    assert_eq!(p["status"], "DOWN");
    {
        let mut c = h.sim.app().cloud();
        neutron::bind_port(&mut c, &pid, "server-1", "compute:nova", "compute-0").expect("binds");
        let other = neutron::bind_port(&mut c, &pid, "server-2", "compute:nova", "compute-1");
        assert_eq!(
            other.map_err(|e| e.kind.to_string()),
            Err("PortInUse".to_owned())
        );
    }
    let v = expect(&h, "GET", &format!("/ports/{pid}"), None, 200).await;
    assert_eq!(v["port"]["device_id"], "server-1");
    assert_eq!(v["port"]["device_owner"], "compute:nova");
    assert_eq!(v["port"]["status"], "DOWN");
    neutron::set_port_status(&mut h.sim.app().cloud(), &pid, "ACTIVE");
    let v = expect(&h, "GET", &format!("/ports/{pid}"), None, 200).await;
    assert_eq!(v["port"]["status"], "ACTIVE");

    // Ports Nova and Octavia create go through the same IPAM and quota checks.
    let (internal, view) = {
        let mut c = h.sim.app().cloud();
        let spec = neutron::InternalPort {
            project_id: h.project_id.clone(),
            network_id: net.clone(),
            subnet_id: Some(sub.clone()),
            ip_address: Some(s(&p["fixed_ips"][0]["ip_address"])),
            device_owner: "Octavia".into(),
            ..Default::default()
        };
        let taken =
            neutron::create_port_internal(&mut c, spec.clone()).map_err(|e| e.kind.to_string());
        assert_eq!(taken, Err("IpAddressAlreadyAllocated".to_owned()));
        let id = neutron::create_port_internal(
            &mut c,
            neutron::InternalPort {
                ip_address: None,
                ..spec
            },
        )
        .expect("vip port");
        let view = neutron::port_view(&c, &id).expect("view");
        assert_eq!(
            neutron::security_group_id(&mut c, &h.project_id, "default"),
            view.security_group_ids.first().cloned()
        );
        assert_eq!(neutron::network_name(&c, &net).as_deref(), Some("n"));
        assert_eq!(
            neutron::subnet_network(&c, &sub).as_deref(),
            Some(net.as_str())
        );
        (id, view)
    };
    assert_eq!(view.fixed_ips[0].0, sub);
    neutron::unbind_port(&mut h.sim.app().cloud(), &pid);
    let v = expect(&h, "GET", &format!("/ports/{pid}"), None, 200).await;
    assert_eq!(v["port"]["device_id"], "");
    assert_eq!(v["port"]["status"], "DOWN");
    neutron::delete_port_internal(&mut h.sim.app().cloud(), &internal);
    fails(
        &h,
        "GET",
        &format!("/ports/{internal}"),
        Value::Null,
        404,
        "PortNotFound",
    )
    .await;
    assert!(neutron::floating_ips_of_port(&h.sim.app().cloud(), &pid).is_empty());
}

/// The floating IP's status once the (simulated) L3 agent has reported, 2 cloud seconds later.
async fn fip_status_after_agent(h: &Harness, fid: &str) -> String {
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let v = expect(h, "GET", &format!("/floatingips/{fid}"), None, 200).await;
    s(&v["floatingip"]["status"])
}

#[tokio::test]
async fn floating_ip_status_follows_the_l3_agent() {
    let h = Harness::new().await;
    let public = public_network(&h).await;
    let net = network(&h, "n").await;
    let sub = subnet(&h, &net, "10.8.0.0/24", json!({})).await;
    let pid = s(&port(&h, json!({"network_id": net})).await["id"]);
    let router = expect(
        &h,
        "POST",
        "/routers",
        Some(json!({"router": {"name": "r", "external_gateway_info": {"network_id": public}}})),
        201,
    )
    .await;
    let rid = s(&router["router"]["id"]);
    let iface = Some(json!({"subnet_id": sub}));
    expect(
        &h,
        "PUT",
        &format!("/routers/{rid}/add_router_interface"),
        iface,
        200,
    )
    .await;

    // Created associated: DOWN in the answer, ACTIVE once the agent reports.
    let body = json!({"floatingip": {"floating_network_id": public, "port_id": pid}});
    let v = expect(&h, "POST", "/floatingips", Some(body), 201).await;
    assert_eq!(v["floatingip"]["status"], "DOWN");
    let fid = s(&v["floatingip"]["id"]);
    assert_eq!(fip_status_after_agent(&h, &fid).await, "ACTIVE");

    // Disassociated: still ACTIVE in the answer, DOWN once the agent reports.
    let body = json!({"floatingip": {"port_id": null}});
    let v = expect(&h, "PUT", &format!("/floatingips/{fid}"), Some(body), 200).await;
    assert_eq!(v["floatingip"]["status"], "ACTIVE");
    assert_eq!(fip_status_after_agent(&h, &fid).await, "DOWN");
}

/// With the ML2 driver `tag_ports_during_bulk_creation` (`neutron_port_tags_on_create`), Neutron
/// advertises its extension and keeps a port POST's tags, single or bulk, each port its own; a bulk
/// POST with one invalid item makes none.
#[tokio::test]
async fn with_the_extension_a_port_posts_tags_are_kept_single_or_bulk() {
    let h = Harness::with_config(kos_sim::SimConfig {
        neutron_port_tags_on_create: true,
        ..kos_sim::SimConfig::fast()
    })
    .await;
    let v = expect(
        &h,
        "GET",
        "/extensions/tag-ports-during-bulk-creation",
        None,
        200,
    )
    .await;
    assert_eq!(v["extension"]["name"], "Tag Ports During Bulk Creation");
    let net = network(&h, "n").await;
    subnet(&h, &net, "10.13.0.0/24", json!({})).await;
    let p = port(
        &h,
        json!({"network_id": net, "name": "one", "tags": ["kos-id=x", "k"]}),
    )
    .await;
    assert_eq!(p["tags"], json!(["kos-id=x", "k"]));
    let shown = expect(&h, "GET", &format!("/ports/{}", s(&p["id"])), None, 200).await;
    assert_eq!(shown["port"]["tags"], json!(["kos-id=x", "k"]));

    let v = expect(
        &h,
        "POST",
        "/ports",
        Some(json!({"ports": [
            {"network_id": net, "name": "b1", "tags": ["a", "b"]},
            {"network_id": net, "name": "b2", "tags": ["c"]},
            {"network_id": net, "name": "b3"},
        ]})),
        201,
    )
    .await;
    let tags: Vec<&Value> = (0..3).map(|i| &v["ports"][i]["tags"]).collect();
    assert_eq!(tags, [&json!(["a", "b"]), &json!(["c"]), &json!([])]);
    let listed = expect(&h, "GET", "/ports?tags=c", None, 200).await;
    assert_eq!(
        ids(&listed, "ports"),
        BTreeSet::from([s(&v["ports"][1]["id"])])
    );

    let before = expect(&h, "GET", "/ports", None, 200).await["ports"]
        .as_array()
        .map_or(0, Vec::len);
    fails(
        &h,
        "POST",
        "/ports",
        json!({"ports": [
            {"network_id": net, "name": "ok", "tags": ["a"]},
            {"network_id": net, "name": "bad", "tags": ["a", "a"]},
        ]}),
        400,
        "HTTPBadRequest",
    )
    .await;
    let after = expect(&h, "GET", "/ports", None, 200).await["ports"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(before, after, "all or nothing");
}
