//! Rotating the application credential the cluster's cloud controller and CSI use, without a moment
//! in which they have none: a new credential is made, written into the `kube-system/cloud-config`
//! Secret, the workloads that mount that Secret are rolled (their pods read cloud.conf only when they
//! start), and only once every one of them runs on the new credential is the old one deleted.
//!
//! Keystone names an application credential uniquely per user, so two names alternate:
//! `kos-<cluster>-ccm` and `kos-<cluster>-ccm-b`. Which one is live is what the Secret says, never a
//! local file: a run killed at any step is finished by running it again.
//!
//! Resuming: the new credential's secret is kept locally ([`CredentialStore::keep_pending`]) the moment
//! Keystone returns it; a credential of the new name without a kept secret (a run killed in between)
//! is deleted and made again.

use std::future::Future;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

pub use crate::api::ApiError;
use crate::api::Cause;

/// The Secret (in `kube-system`) holding `cloud.conf`.
pub const CLOUD_CONFIG_SECRET: &str = "cloud-config";
/// The pod-template annotation that rolls a workload onto a credential: its value is the credential
/// id, so setting it again is a no-op.
pub const CREDENTIAL_ANNOTATION: &str = "kos/ccm-credential";

/// The two names the cluster's CCM credential alternates between.
pub fn credential_names(cluster: &str) -> [String; 2] {
    [format!("kos-{cluster}-ccm"), format!("kos-{cluster}-ccm-b")]
}

/// An application credential with its secret.
#[derive(Clone)]
pub struct Credential {
    pub id: String,
    pub name: String,
    pub secret: SecretString,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// An application credential as Keystone lists it (no secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    pub name: String,
}

/// A workload that mounts the `cloud-config` Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// Its pod template's [`CREDENTIAL_ANNOTATION`].
    pub annotation: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    DaemonSet,
    Deployment,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            WorkloadKind::DaemonSet => "daemonset",
            WorkloadKind::Deployment => "deployment",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

/// Where a workload's rollout stands, as `kubectl rollout status` judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    Done,
    /// Not yet, and why (`1 of 3 updated pods available`).
    Waiting(String),
}

