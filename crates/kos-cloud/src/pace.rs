//! How fast the cloud's clock runs against this machine's, read from the `Date` header of its answers
//! (RFC 9110 §6.6.1: an origin server with a clock sends one in every answer).
//!
//! A wait says how long it may last in the cloud's time ("a server boots within 30 minutes"); this
//! machine sleeps and gives up in its own. For a real cloud the two are one. A simulated cloud run
//! with a time scale serves a clock that runs faster, and its waits end sooner on this machine: the
//! session learns that from the answers themselves, never by asking whether the cloud is simulated.
//!
//! The header has whole seconds, and a real cloud's API servers may disagree by seconds (or a clock
//! may be stepped). So one window between two answers gives only a lower bound, (Δdate − 1 s) / Δlocal,
//! and the pace believed is the smallest of the last [`WINDOWS`] windows' bounds: a step, or an answer
//! from a server that is ahead, makes one window look fast but not all of them. Until two windows
//! are seen, and whenever the bound is below [`BELIEVED`], the pace is 1: deadlines then stay
//! as long as a real cloud's, the safe side.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The shortest local span one estimate is made over.
const WINDOW: Duration = Duration::from_millis(50);
/// How many of the latest windows must agree (at most): with up to four API servers whose clocks
/// are seconds apart, some window among four goes from a later clock to an earlier one.
pub const WINDOWS: usize = 4;
/// How many windows are enough to believe a fast clock at all. Early in a run that is few; the
/// callers ask again as the run goes, so a misreading does not last.
const FIRST_WINDOWS: usize = 2;
/// A bound below this is a real cloud's clock read through whole seconds and skew.
const BELIEVED: f64 = 4.0;
/// However fast the cloud's clock runs, a wait never ends sooner than this on this machine: what
/// kos and the cloud's own processes do takes this machine's time.
pub const LOCAL_FLOOR: Duration = Duration::from_secs(120);

/// The cloud's pace, learned from its answers. Shared by a session and its clones.
#[derive(Debug, Default)]
pub struct Pace {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The answer the current window started with: when it came, and its `Date` (Unix seconds).
    anchor: Option<(Instant, i64)>,
    /// The lower bounds of the last windows, newest last.
    bounds: VecDeque<f64>,
}

impl Pace {
    /// Records an answer that came at `at` with `Date: date`.
    pub fn observe(&self, at: Instant, date: SystemTime) {
        let Some(secs) = unix_secs(date) else {
            return;
        };
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((since, from)) = s.anchor else {
            s.anchor = Some((at, secs));
            return;
        };
        let local = at.saturating_duration_since(since);
        if local < WINDOW {
            return;
        }
        // The true difference is more than the difference of the whole seconds, less one.
        let bound = ((secs - from - 1).max(0) as f64) / local.as_secs_f64();
        s.bounds.push_back(bound);
        while s.bounds.len() > WINDOWS {
            s.bounds.pop_front();
        }
        s.anchor = Some((at, secs));
    }

    /// Records the `Date` header `value` of an answer that came at `at`; an unreadable one is
    /// ignored (some proxies send none).
    pub fn observe_header(&self, at: Instant, value: &str) {
        if let Ok(t) = chrono::DateTime::parse_from_rfc2822(value.trim()) {
            self.observe(at, t.into());
        }
    }

    /// Cloud seconds per local second: 1 for a real cloud.
    pub fn rate(&self) -> f64 {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.bounds.len() < FIRST_WINDOWS {
            return 1.0;
        }
        let least = s.bounds.iter().copied().fold(f64::INFINITY, f64::min);
        if least >= BELIEVED { least } else { 1.0 }
    }

    /// How long `cloud` (a span of the cloud's time) lasts on this machine.
    pub fn local(&self, cloud: Duration) -> Duration {
        cloud.div_f64(self.rate())
    }

    /// A deadline of `cloud` in the cloud's time, on this machine: never shorter than
    /// [`LOCAL_FLOOR`] (or `cloud` itself, if that is shorter).
    pub fn local_deadline(&self, cloud: Duration) -> Duration {
        self.local(cloud).max(cloud.min(LOCAL_FLOOR))
    }
}

