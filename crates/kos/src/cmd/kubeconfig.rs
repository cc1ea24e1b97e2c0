//! `kos kubeconfig NAME`: an admin kubeconfig signed offline with the cluster CA from this machine's
//! stored secrets, usable as soon as the API answers; written 0600, or merged into the user's kubeconfig
//! as context `kos-<name>`.
//!
//! On the simulated cloud too the kubeconfig's `server` is the cluster's endpoint: kubectl reaches it
//! through the simulator's CONNECT proxy (`HTTPS_PROXY`, which `kos sim serve` prints), as it would
//! through a bastion's.

use std::path::PathBuf;

use kos_bootstrap::kubeconfig::context_name;
use kos_bootstrap::{ApiEndpoint, KubeVersion};
use miette::{IntoDiagnostic, WrapErr};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{Exit, Failure};
use crate::cli::KubeconfigArgs;
use crate::files::write_private;
use crate::local::Local;
use kos_control::connect::API_PORT;
use kos_control::store::Records as _;

/// What `--cloud` means when neither it nor OS_CLOUD is given: the `OS_*` variables' session name.
const ENV_CLOUD: &str = "envvars";

pub async fn kubeconfig(args: KubeconfigArgs) -> Result<Exit, Failure> {
    let cloud = args.cloud.cloud.as_deref().unwrap_or(ENV_CLOUD);
    let name = args.name.as_str();
    let local = find_local(cloud, &args.name).await?;
    let missing = |what: &str| {
        Failure::input(miette::miette!(
            help = "run `kos kubeconfig` on the machine that ran `kos up` (or copy its data directory), and pass the same --cloud",
            "the {what} of cluster {name} on cloud {cloud} are not on this machine ({})",
            local.dir.display()
        ))
    };
    let secrets = local
        .pki()
        .map_err(|e| Failure::store(&e))?
        .ok_or_else(|| missing("secrets"))?;
    let meta = local
        .meta()
        .map_err(|e| Failure::store(&e))?
        .ok_or_else(|| missing("API address and version"))?;
    let version: KubeVersion = meta
        .kubernetes_version
        .parse()
        .map_err(|e| Failure::input(miette::miette!("{e}")))?;
    let endpoint = ApiEndpoint {
        host: meta.api_address,
        port: API_PORT,
    };
    let kc = kos_bootstrap::render_kubeconfig(
        &mut rand::rng(),
        name,
        &endpoint,
        &version,
        &secrets,
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| {
        Failure::cloud_report(miette::miette!("cannot sign the admin certificate: {e}"))
    })?;
    if cloud == crate::cloud::SIM {
        // The endpoint is the simulated cloud's floating IP, routed nowhere on this machine: kubectl
        // gets there as through a bastion's proxy.
        eprintln!(
            "kos: note: kubectl reaches a simulated cluster's API through the simulator's proxy: \
             export the HTTPS_PROXY `kos sim serve` prints (the embedded cloud serves it only while \
             a kos command runs)"
        );
    }
    let context = context_name(name);
    if args.merge {
        let path = user_kubeconfig().map_err(Failure::input)?;
        let existing = match std::fs::read_to_string(&path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Failure::input(
                    miette::miette!("{e}").wrap_err(format!("cannot read {}", path.display())),
                ));
            }
        };
        let merged = merge(existing.as_deref(), kc.expose())
            .wrap_err_with(|| format!("cannot merge into {}", path.display()))
            .map_err(Failure::input)?;
        write_private(&path, merged.as_bytes()).map_err(Failure::cloud_report)?;
        println!(
            "Merged context {context} into {} (now the current context).",
            path.display()
        );
    } else {
        let path = args
            .output
            .unwrap_or_else(|| PathBuf::from(format!("kubeconfig-{name}")));
        write_private(&path, kc.expose().as_bytes()).map_err(Failure::cloud_report)?;
        println!(
            "Wrote {} (context {context}); try: KUBECONFIG={} kubectl get nodes",
            path.display(),
            path.display()
        );
    }
    Ok(Exit::Ok)
}