/// Why a call to Keystone failed, as far as the rotation decides on it.
#[derive(Debug, thiserror::Error)]
pub enum KeystoneError {
    /// No such application credential (404).
    #[error("no such application credential")]
    NotFound,
    /// Keystone answered and refused (a 4xx: forbidden, a duplicate name): the same call is
    /// refused again until something else changes.
    #[error("Keystone refused the request")]
    Refused(#[source] Cause),
    /// No answer, or one that says to try later (429, a 5xx, a cut-off connection).
    #[error("Keystone did not answer")]
    Unavailable(#[source] Cause),
}

impl KeystoneError {
    /// Whether the same call may succeed later with nothing else changed.
    pub fn is_transient(&self) -> bool {
        match self {
            KeystoneError::Unavailable(_) => true,
            KeystoneError::NotFound | KeystoneError::Refused(_) => false,
        }
    }
}

/// Keystone, as rotation uses it.
pub trait Keystone {
    /// The user's application credentials with one of `names`.
    fn list(&self, names: &[String]) -> impl Future<Output = Result<Vec<Listed>, KeystoneError>>;
    fn create(&self, name: &str) -> impl Future<Output = Result<Credential, KeystoneError>>;
    /// [`KeystoneError::NotFound`] when it is gone already (the rotation counts that as done).
    fn delete(&self, id: &str) -> impl Future<Output = Result<(), KeystoneError>>;
}

/// The cluster's API, as rotation uses it; its errors are the API's kinds ([`ApiError`]).
pub trait ClusterApi {
    /// `cloud.conf` of the `kube-system/cloud-config` Secret.
    fn cloud_conf(&self) -> impl Future<Output = Result<SecretString, ApiError>>;
    fn set_cloud_conf(&self, text: &SecretString) -> impl Future<Output = Result<(), ApiError>>;
    /// The Deployments and DaemonSets whose pods mount the Secret `secret`.
    fn workloads_mounting(
        &self,
        secret: &str,
    ) -> impl Future<Output = Result<Vec<Workload>, ApiError>>;
    /// Sets a pod-template annotation: the controller replaces the pods.
    fn annotate(
        &self,
        w: &Workload,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), ApiError>>;
    fn rollout(&self, w: &Workload) -> impl Future<Output = Result<Rollout, ApiError>>;
}

/// Why the credential's secret could not be read or kept where kos keeps it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{location} cannot be read")]
    Read {
        location: String,
        #[source]
        source: Cause,
    },
    #[error("{location} cannot be written")]
    Write {
        location: String,
        #[source]
        source: Cause,
    },
    /// It is there but not a credential kos wrote (never shown: it holds a secret).
    #[error("{location} is malformed")]
    Malformed { location: String },
}

/// Where the credential's secret is kept (`location`: a file's path, a Secret's name).
pub trait CredentialStore {
    /// A credential made by a rotation that has not finished.
    fn pending(&self) -> Result<Option<Credential>, StoreError>;
    /// The current credential, as the last [`CredentialStore::commit`] kept it.
    fn committed(&self) -> Result<Option<Credential>, StoreError>;
    fn keep_pending(&self, c: &Credential) -> Result<(), StoreError>;
    /// The rotation is done: `c` is the current credential, nothing is pending.
    fn commit(&self, c: &Credential) -> Result<(), StoreError>;
}

/// What a rotation failed at. No variant holds a secret: the causes are the seams' errors, which
/// hold none either.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("cannot read the cluster's kube-system/{CLOUD_CONFIG_SECRET} Secret")]
    ReadSecret(#[source] ApiError),
    #[error(
        "kube-system/{CLOUD_CONFIG_SECRET} has no application-credential-id and -secret in [Global]: \
         kos rotates only the application credential it made"
    )]
    NotAnApplicationCredential,
    #[error("Keystone: {what}")]
    Keystone {
        what: String,
        #[source]
        source: KeystoneError,
    },
    #[error("the cluster's API: {what}")]
    Api {
        what: String,
        #[source]
        source: ApiError,
    },
    #[error("the credential's secret cannot be kept on this machine")]
    Store(#[source] StoreError),
    #[error(
        "{workload} did not roll out on the new credential within {}s: {detail}; the old credential is kept",
        .waited.as_secs()
    )]
    RolloutTimeout {
        workload: String,
        detail: String,
        waited: Duration,
    },
}

/// How long to wait for the rollouts, and how often to look.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub timeout: Duration,
    pub poll: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            poll: Duration::from_secs(2),
        }
    }
}

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The credential the cluster uses now.
    pub id: String,
    pub name: String,
    /// The workloads rolled onto it.
    pub rolled: Vec<String>,
    /// Credentials deleted (the old one, and any left by a killed run).
    pub deleted: Vec<String>,
}

