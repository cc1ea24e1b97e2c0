//! Which nodes of a group (the control planes, or one pool) are unhealthy, and whether they may be
//! replaced, as Cluster API's MachineHealthCheck decides it (read from its
//! `internal/controllers/machinehealthcheck`: `needsRemediation`, `healthCheckTargets` and the
//! `maxUnhealthy` check of the reconciler), for a group's rule ([`HealthCheck`], the spec's
//! `healthCheck`).
//!
//! A target is unhealthy when its server is in ERROR (a Machine's failure), its Node was seen and is
//! gone, it has run longer than `nodeStartupTimeout` without a Node, or one of its Node's conditions
//! has had an unhealthy status for its timeout (`lastTransitionTime + timeout <= now`; Cluster API
//! compares with nanoseconds and `Before`, kos with whole seconds, where a timeout of 0 must take a
//! node NotReady since this very second, as `--repair-after 0` always did). A target that is neither unhealthy nor
//! healthy yet (no Node within its startup time, a condition still inside its timeout) is
//! *pending*: it is not replaced, but it counts against `maxUnhealthy` as Cluster API's "not
//! started or unhealthy" does. Remediation stops for the whole group while more than
//! `maxUnhealthy` of it are unhealthy or pending: a partition that cuts off half the nodes must not
//! replace half the cluster.
//!
//! Pure: times are Unix seconds of one clock (the cloud's, for a controller), passed in.

use kos_cluster::spec::{ConditionStatus, HealthCheck};

/// One Node condition as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    pub condition: String,
    pub status: ConditionStatus,
    pub last_transition_unix: i64,
}

/// What is known of a target's Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeSeen {
    /// No Node yet (the server is booting or joining).
    NotYet,
    /// A Node was seen for the server (it joined) and is now gone.
    Gone,
    /// The Node, with its conditions.
    Present(Vec<NodeCondition>),
}

/// A server of the group, as the cloud and the cluster show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The server's (and its Node's) name.
    pub name: String,
    /// When the server was made (the start of its startup time).
    pub created_unix: i64,
    /// Nova's fault, when the server is in ERROR.
    pub error: Option<String>,
    pub node: NodeSeen,
}

/// Why a target is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Its server is in ERROR.
    ServerError(String),
    /// Its Node was deleted.
    NodeGone,
    /// No Node after `nodeStartupTimeout`.
    NeverStarted { timeout_secs: u64 },
    /// A Node condition had an unhealthy status for longer than its timeout.
    Condition {
        condition: String,
        status: ConditionStatus,
        timeout_secs: u64,
    },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ServerError(fault) => write!(f, "its server is in ERROR ({fault})"),
            Self::NodeGone => f.write_str("its Node has been deleted"),
            Self::NeverStarted { timeout_secs } => {
                write!(f, "its Node failed to report startup in {timeout_secs}s")
            }
            Self::Condition {
                condition,
                status,
                timeout_secs,
            } => write!(
                f,
                "condition {condition} on its Node is reporting status {} for {timeout_secs}s or more",
                status.as_str()
            ),
        }
    }
}

/// A group's health at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assessment {
    /// Unhealthy targets, in the order given, each with every finding.
    pub unhealthy: Vec<(String, Vec<Finding>)>,
    /// Targets neither healthy nor unhealthy yet, with how many seconds until one may become
    /// unhealthy.
    pub pending: Vec<(String, u64)>,
    /// Healthy targets.
    pub healthy: Vec<String>,
    /// Whether the unhealthy may be replaced now (`maxUnhealthy` holds, and the check is on).
    pub remediation: Remediation,
}

/// Whether a group's unhealthy targets may be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Remediation {
    /// Yes (or there is nothing to replace).
    #[default]
    Allowed,
    /// The group's `healthCheck` has `enabled: false`.
    Disabled,
    /// More than `maxUnhealthy` are unhealthy or pending.
    Restricted {
        total: usize,
        not_healthy: usize,
        max: usize,
    },
}

