//! `kos doctor NAME`: reads the cluster's ports, security groups, routers, floating IPs and load
//! balancers (kos-cluster's `doctor::fetch`), checks every flow the cluster needs by Neutron's and
//! Octavia's semantics and prints the verdicts with their evidence. Exit 2 when a needed flow is
//! blocked; nothing in the cloud is changed.

use std::path::Path;

use kos_cluster::doctor::{self, Intent};
use miette::IntoDiagnostic;

use super::{Exit, Failure};
use crate::cli::{DoctorArgs, Output};
use crate::cloud;

pub async fn doctor(args: DoctorArgs) -> Result<Exit, Failure> {
    // The spec is read before any cloud call: a bad one changes nothing and costs nothing.
    let intent = match &args.file {
        Some(f) => Some(intent(f, args.name.as_str())?),
        None => None,
    };
    let c = cloud::connect(args.cloud.cloud.as_deref()).await?;
    let fetched = doctor::fetch(&c.session, args.name.as_str()).await;
    c.close().await.map_err(Failure::cloud_report)?;
    let snap = fetched.map_err(Failure::cloud)?;
    if snap.nodes.is_empty() && snap.api.is_none() && snap.service_lbs.is_empty() {
        return Err(Failure::input(miette::miette!(
            help =
                "the name is the spec's metadata.name; `kos status NAME` shows what a cluster has",
            "no cluster {} here: no node port, API endpoint or Service load balancer of it was found",
            args.name
        )));
    }
    let report = doctor::analyse(&snap, intent.as_ref());
    match args.output {
        Output::Text => print!("{}", crate::term::escape(&report.text())),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .into_diagnostic()
                .map_err(Failure::cloud_report)?
        ),
    }
    Ok(if report.blocked() {
        Exit::Blocked
    } else {
        Exit::Ok
    })
}

/// The spec's intent, after checking it is the spec of the cluster named. Read as every command reads
/// a spec (bounded, every problem at once).
fn intent(path: &Path, name: &str) -> Result<Intent, Failure> {
    let super::cluster::SpecFile { loaded, shown, .. } = super::cluster::load_spec(path)?;
    let spec_name = loaded.spec.name.value.as_str();
    if spec_name != name {
        return Err(Failure::input(miette::miette!(
            help = format!("run `kos doctor {spec_name} -f {shown}`, or pass the spec of `{name}`"),
            "{shown} is the spec of cluster `{spec_name}` (metadata.name), not `{name}`"
        )));
    }
    Ok(Intent::of(&loaded.spec))
}
