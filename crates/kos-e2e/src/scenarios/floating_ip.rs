//! A floating IP: association is refused while no router connects the port's subnet to the external
//! network, accepted once it does; then disassociated and deleted.

use anyhow::{Result, ensure};
use kos_cloud::ApiErrorKind;
use kos_cloud::model::network::{FloatingIpCreate, FloatingIpFilter, PortCreate, RouterCreate};

use super::network_with_subnet;
use crate::{Ctx, Made};

pub async fn floating_ip(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let net = ctx.session.network();
        let run = &ctx.run;
        let ext = ctx.external_network().await?;
        let sub = network_with_subnet(ctx, made, "fipnet", "10.252.0.0/24").await?;
        let port = net
            .create_port(&PortCreate {
                tags: run.tags(),
                ..PortCreate::new(&sub.network_id, run.name("fip-port"))
            })
            .await?;
        made.push(Made::Port(port.id.clone()));

        let fip = net
            .create_floating_ip(&FloatingIpCreate {
                floating_network_id: ext.id.clone(),
                description: Some(run.name("fip")),
                tags: run.tags(),
                ..Default::default()
            })
            .await?;
        made.push(Made::FloatingIp(fip.id.clone()));
        ensure!(
            fip.port_id.is_none() && !fip.floating_ip_address.is_empty(),
            "new FIP: {fip:?}"
        );

        let refused = net.associate_floating_ip(&fip.id, &port.id, None).await;
        ensure!(
            refused.as_ref().err().and_then(|e| e.kind()) == Some(ApiErrorKind::NotFound),
            "association without a router interface should be 404: {refused:?}"
        );

        let router = net
            .create_router(&RouterCreate {
                tags: run.tags(),
                ..RouterCreate::with_gateway(run.name("fip-router"), &ext.id)
            })
            .await?;
        made.push(Made::Router(router.id.clone()));
        net.add_router_interface(&router.id, &sub.id).await?;
        made.push(Made::RouterInterface {
            router: router.id.clone(),
            subnet: sub.id.clone(),
        });

        let fip2 = net.associate_floating_ip(&fip.id, &port.id, None).await?;
        ensure!(
            fip2.port_id.as_deref() == Some(port.id.as_str()),
            "associated: {fip2:?}"
        );
        ensure!(
            fip2.router_id.as_deref() == Some(router.id.as_str()),
            "router: {fip2:?}"
        );
        let by_port = net
            .list_floating_ips(&FloatingIpFilter {
                port_id: Some(port.id.clone()),
                ..Default::default()
            })
            .await?;
        ensure!(by_port.len() == 1, "FIPs by port: {}", by_port.len());
        let by_tag = net
            .list_floating_ips(&FloatingIpFilter {
                tags: run.query(),
                ..Default::default()
            })
            .await?;
        ensure!(by_tag.len() == 1, "FIPs by tag: {}", by_tag.len());

        let fip3 = net.disassociate_floating_ip(&fip.id).await?;
        ensure!(
            fip3.port_id.is_none() && fip3.fixed_ip_address.is_none(),
            "disassociated: {fip3:?}"
        );
        net.delete_floating_ip(&fip.id).await?;
        ensure!(
            net.get_floating_ip(&fip.id).await?.is_none(),
            "FIP still there after delete"
        );
        Ok(())
    })
    .await
}
