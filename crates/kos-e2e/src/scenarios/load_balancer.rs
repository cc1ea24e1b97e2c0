//! A load balancer as kos builds the API LB: LB on a subnet (tags on the POST), a TCP listener, a
//! pool, a health monitor and a batch member replace, each waited for (every child call makes the LB
//! PENDING_UPDATE), then a cascade delete.

use anyhow::{Result, ensure};
use kos_cloud::model::load_balancer::{
    HealthMonitorCreate, LbAlgorithm, ListenerCreate, LoadBalancerCreate, LoadBalancerFilter,
    MemberSpec, MonitorType, PoolCreate, PoolParent, Protocol, ProvisioningStatus, Vip,
};

use super::network_with_subnet;
use crate::{Ctx, Made};

pub async fn load_balancer(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let lbs = ctx.session.load_balancer();
        let run = &ctx.run;
        let sub = network_with_subnet(ctx, made, "lbnet", "10.250.0.0/24").await?;

        let mut req = LoadBalancerCreate::new(run.name("lb"), Vip::Subnet(sub.id.clone()));
        req.tags = run.tags();
        let lb = lbs.create_load_balancer(&req).await?;
        made.push(Made::LoadBalancer(lb.id.clone()));
        ensure!(
            lb.provisioning_status == ProvisioningStatus::PendingCreate,
            "new LB: {}",
            lb.provisioning_status
        );
        let lb = lbs.wait_for_active(&lb.id, ctx.deadline()).await?;
        ensure!(
            lb.vip_address.is_some() && lb.tags == run.tags(),
            "active LB: {lb:?}"
        );

        let mut l = ListenerCreate::new(&lb.id, run.name("listener"), Protocol::Tcp, 6443);
        l.tags = run.tags();
        let listener = lbs.create_listener(&l).await?;
        lbs.wait_for_active(&lb.id, ctx.deadline()).await?;

        let mut p = PoolCreate::new(
            PoolParent::Listener(listener.id.clone()),
            run.name("pool"),
            Protocol::Tcp,
            LbAlgorithm::RoundRobin,
        );
        p.tags = run.tags();
        let pool = lbs.create_pool(&p).await?;
        lbs.wait_for_active(&lb.id, ctx.deadline()).await?;

        let mut hm = HealthMonitorCreate::new(&pool.id, MonitorType::Tcp, 5, 3, 3);
        hm.name = run.name("hm");
        let hm = lbs.create_health_monitor(&hm).await?;
        lbs.wait_for_active(&lb.id, ctx.deadline()).await?;

        let members: Vec<MemberSpec> = ["10.250.0.21", "10.250.0.22"]
            .into_iter()
            .map(|ip| MemberSpec {
                subnet_id: Some(sub.id.clone()),
                ..MemberSpec::new(ip, 6443)
            })
            .collect();
        lbs.replace_members(&pool.id, &members).await?;
        lbs.wait_for_active(&lb.id, ctx.deadline()).await?;
        let listed = lbs.list_members(&pool.id).await?;
        ensure!(listed.len() == 2, "members: {}", listed.len());
        ctx.poll("members to be ACTIVE", || async {
            let m = lbs.list_members(&pool.id).await?;
            Ok(m.iter()
                .all(|m| m.provisioning_status == ProvisioningStatus::Active)
                .then_some(()))
        })
        .await?;
        // Replacing with one member removes the other.
        lbs.replace_members(&pool.id, &members[..1]).await?;
        lbs.wait_for_active(&lb.id, ctx.deadline()).await?;
        ctx.poll("one member left", || async {
            Ok((lbs.list_members(&pool.id).await?.len() == 1).then_some(()))
        })
        .await?;

        let tree = lbs.status_tree(&lb.id).await?;
        ensure!(tree.listeners.len() == 1, "status tree: {tree:?}");
        ensure!(
            lbs.get_health_monitor(&hm.id).await?.is_some(),
            "monitor missing"
        );
        let by_tag = lbs
            .list_load_balancers(&LoadBalancerFilter {
                tags: run.query(),
                ..Default::default()
            })
            .await?;
        ensure!(by_tag.len() == 1, "LBs by tag: {}", by_tag.len());
        let listeners = lbs.list_listeners(&lb.id).await?;
        ensure!(listeners.len() == 1, "listeners: {}", listeners.len());

        lbs.delete_load_balancer(&lb.id, true).await?;
        lbs.wait_for_deleted(&lb.id, ctx.deadline()).await?;
        ensure!(
            lbs.get_pool(&pool.id).await?.is_none(),
            "pool survived the cascade delete"
        );
        Ok(())
    })
    .await
}
