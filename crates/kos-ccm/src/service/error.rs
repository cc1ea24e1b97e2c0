//! Why a Service reconcile failed: only what the backoff should handle (the load-balancer core
//! turns everything a user can fix into Events). No variant carries a secret.

use crate::lb::LbError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("service {service}")]
    LoadBalancer {
        service: String,
        #[source]
        source: LbError,
    },
    #[error("service {service}: cannot {what}")]
    Kube {
        service: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The label failures are counted and logged under.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::LoadBalancer { source, .. } => source.metric_label(),
            Error::Kube { .. } => "kube",
        }
    }

    /// A write lost an optimistic-concurrency race: retry at once with a fresh read.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 409)
    }

    /// Worth retrying with backoff; the rest waits for the Service to change.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::LoadBalancer { source, .. } => source.is_retryable(),
            Error::Kube { .. } => true,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
