//! `kos export` and `kos adopt`: a cluster moved between this machine and kos-operator (the
//! moving itself is kos-operator's `transfer`), without touching a server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kos_operator::resource::IdentityRef;
use kos_operator::transfer::{self, TransferError};

use super::{Exit, Failure};
use crate::cli::{AdoptArgs, ExportArgs};
use crate::cmd::cluster::{load_spec, with_cloud};
use crate::local::Local;

/// How long `kos adopt` waits for kos-operator to let the Cluster go.
const RELEASE_WAIT: Duration = Duration::from_secs(300);

pub(crate) async fn management(path: Option<&Path>) -> Result<kube::Client, Failure> {
    let mut config = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                Failure::input(miette::miette!("--kubeconfig {}: {e}", p.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Failure::input(miette::miette!("--kubeconfig {}: {e}", p.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            Failure::input(miette::miette!(
                help = "point KUBECONFIG (or --kubeconfig) at the cluster kos-operator runs in",
                "no management cluster: {e}"
            ))
        })?,
    };
    // A management cluster on this machine is reached directly whatever HTTPS_PROXY says, as
    // kubectl reaches it.
    kos_control::kube::direct_where_kubectl_is(&mut config);
    kube::Client::try_from(config)
        .map_err(|e| Failure::cloud_report(miette::miette!("the management cluster's client: {e}")))
}

/// The cluster's own API as its management cluster: the identity Secret checked there, then
/// kos-operator installed on its control planes (`kos-operator manifests`' objects, placed so) and
/// its CRD established. Nothing moves before every check passed.
async fn self_host(
    c: &crate::cloud::Connected,
    spec: &kos_cluster::spec::ClusterSpec,
    local: &Local,
    namespace: &str,
    identity: &IdentityRef,
    image: &str,
) -> Result<kube::Client, Failure> {
    use k8s_openapi::api::core::v1::Secret;
    let kube = kos_control::connect::stored_api_client(c.cloud(), spec, local)
        .await
        .map_err(|e| {
            Failure::cloud_report(miette::miette!(
                help = "the cluster's API must answer: `kos up` first",
                "the cluster's API: {}",
                kos_lifecycle::api::chain(&e)
            ))
        })?;
    let client = kube.client();
    let secret = kube::Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&identity.name)
        .await
        .map_err(|e| Failure::cloud_report(miette::miette!("reading the identity Secret: {e}")))?;
    let has_clouds = secret
        .and_then(|s| s.data)
        .is_some_and(|d| d.contains_key(kos_operator::identity::CLOUDS_YAML));
    if !has_clouds {
        return Err(Failure::input(miette::miette!(
            help = format!(
                "create it in the cluster first (`kos kubeconfig`, then `kubectl create namespace \
                 {namespace}` and `kubectl -n {namespace} create secret generic {} \
                 --from-file=clouds.yaml`): an application credential is the least it needs",
                identity.name
            ),
            "the cluster has no Secret {namespace}/{} with a clouds.yaml for kos-operator",
            identity.name
        )));
    }
    kos_operator::apply::apply_all(&client, kos_operator::manifests::self_hosted(image), "kos")
        .await
        .map_err(|e| Failure::cloud_report(miette::miette!("installing kos-operator: {e}")))?;
    // The Cluster is made next: its CRD must serve.
    let clusters =
        kube::Api::<kos_operator::resource::Cluster>::namespaced(client.clone(), namespace);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Err(e) = clusters
        .list(&kube::api::ListParams::default().limit(1))
        .await
    {
        if std::time::Instant::now() > deadline {
            return Err(Failure::cloud_report(miette::miette!(
                "the Cluster CRD does not serve in the cluster: {e}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(client)
}

fn transfer_failure(e: TransferError) -> Failure {
    let input = matches!(
        e,
        TransferError::ClusterExists { .. }
            | TransferError::SecretExists { .. }
            | TransferError::NoCluster { .. }
            | TransferError::NoRecords { .. }
    );
    let report = miette::miette!("{}", kos_lifecycle::api::chain(&e));
    if input {
        Failure::input(report)
    } else {
        Failure::cloud_report(report)
    }
}

pub async fn export(args: ExportArgs) -> Result<Exit, Failure> {
    let spec = load_spec(&args.spec.file)?;
    let name = spec.loaded.spec.name.value.as_str().to_owned();
    let tags: Vec<String> = spec
        .loaded
        .spec
        .tags
        .iter()
        .map(|t| t.as_str().to_owned())
        .collect();
    // The text load_spec read and validated: the file is not read twice.
    let doc: serde_json::Value = serde_saphyr::from_str(&spec.text)
        .map_err(|e| Failure::input(miette::miette!("{}: {e}", spec.shown)))?;
    let schema: kos_cluster::schema::Spec = serde_json::from_value(doc["spec"].clone())
        .map_err(|e| Failure::input(miette::miette!("{}: spec: {e}", spec.shown)))?;
    let self_hosted = args.self_hosted;
    let client = if self_hosted {
        None
    } else {
        Some(management(args.kubeconfig.as_deref()).await?)
    };
    let namespace = args.namespace.clone().unwrap_or_else(|| {
        if self_hosted {
            kos_operator::manifests::NAMESPACE.to_owned()
        } else {
            "default".to_owned()
        }
    });
    let identity = IdentityRef {
        name: args.identity_secret.clone(),
        cloud_name: args.identity_cloud.clone(),
    };
    let image = args.operator_image.clone();
    let cluster_spec = spec.loaded.spec.clone();
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let local = Local::for_session(&c.session, &name).map_err(Failure::input)?;
            let _lock = local.lock("export").map_err(Failure::input)?;
            let place = local.place().ok_or_else(|| {
                Failure::input(miette::miette!("no local place for cluster {name}"))
            })?;
            if !local.has_data() {
                return Err(Failure::input(miette::miette!(
                    help =
                        "run `kos export` where `kos up` made the cluster, with the same --cloud",
                    "nothing of cluster {name} is kept on this machine ({})",
                    local.dir.display()
                )));
            }
            let client = match client {
                Some(client) => client,
                None => {
                    let image = image.clone().unwrap_or_default();
                    self_host(&c, &cluster_spec, &local, &namespace, &identity, &image).await?
                }
            };
            let moved =
                transfer::export(&client, &namespace, &name, schema, tags, identity, &local)
                    .await
                    .map_err(transfer_failure)?;
            // Its records are the operator's now: two keepers would each rotate and renew.
            place.remove().map_err(|e| {
                Failure::cloud_report(miette::miette!(
                    help =
                        "the records are in the management cluster: remove the directory by hand",
                    "{e}"
                ))
            })?;
            let place_of = if self_hosted {
                "the cluster itself"
            } else {
                "the management cluster"
            };
            println!(
                "Cluster {namespace}/{name} is kos-operator's now ({place_of}): {moved} record(s) \
                 in Secret {namespace}/{name}-kos; its files on this machine are removed."
            );
            Ok(Exit::Ok)
        }
        .await;
        (c, r)
    })
    .await
}

pub async fn adopt(args: AdoptArgs) -> Result<Exit, Failure> {
    let name = args.name.as_str().to_owned();
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.yaml")));
    if output.exists() {
        return Err(Failure::input(miette::miette!(
            help = "give another path with -o",
            "{} exists; kos adopt never overwrites a file",
            output.display()
        )));
    }
    let client = management(args.kubeconfig.as_deref()).await?;
    let namespace = args.namespace.clone();
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let local = Local::for_session(&c.session, &name).map_err(Failure::input)?;
            let _lock = local.lock("adopt").map_err(Failure::input)?;
            if local.has_data() {
                return Err(Failure::input(miette::miette!(
                    help = "a cluster is kept in one place: `kos down` or move the files away first",
                    "this machine keeps files of a cluster {name} already ({})",
                    local.dir.display()
                )));
            }
            let adopted = transfer::adopt(&client, &namespace, &name, &local, RELEASE_WAIT)
                .await
                .map_err(transfer_failure)?;
            let doc = kos_operator::reconcile::document_value(&name, &adopted.tags, &adopted.spec);
            let text = serde_saphyr::to_string(&doc).map_err(|e| {
                Failure::cloud_report(miette::miette!("the spec of {name}: {e}"))
            })?;
            write_new(&output, &text).map_err(|e| {
                Failure::cloud_report(miette::miette!(
                    help = "the records are on this machine: write the spec by hand from the Cluster you applied",
                    "cannot write {}: {e}",
                    output.display()
                ))
            })?;
            println!(
                "Cluster {name} is this machine's again: {} record(s) in {}, its spec in {}; \
                 `kos up -f {}` continues it.",
                adopted.records,
                local.dir.display(),
                output.display(),
                output.display()
            );
            Ok(Exit::Ok)
        }
        .await;
        (c, r)
    })
    .await
}

/// Writes a file that must not exist yet.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(text.as_bytes())
}
