//! When a failed call may be sent again, and how long to wait first. Pure functions, so every rule
//! is unit-tested without a cloud: [`classify`] decides, [`RetryPolicy::delay`] waits.
//!
//! The rule that matters most: a request that may have taken effect is never re-sent blindly. A POST
//! answered with a 5xx (or cut off after it was sent) is [`Decision::Ambiguous`]; only answers that
//! mean "not processed" (429, 503 with Retry-After, Octavia's 409 "immutable") are retried for it.

use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::request::ServiceKind;

/// How often and how long to retry. Full-jitter exponential backoff: attempt n waits a uniform random
/// time in `[0, min(max_delay, base_delay * 2^n)]`, unless the service said how long (Retry-After).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// A Retry-After longer than this is cut to it (a cloud asking for 10 minutes would stall a run).
    pub max_retry_after: Duration,
    /// Whether a 409 from an Octavia object busy in PENDING_* is retried here. A controller that
    /// requeues instead (and must not hold a worker while Octavia works) turns this off: the 409
    /// then comes back as [`crate::CloudError::Api`] with status 409.
    pub retry_busy_load_balancer: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            retry_busy_load_balancer: true,
        }
    }
}

impl RetryPolicy {
    /// For tests: backoff of a few milliseconds (Retry-After is still honoured, up to 5 s).
    pub fn fast() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(2),
            max_delay: Duration::from_millis(20),
            max_retry_after: Duration::from_secs(5),
            retry_busy_load_balancer: true,
        }
    }

    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Self::fast()
        }
    }

    /// The wait before the retry that follows failed attempt `attempt` (1-based).
    pub fn delay(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Duration {
        if let Some(after) = retry_after {
            return after.min(self.max_retry_after);
        }
        let exp = attempt.saturating_sub(1).min(30);
        let cap = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rng.random_range(0..=cap_ms))
    }
}

/// Why a call is retried (for logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    RateLimited,
    Unavailable,
    ServerError,
    LoadBalancerBusy,
    Transport,
}

/// What to do with the outcome of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Success,
    /// Send again, after the service's Retry-After if it gave one, else after backoff.
    Retry(RetryReason, Option<Duration>),
    /// The request may have taken effect: the caller must look the object up before anything else.
    Ambiguous,
    /// Give up with this answer.
    Fail,
}

/// Classifies an HTTP answer. `message` is the service's error text (it distinguishes Octavia's
/// "immutable" 409 from a real conflict).
pub fn classify(
    service: ServiceKind,
    idempotent: bool,
    status: u16,
    retry_after: Option<Duration>,
    message: &str,
) -> Decision {
    match status {
        200..=299 => Decision::Success,
        // Rejected before processing: safe for any method.
        429 => Decision::Retry(RetryReason::RateLimited, retry_after),
        503 if retry_after.is_some() => Decision::Retry(RetryReason::Unavailable, retry_after),
        409 if service == ServiceKind::LoadBalancer && lb_busy(message) => {
            Decision::Retry(RetryReason::LoadBalancerBusy, None)
        }
        500 | 502 | 503 | 504 if idempotent => {
            let reason = if status == 503 {
                RetryReason::Unavailable
            } else {
                RetryReason::ServerError
            };
            Decision::Retry(reason, None)
        }
        500 | 502 | 503 | 504 => Decision::Ambiguous,
        _ => Decision::Fail,
    }
}

/// Classifies a transport failure: one that happened before the request left (connect refused, DNS)
/// is safe to retry; after it was sent, only an idempotent request is.
pub fn classify_transport(sent: bool, idempotent: bool) -> Decision {
    if !sent || idempotent {
        Decision::Retry(RetryReason::Transport, None)
    } else {
        Decision::Ambiguous
    }
}

/// Octavia refuses changes while a load balancer is PENDING_*: "Load Balancer x is immutable and
/// cannot be updated." Nothing was done, so the call can be sent again once it is ACTIVE.
fn lb_busy(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("immutable") || m.contains("pending_")
}

/// Parses a Retry-After header: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at = SystemTime::from(at.with_timezone(&chrono::Utc));
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ServiceKind::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const S: Option<Duration> = Some(Duration::from_secs(3));

    #[test]
    fn success_and_plain_failures() {
        assert_eq!(classify(Compute, false, 201, None, ""), Decision::Success);
        assert_eq!(classify(Compute, true, 404, None, ""), Decision::Fail);
        assert_eq!(classify(Network, true, 409, None, "in use"), Decision::Fail);
        assert_eq!(classify(Identity, true, 401, None, ""), Decision::Fail);
    }

    #[test]
    fn rate_limit_retries_any_method() {
        assert_eq!(
            classify(Compute, false, 429, S, ""),
            Decision::Retry(RetryReason::RateLimited, S)
        );
        assert_eq!(
            classify(Compute, true, 429, None, ""),
            Decision::Retry(RetryReason::RateLimited, None)
        );
    }

    #[test]
    fn server_errors_depend_on_idempotency() {
        for status in [500, 502, 503, 504] {
            assert!(matches!(
                classify(Network, true, status, None, ""),
                Decision::Retry(_, None)
            ));
            assert_eq!(
                classify(Network, false, status, None, ""),
                Decision::Ambiguous
            );
        }
        // 503 with Retry-After means "not processed".
        assert_eq!(
            classify(Network, false, 503, S, ""),
            Decision::Retry(RetryReason::Unavailable, S)
        );
        assert_eq!(classify(Network, false, 501, None, ""), Decision::Fail);
    }

    #[test]
    fn octavia_immutable_conflict_is_retried() {
        let msg = "Load Balancer 1f2e is immutable and cannot be updated.";
        assert_eq!(
            classify(LoadBalancer, false, 409, None, msg),
            Decision::Retry(RetryReason::LoadBalancerBusy, None)
        );
        assert_eq!(
            classify(
                LoadBalancer,
                true,
                409,
                None,
                "Invalid state PENDING_UPDATE of loadbalancer resource 1f2e"
            ),
            Decision::Retry(RetryReason::LoadBalancerBusy, None)
        );
        assert_eq!(classify(Network, false, 409, None, msg), Decision::Fail);
        assert_eq!(
            classify(LoadBalancer, false, 409, None, "Duplicate listener port"),
            Decision::Fail
        );
    }

    #[test]
    fn transport() {
        assert!(matches!(
            classify_transport(false, false),
            Decision::Retry(..)
        ));
        assert!(matches!(
            classify_transport(true, true),
            Decision::Retry(..)
        ));
        assert_eq!(classify_transport(true, false), Decision::Ambiguous);
    }

    #[test]
    fn full_jitter_backoff_is_bounded_and_grows() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 1..=10 {
            let cap = p
                .base_delay
                .saturating_mul(1 << (attempt - 1))
                .min(p.max_delay);
            for _ in 0..50 {
                assert!(p.delay(attempt, None, &mut rng) <= cap);
            }
        }
        // Jitter actually spreads the delays.
        let ds: Vec<_> = (0..20).map(|_| p.delay(6, None, &mut rng)).collect();
        assert!(ds.iter().any(|d| *d != ds[0]));
        // Huge attempt numbers do not overflow.
        assert!(p.delay(u32::MAX, None, &mut rng) <= p.max_delay);
    }

    #[test]
    fn retry_after_wins_but_is_capped() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(2)), &mut rng),
            Duration::from_secs(2)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3600)), &mut rng),
            p.max_retry_after
        );
    }

    #[test]
    fn retry_after_formats() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_470); // 07:27:50 GMT
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(10))
        );
        // A date in the past means "now".
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }
}
