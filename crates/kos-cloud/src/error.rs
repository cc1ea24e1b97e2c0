//! The one error type of kos-cloud. Every message in it has passed through the session's
//! [`Redactor`](crate::Redactor), so it is safe to print, log and put in a bug report.

use crate::request::ServiceKind;

/// What an error status means to a caller, independent of the service's wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ApiErrorKind {
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    /// A quota would be exceeded (Nova/Cinder 413 or 403 "Quota exceeded", Neutron 409 OverQuota).
    OverQuota,
    RateLimited,
    Unavailable,
    Server,
    Other,
}

impl ApiErrorKind {
    /// Maps a status plus the service's error text (type and message) to a kind.
    pub fn classify(status: u16, text: &str) -> Self {
        let lower = text.to_ascii_lowercase();
        let quota = lower.contains("quota exceeded")
            || lower.contains("quota has been met")
            || lower.contains("overquota")
            || lower.contains("exceeded quota");
        match status {
            413 => ApiErrorKind::OverQuota,
            403 | 409 if quota => ApiErrorKind::OverQuota,
            400 => ApiErrorKind::BadRequest,
            401 => ApiErrorKind::Unauthorized,
            403 => ApiErrorKind::Forbidden,
            404 => ApiErrorKind::NotFound,
            409 => ApiErrorKind::Conflict,
            429 => ApiErrorKind::RateLimited,
            503 => ApiErrorKind::Unavailable,
            500..=599 => ApiErrorKind::Server,
            _ => ApiErrorKind::Other,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The service answered with an error status (after retries, if it was retryable).
    #[error("{service:?} {operation}: {status} {kind:?}: {message}")]
    Api {
        service: ServiceKind,
        operation: &'static str,
        status: u16,
        kind: ApiErrorKind,
        message: String,
        request_id: Option<String>,
    },
    /// A non-idempotent call failed in a way that may have taken effect (5xx/timeout/connection lost
    /// after the request was sent). Never retried blindly: the caller looks the object up, then decides.
    #[error(
        "{service:?} {operation}: outcome unknown, look the object up before retrying: {detail}"
    )]
    Ambiguous {
        service: ServiceKind,
        operation: &'static str,
        detail: String,
    },
    #[error("{service:?} {operation}: {detail}")]
    Transport {
        service: ServiceKind,
        operation: &'static str,
        detail: String,
    },
    #[error("{service:?} {operation}: cannot decode response: {detail}")]
    Decode {
        service: ServiceKind,
        operation: &'static str,
        detail: String,
    },
    /// Names the file or variable, the field and the fix.
    #[error("{0}")]
    Config(String),
    #[error("authentication failed: {0}")]
    Auth(String),
    /// Facades: a lookup that must find exactly one thing found none or several.
    #[error("{what}: {detail}")]
    Lookup { what: String, detail: String },
    /// Refused before sending: the cloud would reject it (user_data too large, a bad tag, ...).
    #[error("{what}: {detail}")]
    Invalid { what: String, detail: String },
    /// A waited-for object reached a failure state (server ERROR with its fault, LB ERROR, volume
    /// error) or disappeared.
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
    /// A wait's deadline passed with the object still in a transitional state.
    #[error("{what}: {detail}")]
    Timeout { what: String, detail: String },
    /// A Neutron object was made without its tags (they go in a PUT after the create) and that
    /// PUT failed: the object exists, and only its name finds it.
    #[error("{key} {id} was created but not tagged: {source}")]
    CreatedUntagged {
        /// The collection (`network`, `port`, ...).
        key: String,
        id: String,
        source: Box<CloudError>,
    },
}

impl CloudError {
    pub fn is_not_found(&self) -> bool {
        self.kind() == Some(ApiErrorKind::NotFound)
    }

    /// The HTTP status, for errors the service answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            CloudError::Api { status, .. } => Some(*status),
            CloudError::CreatedUntagged { source, .. } => source.status(),
            _ => None,
        }
    }

    /// Whether the same request may succeed later unchanged: the cloud was busy, failed or could
    /// not be reached, or the outcome is unknown. `false`: it was told something wrong (bad
    /// input, credentials, configuration), which waiting does not fix.
    pub fn is_transient(&self) -> bool {
        match self {
            CloudError::Api { kind, .. } => match kind {
                ApiErrorKind::RateLimited | ApiErrorKind::Unavailable | ApiErrorKind::Server => {
                    true
                }
                ApiErrorKind::BadRequest
                | ApiErrorKind::Unauthorized
                | ApiErrorKind::Forbidden
                | ApiErrorKind::NotFound
                | ApiErrorKind::Conflict
                | ApiErrorKind::OverQuota
                | ApiErrorKind::Other => false,
            },
            CloudError::Ambiguous { .. }
            | CloudError::Transport { .. }
            | CloudError::Timeout { .. } => true,
            CloudError::CreatedUntagged { source, .. } => source.is_transient(),
            CloudError::Decode { .. }
            | CloudError::Config(_)
            | CloudError::Auth(_)
            | CloudError::Lookup { .. }
            | CloudError::Invalid { .. }
            | CloudError::Failed { .. } => false,
        }
    }

    pub fn kind(&self) -> Option<ApiErrorKind> {
        match self {
            CloudError::Api { kind, .. } => Some(*kind),
            CloudError::CreatedUntagged { source, .. } => source.kind(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        use ApiErrorKind::*;
        assert_eq!(ApiErrorKind::classify(404, ""), NotFound);
        assert_eq!(
            ApiErrorKind::classify(403, "Quota exceeded for cores"),
            OverQuota
        );
        assert_eq!(
            ApiErrorKind::classify(403, "Quota has been met for instances"),
            OverQuota
        );
        assert_eq!(ApiErrorKind::classify(403, "Policy forbids"), Forbidden);
        assert_eq!(
            ApiErrorKind::classify(409, "OverQuota: Quota exceeded for resources: ['port']"),
            OverQuota
        );
        assert_eq!(ApiErrorKind::classify(409, "in use"), Conflict);
        assert_eq!(
            ApiErrorKind::classify(413, "VolumeSizeExceedsAvailableQuota"),
            OverQuota
        );
        assert_eq!(ApiErrorKind::classify(502, ""), Server);
        assert_eq!(ApiErrorKind::classify(503, ""), Unavailable);
        assert_eq!(ApiErrorKind::classify(429, ""), RateLimited);
        let e = CloudError::Api {
            service: ServiceKind::Compute,
            operation: "server.get",
            status: 404,
            kind: NotFound,
            message: "gone".into(),
            request_id: None,
        };
        assert!(e.is_not_found());
        assert_eq!(e.status(), Some(404));
        assert_eq!(e.to_string(), "Compute server.get: 404 NotFound: gone");
    }
}
