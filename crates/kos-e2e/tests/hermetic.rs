//! The hermetic tier: every scenario against a fresh in-process kos-sim. Always runs, in seconds.

use kos_e2e::fidelity::{self, diff};
use kos_e2e::{Target, scenarios};
use kos_sim::SimConfig;

macro_rules! on_sim {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() -> anyhow::Result<()> {
            let ctx = Target::sim(SimConfig::fast()).connect().await?;
            scenarios::$name(&ctx).await
        }
    )*};
}

on_sim!(
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

/// The fidelity sequence runs cleanly on kos-sim, and two runs agree with each other: the recording
/// is deterministic, so any difference against a real cloud is about the cloud, not the recorder.
#[tokio::test]
async fn fidelity_sequence_is_deterministic_on_kos_sim() -> anyhow::Result<()> {
    let (a, b) = (
        Target::sim(fidelity::sim_config()).connect().await?,
        Target::sim(fidelity::sim_config()).connect().await?,
    );
    let (ra, rb) = tokio::join!(
        fidelity::record(&a, "kos-sim a"),
        fidelity::record(&b, "kos-sim b")
    );
    let (ra, rb) = (ra?, rb?);
    assert!(
        ra.steps.len() > 60,
        "only {} steps recorded",
        ra.steps.len()
    );
    let d = diff(&ra, &rb);
    assert!(d.is_empty(), "kos-sim disagrees with itself: {d:#?}");
    // The list of accepted differences parses.
    fidelity::Known::load(&fidelity::known_differences_file())?;
    Ok(())
}
