//! Status (`kos status`): every resource of the cluster with its state, the API endpoint, and, given the
//! desired graph, what is not yet converged. Costs one observe.

use kos_cloud::{CloudError, Session};
use serde::Serialize;

use crate::graph::DesiredGraph;
use crate::observe::{Resource, observe};
use crate::plan::{Action, Op, plan};

/// A cluster as the cloud shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub cluster: String,
    /// The API endpoint's address: with a desired graph, that of its [`ApiSource`](crate::graph::ApiSource)
    /// node once it exists; without one, the API floating IP, else the LB VIP, else the first control
    /// plane's IP.
    pub api_endpoint: Option<String>,
    /// Sorted by kind, then logical id.
    pub resources: Vec<Resource>,
    /// Logical ids held by more than one object.
    pub duplicates: Vec<String>,
    /// Plan actions that are not no-ops (`None` without a desired graph).
    pub not_converged: Option<Vec<Action>>,
}

impl Status {
    /// Converged: nothing to do and no duplicate (unknown without a desired graph).
    #[must_use]
    pub fn converged(&self) -> Option<bool> {
        self.not_converged
            .as_ref()
            .map(|n| n.is_empty() && self.duplicates.is_empty())
    }
}

/// Observes `cluster` and, when `desired` is given, plans against it.
///
/// # Errors
/// A list call failed.
pub async fn status(
    session: &Session,
    cluster: &str,
    desired: Option<&DesiredGraph>,
) -> Result<Status, CloudError> {
    let observed = observe(session, cluster).await?;
    let address = |id: &str| {
        observed
            .get(id)
            .iter()
            .find_map(|r| r.facts.address.clone())
    };
    // With the spec, the node that provides the endpoint (a public LB's VIP is not the endpoint, and a
    // floating IP not yet allocated is no endpoint at all); without it, the first address found.
    let api_endpoint = match desired {
        Some(d) => address(d.api.node()),
        None => address("api-fip")
            .or_else(|| address("api-lb"))
            .or_else(|| address("port-cp-0")),
    };
    let mut resources: Vec<Resource> = observed.all().cloned().collect();
    resources.sort_by(|a, b| (a.kind, &a.logical_id).cmp(&(b.kind, &b.logical_id)));
    let duplicates = observed.duplicates().map(|(id, _)| id.to_owned()).collect();
    let not_converged = desired.map(|d| {
        plan(d, &observed)
            .actions
            .into_iter()
            .filter(|a| a.op != Op::NoOp)
            .collect()
    });
    Ok(Status {
        cluster: cluster.to_owned(),
        api_endpoint,
        resources,
        duplicates,
        not_converged,
    })
}
