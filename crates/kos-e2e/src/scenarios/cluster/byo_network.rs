//! examples/byo-network.yaml on a network, subnet and router the scenario made first (as a user would):
//! kos creates no network, subnet, router or router interface, puts its ports and the private API load
//! balancer's VIP on the user's subnet, allocates no floating IP; a no-op plan and re-up; and `kos down`
//! removes all of kos's objects but leaves the user's network, subnet, router and interface as they were.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, ensure};
use kos_cloud::model::network::{NetworkCreate, PortFilter, RouterCreate, SubnetCreate};

use super::Cluster;
use crate::examples::{self, Byo, Fit};
use crate::{Ctx, Made};

/// The user's subnet: apart from the other scenarios' node ranges and the example's pod and service
/// ranges (10.128.0.0/16, 10.129.0.0/20).
const CIDR: &str = "10.30.0.0/24";

pub async fn cluster_byo_network(ctx: &Ctx) -> Result<()> {
    let _turn = ctx.cluster_turn().await?;
    ctx.guarded(async |made| {
        let fit = Fit::of(ctx).await?;
        let (net, run) = (ctx.session.network(), &ctx.run);

        // The user's network: the run's names and tag, no kos tag, no kos name.
        let network = net
            .create_network(&NetworkCreate {
                name: run.name("corp-net"),
                tags: run.tags(),
                ..Default::default()
            })
            .await?;
        made.push(Made::Network(network.id.clone()));
        let subnet = net
            .create_subnet(&SubnetCreate {
                tags: run.tags(),
                ..SubnetCreate::new(&network.id, run.name("corp-subnet-a"), CIDR)
            })
            .await?;
        made.push(Made::Subnet(subnet.id.clone()));
        let ext = ctx.external_network().await?;
        let router = net
            .create_router(&RouterCreate {
                tags: run.tags(),
                ..RouterCreate::with_gateway(run.name("corp-router"), ext.id)
            })
            .await?;
        made.push(Made::Router(router.id.clone()));
        let iface = net.add_router_interface(&router.id, &subnet.id).await?;
        made.push(Made::RouterInterface {
            router: router.id.clone(),
            subnet: subnet.id.clone(),
        });
        let on_network = PortFilter {
            network_id: Some(network.id.clone()),
            ..PortFilter::default()
        };
        let users_ports: BTreeSet<String> = net
            .list_ports(&on_network)
            .await?
            .into_iter()
            .map(|p| p.id)
            .collect();

        let c = Cluster::new(ctx, made, "byo").await?;
        let byo = Byo {
            network: network.name.clone(),
            subnet: subnet.name.clone(),
            router: router.name.clone(),
        };
        let spec = c.spec(
            "byo-network.yaml",
            &examples::byo_network(&fit, &c.name, &byo)?,
        )?;
        let census = c.up_from_zero(&spec).await?;
        c.expect_servers(&["cp-0", "cp-1", "cp-2", "workers-0"])
            .await?;
        for kind in ["network", "subnet", "router", "floating ip"] {
            ensure!(
                census.of_kind(kind).next().is_none(),
                "kos made a {kind} on a bring-your-own network:\n{}",
                census.list()
            );
        }
        let ports: Vec<_> = census.of_kind("port").collect();
        ensure!(ports.len() == 4, "one port per node:\n{}", census.list());
        for p in ports {
            let port = net.get_port(&p.id).await?.context("port vanished")?;
            ensure!(
                port.network_id == network.id
                    && port.fixed_ips.iter().all(|f| f.subnet_id == subnet.id),
                "port {} is not on the user's subnet",
                p.name
            );
        }
        let lb = census
            .named("load balancer", &c.object("api-lb"))
            .context("no API load balancer")?;
        let lb = ctx
            .session
            .load_balancer()
            .get_load_balancer(&lb.id)
            .await?
            .context("the API LB vanished")?;
        ensure!(
            lb.vip_subnet_id.as_deref() == Some(subnet.id.as_str()),
            "the private API's VIP is on {:?}",
            lb.vip_subnet_id
        );

        c.up_again_changes_nothing(&spec, &census).await?;
        c.down().await?;

        // The user's objects stay, and kos left no port of its own on the network.
        ensure!(
            net.get_network(&network.id).await?.is_some()
                && net.get_subnet(&subnet.id).await?.is_some()
                && net.get_router(&router.id).await?.is_some(),
            "kos down removed the user's network, subnet or router"
        );
        let now = net.list_ports(&on_network).await?;
        ensure!(
            now.iter().any(|p| p.id == iface.port_id),
            "kos down removed the user's router interface"
        );
        // A real cloud's DHCP agent may add its port at any time; anything else new is a leftover.
        let new: Vec<String> = now
            .iter()
            .filter(|p| !users_ports.contains(&p.id) && p.device_owner != "network:dhcp")
            .map(|p| format!("{} {} ({})", p.id, p.name, p.device_owner))
            .collect();
        ensure!(
            new.is_empty(),
            "ports left on the user's network after kos down: {new:?}"
        );
        Ok(())
    })
    .await
}
