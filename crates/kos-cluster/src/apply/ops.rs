//! What apply does to one node: create (resolving ambiguous failures by lookup before any retry), update,
//! adopt, replace, or hand the observed object on unchanged.

use std::collections::BTreeMap;
use std::future::Future;

use futures::future::join_all;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::{VolumeCreate, VolumeFilter, VolumeStatus};
use kos_cloud::model::compute::{
    BlockDevice, Boot, KeypairCreate, Nic, ServerCreate, ServerGroupCreate, ServerGroupPolicy,
    ServerStatus,
};
use kos_cloud::model::load_balancer::{
    ListenerUpdate, LoadBalancerCreate, LoadBalancerFilter, PoolParent, ProvisioningStatus, Vip,
};
use kos_cloud::model::network::{
    AddressPair, Direction, EtherType, FixedIpRequest, FloatingIpCreate, FloatingIpFilter,
    NetworkCreate, NetworkFilter, PortCreate, PortFilter, PortUpdate, RouterCreate, RouterFilter,
    SecurityGroupCreate, SecurityGroupFilter, SecurityGroupRuleCreate, SubnetCreate, SubnetFilter,
    Tagged,
};
use kos_cloud::{ApiErrorKind, CloudError};

use super::delete::{Deleter, tagged_kind};
use super::wait::{Target, WaitKind};
use super::{CcmCredential, Ctx, Output, lb};
use crate::events::{Event, emit};
use crate::graph::{AssocTarget, Desired, Kind, Node, Remote, ServerSpec, host_cidr};
use crate::names::{TAG_CLUSTER, TAG_ID};
use crate::observe::{ROUTER_INTERFACE, Resource, router_gateway_ip};
use crate::plan::{Action, Op, ethertype, rule_diff};

type R<T> = Result<T, CloudError>;

/// Runs one node's action; returns what dependents need.
pub(super) async fn run(
    ctx: &Ctx,
    node: &Node,
    action: &Action,
    user_data: Option<Vec<u8>>,
) -> R<Output> {
    if let Desired::External { id } = &node.spec {
        return Ok(Output {
            id: id.clone(),
            ..Output::default()
        });
    }
    let existing = action.existing.as_ref();
    let ready = match (action.op, existing) {
        (Op::NoOp | Op::Roll | Op::Adopt | Op::Update, Some(r)) => settled(ctx, node, r).await?,
        _ => None,
    };
    match (action.op, existing) {
        // Replaced one at a time by the lifecycle (drained first), never by the engine.
        (Op::Roll, Some(r)) => Ok(ready.unwrap_or_else(|| output_of(r))),
        (Op::NoOp, Some(r)) => {
            if node.kind == Kind::AppCredential && ctx.opts.recreate_ccm_credential {
                delete(ctx, r).await?;
                return create(ctx, node, user_data).await;
            }
            Ok(ready.unwrap_or_else(|| output_of(r)))
        }
        (Op::Adopt, Some(r)) => {
            tag(ctx, node, &r.id).await?;
            ensure(ctx, node, Some(r)).await
        }
        (Op::Update, Some(r)) => ensure(ctx, node, Some(r)).await,
        (Op::Replace, Some(r)) => {
            delete(ctx, r).await?;
            create(ctx, node, user_data).await
        }
        _ => create(ctx, node, user_data).await,
    }
}

/// What an earlier run left in progress (a run killed while a server was in BUILD, a load balancer
/// PENDING_*, a volume creating) is waited for before it is used or changed, as its create would
/// have been: Octavia refuses changes to a busy load balancer and Nova boots from no volume that is
/// still being made. `Some`: it was waited for, and its output as the wait saw it.
async fn settled(ctx: &Ctx, node: &Node, r: &Resource) -> R<Option<Output>> {
    let kind = match node.kind {
        Kind::Server if ServerStatus::from(r.state.as_str()) == ServerStatus::Build => {
            WaitKind::Server
        }
        Kind::LoadBalancer
            if matches!(
                ProvisioningStatus::from(r.state.as_str()),
                ProvisioningStatus::PendingCreate | ProvisioningStatus::PendingUpdate
            ) =>
        {
            WaitKind::LoadBalancer
        }
        Kind::Volume
            if matches!(
                VolumeStatus::from(r.state.as_str()),
                VolumeStatus::Creating | VolumeStatus::Downloading
            ) =>
        {
            WaitKind::Volume
        }
        _ => return Ok(None),
    };
    let within = match kind {
        WaitKind::Server => ctx.opts.deadlines.server,
        WaitKind::LoadBalancer => ctx.opts.deadlines.load_balancer,
        WaitKind::Volume | WaitKind::Snapshot => ctx.opts.deadlines.volume,
    };
    tracing::info!(node = %node.id, state = %r.state, "left in progress by an earlier run: waiting for it");
    let seen = wait(ctx, node, kind, &r.id, within).await?;
    let mut out = output_of(r);
    if kind == WaitKind::LoadBalancer {
        out.address = seen.address.or(out.address);
        out.port_id = seen.port_id.or(out.port_id);
    }
    Ok(Some(out))
}

fn output_of(r: &Resource) -> Output {
    Output {
        id: r.id.clone(),
        address: r.facts.address.clone(),
        port_id: r.facts.port_id.clone(),
    }
}

fn deleter(ctx: &Ctx) -> Deleter<'_> {
    Deleter {
        session: &ctx.session,
        waiter: &ctx.waiter,
        deadline: ctx.opts.deadlines.delete,
        poll: ctx.opts.poll_interval,
        events: ctx.events.as_ref(),
    }
}

async fn delete(ctx: &Ctx, r: &Resource) -> R<()> {
    deleter(ctx).delete_one(r).await
}

/// Tags a Neutron object found by name (a crash between its create and its tag PUT).
async fn tag(ctx: &Ctx, node: &Node, id: &str) -> R<()> {
    if let Some(k) = tagged_kind(node.kind) {
        ctx.session.network().set_tags(k, id, &node.tags).await?;
    }
    Ok(())
}

