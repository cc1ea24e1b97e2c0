//! What a reconcile pass hands back to the Kubernetes wiring: the status and annotations to write,
//! the events to record and when to come back. The pass itself never waits for Octavia.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::LoadBalancerStatus;

use super::annotations::Problem;

/// Event reasons. The upstream's (`pkg/openstack/events.go` and the generic service controller's)
/// keep their names; the others are kos's.
pub mod reasons {
    /// Normal: a load balancer is being created for the Service.
    pub const CREATING: &str = "EnsuringLoadBalancer";
    /// Normal: the load balancer matches the Service.
    pub const ENSURED: &str = "EnsuredLoadBalancer";
    /// Normal: a change was made to bring the load balancer in line (drift repaired included).
    pub const UPDATING: &str = "UpdatingLoadBalancer";
    pub const DELETING: &str = "DeletingLoadBalancer";
    pub const DELETED: &str = "DeletedLoadBalancer";
    /// Warning: annotations or spec fields that stop the reconcile.
    pub const INVALID: &str = "InvalidLoadBalancerConfiguration";
    /// Warning: something in the annotations is ignored.
    pub const IGNORED: &str = "LoadBalancerSettingIgnored";
    /// Warning: another cluster's load balancer; not touched (upstream #2241, #3102).
    pub const FOREIGN: &str = "LoadBalancerOwnedByAnotherCluster";
    /// Warning: `load-balancer-id` names a load balancer kos (the CLI) made for the cluster, such
    /// as its API load balancer; never touched.
    pub const OWNED_BY_KOS: &str = "LoadBalancerOwnedByKos";
    pub const NOT_FOUND: &str = "LoadBalancerNotFound";
    pub const AMBIGUOUS: &str = "LoadBalancerAmbiguous";
    pub const SHARED_LIMIT: &str = "LoadBalancerSharedLimitReached";
    pub const CANNOT_SHARE: &str = "LoadBalancerCannotBeShared";
    pub const PORT_CONFLICT: &str = "LoadBalancerPortConflict";
    /// Warning: the load balancer went to ERROR and was deleted to be created again.
    pub const IN_ERROR: &str = "LoadBalancerInError";
    pub const IMMUTABLE: &str = "LoadBalancerSettingNotChangeable";
    pub const MONITOR_FORCED: &str = "LoadBalancerHealthMonitorForced";
    pub const NO_NODES: &str = "LoadBalancerNoEligibleNodes";
    pub const NODES_WITHOUT_ADDRESS: &str = "LoadBalancerNodesWithoutAddress";
    /// Warning (upstream): no floating network found, the Service stays internal.
    pub const FORCED_INTERNAL: &str = "LoadBalancerForcedInternal";
    /// Warning (upstream): the external network search failed.
    pub const EXTERNAL_NETWORK_SEARCH_FAILED: &str = "LoadBalancerExternalNetworkSearchFailed";
    pub const FLOATING_IP_SKIPPED: &str = "LoadBalancerFloatingIPSkipped";
    pub const FLOATING_IP_FAILED: &str = "LoadBalancerFloatingIPFailed";
    pub const CLOUD_REFUSED: &str = "SyncLoadBalancerFailed";
    /// Warning: manage-security-groups could not bring the Service's security group in line.
    pub const SECURITY_GROUP_FAILED: &str = "LoadBalancerSecurityGroupFailed";
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Event to record on the Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

/// The result of one pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// `Some`: write this `status.loadBalancer`; `None`: leave the status as it is.
    pub status: Option<LoadBalancerStatus>,
    /// Annotations to set on the Service (`load-balancer-id`, `load-balancer-address`).
    pub annotations: BTreeMap<String, String>,
    pub events: Vec<EventNote>,
    /// Come back after this long; `None`: on the next change or periodic resync.
    pub requeue_after: Option<Duration>,
    /// A load balancer this pass left in PENDING_* (its create, a change, a delete) or found
    /// there: the wiring may look again as soon as it has settled, before `requeue_after`.
    pub awaiting: Option<String>,
    /// Nothing is left to do: for `ensure`, the load balancer matches the Service; for
    /// `ensure_deleted`, everything of the Service is gone and the finalizer may be removed.
    pub converged: bool,
    /// The changes sent to the cloud in this pass, in order (for logs and tests).
    pub writes: Vec<String>,
}

impl Outcome {
    pub(crate) fn normal(&mut self, reason: &'static str, note: impl Into<String>) {
        self.events.push(EventNote {
            type_: EventType::Normal,
            reason,
            note: note.into(),
        });
    }

    pub(crate) fn warning(&mut self, reason: &'static str, note: impl Into<String>) {
        self.events.push(EventNote {
            type_: EventType::Warning,
            reason,
            note: note.into(),
        });
    }

    /// Come back no later than `after`.
    pub(crate) fn requeue(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
    }

    /// Come back once load balancer `lb` has settled, or after `after` at the latest.
    pub(crate) fn await_settled(&mut self, lb: &str, after: Duration) {
        self.awaiting = Some(lb.to_owned());
        self.requeue(after);
    }

    /// The Service is not ours to handle; nothing to do, nothing to write.
    pub(crate) fn ignored() -> Outcome {
        Outcome {
            converged: true,
            ..Outcome::default()
        }
    }

    /// One Warning listing every problem, and nothing else until the Service changes.
    pub(crate) fn invalid(problems: &[Problem]) -> Outcome {
        let mut o = Outcome::default();
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        o.warning(reasons::INVALID, lines.join("; "));
        o
    }

    pub fn warnings(&self) -> impl Iterator<Item = &EventNote> {
        self.events.iter().filter(|e| e.type_ == EventType::Warning)
    }

    pub fn has_event(&self, reason: &str) -> bool {
        self.events.iter().any(|e| e.reason == reason)
    }
}
