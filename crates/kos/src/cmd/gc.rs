//! `kos gc`: objects kos made that no cluster owns any more.

use super::cluster::with_cloud;
use super::{Exit, Failure};
use crate::cli::{GcArgs, Output};
use kos_cluster::teardown::TeardownOptions;

pub async fn gc(args: GcArgs) -> Result<Exit, Failure> {
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let mut orphans = kos_cluster::teardown::orphans(&c.session)
                .await
                .map_err(Failure::cloud)?;
            if !args.clusters.is_empty() {
                orphans.retain(|o| args.clusters.iter().any(|n| n.as_str() == o.cluster));
            }
            let json = matches!(args.output, Output::Json);
            let summary = |deleted: bool| {
                serde_json::json!({
                    "orphans": orphans.iter().map(|o| serde_json::json!({
                        "cluster": o.cluster,
                        "kind": o.kind.as_str(),
                        "id": o.id,
                        "name": o.name,
                        "reason": o.reason,
                    })).collect::<Vec<_>>(),
                    "deleted": deleted,
                })
            };
            if !json {
                for o in &orphans {
                    // What other clusters (or anyone) left: names and reasons from the cloud.
                    println!(
                        "{:<16} {:<22} {:<40} {}",
                        crate::term::printable(&o.cluster),
                        o.kind.as_str(),
                        crate::term::printable(&o.name),
                        crate::term::printable(&o.reason)
                    );
                }
            }
            if orphans.is_empty() || !args.delete {
                if json {
                    println!("{}", summary(false));
                } else if orphans.is_empty() {
                    println!("No orphans.");
                } else {
                    println!(
                        "{} orphan(s); `kos gc --delete` removes them.",
                        orphans.len()
                    );
                }
                return Ok(Exit::Ok);
            }
            let opts = TeardownOptions::default();
            kos_cluster::teardown::delete_orphans(&c.session, &orphans, &opts)
                .await
                .map_err(|e| Failure::cloud_report(miette::miette!("{e}")))?;
            if json {
                println!("{}", summary(true));
                return Ok(Exit::Ok);
            }
            println!("Deleted {} orphan(s).", orphans.len());
            Ok(Exit::Ok)
        }
        .await;
        (c, r)
    })
    .await
}
