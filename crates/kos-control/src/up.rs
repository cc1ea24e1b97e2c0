//! One turn of a run (`kos up`'s), carried out: what a turn decided from ([`Turn`]), and the
//! converge that makes everything but the servers being replaced as the spec says and follows the
//! new nodes' bootstrap ([`converge`]).

use std::sync::atomic::{AtomicBool, Ordering};

use kos_bootstrap::ClusterSecrets;
use kos_cluster::ClusterSpec;
use kos_cluster::apply::{ApplyError, ApplyOptions, ApplyReport};
use kos_cluster::bootstrap::{Bootstrap, Formation};
use kos_cluster::graph::{DesiredGraph, Kind};
use kos_cluster::plan::{Op, Plan};
use kos_cluster::resolved::Resolved;
use kos_lifecycle::api::chain;
use kos_lifecycle::audience::Audience;
use kos_lifecycle::encryption::KeyState;
use kos_lifecycle::rotate::{Recreate, RecreateRefusal};
use kos_lifecycle::run::Decided;

use crate::connect::Cloud;
use crate::follow::{self, BootstrapError};
use crate::members::StaleMembersError;
use crate::report::{Event, Report};
use crate::store::{
    Cause, ClusterMeta, Record, Records as _, SecretStore, Secrets, SecretsError, Seen, StoreError,
};
use crate::tokens::{self, TokenScript};

mod run;
pub mod steps;
pub use run::{Front, Looked, Spec, Up, UpError, look, prepare};

/// A spec checked against the cloud, with its desired graph and what was decided from it: one
/// turn of a run.
pub struct Turn {
    pub spec: ClusterSpec,
    pub graph: DesiredGraph,
    pub resolved: Resolved,
    pub formation: kos_lifecycle::formation::Decision,
    /// The plan, the servers that leave and the groups that surge.
    pub decided: Decided,
    /// The cloud shows something tagged for the cluster.
    pub seen: bool,
    /// The Secrets' encryption keys and rotation step (`None`: a plan of a cluster whose keys are
    /// not made yet).
    pub keys: Option<KeyState>,
}

impl AsRef<Decided> for Turn {
    fn as_ref(&self) -> &Decided {
        &self.decided
    }
}

/// Makes the [`Bootstrap`] that renders a turn's user_data with the cluster's secrets (the CLI's:
/// kubeadm through kos-bootstrap).
pub trait Bootstraps: Send + Sync {
    /// # Errors
    /// Why it cannot be made (the spec's version, a CA file that cannot be read): nothing was
    /// changed.
    fn bootstrap<'a>(
        &'a self,
        turn: &'a Turn,
        secrets: ClusterSecrets,
    ) -> Result<Box<dyn Bootstrap + 'a>, Cause>;
}

/// What a run was asked for, besides the spec.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Secrets given to servers of a cluster the cloud no longer shows may make it again.
    pub reuse_local_secrets: bool,
    /// Make the CCM application credential again (refused while servers use it).
    pub recreate_ccm_credential: bool,
    /// How many cloud calls at once.
    pub parallelism: usize,
    /// How far the bootstrap is followed.
    pub wait: follow::Wait,
    /// How long a node's drain may take.
    pub drain_timeout: std::time::Duration,
    /// Without the cluster's secrets: take over what the cloud shows of it before any server, or not.
    pub leftovers: crate::store::Leftovers,
    /// Who mends the CCM credential when a rotation has not finished or its secret is kept
    /// nowhere while servers use it.
    pub ccm_mending: CcmMending,
}

/// Who mends the CCM credential when a rotation of it has not finished (a run stopped within it),
/// or when its secret is kept nowhere while servers use it (so a first control plane made again
/// could not get its cloud.conf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcmMending {
    /// The user, with `kos rotate credential`: the run refuses (an unfinished rotation) or warns
    /// (a lost secret). The CLI: its user may keep the secret on another machine.
    User,
    /// The run itself rotates the credential before its turn (the rotation continues where the
    /// stopped one left off). The operator: no one else keeps the cluster's secrets.
    Run,
}

