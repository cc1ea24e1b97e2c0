//! kos-ccm's node controllers' cloud side, without Kubernetes: a node's server found by name and by
//! providerID, its addresses, instance type and providerID; the server shut off (the lifecycle's
//! shutdown taint) and gone (the node would be deleted). On the CCM's credential, as kos-ccm runs.
//! (Its route controller does not run in a kos cluster: kos's cloud.conf has no `[Route]`.)

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_ccm::config::Networking;
use kos_ccm::node::{Instances, Lookup, ProviderId};
use kos_cloud::model::compute::{Boot, Nic, Server, ServerCreate, ServerStatus};

use super::network_with_subnet;
use crate::{Ctx, Made};

pub async fn ccm_nodes(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let compute = ctx.session.compute();
        let sub = network_with_subnet(ctx, made, "nodenet", "10.249.0.0/24").await?;
        let (flavor, image) = (node_flavor(ctx).await?, ctx.image().await?);
        let name = ctx.run.name("node");
        let mut req = ServerCreate::new(&name, &flavor.0, Boot::Image(image.id.clone()));
        req.nics = vec![Nic::Network {
            id: sub.network_id.clone(),
            fixed_ip: None,
        }];
        req.tags = ctx.run.tags();
        let server = compute.create_server(&req).await?;
        made.push(Made::Server(server.id.clone()));
        compute
            .wait_for_server_active(&server.id, ctx.deadline())
            .await?;

        let session = super::identity::ccm_session(ctx, made).await?;
        let instances = Instances::new(
            session.clone(),
            Networking::default(),
            ctx.profile.region_name.clone(),
            false,
        );

        // Initialisation: the node has no providerID yet, its server is found by name.
        let mut node = node(&name, None);
        let by_name = found(instances.lookup(&node).await?, &server.id)?;
        let meta = instances.metadata(&name, &by_name).await?;
        ensure!(
            meta.provider_id == ProviderId::new(&server.id, None),
            "providerID {:?}",
            meta.provider_id
        );
        ensure!(
            meta.instance_type == flavor.1,
            "instance type {:?}, want {:?}",
            meta.instance_type,
            flavor.1
        );
        let ip = meta
            .addresses
            .iter()
            .map(kos_ccm::node::Address::to_node_address)
            .find(|a| a.type_ == "InternalIP")
            .with_context(|| format!("no InternalIP in {:?}", meta.addresses))?
            .address;
        node = self::node(&name, Some((&meta.provider_id.to_string(), &ip)));

        // Lifecycle: by providerID, the server shut off, then deleted.
        compute.stop_server(&server.id).await?;
        ctx.poll("the server to be SHUTOFF", || async {
            let s = found(instances.lookup(&node).await?, &server.id)?;
            Ok((s.status == ServerStatus::Shutoff).then_some(()))
        })
        .await?;
        compute.delete_server(&server.id).await?;
        ctx.poll("the server to go", || async {
            Ok(match instances.lookup(&node).await? {
                Lookup::Gone { server_id } if server_id == server.id => Some(()),
                Lookup::Gone { server_id } => bail!("gone: {server_id}"),
                _ => None,
            })
        })
        .await?;
        Ok(())
    })
    .await
}

/// The flavor of the node's server, as (id, the instance type kos-ccm should label it with). On
/// kos-sim a flavor whose name is no label value, as clouds name them ("General Purpose 4GB"):
/// kos-ccm then looks the flavor up and labels with its id. Elsewhere the smallest.
async fn node_flavor(ctx: &Ctx) -> Result<(String, String)> {
    let Some(sim) = ctx.sim() else {
        let f = ctx.flavor().await?;
        return Ok((f.id, f.name));
    };
    let id = format!("{}-flavor", ctx.run.prefix);
    let mut cloud = sim.app().cloud();
    let small = cloud
        .nova
        .flavors
        .iter()
        .min_by_key(|f| (f.ram_mb, f.vcpus))
        .context("kos-sim has no flavor")?
        .clone();
    cloud.nova.flavors.push(kos_sim::nova::Flavor {
        id: id.clone(),
        name: "General Purpose (small)".into(),
        ..small
    });
    Ok((id.clone(), id))
}

fn found(l: Lookup, id: &str) -> Result<Server> {
    match l {
        Lookup::Found(s) if s.id == id => Ok(*s),
        other => bail!("looking up server {id}: {other:?}"),
    }
}

/// A Node named `name`, with (providerID, InternalIP) once initialised.
fn node(name: &str, init: Option<(&str, &str)>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: init.map(|(p, _)| p.to_owned()),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: init.map(|(_, ip)| {
                vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]
            }),
            ..Default::default()
        }),
    }
}
