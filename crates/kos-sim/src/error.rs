//! Errors as each real service renders them. Clients key off both the status and the body shape (Nova's
//! `{"itemNotFound": {...}}`, Neutron's `NeutronError.type`, Octavia's `faultstring`), so the simulator
//! renders every error in the owning service's own format.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::service::Service;

pub type SimResult<T> = Result<T, SimError>;

#[derive(Debug, Clone)]
pub struct SimError {
    pub service: Service,
    pub status: StatusCode,
    /// Machine-readable kind: Neutron's `type` (e.g. `IpAddressAlreadyAllocated`); informational elsewhere.
    pub kind: Cow<'static, str>,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl SimError {
    pub fn new(
        service: Service,
        status: StatusCode,
        kind: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        SimError {
            service,
            status,
            kind: kind.into(),
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(service: Service, message: impl Into<String>) -> Self {
        Self::new(service, StatusCode::BAD_REQUEST, "BadRequest", message)
    }
    pub fn not_found(service: Service, message: impl Into<String>) -> Self {
        Self::new(service, StatusCode::NOT_FOUND, "NotFound", message)
    }
    pub fn conflict(
        service: Service,
        kind: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(service, StatusCode::CONFLICT, kind, message)
    }
    pub fn forbidden(service: Service, message: impl Into<String>) -> Self {
        Self::new(service, StatusCode::FORBIDDEN, "Forbidden", message)
    }
    pub fn unauthorized(service: Service) -> Self {
        Self::new(
            service,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "The request you have made requires authentication.",
        )
    }
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// Nova and Cinder wrap errors in a key named after the status.
    fn nova_style_key(&self) -> &'static str {
        match self.status.as_u16() {
            400 => "badRequest",
            401 => "unauthorized",
            403 => "forbidden",
            404 => "itemNotFound",
            405 => "badMethod",
            409 => "conflictingRequest",
            413 | 429 => "overLimit",
            501 => "notImplemented",
            503 => "serviceUnavailable",
            _ => "computeFault",
        }
    }

    pub fn body(&self) -> serde_json::Value {
        let code = self.status.as_u16();
        match self.service {
            Service::Compute | Service::BlockStorage => {
                let mut inner = json!({"code": code, "message": self.message});
                if code == 413 || code == 429 {
                    inner["retryAfter"] = json!(self.retry_after.unwrap_or(0).to_string());
                }
                json!({ self.nova_style_key(): inner })
            }
            Service::Network => {
                json!({"NeutronError": {"type": self.kind, "message": self.message, "detail": ""}})
            }
            Service::LoadBalancer => json!({
                "faultcode": if code >= 500 { "Server" } else { "Client" },
                "faultstring": self.message,
                "debuginfo": null,
            }),
            Service::Identity => json!({"error": {
                "code": code,
                "message": self.message,
                "title": self.status.canonical_reason().unwrap_or("Error"),
            }}),
            // Glance answers errors as webob text; a JSON body is what its API reference shows for 4xx.
            Service::Image | Service::Admin => {
                json!({"code": code, "title": self.status.canonical_reason().unwrap_or("Error"), "message": self.message})
            }
        }
    }
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}: {}",
            self.service,
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl std::error::Error for SimError {}

impl IntoResponse for SimError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if self.status == StatusCode::UNAUTHORIZED
            && let Ok(v) = HeaderValue::from_str("Keystone uri=\"/identity\"")
        {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_has_its_own_error_shape() {
        let e = SimError::conflict(Service::Network, "IpAddressAlreadyAllocated", "taken");
        assert_eq!(
            e.body()["NeutronError"]["type"],
            "IpAddressAlreadyAllocated"
        );
        let e = SimError::not_found(Service::Compute, "Instance x could not be found.");
        assert_eq!(e.body()["itemNotFound"]["code"], 404);
        let e = SimError::conflict(
            Service::LoadBalancer,
            "Immutable",
            "Load Balancer x is immutable",
        );
        assert_eq!(e.body()["faultcode"], "Client");
        let e = SimError::new(
            Service::BlockStorage,
            StatusCode::PAYLOAD_TOO_LARGE,
            "OverQuota",
            "over",
        );
        assert_eq!(e.body()["overLimit"]["retryAfter"], "0");
        assert_eq!(
            SimError::unauthorized(Service::Identity).body()["error"]["title"],
            "Unauthorized"
        );
    }
}
