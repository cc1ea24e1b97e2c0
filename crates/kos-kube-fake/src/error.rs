//! Errors as the real API server sends them: a `v1/Status` body with the HTTP code, the
//! machine-readable `reason` and the `details` clients read (kube-rs turns it into
//! `kube::Error::Api`). The messages follow the apiserver's wording so tests that match on them
//! would match against a real cluster too.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::resources::ResourceType;

/// One field problem of an `Invalid` (422) error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldManagerConflict`, …
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

/// `details` of a `Status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details {
    pub name: Option<String>,
    pub group: Option<String>,
    /// The plural for most reasons, the Kind for `Invalid`, as the real server sends it.
    pub kind: Option<String>,
    pub causes: Vec<Cause>,
}

/// A failed request, ready to become a `Status` response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed: errors travel through every `Result` of the request path.
    pub details: Option<Box<Details>>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn about(mut self, rt: &ResourceType, kind: &str, name: &str) -> Self {
        let d = self.details.get_or_insert_default();
        d.name = Some(name.to_owned());
        d.group = Some(rt.group.clone());
        d.kind = Some(kind.to_owned());
        self
    }

    pub(crate) fn with_causes(mut self, causes: Vec<Cause>) -> Self {
        self.details.get_or_insert_default().causes = causes;
        self
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified()),
        )
        .about(rt, &rt.plural, name)
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified()),
        )
        .about(rt, &rt.plural, name)
    }

    /// The optimistic-concurrency failure (`resourceVersion` or UID precondition).
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                rt.qualified()
            ),
        )
        .about(rt, &rt.plural, name)
    }

    pub fn modified(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// Validation failures, all of them, like the apiserver's field error list; the message names
    /// the qualified kind (`Deployment.apps "web" is invalid: …`), as `errors.NewInvalid` does.
    pub fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> ApiError {
        let list = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>();
        let list = if list.len() == 1 {
            list.join("")
        } else {
            format!("[{}]", list.join(", "))
        };
        let kind = if rt.group.is_empty() {
            rt.kind.clone()
        } else {
            format!("{}.{}", rt.kind, rt.group)
        };
        ApiError::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {list}"),
        )
        .about(rt, &rt.kind, name)
        .with_causes(causes)
    }

    /// apimachinery's `NewInternalError`: a 500 `InternalError` whose message says so, and whose
    /// one cause carries the error alone.
    pub fn internal(why: impl std::fmt::Display) -> ApiError {
        let why = why.to_string();
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {why}"),
        )
        .with_causes(vec![Cause {
            reason: "",
            field: String::new(),
            message: why,
        }])
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// `410 Gone`: the requested resourceVersion is no longer in the history.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// The 404 for a URL that names no served type (what kube-rs sees for a CRD not installed).
    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// The reason a real server gives for a status code, for injected faults.
    pub fn for_code(code: u16, message: impl Into<String>) -> ApiError {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "",
        };
        ApiError::new(code, reason, message)
    }

    /// The `v1/Status` body.
    pub fn status(&self) -> Value {
        let mut details = serde_json::Map::new();
        let d = self.details.as_deref().cloned().unwrap_or_default();
        if let Some(n) = &d.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &d.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &d.kind {
            details.insert("kind".into(), json!(k));
        }
        if !d.causes.is_empty() {
            details.insert(
                "causes".into(),
                d.causes
                    .iter()
                    .map(|c| {
                        // metav1.StatusCause's keys are all omitempty.
                        let mut o = serde_json::Map::new();
                        for (k, v) in [
                            ("reason", c.reason),
                            ("message", &c.message),
                            ("field", &c.field),
                        ] {
                            if !v.is_empty() {
                                o.insert(k.into(), json!(v));
                            }
                        }
                        Value::Object(o)
                    })
                    .collect(),
            );
        }
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        // metav1.Status's `reason` is omitempty: a Status a handler returns as it is may have none.
        if !self.reason.is_empty() {
            s["reason"] = json!(self.reason);
        }
        if !details.is_empty() {
            s["details"] = Value::Object(details);
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        crate::server::json_response(code, &self.status())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;

    #[test]
    fn invalid_names_the_kind_with_its_group_as_the_apiserver_does() {
        let cause = || {
            vec![Cause {
                reason: "FieldValueRequired",
                field: "spec.selector".into(),
                message: "Required value".into(),
            }]
        };
        let e = ApiError::invalid(&ResourceType::of::<Deployment>(true), "web", cause());
        assert_eq!(
            e.message,
            "Deployment.apps \"web\" is invalid: spec.selector: Required value"
        );
        assert_eq!(
            e.details.and_then(|d| d.kind).as_deref(),
            Some("Deployment")
        );
        let e = ApiError::invalid(&ResourceType::of::<Service>(true), "web", cause());
        assert!(
            e.message.starts_with("Service \"web\" is invalid"),
            "{}",
            e.message
        );
    }

    /// As kube-apiserver writes `NewInternalError` (its allocators' full range), and a Status a
    /// handler returns bare (the eviction of a pod two budgets cover): omitempty keys left out.
    #[test]
    fn an_internal_error_carries_its_cause_and_a_bare_status_no_reason() {
        let e = ApiError::internal("failed to allocate a serviceIP: range is full");
        assert_eq!(
            e.status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Internal error occurred: failed to allocate a serviceIP: range is full",
                   "reason": "InternalError",
                   "details": {"causes": [{"message": "failed to allocate a serviceIP: range is full"}]},
                   "code": 500})
        );
        let bare = ApiError::new(500, "", "This pod has more than one PodDisruptionBudget.");
        assert_eq!(bare.status().get("reason"), None);
        assert_eq!(bare.status().get("details"), None);
    }
}
