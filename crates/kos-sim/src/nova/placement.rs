//! Nova's late anti-affinity check and its reschedules, for boots into an `anti-affinity` group when
//! the scheduler model has a claim delay ([`crate::config::SchedulerModel`]).
//!
//! What Nova does (nova/compute/manager.py `_validate_instance_group_policy`, nova/conductor/manager.py
//! `build_instances`, nova/scheduler/utils.py `populate_retry`): the scheduler picks a host and
//! alternates from the hosts the group's members have claimed; the compute host claims, then checks
//! the group's members on it again. A violation (`GroupAffinityViolation`, "Anti-affinity instance
//! group policy was violated") reschedules the boot to its next alternate; after `max_attempts`
//! hosts the conductor puts it in ERROR with `MaxRetriesExceeded` ("Exceeded max scheduling attempts
//! …"), or earlier with "Exhausted all hosts …" when its alternates ran out.
//!
//! The model: every claim is checked `delay` cloud seconds after it starts, checks run in time order,
//! and a check fails when another member is settled on the host or claimed it less than `delay`
//! apart (both instances are on the host when either compute looks). A rescheduled boot claims its
//! next alternate `delay × spread` after the failed check.

use serde::{Deserialize, Serialize};

use super::Server;
use crate::clock::SimTime;
use crate::neutron;
use crate::state::Cloud;

/// A boot still proving its host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Placement {
    /// The anti-affinity group.
    pub group: String,
    /// Hosts still to try, in the scheduler's order.
    pub alternates: Vec<String>,
    /// Hosts claimed so far, the current one last.
    pub claims: Vec<Claim>,
    pub max_attempts: u32,
    pub delay: f64,
    /// This boot's reschedule delay, in claim delays.
    pub spread: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claim {
    pub host: String,
    pub at: SimTime,
}

impl Placement {
    fn current(&self) -> Option<&Claim> {
        self.claims.last()
    }

    /// When the current claim is checked.
    fn check_at(&self) -> Option<SimTime> {
        self.current().map(|c| c.at.after(self.delay))
    }
}

/// Whether the scheduler sees where `s` is: it has no placement pending, or its claim has started.
pub(super) fn claimed(s: &Server, now: SimTime) -> bool {
    s.placement
        .as_ref()
        .and_then(Placement::current)
        .is_none_or(|c| now.reached(c.at))
}

/// A boot of member number `index` of `group`, sent to `hosts` (first choice, then alternates) at `now`.
pub(super) fn start(
    group: &str,
    index: usize,
    hosts: &[String],
    now: SimTime,
    cfg: &crate::config::SchedulerModel,
) -> Option<Placement> {
    let (first, rest) = hosts.split_first()?;
    Some(Placement {
        group: group.to_owned(),
        alternates: rest.to_vec(),
        claims: vec![Claim {
            host: first.clone(),
            at: now.after(cfg.claim_delay_secs),
        }],
        max_attempts: cfg.max_attempts.max(1),
        delay: cfg.claim_delay_secs,
        // 1, 3, 5 claim delays: members that failed together come back apart, as real round trips
        // differ, so the model is repeatable without being lock-step.
        spread: 1.0 + 2.0 * (index % 3) as f64,
    })
}

/// Runs every check that is due by now, earliest first (a check's outcome depends on those before it).
pub(super) fn settle(cloud: &mut Cloud) {
    let now = cloud.now;
    loop {
        let due = cloud
            .nova
            .servers
            .iter()
            .filter(|s| s.delete_at.is_none())
            .filter_map(|s| Some((s.placement.as_ref()?.check_at()?, s.id.clone())))
            .filter(|(at, _)| now.reached(*at))
            .min_by(|a, b| a.0.0.total_cmp(&b.0.0));
        let Some((at, id)) = due else {
            return;
        };
        check(cloud, &id, at);
    }
}

fn check(cloud: &mut Cloud, id: &str, at: SimTime) {
    let Some(p) = cloud.nova.server(id).and_then(|s| s.placement.clone()) else {
        return;
    };
    let Some(claim) = p.current().cloned() else {
        return;
    };
    let Some(group) = cloud.nova.server_groups.iter().find(|g| g.id == p.group) else {
        // The group is gone: nothing to check against.
        pass(cloud, id, at);
        return;
    };
    let max = group.max_server_per_host.unwrap_or(1) as usize;
    let on_host = group
        .members
        .iter()
        .filter(|m| m.as_str() != id)
        .filter_map(|m| cloud.nova.server(m))
        .filter(|o| match &o.placement {
            None => o.host.as_deref() == Some(claim.host.as_str()),
            Some(op) => op.claims.iter().any(|c| {
                c.host == claim.host && (c.at.0 - claim.at.0).abs() < p.delay && at.reached(c.at)
            }),
        })
        .count();
    if on_host < max {
        pass(cloud, id, at);
        return;
    }
    let tried = p.claims.len() as u32;
    let message = if tried >= p.max_attempts {
        // populate_retry, before the conductor looks at the alternates.
        format!(
            "Exceeded maximum number of retries. Exceeded max scheduling attempts {} for instance \
             {id}. Last exception: Anti-affinity instance group policy was violated",
            p.max_attempts
        )
    } else if let Some(next) = p.alternates.first().cloned() {
        reschedule(cloud, id, next, at.after(p.delay * p.spread));
        return;
    } else {
        format!(
            "Exceeded maximum number of retries. Exhausted all hosts available for retrying build \
             failures for instance {id}."
        )
    };
    tracing::debug!(server = %id, %message, "late anti-affinity check failed for good");
    super::fail_build(cloud, id, 500, &message);
    if let Some(s) = cloud.nova.server_mut(id) {
        s.placement = None;
    }
}

fn pass(cloud: &mut Cloud, id: &str, at: SimTime) {
    if let Some(s) = cloud.nova.server_mut(id) {
        s.placement = None;
        s.task_state = Some("spawning".into());
        // It cannot be up before its host passed the check.
        if !s.boot_at.reached(at) {
            s.boot_at = at;
        }
    }
}

/// The boot moves to its next alternate: the failed host is released, the port bound on the new one.
fn reschedule(cloud: &mut Cloud, id: &str, host: String, at: SimTime) {
    let zone = cloud.zone_of_host(&host);
    let Some(s) = cloud.nova.server_mut(id) else {
        return;
    };
    if let Some(p) = &mut s.placement {
        p.alternates.retain(|h| *h != host);
        p.claims.push(Claim {
            host: host.clone(),
            at,
        });
    }
    s.host = Some(host.clone());
    s.availability_zone = zone;
    s.task_state = Some("scheduling".into());
    let ports: Vec<String> = s.ports.iter().map(|p| p.port_id.clone()).collect();
    for port in ports {
        if let Err(e) = neutron::bind_port(cloud, &port, id, "compute:nova", &host) {
            tracing::warn!(server = %id, %port, "rebinding on the next host: {}", e.message);
        }
    }
}
