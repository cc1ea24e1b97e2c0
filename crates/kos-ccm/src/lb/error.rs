//! Errors of the load-balancer reconcile: only what the controller's backoff should handle.
//! Octavia's 409 (busy), a stale observation and every refusal a user can act on are not errors:
//! they come back as a requeue or a Warning event in the [`Outcome`](super::Outcome).

use kos_cloud::CloudError;

#[derive(Debug, thiserror::Error)]
pub enum LbError {
    /// The bulk observation failed.
    #[error("cannot observe the project's load balancers and floating IPs")]
    Observe {
        #[source]
        source: CloudError,
    },
    /// A change or lookup failed in a way that is not the user's to fix (5xx after retries,
    /// transport, undecodable answer).
    #[error("cannot {action} (load balancer {lb})")]
    Cloud {
        action: String,
        lb: String,
        #[source]
        source: CloudError,
    },
    #[error("the Service has no namespace or name")]
    Unnamed,
}

impl LbError {
    /// The metric label of the failure kind.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LbError::Observe { .. } => "observe",
            LbError::Cloud { .. } => "cloud",
            LbError::Unnamed => "unnamed",
        }
    }

    /// Worth retrying with backoff (everything the cloud may get over).
    pub fn is_retryable(&self) -> bool {
        match self {
            LbError::Observe { .. } | LbError::Cloud { .. } => true,
            LbError::Unnamed => false,
        }
    }
}
