//! The driver's errors and their gRPC codes, as the CSI spec assigns them per RPC.

use kos_cloud::CloudError;
use tonic::{Code, Status};

use crate::node::KernelError;

/// Why an RPC failed. The variant is the gRPC code the CSI spec asks for; messages name the
/// object and what the cloud or the kernel said (kos-cloud's errors are already redacted).
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    OutOfRange(String),
    #[error("{0}")]
    Aborted(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Unimplemented(String),
    /// The cloud refused or failed; `what` is the step.
    #[error("{what}: {source}")]
    Cloud { what: String, source: CloudError },
    /// A command on the node failed.
    #[error("{what}: {source}")]
    Kernel { what: String, source: KernelError },
    #[error("{0}")]
    Internal(String),
}

impl CsiError {
    pub fn cloud(what: impl Into<String>) -> impl FnOnce(CloudError) -> CsiError {
        let what = what.into();
        move |source| CsiError::Cloud { what, source }
    }

    pub fn kernel(what: impl Into<String>) -> impl FnOnce(KernelError) -> CsiError {
        let what = what.into();
        move |source| CsiError::Kernel { what, source }
    }

    /// The gRPC code.
    pub fn code(&self) -> Code {
        match self {
            CsiError::InvalidArgument(_) => Code::InvalidArgument,
            CsiError::NotFound(_) => Code::NotFound,
            CsiError::AlreadyExists(_) => Code::AlreadyExists,
            CsiError::FailedPrecondition(_) => Code::FailedPrecondition,
            CsiError::ResourceExhausted(_) => Code::ResourceExhausted,
            CsiError::OutOfRange(_) => Code::OutOfRange,
            CsiError::Aborted(_) => Code::Aborted,
            CsiError::Unavailable(_) => Code::Unavailable,
            CsiError::Unimplemented(_) => Code::Unimplemented,
            // Over quota is the cloud's 413 (upstream maps it so too).
            CsiError::Cloud { source, .. } if source.status() == Some(413) => {
                Code::ResourceExhausted
            }
            CsiError::Cloud {
                source: CloudError::Timeout { .. },
                ..
            } => Code::DeadlineExceeded,
            CsiError::Cloud { .. } | CsiError::Kernel { .. } | CsiError::Internal(_) => {
                Code::Internal
            }
        }
    }

    /// The metric label: the code's name.
    pub fn label(&self) -> &'static str {
        match self.code() {
            Code::InvalidArgument => "invalid_argument",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::FailedPrecondition => "failed_precondition",
            Code::ResourceExhausted => "resource_exhausted",
            Code::OutOfRange => "out_of_range",
            Code::Aborted => "aborted",
            Code::Unavailable => "unavailable",
            Code::Unimplemented => "unimplemented",
            Code::DeadlineExceeded => "deadline_exceeded",
            _ => "internal",
        }
    }
}

impl From<CsiError> for Status {
    fn from(e: CsiError) -> Status {
        Status::new(e.code(), e.to_string())
    }
}

/// `Err(InvalidArgument)` naming `what` when `v` is empty.
pub fn required<'a>(v: &'a str, what: &str) -> Result<&'a str, CsiError> {
    if v.is_empty() {
        Err(CsiError::InvalidArgument(format!(
            "{what} must be provided"
        )))
    } else {
        Ok(v)
    }
}