/// Rotates the credential of `cluster`; `say` gets one line per step.
pub async fn rotate(
    cluster: &str,
    keystone: &impl Keystone,
    api: &impl ClusterApi,
    store: &impl CredentialStore,
    opts: Options,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<Rotated, RotateError> {
    let names = credential_names(cluster);
    let conf = api.cloud_conf().await.map_err(RotateError::ReadSecret)?;
    let in_use = global_value(conf.expose_secret(), "application-credential-id")
        .ok_or(RotateError::NotAnApplicationCredential)?;
    let listed = keystone
        .list(&names)
        .await
        .map_err(keystone_err("listing the application credentials"))?;
    let pending = store
        .pending()
        .map_err(RotateError::Store)?
        .filter(|p| listed.iter().any(|l| l.id == p.id));
    // A rotation that stopped after its credential went live and was kept (deleting the old one
    // failed): only the old one is left to delete, not another credential to roll out.
    let live_and_kept = match pending {
        Some(_) => None,
        None if listed.len() > 1 => store
            .committed()
            .map_err(RotateError::Store)?
            .filter(|c| c.id == in_use && listed.iter().any(|l| l.id == c.id)),
        None => None,
    };
    let mut deleted = Vec::new();
    let target = match pending.or(live_and_kept) {
        Some(p) => {
            say(&format!("continuing the rotation to {} ({})", p.name, p.id));
            p
        }
        None => {
            let live_name = listed.iter().find(|l| l.id == in_use).map(|l| &l.name);
            let name = match live_name {
                Some(n) if *n == names[0] => &names[1],
                _ => &names[0],
            };
            // A credential of that name whose secret nobody kept (a run killed right after Keystone
            // made it), or the old one of an earlier rotation: not in use, so it goes.
            for stale in listed.iter().filter(|l| &l.name == name && l.id != in_use) {
                delete(keystone, &stale.id).await?;
                deleted.push(stale.id.clone());
            }
            let made = keystone.create(name).await.map_err(keystone_err(&format!(
                "making application credential {name}"
            )))?;
            store.keep_pending(&made).map_err(RotateError::Store)?;
            say(&format!(
                "made application credential {} ({})",
                made.name, made.id
            ));
            made
        }
    };
    if in_use != target.id {
        let text = with_credential(
            conf.expose_secret(),
            &target.id,
            target.secret.expose_secret(),
        )
        .ok_or(RotateError::NotAnApplicationCredential)?;
        api.set_cloud_conf(&SecretString::from(text))
            .await
            .map_err(api_err(&format!(
                "writing kube-system/{CLOUD_CONFIG_SECRET}"
            )))?;
        say(&format!(
            "kube-system/{CLOUD_CONFIG_SECRET} now holds {}",
            target.id
        ));
    }
    let workloads = api
        .workloads_mounting(CLOUD_CONFIG_SECRET)
        .await
        .map_err(api_err(&format!(
            "listing the workloads that mount {CLOUD_CONFIG_SECRET}"
        )))?;
    for w in &workloads {
        if w.annotation.as_deref() != Some(target.id.as_str()) {
            api.annotate(w, CREDENTIAL_ANNOTATION, &target.id)
                .await
                .map_err(api_err(&format!("restarting {w}")))?;
            say(&format!("restarting {w}"));
        }
    }
    let started = tokio::time::Instant::now();
    for w in &workloads {
        loop {
            match api
                .rollout(w)
                .await
                .map_err(api_err(&format!("reading the rollout of {w}")))?
            {
                Rollout::Done => break,
                Rollout::Waiting(detail) => {
                    let waited = started.elapsed();
                    if waited >= opts.timeout {
                        return Err(RotateError::RolloutTimeout {
                            workload: w.to_string(),
                            detail,
                            waited,
                        });
                    }
                    tokio::time::sleep(opts.poll).await;
                }
            }
        }
        say(&format!("{w} runs on the new credential"));
    }
    store.commit(&target).map_err(RotateError::Store)?;
    for old in listed.iter().filter(|l| l.id != target.id) {
        if deleted.contains(&old.id) {
            continue;
        }
        delete(keystone, &old.id).await?;
        say(&format!(
            "deleted application credential {} ({})",
            old.name, old.id
        ));
        deleted.push(old.id.clone());
    }
    Ok(Rotated {
        id: target.id,
        name: target.name,
        rolled: workloads.iter().map(ToString::to_string).collect(),
        deleted,
    })
}

fn keystone_err(what: &str) -> impl FnOnce(KeystoneError) -> RotateError {
    let what = what.to_owned();
    move |source| RotateError::Keystone { what, source }
}

fn api_err(what: &str) -> impl FnOnce(ApiError) -> RotateError {
    let what = what.to_owned();
    move |source| RotateError::Api { what, source }
}

/// Deletes the application credential `id`; one that is gone already is done.
async fn delete(keystone: &impl Keystone, id: &str) -> Result<(), RotateError> {
    match keystone.delete(id).await {
        Ok(()) | Err(KeystoneError::NotFound) => Ok(()),
        Err(source) => Err(RotateError::Keystone {
            what: format!("deleting application credential {id}"),
            source,
        }),
    }
}

/// The value of `key` in cloud.conf's `[Global]` section (gcfg syntax: `key = value`, `#`/`;`
/// comments, optional double quotes).
pub fn global_value(conf: &str, key: &str) -> Option<String> {
    let mut global = false;
    for line in conf.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            global = t.eq_ignore_ascii_case("[global]");
            continue;
        }
        if !global {
            continue;
        }
        if let Some((k, v)) = t.split_once('=')
            && k.trim().eq_ignore_ascii_case(key)
        {
            let v = v.trim();
            return Some(
                match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    Some(quoted) => unescape(quoted),
                    None => v.to_owned(),
                },
            );
        }
    }
    None
}

