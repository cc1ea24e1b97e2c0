//! A converge's bootstrap followed: the new servers' consoles, then the cluster through its API,
//! as far as the run asks; the join token kept there while nodes join and taken out after.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kos_bootstrap::ClusterSecrets;
use kos_cluster::ClusterSpec;
use kos_cluster::apply::ApplyReport;
use kos_cluster::plan::Op;
use kos_lifecycle::api::chain;

use super::{ApiPhase, FinishedConsoles, FollowError, NotReady, Target, Timing};
use crate::connect::{ClientError, Cloud, api_client};
use crate::report::{Event, Report};
use crate::tokens;
use kos_lifecycle::audience::Audience;

/// How far a run follows a cluster after its infrastructure is converged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wait {
    /// Once every resource exists and the servers are ACTIVE.
    Infra,
    /// Also every new node's bootstrap markers on its console.
    Bootstrap,
    /// Also the Kubernetes API and every node Ready, when the API answers from here.
    #[default]
    Ready,
}

/// Why following the bootstrap stopped the run.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A first control plane tries its remaining steps again by itself: nothing to make again.
    #[error("bootstrap: {0}")]
    Retrying(FollowError),
    /// A first control plane failed at a step only it runs, after `kubeadm init`.
    #[error("bootstrap: {error}")]
    AfterInit { error: FollowError, cluster: String },
    /// A node this run made failed its bootstrap.
    #[error("bootstrap: {0}")]
    Failed(FollowError),
    #[error("cannot reach the API")]
    Client(#[source] ClientError),
    #[error(transparent)]
    NotReady(#[from] NotReady),
}

impl BootstrapError {
    /// What the user can do about it, said to `to`.
    #[must_use]
    pub fn help(&self, to: Audience) -> Option<String> {
        match self {
            BootstrapError::Retrying(e) => Some(format!(
                "{} tries again by itself every minute, and its console says why it has not \
                 succeeded yet (its log: /var/log/kos-bootstrap.log). Fix that cause if it is yours \
                 (the CNI manifest's URL, the node's way to the internet); {}",
                e.retrying.join(", "),
                match to {
                    Audience::Cli => "`kos up` again follows it until it is done",
                    Audience::Operator => "the operator follows it until it is done",
                }
            )),
            BootstrapError::AfterInit { cluster, .. } => Some(format!(
                "only the first control plane applies the CNI and the addons, after kubeadm init: a \
                 control plane made again would join a cluster that never gets them, so kos does not \
                 make it again. The node's log is /var/log/kos-bootstrap.log; fix the cause, then {}",
                match to {
                    Audience::Cli => format!(
                        "delete the cluster (`kos down {cluster}`) and run `kos up` again"
                    ),
                    Audience::Operator => {
                        "delete the Cluster (the operator tears the cluster down) and create it again"
                            .to_owned()
                    }
                }
            )),
            BootstrapError::Failed(_) => Some(format!(
                "the node's log is /var/log/kos-bootstrap.log; its console: `openstack console log \
                 show <server>`. Fix the cause and delete the node's server; {}",
                match to {
                    Audience::Cli => "`kos up` again makes it again",
                    Audience::Operator => "the operator makes it again",
                }
            )),
            BootstrapError::NotReady(_) => Some(
                "the cloud controller removes the uninitialized taint: check its pods in kube-system"
                    .into(),
            ),
            BootstrapError::Client(_) => None,
        }
    }
}

/// What a converge made, followed as far as `wait` asks: the servers' consoles for their bootstrap
/// markers, then the cluster through its API when that is reachable from here. The nodes an
/// interrupted run made whose bootstrap failed, to be made again.
///
/// `joiners`: this run added nodes to a running cluster. Its join token (with `certs`, and
/// kubeadm-certs) is put into the cluster as soon as the API answers (the first control plane's
/// cleanup deleted it when the first nodes had joined; kubeadm join retries meanwhile), and deleted
/// again once every node is Ready.
///
/// `finished`: the consoles already seen done, not read again ([`FinishedConsoles`]).
///
/// # Errors
/// [`BootstrapError`], naming the node when a step failed.
#[allow(clippy::too_many_arguments)]
pub async fn bootstrap(
    cloud: Cloud<'_>,
    spec: &ClusterSpec,
    applied: &ApplyReport,
    secrets: &ClusterSecrets,
    wait: Wait,
    joiners: bool,
    certs: bool,
    not_ready: usize,
    finished: &FinishedConsoles,
    report: &dyn Report,
) -> Result<Vec<String>, BootstrapError> {
    if wait == Wait::Infra {
        report.event(Event::BootstrapNotFollowed);
        return Ok(Vec::new());
    }
    // Stated in the cloud's time, which a simulated cloud's answers show running fast.
    let timing = Timing::of_cloud(cloud.session);
    // The servers as the run left them: listed once by its observe, never again here.
    let targets: Vec<Target> = applied
        .nodes
        .iter()
        .filter_map(|(logical, op)| {
            Some(Target {
                created_now: matches!(op, Op::Create | Op::Replace),
                logical_id: logical.clone(),
                server_id: applied.servers.get(logical)?.clone(),
            })
        })
        .collect();
    report.event(Event::FollowingConsoles {
        nodes: targets.len(),
        deadline: timing.deadline,
    });
    let token_pushed = AtomicBool::new(false);
    // Kept there while the nodes join: the first control plane's cleanup may delete it again when
    // the nodes it expected have joined.
    let push = async {
        let Some(address) = applied.api_address.as_deref().filter(|_| joiners) else {
            return std::future::pending().await;
        };
        let connect = || async { api_client(cloud, spec, address, secrets).await };
        let now = || cloud.now();
        tokens::keep_for_joiners(
            connect,
            &now,
            secrets,
            certs,
            timing.poll(),
            &token_pushed,
            report,
        )
        .await
    };
    let followed = tokio::select! {
        f = super::consoles(cloud.session, &targets, &timing, finished, report) => f,
        never = push => match never {},
    };
    let followed = match followed {
        Ok(f) => f,
        // Only nodes an interrupted run made failed: the run makes them again.
        Err(e) if e.failed_now.is_empty() && !e.failed_earlier.is_empty() => {
            report.event(Event::FailedEarlier {
                why: &e.to_string(),
            });
            return Ok(e.failed_earlier);
        }
        // A first control plane tries its remaining steps again by itself, every minute: nothing to
        // make again, and the next run follows it to the end.
        Err(e) if !e.retrying.is_empty() => return Err(BootstrapError::Retrying(e)),
        Err(e) if e.after_init => {
            return Err(BootstrapError::AfterInit {
                error: e,
                cluster: applied.cluster.clone(),
            });
        }
        Err(e) => return Err(BootstrapError::Failed(e)),
    };
    report.event(Event::Bootstrapped {
        deadline: timing.deadline(),
        nodes: &followed.nodes,
    });
    if wait == Wait::Bootstrap {
        report.event(Event::ApiNotChecked);
        return Ok(Vec::new());
    }
    let Some(address) = &applied.api_address else {
        report.event(Event::ApiSkipped {
            why: "its address is unknown",
        });
        return Ok(Vec::new());
    };
    let kube = api_client(cloud, spec, address, secrets)
        .await
        .map_err(BootstrapError::Client)?;
    // Nodes the health check leaves not healthy are not waited for.
    let nodes = (spec.node_count() as usize).saturating_sub(not_ready);
    report.event(Event::ApiWaiting {
        nodes: u32::try_from(nodes).unwrap_or(u32::MAX),
    });
    let probe = timing.deadline().min(Duration::from_secs(60));
    // The nodes this run made: a node that dies meanwhile does not hold their wait.
    let fresh: std::collections::BTreeSet<String> =
        match kos_cluster::names::ClusterName::new(&applied.cluster) {
            Ok(cluster) => targets
                .iter()
                .filter(|t| t.created_now)
                .map(|t| kos_cluster::names::resource_name(&cluster, &t.logical_id))
                .collect(),
            Err(_) => std::collections::BTreeSet::new(),
        };
    match super::api(&kube, nodes, &fresh, &timing, probe, report).await? {
        ApiPhase::Ready { nodes } => {
            report.event(Event::ApiReady { nodes });
            // What the cleanup does after the first nodes: the certificates and the token must not
            // outlive the joins.
            if certs && let Err(e) = tokens::delete_certs(&kube).await {
                report.event(Event::CertsKept { why: &chain(&e) });
            }
            if token_pushed.load(Ordering::Relaxed) {
                match tokens::delete_token(&kube, secrets).await {
                    Ok(()) => report.event(Event::TokenDeleted),
                    Err(e) => report.event(Event::TokenKept { why: &chain(&e) }),
                }
            }
            Ok(Vec::new())
        }
        ApiPhase::Skipped(why) => {
            report.event(Event::ApiSkipped { why: &why });
            Ok(Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::Stopped;

    fn failed(after_init: bool, retrying: Vec<String>) -> FollowError {
        FollowError {
            stopped: Stopped::Failed(vec!["cp-0 failed at cni: no route".into()]),
            failed_earlier: Vec::new(),
            failed_now: vec!["cp-0".into()],
            after_init,
            retrying,
        }
    }

    /// kos-operator puts the help into a Cluster's Degraded condition: it tells what the operator
    /// does, never a CLI command its user may not have.
    #[test]
    fn the_operator_is_told_what_it_does_and_the_cli_what_to_run() {
        let errors = [
            BootstrapError::Retrying(failed(false, vec!["cp-0".into()])),
            BootstrapError::AfterInit {
                error: failed(true, Vec::new()),
                cluster: "demo".into(),
            },
            BootstrapError::Failed(failed(false, Vec::new())),
        ];
        for e in &errors {
            let cli = e.help(Audience::Cli).expect("help");
            let operator = e.help(Audience::Operator).expect("help");
            assert!(cli.contains("`kos up` again"), "{cli}");
            assert!(!operator.contains("`kos "), "{operator}");
            assert!(operator.contains("the operator"), "{operator}");
        }
    }
}