/// The cluster's directory: found without the cloud when one project of `cloud` has a cluster of
/// that name here; with several, the cloud says which project is meant.
async fn find_local(cloud: &str, name: &kos_cluster::names::ClusterName) -> Result<Local, Failure> {
    let data = crate::cloud::data_dir().map_err(Failure::input)?;
    let mut found = crate::local::candidates(&data, cloud, name);
    match found.len() {
        1 => Ok(Local::at(found.remove(0))),
        0 => Ok(Local::at(
            data.join("clusters")
                .join(crate::local::component(cloud))
                .join("<project>")
                .join(name.as_str()),
        )),
        _ => {
            let c = crate::cloud::connect(Some(cloud).filter(|c| *c != ENV_CLOUD)).await?;
            let local = Local::for_session(&c.session, name.as_str()).map_err(Failure::input);
            c.close().await.map_err(Failure::cloud_report)?;
            local
        }
    }
}

/// The first file of `KUBECONFIG`, else `~/.kube/config`: where kubectl writes too.
fn user_kubeconfig() -> miette::Result<PathBuf> {
    if let Some(first) = std::env::var_os("KUBECONFIG")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|p| !p.as_os_str().is_empty())
    {
        return Ok(first);
    }
    dirs::home_dir()
        .map(|h| h.join(".kube").join("config"))
        .ok_or_else(|| miette::miette!(help = "set KUBECONFIG", "no home directory"))
}

/// `existing` with the clusters, users and contexts of `new` replacing those of the same names (the
/// others kept), and `new`'s current context.
fn merge(existing: Option<&str>, new: &str) -> miette::Result<String> {
    let mut doc: Value = match existing.filter(|t| !t.trim().is_empty()) {
        Some(t) => serde_saphyr::from_str(t).into_diagnostic()?,
        None => json!({"apiVersion": "v1", "kind": "Config"}),
    };
    let new: Value = serde_saphyr::from_str(new).into_diagnostic()?;
    let Some(map) = doc.as_object_mut() else {
        miette::bail!("it is not a kubeconfig (not a mapping)");
    };
    for key in ["clusters", "users", "contexts"] {
        let incoming = new[key].as_array().cloned().unwrap_or_default();
        let names: Vec<&Value> = incoming.iter().map(|e| &e["name"]).collect();
        let list = map.entry(key).or_insert_with(|| json!([]));
        if list.is_null() {
            *list = json!([]);
        }
        let Some(list) = list.as_array_mut() else {
            miette::bail!("its {key} is not a list");
        };
        list.retain(|e| !names.contains(&&e["name"]));
        list.extend(incoming);
    }
    map.insert("current-context".into(), new["current-context"].clone());
    serde_saphyr::to_string(&doc).into_diagnostic()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const NEW: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: kos-demo\n  cluster:\n    server: https://203.0.113.10:6443\nusers:\n- name: kos-demo-admin\n  user: {}\ncontexts:\n- name: kos-demo\n  context:\n    cluster: kos-demo\n    user: kos-demo-admin\ncurrent-context: kos-demo\n";

    #[test]
    fn merge_replaces_ours_and_keeps_the_rest() {
        let old = NEW.replace("203.0.113.10", "198.51.100.1") + "preferences: {}\n";
        let other = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: https://prod:6443}\nusers: []\ncontexts:\n- name: prod\n  context: {cluster: prod, user: prod}\ncurrent-context: prod\n";
        let once: Value = serde_saphyr::from_str(&merge(Some(other), NEW).unwrap()).unwrap();
        assert_eq!(once["contexts"].as_array().unwrap().len(), 2);
        assert_eq!(once["current-context"], "kos-demo");
        let twice: Value = serde_saphyr::from_str(&merge(Some(&old), NEW).unwrap()).unwrap();
        let clusters = twice["clusters"].as_array().unwrap();
        assert_eq!(clusters.len(), 1);
        assert_eq!(
            clusters[0]["cluster"]["server"],
            "https://203.0.113.10:6443"
        );
        assert!(twice.get("preferences").is_some());
        assert!(merge(None, NEW).unwrap().contains("kos-demo"));
    }
}