/// `conf` with `[Global]`'s application credential replaced; everything else as it was. `None`
/// when `[Global]` has no application credential to replace.
pub fn with_credential(conf: &str, id: &str, secret: &str) -> Option<String> {
    let mut global = false;
    let (mut saw_id, mut saw_secret) = (false, false);
    let mut out = String::with_capacity(conf.len() + 64);
    for line in conf.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('[') {
            global = t.eq_ignore_ascii_case("[global]");
        }
        let key = t
            .split_once('=')
            .map(|(k, _)| k.trim().to_ascii_lowercase());
        let newline = if line.ends_with('\n') { "\n" } else { "" };
        match key.as_deref() {
            Some("application-credential-id") if global => {
                out.push_str(&format!(
                    "application-credential-id = {}{newline}",
                    gcfg(id)
                ));
                saw_id = true;
            }
            Some("application-credential-secret") if global => {
                out.push_str(&format!(
                    "application-credential-secret = {}{newline}",
                    gcfg(secret)
                ));
                saw_secret = true;
            }
            _ => out.push_str(line),
        }
    }
    (saw_id && saw_secret).then_some(out)
}

/// A gcfg string value: quoted, with backslash and double quote escaped (as kos writes cloud.conf).
fn gcfg(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The inside of a quoted gcfg value.
fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// What `kos up` does with the CCM credential the plan shows ([`recreate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recreate {
    /// Kept (or made, when there is none yet).
    No,
    /// Made again, as asked (`--recreate-ccm-credential`), while no server uses it.
    Asked,
    /// Its secret is kept nowhere and no server uses it yet (a run stopped before keeping it):
    /// made again without being asked.
    Lost,
    /// Its secret is kept nowhere while servers use it: kept; a first control plane made again
    /// cannot get its cloud.conf until a rotation replaces it.
    LostInUse,
}

impl Recreate {
    /// Whether the run makes the credential again.
    #[must_use]
    pub fn recreates(self) -> bool {
        matches!(self, Recreate::Asked | Recreate::Lost)
    }
}

/// Why `kos up` will not touch the CCM credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecreateRefusal {
    /// A rotation is in flight: the run must not pick one of two credentials and delete the other.
    #[error("a rotation of the CCM application credential has not finished")]
    Unfinished,
    /// `--recreate-ccm-credential` would delete what the running CCM and CSI use.
    #[error(
        "--recreate-ccm-credential would delete the application credential the running cloud \
         controller and CSI use"
    )]
    InUse,
}

/// Whether this run makes the CCM credential again. Its secret is kept the moment Keystone
/// returns it, but a run killed in between, or a lost copy, leaves a credential whose secret
/// nobody has: while no server exists nothing can be using it, so it is replaced without being
/// asked; once servers run with it, the run says what replacing it takes and leaves the choice to
/// the user. `pending`: a rotation's new credential is kept; `stored_id`: the id of the one kept.
///
/// # Errors
/// [`RecreateRefusal`].
pub fn recreate(
    plan: &kos_cluster::plan::Plan,
    pending: bool,
    stored_id: Option<&str>,
    asked: bool,
) -> Result<Recreate, RecreateRefusal> {
    use kos_cluster::graph::Kind;
    use kos_cluster::plan::Op;
    if pending
        || plan
            .actions
            .iter()
            .any(|a| a.kind == Kind::AppCredential && a.op == Op::Delete)
    {
        return Err(RecreateRefusal::Unfinished);
    }
    let asked_for = if asked { Recreate::Asked } else { Recreate::No };
    let Some(existing) = plan
        .actions
        .iter()
        .find(|a| a.kind == Kind::AppCredential)
        .and_then(|a| a.existing.as_ref())
    else {
        return Ok(asked_for);
    };
    let servers = plan
        .actions
        .iter()
        .any(|a| a.kind == Kind::Server && a.existing.is_some());
    if asked && servers {
        return Err(RecreateRefusal::InUse);
    }
    if asked || stored_id == Some(existing.id.as_str()) {
        return Ok(asked_for);
    }
    Ok(if servers {
        Recreate::LostInUse
    } else {
        Recreate::Lost
    })
}

#[cfg(test)]
mod tests;
