//! A run's outcome as one document: what a front end prints for `--output json`, folded from the
//! same [`Event`]s it renders as they come. It holds names, counts, addresses, the nodes' own
//! bootstrap markers and paths, never a secret (no event carries one).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

use super::{ApplyEvent, Event, Report};
use crate::follow::NodeState;

/// How a run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Done (until a failure is recorded).
    #[default]
    Ok,
    /// The cloud or the cluster failed; what was done stays done, the same command continues.
    Failed,
    /// Bad input: nothing was changed.
    Refused,
}

/// Why a run did not end well, as the user reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The error with its causes.
    pub message: String,
    /// What to do about it, when known.
    pub help: Option<String>,
    /// The diagnostics under it (each of a spec's problems), with their own help.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

/// Where a node's bootstrap is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodePhase {
    /// No marker yet.
    #[default]
    Waiting,
    Running,
    Done,
    Failed,
    /// Made by an earlier run, its markers scrolled out of its console: not followed.
    NotFollowed,
}

/// One node's bootstrap, as its console showed it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Node {
    pub state: NodePhase,
    /// The last marker seen (`kernel ok`; the guest's own text).
    pub last_marker: Option<String>,
    /// The final marker's outcome when done (`ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The step that failed, and the node's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Node {
    /// Takes on `state`, as a marker or the console's end said it. A node left `Waiting` by
    /// `consoles` after it stopped following it stays not followed.
    fn set(&mut self, state: NodeState) {
        match state {
            NodeState::Waiting => {
                if self.state != NodePhase::NotFollowed {
                    self.state = NodePhase::Waiting;
                }
            }
            NodeState::Running(last) => {
                self.state = NodePhase::Running;
                self.last_marker = Some(last);
            }
            NodeState::Done(outcome) => {
                self.state = NodePhase::Done;
                self.outcome = Some(outcome);
            }
            NodeState::Failed { step, reason } => {
                self.state = NodePhase::Failed;
                self.failed_step = Some(step);
                self.reason = Some(reason);
            }
        }
    }
}

/// The bootstrap phase: whether it was followed, and each followed node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Bootstrap {
    /// `false` when the run stopped at the infrastructure (`--wait infra`) or never got here.
    pub followed: bool,
    /// The nodes followed in this run, by logical id.
    pub nodes: BTreeMap<String, Node>,
}

impl Bootstrap {
    /// Folds in `event`; `true` when it changed the nodes (a front end redraws them then).
    pub fn record(&mut self, event: &Event<'_>) -> bool {
        match *event {
            Event::FollowingConsoles { .. } => {
                self.followed = true;
                false
            }
            Event::Marker { node, marker } => {
                self.followed = true;
                let n = self.nodes.entry(node.to_owned()).or_default();
                // As `follow::parse` adds them up: the first failure wins, and after the final
                // `bootstrap` marker the node is done whatever its cleanup says.
                if matches!(n.state, NodePhase::Done | NodePhase::Failed) {
                    return false;
                }
                n.last_marker = Some(marker.to_owned());
                n.set(crate::follow::marker_state(marker));
                true
            }
            Event::Scrolled { node, .. } => {
                self.nodes.entry(node.to_owned()).or_default().state = NodePhase::NotFollowed;
                true
            }
            Event::Bootstrapped { nodes, .. } => {
                self.followed = true;
                for (id, state) in nodes {
                    self.nodes.entry(id.clone()).or_default().set(state.clone());
                }
                true
            }
            _ => false,
        }
    }
}

/// The cluster's API as the run last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Api {
    /// Not checked: the run was asked to stop at the bootstrap.
    NotChecked,
    /// Not checked, and why (a private endpoint, an unknown address).
    Skipped { why: String },
    /// Waited for (the run stopped meanwhile).
    Waiting { nodes_expected: u32 },
    /// `/readyz` ok, `nodes_ready` nodes Ready and initialised.
    Ready { nodes_ready: usize },
}

/// Encryption at rest moved by the run (`kos rotate encryption-key`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Encryption {
    /// Each step as said (key names and phase, never key material).
    pub steps: Vec<String>,
    pub secrets_rewritten: usize,
}

/// The CCM credential a rotation left the cluster with (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Credential {
    pub name: String,
    pub id: String,
    /// Workloads rolled onto it.
    pub rolled: Vec<String>,
    /// Credentials deleted (the old one, and any a killed run left).
    pub deleted: Vec<String>,
}

impl From<&kos_lifecycle::rotate::Rotated> for Credential {
    fn from(r: &kos_lifecycle::rotate::Rotated) -> Credential {
        Credential {
            name: r.name.clone(),
            id: r.id.clone(),
            rolled: r.rolled.clone(),
            deleted: r.deleted.clone(),
        }
    }
}

