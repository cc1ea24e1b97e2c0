//! The Neutron facade against kos-sim: create → get → list by tag → delete for every resource type,
//! tags applied after create, floating IPs needing a router interface, IP conflicts, quotas, paging.

mod facades_support;

use facades_support::{R, cluster, network_with_subnet, start, tags};
use kos_cloud::model::TagQuery;
use kos_cloud::model::network::{
    AddressPair, FixedIpRequest, FloatingIpCreate, FloatingIpFilter, HostRoute, NetworkFilter,
    PortCreate, PortFilter, PortUpdate, Remote, RouterCreate, RouterFilter, SecurityGroupCreate,
    SecurityGroupFilter, SecurityGroupRuleCreate, SubnetFilter, TaggedKind,
};
use kos_cloud::{ApiErrorKind, CloudError, ServiceKind};

#[tokio::test]
async fn network_subnet_router_port_sg_fip_lifecycle() -> R {
    let c = start().await?;
    let net = c.session.network();

    let sub = network_with_subnet(&c.session, "10.20.0.0/24").await?;
    let n = net
        .get_network(&sub.network_id)
        .await?
        .ok_or("network missing")?;
    assert!(
        n.tags.contains(&"kos-id=net".to_owned()),
        "tags after create: {:?}",
        n.tags
    );
    let listed = net
        .list_networks(&NetworkFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?;
    assert_eq!(
        listed.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(),
        vec![n.id.as_str()]
    );
    let subs = net
        .list_subnets(&SubnetFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0].cidr, "10.20.0.0/24");

    let ext = net.external_network(None).await?;
    assert!(ext.external);
    assert_eq!(net.external_network(Some(&ext.name)).await?.id, ext.id);
    let err = net
        .external_network(Some("no-such-net"))
        .await
        .err()
        .ok_or("expected a lookup error")?;
    assert!(matches!(err, CloudError::Lookup { .. }), "{err}");

    // Security groups: one for control planes, rules from the other group and from a CIDR.
    let sg = net
        .create_security_group(&SecurityGroupCreate {
            name: "kos-t1-cp".into(),
            tags: tags("sg-cp"),
            ..Default::default()
        })
        .await?;
    assert!(sg.tags.contains(&"kos-id=sg-cp".to_owned()));
    let r1 = net
        .create_security_group_rule(&SecurityGroupRuleCreate::tcp_in(
            &sg.id,
            (6443, 6443),
            Remote::IpPrefix("0.0.0.0/0".into()),
        ))
        .await?;
    let r2 = net
        .create_security_group_rule(&SecurityGroupRuleCreate::tcp_in(
            &sg.id,
            (10250, 10250),
            Remote::Group(sg.id.clone()),
        ))
        .await?;
    assert_eq!(r2.remote_group_id.as_deref(), Some(sg.id.as_str()));
    let rules = net.list_security_group_rules(&sg.id).await?;
    assert!(rules.iter().any(|r| r.id == r1.id) && rules.iter().any(|r| r.id == r2.id));
    let sgs = net
        .list_security_groups(&SecurityGroupFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?;
    assert_eq!(sgs.len(), 1);

    // A port with a fixed IP, allowed address pairs and the group.
    let port = net
        .create_port(&PortCreate {
            fixed_ips: vec![FixedIpRequest::Address {
                subnet_id: sub.id.clone(),
                ip_address: "10.20.0.10".into(),
            }],
            allowed_address_pairs: vec![AddressPair::ip("10.244.0.0/16")],
            security_groups: Some(vec![sg.id.clone()]),
            tags: tags("port-cp0"),
            ..PortCreate::new(&sub.network_id, "kos-t1-cp0")
        })
        .await?;
    assert_eq!(port.fixed_ips[0].ip_address, "10.20.0.10");
    assert_eq!(port.allowed_address_pairs[0].ip_address, "10.244.0.0/16");
    assert!(port.tags.contains(&"kos-id=port-cp0".to_owned()));
    let got = net.get_port(&port.id).await?.ok_or("port missing")?;
    assert_eq!(
        got.tags.len(),
        2,
        "tags are on the port in the cloud, not only in our answer"
    );
    let by_tag = net
        .list_ports(&PortFilter {
            tags: TagQuery::all(["kos-id=port-cp0"]),
            ..Default::default()
        })
        .await?;
    assert_eq!(by_tag.len(), 1);
    let updated = net
        .update_port(
            &port.id,
            &PortUpdate {
                allowed_address_pairs: Some(vec![
                    AddressPair::ip("10.244.0.0/16"),
                    AddressPair::ip("10.96.0.0/12"),
                ]),
                ..Default::default()
            },
        )
        .await?;
    assert_eq!(updated.allowed_address_pairs.len(), 2);

    // A floating IP cannot reach the port before a router connects its subnet to the external network.
    let fip = net
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: ext.id.clone(),
            description: Some("kos api endpoint".into()),
            tags: tags("fip-api"),
            ..Default::default()
        })
        .await?;
    assert!(fip.tags.contains(&"kos-id=fip-api".to_owned()));
    let err = net
        .associate_floating_ip(&fip.id, &port.id, None)
        .await
        .err()
        .ok_or("association without a router worked")?;
    assert_eq!(err.kind(), Some(ApiErrorKind::NotFound), "{err}");

    let router = net
        .create_router(&RouterCreate {
            tags: tags("router"),
            ..RouterCreate::with_gateway("kos-t1-router", &ext.id)
        })
        .await?;
    assert_eq!(
        router
            .external_gateway_info
            .as_ref()
            .map(|g| g.network_id.as_str()),
        Some(ext.id.as_str())
    );
    assert!(router.tags.contains(&"kos-id=router".to_owned()));
    let iface = net.add_router_interface(&router.id, &sub.id).await?;
    assert_eq!(iface.subnet_id, sub.id);
    let routes = [HostRoute {
        destination: "10.244.1.0/24".into(),
        nexthop: "10.20.0.10".into(),
    }];
    assert_eq!(
        net.set_router_routes(&router.id, &routes)
            .await?
            .routes
            .len(),
        1
    );
    assert_eq!(
        net.list_routers(&RouterFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?
        .len(),
        1
    );

    let fip = net
        .associate_floating_ip(&fip.id, &port.id, Some("10.20.0.10"))
        .await?;
    assert_eq!(fip.fixed_ip_address.as_deref(), Some("10.20.0.10"));
    let by_port = net
        .list_floating_ips(&FloatingIpFilter {
            port_id: Some(port.id.clone()),
            ..Default::default()
        })
        .await?;
    assert_eq!(by_port.len(), 1);
    let by_desc = net
        .list_floating_ips(&FloatingIpFilter {
            description: Some("kos api endpoint".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(by_desc.len(), 1);
    assert_eq!(net.disassociate_floating_ip(&fip.id).await?.port_id, None);

    // Teardown in reverse order; deleting twice is fine.
    net.delete_floating_ip(&fip.id).await?;
    net.delete_floating_ip(&fip.id).await?;
    net.set_router_routes(&router.id, &[]).await?;
    net.remove_router_interface(&router.id, &sub.id).await?;
    net.delete_router(&router.id).await?;
    net.delete_port(&port.id).await?;
    net.delete_security_group(&sg.id).await?;
    net.delete_subnet(&sub.id).await?;
    net.delete_network(&sub.network_id).await?;
    assert!(net.get_network(&sub.network_id).await?.is_none());
    assert!(net.get_port(&port.id).await?.is_none());
    assert!(
        net.list_networks(&NetworkFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?
        .is_empty()
    );
    Ok(())
}

#[tokio::test]
async fn tags_set_after_create_are_found_by_list() -> R {
    let c = start().await?;
    let net = c.session.network();
    let sub = network_with_subnet(&c.session, "10.21.0.0/24").await?;
    let port = net
        .create_port(&PortCreate::new(&sub.network_id, "untagged"))
        .await?;
    assert!(port.tags.is_empty());
    let before = c
        .session
        .counters()
        .operation(ServiceKind::Network, "port.tags.replace");
    assert_eq!(before, 0, "an untagged create sends no tag PUT");

    net.set_tags(TaggedKind::Port, &port.id, &tags("late"))
        .await?;
    net.add_tag(TaggedKind::Port, &port.id, "kos-role=worker")
        .await?;
    let found = net
        .list_ports(&PortFilter {
            tags: TagQuery::all(["kos-id=late", "kos-role=worker"]),
            ..Default::default()
        })
        .await?;
    assert_eq!(
        found.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        vec![port.id.as_str()]
    );
    let none = net
        .list_ports(&PortFilter {
            tags: TagQuery {
                not_tags_any: vec!["kos-id=late".into()],
                tags: vec![kos_cluster()],
                ..Default::default()
            },
            ..Default::default()
        })
        .await?;
    assert!(none.is_empty());
    Ok(())
}

fn kos_cluster() -> String {
    facades_support::CLUSTER_TAG.to_owned()
}

#[tokio::test]
async fn a_taken_fixed_ip_is_a_conflict() -> R {
    let c = start().await?;
    let net = c.session.network();
    let sub = network_with_subnet(&c.session, "10.22.0.0/24").await?;
    let ip = || {
        vec![FixedIpRequest::Address {
            subnet_id: sub.id.clone(),
            ip_address: "10.22.0.50".into(),
        }]
    };
    net.create_port(&PortCreate {
        fixed_ips: ip(),
        ..PortCreate::new(&sub.network_id, "a")
    })
    .await?;
    let err = net
        .create_port(&PortCreate {
            fixed_ips: ip(),
            ..PortCreate::new(&sub.network_id, "b")
        })
        .await
        .err()
        .ok_or("second port with the same IP was created")?;
    assert_eq!(err.kind(), Some(ApiErrorKind::Conflict), "{err}");
    Ok(())
}

#[tokio::test]
async fn port_security_off_with_pairs_is_refused_before_sending() -> R {
    let c = start().await?;
    let before = c.session.counters().total();
    let err = c
        .session
        .network()
        .create_port(&PortCreate {
            port_security_enabled: Some(false),
            allowed_address_pairs: vec![AddressPair::ip("10.0.0.0/8")],
            ..PortCreate::new("net", "p")
        })
        .await
        .err()
        .ok_or("expected an error")?;
    assert!(matches!(err, CloudError::Invalid { .. }), "{err:?}");
    assert!(err.to_string().contains("port_security"), "{err}");
    assert_eq!(c.session.counters().total(), before);
    Ok(())
}

#[tokio::test]
async fn quotas_report_usage() -> R {
    let c = start().await?;
    let sub = network_with_subnet(&c.session, "10.23.0.0/24").await?;
    c.session
        .network()
        .create_port(&PortCreate::new(&sub.network_id, "q"))
        .await?;
    let q = c.session.network().quotas().await?;
    let port = q.get("port").ok_or("no port quota")?;
    assert!(port.used >= 1 && port.limit != 0, "{port:?}");
    assert!(
        q.contains_key("network") && q.contains_key("floatingip"),
        "{q:?}"
    );
    Ok(())
}

#[tokio::test]
async fn list_all_costs_one_call_per_page() -> R {
    let c = start().await?;
    let net = c.session.network();
    let sub = network_with_subnet(&c.session, "10.24.0.0/24").await?;
    for i in 0..7 {
        net.create_port(&PortCreate {
            tags: tags(&format!("p{i}")),
            ..PortCreate::new(&sub.network_id, format!("p{i}"))
        })
        .await?;
    }
    let before = c
        .session
        .counters()
        .operation(ServiceKind::Network, "port.list");
    let ports = net
        .page_size(3)
        .list_ports(&PortFilter {
            tags: cluster(),
            ..Default::default()
        })
        .await?;
    let calls = c
        .session
        .counters()
        .operation(ServiceKind::Network, "port.list")
        - before;
    assert_eq!(ports.len(), 7);
    let mut names: Vec<_> = ports.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 7, "no port twice");
    assert_eq!(calls, 3, "ceil(7/3) calls");
    Ok(())
}
