//! examples/minimal.yaml through its whole life: plan, up from zero, a no-op plan and a no-op re-up, the
//! worker pool scaled up (exactly the new server and its port appear) and down (exactly the newest
//! servers and their ports go, the oldest stays), a no-op plan after each, then `kos down` leaves nothing
//! and `kos gc` finds nothing.

use anyhow::{Context as _, Result, ensure};

use super::{Cluster, creates, deletes};
use crate::Ctx;
use crate::examples::{self, Fit};

/// Its own node range: the other scenarios' clusters may be on the project's routers meanwhile.
const CIDR: &str = "10.0.0.0/24";

pub async fn cluster_minimal(ctx: &Ctx) -> Result<()> {
    let _turn = ctx.cluster_turn().await?;
    ctx.guarded(async |made| {
        let fit = Fit::of(ctx).await?;
        let c = Cluster::new(ctx, made, "min").await?;
        let spec = |workers: u32| -> Result<_> {
            c.spec(
                &format!("minimal-{workers}.yaml"),
                &examples::minimal(&fit, &c.name, CIDR, workers)?,
            )
        };
        let two = spec(2)?;
        let first = c.up_from_zero(&two).await?;
        c.expect_servers(&["cp-0", "workers-0", "workers-1"])
            .await?;
        for (kind, id) in [
            ("network", "network"),
            ("subnet", "subnet"),
            ("router", "router"),
            ("security group", "sg-cp"),
            ("security group", "sg-node"),
            ("application credential", "ccm"),
        ] {
            ensure!(
                first.named(kind, &c.object(id)).is_some(),
                "no {kind} {}:\n{}",
                c.object(id),
                first.list()
            );
        }
        let fip = first
            .named("floating ip", &c.object("api-fip"))
            .context("no API floating IP")?;
        let fip = ctx
            .session
            .network()
            .get_floating_ip(&fip.id)
            .await?
            .context("the API floating IP vanished")?;
        let cp_port = first
            .named("port", &c.object("port-cp-0"))
            .context("no control-plane port")?;
        ensure!(
            fip.port_id.as_deref() == Some(cp_port.id.as_str()),
            "the API floating IP points at {:?}, not the control plane's port",
            fip.port_id
        );
        c.up_again_changes_nothing(&two, &first).await?;

        // Scale up: exactly the new worker and its port.
        let three = spec(3)?;
        c.up(&three, &creates(&["workers-2", "port-workers-2"]))
            .await?;
        let bigger = c.census().await?;
        c.changed_by(
            &first,
            &bigger,
            &[("server", "workers-2"), ("port", "port-workers-2")],
            &[],
        )?;
        let servers = c
            .expect_servers(&["cp-0", "workers-0", "workers-1", "workers-2"])
            .await?;
        let new = servers
            .iter()
            .find(|s| s.name == c.object("workers-2"))
            .context("no workers-2")?;
        let port = bigger
            .named("port", &c.object("port-workers-2"))
            .context("no port-workers-2")?;
        let port = ctx
            .poll("the new worker's port to be bound", || async {
                let p = ctx.session.network().get_port(&port.id).await?;
                Ok(p.filter(|p| p.device_id == new.id))
            })
            .await?;
        ensure!(
            port.device_owner.starts_with("compute:"),
            "port-workers-2 owner {:?}",
            port.device_owner
        );

        // Scale down: the newest go with their ports, the oldest stays.
        let one = spec(1)?;
        c.up(
            &one,
            &deletes(&["workers-1", "workers-2", "port-workers-1", "port-workers-2"]),
        )
        .await?;
        let smaller = c.census().await?;
        c.changed_by(
            &bigger,
            &smaller,
            &[],
            &[
                ("server", "workers-1"),
                ("server", "workers-2"),
                ("port", "port-workers-1"),
                ("port", "port-workers-2"),
            ],
        )?;
        c.expect_servers(&["cp-0", "workers-0"]).await?;

        c.down().await
    })
    .await
}
