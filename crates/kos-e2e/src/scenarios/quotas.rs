//! Quotas with usage, as kos's preflight reads them: Neutron details, Nova limits, Cinder quota sets,
//! Octavia quotas. A network made here shows up in the usage.

use anyhow::{Context as _, Result, ensure};

use super::network_with_subnet;
use crate::Ctx;

pub async fn quotas(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let s = &ctx.session;
        network_with_subnet(ctx, made, "quota", "10.254.0.0/24").await?;
        let nq = s.network().quotas().await?;
        for k in [
            "network",
            "subnet",
            "port",
            "router",
            "floatingip",
            "security_group",
            "security_group_rule",
        ] {
            ensure!(
                nq.contains_key(k),
                "neutron quota {k} missing: {:?}",
                nq.keys()
            );
        }
        // Other runs may create and delete networks meanwhile: only "at least ours" is certain.
        let n = nq.get("network").context("network quota")?;
        ensure!(n.used >= 1, "network usage {n:?} misses ours");

        let lim = s.compute().limits().await?;
        ensure!(
            lim.max_total_instances != 0 && lim.max_total_cores != 0,
            "nova limits: {lim:?}"
        );
        ensure!(
            lim.total_instances_used >= 0 && lim.total_cores_used >= 0,
            "nova usage: {lim:?}"
        );

        let vq = s.block_storage().quotas().await?;
        for k in ["volumes", "gigabytes", "snapshots"] {
            ensure!(
                vq.contains_key(k),
                "cinder quota {k} missing: {:?}",
                vq.keys()
            );
        }
        let lbq = s.load_balancer().quotas().await?;
        ensure!(
            lbq.loadbalancer.is_some() && lbq.listener.is_some(),
            "octavia quotas: {lbq:?}"
        );
        Ok(())
    })
    .await
}
