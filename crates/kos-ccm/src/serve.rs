//! The HTTP endpoints on `--bind-address`:`--secure-port` (10258, as upstream): `/healthz` for the
//! liveness probe and `/metrics` for Prometheus. Plain HTTP: the manifests kos generates probe it
//! so (upstream serves a self-signed HTTPS certificate nobody verifies).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], m.encode())
}

/// Serves until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_on(
        tokio::net::TcpListener::bind(addr).await?,
        metrics,
        shutdown,
    )
    .await
}

/// Serves on a bound listener (binding first lets the caller fail early on a taken port).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(address = %listener.local_addr()?, "serving /healthz and /metrics");
    axum::serve(listener, router(metrics))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn healthz_and_metrics() {
        let m = Arc::new(Metrics::new());
        m.reconcile("loadbalancer_ensure").finish(true);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move { axum::serve(listener, router(m)).await });
        let health = reqwest::get(format!("http://{addr}/healthz"))
            .await
            .expect("healthz");
        assert_eq!(health.status(), 200);
        let rsp = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .expect("metrics");
        assert_eq!(
            rsp.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some(OPENMETRICS)
        );
        let text = rsp.text().await.expect("text");
        assert!(
            text.contains(
                "cloudprovider_openstack_reconcile_total{operation=\"loadbalancer_ensure\"} 1"
            ),
            "{text}"
        );
        server.abort();
    }
}
