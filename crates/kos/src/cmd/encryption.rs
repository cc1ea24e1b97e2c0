//! `kos rotate encryption-key` (a rotation started, then `kos up`'s loop). The keys each turn
//! decides with and the Secrets' rewrite: kos-control's `encryption`; the steps and why none is
//! skipped: `kos_lifecycle::encryption`.

use super::Failure;
use kos_control::report::{Summarised, Summary};
use kos_control::store::{Record, Records as _, SecretStore as _};

/// `kos rotate encryption-key NAME -f SPEC`: a new key, then `kos up` carries the rotation
/// through (control planes replaced three times, every Secret rewritten). Run again after an
/// interruption, it continues the rotation under way instead of starting another.
pub async fn rotate(
    args: crate::cli::RotateEncryptionKeyArgs,
    verbose: u8,
) -> Result<super::Exit, Failure> {
    let json = matches!(args.up.output, crate::cli::Output::Json);
    let progress = crate::progress::Progress::new(json, verbose);
    let report = Summarised::new(&progress, Summary::new(Some(args.name.as_str())));
    let r = run(args, &report).await;
    let summary = report.summary();
    drop(report);
    progress.finish(summary, r)
}

async fn run(
    args: crate::cli::RotateEncryptionKeyArgs,
    report: &Summarised<'_>,
) -> Result<super::Exit, Failure> {
    let spec = super::cluster::load_spec(&args.up.spec.file)?;
    if spec.loaded.spec.name.value.as_str() != args.name.as_str() {
        return Err(Failure::input(miette::miette!(
            "{} is the spec of cluster {}, not {}",
            crate::term::printable(&spec.shown),
            spec.loaded.spec.name.value,
            args.name.as_str()
        )));
    }
    let cp = &spec.loaded.spec.control_plane;
    if cp.count.get() == 1 && !cp.surges(spec.loaded.spec.api_endpoint.kind.value) {
        return Err(Failure::input(miette::miette!(
            help = "a cluster made with `apiEndpoint.type: loadBalancer` can rotate its key (a \
                    successor joins before a control plane is replaced); a floating-IP endpoint is \
                    its one server's port, so no successor can join behind it",
            "cluster {}: its only control plane is behind a floating IP and cannot be replaced \
             without losing the cluster, and kos changes a control plane's keys only by replacing it",
            args.name.as_str()
        )));
    }
    // Add, make first, rewrite and drop: a run per step, and one to spare.
    super::cluster::up_runs(
        args.up,
        spec,
        |c, local| {
            let keys = local.keys().map_err(|e| Failure::store(&e))?;
            let Some(mut keys) = keys else {
                return Err(Failure::input(miette::miette!(
                    help = "run `kos up` first: it makes the cluster's first key",
                    "cluster {} has no encryption key on this machine ({})",
                    args.name.as_str(),
                    local.location(Record::EncryptionKeys)
                )));
            };
            let _ = c;
            if keys.phase == kos_lifecycle::encryption::Phase::Steady {
                keys.start_rotation(&mut rand::rng())
                    .map_err(|e| Failure::input(miette::miette!("{e}")))?;
                local.put_keys(&keys).map_err(|e| Failure::store(&e))?;
                // The rotation's first step, reported as every later one is.
                kos_control::report::Report::event(
                    report,
                    kos_control::report::Event::KeysStep {
                        cluster: args.name.as_str(),
                        shown: &keys.shown(),
                    },
                );
            } else {
                eprintln!(
                    "kos: {}: continuing the rotation under way: {}",
                    args.name.as_str(),
                    keys.shown()
                );
            }
            Ok(())
        },
        5,
        report,
    )
    .await
}
