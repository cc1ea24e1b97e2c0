//! The one request path: [`Session::send`] turns an [`ApiRequest`] into an HTTP call through the
//! SDK, retries what is safe to retry (see [`retry`](crate::retry)), counts every attempt, and maps
//! failures to [`CloudError`] with the service's own message, redacted.

use std::borrow::Cow;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method};
use openstack_sdk::api::rest_endpoint_prelude::QueryParams;
use openstack_sdk::api::{self, ApiError, QueryAsync, RestEndpoint};
use openstack_sdk::types::{ApiVersion, ServiceType};
use openstack_sdk::{RestError, api::BodyError};
use serde_json::Value;
use tracing::Instrument;

/// How often in a row one call renews a refused token.
const RENEWALS: u32 = 3;

use crate::counters::CallRecord;
use crate::error::{ApiErrorKind, CloudError};
use crate::retry::{self, Decision, RetryReason};
use crate::session::Session;

/// The OpenStack services kos talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum ServiceKind {
    Identity,
    Compute,
    Network,
    Image,
    LoadBalancer,
    BlockStorage,
}

impl ServiceKind {
    pub const ALL: [ServiceKind; 6] = [
        ServiceKind::Identity,
        ServiceKind::Compute,
        ServiceKind::Network,
        ServiceKind::Image,
        ServiceKind::LoadBalancer,
        ServiceKind::BlockStorage,
    ];

    /// The catalog service type.
    pub fn catalog_type(self) -> &'static str {
        match self {
            ServiceKind::Identity => "identity",
            ServiceKind::Compute => "compute",
            ServiceKind::Network => "network",
            ServiceKind::Image => "image",
            ServiceKind::LoadBalancer => "load-balancer",
            ServiceKind::BlockStorage => "block-storage",
        }
    }

    pub(crate) fn sdk(self) -> ServiceType {
        match self {
            ServiceKind::Identity => ServiceType::Identity,
            ServiceKind::Compute => ServiceType::Compute,
            ServiceKind::Network => ServiceType::Network,
            ServiceKind::Image => ServiceType::Image,
            ServiceKind::LoadBalancer => ServiceType::LoadBalancer,
            ServiceKind::BlockStorage => ServiceType::BlockStorage,
        }
    }
}

impl std::fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.catalog_type())
    }
}

/// One OpenStack API call, described by kos's facades.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub service: ServiceKind,
    pub method: Method,
    /// Relative to the service's discovered, versioned endpoint: "servers/detail", "ports" (the
    /// network endpoint already ends in /v2.0/), "lbaas/loadbalancers", "volumes/detail" (the project
    /// id is in the endpoint), "images", "users/{id}/application_credentials".
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Option<Value>,
    /// e.g. Some("2.79") for compute, Some("3.60") for volume; None otherwise.
    pub microversion: Option<&'static str>,
    /// Counter and span key, e.g. "server.create", "port.list".
    pub operation: &'static str,
    idempotent: Option<bool>,
}

impl ApiRequest {
    pub fn new(
        service: ServiceKind,
        method: Method,
        operation: &'static str,
        path: impl Into<String>,
    ) -> Self {
        ApiRequest {
            service,
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
            microversion: None,
            operation,
            idempotent: None,
        }
    }

    pub fn get(service: ServiceKind, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, Method::GET, operation, path)
    }

    pub fn delete(service: ServiceKind, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, Method::DELETE, operation, path)
    }

    pub fn post(
        service: ServiceKind,
        operation: &'static str,
        path: impl Into<String>,
        body: Value,
    ) -> Self {
        Self::new(service, Method::POST, operation, path).with_body(body)
    }

    pub fn put(
        service: ServiceKind,
        operation: &'static str,
        path: impl Into<String>,
        body: Value,
    ) -> Self {
        Self::new(service, Method::PUT, operation, path).with_body(body)
    }

    /// A PUT without a body (Neutron's `PUT …/tags/{tag}`).
    pub fn put_empty(
        service: ServiceKind,
        operation: &'static str,
        path: impl Into<String>,
    ) -> Self {
        Self::new(service, Method::PUT, operation, path)
    }

    pub fn patch(
        service: ServiceKind,
        operation: &'static str,
        path: impl Into<String>,
        body: Value,
    ) -> Self {
        Self::new(service, Method::PATCH, operation, path).with_body(body)
    }

    fn with_body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    pub fn query(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.query.push((key.into(), value.into()));
        self
    }

    pub fn microversion(mut self, v: &'static str) -> Self {
        self.microversion = Some(v);
        self
    }

    /// Idempotent by method (GET/HEAD/PUT/DELETE); POST and PATCH are not unless marked (e.g. POST
    /// actions that are, like a server reboot).
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = Some(yes);
        self
    }

    pub fn is_idempotent(&self) -> bool {
        self.idempotent.unwrap_or(matches!(
            self.method,
            Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS
        ))
    }
}