fn unix_secs(t: SystemTime) -> Option<i64> {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_secs()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every `step` of local time from a cloud whose clock runs `rate` times as fast, with
    /// `skew(i)` seconds added to the i-th answer's date.
    fn feed(p: &Pace, rate: f64, step: Duration, n: u32, skew: impl Fn(u32) -> i64) {
        let t0 = Instant::now();
        let d0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for i in 0..n {
            let local = step * i;
            let cloud = local.mul_f64(rate);
            let shown = d0 + Duration::from_secs(cloud.as_secs());
            let shown = if skew(i) >= 0 {
                shown + Duration::from_secs(skew(i).unsigned_abs())
            } else {
                shown - Duration::from_secs(skew(i).unsigned_abs())
            };
            p.observe(t0 + local, shown);
        }
    }

    #[test]
    fn a_real_cloud_runs_at_one() {
        let p = Pace::default();
        feed(&p, 1.0, Duration::from_millis(60), 200, |_| 0);
        assert_eq!(p.rate(), 1.0);
        assert_eq!(
            p.local_deadline(Duration::from_secs(1800)),
            Duration::from_secs(1800)
        );
    }

    #[test]
    fn a_scaled_simulator_is_read_within_its_resolution() {
        let p = Pace::default();
        feed(&p, 100.0, Duration::from_millis(60), 10, |_| 0);
        let r = p.rate();
        assert!((80.0..=100.0).contains(&r), "{r}");
        assert!(p.local(Duration::from_secs(180)) < Duration::from_secs(3));
        // Thirty minutes of the cloud's time: never below the local floor.
        assert_eq!(p.local_deadline(Duration::from_secs(1800)), LOCAL_FLOOR);
        // A deadline shorter than the floor stays as it was asked.
        assert_eq!(
            p.local_deadline(Duration::from_secs(30)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn too_few_answers_leave_the_real_pace() {
        let p = Pace::default();
        feed(&p, 100.0, Duration::from_millis(60), 2, |_| 0);
        assert_eq!(p.rate(), 1.0, "two answers make one window");
        let p = Pace::default();
        feed(&p, 100.0, Duration::from_millis(60), 3, |_| 0);
        assert!(p.rate() > 50.0, "three answers make two windows");
    }

    #[test]
    fn servers_whose_clocks_disagree_do_not_look_fast() {
        // Three API servers behind one address, 0, 90 and 400 s apart, answering in turn: a window
        // from a late clock to an early one is negative, so the least of four is not fast.
        let p = Pace::default();
        let skews = [0, 90, 400];
        feed(&p, 1.0, Duration::from_millis(60), 300, |i| {
            skews[(i % 3) as usize]
        });
        assert_eq!(p.rate(), 1.0);
    }

    #[test]
    fn a_stepped_clock_does_not_look_fast() {
        let p = Pace::default();
        // An NTP step of an hour on the 20th answer.
        feed(&p, 1.0, Duration::from_millis(60), 40, |i| {
            if i >= 20 { 3600 } else { 0 }
        });
        assert_eq!(p.rate(), 1.0);
        // Right after the step too.
        let p = Pace::default();
        feed(&p, 1.0, Duration::from_millis(60), 21, |i| {
            if i >= 20 { 3600 } else { 0 }
        });
        assert_eq!(p.rate(), 1.0);
    }

    #[test]
    fn answers_closer_than_a_window_are_one_window() {
        let p = Pace::default();
        feed(&p, 100.0, Duration::from_millis(1), 500, |_| 0);
        // 500 ms of answers every millisecond: windows of at least 50 ms each.
        let r = p.rate();
        assert!((80.0..=100.0).contains(&r), "{r}");
    }

    #[test]
    fn a_date_header_is_read() {
        let p = Pace::default();
        let t0 = Instant::now();
        p.observe_header(t0, "Sun, 06 Nov 1994 08:49:37 GMT");
        for i in 1..=5u64 {
            let t = t0 + Duration::from_millis(100 * i);
            let s = 37 + 10 * i;
            let (m, s) = (49 + s / 60, s % 60);
            p.observe_header(t, &format!("Sun, 06 Nov 1994 08:{m:02}:{s:02} GMT"));
        }
        assert!(p.rate() > 50.0, "{}", p.rate());
        p.observe_header(t0, "not a date");
    }
}
