//! `kos gc` as crates/kos-cluster/src/teardown.rs defines orphans, next to a live cluster:
//! - a live cluster (examples/minimal.yaml, one worker) with what its CCM and CSI would make: a load
//!   balancer `kube_service_<cluster>_default_web` on its subnet, a floating IP on that LB's VIP, and a
//!   CSI volume attached to its worker. None of it is an orphan; `kos down` removes it all.
//! - `og`: kos's own objects of a cluster whose servers and network are gone (a tagged security group,
//!   floating IP and boot volume, and its keypair, known by name only).
//! - `or`: what a CCM and CSI made for a cluster of which nothing kos-made is left (an LB on a network no
//!   server uses, a floating IP, an unattached volume).
//!
//! `kos gc` lists exactly the planted orphans (on kos-sim: and nothing else), `kos gc --delete --cluster`
//! removes one ghost's and leaves the other's listed, never touches the live cluster, and after
//! `kos down` gc finds nothing.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, ensure};
use kos_cloud::model::block_storage::{VolumeCreate, VolumeStatus};
use kos_cloud::model::compute::{KeypairCreate, VolumeAttach};
use kos_cloud::model::load_balancer::{LoadBalancerCreate, Vip};
use kos_cloud::model::network::{FloatingIpCreate, SecurityGroupCreate};

use super::Cluster;
use crate::census::{CSI_CLUSTER_KEY, TAG_CLUSTER};
use crate::cli::Kos;
use crate::examples::{self, Fit};
use crate::scenarios::{PUBLIC_KEY, network_with_subnet};
use crate::{Cleanup, Ctx, Made, RUN_KEY};

/// Apart from the other scenarios' node ranges: they may be on the project's routers meanwhile.
const CIDR: &str = "10.0.1.0/24";

pub async fn cluster_gc(ctx: &Ctx) -> Result<()> {
    let _turn = ctx.cluster_turn().await?;
    ctx.guarded(async |made| {
        let fit = Fit::of(ctx).await?;
        let kos = ctx.kos().await?;
        let c = Cluster::new(ctx, made, "gc").await?;
        let spec = c.spec("minimal.yaml", &examples::minimal(&fit, &c.name, CIDR, 1)?)?;
        c.up_from_zero(&spec).await?;
        let servers = c.expect_servers(&["cp-0", "workers-0"]).await?;
        let worker = servers
            .iter()
            .find(|s| s.name == c.object("workers-0"))
            .context("no worker")?;
        let census = c.census().await?;
        let subnet = &census
            .named("subnet", &c.object("subnet"))
            .context("no subnet")?
            .id;

        // The live cluster's run-time objects.
        let live = run_time(ctx, made, &c.name, subnet, true).await?;
        let bs = ctx.session.block_storage();
        ctx.session
            .compute()
            .attach_volume(&worker.id, &VolumeAttach::new(&live.volume))
            .await?;
        made.push(Made::VolumeAttachment {
            server: worker.id.clone(),
            volume: live.volume.clone(),
        });
        ctx.poll("the live cluster's CSI volume to be attached", || async {
            let v = bs.get_volume(&live.volume).await?;
            Ok(v.filter(|v| v.status == VolumeStatus::InUse))
        })
        .await?;
        let live_census = c.census().await?;

        // `og`: kos's tagged objects of a cluster with neither servers nor a network.
        let og = ctx.run.cluster("og");
        made.push(Made::Cluster(og.clone()));
        let mut planted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        planted.insert(og.clone(), kos_leftovers(ctx, made, &og).await?);

        // `or`: CCM/CSI objects of a cluster of which nothing kos-made is left, on a network no server uses.
        let or = ctx.run.cluster("or");
        made.push(Made::Cluster(or.clone()));
        let lbnet = network_with_subnet(ctx, made, "gc-lbnet", "10.31.0.0/24").await?;
        let or_objects = run_time(ctx, made, &or, &lbnet.id, false).await?;
        planted.insert(or.clone(), or_objects.names);

        // Listing changes nothing; it shows the planted orphans, and nothing of the live cluster.
        listed_exactly(kos, ctx.is_sim(), &planted, &c.name).await?;
        c.unchanged_since(&live_census)
            .await
            .context("`kos gc` touched the live cluster")?;

        // `--cluster` deletes one cluster's orphans and leaves the other's listed; then the other's.
        for ghost in [&og, &or] {
            let (ran, _) = kos.gc(&["--delete", "--cluster", ghost]).await?;
            let n = planted.remove(ghost).context("planted")?.len();
            ensure!(
                ran.stdout.contains(&format!("Deleted {n} orphan(s).")),
                "`{}`\n{}",
                ran.line,
                ran.output()
            );
            let gone = ctx.cluster_leftovers(std::slice::from_ref(ghost)).await?;
            ensure!(gone.is_empty(), "after `{}`: {gone:#?}", ran.line);
            listed_exactly(kos, ctx.is_sim(), &planted, &c.name).await?;
        }
        c.unchanged_since(&live_census)
            .await
            .context("`kos gc --delete` touched the live cluster")?;
        let (ran, orphans) = kos.gc(&[]).await?;
        ensure!(
            !orphans.iter().any(|(cl, _)| *cl == og || *cl == or),
            "`kos gc` after deleting\n{}",
            ran.output()
        );

        // Down removes the live cluster's run-time objects with it (`down` lists the census by the CCM's
        // and CSI's conventions too).
        c.down().await
    })
    .await
}

