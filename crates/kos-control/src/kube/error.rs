//! What a request to the cluster's API came to, when it is not what was asked: the kinds callers
//! branch on, with the server's own words (its `metav1.Status`). No variant holds a request or an
//! answer body: a Secret's data never reaches an error.

use std::time::Duration;

use kos_lifecycle::api::ApiError;
use serde_json::Value;

/// A failed request to the cluster's API. `what` is the method and path (`GET /api/v1/nodes`).
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// 404: the object is not there.
    #[error("{what}: not found")]
    NotFound { what: String },
    /// 409: it exists already, or changed since it was read.
    #[error("{what}: conflict{}", suffix(.message))]
    Conflict { what: String, message: String },
    /// Another error status.
    #[error("{what}: HTTP {code}{}", suffix(.message))]
    Status {
        what: String,
        code: u16,
        /// The Status's `reason` (`TooManyRequests`, `Forbidden`), empty when it has none.
        reason: String,
        message: String,
        /// `details.causes` as (reason, message).
        causes: Vec<(String, String)>,
    },
    /// No answer: the connection or TLS failed (a server whose certificate the cluster CA did not
    /// sign, one that refuses kos's client certificate, nothing listening).
    #[error("{what}: the cluster's API cannot be reached")]
    Transport {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Nothing came back in time.
    #[error("{what}: no answer within {}s", .after.as_secs())]
    Timeout { what: String, after: Duration },
    /// A success whose body is not the JSON asked for.
    #[error("{what}: the answer is not JSON")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

fn suffix(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl KubeError {
    /// The error an answer of status `code` (not a success) and body `body` is: the server's
    /// `metav1.Status` read when the body is one, its message only otherwise.
    pub fn from_answer(what: String, code: u16, body: &[u8]) -> KubeError {
        let status: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let message = text(&status["message"]);
        match code {
            404 => KubeError::NotFound { what },
            409 => KubeError::Conflict { what, message },
            _ => KubeError::Status {
                what,
                code,
                reason: text(&status["reason"]),
                message,
                causes: status
                    .pointer("/details/causes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| (text(&c["reason"]), text(&c["message"])))
                    .collect(),
            },
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, KubeError::NotFound { .. })
    }
}

/// `Ok` for a delete whose object was gone already: a delete is done when the object is not there.
pub fn gone_is_fine(r: Result<(), KubeError>) -> Result<(), KubeError> {
    match r {
        Err(KubeError::NotFound { .. }) => Ok(()),
        r => r,
    }
}

/// The lifecycle's kinds of API failure; the adapter's error stays as the cause of those without
/// a status.
impl From<KubeError> for ApiError {
    fn from(e: KubeError) -> ApiError {
        match e {
            KubeError::NotFound { .. } => ApiError::NotFound,
            KubeError::Conflict { message, .. } => ApiError::Conflict { message },
            KubeError::Status { code, message, .. } => ApiError::Status { code, message },
            e @ (KubeError::Transport { .. } | KubeError::Timeout { .. }) => {
                ApiError::Unreachable(Box::new(e))
            }
            KubeError::Decode { ref what, .. } => ApiError::Malformed {
                what: what.clone(),
                source: Some(Box::new(e)),
            },
        }
    }
}
