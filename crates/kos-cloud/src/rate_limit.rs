//! A client-side rate limit shared by a session and its clones: a busy controller must not be the
//! reason a cloud starts answering 429 to everyone in the project.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `per_second` requests per second on average, `burst` of them back to back.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    tolerance: Duration,
    /// The theoretical arrival time of the next request (GCRA): requests are spaced `interval`
    /// apart, and may come up to `tolerance` early.
    next: Mutex<Option<Instant>>,
}

impl RateLimiter {
    /// `None` when `per_second` is not a positive finite number.
    pub fn new(per_second: f64, burst: u32) -> Option<RateLimiter> {
        if !(per_second.is_finite() && per_second > 0.0) {
            return None;
        }
        let interval = Duration::from_secs_f64(1.0 / per_second);
        Some(RateLimiter {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            next: Mutex::new(None),
        })
    }

    /// Waits for this request's turn. The slot is reserved before waiting, so concurrent callers
    /// queue in order without holding a lock while they sleep.
    pub async fn acquire(&self) {
        let now = Instant::now();
        let wait = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let tat = next.map_or(now, |t| t.max(now));
            let allowed_at = tat.checked_sub(self.tolerance).unwrap_or(now);
            *next = Some(tat + self.interval);
            allowed_at.saturating_duration_since(now)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_nonsense() {
        assert!(RateLimiter::new(0.0, 1).is_none());
        assert!(RateLimiter::new(f64::NAN, 1).is_none());
        assert!(RateLimiter::new(-1.0, 1).is_none());
    }

    // Lower bounds only: a slow machine can make this slower, never faster.
    #[tokio::test]
    async fn spaces_requests_after_the_burst() {
        let l = RateLimiter::new(50.0, 3).expect("limiter");
        let start = Instant::now();
        for _ in 0..3 {
            l.acquire().await;
        }
        for _ in 0..5 {
            l.acquire().await;
        }
        // 8 requests at 50/s with a burst of 3: the last one not before 5 intervals (100 ms).
        assert!(
            start.elapsed() >= Duration::from_millis(100),
            "{:?}",
            start.elapsed()
        );
    }
}