/// A server made by an older kos gets the record tags ([`crate::graph::record`]) it lacks.
async fn record_server(ctx: &Ctx, node: &Node, have: &Resource) -> R<()> {
    for t in node.tags.iter().filter(|t| !have.facts.tags.contains(t)) {
        ctx.session.compute().add_server_tag(&have.id, t).await?;
    }
    Ok(())
}

fn dep(ctx: &Ctx, id: &str) -> R<Output> {
    ctx.output(id).ok_or_else(|| CloudError::Invalid {
        what: format!("dependency {id}"),
        detail: "has not been created".into(),
    })
}

/// The tag query that finds exactly this node (Nova, Octavia).
fn own_tags(ctx: &Ctx, node: &Node) -> TagQuery {
    TagQuery::all([
        format!("{TAG_CLUSTER}={}", ctx.cluster),
        format!("{TAG_ID}={}", node.id),
    ])
}

/// Whether a failed create may have happened anyway.
fn maybe_created(e: &CloudError) -> bool {
    matches!(
        e,
        CloudError::Ambiguous { .. }
            | CloudError::Transport { .. }
            | CloudError::Decode { .. }
            | CloudError::CreatedUntagged { .. }
    ) || matches!(
        e.kind(),
        Some(ApiErrorKind::Server | ApiErrorKind::Unavailable)
    )
}

