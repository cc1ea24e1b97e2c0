//! `kos status`: what the cloud, the consoles and the API show of a cluster.

use super::cluster::{CliFront, load_spec, up_failure, with_cloud};
use super::{Exit, Failure};
use crate::cli::{Output, StatusArgs};
use crate::local::Local;
use crate::progress::Lines;
use kos_cluster::graph::Kind;
use kos_control::follow;
use kos_control::store::Records as _;
use miette::IntoDiagnostic;

pub async fn status(args: StatusArgs) -> Result<Exit, Failure> {
    let spec = args.file.as_deref().map(load_spec).transpose()?;
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            // The key names in use and a rotation under way (never key material).
            let keys = Local::for_session(&c.session, args.name.as_str())
                .ok()
                .and_then(|l| l.keys().ok().flatten());
            let record = keys.as_ref().map(|k| k.desired_record());
            // A spec kos up would refuse still shows what exists, and why it is not converged.
            let (graph, refused) = match (spec, args.file.as_deref()) {
                (Some(spec), Some(file)) => {
                    let local =
                        Local::for_session(&c.session, spec.loaded.spec.name.value.as_str())
                            .map_err(Failure::input)?;
                    let front = CliFront {
                        file,
                        local: &local,
                    };
                    let looked = kos_control::up::look(
                        c.cloud(),
                        Some(&local),
                        &front,
                        spec.into(),
                        false,
                        &Lines,
                    )
                    .await
                    .map_err(|e| up_failure(e, &local))?;
                    match looked.decide(None, record.as_deref(), &Default::default()) {
                        Ok((graph, _)) => (Some(graph), None),
                        Err(e) => (None, Some(e.to_string())),
                    }
                }
                _ => (None, None),
            };
            let st = kos_cluster::status::status(&c.session, args.name.as_str(), graph.as_ref())
                .await
                .map_err(Failure::cloud)?;
            // The cloud can show every object as the spec says while a node's bootstrap failed:
            // its console says so, and such a cluster is not converged.
            let boots = follow::unfinished(&c.session, &st.resources).await;
            let boots_pending = !boots.failed.is_empty() || !boots.unfinished.is_empty();
            if let Output::Json = args.output {
                let mut doc = serde_json::to_value(&st)
                    .into_diagnostic()
                    .map_err(Failure::cloud_report)?;
                if let (Some(why), Some(o)) = (&refused, doc.as_object_mut()) {
                    o.insert("refused".into(), serde_json::Value::String(why.clone()));
                }
                if let Some(o) = doc.as_object_mut() {
                    o.insert("bootstrap_failed".into(), serde_json::json!(boots.failed));
                    o.insert(
                        "bootstrap_unfinished".into(),
                        serde_json::json!(boots.unfinished),
                    );
                    o.insert(
                        "encryption".into(),
                        serde_json::json!(keys.as_ref().map(|k| serde_json::json!({
                            "keys": k.desired_record(),
                            "phase": k.phase,
                            "shown": k.shown(),
                        }))),
                    );
                }
                println!(
                    "{}",
                    serde_json::to_string_pretty(&doc)
                        .into_diagnostic()
                        .map_err(Failure::cloud_report)?
                );
                return Ok(if refused.is_some() || boots_pending {
                    Exit::Changes
                } else if graph.is_none() && st.resources.is_empty() {
                    Exit::NotFound
                } else {
                    Exit::Ok
                });
            }
            println!("Cluster {}", st.cluster);
            println!(
                "API endpoint: {}",
                st.api_endpoint
                    .as_deref()
                    .map_or("(none yet)".into(), |a| format!("https://{a}:6443"))
            );
            for r in &st.resources {
                let mark = if r.failed { "✗" } else { " " };
                // A control plane's kubeadm certificates last a year from when it was made.
                let certs = r
                    .facts
                    .machine
                    .as_ref()
                    .and_then(|m| m.created.as_deref())
                    .filter(|_| {
                        r.kind == Kind::Server
                            && kos_lifecycle::formation::is_control_plane(&r.logical_id)
                    })
                    .and_then(kos_cluster::certs::expiry)
                    .map(|t| format!("  certificates until {}", kos_cluster::certs::date(t)))
                    .unwrap_or_else(|| super::rotate::expiry_note(r));
                // Names and states come from the cloud.
                println!(
                    "{mark} {:<22} {:<28} {:<12} {}{certs}",
                    r.kind.as_str(),
                    crate::term::printable(&r.logical_id),
                    crate::term::printable(&r.state),
                    crate::term::printable(&r.name)
                );
            }
            for d in &st.duplicates {
                println!("! duplicate: {d}");
            }
            match &keys {
                Some(k) => println!("Encryption at rest: {}", k.shown()),
                None => println!("Encryption at rest: no key on this machine"),
            }
            if let Some(why) = &refused {
                println!("Not converged: kos up refuses this spec: {why}");
                return Ok(Exit::Changes);
            }
            // Its console can say a node's bootstrap failed or is still going (a first control
            // plane trying its CNI again) while the cloud shows every object as the spec says.
            if !boots.failed.is_empty() {
                println!("Not converged: a node's bootstrap failed (its console says so):");
                for f in &boots.failed {
                    println!("  {}", crate::term::printable(f));
                }
            }
            if !boots.unfinished.is_empty() {
                println!(
                    "Not converged: a node's bootstrap has not finished (its console says so; `kos up` \
                     waits for it):"
                );
                for f in &boots.unfinished {
                    println!("  {}", crate::term::printable(f));
                }
            }
            if boots_pending {
                return Ok(Exit::Changes);
            }
            match (&st.not_converged, st.converged()) {
                (Some(actions), Some(false)) => {
                    println!("Not converged ({} action(s) pending):", actions.len());
                    for a in actions {
                        println!("  {:?} {} ({})", a.op, a.logical_id, a.reason);
                    }
                    Ok(Exit::Changes)
                }
                (_, Some(true)) => {
                    println!("Converged.");
                    Ok(Exit::Ok)
                }
                _ if st.resources.is_empty() => {
                    println!(
                        "No cluster {0} here: nothing carries the tag kos-cluster={0} (the name is the spec's \
                         metadata.name; `kos gc` lists what deleted clusters left behind).",
                        st.cluster
                    );
                    Ok(Exit::NotFound)
                }
                _ => {
                    println!(
                        "{} resource(s); pass -f <spec> to compare with the spec.",
                        st.resources.len()
                    );
                    Ok(Exit::Ok)
                }
            }
        }
        .await;
        (c, r)
    })
    .await
}
