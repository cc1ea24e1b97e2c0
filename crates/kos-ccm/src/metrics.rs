//! Prometheus metrics under the upstream CCM's names, so its dashboards and alerts keep working:
//! `openstack_api_request_duration_seconds{request}`, `openstack_api_requests_total{request}`,
//! `openstack_api_request_errors_total{request}` for every OpenStack call (fed by kos-cloud's
//! [`CallObserver`]), and `cloudprovider_openstack_reconcile_duration_seconds{operation}` with
//! `…_reconcile_total` and `…_reconcile_errors_total` for reconciles.

use std::sync::Arc;
use std::time::Instant;

use kos_cloud::{CallObserver, CallRecord};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `request` label: the operation as upstream spells it (`loadbalancer_create`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    request: String,
}

/// The `operation` label of reconcile metrics (`loadbalancer_ensure`, `loadbalancer_delete`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn api_histogram() -> Histogram {
    // 5 ms … ~41 s: a fast GET up to a slow Octavia create.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

fn reconcile_histogram() -> Histogram {
    // 10 ms … ~164 s.
    Histogram::new(exponential_buckets(0.01, 2.0, 15))
}

/// Every metric kos-ccm exports. Cheap to share (`Arc`).
pub struct Metrics {
    registry: Registry,
    api_duration: Histograms<RequestLabels>,
    api_requests: Family<RequestLabels, Counter>,
    api_errors: Family<RequestLabels, Counter>,
    reconcile_duration: Histograms<OperationLabels>,
    reconcile_total: Family<OperationLabels, Counter>,
    reconcile_errors: Family<OperationLabels, Counter>,
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
            Family::new_with_constructor(api_histogram as fn() -> Histogram);
        let api_requests = Family::<RequestLabels, Counter>::default();
        let api_errors = Family::<RequestLabels, Counter>::default();
        let reconcile_duration: Histograms<OperationLabels> =
            Family::new_with_constructor(reconcile_histogram as fn() -> Histogram);
        let reconcile_total = Family::<OperationLabels, Counter>::default();
        let reconcile_errors = Family::<OperationLabels, Counter>::default();
        // Counters get their `_total` suffix from the encoder.
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
            "cloudprovider_openstack_reconcile_duration_seconds",
            "Time taken by a reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "cloudprovider_openstack_reconcile",
            "Reconciles",
            reconcile_total.clone(),
        );
        registry.register(
            "cloudprovider_openstack_reconcile_errors",
            "Reconciles that failed",
            reconcile_errors.clone(),
        );
        Metrics {
            registry,
            api_duration,
            api_requests,
            api_errors,
            reconcile_duration,
            reconcile_total,
            reconcile_errors,
        }
    }

    /// Starts timing one reconcile of `operation`; [`ReconcileTimer::finish`] records it.
    pub fn reconcile(self: &Arc<Self>, operation: &'static str) -> ReconcileTimer {
        ReconcileTimer {
            metrics: Arc::clone(self),
            operation,
            started: Instant::now(),
        }
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

/// One reconcile being timed.
#[must_use = "finish() records the reconcile"]
pub struct ReconcileTimer {
    metrics: Arc<Metrics>,
    operation: &'static str,
    started: Instant,
}

impl ReconcileTimer {
    pub fn finish(self, ok: bool) {
        let labels = OperationLabels {
            operation: self.operation.to_owned(),
        };
        let m = &self.metrics;
        m.reconcile_duration
            .get_or_create(&labels)
            .observe(self.started.elapsed().as_secs_f64());
        m.reconcile_total.get_or_create(&labels).inc();
        if !ok {
            m.reconcile_errors.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kos_cloud::ServiceKind;
    use std::time::Duration;

    #[test]
    fn upstream_names_and_labels() {
        let m = Arc::new(Metrics::new());
        for status in [Some(202), Some(409), None] {
            m.observe(&CallRecord {
                service: ServiceKind::LoadBalancer,
                operation: "loadbalancer.create",
                status,
                duration: Duration::from_millis(30),
                retry_in: None,
            });
        }
        m.reconcile("loadbalancer_ensure").finish(true);
        m.reconcile("loadbalancer_ensure").finish(false);
        let text = m.encode();
        for line in [
            "openstack_api_requests_total{request=\"loadbalancer_create\"} 3",
            "openstack_api_request_errors_total{request=\"loadbalancer_create\"} 2",
            "openstack_api_request_duration_seconds_count{request=\"loadbalancer_create\"} 3",
            "cloudprovider_openstack_reconcile_total{operation=\"loadbalancer_ensure\"} 2",
            "cloudprovider_openstack_reconcile_errors_total{operation=\"loadbalancer_ensure\"} 1",
            "cloudprovider_openstack_reconcile_duration_seconds_count{operation=\"loadbalancer_ensure\"} 2",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
