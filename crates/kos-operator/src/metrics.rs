//! Prometheus metrics under controller-runtime's names, so the dashboards and alerts operators
//! have for every other controller work for this one: `controller_runtime_reconcile_total
//! {controller, result}`, `controller_runtime_reconcile_errors_total{controller}`,
//! `controller_runtime_reconcile_time_seconds{controller}`, `controller_runtime_active_workers
//! {controller}`; per Cluster, `kos_operator_cluster_reconcile_total{namespace, cluster, result}`
//! and `kos_operator_cluster_reconcile_time_seconds{namespace, cluster}`; and whether this replica
//! leads (`leader_election_master_status{name}`, client-go's name).

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The controller's name in the `controller` label (its kind, lowercased, as controller-runtime
/// names a controller built `For` a type).
pub const CONTROLLER: &str = "cluster";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterResultLabels {
    namespace: String,
    cluster: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    // 5 ms (a refused spec) … ~11 h (a rollout of a large cluster).
    Histogram::new(exponential_buckets(0.005, 2.0, 24))
}

/// Every metric kos-operator exports. Shared as an `Arc`.
pub struct Metrics {
    registry: Registry,
    total: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    time: Histograms<ControllerLabels>,
    active: Family<ControllerLabels, Gauge>,
    cluster_total: Family<ClusterResultLabels, Counter>,
    cluster_time: Histograms<ClusterLabels>,
    leading: Family<LeaseLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let total = Family::<ResultLabels, Counter>::default();
        let errors = Family::<ControllerLabels, Counter>::default();
        let time: Histograms<ControllerLabels> =
            Family::new_with_constructor(reconcile_histogram as fn() -> Histogram);
        let active = Family::<ControllerLabels, Gauge>::default();
        let cluster_total = Family::<ClusterResultLabels, Counter>::default();
        let cluster_time: Histograms<ClusterLabels> =
            Family::new_with_constructor(reconcile_histogram as fn() -> Histogram);
        let leading = Family::<LeaseLabels, Gauge>::default();
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            time.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            active.clone(),
        );
        registry.register(
            "kos_operator_cluster_reconcile",
            "Reconciles of one Cluster",
            cluster_total.clone(),
        );
        registry.register(
            "kos_operator_cluster_reconcile_time_seconds",
            "Length of the reconciles of one Cluster",
            cluster_time.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "1 while this replica holds the Lease, else 0",
            leading.clone(),
        );
        Metrics {
            registry,
            total,
            errors,
            time,
            active,
            cluster_total,
            cluster_time,
            leading,
        }
    }

    /// Starts timing one reconcile of the Cluster `namespace/name`.
    pub fn reconcile(self: &Arc<Self>, namespace: &str, name: &str) -> Timer {
        self.active.get_or_create(&controller()).inc();
        Timer {
            metrics: Arc::clone(self),
            labels: ClusterLabels {
                namespace: namespace.to_owned(),
                cluster: name.to_owned(),
            },
            started: Instant::now(),
        }
    }

    /// Whether this replica holds the Lease `name`.
    pub fn leading(&self, name: &str, leading: bool) {
        self.leading
            .get_or_create(&LeaseLabels {
                name: name.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// The OpenMetrics text exposition.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn controller() -> ControllerLabels {
    ControllerLabels {
        controller: CONTROLLER.to_owned(),
    }
}

/// One reconcile being timed.
#[must_use = "finish() records the reconcile"]
pub struct Timer {
    metrics: Arc<Metrics>,
    labels: ClusterLabels,
    started: Instant,
}

impl Timer {
    /// Records the reconcile: `ok` (controller-runtime's `success`) or an error.
    pub fn finish(self, ok: bool) {
        let m = &self.metrics;
        let secs = self.started.elapsed().as_secs_f64();
        let result = if ok { "success" } else { "error" };
        m.active.get_or_create(&controller()).dec();
        m.total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        if !ok {
            m.errors.get_or_create(&controller()).inc();
        }
        m.time.get_or_create(&controller()).observe(secs);
        m.cluster_total
            .get_or_create(&ClusterResultLabels {
                namespace: self.labels.namespace.clone(),
                cluster: self.labels.cluster.clone(),
                result: result.to_owned(),
            })
            .inc();
        m.cluster_time.get_or_create(&self.labels).observe(secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_runtime_names_and_labels() {
        let m = Arc::new(Metrics::new());
        m.reconcile("fleet", "a").finish(true);
        m.reconcile("fleet", "a").finish(false);
        let open = m.reconcile("fleet", "b");
        m.leading(crate::rbac::LEASE_NAME, true);
        let text = m.encode();
        for line in [
            "controller_runtime_reconcile_total{controller=\"cluster\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"cluster\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"cluster\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"cluster\"} 2",
            "controller_runtime_active_workers{controller=\"cluster\"} 1",
            "kos_operator_cluster_reconcile_total{namespace=\"fleet\",cluster=\"a\",result=\"error\"} 1",
            "kos_operator_cluster_reconcile_time_seconds_count{namespace=\"fleet\",cluster=\"a\"} 2",
            "leader_election_master_status{name=\"kos-operator\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        open.finish(true);
    }
}
