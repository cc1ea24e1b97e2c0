//! Per-object retry delays after failures, as the upstream's work queue has them: doubling from a
//! minimum to a maximum, per object, reset by a success.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    /// Object UID → consecutive failures.
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn failures(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The delay before retrying `uid` after one more failure.
    pub fn failed(&self, uid: &str) -> Duration {
        let mut f = self.failures();
        let n = f.entry(uid.to_owned()).or_insert(0);
        let delay = self
            .min
            .saturating_mul(2u32.saturating_pow(*n))
            .min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// `uid` succeeded (or is gone): its next failure starts from the minimum again.
    pub fn reset(&self, uid: &str) {
        self.failures().remove(uid);
    }

    /// Forgets every object but `live`.
    pub fn retain(&self, live: &HashSet<String>) {
        self.failures().retain(|u, _| live.contains(u));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_maximum_and_resets() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(30));
        let delays: Vec<u64> = (0..5).map(|_| b.failed("a").as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 30, 30]);
        assert_eq!(b.failed("b").as_secs(), 5, "per object");
        b.reset("a");
        assert_eq!(b.failed("a").as_secs(), 5);
        b.retain(&HashSet::from(["b".to_owned()]));
        assert_eq!(b.failed("a").as_secs(), 5, "forgotten");
        assert_eq!(b.failed("b").as_secs(), 10, "kept");
    }
}
