//! Prometheus metrics on `--http-endpoint`: upstream cinder-csi's OpenStack call metrics
//! (`openstack_api_request_duration_seconds{request}`, `openstack_api_requests_total{request}`,
//! `openstack_api_request_errors_total{request}`, fed by kos-cloud's [`CallObserver`]), and per
//! CSI call `csi_rpc_duration_seconds{rpc,code}` and `csi_rpc_total{rpc,code}`, `code` being the
//! gRPC code's name (`ok`, `not_found`, …).

use std::time::Duration;

use kos_cloud::{CallObserver, CallRecord};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    request: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: String,
    code: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn histogram() -> Histogram {
    // 5 ms … ~82 s: a Probe up to an attach waited out.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every metric kos-csi exports; shared as `Arc<Metrics>`.
pub struct Metrics {
    registry: Registry,
    api_duration: Histograms<RequestLabels>,
    api_requests: Family<RequestLabels, Counter>,
    api_errors: Family<RequestLabels, Counter>,
    rpc_duration: Histograms<RpcLabels>,
    rpc_total: Family<RpcLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let api_duration: Histograms<RequestLabels> =
            Family::new_with_constructor(histogram as fn() -> Histogram);
        let api_requests = Family::<RequestLabels, Counter>::default();
        let api_errors = Family::<RequestLabels, Counter>::default();
        let rpc_duration: Histograms<RpcLabels> =
            Family::new_with_constructor(histogram as fn() -> Histogram);
        let rpc_total = Family::<RpcLabels, Counter>::default();
        registry.register(
            "openstack_api_request_duration_seconds",
            "Latency of an OpenStack API call",
            api_duration.clone(),
        );
        registry.register(
            "openstack_api_requests",
            "OpenStack API calls",
            api_requests.clone(),
        );
        registry.register(
            "openstack_api_request_errors",
            "OpenStack API calls that failed (no answer, or a status of 400 or more)",
            api_errors.clone(),
        );
        registry.register(
            "csi_rpc_duration_seconds",
            "Time taken by a CSI call",
            rpc_duration.clone(),
        );
        registry.register("csi_rpc", "CSI calls, by answer", rpc_total.clone());
        Metrics {
            registry,
            api_duration,
            api_requests,
            api_errors,
            rpc_duration,
            rpc_total,
        }
    }

    /// Records one CSI call.
    pub fn rpc(&self, rpc: &str, code: &str, took: Duration) {
        let l = RpcLabels {
            rpc: rpc.to_owned(),
            code: code.to_owned(),
        };
        self.rpc_duration
            .get_or_create(&l)
            .observe(took.as_secs_f64());
        self.rpc_total.get_or_create(&l).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl CallObserver for Metrics {
    fn observe(&self, call: &CallRecord<'_>) {
        let labels = RequestLabels {
            request: call.operation.replace('.', "_"),
        };
        self.api_duration
            .get_or_create(&labels)
            .observe(call.duration.as_secs_f64());
        self.api_requests.get_or_create(&labels).inc();
        if call.is_error() {
            self.api_errors.get_or_create(&labels).inc();
        }
    }
}

/// Serves `/metrics` and `/healthz` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: std::sync::Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::routing::get;
    const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, OPENMETRICS)],
                        m.encode(),
                    )
                }
            }),
        );
    tracing::info!(address = %listener.local_addr()?, "serving /healthz and /metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_rpc_and_code() {
        let m = Metrics::new();
        m.rpc("CreateVolume", "ok", Duration::from_millis(3));
        m.rpc("CreateVolume", "already_exists", Duration::from_millis(3));
        m.rpc("CreateVolume", "ok", Duration::from_millis(3));
        let text = m.encode();
        assert!(
            text.contains(r#"csi_rpc_total{rpc="CreateVolume",code="ok"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"csi_rpc_total{rpc="CreateVolume",code="already_exists"} 1"#));
    }
}