/// What a run works with besides the turn: the cloud, where the cluster's secrets are kept, where
/// a token goes when the API is private, the user_data, and where its reports go.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub cloud: Cloud<'a>,
    pub store: &'a dyn SecretStore,
    pub script: &'a dyn TokenScript,
    pub bootstraps: &'a dyn Bootstraps,
    pub report: &'a dyn Report,
    pub options: &'a Options,
    /// Set once the run may have changed the cloud or the cluster.
    pub changed: &'a AtomicBool,
    /// The consoles seen done by earlier turns of this process ([`follow::FinishedConsoles`]).
    pub consoles: &'a follow::FinishedConsoles,
}

impl Env<'_> {
    fn changed(&self) {
        self.changed.store(true, Ordering::Relaxed);
    }
}

/// Why a converge stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    /// The cluster's secrets cannot be had (nothing was changed).
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The CCM credential may not be touched now (nothing was changed).
    #[error("{}", ccm_refusal(*.refusal, .cluster))]
    CcmCredential {
        refusal: RecreateRefusal,
        cluster: String,
    },
    /// The user_data's renderer cannot be made (nothing was changed).
    #[error(transparent)]
    Bootstrap(Cause),
    /// Control planes made again could collide with etcd members that could not be checked.
    #[error(
        "cannot check the etcd members of the control planes to be made again ({nodes}): {}; nothing was created",
        chain(.cause)
    )]
    Members {
        nodes: String,
        cause: StaleMembersError,
    },
    #[error("{0}")]
    Apply(ApplyError),
    #[error(transparent)]
    Follow(Box<BootstrapError>),
}

fn ccm_refusal(r: RecreateRefusal, cluster: &str) -> String {
    match r {
        RecreateRefusal::Unfinished => {
            format!("a rotation of cluster {cluster}'s CCM application credential has not finished")
        }
        RecreateRefusal::InUse => format!(
            "--recreate-ccm-credential would delete the application credential the running cloud \
             controller and CSI of cluster {cluster} use"
        ),
    }
}

impl ConvergeError {
    /// Bad input, found before anything was changed.
    #[must_use]
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ConvergeError::Secrets(_)
                | ConvergeError::CcmCredential { .. }
                | ConvergeError::Bootstrap(_)
        )
    }

    /// What the user can do about it, said to `to`.
    #[must_use]
    pub fn help(&self, to: Audience) -> Option<String> {
        match self {
            ConvergeError::CcmCredential {
                refusal: RecreateRefusal::Unfinished,
                cluster,
            } => Some(match to {
                Audience::Cli => format!(
                    "run `kos rotate credential {cluster}` again to finish it, then `kos up`"
                ),
                // Reached only when the run does not mend the credential itself (CcmMending).
                Audience::Operator => {
                    "the operator finishes the rotation before its next turn".to_owned()
                }
            }),
            ConvergeError::CcmCredential {
                refusal: RecreateRefusal::InUse,
                cluster,
            } => Some(format!(
                "`kos rotate credential {cluster}` makes a new one, puts it into the cluster and \
                 deletes the old one once the CCM and CSI run on the new one"
            )),
            ConvergeError::Members { .. } => Some(match to {
                Audience::Cli => {
                    "kos reaches etcd through the cluster's API (a port-forward to an etcd \
                               pod); run `kos up` where that API answers"
                        .into()
                }
                Audience::Operator => {
                    "kos reaches etcd through the cluster's API (a port-forward to an \
                                    etcd pod), which must answer from where the operator runs; it \
                                    tries again by itself"
                        .into()
                }
            }),
            ConvergeError::Apply(_) => Some(format!(
                "fix the cause, then {}: it continues where this run stopped",
                to.again()
            )),
            ConvergeError::Follow(e) => e.help(to),
            ConvergeError::Secrets(_) | ConvergeError::Store(_) | ConvergeError::Bootstrap(_) => {
                None
            }
        }
    }
}

