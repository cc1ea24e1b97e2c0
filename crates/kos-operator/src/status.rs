//! A Cluster's status from what a reconcile found: conditions as Kubernetes writes them (a
//! condition's `lastTransitionTime` moves only when its status does), nodes from kos-control's
//! run summary. Pure: the reconciler writes what these return.

use kos_control::report::{NodePhase, Summary};

use crate::resource::{
    ClusterStatus, Condition, GroupHealthStatus, NodeStatus, UnhealthyNodeStatus,
};

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
/// Whether every judged node is healthy (its reason says whether the unhealthy are being replaced
/// or held back).
pub const NODES_HEALTHY: &str = "NodesHealthy";

/// What a reconcile concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A run is under way.
    Progressing,
    /// The run converged: the cluster is as its spec says.
    Ready,
    /// Stopped: `reason` (CamelCase) and the message kos would print.
    Degraded { reason: String, message: String },
}

/// Sets condition `kind` in `conditions`, keeping its transition time when its status is
/// unchanged.
fn set(
    conditions: &mut Vec<Condition>,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &str,
) {
    let status = if status { "True" } else { "False" };
    let next = Condition {
        kind: kind.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: now.to_owned(),
        observed_generation: generation,
    };
    match conditions.iter_mut().find(|c| c.kind == kind) {
        Some(c) => {
            let since = if c.status == status {
                c.last_transition_time.clone()
            } else {
                now.to_owned()
            };
            *c = Condition {
                last_transition_time: since,
                ..next
            };
        }
        None => conditions.push(next),
    }
}

/// The longest message a condition carries (the API server allows 32 KiB; a status that big is
/// no longer read by anyone).
const MAX_MESSAGE: usize = 4096;