impl Assessment {
    /// The targets to replace now: the unhealthy ones, if remediation is allowed.
    #[must_use]
    pub fn to_replace(&self) -> Vec<&str> {
        match self.remediation {
            Remediation::Allowed => self.unhealthy.iter().map(|(n, _)| n.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    /// When the group should be looked at again, in seconds (the soonest pending target).
    #[must_use]
    pub fn recheck_in_secs(&self) -> Option<u64> {
        self.pending.iter().map(|(_, s)| *s).min()
    }
}

/// Why remediation is restricted, as Cluster API's `RemediationAllowed` condition says it.
impl std::fmt::Display for Remediation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Allowed => f.write_str("remediation is allowed"),
            Self::Disabled => f.write_str("remediation is disabled (healthCheck.enabled: false)"),
            Self::Restricted {
                total,
                not_healthy,
                max,
            } => write!(
                f,
                "remediation is not allowed, the number of not started or unhealthy nodes exceeds \
                 maxUnhealthy (total: {total}, unhealthy: {not_healthy}, maxUnhealthy: {max})"
            ),
        }
    }
}

enum Verdict {
    Unhealthy(Vec<Finding>),
    Pending(u64),
    Healthy,
}

/// Seconds until `since + timeout` is reached, or `None` when it is at `now`.
fn left(since: i64, timeout_secs: u64, now: i64) -> Option<u64> {
    let deadline = since.saturating_add(i64::try_from(timeout_secs).unwrap_or(i64::MAX));
    (deadline > now).then(|| u64::try_from(deadline - now).unwrap_or(0))
}

fn verdict(rule: &HealthCheck, t: &Target, now: i64) -> Verdict {
    if let Some(fault) = &t.error {
        return Verdict::Unhealthy(vec![Finding::ServerError(fault.clone())]);
    }
    match &t.node {
        NodeSeen::Gone => Verdict::Unhealthy(vec![Finding::NodeGone]),
        NodeSeen::NotYet => match rule.node_startup_timeout_secs {
            None => Verdict::Healthy,
            Some(timeout_secs) => match left(t.created_unix, timeout_secs, now) {
                None => Verdict::Unhealthy(vec![Finding::NeverStarted { timeout_secs }]),
                Some(secs) => Verdict::Pending(secs),
            },
        },
        NodeSeen::Present(conditions) => {
            let mut findings = Vec::new();
            let mut next = None::<u64>;
            for c in &rule.unhealthy_conditions {
                let Some(seen) = conditions
                    .iter()
                    .find(|n| n.condition == c.condition && n.status == c.status)
                else {
                    continue;
                };
                match left(seen.last_transition_unix, c.timeout_secs, now) {
                    None => findings.push(Finding::Condition {
                        condition: c.condition.clone(),
                        status: c.status,
                        timeout_secs: c.timeout_secs,
                    }),
                    Some(secs) => next = Some(next.map_or(secs, |n| n.min(secs))),
                }
            }
            match (findings.is_empty(), next) {
                (false, _) => Verdict::Unhealthy(findings),
                (true, Some(secs)) => Verdict::Pending(secs),
                (true, None) => Verdict::Healthy,
            }
        }
    }
}

