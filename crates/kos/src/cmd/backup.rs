//! `kos backup NAME` and `kos restore FILE`: a cluster's records sealed into a file with the user's
//! passphrase (kos-control's `backup`), from this machine or from kos-operator's Secret, and put
//! back on this machine, so that `kos up` continues a cluster whose keeper is gone.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use kos_bootstrap::Sensitive;
use kos_control::backup::{self, BackupError};
use kos_control::store::{Memory, Record, SecretStore as _};
use kube::api::Api;
use secrecy::SecretString;

use super::{Exit, Failure};
use crate::cli::{BackupArgs, PassphraseArgs, RestoreArgs};
use crate::cmd::cluster::with_cloud;
use crate::files::write_private;
use crate::local::Local;

/// The variable a passphrase may come from.
pub const PASSPHRASE_ENV: &str = "KOS_BACKUP_PASSPHRASE";

fn passphrase(args: &PassphraseArgs) -> Result<SecretString, Failure> {
    let text = match &args.passphrase_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::input(miette::miette!("--passphrase-file {}: {e}", path.display()))
            })?;
            text.lines().next().unwrap_or_default().to_owned()
        }
        None => std::env::var(PASSPHRASE_ENV).map_err(|_| {
            Failure::input(miette::miette!(
                help = format!(
                    "give it with --passphrase-file FILE (its first line) or in {PASSPHRASE_ENV}"
                ),
                "no passphrase for the backup"
            ))
        })?,
    };
    Ok(SecretString::from(text))
}

fn failure(e: &BackupError, file: Option<&Path>) -> Failure {
    let text = match file {
        Some(f) => format!("{}: {e}", f.display()),
        None => e.to_string(),
    };
    match e {
        BackupError::Store(s) => Failure::store(s),
        BackupError::Random(_) => Failure::cloud_report(miette::miette!("{text}")),
        BackupError::Differs { .. } => Failure::input(miette::miette!(
            help = "this machine keeps another cluster's secrets under that name: restore where \
                    none are kept, or move its directory away first",
            "{text}"
        )),
        _ => Failure::input(miette::miette!("{text}")),
    }
}

/// The records kos-operator keeps of `name` in `namespace`.
async fn operator_records(args: &BackupArgs, namespace: &str) -> Result<Memory, Failure> {
    let client = super::fleet::management(args.kubeconfig.as_deref()).await?;
    let secret = kos_operator::store::secret_name(args.name.as_str());
    let found = Api::<Secret>::namespaced(client, namespace)
        .get_opt(&secret)
        .await
        .map_err(|e| Failure::cloud_report(miette::miette!("reading Secret {namespace}/{secret}: {e}")))?
        .ok_or_else(|| {
            Failure::input(miette::miette!(
                help = "name the namespace of the Cluster, and the management cluster with --kubeconfig",
                "no Secret {namespace}/{secret}: kos-operator keeps no cluster {} there",
                args.name.as_str()
            ))
        })?;
    let data = found.data.unwrap_or_default();
    let memory = Memory::default();
    for record in Record::ALL {
        if let Some(bytes) = data.get(kos_operator::store::key(record)) {
            let text = String::from_utf8(bytes.0.clone()).map_err(|_| {
                Failure::input(miette::miette!(
                    "Secret {namespace}/{secret} key {}: not UTF-8 text",
                    kos_operator::store::key(record)
                ))
            })?;
            memory
                .write(record, &Sensitive::new(text))
                .map_err(|e| Failure::store(&e))?;
        }
    }
    if data.contains_key("delivered") {
        memory.mark_delivered().map_err(|e| Failure::store(&e))?;
    }
    Ok(memory)
}

fn write_new(path: &Path, text: &str) -> Result<(), Failure> {
    if path.exists() {
        return Err(Failure::input(miette::miette!(
            help = "give another path with -o",
            "{} exists; kos backup never overwrites a file",
            path.display()
        )));
    }
    write_private(path, text.as_bytes()).map_err(Failure::input)
}

pub async fn backup(args: BackupArgs) -> Result<Exit, Failure> {
    let name = args.name.as_str().to_owned();
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.kos-backup")));
    let pass = passphrase(&args.passphrase)?;
    if let Some(namespace) = args.namespace.clone() {
        let records = operator_records(&args, &namespace).await?;
        let text = backup::seal(&name, &records, &pass).map_err(|e| failure(&e, None))?;
        write_new(&output, &text)?;
        println!(
            "Cluster {name}'s secrets (kos-operator's, {namespace}) sealed into {}",
            output.display()
        );
        return Ok(Exit::Ok);
    }
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let local = Local::for_session(&c.session, &name).map_err(Failure::input)?;
            let _lock = local.lock("backup").map_err(Failure::input)?;
            let text = backup::seal(&name, &local, &pass).map_err(|e| failure(&e, None))?;
            write_new(&output, &text)?;
            println!("Cluster {name}'s secrets sealed into {}", output.display());
            Ok(Exit::Ok)
        }
        .await;
        (c, r)
    })
    .await
}

pub async fn restore(args: RestoreArgs) -> Result<Exit, Failure> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| Failure::input(miette::miette!("{}: {e}", args.file.display())))?;
    let pass = passphrase(&args.passphrase)?;
    let opened = backup::open(&text, &pass).map_err(|e| failure(&e, Some(&args.file)))?;
    let name = opened.cluster.clone();
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let local = Local::for_session(&c.session, &name).map_err(Failure::input)?;
            let _lock = local.lock("restore").map_err(Failure::input)?;
            let written =
                backup::restore(&opened, &local).map_err(|e| failure(&e, Some(&args.file)))?;
            println!(
                "Cluster {name}: {written} of {} record(s) restored into {}; `kos up -f <spec>` \
                 continues it",
                opened.len(),
                local.dir.display()
            );
            Ok(Exit::Ok)
        }
        .await;
        (c, r)
    })
    .await
}
