//! The real tier: every scenario against the cloud named by KOS_E2E_CLOUD (or OS_CLOUD), e.g.
//! minicloud via `scripts/e2e-minicloud`. Ignored by default, so a plain `cargo test` reports these as
//! ignored, never as passed; with `--ignored` and no cloud configured they fail, loudly.

use kos_e2e::{Target, scenarios};

macro_rules! on_cloud {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        #[ignore = "needs a real cloud: set KOS_E2E_CLOUD (see docs/testing.md)"]
        async fn $name() -> anyhow::Result<()> {
            let ctx = Target::real()?.connect().await?;
            eprintln!("{}: run {}", stringify!($name), ctx.run.prefix);
            scenarios::$name(&ctx).await
        }
    )*};
}

on_cloud!(
    cluster_minimal,
    cluster_ha,
    cluster_byo_network,
    cluster_gc,
    identity,
    credential_rotation,
    network,
    floating_ip,
    server_on_port,
    volume,
    csi_controller,
    load_balancer,
    ccm_load_balancer,
    quotas
);
