//! The differential fidelity check: the same recorded call sequence against kos-sim and against the
//! real cloud (minicloud in CI); every difference must be listed with its reason in docs/fidelity.md.

use kos_e2e::Target;
use kos_e2e::fidelity::{self, Known, diff};

#[tokio::test]
#[ignore = "needs a real cloud: set KOS_E2E_CLOUD (see docs/testing.md)"]
async fn kos_sim_matches_the_real_cloud() -> anyhow::Result<()> {
    let known = Known::load(&fidelity::known_differences_file())?;
    let real = Target::real()?.connect().await?;
    let sim = Target::sim(fidelity::sim_config()).connect().await?;
    let name = real.profile.name.clone();
    let (s, r) = tokio::join!(
        fidelity::record(&sim, "kos-sim"),
        fidelity::record(&real, &name)
    );
    let (s, r) = (s?, r?);
    let report = known.judge(diff(&s, &r));
    println!(
        "{r}\n{} steps on kos-sim, {} on {name}\n{report}",
        s.steps.len(),
        r.steps.len()
    );
    anyhow::ensure!(
        report.passed(),
        "kos-sim differs from {name} in ways docs/fidelity.md does not list:\n{report}"
    );
    Ok(())
}