/// `kos gc` lists each of `planted`'s names under its cluster and nothing more of them, nothing of the
/// `live` cluster, and (on a cloud of this scenario alone) no other cluster.
async fn listed_exactly(
    kos: &Kos,
    alone: bool,
    planted: &BTreeMap<String, BTreeSet<String>>,
    live: &str,
) -> Result<()> {
    let (ran, orphans) = kos.gc(&[]).await?;
    let mut listed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (cluster, line) in orphans {
        listed.entry(cluster).or_default().push(line);
    }
    for (cluster, names) in planted {
        let lines = listed.get(cluster).map(Vec::as_slice).unwrap_or_default();
        for n in names {
            ensure!(
                lines.iter().any(|l| l.contains(n.as_str())),
                "`kos gc` does not list {cluster}'s {n}\n{}",
                ran.output()
            );
        }
        ensure!(
            lines.len() == names.len(),
            "`kos gc` lists {} object(s) of {cluster}, {} were planted\n{}",
            lines.len(),
            names.len(),
            ran.output()
        );
    }
    ensure!(
        !listed.contains_key(live),
        "`kos gc` lists the live cluster\n{}",
        ran.output()
    );
    if alone {
        ensure!(
            listed.keys().eq(planted.keys()),
            "`kos gc` on a cloud of this scenario alone\n{}",
            ran.output()
        );
    }
    Ok(())
}

/// What a CCM and CSI make for `cluster`.
struct RunTime {
    volume: String,
    /// The names `kos gc` shows (an LB's name, a floating IP's description, a volume's name).
    names: BTreeSet<String>,
}

/// An LB `kube_service_<cluster>_default_web` on `subnet` (waited for ACTIVE), a floating IP described
/// as the CCM does (on the LB's VIP when `associate`), and a CSI volume; all registered for cleanup.
async fn run_time(
    ctx: &Ctx,
    made: &mut Cleanup,
    cluster: &str,
    subnet: &str,
    associate: bool,
) -> Result<RunTime> {
    let (lbs, net, bs) = (
        ctx.session.load_balancer(),
        ctx.session.network(),
        ctx.session.block_storage(),
    );
    let mut req = LoadBalancerCreate::new(
        format!("kube_service_{cluster}_default_web"),
        Vip::Subnet(subnet.to_owned()),
    );
    req.description = Some(format!(
        "Kubernetes external service default/web from cluster {cluster}"
    ));
    let lb = lbs.create_load_balancer(&req).await?;
    made.push(Made::LoadBalancer(lb.id.clone()));
    let ext = ctx.external_network().await?;
    let description =
        format!("Floating IP for Kubernetes external service default/web from cluster {cluster}");
    let fip = net
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: ext.id,
            description: Some(description.clone()),
            ..FloatingIpCreate::default()
        })
        .await?;
    made.push(Made::FloatingIp(fip.id.clone()));
    let volume_name = ctx.run.name(&format!("pvc-{cluster}"));
    let vol = bs
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some(volume_name.clone()),
            metadata: BTreeMap::from([
                (CSI_CLUSTER_KEY.to_owned(), cluster.to_owned()),
                (RUN_KEY.to_owned(), ctx.run.prefix.clone()),
            ]),
            ..VolumeCreate::default()
        })
        .await?;
    made.push(Made::Volume(vol.id.clone()));
    let lb = lbs.wait_for_active(&lb.id, ctx.deadline()).await?;
    if associate {
        let vip = lb.vip_port_id.as_deref().context("LB without a VIP port")?;
        net.associate_floating_ip(&fip.id, vip, None).await?;
    }
    bs.wait_for_available(&vol.id, ctx.deadline()).await?;
    Ok(RunTime {
        volume: vol.id,
        names: BTreeSet::from([lb.name, description, volume_name]),
    })
}

/// What a cluster `cluster` of kos leaves when its servers and network were deleted behind its back: a
/// security group, a floating IP and a boot volume with kos's tags, and its keypair. Their names.
async fn kos_leftovers(ctx: &Ctx, made: &mut Cleanup, cluster: &str) -> Result<BTreeSet<String>> {
    let (net, bs) = (ctx.session.network(), ctx.session.block_storage());
    let tags = |id: &str| vec![format!("{TAG_CLUSTER}={cluster}"), format!("kos-id={id}")];
    let name = |id: &str| format!("kos-{cluster}-{id}");
    let sg = net
        .create_security_group(&SecurityGroupCreate {
            name: name("sg-node"),
            description: Some(format!("kos {cluster}: all nodes")),
            tags: tags("sg-node"),
        })
        .await?;
    made.push(Made::SecurityGroup(sg.id.clone()));
    let fip = net
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: ctx.external_network().await?.id,
            description: Some(name("api-fip")),
            tags: tags("api-fip"),
            ..FloatingIpCreate::default()
        })
        .await?;
    made.push(Made::FloatingIp(fip.id.clone()));
    let vol = bs
        .create_volume(&VolumeCreate {
            size: 1,
            name: Some(name("vol-cp-0")),
            metadata: BTreeMap::from([
                (TAG_CLUSTER.to_owned(), cluster.to_owned()),
                ("kos-id".to_owned(), "vol-cp-0".to_owned()),
                (RUN_KEY.to_owned(), ctx.run.prefix.clone()),
            ]),
            ..VolumeCreate::default()
        })
        .await?;
    made.push(Made::Volume(vol.id.clone()));
    let kp = ctx
        .session
        .compute()
        .create_keypair(&KeypairCreate::ssh(name("keypair"), PUBLIC_KEY))
        .await?;
    made.push(Made::Keypair(kp.name.clone()));
    bs.wait_for_available(&vol.id, ctx.deadline()).await?;
    Ok(BTreeSet::from([
        sg.name,
        name("api-fip"),
        name("vol-cp-0"),
        kp.name,
    ]))
}