/// Creates; when the outcome is unknown, looks the object up by its logical id (name or tags) before
/// trying again, so a retry never makes a duplicate.
async fn create_or_find<C, CF, F, FF>(ctx: &Ctx, node: &Node, create: C, find: F) -> R<Output>
where
    C: Fn() -> CF,
    CF: Future<Output = R<Output>>,
    F: Fn() -> FF,
    FF: Future<Output = R<Option<Output>>>,
{
    const ATTEMPTS: u32 = 3;
    let mut attempt = 1;
    loop {
        let result = {
            let _permit = ctx.permits.acquire().await.ok();
            create().await
        };
        match result {
            Ok(o) => return Ok(o),
            Err(e) if maybe_created(&e) => {
                tracing::warn!(node = %node.id, "create outcome unknown, looking it up: {e}");
                if let Some(o) = find().await? {
                    return Ok(o);
                }
                if attempt >= ATTEMPTS {
                    return Err(e);
                }
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Of Neutron objects found by name, the one that is this node's (tagged with its id, or untagged), tagged.
async fn pick_neutron<T: Tagged>(
    ctx: &Ctx,
    node: &Node,
    found: Vec<T>,
    out: impl FnOnce(T) -> Output,
) -> R<Option<Output>> {
    let own_id = format!("{TAG_ID}={}", node.id);
    let mine = found.into_iter().find(|x| {
        let tags = x.tags();
        tags.contains(&own_id) || !tags.iter().any(|t| t.starts_with("kos-"))
    });
    let Some(x) = mine else {
        return Ok(None);
    };
    if !x.tags().contains(&format!("{TAG_CLUSTER}={}", ctx.cluster)) {
        tag(ctx, node, x.id()).await?;
    }
    Ok(Some(out(x)))
}

/// Just the id, for dependents.
fn id_of<T: Tagged>(x: T) -> Output {
    simple(x.id().to_owned())
}

/// A child of a load balancer made by its populated create: found by its tags, or the create lost it.
fn made_with_lb(node: &Node, found: Option<Output>) -> R<Output> {
    found.ok_or_else(|| CloudError::Invalid {
        what: format!("{} {}", node.kind.as_str(), node.id),
        detail: "is missing from its load balancer's populated create".into(),
    })
}

fn simple(id: String) -> Output {
    Output {
        id,
        ..Output::default()
    }
}

async fn create(ctx: &Ctx, node: &Node, user_data: Option<Vec<u8>>) -> R<Output> {
    let net = ctx.session.network();
    let lb = ctx.session.load_balancer();
    let name = Some(node.name.clone());
    match &node.spec {
        Desired::External { id } => Ok(simple(id.clone())),
        Desired::Network => {
            let req = NetworkCreate {
                name: node.name.clone(),
                tags: node.tags.clone(),
                ..NetworkCreate::default()
            };
            let find = || async {
                let f = NetworkFilter {
                    name: name.clone(),
                    ..NetworkFilter::default()
                };
                pick_neutron(ctx, node, net.list_networks(&f).await?, id_of).await
            };
            create_or_find(
                ctx,
                node,
                || async { Ok(simple(net.create_network(&req).await?.id)) },
                find,
            )
            .await
        }
        Desired::Subnet {
            network,
            cidr,
            dns_servers,
        } => {
            let req = SubnetCreate {
                dns_nameservers: dns_servers.clone(),
                tags: node.tags.clone(),
                ..SubnetCreate::new(dep(ctx, network)?.id, &node.name, cidr)
            };
            let find = || async {
                let f = SubnetFilter {
                    name: name.clone(),
                    ..SubnetFilter::default()
                };
                pick_neutron(ctx, node, net.list_subnets(&f).await?, id_of).await
            };
            create_or_find(
                ctx,
                node,
                || async { Ok(simple(net.create_subnet(&req).await?.id)) },
                find,
            )
            .await
        }
        Desired::Router {
            external_network_id,
        } => {
            let req = RouterCreate {
                tags: node.tags.clone(),
                ..RouterCreate::with_gateway(&node.name, external_network_id)
            };
            // Dependents need its gateway address (the source of the nodes' traffic to the API's
            // floating IP).
            let out = |r: kos_cloud::model::network::Router| Output {
                address: router_gateway_ip(&r),
                ..simple(r.id)
            };
            let find = || async {
                let f = RouterFilter {
                    name: name.clone(),
                    ..RouterFilter::default()
                };
                pick_neutron(ctx, node, net.list_routers(&f).await?, out).await
            };
            create_or_find(
                ctx,
                node,
                || async { Ok(out(net.create_router(&req).await?)) },
                find,
            )
            .await
        }
        Desired::RouterInterface { router, subnet } => {
            let (router, subnet) = (dep(ctx, router)?.id, dep(ctx, subnet)?.id);
            let find = || async {
                let f = PortFilter {
                    device_id: Some(router.clone()),
                    device_owner: Some(ROUTER_INTERFACE.into()),
                    ..PortFilter::default()
                };
                let found = net.list_ports(&f).await?;
                let hit = found
                    .into_iter()
                    .find(|p| p.fixed_ips.iter().any(|f| f.subnet_id == subnet));
                match hit {
                    Some(p) => {
                        tag(ctx, node, &p.id).await?;
                        Ok(Some(simple(p.id)))
                    }
                    None => Ok(None),
                }
            };
            let added = {
                let _permit = ctx.permits.acquire().await.ok();
                net.add_router_interface(&router, &subnet).await
            };
            match added {
                Ok(i) => {
                    tag(ctx, node, &i.port_id).await?;
                    Ok(simple(i.port_id))
                }
                // Ambiguous, or already there from a run that crashed before tagging it.
                Err(e) => find().await?.ok_or(e),
            }
        }
        Desired::SecurityGroup { description } => {
            let req = SecurityGroupCreate {
                name: node.name.clone(),
                description: Some(description.clone()),
                tags: node.tags.clone(),
            };
            let find = || async {
                let f = SecurityGroupFilter {
                    name: name.clone(),
                    ..SecurityGroupFilter::default()
                };
                pick_neutron(ctx, node, net.list_security_groups(&f).await?, id_of).await
            };
            create_or_find(
                ctx,
                node,
                || async { Ok(simple(net.create_security_group(&req).await?.id)) },
                find,
            )
            .await
        }
        Desired::FloatingIp {
            external_network_id,
            port,
        } => {
            // Floating IPs have no name: the deterministic name is their description.
            let req = FloatingIpCreate {
                floating_network_id: external_network_id.clone(),
                description: name.clone(),
                port_id: port
                    .as_ref()
                    .map(|p| dep(ctx, p).map(|o| o.id))
                    .transpose()?,
                tags: node.tags.clone(),
                ..FloatingIpCreate::default()
            };
            let out = |x: &kos_cloud::model::network::FloatingIp| Output {
                id: x.id.clone(),
                address: Some(x.floating_ip_address.clone()),
                port_id: x.port_id.clone(),
            };
            let find = || async {
                let f = FloatingIpFilter {
                    description: name.clone(),
                    ..FloatingIpFilter::default()
                };
                let found = net.list_floating_ips(&f).await?;
                pick_neutron(ctx, node, found, |x| out(&x)).await
            };
            create_or_find(
                ctx,
                node,
                || async { Ok(out(&net.create_floating_ip(&req).await?)) },
                find,
            )
            .await
        }
        Desired::Port { .. } | Desired::VipPort { .. } => {
            let req = port_request(ctx, node)?;
            create_port(ctx, node, &req).await
        }
        Desired::ServerGroup { policy } => {
            let req = ServerGroupCreate::new(&node.name, ServerGroupPolicy::from(*policy));
            let find = || async {
                let all = ctx.session.compute().list_server_groups().await?;
                Ok(all
                    .into_iter()
                    .find(|g| g.name == node.name)
                    .map(|g| simple(g.id)))
            };
            create_or_find(
                ctx,
                node,
                || async {
                    Ok(simple(
                        ctx.session.compute().create_server_group(&req).await?.id,
                    ))
                },
                find,
            )
            .await
        }
        Desired::Keypair { public_key } => {
            let req = KeypairCreate::ssh(&node.name, public_key);
            let find = || async {
                Ok(ctx
                    .session
                    .compute()
                    .get_keypair(&node.name)
                    .await?
                    .map(|k| simple(k.name)))
            };
            create_or_find(
                ctx,
                node,
                || async {
                    Ok(simple(
                        ctx.session.compute().create_keypair(&req).await?.name,
                    ))
                },
                find,
            )
            .await
        }
        Desired::AppCredential {
            roles,
            lifetime_days,
            access_rules,
        } => create_app_credential(ctx, node, roles, *lifetime_days, *access_rules).await,
        Desired::LoadBalancer {
            subnet,
            provider,
            vip_port,
        } => {
            let vip = match vip_port {
                Some(p) => Vip::Port(dep(ctx, p)?.id),
                None => Vip::Subnet(dep(ctx, subnet)?.id),
            };
            let mut req = LoadBalancerCreate::new(&node.name, vip);
            req.provider.clone_from(provider);
            req.tags.clone_from(&node.tags);
            if let Some(p) = ctx.populated.get(&node.id) {
                req.listeners = vec![lb::populated_listener(ctx, p)?];
            }
            let find = || async {
                let f = LoadBalancerFilter {
                    tags: own_tags(ctx, node),
                    ..LoadBalancerFilter::default()
                };
                Ok(lb
                    .list_load_balancers(&f)
                    .await?
                    .into_iter()
                    .next()
                    .map(|x| simple(x.id)))
            };
            let o = create_or_find(
                ctx,
                node,
                || async { Ok(simple(lb.create_load_balancer(&req).await?.id)) },
                find,
            )
            .await?;
            let seen = wait(
                ctx,
                node,
                WaitKind::LoadBalancer,
                &o.id,
                ctx.opts.deadlines.load_balancer,
            )
            .await?;
            Ok(Output {
                id: o.id,
                address: seen.address,
                port_id: seen.port_id,
            })
        }
        Desired::Listener { lb: lb_id, .. } => {
            let find = || async {
                Ok(lb
                    .list_listeners_tagged(&own_tags(ctx, node))
                    .await?
                    .into_iter()
                    .next()
                    .map(|x| simple(x.id)))
            };
            if lb::made_with_its_lb(ctx, node) {
                return made_with_lb(node, find().await?);
            }
            let lb_out = dep(ctx, lb_id)?;
            let req = lb::listener(ctx, node, &lb_out.id)?;
            lb_step(ctx, node, lb_id, &lb_out.id, || {
                create_or_find(
                    ctx,
                    node,
                    || async { Ok(simple(lb.create_listener(&req).await?.id)) },
                    find,
                )
            })
            .await
        }
        Desired::Pool {
            lb: lb_id,
            listener,
            ..
        } => {
            let find = || async {
                Ok(lb
                    .list_pools_tagged(&own_tags(ctx, node))
                    .await?
                    .into_iter()
                    .next()
                    .map(|x| simple(x.id)))
            };
            if lb::made_with_its_lb(ctx, node) {
                return made_with_lb(node, find().await?);
            }
            let lb_out = dep(ctx, lb_id)?;
            let req = lb::pool(node, PoolParent::Listener(dep(ctx, listener)?.id))?;
            lb_step(ctx, node, lb_id, &lb_out.id, || {
                create_or_find(
                    ctx,
                    node,
                    || async { Ok(simple(lb.create_pool(&req).await?.id)) },
                    find,
                )
            })
            .await
        }
        Desired::HealthMonitor { lb: lb_id, pool } => {
            let find = || async {
                Ok(lb
                    .list_health_monitors(&own_tags(ctx, node))
                    .await?
                    .into_iter()
                    .next()
                    .map(|x| simple(x.id)))
            };
            if lb::made_with_its_lb(ctx, node) {
                return made_with_lb(node, find().await?);
            }
            let lb_out = dep(ctx, lb_id)?;
            let req = lb::monitor(node, dep(ctx, pool)?.id);
            lb_step(ctx, node, lb_id, &lb_out.id, || {
                create_or_find(
                    ctx,
                    node,
                    || async { Ok(simple(lb.create_health_monitor(&req).await?.id)) },
                    find,
                )
            })
            .await
        }
        // Set by the populated create: the pool's id is what dependents need.
        Desired::Members { pool, .. } if lb::made_with_its_lb(ctx, node) => {
            Ok(simple(dep(ctx, pool)?.id))
        }
        Desired::Volume {
            size_gb,
            volume_type,
            image_id,
            availability_zone,
        } => {
            let metadata = BTreeMap::from([
                (TAG_CLUSTER.to_owned(), ctx.cluster.clone()),
                (TAG_ID.to_owned(), node.id.clone()),
            ]);
            let req = VolumeCreate {
                size: u64::from(*size_gb),
                name: name.clone(),
                volume_type: volume_type.clone(),
                image_id: Some(image_id.clone()),
                availability_zone: availability_zone.clone(),
                metadata: metadata.clone(),
                ..VolumeCreate::default()
            };
            let find = || async {
                let f = VolumeFilter {
                    metadata: metadata.clone(),
                    ..VolumeFilter::default()
                };
                Ok(ctx
                    .session
                    .block_storage()
                    .list_volumes(&f)
                    .await?
                    .into_iter()
                    .next()
                    .map(|v| simple(v.id)))
            };
            let o = create_or_find(
                ctx,
                node,
                || async {
                    Ok(simple(
                        ctx.session.block_storage().create_volume(&req).await?.id,
                    ))
                },
                find,
            )
            .await?;
            wait(
                ctx,
                node,
                WaitKind::Volume,
                &o.id,
                ctx.opts.deadlines.volume,
            )
            .await?;
            Ok(o)
        }
        Desired::Server(spec) => create_server(ctx, node, spec, user_data).await,
        Desired::SecurityGroupRules { .. }
        | Desired::Members { .. }
        | Desired::FloatingIpAssociation { .. } => ensure(ctx, node, None).await,
    }
}

/// Brings an existing object (or, for rules, members and associations, the absence of one) in line.
async fn ensure(ctx: &Ctx, node: &Node, have: Option<&Resource>) -> R<Output> {
    let net = ctx.session.network();
    match &node.spec {
        Desired::SecurityGroupRules { group, rules } => {
            let group_id = dep(ctx, group)?.id;
            let observed = have.map(|r| r.facts.rules.as_slice()).unwrap_or_default();
            let (missing, extra) = rule_diff(
                rules,
                observed,
                |g| ctx.output(g).map(|o| o.id),
                |r| ctx.output(r).and_then(|o| o.address),
            );
            let adds = missing.into_iter().map(|r| {
                let req = SecurityGroupRuleCreate {
                    security_group_id: group_id.clone(),
                    direction: Direction::Ingress,
                    ethertype: if ethertype(&r.remote) == "IPv6" {
                        EtherType::IPv6
                    } else {
                        EtherType::IPv4
                    },
                    protocol: r.protocol.map(str::to_owned),
                    port_range: r.ports,
                    remote: match &r.remote {
                        Remote::Cidr(c) => kos_cloud::model::network::Remote::IpPrefix(c.clone()),
                        Remote::Group(g) => kos_cloud::model::network::Remote::Group(
                            ctx.output(g).map(|o| o.id).unwrap_or_default(),
                        ),
                        // Missing rules only: their gateway resolved, or they would not be here.
                        Remote::RouterGateway(router) => {
                            kos_cloud::model::network::Remote::IpPrefix(
                                ctx.output(router)
                                    .and_then(|o| o.address)
                                    .map(|ip| host_cidr(&ip))
                                    .unwrap_or_default(),
                            )
                        }
                    },
                    description: Some(r.description.to_owned()),
                };
                async move { create_rule(ctx, &req).await }
            });
            let removes = extra.into_iter().map(|r| async move {
                let _permit = ctx.permits.acquire().await.ok();
                net.delete_security_group_rule(&r.id).await
            });
            for r in join_all(adds)
                .await
                .into_iter()
                .chain(join_all(removes).await)
            {
                r?;
            }
            Ok(simple(group_id))
        }
        Desired::Members {
            lb: lb_id, pool, ..
        } => {
            let lb_out = dep(ctx, lb_id)?;
            let pool_id = dep(ctx, pool)?.id;
            let members = lb::members(ctx, node)?;
            let lbapi = ctx.session.load_balancer();
            lb_step(ctx, node, lb_id, &lb_out.id, || async {
                let _permit = ctx.permits.acquire().await.ok();
                lbapi.replace_members(&pool_id, &members).await?;
                Ok(simple(pool_id.clone()))
            })
            .await
        }
        Desired::Listener {
            lb: lb_id,
            allowed_cidrs,
            ..
        } => {
            let Some(have) = have else {
                return Err(missing(node));
            };
            let lb_out = dep(ctx, lb_id)?;
            let req = ListenerUpdate {
                allowed_cidrs: Some(lb::allowed(ctx, allowed_cidrs)?),
                ..ListenerUpdate::default()
            };
            let lbapi = ctx.session.load_balancer();
            lb_step(ctx, node, lb_id, &lb_out.id, || async {
                lbapi.update_listener(&have.id, &req).await?;
                Ok(simple(have.id.clone()))
            })
            .await
        }
        Desired::Port {
            security_groups,
            address_pairs,
            ..
        } => {
            let Some(have) = have else {
                return Err(missing(node));
            };
            let mut sgs = security_groups
                .iter()
                .map(|g| dep(ctx, g).map(|o| o.id))
                .collect::<R<Vec<_>>>()?;
            // Neutron replaces the whole list: keep the groups others put there (the CCM's).
            for g in &have.facts.foreign_security_groups {
                if !sgs.contains(g) {
                    sgs.push(g.clone());
                }
            }
            let req = PortUpdate {
                allowed_address_pairs: Some(address_pairs.iter().map(AddressPair::ip).collect()),
                security_groups: Some(sgs),
                ..PortUpdate::default()
            };
            net.update_port(&have.id, &req).await?;
            Ok(output_of(have))
        }
        Desired::Subnet { dns_servers, .. } => {
            let Some(have) = have else {
                return Err(missing(node));
            };
            net.update_subnet_dns(&have.id, dns_servers).await?;
            Ok(output_of(have))
        }
        Desired::Server(_) => {
            let Some(have) = have else {
                return Err(missing(node));
            };
            record_server(ctx, node, have).await?;
            Ok(output_of(have))
        }
        Desired::FloatingIpAssociation { fip, target } => {
            let fip = dep(ctx, fip)?;
            let port = match target {
                AssocTarget::Port(p) => dep(ctx, p)?.id,
                AssocTarget::LoadBalancerVip(lb) => {
                    dep(ctx, lb)?.port_id.ok_or_else(|| CloudError::Invalid {
                        what: format!("load balancer {lb}"),
                        detail: "has no VIP port".into(),
                    })?
                }
            };
            // A floating IP created on its port (this run, or seen so) needs nothing more.
            let now = have
                .and_then(|h| h.facts.port_id.as_deref())
                .or(fip.port_id.as_deref());
            if now != Some(port.as_str()) {
                net.associate_floating_ip(&fip.id, &port, None).await?;
            }
            Ok(fip)
        }
        _ => have.map(output_of).ok_or_else(|| missing(node)),
    }
}

/// A port kos names: created, or found by its name when the create's answer was lost.
/// What a port node asks Neutron for.
fn port_request(ctx: &Ctx, node: &Node) -> R<PortCreate> {
    match &node.spec {
        Desired::Port {
            network,
            subnet,
            security_groups,
            address_pairs,
        } => {
            let sgs = security_groups
                .iter()
                .map(|g| dep(ctx, g).map(|o| o.id))
                .collect::<R<Vec<_>>>()?;
            Ok(PortCreate {
                fixed_ips: vec![FixedIpRequest::Subnet {
                    subnet_id: dep(ctx, subnet)?.id,
                }],
                allowed_address_pairs: address_pairs.iter().map(AddressPair::ip).collect(),
                security_groups: Some(sgs),
                tags: node.tags.clone(),
                ..PortCreate::new(dep(ctx, network)?.id, &node.name)
            })
        }
        // No security groups named: the network's default until Octavia puts its own on it, as on a
        // VIP port Octavia makes.
        Desired::VipPort { network, subnet } => Ok(PortCreate {
            fixed_ips: vec![FixedIpRequest::Subnet {
                subnet_id: dep(ctx, subnet)?.id,
            }],
            tags: node.tags.clone(),
            ..PortCreate::new(dep(ctx, network)?.id, &node.name)
        }),
        _ => Err(CloudError::Invalid {
            what: format!("{} {}", node.kind.as_str(), node.id),
            detail: "is not a port".into(),
        }),
    }
}

fn port_output(p: kos_cloud::model::network::Port) -> Output {
    Output {
        address: p.fixed_ips.first().map(|f| f.ip_address.clone()),
        id: p.id,
        port_id: None,
    }
}

async fn create_port(ctx: &Ctx, node: &Node, req: &PortCreate) -> R<Output> {
    let net = ctx.session.network();
    let find = || async {
        let f = PortFilter {
            name: Some(node.name.clone()),
            ..PortFilter::default()
        };
        pick_neutron(ctx, node, net.list_ports(&f).await?, port_output).await
    };
    create_or_find(
        ctx,
        node,
        || async { Ok(port_output(net.create_port(req).await?)) },
        find,
    )
    .await
}

/// Whether apply makes this node in a bulk port create ([`create_ports`]) with the other ports that
/// became ready with it.
pub(super) fn in_port_batch(node: &Node, action: &Action) -> bool {
    matches!(node.spec, Desired::Port { .. } | Desired::VipPort { .. }) && action.op == Op::Create
}

/// Which ports go into one bulk create: those of one network with the same security groups (a
/// machine pool's, the control planes', the VIP's), so the load balancer's members and VIP are not
/// held up behind a large pool of workers.
pub(super) fn port_batch_key(node: &Node) -> String {
    match &node.spec {
        Desired::Port {
            network,
            security_groups,
            ..
        } => format!("{network}/{}", security_groups.join(",")),
        Desired::VipPort { network, .. } => format!("{network}/vip"),
        _ => node.id.clone(),
    }
}

/// Creates the ports of `nodes` with one bulk POST, their tags in it where the cloud keeps them
/// ([`Ctx::port_tags_on_create`]), else put on each right after. Each node's outcome, in order.
///
/// Idempotent as [`create_or_find`]: when the POST's outcome is unknown, the network's ports are
/// listed once and each node's port is looked up by name (adopted, and tagged if it is not); only the
/// ports not found are asked for again. A port made but not tagged is found and tagged the same way.
pub(super) async fn create_ports(ctx: &Ctx, nodes: &[Node]) -> Vec<Result<Output, String>> {
    const ATTEMPTS: u32 = 3;
    let net = ctx.session.network();
    let mut done: Vec<Option<Result<Output, String>>> = vec![None; nodes.len()];
    let mut asked: Vec<(usize, PortCreate)> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        match port_request(ctx, node) {
            Ok(r) => asked.push((i, r)),
            Err(e) => done[i] = Some(Err(e.to_string())),
        }
    }
    let tags_on_create = ctx.port_tags_on_create().await;
    let mut attempt = 1;
    while !asked.is_empty() {
        let reqs: Vec<PortCreate> = asked.iter().map(|(_, r)| r.clone()).collect();
        let made = {
            let _permit = ctx.permits.acquire().await.ok();
            net.create_ports(&reqs, tags_on_create).await
        };
        match made {
            Ok(ports) => {
                let mut untagged = Vec::new();
                for ((i, _), p) in asked.drain(..).zip(ports) {
                    match p {
                        Ok(p) => done[i] = Some(Ok(port_output(p))),
                        Err(e) if maybe_created(&e) => untagged.push((i, e)),
                        Err(e) => done[i] = Some(Err(e.to_string())),
                    }
                }
                if !untagged.is_empty() {
                    let network = reqs[0].network_id.clone();
                    let found =
                        find_ports(ctx, nodes, &network, untagged.iter().map(|(i, _)| *i)).await;
                    for ((i, e), f) in untagged.into_iter().zip(found) {
                        done[i] = Some(match f {
                            Ok(Some(o)) => Ok(o),
                            Ok(None) => Err(e.to_string()),
                            Err(f) => Err(f.to_string()),
                        });
                    }
                }
            }
            Err(e) if maybe_created(&e) => {
                tracing::warn!(
                    ports = asked.len(),
                    "bulk port create outcome unknown, looking them up: {e}"
                );
                let network = reqs[0].network_id.clone();
                let found = find_ports(ctx, nodes, &network, asked.iter().map(|(i, _)| *i)).await;
                let mut left = Vec::new();
                for ((i, r), f) in asked.drain(..).zip(found) {
                    match f {
                        Ok(Some(o)) => done[i] = Some(Ok(o)),
                        Ok(None) if attempt < ATTEMPTS => left.push((i, r)),
                        Ok(None) => done[i] = Some(Err(e.to_string())),
                        Err(f) => done[i] = Some(Err(f.to_string())),
                    }
                }
                asked = left;
                attempt += 1;
            }
            Err(e) => {
                for (i, _) in asked.drain(..) {
                    done[i] = Some(Err(e.to_string()));
                }
            }
        }
    }
    done.into_iter()
        .map(|d| d.unwrap_or_else(|| Err("its port was not created".into())))
        .collect()
}

/// The ports of `which` nodes on `network`, by name (one list call), each tagged if it is not.
async fn find_ports(
    ctx: &Ctx,
    nodes: &[Node],
    network: &str,
    which: impl Iterator<Item = usize>,
) -> Vec<R<Option<Output>>> {
    let which: Vec<usize> = which.collect();
    let f = PortFilter {
        network_id: Some(network.to_owned()),
        ..PortFilter::default()
    };
    let all = match ctx.session.network().list_ports(&f).await {
        Ok(all) => all,
        Err(e) => {
            let text = e.to_string();
            return which
                .iter()
                .map(|_| {
                    Err(CloudError::Failed {
                        what: "the network's ports".into(),
                        detail: text.clone(),
                    })
                })
                .collect();
        }
    };
    let mut out = Vec::with_capacity(which.len());
    for i in which {
        let node = &nodes[i];
        let named: Vec<_> = all
            .iter()
            .filter(|p| p.name == node.name)
            .cloned()
            .collect();
        out.push(pick_neutron(ctx, node, named, port_output).await);
    }
    out
}

/// Creates one security-group rule. A rule has no name or tags: one whose create answer was lost is
/// looked up by its content in its group, as Neutron identifies duplicates, and adopted if there;
/// otherwise it is created again (a few times at most). Neutron's 409 for a duplicate is "there".
async fn create_rule(ctx: &Ctx, req: &SecurityGroupRuleCreate) -> R<()> {
    // A cluster makes a score of rules: at a 5xx rate of one in five, three attempts each left one
    // run in ten stopped (cli_reliability's token churn); six leave about one in ten thousand.
    const ATTEMPTS: u32 = 6;
    let net = ctx.session.network();
    let mut attempt = 1;
    loop {
        let result = {
            let _permit = ctx.permits.acquire().await.ok();
            net.create_security_group_rule(req).await
        };
        match result {
            Ok(_) => return Ok(()),
            Err(e) if rule_exists(&e) => {
                let text = e.to_string();
                let id = existing_rule_id(&text).unwrap_or("?");
                tracing::debug!(group = %req.security_group_id, rule = %id, "the rule is already there");
                return Ok(());
            }
            Err(e) if maybe_created(&e) => {
                tracing::warn!(group = %req.security_group_id, "rule create outcome unknown, looking it up: {e}");
                let have = net
                    .list_security_group_rules(&req.security_group_id)
                    .await?;
                if let Some(r) = have.iter().find(|r| req.same_as(r)) {
                    tracing::info!(group = %req.security_group_id, rule = %r.id, "the rule was made: adopted");
                    return Ok(());
                }
                if attempt >= ATTEMPTS {
                    return Err(e);
                }
                // The service just failed: give it a moment, as the request path does between
                // retries of calls it may repeat.
                tokio::time::sleep(std::time::Duration::from_millis(100 * u64::from(attempt)))
                    .await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Neutron's 409 `SecurityGroupRuleExists` ("Security group rule already exists. Rule id is <id>."),
/// not any conflict.
fn rule_exists(e: &CloudError) -> bool {
    e.kind() == Some(ApiErrorKind::Conflict)
        && e.to_string().contains("Security group rule already exists")
}

/// The rule a `SecurityGroupRuleExists` message names.
fn existing_rule_id(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("Rule id is ")?;
    rest.split(|c: char| c.is_whitespace() || c == '.')
        .next()
        .filter(|id| !id.is_empty())
}

fn missing(node: &Node) -> CloudError {
    CloudError::Invalid {
        what: node.id.clone(),
        detail: "nothing observed to update".into(),
    }
}

/// One change to a load balancer's children: under the LB's lock, then wait for it to be ACTIVE again.
async fn lb_step<F, Fut>(
    ctx: &Ctx,
    node: &Node,
    lb_logical: &str,
    lb_id: &str,
    step: F,
) -> R<Output>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = R<Output>>,
{
    let _guard = match ctx.lb_locks.get(lb_logical) {
        Some(l) => Some(l.lock().await),
        None => None,
    };
    let out = step().await?;
    wait(
        ctx,
        node,
        WaitKind::LoadBalancer,
        lb_id,
        ctx.opts.deadlines.load_balancer,
    )
    .await?;
    Ok(out)
}

async fn wait(
    ctx: &Ctx,
    node: &Node,
    kind: WaitKind,
    id: &str,
    within: std::time::Duration,
) -> R<super::wait::Seen> {
    let what = format!("{} {} ({id})", node.kind.as_str(), node.name);
    emit(
        ctx.events.as_ref(),
        Event::Waiting {
            id: node.id.clone(),
            what: what.clone(),
        },
    );
    ctx.waiter
        .wait(kind, id, Target::Ready, within, &what)
        .await
}

async fn create_server(
    ctx: &Ctx,
    node: &Node,
    spec: &ServerSpec,
    user_data: Option<Vec<u8>>,
) -> R<Output> {
    let port = dep(ctx, &spec.port)?;
    let boot = match &spec.volume {
        Some(v) => Boot::Volume(BlockDevice::Volume {
            volume_id: dep(ctx, v)?.id,
            delete_on_termination: false,
        }),
        None => Boot::Image(spec.image_id.clone()),
    };
    let mut req = ServerCreate::new(&node.name, &spec.flavor_id, boot);
    req.nics = vec![Nic::Port(port.id.clone())];
    req.user_data = user_data;
    req.tags.clone_from(&node.tags);
    req.key_name = spec
        .keypair
        .as_ref()
        .map(|k| dep(ctx, k).map(|o| o.id))
        .transpose()?;
    req.server_group = spec
        .server_group
        .as_ref()
        .map(|g| dep(ctx, g).map(|o| o.id))
        .transpose()?;
    req.availability_zone.clone_from(&spec.availability_zone);
    // The node closes the metadata service once bootstrapped (its user_data holds secrets): later
    // boots' cloud-init and the CSI's instance lookup read the config drive instead.
    req.config_drive = true;
    let compute = ctx.session.compute();
    let find = || async {
        Ok(compute
            .list_servers(&own_tags(ctx, node))
            .await?
            .into_iter()
            .next()
            .map(|s| simple(s.id)))
    };
    let d = deleter(ctx);
    let res = |kind, id: &str, logical: &str| Resource {
        kind,
        logical_id: logical.to_owned(),
        id: id.to_owned(),
        name: String::new(),
        tagged: true,
        state: String::new(),
        failed: true,
        facts: crate::observe::Facts::default(),
    };
    let mut attempt = 1;
    // Whether an earlier boot of this server lost a placement race in this run.
    let mut raced = false;
    loop {
        let created = create_or_find(
            ctx,
            node,
            || async { Ok(simple(compute.create_server(&req).await?.id)) },
            find,
        )
        .await?;
        let booted = wait(
            ctx,
            node,
            WaitKind::Server,
            &created.id,
            ctx.opts.deadlines.server,
        )
        .await;
        match booted {
            Ok(_) => {
                return Ok(Output {
                    id: created.id,
                    address: port.address,
                    port_id: Some(port.id),
                });
            }
            Err(e)
                if attempt < BOOT_ATTEMPTS
                    && (lost_placement_race(&e) || (raced && no_valid_host(&e))) =>
            {
                // The port stays (Nova unbinds it); the server goes, then boots again once its peers
                // have landed and the scheduler sees where they are.
                let stale = !lost_placement_race(&e);
                raced = true;
                attempt += 1;
                let why = if stale {
                    "Nova's scheduler still counts the boot that lost a placement race"
                } else {
                    "Nova lost a placement race"
                };
                tracing::warn!(node = %node.id, attempt, "{why}, booting again: {e}");
                emit(
                    ctx.events.as_ref(),
                    Event::Waiting {
                        id: node.id.clone(),
                        what: format!("boot again: {why} (attempt {attempt} of {BOOT_ATTEMPTS})"),
                    },
                );
                d.delete_one(&res(Kind::Server, &created.id, &node.id))
                    .await?;
                let pause = if stale {
                    ctx.waiter.local_span(ctx.opts.scheduler_sync)
                } else {
                    race_backoff(ctx, node, attempt)
                };
                tokio::time::sleep(pause).await;
            }
            Err(e) => {
                if let CloudError::Failed { detail, .. } = &e {
                    emit(
                        ctx.events.as_ref(),
                        Event::BuildFailed {
                            id: node.id.clone(),
                            server: created.id.clone(),
                            fault: detail.clone(),
                        },
                    );
                }
                // The server failed: remove it and its port (unbound once the server is gone), so
                // nothing half-made is left and a re-run recreates both.
                if let Err(c) = d
                    .delete_one(&res(Kind::Server, &created.id, &node.id))
                    .await
                {
                    tracing::warn!(node = %node.id, "cleanup of the failed server: {c}");
                } else if let Err(c) = d.delete_one(&res(Kind::Port, &port.id, &spec.port)).await {
                    tracing::warn!(node = %node.id, "cleanup of the failed server's port: {c}");
                }
                return Err(e);
            }
        }
    }
}

/// Boots of one server, the first included, when Nova keeps losing placement races.
const BOOT_ATTEMPTS: u32 = 3;

/// Nova's fault when a boot's reschedules ran out, typically members of one anti-affinity group booted
/// at once and placed on the same host, then turned away by the compute host's late policy check
/// (seen on minicloud): booting again later succeeds. Nova says it two ways (nova/conductor/manager.py
/// `build_instances`): its alternates ran out ("Exhausted all hosts …"), or its attempts did
/// (`populate_retry`: "Exceeded max scheduling attempts N … Last exception: Anti-affinity instance
/// group policy was violated"). Attempts exhausted for another reason, or a plain "No valid host" (a
/// lack of room), fail the run at once, unless this server lost a race before ([`no_valid_host`]).
fn lost_placement_race(e: &CloudError) -> bool {
    if !matches!(e, CloudError::Failed { .. }) {
        return false;
    }
    let text = e.to_string();
    text.contains("Exhausted all hosts available for retrying build failures")
        || (text.contains("Exceeded max scheduling attempts")
            && text.contains("instance group policy was violated"))
}

/// Nova found no host for the server at all (nova/conductor/manager.py `NoValidHost`).
///
/// Right after a lost race this can be the race's aftermath: Nova's scheduler keeps its own view of
/// the instances each compute host holds, and a boot that lost a race can stay in the view of the host
/// it was turned away from after the server is deleted (the group's member list keeps deleted servers;
/// the host's cached instances are set right only by the compute host's next
/// `_sync_scheduler_instance_info`). On a cloud with as many hosts as the group has members (seen on
/// minicloud) the next boot into the group then finds no host until that sync has run
/// ([`super::ApplyOptions::scheduler_sync`]).
fn no_valid_host(e: &CloudError) -> bool {
    matches!(e, CloudError::Failed { .. }) && e.to_string().contains("No valid host was found")
}

/// A few poll intervals, growing with the attempt and spread by the node's id, so that boots that
/// raced once do not race again.
fn race_backoff(ctx: &Ctx, node: &Node, attempt: u32) -> std::time::Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.id.hash(&mut h);
    let spread = (h.finish() % 1000) as f64 / 1000.0;
    let base = ctx.waiter.local_interval() * attempt;
    base + base.mul_f64(spread)
}

/// The CCM's application credential: created with its secret kept for the caller; an unknown create
/// outcome is resolved by deleting what was made (its secret is lost with the answer) and creating again.
async fn create_app_credential(
    ctx: &Ctx,
    node: &Node,
    roles: &[String],
    lifetime_days: u32,
    access_rules: bool,
) -> R<Output> {
    let identity = ctx.session.identity();
    let mut req = crate::credential::request(
        &node.name,
        &ctx.cluster,
        roles,
        lifetime_days,
        chrono::Utc::now(),
    );
    if access_rules {
        req.access_rules = crate::access_rules::for_session(&ctx.session).await;
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        match identity.create_application_credential(&req).await {
            Ok(c) => {
                *ctx.ccm.lock().unwrap_or_else(|p| p.into_inner()) = Some(CcmCredential {
                    id: c.credential.id.clone(),
                    name: c.credential.name.clone(),
                    secret: Some(c.secret),
                });
                return Ok(simple(c.credential.id));
            }
            Err(e) if maybe_created(&e) && attempt < 3 => {
                for c in identity
                    .list_application_credentials(Some(&node.name))
                    .await?
                {
                    identity.delete_application_credential(&c.id).await?;
                }
            }
            Err(e) => return Err(crate::credential::refused_rules(e, &req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_races_are_told_from_other_build_failures() {
        let failed = |detail: &str| CloudError::Failed {
            what: "server kos-x-cp-1 (id)".into(),
            detail: format!("server kos-x-cp-1 went to ERROR: {detail}"),
        };
        // nova/scheduler/utils.py populate_retry, after nova/compute/manager.py's late check.
        assert!(lost_placement_race(&failed(
            "Exceeded maximum number of retries. Exceeded max scheduling attempts 3 for instance \
             id. Last exception: Anti-affinity instance group policy was violated"
        )));
        assert!(lost_placement_race(&failed(
            "Exceeded maximum number of retries. Exhausted all hosts available for retrying build \
             failures for instance id."
        )));
        assert!(!lost_placement_race(&failed(
            "Exceeded maximum number of retries. Exceeded max scheduling attempts 3 for instance \
             id. Last exception: Build of instance id aborted: disk full"
        )));
        assert!(!lost_placement_race(&failed(
            "No valid host was found. There are not enough hosts available."
        )));
    }

    #[test]
    fn neutrons_duplicate_rule_message_names_the_rule() {
        // neutron/extensions/securitygroup.py SecurityGroupRuleExists.
        let m = "Network security_group_rule.create: 409 Conflict: Security group rule already \
                 exists. Rule id is 5f1d0c2e-8a8e-4c41-9a57-0c1a5d3a7b11.";
        assert_eq!(
            existing_rule_id(m),
            Some("5f1d0c2e-8a8e-4c41-9a57-0c1a5d3a7b11")
        );
        assert_eq!(
            existing_rule_id("Security group rule already exists."),
            None
        );
    }
}
