//! examples/ha.yaml: three control planes in an anti-affinity group behind an Octavia load balancer
//! (listener with the allowed CIDRs, a pool of the three, a health monitor) with a floating IP on its
//! VIP, boot volumes, two pools with labels and taints, the cluster's own tags on everything; then a
//! no-op plan and re-up, and `kos down` leaves nothing.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, ensure};
use kos_cloud::model::block_storage::VolumeStatus;
use kos_cloud::model::compute::ServerGroupPolicy;
use kos_cloud::model::load_balancer::ProvisioningStatus;

use super::Cluster;
use crate::Ctx;
use crate::examples::{self, Fit};

const CONTROL_PLANES: [&str; 3] = ["cp-0", "cp-1", "cp-2"];

pub async fn cluster_ha(ctx: &Ctx) -> Result<()> {
    let _turn = ctx.cluster_turn().await?;
    ctx.guarded(async |made| {
        let fit = Fit::of(ctx).await?;
        let c = Cluster::new(ctx, made, "ha").await?;
        let spec = c.spec("ha.yaml", &examples::ha(&fit, &c.name)?)?;
        let census = c.up_from_zero(&spec).await.with_context(|| {
            if fit.boot_volumes {
                "the HA example with boot volumes made from the image (a cloud that cannot make \
                 them, like minicloud, needs KOS_E2E_BOOT_VOLUMES=0)"
            } else {
                "the HA example booting from its image"
            }
        })?;
        let servers = c
            .expect_servers(&["cp-0", "cp-1", "cp-2", "general-0", "batch-0"])
            .await?;
        for s in &servers {
            for t in ["team=platform", "env=prod"] {
                ensure!(
                    s.tags.iter().any(|x| x == t),
                    "server {} lacks the cluster's tag {t}: {:?}",
                    s.name,
                    s.tags
                );
            }
        }
        let id_of = |logical: &str| -> Result<&str> {
            servers
                .iter()
                .find(|s| s.name == c.object(logical))
                .map(|s| s.id.as_str())
                .with_context(|| format!("no server {logical}"))
        };
        let (comp, lbs, net) = (
            ctx.session.compute(),
            ctx.session.load_balancer(),
            ctx.session.network(),
        );

        // The control planes share an anti-affinity group.
        let group = census
            .named("server group", &c.object("sgroup-cp"))
            .context("no control-plane server group")?;
        let group = comp
            .get_server_group(&group.id)
            .await?
            .context("the server group vanished")?;
        ensure!(
            group.policy == ServerGroupPolicy::AntiAffinity,
            "control-plane group policy {:?}",
            group.policy
        );
        let members: BTreeSet<&str> = group.members.iter().map(String::as_str).collect();
        let cps: BTreeSet<&str> = CONTROL_PLANES
            .iter()
            .map(|id| id_of(id))
            .collect::<Result<_>>()?;
        ensure!(members == cps, "control-plane group members {members:?}");

        // The API: an active LB whose pool holds the three control planes, a listener open to the
        // allowed CIDRs only, and the floating IP on its VIP.
        let lb = census
            .named("load balancer", &c.object("api-lb"))
            .context("no API load balancer")?;
        let lb = lbs
            .get_load_balancer(&lb.id)
            .await?
            .context("the API LB vanished")?;
        ensure!(
            lb.provisioning_status == ProvisioningStatus::Active,
            "API LB {}",
            lb.provisioning_status
        );
        let listener = lbs
            .get_listener(&lb.listeners.first().context("LB without listener")?.id)
            .await?
            .context("the listener vanished")?;
        // The user's CIDRs, and the nodes: the node subnet (to the VIP) and the router's gateway
        // address (the router SNATs their hairpin to the floating IP).
        let router = c
            .ctx
            .session
            .network()
            .list_routers(&Default::default())
            .await?
            .into_iter()
            .find(|r| r.name == c.object("router"))
            .context("no router")?;
        let gateway = router
            .external_gateway_info
            .and_then(|g| g.external_fixed_ips.into_iter().next())
            .map(|f| format!("{}/32", f.ip_address))
            .context("router without gateway")?;
        let mut cidrs = listener.allowed_cidrs.clone();
        cidrs.sort();
        let mut want = vec![
            "198.51.100.7/32".to_owned(),
            "203.0.113.0/24".to_owned(),
            "10.20.0.0/22".to_owned(),
            gateway,
        ];
        want.sort();
        ensure!(
            cidrs == want,
            "listener allowed CIDRs {cidrs:?}, expected {want:?}"
        );
        let pool = lb.pools.first().context("LB without pool")?;
        let mut addresses: Vec<String> = lbs
            .list_members(&pool.id)
            .await?
            .into_iter()
            .map(|m| m.address)
            .collect();
        addresses.sort();
        let mut cp_addresses = Vec::new();
        for id in CONTROL_PLANES {
            let port = census
                .named("port", &c.object(&format!("port-{id}")))
                .with_context(|| format!("no port of {id}"))?;
            let port = net.get_port(&port.id).await?.context("port vanished")?;
            let ip = port.fixed_ips.first().context("port without address")?;
            cp_addresses.push(ip.ip_address.clone());
        }
        cp_addresses.sort();
        ensure!(
            addresses == cp_addresses,
            "API pool members {addresses:?}, control planes {cp_addresses:?}"
        );
        let fip = census
            .named("floating ip", &c.object("api-fip"))
            .context("no API floating IP")?;
        let fip = net
            .get_floating_ip(&fip.id)
            .await?
            .context("the floating IP vanished")?;
        ensure!(
            fip.port_id.is_some() && fip.port_id == lb.vip_port_id,
            "the API floating IP points at {:?}, the LB's VIP is {:?}",
            fip.port_id,
            lb.vip_port_id
        );
        // The VIP port is kos's, made before the load balancer, so the floating IP was created on it
        // and never free (on minicloud: real Octavia took the port as its VIP).
        let vip = census
            .named("port", &c.object("api-vip-port"))
            .context("no VIP port of kos's")?;
        ensure!(
            lb.vip_port_id.as_deref() == Some(vip.id.as_str()),
            "the LB's VIP is {:?}, kos's VIP port {}",
            lb.vip_port_id,
            vip.id
        );

        // Boot volumes: 50 GB per control plane, 100 GB for the general pool, none for the GPU pool,
        // each attached to its server (or none at all where the cloud cannot make one from an image).
        let bs = ctx.session.block_storage();
        let boot: &[(&str, u64)] = if fit.boot_volumes {
            &[("cp-0", 50), ("cp-1", 50), ("cp-2", 50), ("general-0", 100)]
        } else {
            &[]
        };
        for &(node, size) in boot {
            let v = census
                .named("volume", &c.object(&format!("vol-{node}")))
                .with_context(|| format!("no boot volume of {node}"))?;
            let v = bs.get_volume(&v.id).await?.context("volume vanished")?;
            let server = id_of(node)?;
            ensure!(
                v.size == size
                    && v.status == VolumeStatus::InUse
                    && v.attachments.iter().any(|a| a.server_id == server),
                "boot volume of {node}: {} GB, {}, attachments {:?}",
                v.size,
                v.status,
                v.attachments
            );
            if let Some(t) = fit.boot_volume_type()
                && node.starts_with("cp-")
            {
                ensure!(
                    v.volume_type.as_deref() == Some(t),
                    "boot volume of {node} has type {:?}, not {t}",
                    v.volume_type
                );
            }
        }
        let volumes = census.of_kind("volume").count();
        ensure!(
            volumes == boot.len(),
            "{volumes} volume(s), expected {} (the GPU pool boots from its image):\n{}",
            boot.len(),
            census.list()
        );

        c.up_again_changes_nothing(&spec, &census).await?;
        c.down().await
    })
    .await
}
