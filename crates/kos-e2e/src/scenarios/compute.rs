//! A keypair, an anti-affinity server group and a server booted on a pre-made port: the server goes
//! ACTIVE, the port is bound to it (and reported up), and after the delete the port is free again.

use anyhow::{Result, ensure};
use kos_cloud::model::compute::{
    Boot, KeypairCreate, Nic, ServerCreate, ServerGroupCreate, ServerGroupPolicy,
};
use kos_cloud::model::network::PortCreate;

use super::network_with_subnet;
use crate::{Ctx, Made};

/// A throwaway public key (its private half was never kept): Nova validates the format.
pub(crate) const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKtXHLpFTf0tpT14SSiVDIpz0my7SfpWMZ6FenhO3wJ1 kos-e2e";

pub async fn server_on_port(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let (comp, net) = (ctx.session.compute(), ctx.session.network());
        let run = &ctx.run;
        let (flavor, image) = (ctx.flavor().await?, ctx.image().await?);

        let kp = comp
            .create_keypair(&KeypairCreate::ssh(run.name("key"), PUBLIC_KEY))
            .await?;
        made.push(Made::Keypair(kp.name.clone()));
        ensure!(!kp.fingerprint.is_empty(), "keypair without fingerprint");
        let group = comp
            .create_server_group(&ServerGroupCreate::new(
                run.name("group"),
                ServerGroupPolicy::AntiAffinity,
            ))
            .await?;
        made.push(Made::ServerGroup(group.id.clone()));

        let sub = network_with_subnet(ctx, made, "vmnet", "10.253.0.0/24").await?;
        let port = net
            .create_port(&PortCreate {
                tags: run.tags(),
                ..PortCreate::new(&sub.network_id, run.name("vm-port"))
            })
            .await?;
        made.push(Made::Port(port.id.clone()));

        let mut req = ServerCreate::new(run.name("vm"), &flavor.id, Boot::Image(image.id.clone()));
        req.nics = vec![Nic::Port(port.id.clone())];
        req.key_name = Some(kp.name.clone());
        req.server_group = Some(group.id.clone());
        req.tags = run.tags();
        req.metadata = [("kos-e2e".to_owned(), "server".to_owned())].into();
        req.user_data = Some(b"#cloud-config\n{}\n".to_vec());
        let created = comp.create_server(&req).await?;
        made.push(Made::Server(created.id.clone()));

        let server = comp
            .wait_for_server_active(&created.id, ctx.deadline())
            .await?;
        ensure!(
            server.key_name.as_deref() == Some(kp.name.as_str()),
            "key: {:?}",
            server.key_name
        );
        ensure!(server.tags == run.tags(), "server tags: {:?}", server.tags);
        ensure!(
            server.fixed_ips().count() == 1,
            "addresses: {:?}",
            server.addresses
        );
        let listed = comp.list_servers(&run.query()).await?;
        ensure!(
            listed.len() == 1 && listed[0].id == server.id,
            "servers by tag: {}",
            listed.len()
        );
        let group = comp
            .get_server_group(&group.id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("group vanished"))?;
        ensure!(
            group.members == [server.id.clone()],
            "group members: {:?}",
            group.members
        );

        // Bound to the server, then reported up by the (fake or real) agent.
        let bound = ctx
            .poll("port to be bound and ACTIVE", || async {
                let p = net
                    .get_port(&port.id)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("port vanished"))?;
                Ok((p.device_id == server.id && p.status == "ACTIVE").then_some(p))
            })
            .await?;
        ensure!(
            bound.device_owner.starts_with("compute:"),
            "device_owner {:?}",
            bound.device_owner
        );

        comp.delete_server(&server.id).await?;
        ctx.poll("server to go", || async {
            Ok(comp.get_server(&server.id).await?.is_none().then_some(()))
        })
        .await?;
        // Nova unbinds a port it did not create, and keeps it.
        let freed = ctx
            .poll("port to be unbound", || async {
                let p = net
                    .get_port(&port.id)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("port deleted with the server"))?;
                Ok(p.device_id.is_empty().then_some(p))
            })
            .await?;
        ensure!(
            freed.device_owner.is_empty(),
            "device_owner after delete: {:?}",
            freed.device_owner
        );
        Ok(())
    })
    .await
}