/// A successful answer: status, headers and the raw body (empty for 204 and friends).
#[derive(Debug, Clone)]
pub struct ApiResponse {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub(crate) service: ServiceKind,
    pub(crate) operation: &'static str,
}

impl ApiResponse {
    /// The body as `T`. The error names the operation (never the body: it may hold secrets).
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, CloudError> {
        serde_json::from_slice(&self.body).map_err(|e| CloudError::Decode {
            service: self.service,
            operation: self.operation,
            detail: e.to_string(),
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `x-openstack-request-id` (or Nova's `x-compute-request-id`).
    pub fn request_id(&self) -> Option<&str> {
        request_id(&self.headers)
    }
}

fn request_id(h: &HeaderMap) -> Option<&str> {
    h.get("x-openstack-request-id")
        .or_else(|| h.get("x-compute-request-id"))
        .and_then(|v| v.to_str().ok())
}

/// The SDK endpoint for one [`ApiRequest`].
struct Endpoint<'a> {
    req: &'a ApiRequest,
}

impl RestEndpoint for Endpoint<'_> {
    fn method(&self) -> Method {
        self.req.method.clone()
    }

    fn endpoint(&self) -> Cow<'static, str> {
        // A leading '/' would make the URL absolute (dropping the versioned endpoint path).
        Cow::Owned(self.req.path.trim_start_matches('/').to_owned())
    }

    fn service_type(&self) -> ServiceType {
        self.req.service.sdk()
    }

    fn parameters(&self) -> QueryParams<'_> {
        let mut q = QueryParams::default();
        for (k, v) in &self.req.query {
            q.push(k.as_str(), v.as_str());
        }
        q
    }

    fn body(&self) -> Result<Option<(&'static str, Vec<u8>)>, BodyError> {
        match &self.req.body {
            // Not plain "application/json": the SDK logs request bodies at TRACE when the content
            // type is exactly that, and ours carry user_data, bootstrap tokens and credential
            // secrets. Every OpenStack service parses the parameterised form the same way.
            Some(b) => Ok(Some((
                "application/json; charset=utf-8",
                serde_json::to_vec(b)?,
            ))),
            None => Ok(None),
        }
    }

    /// Always the discovered endpoint: paths carry no version prefix.
    fn api_version(&self) -> Option<ApiVersion> {
        None
    }

    /// The microversion, sent as `OpenStack-API-Version` (compute and volume).
    fn min_version(&self) -> Option<ApiVersion> {
        self.req
            .microversion
            .and_then(|v| ApiVersion::from_apiver_str(v, false).ok())
    }
}

/// What one attempt produced, reduced to what the retry loop needs.
enum Attempt {
    Answer(ApiResponse),
    Transport { sent: bool, detail: String },
}

impl Session {
    /// Sends one request: retries, counters, a tracing span, redaction. Non-2xx answers become
    /// [`CloudError::Api`] (or [`CloudError::Ambiguous`] when a non-idempotent call may have taken
    /// effect).
    pub async fn send(&self, req: ApiRequest) -> Result<ApiResponse, CloudError> {
        let span = tracing::debug_span!(
            "openstack",
            service = %req.service,
            operation = req.operation,
            method = %req.method,
        );
        self.send_inner(&req).instrument(span).await
    }

