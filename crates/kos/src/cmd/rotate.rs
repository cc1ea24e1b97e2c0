//! `kos rotate credential NAME`: kos-control's `rotate::rotate_now` with this machine's store (the
//! credential's secret in the cluster's data directory, `ccm-credential.json`, and
//! `ccm-credential-next.json` while a rotation runs, all 0600), and what `kos status` says of the
//! credential's expiry.

use std::time::Duration;

use kos_cluster::graph::Kind;
use kos_cluster::observe::Resource;
use kos_control::rotate::{self, RotateNowError, left, unix};
use kos_lifecycle::api::chain;
use kos_lifecycle::audience::Audience;

use super::cluster::with_cloud;
use super::{Exit, Failure};
use crate::cli::{Output, RotateCredentialArgs};
use crate::local::Local;
use crate::progress::Progress;
use kos_control::report::{Summarised, Summary};

pub async fn credential(args: RotateCredentialArgs, verbose: u8) -> Result<Exit, Failure> {
    let name = args.name.to_string();
    let json = matches!(args.output, Output::Json);
    let progress = Progress::new(json, verbose);
    let report = Summarised::new(&progress, Summary::new(Some(name.as_str())));
    let r = with_cloud(args.cloud.cloud.as_deref(), |c| async {
        let r = async {
            let local = Local::for_session(&c.session, name.as_str()).map_err(Failure::input)?;
            let _lock = local.lock("rotate credential").map_err(Failure::input)?;
            super::cluster::adopt_if_seen(&c, &local, name.as_str()).await?;
            let done = rotate::rotate_now(
                c.cloud(),
                &local,
                &name,
                args.lifetime_days,
                Duration::from_secs(args.timeout),
                &report,
            )
            .await
            .map_err(failure)?;
            report.update(|s| s.credential = Some((&done).into()));
            let said = format!(
                "Cluster {name} uses application credential {} ({}); {} workload(s) rolled, {} old credential(s) deleted.",
                done.name,
                done.id,
                done.rolled.len(),
                done.deleted.len()
            );
            // With --output json, stdout is the document's: the line goes with the progress.
            if json {
                eprintln!("{said}");
            } else {
                println!("{said}");
            }
            Ok(Exit::Ok)
        }
        .await;
        (c, r)
    })
    .await;
    let summary = report.summary();
    drop(report);
    progress.finish(summary, r)
}

/// A rotation's failure as the user reads it: bad input (3) when nothing was changed, else 1.
pub(super) fn failure(e: RotateNowError) -> Failure {
    match e {
        RotateNowError::Store(s) => Failure::store(&s),
        e => Failure::explained(&chain(&e), e.help(Audience::Cli), e.is_input()),
    }
}

/// What `kos status` says of the credential: when it expires.
pub(super) fn expiry_note(r: &Resource) -> String {
    if r.kind != Kind::AppCredential {
        return String::new();
    }
    match r.facts.expires_at.as_deref() {
        None => "  never expires".into(),
        Some(t) => {
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            match unix(t) {
                Some(at) if at <= now => format!("  expired {t}"),
                Some(at) => format!("  expires {t} (in {})", left(at - now)),
                None => format!("  expires {}", crate::term::printable(t)),
            }
        }
    }
}
