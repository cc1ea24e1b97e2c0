//! When a failed call may be sent again, and how long to wait first. Pure functions, so every rule
//! is unit-tested without a cloud: [`classify`] decides, [`RetryPolicy::delay`] waits.
//!
//! The rule that matters most: a request that may have taken effect is never re-sent blindly. A POST
//! answered with a 5xx (or cut off after it was sent) is [`Decision::Ambiguous`]; only answers that
//! mean "not processed" (429, 503 with Retry-After, Octavia's 409 "immutable") are retried for it.
//!
//! "Not processed, come back later" answers ([`RetryReason::is_throttled`]) do not use up a call's
//! attempts: a call waits its turn for as long as [`RetryPolicy::max_throttled`] allows, so a cloud
//! with a strict rate limit makes a run slower, never fail. Their waits honour Retry-After plus a
//! random share of it, and [`RetrySlots`] keeps the retries of one session at least
//! [`RETRY_SPACING`] apart: callers turned away together never come back in the same instant.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::request::ServiceKind;

/// How often and how long to retry. Full-jitter exponential backoff: attempt n waits a uniform random
/// time in `[0, min(max_delay, base_delay * 2^n)]`, unless the service said how long (Retry-After):
/// then that long plus a uniform random share of it (at least `base_delay`'s worth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included, for answers that may be failures (5xx, a lost
    /// connection). Throttled answers do not count: see `max_throttled`.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// A Retry-After longer than this is cut to it (a cloud asking for 10 minutes would stall a run).
    pub max_retry_after: Duration,
    /// How long one call may wait in all on answers that say "not processed, try later" (429, 503
    /// with Retry-After, Octavia's busy 409) before it gives up with the last of them.
    pub max_throttled: Duration,
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
            max_throttled: Duration::from_secs(15 * 60),
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
            max_throttled: Duration::from_secs(60),
            retry_busy_load_balancer: true,
        }
    }

    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            max_throttled: Duration::ZERO,
            ..Self::fast()
        }
    }

    /// Whether a call that has waited `throttled` so far on throttled answers, and failed `attempts`
    /// times otherwise (this failure included), may be sent again for `reason`.
    pub fn allows(&self, reason: RetryReason, attempts: u32, throttled: Duration) -> bool {
        if reason.is_throttled() {
            throttled < self.max_throttled
        } else {
            attempts < self.max_attempts
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
            // Honoured, never shortened; the random share spreads callers told the same thing at
            // the same time over a window as long as the wait itself.
            let after = after.min(self.max_retry_after);
            return after + share(after.max(self.base_delay), rng);
        }
        let exp = attempt.saturating_sub(1).min(30);
        let cap = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        share(cap, rng)
    }
}

/// What one call has used of its retries under a [`RetryPolicy`]: the attempts sent, those that
/// failed in a way that counts against `max_attempts`, and the time waited on throttled answers.
/// The one bookkeeping of every retry loop (calls, Keystone at connect and on re-authentication).
#[derive(Debug, Default)]
pub struct Budget {
    /// Attempts sent so far (the caller counts them as it sends).
    pub attempts: u32,
    failures: u32,
    throttled: Duration,
}

impl Budget {
    /// Counts the last attempt as failed for `reason` and returns how long to wait before the next
    /// one, or `None` when the policy allows no more.
    pub fn retry(
        &mut self,
        policy: &RetryPolicy,
        reason: RetryReason,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Option<Duration> {
        if !reason.is_throttled() {
            self.failures += 1;
        }
        if !policy.allows(reason, self.failures, self.throttled) {
            return None;
        }
        let wait = policy.delay(self.attempts, retry_after, rng);
        if reason.is_throttled() {
            self.throttled += wait;
        }
        Some(wait)
    }
}

/// A uniform random duration in `[0, of]`, to the nanosecond (milliseconds would make equal draws
/// likely among a few hundred callers).
fn share(of: Duration, rng: &mut impl Rng) -> Duration {
    let ns = u64::try_from(of.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=ns))
}

/// The least time between two retries one session schedules.
pub const RETRY_SPACING: Duration = Duration::from_millis(2);

/// The instants at which a session's retries are due. [`reserve`](Self::reserve) moves a retry
/// forward until it is at least [`RETRY_SPACING`] from every other one still to come, so that no
/// two retries of a session ever go out in the same millisecond, however their random waits fell.
#[derive(Debug, Default)]
pub struct RetrySlots {
    due: BTreeSet<tokio::time::Instant>,
}

impl RetrySlots {
    /// Reserves the first free instant at or after `at`; forgets those before `now`.
    pub fn reserve(
        &mut self,
        now: tokio::time::Instant,
        at: tokio::time::Instant,
    ) -> tokio::time::Instant {
        self.due = self.due.split_off(&now);
        let mut at = at.max(now);
        // Instants are reserved RETRY_SPACING apart, so one pass over the neighbours from
        // `at - RETRY_SPACING` upwards finds the first gap.
        let from = at.checked_sub(RETRY_SPACING).unwrap_or(now);
        for t in self.due.range(from..) {
            if *t >= at + RETRY_SPACING {
                break;
            }
            at = at.max(*t + RETRY_SPACING);
        }
        self.due.insert(at);
        at
    }
}

