//! What a scenario made, deleted in reverse order whatever the scenario's outcome. Every delete
//! tolerates "already gone" (scenarios delete things themselves as part of their checks) and retries
//! "in use" while the cloud finishes an earlier delete (a port a server held, an LB's VIP port).

use anyhow::{Context as _, Result, anyhow};
use kos_cloud::model::block_storage::VolumeStatus;
use kos_cloud::model::load_balancer::LoadBalancerFilter;
use kos_cloud::model::network::FloatingIpFilter;
use kos_cloud::{ApiErrorKind, CloudError};
use tokio::time::Instant;

use crate::{Ctx, WAIT};

/// One thing a scenario created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Made {
    Network(String),
    Subnet(String),
    Router(String),
    RouterInterface {
        router: String,
        subnet: String,
    },
    Port(String),
    SecurityGroup(String),
    FloatingIp(String),
    Server(String),
    Keypair(String),
    ServerGroup(String),
    Volume(String),
    VolumeAttachment {
        server: String,
        volume: String,
    },
    LoadBalancer(String),
    AppCredential(String),
    /// A cluster made with `kos up`: removed with `kos down`, then listed by its tag and names.
    Cluster(String),
    /// What a CCM of this cluster name makes (LBs `kube_service_<cluster>_…`, floating IPs described
    /// "… from cluster <cluster>"): deleted by name, then listed like a cluster's. Registered before
    /// the first reconcile, so a pass that fails after its create still leaves nothing.
    CcmCluster(String),
}

#[derive(Debug, Default)]
pub struct Cleanup {
    made: Vec<Made>,
}

impl Cleanup {
    pub fn push(&mut self, m: Made) {
        self.made.push(m);
    }

    /// The clusters registered, whose leftovers [`Ctx::guarded`] lists after the cleanup.
    pub fn clusters(&self) -> Vec<String> {
        self.made
            .iter()
            .filter_map(|m| match m {
                Made::Cluster(c) | Made::CcmCluster(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    /// Deletes everything, newest first; tries every item even after a failure.
    pub async fn run(self, ctx: &Ctx) -> Result<()> {
        let mut failed = Vec::new();
        for m in self.made.into_iter().rev() {
            if let Err(e) = delete(ctx, &m).await {
                failed.push(format!("{m:?}: {e:#}"));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("{}", failed.join("; ")))
        }
    }
}

/// Retries `f` while the cloud answers "in use" (409) or "busy" (400 on Cinder), until [`WAIT`].
async fn retrying<F, Fut>(ctx: &Ctx, mut f: F) -> Result<(), CloudError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), CloudError>>,
{
    let end = Instant::now() + WAIT;
    loop {
        match f().await {
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    Some(ApiErrorKind::Conflict | ApiErrorKind::BadRequest)
                ) && Instant::now() < end =>
            {
                tokio::time::sleep(ctx.every.max(std::time::Duration::from_millis(50))).await;
            }
            other => return other,
        }
    }
}

async fn delete(ctx: &Ctx, m: &Made) -> Result<()> {
    let s = &ctx.session;
    let (net, comp) = (s.network(), s.compute());
    match m {
        Made::Network(id) => retrying(ctx, || net.delete_network(id)).await?,
        Made::Subnet(id) => retrying(ctx, || net.delete_subnet(id)).await?,
        Made::Router(id) => retrying(ctx, || net.delete_router(id)).await?,
        Made::RouterInterface { router, subnet } => {
            retrying(ctx, || async {
                net.remove_router_interface(router, subnet).await.map(drop)
            })
            .await?
        }
        Made::Port(id) => retrying(ctx, || net.delete_port(id)).await?,
        Made::SecurityGroup(id) => retrying(ctx, || net.delete_security_group(id)).await?,
        Made::FloatingIp(id) => retrying(ctx, || net.delete_floating_ip(id)).await?,
        Made::Keypair(name) => comp.delete_keypair(name).await?,
        Made::ServerGroup(id) => comp.delete_server_group(id).await?,
        Made::AppCredential(id) => s.identity().delete_application_credential(id).await?,
        Made::Cluster(name) => {
            // What a user runs; it is idempotent and succeeds when nothing is left.
            ctx.kos().await?.down(name).await?;
        }
        Made::CcmCluster(cluster) => delete_ccm_objects(ctx, cluster).await?,
        Made::Server(id) => {
            comp.delete_server(id).await?;
            ctx.poll(&format!("server {id} to go"), || async {
                Ok(comp.get_server(id).await?.is_none().then_some(()))
            })
            .await?;
        }
        Made::VolumeAttachment { server, volume } => {
            // Gone with its server or volume (a teardown deletes both): nothing to detach.
            retrying(ctx, || comp.detach_volume(server, volume)).await?;
            let bs = s.block_storage();
            ctx.poll(&format!("volume {volume} to be detached"), || async {
                Ok(match bs.get_volume(volume).await? {
                    None => Some(()),
                    Some(v) => (v.status != VolumeStatus::InUse
                        && v.status != VolumeStatus::Detaching)
                        .then_some(()),
                })
            })
            .await?;
        }
        Made::Volume(id) => {
            let bs = s.block_storage();
            retrying(ctx, || bs.delete_volume(id)).await?;
            ctx.poll(&format!("volume {id} to go"), || async {
                Ok(bs.get_volume(id).await?.is_none().then_some(()))
            })
            .await?;
        }
        Made::LoadBalancer(id) => {
            let lb = s.load_balancer();
            // A PENDING_* LB refuses the delete (409): `retrying` waits that out.
            retrying(ctx, || lb.delete_load_balancer(id, true)).await?;
            lb.wait_for_deleted(id, ctx.deadline())
                .await
                .with_context(|| format!("load balancer {id} to go"))?;
        }
    }
    Ok(())
}

/// Deletes the CCM-made load balancers (cascade) and floating IPs of `cluster`, matched exactly as
/// [`crate::census`] lists them.
async fn delete_ccm_objects(ctx: &Ctx, cluster: &str) -> Result<()> {
    let s = &ctx.session;
    let (lbs, net) = (s.load_balancer(), s.network());
    let name = format!("kube_service_{cluster}_");
    let desc = format!("from cluster {cluster}");
    let mine = lbs
        .list_load_balancers(&LoadBalancerFilter::default())
        .await?
        .into_iter()
        .filter(|lb| lb.name.starts_with(&name));
    let fips = net
        .list_floating_ips(&FloatingIpFilter::default())
        .await?
        .into_iter()
        .filter(|f| f.description.trim_end().ends_with(&desc));
    for f in fips {
        retrying(ctx, || net.delete_floating_ip(&f.id)).await?;
    }
    for lb in mine {
        retrying(ctx, || lbs.delete_load_balancer(&lb.id, true)).await?;
        lbs.wait_for_deleted(&lb.id, ctx.deadline())
            .await
            .with_context(|| format!("load balancer {} to go", lb.name))?;
    }
    Ok(())
}
