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

/// The credential `kos up --self-hosted` writes into the cluster for kos-operator: a clouds.yaml
/// checked to name its cloud, and the CA bundle it names. Holds a secret: no `Debug`.
pub(crate) struct Identity {
    secret: String,
    cloud: String,
    clouds: kos_bootstrap::Sensitive,
    cacert: Option<String>,
}

/// The label on the identity Secret kos wrote, naming its cluster: `kos adopt` removes it with the
/// operator.
const IDENTITY_OF: &str = "kos.dev/identity-of";

impl Identity {
    /// Reads and checks `path` before anything is made: the cloud `cloud` must be in it, and a
    /// `cacert` it names must be readable.
    pub(crate) fn read(path: &Path, cloud: &str, secret: &str) -> Result<Identity, Failure> {
        let shown = format!("--identity-file {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::input(miette::miette!(
                help = "give the clouds.yaml kos-operator is to use from inside the cluster",
                "{shown}: {e}"
            ))
        })?;
        let profile = kos_cloud::config::CloudProfile::from_clouds_text(&shown, &text, cloud)
            .map_err(|e| {
                Failure::input(miette::miette!(
                    help = "name one of the file's clouds with --identity-cloud",
                    "{e}"
                ))
            })?;
        let cacert = match &profile.cacert {
            Some(ca) => Some(std::fs::read_to_string(ca).map_err(|e| {
                Failure::input(miette::miette!(
                    help =
                        "the CA bundle goes into the Secret's `cacert`: it must be readable here",
                    "{shown}: clouds.{cloud}.cacert {}: {e}",
                    ca.display()
                ))
            })?),
            None => None,
        };
        if secret.is_empty() {
            return Err(Failure::input(miette::miette!(
                help = "name the Secret with --identity-secret",
                "--identity-secret is empty"
            )));
        }
        Ok(Identity {
            secret: secret.to_owned(),
            cloud: cloud.to_owned(),
            clouds: kos_bootstrap::Sensitive::new(text),
            cacert,
        })
    }
}

/// Writes `identity` into the cluster (its namespace made if missing) for Cluster `cluster`. A
/// Secret of that name kos did not write is never overwritten.
async fn put_identity(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    identity: &Identity,
) -> Result<(), Failure> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    let failed = |what: &str, e: kube::Error| {
        Failure::cloud_report(miette::miette!("{what} in the cluster: {e}"))
    };
    let namespaces = kube::Api::<Namespace>::all(client.clone());
    if namespaces
        .get_opt(namespace)
        .await
        .map_err(|e| failed("reading the namespace", e))?
        .is_none()
    {
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(namespace.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        match namespaces
            .create(&kube::api::PostParams::default(), &ns)
            .await
        {
            // Made meanwhile: as good.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            r => {
                r.map_err(|e| failed("making the namespace", e))?;
            }
        }
    }
    let secrets = kube::Api::<Secret>::namespaced(client.clone(), namespace);
    let ours = |s: &Secret| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(IDENTITY_OF))
            .is_some_and(|c| c == cluster)
    };
    if let Some(existing) = secrets
        .get_opt(&identity.secret)
        .await
        .map_err(|e| failed("reading the identity Secret", e))?
        && !ours(&existing)
    {
        return Err(Failure::input(miette::miette!(
            help = "give another --identity-secret, or use that Secret with `kos export \
                    --self-hosted --identity-secret`",
            "Secret {namespace}/{} exists in the cluster and kos did not write it: it is not \
             overwritten",
            identity.secret
        )));
    }
    let mut data = std::collections::BTreeMap::from([(
        kos_operator::identity::CLOUDS_YAML.to_owned(),
        ByteString(identity.clouds.expose().as_bytes().to_vec()),
    )]);
    if let Some(ca) = &identity.cacert {
        data.insert(
            kos_operator::identity::CACERT.to_owned(),
            ByteString(ca.as_bytes().to_vec()),
        );
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(identity.secret.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(std::collections::BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_owned(), "kos".to_owned()),
                (IDENTITY_OF.to_owned(), cluster.to_owned()),
            ])),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Default::default()
    };
    secrets
        .patch(
            &identity.secret,
            &kube::api::PatchParams::apply("kos").force(),
            &kube::api::Patch::Apply(&secret),
        )
        .await
        .map_err(|e| failed("writing the identity Secret", e))?;
    Ok(())
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
    written: Option<&Identity>,
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
    let cluster = spec.name.value.as_str();
    if let Some(written) = written {
        put_identity(&client, namespace, cluster, written).await?;
    }
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
    let objects = kos_operator::manifests::self_hosted(image, cluster);
    kos_operator::apply::apply_all(&client, objects, "kos")
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
    export_with(args, None).await
}