/// A run's outcome, from its events and what the front end adds (the cluster, a failure).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The cluster's name; none when the run stopped before knowing it (an unreadable spec).
    pub cluster: Option<String>,
    pub outcome: Outcome,
    /// Changes made by every turn's apply, a stopped one's too.
    pub changes: usize,
    /// `https://<address>:6443`, once known.
    pub api_endpoint: Option<String>,
    pub bootstrap: Bootstrap,
    /// None when the run never got to the API.
    pub kubernetes: Option<Api>,
    /// Nodes Ready and initialised, when the API was checked.
    pub nodes_ready: Option<usize>,
    /// Nodes removed (a smaller group) and replaced.
    pub nodes_removed: Vec<String>,
    pub nodes_replaced: Vec<String>,
    /// What each group's health check found in the run's last judged turn; none when no turn
    /// judged (a cluster being made, a run without `--repair`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Vec<GroupHealth>>,
    /// Where the join token's script was written when the API could not be reached (a path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<Credential>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// What the run warned about and went on: preflight's warnings (with their help), nodes
    /// left undrained or kept, repairs held back, a token or kubeadm-certs left in the cluster.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One group's health, as its check found it (a MachineHealthCheck's status, in kos's words).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupHealth {
    /// `cp` or a pool's name.
    pub group: String,
    pub expected: usize,
    pub healthy: usize,
    /// Each unhealthy node and what was found.
    pub unhealthy: Vec<UnhealthyNode>,
    /// Nodes not healthy, not yet unhealthy for long enough.
    pub pending: Vec<String>,
    /// Whether the unhealthy may be replaced now.
    pub remediation_allowed: bool,
    /// Why not, when not (`maxUnhealthy` exceeded, or the check switched off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// A node its group's health check finds unhealthy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnhealthyNode {
    pub node: String,
    pub found: String,
}

impl From<&kos_lifecycle::roll::GroupHealth> for GroupHealth {
    fn from(g: &kos_lifecycle::roll::GroupHealth) -> Self {
        use kos_lifecycle::health::Remediation;
        let allowed = g.remediation == Remediation::Allowed;
        GroupHealth {
            group: g.group.clone(),
            expected: g.expected,
            healthy: g.healthy,
            unhealthy: g
                .unhealthy
                .iter()
                .map(|(node, found)| UnhealthyNode {
                    node: node.clone(),
                    found: found.clone(),
                })
                .collect(),
            pending: g.pending.clone(),
            remediation_allowed: allowed,
            held: (!allowed).then(|| g.remediation.to_string()),
        }
    }
}

impl Summary {
    #[must_use]
    pub fn new(cluster: Option<&str>) -> Summary {
        Summary {
            cluster: cluster.map(str::to_owned),
            ..Summary::default()
        }
    }

    /// Folds in one event.
    pub fn record(&mut self, event: &Event<'_>) {
        self.bootstrap.record(event);
        match *event {
            Event::Applied {
                changes,
                api_address,
                ..
            } => {
                self.changes += changes;
                if let Some(a) = api_address {
                    self.api_endpoint = Some(format!("https://{a}:6443"));
                }
            }
            Event::ApplyStopped { changes } => self.changes += changes,
            Event::ApiNotChecked => self.kubernetes = Some(Api::NotChecked),
            Event::ApiSkipped { why } => {
                self.kubernetes = Some(Api::Skipped {
                    why: why.to_owned(),
                });
            }
            Event::ApiWaiting { nodes } => {
                self.kubernetes = Some(Api::Waiting {
                    nodes_expected: nodes,
                });
            }
            Event::ApiReady { nodes } => {
                self.kubernetes = Some(Api::Ready { nodes_ready: nodes });
                self.nodes_ready = Some(nodes);
            }
            Event::Leaving {
                node, scale_down, ..
            } => {
                let list = if scale_down {
                    &mut self.nodes_removed
                } else {
                    &mut self.nodes_replaced
                };
                if !list.iter().any(|n| n == node) {
                    list.push(node.to_owned());
                }
            }
            // Each turn judges every group: the last turn's view is the run's.
            Event::Health { groups, .. } => {
                self.health = Some(groups.iter().map(GroupHealth::from).collect());
            }
            Event::TokenScript { location, .. } => self.token_script = Some(location.to_owned()),
            Event::KeysStep { shown, .. } => self
                .encryption
                .get_or_insert_with(Encryption::default)
                .steps
                .push(shown.to_owned()),
            Event::SecretsRewritten { secrets, .. } => {
                self.encryption
                    .get_or_insert_with(Encryption::default)
                    .secrets_rewritten += secrets;
            }
            Event::PreflightWarnings { warnings } => {
                for d in warnings.diagnostics() {
                    // The message names its field already.
                    self.warnings.push(match &d.help {
                        Some(help) => format!("{} (help: {help})", d.message),
                        None => d.message.clone(),
                    });
                }
            }
            Event::NotDrained { nodes, why } => {
                self.warnings.push(format!("not drained: {nodes}: {why}"))
            }
            Event::NodeKept { node, why } => {
                self.warnings.push(format!("Node {node} kept: {why}"));
            }
            Event::RepairHeld { group, why, .. } => self
                .warnings
                .push(format!("repair of {group} held back: {why}")),
            Event::AddonsNotMoved { why } => {
                self.warnings.push(format!("addons not moved: {why}"));
            }
            Event::TokenKept { why } => self
                .warnings
                .push(format!("join token left in the cluster: {why}")),
            Event::CertsKept { why } => self
                .warnings
                .push(format!("kubeadm-certs left in the cluster: {why}")),
            _ => {}
        }
    }

