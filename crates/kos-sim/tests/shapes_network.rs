//! Neutron's wire format against its API-reference samples, endpoint by endpoint.

mod common;

use common::Harness;
use kos_sim::Service;
use serde_json::{Value, json};

/// Neutron 29 has no tags on security group rules (its rule model has no tag support), whatever
/// the API reference's samples show.
const RULE_TAGS: &[&str] = &[
    "security_group_rule.tags",
    "security_group_rules[].tags",
    "security_group.security_group_rules[].tags",
    "security_groups[].security_group_rules[].tags",
];

const N: &str = "/network/v2.0";

fn id(v: &Value, key: &str) -> String {
    v[key]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{key}.id in {v}"))
        .to_owned()
}

/// Keys the member token cannot see: Neutron's default policy shows them to admins only.
const ADMIN_ONLY_PORT: &[&str] = &[
    "port.binding:host_id",
    "port.binding:profile",
    "port.binding:vif_details",
    "port.binding:vif_type",
];

#[tokio::test]
async fn network_endpoints_match_samples() {
    let h = Harness::new().await;

    // Discovery.
    for p in ["/network", "/network/"] {
        h.check("GET", p, p, None).await;
    }
    for p in ["/network/v2.0", "/network/v2.0/"] {
        h.check("GET", p, p, None).await;
    }
    let exts = h
        .check(
            "GET",
            "/network/v2.0/extensions",
            "/network/v2.0/extensions",
            None,
        )
        .await;
    let aliases: Vec<&str> = exts["extensions"]
        .as_array()
        .expect("extensions")
        .iter()
        .filter_map(|e| e["alias"].as_str())
        .collect();
    assert!(aliases.contains(&"standard-attr-tag"));
    assert!(!aliases.contains(&"tag-ports-during-bulk-creation"));
    h.check(
        "GET",
        "/network/v2.0/extensions/{alias}",
        &format!("{N}/extensions/router"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/network/v2.0/availability_zones",
        &format!("{N}/availability_zones"),
        None,
    )
    .await;
    let pools = h
        .check(
            "GET",
            "/network/v2.0/floatingip_pools",
            &format!("{N}/floatingip_pools"),
            None,
        )
        .await;
    let public = pools["floatingip_pools"][0]["network_id"]
        .as_str()
        .expect("public network")
        .to_owned();

    // Networks and subnets.
    let net = h
        .check(
            "POST",
            "/network/v2.0/networks",
            &format!("{N}/networks"),
            Some(json!({"network": {"name": "shape-net"}})),
        )
        .await;
    let net_id = id(&net, "network");
    h.check(
        "GET",
        "/network/v2.0/networks",
        &format!("{N}/networks"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/network/v2.0/networks/{id}",
        &format!("{N}/networks/{net_id}"),
        None,
    )
    .await;
    h.check(
        "PUT",
        "/network/v2.0/networks/{id}",
        &format!("{N}/networks/{net_id}"),
        Some(json!({"network": {"name": "shape-net-2"}})),
    )
    .await;
    let sub = h
        .check(
            "POST",
            "/network/v2.0/subnets",
            &format!("{N}/subnets"),
            Some(json!({"subnet": {"network_id": net_id, "cidr": "10.0.0.0/24", "ip_version": 4, "name": "shape-subnet"}})),
        )
        .await;
    let sub_id = id(&sub, "subnet");
    h.check(
        "GET",
        "/network/v2.0/subnets",
        &format!("{N}/subnets"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/network/v2.0/subnets/{id}",
        &format!("{N}/subnets/{sub_id}"),
        None,
    )
    .await;
    h.check(
        "PUT",
        "/network/v2.0/subnets/{id}",
        &format!("{N}/subnets/{sub_id}"),
        Some(json!({"subnet": {"dns_nameservers": ["8.8.8.8"]}})),
    )
    .await;

    // Ports.
    let port = h
        .check(
            "POST",
            "/network/v2.0/ports",
            &format!("{N}/ports"),
            Some(json!({"port": {
                "network_id": net_id, "name": "shape-port",
                "allowed_address_pairs": [{"ip_address": "10.0.0.200"}],
                "extra_dhcp_opts": [{"opt_name": "bootfile-name", "opt_value": "pxelinux.0", "ip_version": 4}],
            }})),
        )
        .await;
    let port_id = id(&port, "port");
    h.check("GET", "/network/v2.0/ports", &format!("{N}/ports"), None)
        .await;
    h.check(
        "GET",
        "/network/v2.0/ports/{id}",
        &format!("{N}/ports/{port_id}"),
        None,
    )
    .await;
    h.check_allowing(
        "PUT",
        "/network/v2.0/ports/{id}",
        &format!("{N}/ports/{port_id}"),
        Some(json!({"port": {"name": "shape-port-2"}})),
        ADMIN_ONLY_PORT,
    )
    .await;

    // Routers: `distributed` and `ha` are admin-only attributes in Neutron's default policy.
    let admin_only_router = &["router.distributed", "router.ha"];
    let router = h
        .check_allowing(
            "POST",
            "/network/v2.0/routers",
            &format!("{N}/routers"),
            Some(json!({"router": {"name": "shape-router", "external_gateway_info": {"network_id": public}}})),
            admin_only_router,
        )
        .await;
    let router_id = id(&router, "router");
    h.check_allowing(
        "PUT",
        "/network/v2.0/routers/{id}/add_router_interface",
        &format!("{N}/routers/{router_id}/add_router_interface"),
        Some(json!({"subnet_id": sub_id})),
        // The sample shows both; Neutron 29 sends neither (docs/fidelity.md).
        &["tenant_id", "tags"],
    )
    .await;
    h.check_allowing(
        "GET",
        "/network/v2.0/routers",
        &format!("{N}/routers"),
        None,
        &["routers[].distributed", "routers[].ha"],
    )
    .await;
    h.check_allowing(
        "PUT",
        "/network/v2.0/routers/{id}",
        &format!("{N}/routers/{router_id}"),
        Some(json!({"router": {"routes": [{"destination": "179.24.1.0/24", "nexthop": "10.0.0.50"}]}})),
        admin_only_router,
    )
    .await;
    h.check_allowing(
        "GET",
        "/network/v2.0/routers/{id}",
        &format!("{N}/routers/{router_id}"),
        None,
        admin_only_router,
    )
    .await;
    h.check(
        "PUT",
        "/network/v2.0/routers/{id}/add_extraroutes",
        &format!("{N}/routers/{router_id}/add_extraroutes"),
        Some(
            json!({"router": {"routes": [{"destination": "10.9.0.0/24", "nexthop": "10.0.0.51"}]}}),
        ),
    )
    .await;
    let left = h
        .check(
            "PUT",
            "/network/v2.0/routers/{id}/remove_extraroutes",
            &format!("{N}/routers/{router_id}/remove_extraroutes"),
            Some(json!({"router": {"routes": [
                {"destination": "179.24.1.0/24", "nexthop": "10.0.0.50"},
                {"destination": "10.9.0.0/24", "nexthop": "10.0.0.51"},
            ]}})),
        )
        .await;
    assert_eq!(left["router"]["routes"], json!([]));

    // Security groups. The upstream create sample has a typo'd key in its first rule.
    let sg = h
        .check_allowing(
            "POST",
            "/network/v2.0/security-groups",
            &format!("{N}/security-groups"),
            Some(json!({"security_group": {"name": "shape-sg", "description": "web"}})),
            &[
                "security_group.security_group_rules[].revisio[n_number",
                "security_group.security_group_rules[].tags",
            ],
        )
        .await;
    let sg_id = id(&sg, "security_group");
    h.check_allowing(
        "GET",
        "/network/v2.0/security-groups",
        &format!("{N}/security-groups"),
        None,
        RULE_TAGS,
    )
    .await;
    h.check_allowing(
        "GET",
        "/network/v2.0/security-groups/{id}",
        &format!("{N}/security-groups/{sg_id}"),
        None,
        RULE_TAGS,
    )
    .await;
    // The update sample puts the rule attribute `belongs_to_default_sg` on the group itself; Neutron
    // defines it on rules only (security-groups-default-rules), so a group does not carry it.
    h.check_allowing(
        "PUT",
        "/network/v2.0/security-groups/{id}",
        &format!("{N}/security-groups/{sg_id}"),
        Some(json!({"security_group": {"description": "updated"}})),
        &[
            "security_group.belongs_to_default_sg",
            "security_group.security_group_rules[].tags",
        ],
    )
    .await;
    let rule = h
        .check_allowing(
            "POST",
            "/network/v2.0/security-group-rules",
            &format!("{N}/security-group-rules"),
            Some(json!({"security_group_rule": {
                "security_group_id": sg_id, "direction": "ingress", "protocol": "tcp",
                "port_range_min": 80, "port_range_max": 80, "remote_group_id": sg_id,
            }})),
            RULE_TAGS,
        )
        .await;
    let rule_id = id(&rule, "security_group_rule");
    h.check_allowing(
        "GET",
        "/network/v2.0/security-group-rules",
        &format!("{N}/security-group-rules"),
        None,
        RULE_TAGS,
    )
    .await;
    h.check_allowing(
        "GET",
        "/network/v2.0/security-group-rules/{id}",
        &format!("{N}/security-group-rules/{rule_id}"),
        None,
        RULE_TAGS,
    )
    .await;

    // Floating IPs: created unassociated, then associated through the router interface.
    let fip = h
        .check(
            "POST",
            "/network/v2.0/floatingips",
            &format!("{N}/floatingips"),
            Some(json!({"floatingip": {"floating_network_id": public, "port_id": port_id, "description": "shape"}})),
        )
        .await;
    // Associated at create, but DOWN until the L3 agent reports (as Neutron 29 answers).
    assert_eq!(fip["floatingip"]["status"], "DOWN");
    let fip_id = id(&fip, "floatingip");
    h.check(
        "GET",
        "/network/v2.0/floatingips",
        &format!("{N}/floatingips"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/network/v2.0/floatingips/{id}",
        &format!("{N}/floatingips/{fip_id}"),
        None,
    )
    .await;
    h.check(
        "PUT",
        "/network/v2.0/floatingips/{id}",
        &format!("{N}/floatingips/{fip_id}"),
        Some(json!({"floatingip": {"port_id": port_id, "description": "moved"}})),
    )
    .await;

    // Tags on every taggable collection.
    for (seg, rid) in [
        ("networks", &net_id),
        ("subnets", &sub_id),
        ("ports", &port_id),
        ("routers", &router_id),
        ("security-groups", &sg_id),
        ("floatingips", &fip_id),
    ] {
        let base = format!("{N}/{seg}/{rid}/tags");
        let t = |suffix: &str| format!("/network/v2.0/{seg}/{{id}}/tags{suffix}");
        h.check("PUT", &t(""), &base, Some(json!({"tags": ["red", "blue"]})))
            .await;
        h.check("PUT", &t("/{tag}"), &format!("{base}/green"), None)
            .await;
        h.check("GET", &t("/{tag}"), &format!("{base}/green"), None)
            .await;
        let all = h.check("GET", &t(""), &base, None).await;
        assert_eq!(all["tags"], json!(["red", "blue", "green"]), "{seg}");
        h.check("DELETE", &t("/{tag}"), &format!("{base}/red"), None)
            .await;
        h.check("DELETE", &t(""), &base, None).await;
    }

    // Quotas. The list is admin-only in Neutron; the harness token is a member's.
    let pid = h.project_id.clone();
    h.check(
        "GET",
        "/network/v2.0/quotas/{project_id}",
        &format!("{N}/quotas/{pid}"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/network/v2.0/quotas/{project_id}/default",
        &format!("{N}/quotas/{pid}/default"),
        None,
    )
    .await;
    h.check(
        "GET",
        "/network/v2.0/quotas/{project_id}/details",
        &format!("{N}/quotas/{pid}/details"),
        None,
    )
    .await;
    let r = h.call("GET", &format!("{N}/quotas"), None, None).await;
    assert_eq!(r.status, 403, "{}", r.json);
    assert_eq!(r.json["NeutronError"]["type"], "AdminRequired");
    h.mark_covered("GET", "/network/v2.0/quotas");

    // Teardown, in the order Neutron allows.
    h.check(
        "DELETE",
        "/network/v2.0/floatingips/{id}",
        &format!("{N}/floatingips/{fip_id}"),
        None,
    )
    .await;
    h.check_allowing(
        "PUT",
        "/network/v2.0/routers/{id}/remove_router_interface",
        &format!("{N}/routers/{router_id}/remove_router_interface"),
        Some(json!({"subnet_id": sub_id})),
        &["tenant_id", "tags"],
    )
    .await;
    h.check(
        "DELETE",
        "/network/v2.0/routers/{id}",
        &format!("{N}/routers/{router_id}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/network/v2.0/ports/{id}",
        &format!("{N}/ports/{port_id}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/network/v2.0/security-group-rules/{id}",
        &format!("{N}/security-group-rules/{rule_id}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/network/v2.0/security-groups/{id}",
        &format!("{N}/security-groups/{sg_id}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/network/v2.0/subnets/{id}",
        &format!("{N}/subnets/{sub_id}"),
        None,
    )
    .await;
    h.check(
        "DELETE",
        "/network/v2.0/networks/{id}",
        &format!("{N}/networks/{net_id}"),
        None,
    )
    .await;

    h.assert_all_covered(Service::Network);
}
