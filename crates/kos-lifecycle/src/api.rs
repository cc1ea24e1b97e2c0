//! How the cluster's API fails, as the seams that reach it ([`crate::drain::NodeApi`],
//! [`crate::rotate::ClusterApi`]) report it: the kinds a step decides on (an object that is not
//! there, one changed meanwhile, a refusal, no answer), never text to be matched. The adapter
//! (the CLI's kube-rs client, a controller's) maps its own errors onto these and keeps them as the
//! cause, so the whole chain reaches the user.
//!
//! No variant carries a request or answer body: a Secret's data never reaches an error.

/// The cause of an error from outside this crate (a transport error, a decode error).
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// A failed call to the cluster's API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the object is not there.
    #[error("not found")]
    NotFound,
    /// 409: the object exists already, or changed since it was read.
    #[error("conflict{}", suffix(.message))]
    Conflict { message: String },
    /// Another error status, with the server's message (a `metav1.Status`).
    #[error("HTTP {code}{}", suffix(.message))]
    Status { code: u16, message: String },
    /// No answer: the connection failed, TLS refused the peer, or nothing came back in time.
    #[error("the cluster's API cannot be reached")]
    Unreachable(#[source] Cause),
    /// An answer that cannot be read (not JSON, or an object without what the seam needs).
    #[error("unreadable answer: {what}")]
    Malformed {
        what: String,
        #[source]
        source: Option<Cause>,
    },
}

fn suffix(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl ApiError {
    /// Whether the same call may succeed later with nothing else changed: no answer, 429, a 5xx,
    /// or a conflict (read again, then try again).
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Unreachable(_) | ApiError::Conflict { .. } => true,
            ApiError::Status { code, .. } => *code == 429 || *code >= 500,
            ApiError::NotFound | ApiError::Malformed { .. } => false,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound)
    }
}

/// An error and its causes on one line (`a: b: c`), for text that outlives the error (a report
/// line, a pod's reason to stay).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        // Some errors repeat their cause in their own text.
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_apart_and_the_chain_is_shown_once() {
        assert!(ApiError::NotFound.is_not_found());
        assert!(!ApiError::NotFound.is_transient());
        let refused = ApiError::Status {
            code: 403,
            message: "forbidden".into(),
        };
        assert!(!refused.is_transient());
        assert_eq!(refused.to_string(), "HTTP 403: forbidden");
        for code in [429, 500, 503] {
            let s = ApiError::Status {
                code,
                message: String::new(),
            };
            assert!(s.is_transient(), "{code}");
            assert_eq!(s.to_string(), format!("HTTP {code}"));
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = ApiError::Unreachable(Box::new(io));
        assert!(e.is_transient());
        assert_eq!(
            chain(&e),
            "the cluster's API cannot be reached: connection refused"
        );
    }
}