    /// Records how the run failed: `refused` when nothing was changed (bad input).
    pub fn fail(&mut self, refused: bool, error: Failure) {
        self.outcome = if refused {
            Outcome::Refused
        } else {
            Outcome::Failed
        };
        self.error = Some(error);
    }
}

/// A [`Report`] that hands every event on to `inner` (the renderer) and folds it into a
/// [`Summary`].
pub struct Summarised<'r> {
    inner: &'r dyn Report,
    summary: Mutex<Summary>,
}

impl<'r> Summarised<'r> {
    #[must_use]
    pub fn new(inner: &'r dyn Report, summary: Summary) -> Summarised<'r> {
        Summarised {
            inner,
            summary: Mutex::new(summary),
        }
    }

    /// Changes the summary (what the front end adds: a rotated credential).
    pub fn update(&self, f: impl FnOnce(&mut Summary)) {
        match self.summary.lock() {
            Ok(mut s) => f(&mut s),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// The summary so far.
    #[must_use]
    pub fn summary(&self) -> Summary {
        self.summary
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }
}

impl Report for Summarised<'_> {
    fn event(&self, event: Event<'_>) {
        match self.summary.lock() {
            Ok(mut s) => s.record(&event),
            Err(p) => p.into_inner().record(&event),
        }
        self.inner.event(event);
    }

    fn apply_progress(&self, total: u64) -> (Sender<ApplyEvent>, JoinHandle<()>) {
        self.inner.apply_progress(total)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_run_folds_into_one_summary() {
        let mut s = Summary::new(Some("demo"));
        s.record(&Event::Applied {
            cluster: "demo",
            changes: 12,
            api_address: Some("192.0.2.10"),
        });
        s.record(&Event::FollowingConsoles {
            nodes: 2,
            deadline: Duration::from_secs(60),
        });
        s.record(&Event::Marker {
            node: "cp-0",
            marker: "kernel ok",
        });
        s.record(&Event::Marker {
            node: "worker-0",
            marker: "packages failed: no mirror",
        });
        let mut nodes = BTreeMap::new();
        nodes.insert("cp-0".to_owned(), NodeState::Done("ok".into()));
        s.record(&Event::Bootstrapped {
            deadline: Duration::from_secs(60),
            nodes: &nodes,
        });
        s.record(&Event::ApiWaiting { nodes: 2 });
        s.record(&Event::ApiReady { nodes: 2 });
        s.record(&Event::Applied {
            cluster: "demo",
            changes: 1,
            api_address: None,
        });
        assert_eq!(s.changes, 13);
        assert_eq!(s.api_endpoint.as_deref(), Some("https://192.0.2.10:6443"));
        assert!(s.bootstrap.followed);
        assert_eq!(s.bootstrap.nodes["cp-0"].state, NodePhase::Done);
        assert_eq!(s.bootstrap.nodes["cp-0"].outcome.as_deref(), Some("ok"));
        assert_eq!(
            s.bootstrap.nodes["cp-0"].last_marker.as_deref(),
            Some("kernel ok")
        );
        assert_eq!(s.bootstrap.nodes["worker-0"].state, NodePhase::Failed);
        assert_eq!(
            s.bootstrap.nodes["worker-0"].failed_step.as_deref(),
            Some("packages")
        );
        assert_eq!(
            s.bootstrap.nodes["worker-0"].reason.as_deref(),
            Some("no mirror")
        );
        assert_eq!(s.kubernetes, Some(Api::Ready { nodes_ready: 2 }));
        assert_eq!(s.nodes_ready, Some(2));
        assert_eq!(s.outcome, Outcome::Ok);
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["outcome"], "ok");
        assert_eq!(json["kubernetes"]["state"], "ready");
        assert_eq!(json["bootstrap"]["nodes"]["worker-0"]["state"], "failed");
        assert!(json.get("error").is_none(), "{json}");
    }

    #[test]
    fn warnings_are_kept_with_their_help() {
        let mut s = Summary::new(Some("demo"));
        let mut report = kos_cluster::diagnostics::Report::new("demo.yaml", "");
        let mut d = kos_cluster::diagnostics::Diagnostic::warning(
            kos_cluster::diagnostics::Code::QuotaUnchecked,
            "nodePools[0].flavor",
            "the compute quota could not be read",
        );
        d.help = Some("ask the cloud's admin".into());
        report.push(d);
        s.record(&Event::PreflightWarnings { warnings: &report });
        s.record(&Event::NotDrained {
            nodes: "workers-2",
            why: "the API does not answer",
        });
        // A stopped apply's changes count too.
        s.record(&Event::ApplyStopped { changes: 4 });
        s.record(&Event::Applied {
            cluster: "demo",
            changes: 1,
            api_address: None,
        });
        assert_eq!(
            s.warnings,
            [
                "nodePools[0].flavor: the compute quota could not be read (help: ask the cloud's admin)",
                "not drained: workers-2: the API does not answer",
            ]
        );
        let doc = serde_json::to_value(&s).expect("json");
        assert_eq!(doc["warnings"].as_array().map(Vec::len), Some(2));
        assert_eq!(s.changes, 5);
        // None: no key at all.
        let doc = serde_json::to_value(Summary::new(None)).expect("json");
        assert!(doc.get("warnings").is_none());
    }

    /// The last turn's judgement is the run's; a held group says why.
    #[test]
    fn health_is_the_last_judged_turn() {
        use kos_lifecycle::health::Remediation;
        use kos_lifecycle::roll::GroupHealth as Judged;
        let mut s = Summary::new(Some("demo"));
        assert!(
            serde_json::to_value(&s)
                .expect("json")
                .get("health")
                .is_none()
        );
        let workers = |unhealthy: Vec<(String, String)>, remediation| Judged {
            group: "workers".into(),
            expected: 5,
            healthy: 5 - unhealthy.len(),
            unhealthy,
            pending: Vec::new(),
            remediation,
        };
        let sick: Vec<(String, String)> = (0..3)
            .map(|i| {
                (
                    format!("demo-workers-{i}"),
                    "its Node has been deleted".into(),
                )
            })
            .collect();
        let held = Remediation::Restricted {
            total: 5,
            not_healthy: 3,
            max: 2,
        };
        s.record(&Event::Health {
            cluster: "demo",
            groups: &[workers(sick, held)],
        });
        let doc = serde_json::to_value(&s).expect("json");
        assert_eq!(doc["health"][0]["healthy"], 2);
        assert_eq!(doc["health"][0]["remediation_allowed"], false);
        assert_eq!(doc["health"][0]["unhealthy"][2]["node"], "demo-workers-2");
        assert!(
            doc["health"][0]["held"]
                .as_str()
                .is_some_and(|h| h.contains("maxUnhealthy: 2")),
            "{doc}"
        );
        s.record(&Event::Health {
            cluster: "demo",
            groups: &[workers(Vec::new(), Remediation::Allowed)],
        });
        let doc = serde_json::to_value(&s).expect("json");
        assert_eq!(doc["health"][0]["healthy"], 5);
        assert!(doc["health"][0].get("held").is_none(), "{doc}");
    }

    #[test]
    fn a_failure_is_refused_or_failed() {
        let mut s = Summary::new(None);
        s.fail(
            true,
            Failure {
                message: "cannot read".into(),
                help: Some("check the path".into()),
                details: Vec::new(),
            },
        );
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["outcome"], "refused");
        assert_eq!(json["cluster"], serde_json::Value::Null);
        assert_eq!(json["error"]["help"], "check the path");
        s.fail(false, Failure::default());
        assert_eq!(s.outcome, Outcome::Failed);
    }

    #[test]
    fn summarised_hands_every_event_on() {
        let inner = super::super::Recorded::default();
        let s = Summarised::new(&inner, Summary::new(Some("demo")));
        s.event(Event::ApiSkipped { why: "private" });
        s.event(Event::Leaving {
            cluster: "demo",
            node: "worker-2",
            scale_down: true,
            changes: "",
        });
        assert_eq!(inner.events().len(), 2);
        let sum = s.summary();
        assert_eq!(
            sum.kubernetes,
            Some(Api::Skipped {
                why: "private".into()
            })
        );
        assert_eq!(sum.nodes_removed, vec!["worker-2".to_owned()]);
    }
}
