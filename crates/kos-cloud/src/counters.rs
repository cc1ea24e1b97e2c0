//! Counts of HTTP calls actually sent through [`Session::send`](crate::Session::send): what makes
//! "a no-op plan costs O(1) calls" checkable. Every attempt counts, so a retried call counts twice
//! and once more in `retries`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::request::ServiceKind;

/// A snapshot of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallCounts {
    pub by_service: BTreeMap<ServiceKind, u64>,
    pub by_operation: BTreeMap<(ServiceKind, &'static str), u64>,
    pub retries: u64,
}

impl CallCounts {
    pub fn total(&self) -> u64 {
        self.by_service.values().sum()
    }

    pub fn service(&self, s: ServiceKind) -> u64 {
        self.by_service.get(&s).copied().unwrap_or(0)
    }

    pub fn operation(&self, s: ServiceKind, op: &str) -> u64 {
        self.by_operation
            .iter()
            .filter(|((svc, o), _)| *svc == s && *o == op)
            .map(|(_, n)| n)
            .sum()
    }

    /// The calls made since `earlier` (a snapshot of the same session taken before).
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        let by_service = self
            .by_service
            .iter()
            .map(|(k, v)| (*k, v.saturating_sub(earlier.service(*k))))
            .filter(|(_, v)| *v > 0)
            .collect();
        let by_operation = self
            .by_operation
            .iter()
            .map(|(k, v)| {
                let before = earlier.by_operation.get(k).copied().unwrap_or(0);
                (*k, v.saturating_sub(before))
            })
            .filter(|(_, v)| *v > 0)
            .collect();
        CallCounts {
            by_service,
            by_operation,
            retries: self.retries.saturating_sub(earlier.retries),
        }
    }
}

/// The live counters of one session (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct CallCounters {
    inner: Mutex<CallCounts>,
}

impl CallCounters {
    pub(crate) fn record_call(&self, service: ServiceKind, operation: &'static str) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *c.by_service.entry(service).or_default() += 1;
        *c.by_operation.entry((service, operation)).or_default() += 1;
    }

    pub(crate) fn record_retry(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).retries += 1;
    }

    pub(crate) fn snapshot(&self) -> CallCounts {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_diffs() {
        let c = CallCounters::default();
        c.record_call(ServiceKind::Network, "port.list");
        let before = c.snapshot();
        c.record_call(ServiceKind::Network, "port.list");
        c.record_call(ServiceKind::Compute, "server.list");
        c.record_retry();
        let now = c.snapshot();
        assert_eq!(now.total(), 3);
        assert_eq!(now.service(ServiceKind::Network), 2);
        assert_eq!(now.operation(ServiceKind::Network, "port.list"), 2);
        assert_eq!(now.operation(ServiceKind::Image, "image.list"), 0);
        let d = now.since(&before);
        assert_eq!(d.total(), 2);
        assert_eq!(d.operation(ServiceKind::Network, "port.list"), 1);
        assert_eq!(d.retries, 1);
    }
}

/// One request attempt as it went over the wire: what a metrics exporter needs.
#[derive(Debug, Clone, Copy)]
pub struct CallRecord<'a> {
    pub service: ServiceKind,
    /// `noun.verb`, e.g. `loadbalancer.create`.
    pub operation: &'a str,
    /// The HTTP status, `None` when no answer came (connection refused, reset, timeout).
    pub status: Option<u16>,
    pub duration: std::time::Duration,
    /// When the call is sent again after this attempt: the wait before that (Retry-After or
    /// backoff, its random share and the session's spacing of retries included).
    pub retry_in: Option<std::time::Duration>,
}

impl CallRecord<'_> {
    /// Whether the attempt failed: no answer, or a status of 400 or more.
    pub fn is_error(&self) -> bool {
        self.status.is_none_or(|s| s >= 400)
    }
}

/// Told about every attempt [`Session::send`](crate::Session::send) makes (retries and re-sends
/// after a re-authentication included). Called inline: keep it cheap and never block.
pub trait CallObserver: Send + Sync {
    fn observe(&self, call: &CallRecord<'_>);
}
