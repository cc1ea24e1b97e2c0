//! Network, subnet, router with an interface, two security groups (one rule referring to the other),
//! a port with allowed address pairs; tags after create (Neutron drops them on a single-port POST, so
//! the facade applies them separately) and lists by tag filters.

use anyhow::{Result, ensure};
use kos_cloud::model::TagQuery;
use kos_cloud::model::network::{
    AddressPair, FixedIpRequest, NetworkFilter, PortCreate, PortFilter, Remote, RouterCreate,
    RouterFilter, SecurityGroupCreate, SecurityGroupFilter, SecurityGroupRuleCreate, TaggedKind,
};

use super::network_with_subnet;
use crate::{Ctx, Made};

pub async fn network(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let net = ctx.session.network();
        let run = &ctx.run;
        let sub = network_with_subnet(ctx, made, "net", "10.251.0.0/24").await?;

        let router = net
            .create_router(&RouterCreate {
                name: run.name("router"),
                tags: run.tags(),
                ..Default::default()
            })
            .await?;
        made.push(Made::Router(router.id.clone()));
        let iface = net.add_router_interface(&router.id, &sub.id).await?;
        made.push(Made::RouterInterface {
            router: router.id.clone(),
            subnet: sub.id.clone(),
        });
        ensure!(
            iface.subnet_id == sub.id && !iface.port_id.is_empty(),
            "interface: {iface:?}"
        );

        let mut sgs = Vec::new();
        for what in ["sg-nodes", "sg-lb"] {
            let sg = net
                .create_security_group(&SecurityGroupCreate {
                    name: run.name(what),
                    tags: run.tags(),
                    ..Default::default()
                })
                .await?;
            made.push(Made::SecurityGroup(sg.id.clone()));
            sgs.push(sg);
        }
        let (nodes, lb) = (&sgs[0], &sgs[1]);
        let rule = net
            .create_security_group_rule(&SecurityGroupRuleCreate::tcp_in(
                &nodes.id,
                (30000, 32767),
                Remote::Group(lb.id.clone()),
            ))
            .await?;
        ensure!(
            rule.remote_group_id.as_deref() == Some(lb.id.as_str()),
            "rule: {rule:?}"
        );
        let rules = net.list_security_group_rules(&nodes.id).await?;
        ensure!(rules.iter().any(|r| r.id == rule.id), "rule not listed");

        let port = net
            .create_port(&PortCreate {
                fixed_ips: vec![FixedIpRequest::Address {
                    subnet_id: sub.id.clone(),
                    ip_address: "10.251.0.10".into(),
                }],
                allowed_address_pairs: vec![
                    AddressPair::ip("10.96.0.0/12"),
                    AddressPair::ip("10.244.0.0/16"),
                ],
                security_groups: Some(vec![nodes.id.clone()]),
                tags: run.tags(),
                ..PortCreate::new(&sub.network_id, run.name("port"))
            })
            .await?;
        made.push(Made::Port(port.id.clone()));
        let port = net
            .get_port(&port.id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("port vanished"))?;
        ensure!(
            port.tags == run.tags(),
            "port tags after create: {:?}",
            port.tags
        );
        ensure!(
            port.allowed_address_pairs.len() == 2,
            "AAP: {:?}",
            port.allowed_address_pairs
        );
        ensure!(
            port.security_groups == [nodes.id.clone()],
            "port SGs: {:?}",
            port.security_groups
        );
        ensure!(
            port.fixed_ips.iter().any(|f| f.ip_address == "10.251.0.10"),
            "fixed IPs: {:?}",
            port.fixed_ips
        );

        // A second tag on the port only, then filters that tell the two tags apart.
        let extra = run.name("extra");
        let tags = net
            .set_tags(
                TaggedKind::Port,
                &port.id,
                &[run.tag().to_owned(), extra.clone()],
            )
            .await?;
        ensure!(tags.len() == 2, "tags after set: {tags:?}");
        let ports = |tags: TagQuery| PortFilter {
            tags,
            ..Default::default()
        };
        let count = async |f: PortFilter| -> Result<usize> { Ok(net.list_ports(&f).await?.len()) };
        ensure!(count(ports(run.query())).await? == 1, "tags=run");
        ensure!(
            count(ports(TagQuery::all([run.tag(), extra.as_str()]))).await? == 1,
            "tags=run,extra"
        );
        ensure!(
            count(ports(TagQuery::any([extra.as_str(), "kos-e2e-absent"]))).await? == 1,
            "tags-any"
        );
        let not = TagQuery {
            not_tags_any: vec![extra.clone()],
            ..run.query()
        };
        ensure!(count(ports(not)).await? == 0, "not-tags-any");
        let nets = net
            .list_networks(&NetworkFilter {
                tags: run.query(),
                ..Default::default()
            })
            .await?;
        ensure!(
            nets.len() == 1 && nets[0].id == sub.network_id,
            "networks by tag: {}",
            nets.len()
        );
        let routers = net
            .list_routers(&RouterFilter {
                tags: run.query(),
                ..Default::default()
            })
            .await?;
        ensure!(routers.len() == 1, "routers by tag: {}", routers.len());
        let groups = net
            .list_security_groups(&SecurityGroupFilter {
                tags: run.query(),
                ..Default::default()
            })
            .await?;
        ensure!(
            groups.len() == 2,
            "security groups by tag: {}",
            groups.len()
        );

        // A duplicate fixed IP is refused.
        let dup = net
            .create_port(&PortCreate {
                fixed_ips: vec![FixedIpRequest::Address {
                    subnet_id: sub.id.clone(),
                    ip_address: "10.251.0.10".into(),
                }],
                ..PortCreate::new(&sub.network_id, run.name("dup"))
            })
            .await;
        if let Ok(p) = &dup {
            made.push(Made::Port(p.id.clone()));
        }
        ensure!(
            dup.as_ref().err().and_then(|e| e.status()) == Some(409),
            "duplicate fixed IP: {dup:?}"
        );
        Ok(())
    })
    .await
}