fn bounded(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The status after `verdict`, from the one before (`old`), at the spec's `generation`.
#[must_use]
pub fn next(
    old: Option<&ClusterStatus>,
    verdict: &Verdict,
    generation: Option<i64>,
    now: &str,
) -> ClusterStatus {
    let mut s = old.cloned().unwrap_or_default();
    let g = generation;
    match verdict {
        Verdict::Progressing => {
            set(
                &mut s.conditions,
                PROGRESSING,
                true,
                "Reconciling",
                "kos is converging the cluster on its spec",
                g,
                now,
            );
        }
        Verdict::Ready => {
            set(
                &mut s.conditions,
                READY,
                true,
                "Converged",
                "the cluster is as its spec says",
                g,
                now,
            );
            set(
                &mut s.conditions,
                PROGRESSING,
                false,
                "Converged",
                "",
                g,
                now,
            );
            set(&mut s.conditions, DEGRADED, false, "Converged", "", g, now);
            s.observed_generation = g;
        }
        Verdict::Degraded { reason, message } => {
            let message = bounded(message);
            set(&mut s.conditions, READY, false, reason, &message, g, now);
            set(&mut s.conditions, PROGRESSING, false, reason, "", g, now);
            set(&mut s.conditions, DEGRADED, true, reason, &message, g, now);
            s.observed_generation = g;
        }
    }
    s
}

/// Sets the groups' health and [`NODES_HEALTHY`] from what the run's last judged turn found;
/// leaves both as they were when no turn judged the nodes (a cluster being made).
pub fn judged(s: &mut ClusterStatus, summary: &Summary, generation: Option<i64>, now: &str) {
    let Some(groups) = &summary.health else {
        return;
    };
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    s.health = groups
        .iter()
        .map(|g| GroupHealthStatus {
            group: g.group.clone(),
            expected_nodes: count(g.expected),
            healthy_nodes: count(g.healthy),
            remediation_allowed: g.remediation_allowed,
            message: g.held.clone(),
            unhealthy: g
                .unhealthy
                .iter()
                .map(|u| UnhealthyNodeStatus {
                    name: u.node.clone(),
                    reason: bounded(&u.found),
                })
                .collect(),
            pending: g.pending.clone(),
        })
        .collect();
    let sick: Vec<String> = groups
        .iter()
        .filter(|g| !g.unhealthy.is_empty())
        .map(|g| {
            let nodes: Vec<&str> = g.unhealthy.iter().map(|u| u.node.as_str()).collect();
            match &g.held {
                Some(why) => format!("{}: {} unhealthy, held: {why}", g.group, nodes.join(", ")),
                None => format!(
                    "{}: {} unhealthy, being replaced",
                    g.group,
                    nodes.join(", ")
                ),
            }
        })
        .collect();
    let held = groups
        .iter()
        .any(|g| !g.unhealthy.is_empty() && g.held.is_some());
    let (healthy, reason) = match (sick.is_empty(), held) {
        (true, _) => (true, "Healthy"),
        (false, true) => (false, "RemediationHeld"),
        (false, false) => (false, "Remediating"),
    };
    let pending: usize = groups.iter().map(|g| g.pending.len()).sum();
    let message = if healthy {
        match pending {
            0 => "every node is healthy".to_owned(),
            n => format!("no node is unhealthy; {n} not Ready inside its health check's timeout"),
        }
    } else {
        bounded(&sick.join("; "))
    };
    set(
        &mut s.conditions,
        NODES_HEALTHY,
        healthy,
        reason,
        &message,
        generation,
        now,
    );
}

/// The nodes a run followed, by logical id, as the status lists them.
#[must_use]
pub fn nodes(summary: &Summary) -> Vec<NodeStatus> {
    summary
        .bootstrap
        .nodes
        .iter()
        .map(|(name, n)| NodeStatus {
            name: name.clone(),
            phase: match n.state {
                NodePhase::Waiting => "Waiting",
                NodePhase::Running => "Bootstrapping",
                NodePhase::Done => "Done",
                NodePhase::Failed => "Failed",
                NodePhase::NotFollowed => "NotFollowed",
            }
            .to_owned(),
            message: match (&n.failed_step, &n.reason) {
                (Some(step), Some(reason)) => Some(format!("{step}: {reason}")),
                (Some(step), None) => Some(step.clone()),
                (None, reason) => reason.clone().or_else(|| n.last_marker.clone()),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond<'a>(s: &'a ClusterStatus, kind: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.kind == kind).expect(kind)
    }

    #[test]
    fn a_transition_time_moves_only_with_the_status() {
        let a = next(None, &Verdict::Progressing, Some(1), "t1");
        assert_eq!(cond(&a, PROGRESSING).status, "True");
        assert_eq!(a.observed_generation, None, "nothing concluded yet");
        let b = next(Some(&a), &Verdict::Progressing, Some(1), "t2");
        assert_eq!(cond(&b, PROGRESSING).last_transition_time, "t1");
        let c = next(Some(&b), &Verdict::Ready, Some(1), "t3");
        assert_eq!(cond(&c, PROGRESSING).last_transition_time, "t3");
        assert_eq!(cond(&c, READY).status, "True");
        assert_eq!(cond(&c, DEGRADED).status, "False");
        assert_eq!(c.observed_generation, Some(1));
        let d = next(
            Some(&c),
            &Verdict::Degraded {
                reason: "SpecInvalid".into(),
                message: "spec.controlPlane.count: 2 control planes".into(),
            },
            Some(2),
            "t4",
        );
        assert_eq!(cond(&d, READY).status, "False");
        assert_eq!(cond(&d, READY).reason, "SpecInvalid");
        assert_eq!(
            cond(&d, DEGRADED).message,
            "spec.controlPlane.count: 2 control planes"
        );
        assert_eq!(cond(&d, DEGRADED).observed_generation, Some(2));
        assert_eq!(d.observed_generation, Some(2));
    }

    /// A held group is RemediationHeld with its nodes and why; once healthy the condition turns
    /// True; a run that judged nothing leaves both as they were.
    #[test]
    fn health_and_its_condition_follow_the_last_judgement() {
        use kos_control::report::{GroupHealth, UnhealthyNode};
        let mut s = next(None, &Verdict::Ready, Some(1), "t1");
        let mut summary = Summary::new(Some("demo"));
        judged(&mut s, &summary, Some(1), "t1");
        assert!(s.health.is_empty());
        assert!(!s.conditions.iter().any(|c| c.kind == NODES_HEALTHY));
        summary.health = Some(vec![
            GroupHealth {
                group: "cp".into(),
                expected: 1,
                healthy: 1,
                remediation_allowed: true,
                ..GroupHealth::default()
            },
            GroupHealth {
                group: "workers".into(),
                expected: 5,
                healthy: 2,
                unhealthy: (0..3)
                    .map(|i| UnhealthyNode {
                        node: format!("demo-workers-{i}"),
                        found: "condition Ready on its Node is reporting status Unknown for 300s or more".into(),
                    })
                    .collect(),
                pending: Vec::new(),
                remediation_allowed: false,
                held: Some("remediation is not allowed (maxUnhealthy: 2)".into()),
            },
        ]);
        judged(&mut s, &summary, Some(1), "t2");
        assert_eq!(s.health[1].healthy_nodes, 2);
        assert_eq!(s.health[1].unhealthy[0].name, "demo-workers-0");
        assert!(!s.health[1].remediation_allowed);
        let c = cond(&s, NODES_HEALTHY);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "RemediationHeld")
        );
        assert!(c.message.contains("demo-workers-2") && c.message.contains("maxUnhealthy"));
        summary.health = Some(vec![GroupHealth {
            group: "workers".into(),
            expected: 5,
            healthy: 5,
            remediation_allowed: true,
            ..GroupHealth::default()
        }]);
        judged(&mut s, &summary, Some(1), "t3");
        let c = cond(&s, NODES_HEALTHY);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Healthy"));
        assert_eq!(c.last_transition_time, "t3");
        summary.health = None;
        judged(&mut s, &summary, Some(1), "t4");
        assert_eq!(s.health.len(), 1, "kept when nothing was judged");
    }

    #[test]
    fn a_long_message_is_cut_on_a_character() {
        let long = "é".repeat(MAX_MESSAGE);
        let s = next(
            None,
            &Verdict::Degraded {
                reason: "RunFailed".into(),
                message: long,
            },
            None,
            "t",
        );
        assert!(cond(&s, DEGRADED).message.len() <= MAX_MESSAGE + "…".len());
    }
}