/// `kos up --self-hosted`'s second half: the cluster `kos up` made keeps itself, `identity`
/// written into it first.
pub(crate) async fn self_host_after_up(
    file: PathBuf,
    cloud: Option<String>,
    image: String,
    identity: Identity,
) -> Result<Exit, Failure> {
    let args = ExportArgs {
        spec: crate::cli::SpecArgs { file },
        cloud: crate::cli::CloudArgs { cloud },
        kubeconfig: None,
        namespace: None,
        self_hosted: true,
        operator_image: Some(image),
        identity_secret: identity.secret.clone(),
        identity_cloud: identity.cloud.clone(),
    };
    export_with(args, Some(identity)).await
}

/// `kos export`; with `written`, that identity is written into the cluster first (self-hosted
/// only), and what was done is said on stderr (`kos up`'s stdout may be its JSON document).
async fn export_with(args: ExportArgs, written: Option<Identity>) -> Result<Exit, Failure> {
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
                    self_host(
                        &c,
                        &cluster_spec,
                        &local,
                        &namespace,
                        &identity,
                        &image,
                        written.as_ref(),
                    )
                    .await?
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
            let said = format!(
                "Cluster {namespace}/{name} is kos-operator's now ({place_of}): {moved} record(s) \
                 in Secret {namespace}/{name}-kos; its files on this machine are removed."
            );
            if written.is_some() {
                eprintln!("kos: {said}");
            } else {
                println!("{said}");
            }
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
            // A self-hosted cluster's own operator would otherwise stay, idle, in it.
            match unhost(&client, &name).await {
                Ok(true) => eprintln!(
                    "kos: kos-operator, which kept {name} from inside it, is removed from the cluster"
                ),
                Ok(false) => {}
                Err(e) => eprintln!(
                    "kos: warning: kos-operator, which kept {name} from inside it, is left in the \
                     cluster ({e}); remove it with `kos-operator manifests | kubectl delete -f -` \
                     (the CRD goes with it: keep it while other Clusters use it)"
                ),
            }
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

/// After `kos adopt` of a self-hosted cluster: the kos-operator `kos export --self-hosted`
/// installed into it (its Deployment annotated with this cluster's name) is taken out, last object
/// first (the Deployment before the RBAC its replicas use), with the identity Secret kos wrote for
/// it. Its Namespace stays (it may hold what kos did not make), and so does the CRD while any
/// Cluster is left. Whether there was one to take out.
async fn unhost(client: &kube::Client, cluster: &str) -> Result<bool, kube::Error> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Secret;
    use kos_operator::manifests::{NAME, NAMESPACE, SELF_HOSTED, self_hosted};
    use kube::ResourceExt as _;
    let deployments = kube::Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    let Some(d) = deployments.get_opt(NAME).await? else {
        return Ok(false);
    };
    if d.annotations().get(SELF_HOSTED).map(String::as_str) != Some(cluster) {
        return Ok(false);
    }
    let gone = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        r => r,
    };
    let others = kube::Api::<kos_operator::resource::Cluster>::all(client.clone())
        .list(&kube::api::ListParams::default().limit(1))
        .await?;
    for object in self_hosted("", cluster).iter().rev() {
        match object["kind"].as_str() {
            Some("Namespace") => continue,
            Some("CustomResourceDefinition") if !others.items.is_empty() => continue,
            _ => {}
        }
        let (api, name) = kos_operator::apply::api_of(client, object);
        gone(api.delete(&name, &Default::default()).await.map(drop))?;
    }
    let secrets = kube::Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    let written = secrets
        .list(&kube::api::ListParams::default().labels(&format!("{IDENTITY_OF}={cluster}")))
        .await?;
    for s in written.items {
        gone(
            secrets
                .delete(&s.name_any(), &Default::default())
                .await
                .map(drop),
        )?;
    }
    Ok(true)
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