/// The group's health at `now` under `rule`.
#[must_use]
pub fn assess(rule: &HealthCheck, targets: &[Target], now: i64) -> Assessment {
    let mut a = Assessment::default();
    for t in targets {
        match verdict(rule, t, now) {
            Verdict::Unhealthy(f) => a.unhealthy.push((t.name.clone(), f)),
            Verdict::Pending(secs) => a.pending.push((t.name.clone(), secs)),
            Verdict::Healthy => a.healthy.push(t.name.clone()),
        }
    }
    let total = targets.len();
    let not_healthy = total - a.healthy.len();
    let max = rule.max_unhealthy.of(total);
    a.remediation = if !rule.enabled {
        Remediation::Disabled
    } else if not_healthy > max {
        Remediation::Restricted {
            total,
            not_healthy,
            max,
        }
    } else {
        Remediation::Allowed
    };
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use kos_cluster::spec::MaxUnhealthy;

    const NOW: i64 = 10_000;

    fn ready(status: ConditionStatus, since: i64) -> NodeSeen {
        NodeSeen::Present(vec![NodeCondition {
            condition: "Ready".into(),
            status,
            last_transition_unix: since,
        }])
    }

    fn target(name: &str, node: NodeSeen) -> Target {
        Target {
            name: name.into(),
            created_unix: 0,
            error: None,
            node,
        }
    }

    #[test]
    fn a_condition_is_unhealthy_once_its_timeout_is_reached() {
        let rule = HealthCheck::default();
        let at = |since| {
            assess(
                &rule,
                &[target("n", ready(ConditionStatus::False, since))],
                NOW,
            )
        };
        let almost = at(NOW - 299);
        assert!(almost.unhealthy.is_empty());
        assert_eq!(almost.recheck_in_secs(), Some(1));
        let past = at(NOW - 300);
        assert_eq!(past.to_replace(), ["n"]);
        assert_eq!(
            past.unhealthy[0].1[0].to_string(),
            "condition Ready on its Node is reporting status False for 300s or more"
        );
        let recent = at(NOW - 60);
        assert_eq!(recent.pending, [("n".to_owned(), 240)]);
        let fine = assess(&rule, &[target("n", ready(ConditionStatus::True, 0))], NOW);
        assert_eq!(fine.healthy, ["n"]);
    }

    #[test]
    fn a_server_in_error_or_a_node_gone_is_unhealthy_at_once() {
        let rule = HealthCheck::default();
        let mut broken = target("a", ready(ConditionStatus::True, 0));
        broken.error = Some("No valid host was found".into());
        let a = assess(&rule, &[broken, target("b", NodeSeen::Gone)], NOW);
        assert_eq!(a.to_replace(), ["a", "b"]);
        assert_eq!(
            a.unhealthy[0].1,
            [Finding::ServerError("No valid host was found".into())]
        );
        assert_eq!(a.unhealthy[1].1, [Finding::NodeGone]);
    }

    #[test]
    fn a_server_without_its_node_has_its_startup_time() {
        let rule = HealthCheck::default();
        let booting = |created| Target {
            created_unix: created,
            ..target("n", NodeSeen::NotYet)
        };
        assert_eq!(
            assess(&rule, &[booting(NOW - 100)], NOW).pending,
            [("n".to_owned(), 500)]
        );
        assert_eq!(
            assess(&rule, &[booting(NOW - 600)], NOW).unhealthy[0].1,
            [Finding::NeverStarted { timeout_secs: 600 }]
        );
        // `nodeStartupTimeout: 0s`: never unhealthy for it, and not pending either.
        let off = HealthCheck {
            node_startup_timeout_secs: None,
            ..HealthCheck::default()
        };
        assert_eq!(assess(&off, &[booting(0)], NOW).healthy, ["n"]);
    }

    #[test]
    fn three_of_five_unreachable_at_40_percent_are_left_alone() {
        let rule = HealthCheck {
            max_unhealthy: MaxUnhealthy::Percent(40),
            ..HealthCheck::default()
        };
        let group = |sick: usize| -> Vec<Target> {
            (0..5)
                .map(|i| {
                    let status = if i < sick {
                        ready(ConditionStatus::Unknown, 0)
                    } else {
                        ready(ConditionStatus::True, 0)
                    };
                    target(&format!("w{i}"), status)
                })
                .collect()
        };
        let three = assess(&rule, &group(3), NOW);
        assert_eq!(three.unhealthy.len(), 3);
        assert!(three.to_replace().is_empty());
        assert_eq!(
            three.remediation.to_string(),
            "remediation is not allowed, the number of not started or unhealthy nodes exceeds \
             maxUnhealthy (total: 5, unhealthy: 3, maxUnhealthy: 2)"
        );
        assert_eq!(assess(&rule, &group(2), NOW).to_replace(), ["w0", "w1"]);
    }

    #[test]
    fn pending_targets_count_against_max_unhealthy() {
        let rule = HealthCheck {
            max_unhealthy: MaxUnhealthy::Count(1),
            ..HealthCheck::default()
        };
        let targets = [
            target("dead", NodeSeen::Gone),
            Target {
                created_unix: NOW,
                ..target("new", NodeSeen::NotYet)
            },
            target("ok", ready(ConditionStatus::True, 0)),
        ];
        let a = assess(&rule, &targets, NOW);
        assert_eq!(
            a.remediation,
            Remediation::Restricted {
                total: 3,
                not_healthy: 2,
                max: 1
            }
        );
    }

    #[test]
    fn a_disabled_check_finds_but_replaces_nothing() {
        let rule = HealthCheck {
            enabled: false,
            ..HealthCheck::default()
        };
        let a = assess(&rule, &[target("n", NodeSeen::Gone)], NOW);
        assert_eq!(a.unhealthy.len(), 1);
        assert!(a.to_replace().is_empty());
        assert_eq!(a.remediation, Remediation::Disabled);
    }
}