/// One converge: everything but the servers to replace made as `plan` says, their bootstrap
/// followed as far as the options ask. The nodes whose bootstrap an interrupted run left failed, to
/// be made again.
///
/// # Errors
/// [`ConvergeError`].
/// `not_ready`: nodes the turn's health check leaves not healthy, which the API's Ready wait does
/// not count on.
pub async fn converge(
    env: &Env<'_>,
    p: &Turn,
    plan: &Plan,
    not_ready: usize,
) -> Result<Vec<String>, ConvergeError> {
    let store = env.store;
    let report = env.report;
    let cluster = p.graph.cluster.as_str();
    let exists = plan
        .actions
        .iter()
        .any(|a| a.kind == Kind::Server && a.existing.is_some());
    let Secrets {
        mut secrets,
        token_refreshed,
    } = crate::store::secrets_for_up(
        store,
        Seen {
            servers: exists,
            anything: p.seen,
        },
        env.options.reuse_local_secrets,
        env.options.leftovers,
        // The cluster compares the token's expiration with the cloud's clock.
        env.cloud.now(),
    )?;
    let recreate_ccm_credential =
        ccm_credential_to_recreate(plan, store, env.options.recreate_ccm_credential, report)?;
    // New nodes of a running cluster need the join token, which the first control plane's
    // cleanup deleted once the first nodes had joined.
    // A server an interrupted run made may still be joining: it needs the token as much as one
    // made now (it is only useful within the token's lifetime).
    // Nova stamped `created` by the cloud's clock.
    let now = env.cloud.now();
    let joining_since_earlier = plan.actions.iter().any(|a| {
        a.kind == Kind::Server
            && a.existing
                .as_ref()
                .and_then(|r| r.facts.machine.as_ref())
                .and_then(|m| m.created.as_deref())
                .and_then(|t| {
                    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .is_some_and(|t| {
                    now - t
                        < time::Duration::try_from(kos_bootstrap::DEFAULT_TOKEN_TTL)
                            .unwrap_or(time::Duration::ZERO)
                })
    });
    let joiners = exists
        && (joining_since_earlier
            || plan
                .actions
                .iter()
                .any(|a| a.kind == Kind::Server && matches!(a.op, Op::Create | Op::Replace)));
    // Before any server is made: a token valid for the boot window exists in the running cluster,
    // whatever the stored copy's age (a node that boots faster than the push below would find none).
    let formed = p.formation.formation == Formation::Formed;
    // Control planes joining a running cluster get its CAs as kubeadm's upload-certs gives them:
    // from a Secret kos puts there now under a key of this run's, valid two hours. Their user_data
    // holds the key, never a private key (only the first control plane, which makes the cluster,
    // carries the PKI).
    // Whether a running control plane ever ran kubeadm. When none has (the initializer still boots:
    // an earlier run's create of another control plane failed), the initializer uploads the
    // certificates under the stored key itself, and no etcd member of an earlier life exists. With
    // no control plane running at all, the cluster formed elsewhere (its API answered).
    let running = tokens::running_control_planes(plan);
    let kubeadm_ran = formed
        && tokens::joins_control_planes(plan)
        && (running.is_empty() || follow::kubeadm_ran(env.cloud.session, &running).await);
    let certs = exists && kubeadm_ran;
    if certs {
        secrets.certificate_key = kos_bootstrap::token::certificate_key(&mut rand::rng());
    }
    if exists && (token_refreshed || (joiners && formed) || certs) {
        env.changed();
        tokens::push(
            env.cloud,
            store,
            &p.spec,
            &secrets,
            token_refreshed,
            certs,
            env.script,
            report,
        )
        .await;
    }
    let bootstrap = env
        .bootstraps
        .bootstrap(p, secrets.clone())
        .map_err(ConvergeError::Bootstrap)?;
    let changes = plan.summary().changes();
    report.event(Event::Changes { cluster, changes });
    if plan.actions.iter().any(|a| {
        matches!(a.op, Op::Create | Op::Replace)
            && kos_lifecycle::formation::is_control_plane(&a.logical_id)
    }) {
        report.event(Event::Formation {
            cluster,
            reason: &p.formation.reason,
        });
    }
    // A control plane made again must not find its old etcd member registered.
    if formed {
        let joining = crate::members::joining(plan);
        if !joining.is_empty() {
            env.changed();
            match crate::members::remove_stale_members_stored(
                env.cloud,
                store,
                &joining,
                "its control plane is made again",
            )
            .await
            {
                Ok(lines) => {
                    for line in &lines {
                        report.event(Event::Member { line });
                    }
                }
                // No control plane ever ran kubeadm (the initializer still boots, the API is not
                // wired yet): there is no etcd, so no member of an earlier life to remove.
                Err(e) if !kubeadm_ran => report.event(Event::MembersNotChecked {
                    cluster,
                    why: &chain(&e),
                    kubeadm_ran: false,
                }),
                // Its port exists: it is made again, and its member may still be there.
                Err(cause) if joining.iter().any(|j| j.address.is_some()) => {
                    return Err(ConvergeError::Members {
                        nodes: joining
                            .iter()
                            .map(|j| j.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        cause,
                    });
                }
                Err(e) => report.event(Event::MembersNotChecked {
                    cluster,
                    why: &chain(&e),
                    kubeadm_ran: true,
                }),
            }
        }
    }
    let opts = ApplyOptions {
        parallelism: env.options.parallelism,
        recreate_ccm_credential,
        ..ApplyOptions::default()
    };
    if changes > 0 {
        env.changed();
    }
    let (tx, progress) = report.apply_progress(changes as u64);
    let result = kos_cluster::apply::apply(
        env.cloud.session,
        &p.graph,
        plan,
        bootstrap.as_ref(),
        opts,
        tx,
    )
    .await;
    let _ = progress.await;
    // The API's address is recorded as soon as the cloud gave it, a stopped apply's too: the next
    // run reaches the cluster through it (the etcd member check, the join token).
    let api_address = match &result {
        Ok(applied) => applied.api_address.as_ref(),
        Err(e) => e.report.api_address.as_ref(),
    };
    if let Some(a) = api_address {
        store.put_meta(&ClusterMeta {
            api_address: a.clone(),
            kubernetes_version: p.spec.kubernetes_version.to_string(),
        })?;
    }
    if let Err(e) = &result {
        report.event(Event::ApplyStopped {
            changes: e.report.changes(),
        });
    }
    let applied: ApplyReport = result.map_err(ConvergeError::Apply)?;
    report.event(Event::Applied {
        cluster: &applied.cluster,
        changes: applied.changes(),
        api_address: applied.api_address.as_deref(),
    });
    follow::bootstrap(
        env.cloud,
        &p.spec,
        &applied,
        &secrets,
        env.options.wait,
        joiners,
        certs,
        not_ready,
        env.consoles,
        report,
    )
    .await
    .map_err(|e| ConvergeError::Follow(Box::new(e)))
}

/// Whether this run makes the CCM credential again ([`kos_lifecycle::rotate::recreate`] decides
/// from the plan and what the store keeps).
fn ccm_credential_to_recreate(
    plan: &Plan,
    store: &dyn SecretStore,
    asked: bool,
    report: &dyn Report,
) -> Result<bool, ConvergeError> {
    let cluster = plan.cluster.as_str();
    let pending = store.read(Record::PendingCcmCredential)?.is_some();
    let stored = store.ccm_credential()?;
    let decided = kos_lifecycle::rotate::recreate(
        plan,
        pending,
        stored.as_ref().map(|c| c.id.as_str()),
        asked,
    )
    .map_err(|refusal| ConvergeError::CcmCredential {
        refusal,
        cluster: cluster.to_owned(),
    })?;
    let lost = |in_use| {
        report.event(Event::CcmSecretLost {
            cluster,
            location: &store.location(Record::CcmCredential),
            in_use,
        });
    };
    match decided {
        Recreate::Lost => lost(false),
        Recreate::LostInUse => lost(true),
        Recreate::No | Recreate::Asked => {}
    }
    Ok(decided.recreates())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator's users get no CLI command to run for a credential refusal: the operator
    /// mends the credential itself ([`CcmMending::Run`]).
    #[test]
    fn an_unfinished_rotations_help_names_no_cli_command_to_the_operator() {
        let e = ConvergeError::CcmCredential {
            refusal: RecreateRefusal::Unfinished,
            cluster: "demo".into(),
        };
        let cli = e.help(Audience::Cli).expect("help");
        assert!(cli.contains("kos rotate credential demo"), "{cli}");
        let operator = e.help(Audience::Operator).expect("help");
        assert!(!operator.contains("`kos "), "{operator}");
    }
}