/// Why a call is retried (for logs, and for which budget the retry uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    /// 429.
    RateLimited,
    /// 503 with Retry-After: the service said when to come back.
    Overloaded,
    /// 503 without Retry-After, for an idempotent call.
    Unavailable,
    /// Another 5xx an idempotent call may be sent again after.
    ServerError,
    LoadBalancerBusy,
    Transport,
    /// A create that lost a race for a row another create was inserting (Keystone's access
    /// rules): nothing was stored, and the same request succeeds once the other committed.
    Contended,
}

impl RetryReason {
    /// "Not processed, try later": the call waits its turn instead of using up its attempts.
    pub fn is_throttled(self) -> bool {
        match self {
            RetryReason::RateLimited | RetryReason::Overloaded | RetryReason::LoadBalancerBusy => {
                true
            }
            RetryReason::Unavailable
            | RetryReason::ServerError
            | RetryReason::Transport
            | RetryReason::Contended => false,
        }
    }
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
        503 if retry_after.is_some() => Decision::Retry(RetryReason::Overloaded, retry_after),
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
    use std::collections::BTreeSet;

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
            Decision::Retry(RetryReason::Overloaded, S)
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
    fn retry_after_is_honoured_plus_a_random_share_and_capped() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        let after = Duration::from_secs(2);
        let waits: Vec<Duration> = (0..200)
            .map(|_| p.delay(1, Some(after), &mut rng))
            .collect();
        // Never shorter than asked, at most twice as long.
        assert!(
            waits.iter().all(|w| *w >= after && *w <= after * 2),
            "{waits:?}"
        );
        // Spread over the window, not bunched at one end.
        assert!(waits.iter().any(|w| *w < after + after / 4));
        assert!(waits.iter().any(|w| *w > after * 2 - after / 4));
        // Callers told the same thing at once come back at different milliseconds.
        let ms: BTreeSet<u128> = waits.iter().map(Duration::as_millis).collect();
        assert!(ms.len() > 150, "{} distinct of 200", ms.len());
        // A cloud asking for an hour is cut to max_retry_after (plus its share).
        let long = p.delay(1, Some(Duration::from_secs(3600)), &mut rng);
        assert!(long >= p.max_retry_after && long <= p.max_retry_after * 2);
        // A Retry-After of 0 still spreads the callers over base_delay.
        let zero = p.delay(1, Some(Duration::ZERO), &mut rng);
        assert!(zero <= p.base_delay);
    }

    #[test]
    fn a_budget_counts_failures_and_throttled_time_apart() {
        let p = RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::fast()
        };
        let mut rng = StdRng::seed_from_u64(5);
        let mut b = Budget::default();
        // Throttled answers, however many, leave the failures alone until their time is used up.
        for _ in 0..100 {
            b.attempts += 1;
            assert!(
                b.retry(&p, RetryReason::RateLimited, Some(Duration::ZERO), &mut rng)
                    .is_some()
            );
        }
        b.attempts += 1;
        assert!(
            b.retry(&p, RetryReason::ServerError, None, &mut rng)
                .is_some()
        );
        b.attempts += 1;
        assert!(
            b.retry(&p, RetryReason::ServerError, None, &mut rng)
                .is_none()
        );
        let mut b = Budget::default();
        while b
            .retry(
                &p,
                RetryReason::RateLimited,
                Some(Duration::from_secs(5)),
                &mut rng,
            )
            .is_some()
        {}
        assert!(b.throttled >= p.max_throttled);
    }

    #[test]
    fn throttled_answers_use_up_time_not_attempts() {
        let p = RetryPolicy::fast();
        assert!(p.allows(RetryReason::RateLimited, 100, Duration::from_secs(59)));
        assert!(!p.allows(RetryReason::RateLimited, 0, Duration::from_secs(60)));
        assert!(p.allows(RetryReason::LoadBalancerBusy, 100, Duration::ZERO));
        assert!(p.allows(RetryReason::Overloaded, 100, Duration::ZERO));
        assert!(p.allows(RetryReason::ServerError, 5, Duration::ZERO));
        assert!(!p.allows(RetryReason::ServerError, 6, Duration::ZERO));
        assert!(!p.allows(RetryReason::Transport, 6, Duration::ZERO));
        assert!(!RetryPolicy::none().allows(RetryReason::RateLimited, 1, Duration::ZERO));
    }

    #[test]
    fn retries_of_a_session_never_share_a_millisecond() {
        let now = tokio::time::Instant::now();
        let mut slots = RetrySlots::default();
        // 50 callers turned away together and told the same wait, and 50 with random ones.
        let same = now + Duration::from_secs(1);
        let mut rng = StdRng::seed_from_u64(3);
        let mut due: Vec<tokio::time::Instant> =
            (0..50).map(|_| slots.reserve(now, same)).collect();
        due.extend((0..50).map(|_| {
            let at = now + Duration::from_micros(rng.random_range(0..20_000));
            slots.reserve(now, at)
        }));
        due.sort();
        for pair in due.windows(2) {
            assert!(
                pair[1] - pair[0] >= RETRY_SPACING,
                "{:?}",
                pair[1] - pair[0]
            );
        }
        assert!(due[0] >= now);
        // Nothing before `now`; instants past are forgotten.
        let later = now + Duration::from_secs(10);
        assert_eq!(slots.reserve(later, now), later);
        assert_eq!(slots.due.len(), 1);
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
