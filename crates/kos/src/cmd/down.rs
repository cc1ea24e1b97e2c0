//! `kos down`: a cluster torn down, with what the CLI keeps of it on this machine.

use super::cluster::with_cloud;
use super::{Exit, Failure};
use crate::cli::{DownArgs, Output};
use crate::local::Local;
use kos_cluster::teardown::{TeardownError, TeardownOptions};

pub async fn down(args: DownArgs) -> Result<Exit, Failure> {
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let name = args.name.as_str();
            let opts = TeardownOptions {
                dry_run: args.dry_run,
                ..TeardownOptions::default()
            };
            let local = Local::for_session(&c.session, name).map_err(Failure::input)?;
            let _lock = if args.dry_run {
                None
            } else {
                Some(local.lock("down").map_err(Failure::input)?)
            };
            let place = local.place().ok_or_else(|| {
                Failure::input(miette::miette!("no local place for cluster {name}"))
            })?;
            // Recorded after the one listing and before anything is deleted: a later `kos down`
            // that finds nothing left still knows the cluster was this project's, and removes
            // its secrets.
            let record = |found: &[kos_cluster::observe::Resource]| {
                if found.is_empty() {
                    return Ok(());
                }
                local.adopt_legacy()?;
                place.record(|o| o.teardown = true)
            };
            match kos_cluster::teardown::teardown_recording(&c.session, name, &opts, record).await {
                Ok(report) => {
                    let json = matches!(args.output, Output::Json);
                    // What `--output json` prints: the same facts as the text, one object.
                    let summary = |local: &str| {
                        serde_json::json!({
                            "cluster": report.cluster,
                            "dryRun": report.dry_run,
                            "resources": report.resources.iter().map(|r| serde_json::json!({
                                "kind": r.kind.as_str(),
                                "id": r.id,
                                "name": r.name,
                                "logicalId": r.logical_id,
                            })).collect::<Vec<_>>(),
                            "localData": local,
                        })
                    };
                    let verb = if report.dry_run {
                        "would delete"
                    } else {
                        "deleted"
                    };
                    if !json {
                        for r in &report.resources {
                            println!(
                                "{verb} {:<22} {}",
                                r.kind.as_str(),
                                crate::term::printable(&r.name)
                            );
                        }
                    }
                    if report.dry_run {
                        if json {
                            println!("{}", summary("unchanged"));
                        } else {
                            println!(
                                "{} resource(s) of {} would be deleted (dry run).",
                                report.resources.len(),
                                report.cluster
                            );
                        }
                        return Ok(Exit::Ok);
                    }
                    let ours = !report.resources.is_empty()
                        || place
                            .owner()
                            .map_err(|e| Failure::cloud_report(miette::miette!("{e}")))?
                            .is_some_and(|o| o.teardown);
                    if !ours && local.has_data() && !args.forget {
                        if json {
                            println!("{}", summary("kept"));
                        } else {
                            println!(
                                "Nothing of cluster {name} in project {} of cloud {}: its secrets on this machine \
                                 ({}) are kept (a wrong project or region must not cost a live cluster its CA); \
                                 `kos down {name} --forget` deletes them.",
                                place.identity().project_id,
                                crate::term::printable(&place.identity().cloud),
                                local.dir.display()
                            );
                        }
                        return Ok(Exit::Ok);
                    }
                    place.remove().map_err(|e| {
                        Failure::cloud_report(miette::miette!(
                            help = "kos deletes only the files it wrote there; move the others away and run \
                                    `kos down` again",
                            "{e}"
                        ))
                    })?;
                    if json {
                        println!("{}", summary("removed"));
                    } else {
                        println!(
                            "Cluster {} deleted: {} resource(s).",
                            report.cluster,
                            report.resources.len()
                        );
                    }
                    Ok(Exit::Ok)
                }
                Err(e @ TeardownError::Incomplete { .. }) => Err(Failure::cloud_report(
                    miette::miette!(help = "run `kos down` again: it continues", "{e}"),
                )),
                Err(e) => Err(Failure::cloud_report(miette::miette!(
                    "{}",
                    kos_lifecycle::api::chain(&e)
                ))),
            }
        }
        .await;
        (c, r)
    })
    .await
}