    async fn send_inner(&self, req: &ApiRequest) -> Result<ApiResponse, CloudError> {
        self.check_service(req.service, req.operation)?;
        let policy = self.retry_policy();
        let idempotent = req.is_idempotent();
        let mut budget = retry::Budget::default();
        // A refused token is renewed, and renewed again if the new one is refused too, up to
        // RENEWALS times in a row: a token shorter-lived than a renewal and a retry take has
        // expired again by then. Credentials that Keystone accepts but a service rejects end the
        // call after that instead of looping; a token that expires again during the call's
        // retries (a 503 in between) starts the count again, and the retries spend the budget.
        let mut renewals = 0;
        loop {
            budget.attempts += 1;
            let attempt = budget.attempts;
            // A span per attempt inside the call's span: fields are never appended to twice.
            let span = tracing::debug_span!("attempt", n = attempt);
            if let Some(l) = &self.limiter {
                l.acquire().await;
            }
            let started = std::time::Instant::now();
            let (result, epoch) = self.attempt(req).instrument(span).await?;
            let elapsed = started.elapsed();
            if let Attempt::Answer(rsp) = &result
                && let Some(date) = rsp.header("date")
            {
                self.inner
                    .pace
                    .observe_header(std::time::Instant::now(), date);
            }
            // Counted once it went to the network (errors found before that return above).
            self.inner.counters.record_call(req.service, req.operation);
            let status = match &result {
                Attempt::Answer(rsp) => Some(rsp.status),
                Attempt::Transport { .. } => None,
            };
            if status == Some(401) && renewals < RENEWALS {
                self.observe(req, status, elapsed, None);
                // The token expired or was revoked: nothing was done, so the call is sent again
                // once the session has a new token and its endpoints back.
                self.reauthenticate(epoch).await?;
                renewals += 1;
                budget.attempts -= 1;
                continue;
            }
            if status.is_some_and(|s| s != 401) {
                // The service accepted the new token: a later 401 is a new expiry.
                renewals = 0;
            }
            let (decision, retry_after, outcome) = match result {
                Attempt::Answer(rsp) => {
                    let retry_after = rsp
                        .header("retry-after")
                        .and_then(|v| retry::parse_retry_after(v, SystemTime::now()));
                    let message = if (200..300).contains(&rsp.status) {
                        String::new()
                    } else {
                        error_text(&rsp.body).0
                    };
                    let d =
                        retry::classify(req.service, idempotent, rsp.status, retry_after, &message);
                    (d, retry_after, Ok(rsp))
                }
                Attempt::Transport { sent, detail } => (
                    retry::classify_transport(sent, idempotent),
                    None,
                    Err(detail),
                ),
            };
            let retry = match decision {
                Decision::Retry(RetryReason::LoadBalancerBusy, _)
                    if !policy.retry_busy_load_balancer =>
                {
                    None
                }
                Decision::Retry(reason, _) => budget
                    .retry(policy, reason, retry_after, &mut rand::rng())
                    .map(|delay| (reason, delay)),
                Decision::Success | Decision::Ambiguous | Decision::Fail => None,
            };
            let Some((reason, delay)) = retry else {
                self.observe(req, status, elapsed, None);
                return match (decision, outcome) {
                    (Decision::Success, Ok(rsp)) => Ok(rsp),
                    (decision, outcome) => Err(self.failure(req, decision, outcome, attempt)),
                };
            };
            let wait = self.schedule_retry(delay);
            self.observe(req, status, elapsed, Some(wait));
            self.inner.counters.record_retry();
            tracing::debug!(
                attempt,
                status = status.unwrap_or(0),
                ?reason,
                delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    fn observe(
        &self,
        req: &ApiRequest,
        status: Option<u16>,
        duration: std::time::Duration,
        retry_in: Option<std::time::Duration>,
    ) {
        if let Some(o) = &self.observer {
            o.observe(&CallRecord {
                service: req.service,
                operation: req.operation,
                status,
                duration,
                retry_in,
            });
        }
    }

    /// One HTTP exchange. Errors that happen before anything could be sent and will not get better
    /// by retrying (no endpoint, incompatible microversion, bad URL) are returned directly.
    /// Also returns the authentication epoch it was sent in.
    async fn attempt(&self, req: &ApiRequest) -> Result<(Attempt, u64), CloudError> {
        let ep = Endpoint { req };
        let (result, epoch) = loop {
            let endpoints = self.inner.endpoints.read().await;
            if endpoints.undiscovered.contains(&req.service) {
                drop(endpoints);
                self.rediscover(req.service, req.operation).await?;
                continue;
            }
            let result = api::raw(ep)
                .skip_error_check(true)
                .query_async(&self.inner.client)
                .await;
            break (result, endpoints.epoch);
        };
        let attempt = match result {
            Ok(rsp) => {
                let status = rsp.status().as_u16();
                let (parts, body) = rsp.into_parts();
                Ok(Attempt::Answer(ApiResponse {
                    status,
                    headers: parts.headers,
                    body,
                    service: req.service,
                    operation: req.operation,
                }))
            }
            Err(ApiError::Client {
                source: RestError::Communication { source },
            }) => Ok(Attempt::Transport {
                // A connect error (refused, DNS, TLS handshake) means no byte of the request left.
                sent: !source.is_connect(),
                detail: self.redact(&error_chain(&source)),
            }),
            Err(ApiError::Client {
                source: RestError::AuthError { source },
            }) => Err(CloudError::Auth(self.redact(&format!(
                "{} {}: re-authentication failed: {}",
                req.service,
                req.operation,
                error_chain(&source)
            )))),
            Err(other) => Err(CloudError::Transport {
                service: req.service,
                operation: req.operation,
                detail: self.redact(&error_chain(&other)),
            }),
        };
        attempt.map(|a| (a, epoch))
    }

    /// The error for a final, failed attempt.
    fn failure(
        &self,
        req: &ApiRequest,
        decision: Decision,
        outcome: Result<ApiResponse, String>,
        attempts: u32,
    ) -> CloudError {
        let (service, operation) = (req.service, req.operation);
        let tries = if attempts > 1 {
            format!(" (after {attempts} attempts)")
        } else {
            String::new()
        };
        match outcome {
            Err(detail) if decision == Decision::Ambiguous => CloudError::Ambiguous {
                service,
                operation,
                detail: format!("connection failed after the request was sent: {detail}"),
            },
            Err(detail) => CloudError::Transport {
                service,
                operation,
                detail: format!("{detail}{tries}"),
            },
            Ok(rsp) => {
                let (message, text) = error_text(&rsp.body);
                let message = self.redact(&message);
                let request_id = rsp.request_id().map(str::to_owned);
                if decision == Decision::Ambiguous {
                    let rid = request_id
                        .map(|r| format!(", request id {r}"))
                        .unwrap_or_default();
                    return CloudError::Ambiguous {
                        service,
                        operation,
                        detail: format!("{} {message}{rid}", rsp.status),
                    };
                }
                CloudError::Api {
                    service,
                    operation,
                    status: rsp.status,
                    kind: ApiErrorKind::classify(rsp.status, &text),
                    message: format!("{message}{tries}"),
                    request_id,
                }
            }
        }
    }
}

/// The human message of an OpenStack error body, and the text (type + message) to classify it by.
/// Shapes: Nova/Cinder `{"<key>": {"message"}}`, Neutron `{"NeutronError": {"type", "message"}}`,
/// Octavia `{"faultstring"}`, Keystone `{"error": {"message"}}`, Glance `{"message"}` or plain text.
pub(crate) fn error_text(body: &[u8]) -> (String, String) {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let short: String = text.chars().take(300).collect();
        return (short.clone(), short);
    };
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(n) = v.get("NeutronError") {
        let msg = s(n, "message").unwrap_or_default();
        let typ = s(n, "type").unwrap_or_default();
        return (msg.clone(), format!("{typ}: {msg}"));
    }
    let msg = s(&v, "faultstring")
        .or_else(|| v.get("error").and_then(|e| s(e, "message")))
        .or_else(|| s(&v, "message"))
        .or_else(|| {
            v.as_object()
                .filter(|o| o.len() == 1)
                .and_then(|o| o.values().next())
                .and_then(|inner| s(inner, "message"))
        })
        .or_else(|| s(&v, "title"))
        .unwrap_or_else(|| v.to_string().chars().take(300).collect());
    (msg.clone(), msg)
}

/// An error and its sources on one line (reqwest hides the useful part, e.g. "connection refused").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
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
    fn idempotency_by_method() {
        let get = ApiRequest::get(ServiceKind::Network, "port.list", "ports");
        assert!(get.is_idempotent());
        let post = ApiRequest::post(
            ServiceKind::Compute,
            "server.create",
            "servers",
            Value::Null,
        );
        assert!(!post.is_idempotent());
        assert!(post.clone().idempotent(true).is_idempotent());
        assert!(ApiRequest::put_empty(ServiceKind::Network, "network.tag", "x").is_idempotent());
        assert!(
            !ApiRequest::patch(ServiceKind::Image, "image.update", "x", Value::Null)
                .is_idempotent()
        );
    }

    #[test]
    fn error_messages_per_service() {
        let m = |b: &str| error_text(b.as_bytes());
        assert_eq!(
            m(r#"{"itemNotFound": {"code": 404, "message": "Instance x could not be found."}}"#).0,
            "Instance x could not be found."
        );
        let (msg, text) = m(
            r#"{"NeutronError": {"type": "OverQuota", "message": "Quota exceeded for resources: ['port'].", "detail": ""}}"#,
        );
        assert_eq!(msg, "Quota exceeded for resources: ['port'].");
        assert!(text.starts_with("OverQuota"));
        assert_eq!(
            m(r#"{"faultcode": "Client", "faultstring": "Load Balancer x is immutable and cannot be updated.", "debuginfo": null}"#).0,
            "Load Balancer x is immutable and cannot be updated."
        );
        assert_eq!(
            m(r#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#).0,
            "The request you have made requires authentication."
        );
        assert_eq!(
            m(r#"{"code": 400, "title": "Bad Request", "message": "bad"}"#).0,
            "bad"
        );
        assert_eq!(
            m("<html>\n  502 Bad   Gateway </html>").0,
            "<html> 502 Bad Gateway </html>"
        );
        assert_eq!(m("").0, "");
    }
}
