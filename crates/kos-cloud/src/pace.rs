//! How fast the cloud's clock runs against this machine's, read from the `Date` header of its answers
//! (RFC 9110 §6.6.1: an origin server with a clock sends one in every answer).
//!
//! A wait says how long it may last in the cloud's time ("a server boots within 30 minutes"); this
//! machine sleeps and gives up in its own. For a real cloud the two are one. A simulated cloud run
//! with a time scale serves a clock that runs faster, and its waits end sooner on this machine: the
//! session learns that from the answers themselves, never by asking whether the cloud is simulated.
//!
//! The header has whole seconds, and a real cloud's API servers may disagree by seconds (or a clock
//! may be stepped). So a window between two answers gives only bounds of the pace,
//! (Δdate ∓ 1 s) / Δlocal, close to the truth only when Δdate is many seconds: a window closes once
//! its dates are [`SPAN`] cloud seconds apart (and [`WINDOW`] apart here), however long that takes
//! on this machine. A window whose date goes back closes at once and says nothing, unless it went
//! back less than requests in parallel explain ([`OUT_OF_ORDER`] at the pace believed, at least
//! [`BACK`]): an answer stamped before the window's first and read after it is only skipped.
//!
//! This machine reads an answer late when it is busy (a test suite on two cores: a third of a
//! second and more), never early: a window that ends on a late answer looks slow, the next, which
//! starts on it, fast. Over consecutive windows that cancels out, the earliness of each inner
//! answer counting once against and once for: so the pace is read over the last [`WINDOWS`]
//! windows together, (Σ Δdate − 1 s) / (Σ Δlocal + [`LATE`]), the allowance for a late first
//! answer keeping it a lower bound. It is believed when there are at least [`FIRST_WINDOWS`], none
//! went back, it is at least [`BELIEVED`], and the windows' own lower bounds are within [`SPREAD`]
//! of each other: a clock stepped forward, or an answer from an API server that is ahead, makes one
//! window look many times faster than the rest, which late reads do not. Until then the pace is 1:
//! deadlines stay as long as a real cloud's, the safe side. A believed pace moves to each later
//! reading; between them it holds, unless the clock goes back or the last [`SLOWER`] windows
//! together show it clearly slower (their upper bound below the pace by [`DOUBT`]): then it is 1
//! again until a reading is believed.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The fewest cloud seconds (by the whole seconds of `Date`) one window spans: the truncation then
/// costs at most 2 s in 10, and the bound is between 0.82 and 1 times the pace. Shorter windows,
/// on a fast clock, say nothing (half a cloud second reads as 0 or 1 whole seconds).
pub const SPAN: i64 = 10;
/// The fewest local time one window spans: on a very fast clock, [`SPAN`] would be a few
/// milliseconds here, shorter than the jitter of when this machine reads an answer.
const WINDOW: Duration = Duration::from_millis(500);
/// How many of the latest windows the pace is read over: with up to four API servers whose clocks
/// are seconds apart, some window among four goes from a later clock to an earlier one.
pub const WINDOWS: usize = 4;
/// How many windows are enough to believe a fast clock at all. Early in a run that is few; the
/// callers ask again as the run goes, so a misreading does not last.
const FIRST_WINDOWS: usize = 2;
/// How late this machine may have read the first answer of a reading: the allowance that keeps a
/// reading a lower bound.
const LATE: f64 = 0.25;
/// How many of the latest windows, together, must show a clock slower than the pace believed for
/// it to be doubted: one alone is what an answer read late makes.
const SLOWER: usize = 2;
/// A reading below this is a real cloud's clock read through whole seconds and skew.
const BELIEVED: f64 = 4.0;
/// How far apart the windows' lower bounds of one clock may be: a window that ends on an answer read
/// a third of its length late looks three times slower than one that starts on it. A step or a
/// server's skew worth a reading of [`BELIEVED`] makes one window more than this apart.
const SPREAD: f64 = 5.0;
/// How long a request may take (this machine's time): an answer stamped at its start and read at
/// its end is read after answers to later requests.
const OUT_OF_ORDER: Duration = Duration::from_secs(1);
/// The least step back of the cloud's date (seconds) that is a clock going back rather than an
/// answer read out of order: a real cloud's NTP step, or API servers a minute apart.
const BACK: f64 = 60.0;
/// How much slower than the pace believed the last windows must show the clock to doubt it.
const DOUBT: f64 = 2.0;
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
    /// The last windows, newest last.
    windows: VecDeque<Window>,
    /// The latest answer: when it came, and its `Date` (Unix seconds).
    last: Option<(Instant, i64)>,
    /// The pace believed (`None`: 1, a real cloud's).
    believed: Option<f64>,
}

/// One window: how many whole seconds its dates span (`None`: its date went back) and how long it
/// lasted here (seconds).
#[derive(Debug, Clone, Copy)]
struct Window {
    cloud: Option<i64>,
    local: f64,
}

impl State {
    fn close(&mut self, window: Window, at: Instant, secs: i64) {
        self.windows.push_back(window);
        while self.windows.len() > WINDOWS {
            self.windows.pop_front();
        }
        self.anchor = Some((at, secs));
        self.believed = match (self.reading(), self.believed) {
            (Some(pace), _) => Some(pace),
            // A clock gone back: nothing can be believed.
            _ if window.cloud.is_none() => None,
            (None, Some(pace)) if self.slower(pace) => None,
            (None, held) => held,
        };
    }

    /// How far (cloud seconds) an answer's date may be behind the anchor's and be one stamped
    /// before it but read after it (requests in parallel): [`OUT_OF_ORDER`] at the pace believed
    /// (never a window's alone: a server that is ahead makes one look fast), and never less than
    /// [`BACK`]. A clock stepped back, or an API server behind by more, is farther.
    fn out_of_order(&self) -> f64 {
        (self.believed.unwrap_or(1.0) * OUT_OF_ORDER.as_secs_f64()).max(BACK)
    }

    /// The pace over the last windows, when it can be believed.
    fn reading(&self) -> Option<f64> {
        if self.windows.len() < FIRST_WINDOWS {
            return None;
        }
        let mut cloud = 0;
        let mut local = 0.0;
        let mut least = f64::INFINITY;
        let mut most = 0.0_f64;
        for w in &self.windows {
            let c = w.cloud?;
            cloud += c;
            local += w.local;
            let lower = (c - 1) as f64 / w.local;
            least = least.min(lower);
            most = most.max(lower);
        }
        let pace = (cloud - 1) as f64 / (local + LATE);
        (pace >= BELIEVED && least > 0.0 && most <= least * SPREAD).then_some(pace)
    }

    /// Whether the last [`SLOWER`] windows together show the clock slower than `pace` by [`DOUBT`].
    fn slower(&self, pace: f64) -> bool {
        if self.windows.len() < SLOWER {
            return false;
        }
        let last = self.windows.iter().rev().take(SLOWER);
        let (cloud, local) = last.fold((0, 0.0), |(c, l), w| {
            (c + w.cloud.unwrap_or(0), l + w.local)
        });
        (cloud + 1) as f64 / local * DOUBT < pace
    }
}

impl Pace {
    /// Records an answer that came at `at` with `Date: date`.
    pub fn observe(&self, at: Instant, date: SystemTime) {
        let Some(secs) = unix_secs(date) else {
            return;
        };
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // The latest date: an answer read later may have been stamped earlier.
        if s.last.is_none_or(|(seen, date)| at >= seen && secs >= date) {
            s.last = Some((at, secs));
        }
        let Some((since, from)) = s.anchor else {
            s.anchor = Some((at, secs));
            return;
        };
        let cloud = secs - from;
        let local = at.saturating_duration_since(since);
        if cloud < 0 && ((-cloud) as f64) <= s.out_of_order() {
            // Stamped before the anchor and read after it: requests run in parallel.
            return;
        }
        if cloud < 0 {
            // A clock stepped back, or a server behind the last one: nothing can be read from
            // this window, and the pace must not stay fast on older windows alone. Read after
            // the latest date, it is the cloud's date now.
            if s.last.is_none_or(|(seen, _)| at >= seen) {
                s.last = Some((at, secs));
            }
            let window = Window {
                cloud: None,
                local: local.as_secs_f64(),
            };
            s.close(window, at, secs);
            return;
        }
        if cloud < SPAN || local < WINDOW {
            return;
        }
        let window = Window {
            cloud: Some(cloud),
            local: local.as_secs_f64(),
        };
        s.close(window, at, secs);
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
        s.believed.unwrap_or(1.0)
    }

    /// Now on the cloud's clock (Unix seconds, to the second its `Date` gives): the latest
    /// answer's date plus the time since, at the believed pace. `None` before any answer had one.
    /// What the cloud and its clusters stamp (a server's `created`, a Node condition's
    /// transition) is compared with this, not with this machine's clock: a simulated cloud's runs
    /// faster, and a real cloud's may be set otherwise.
    pub fn now_unix(&self) -> Option<i64> {
        let rate = self.rate();
        let (at, secs) = self.state.lock().unwrap_or_else(|p| p.into_inner()).last?;
        let since = Instant::now().saturating_duration_since(at).as_secs_f64() * rate;
        Some(secs.saturating_add(since as i64))
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

    /// One answer: stamped by the cloud `at` (local time since the start) and read by this
    /// machine `late` after that, its date shifted by `skew` whole seconds.
    #[derive(Clone, Copy)]
    struct Answer {
        at: Duration,
        late: Duration,
        skew: i64,
    }

    /// A cloud whose clock runs `rate` times as fast as this machine's and starts `phase` cloud
    /// seconds past a whole second. Returns the rate believed after each answer.
    fn feed(
        p: &Pace,
        rate: f64,
        phase: f64,
        answers: impl IntoIterator<Item = Answer>,
    ) -> Vec<f64> {
        let t0 = Instant::now();
        let d0 = 1_800_000_000.0 + phase;
        answers
            .into_iter()
            .map(|a| {
                let cloud = d0 + a.at.as_secs_f64() * rate;
                let shown = SystemTime::UNIX_EPOCH
                    + Duration::from_secs((cloud.floor() as i64 + a.skew).unsigned_abs());
                p.observe(t0 + a.at + a.late, shown);
                p.rate()
            })
            .collect()
    }

    /// Now on the cloud's clock: its latest date, moved on at the believed pace; nothing before
    /// an answer. A late, older answer does not move it back.
    #[test]
    fn the_clouds_now_follows_its_latest_date_at_its_pace() {
        let p = Pace::default();
        assert_eq!(p.now_unix(), None);
        let t0 = Instant::now();
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        p.observe(t0, at(1_800_000_000));
        let now = p.now_unix().expect("an answer was seen");
        // Pace 1 (not yet learned): the date plus the (tiny) local time since.
        assert!((1_800_000_000..1_800_000_010).contains(&now), "{now}");
        // A cloud 100 times as fast: windows of 50 cloud seconds every 0.5 s here.
        let p = Pace::default();
        let base = Instant::now() - Duration::from_millis(2500);
        for i in 0..=5u64 {
            p.observe(
                base + Duration::from_millis(500 * i),
                at(1_800_000_000 + 50 * i),
            );
        }
        let rate = p.rate();
        assert!(rate >= BELIEVED, "{rate}");
        let now = p.now_unix().expect("answers were seen");
        // However slowly this test runs: the last date plus the local time since, at the pace.
        let since = Instant::now()
            .saturating_duration_since(base + Duration::from_millis(2500))
            .as_secs_f64();
        let most = 1_800_000_250 + (since * rate).ceil() as i64;
        assert!(
            (1_800_000_250..=most).contains(&now),
            "{now} (at most {most})"
        );
        // An older answer read late does not take the cloud's clock back.
        p.observe(base, at(1_700_000_000));
        assert!(p.now_unix().is_some_and(|n| n >= 1_800_000_250));
    }

    /// `n` answers `step` apart, read at once, from one clock.
    fn steady(step: Duration, n: u32) -> impl Iterator<Item = Answer> {
        (0..n).map(move |i| Answer {
            at: step * i,
            late: Duration::ZERO,
            skew: 0,
        })
    }

    /// A small deterministic generator (xorshift) for jitter.
    fn jitter(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed.max(1);
        move |bound| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % bound.max(1)
        }
    }

    #[test]
    fn a_real_cloud_runs_at_one() {
        let p = Pace::default();
        // A minute of answers every 60 ms, each read up to 40 ms late.
        let mut j = jitter(7);
        let answers = steady(Duration::from_millis(60), 1000).map(|a| Answer {
            late: Duration::from_millis(j(40)),
            ..a
        });
        let seen = feed(&p, 1.0, 0.3, answers);
        assert!(seen.iter().all(|r| *r == 1.0), "{seen:?}");
        assert_eq!(
            p.local_deadline(Duration::from_secs(1800)),
            Duration::from_secs(1800)
        );
    }

    #[test]
    fn a_clock_twice_as_fast_is_not_believed() {
        // Below BELIEVED a real cloud's skew could look the same: the safe side is 1.
        let p = Pace::default();
        feed(&p, 2.0, 0.0, steady(Duration::from_millis(60), 1000));
        assert_eq!(p.rate(), 1.0);
    }

    #[test]
    fn a_scaled_simulator_is_read_within_its_resolution() {
        let p = Pace::default();
        feed(&p, 100.0, 0.0, steady(Duration::from_millis(60), 30));
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
    fn whole_seconds_never_make_the_clock_look_faster_than_it_is() {
        // Whatever the phase of the cloud's seconds against the answers, and however often
        // they come, the bound is at most the pace and at least (SPAN - 1) / (SPAN + 1) of it.
        for rate in [10.0, 50.0] {
            for phase in [0.0, 0.25, 0.5, 0.75, 0.99] {
                for step_ms in [1u32, 7, 33, 90] {
                    // A hundred cloud seconds of answers.
                    let n = (100_000.0 / (rate * f64::from(step_ms))) as u32 + 1;
                    let p = Pace::default();
                    let seen = feed(
                        &p,
                        rate,
                        phase,
                        steady(Duration::from_millis(u64::from(step_ms)), n),
                    );
                    let top = seen.iter().copied().fold(0.0, f64::max);
                    assert!(top <= rate, "{rate} {phase} {step_ms}: {top}");
                    let r = p.rate();
                    assert!(r >= rate * 0.8, "{rate} {phase} {step_ms}: {r}");
                }
            }
        }
    }

    #[test]
    fn a_tenth_of_real_time_on_a_busy_client_is_read() {
        // --time-scale 0.1: the cloud's clock runs 10x. A busy client reads its answers up to
        // 50 ms late (gRPC, other tasks): 50 ms windows would span half a cloud second.
        let p = Pace::default();
        let mut j = jitter(11);
        let answers = steady(Duration::from_millis(3), 2000).map(|a| Answer {
            late: Duration::from_millis(j(50)),
            ..a
        });
        let seen = feed(&p, 10.0, 0.5, answers);
        let r = p.rate();
        assert!((8.0..=10.5).contains(&r), "{r}");
        // Believed within the first two windows' worth of answers (20 cloud s = 2 s here) and
        // never far above the truth.
        assert!(seen[1000] >= 8.0, "{}", seen[1000]);
        let top = seen.iter().copied().fold(0.0, f64::max);
        assert!(top <= 10.5, "{top}");
    }

    #[test]
    fn a_fiftieth_of_real_time_is_read() {
        // --time-scale 0.02: 50x. Answers every 5 ms, read up to 20 ms late.
        let p = Pace::default();
        let mut j = jitter(5);
        let answers = steady(Duration::from_millis(5), 1000).map(|a| Answer {
            late: Duration::from_millis(j(20)),
            ..a
        });
        feed(&p, 50.0, 0.0, answers);
        let r = p.rate();
        assert!((40.0..=52.0).contains(&r), "{r}");
    }

    #[test]
    fn a_saturated_client_at_a_fiftieth_still_reads_the_pace() {
        // 50x, a client so busy it reads answers up to 80 ms late (200 claims at once through
        // one process): windows of 200 ms here disagree by a third, and the pace still holds.
        for seed in 1..=20 {
            let p = Pace::default();
            let mut j = jitter(seed);
            let answers = steady(Duration::from_millis(1), 3000).map(|a| Answer {
                late: Duration::from_millis(j(80)),
                ..a
            });
            feed(&p, 50.0, 0.0, answers);
            let r = p.rate();
            assert!((30.0..=52.0).contains(&r), "seed {seed}: {r}");
        }
    }

    #[test]
    fn a_hundredth_of_real_time_on_a_loaded_machine_is_read() {
        // --time-scale 0.01 (100x) with the whole test suite on two cores: answers every 20 ms,
        // read up to 150 ms late. Windows of 10 cloud seconds (100 ms here) disagreed and the
        // pace fell back to 1 (CI's `a_served_simulator_is_timed_by_its_own_clock`).
        for seed in 1..=20 {
            let p = Pace::default();
            let mut j = jitter(seed);
            let answers = steady(Duration::from_millis(20), 500).map(|a| Answer {
                late: Duration::from_millis(j(150)),
                ..a
            });
            let seen = feed(&p, 100.0, 0.0, answers);
            let r = p.rate();
            assert!((60.0..=101.0).contains(&r), "seed {seed}: {r}");
            // Believed after two windows (a second here) and held from then on.
            let held = &seen[100..];
            assert!(held.iter().all(|r| *r >= 60.0), "seed {seed}: {held:?}");
        }
    }

    #[test]
    fn a_believed_pace_holds_through_answers_read_very_late() {
        // 100x with the whole test suite on two cores: most answers read within 30 ms, and now
        // and then one a third of a second late (the process was not scheduled). The windows
        // around such an answer disagree; the pace believed stays (CI's
        // `a_served_simulator_is_timed_by_its_own_clock` got a real cloud's deadline).
        for seed in 1..=20 {
            let p = Pace::default();
            let mut j = jitter(seed);
            let answers = steady(Duration::from_millis(20), 1000).map(|a| Answer {
                late: Duration::from_millis(if j(25) == 0 { 350 } else { j(30) }),
                ..a
            });
            let seen = feed(&p, 100.0, 0.0, answers);
            let first = seen.iter().position(|r| *r >= 40.0);
            let first = first.unwrap_or_else(|| panic!("seed {seed}: never believed"));
            let held = &seen[first..];
            let top = held.iter().copied().fold(0.0, f64::max);
            // A reading that starts on an answer read later than LATE is that much fast: 0.1 s
            // over the two seconds of four windows.
            assert!(top <= 105.0, "seed {seed}: {top}");
            let low = held.iter().copied().fold(f64::INFINITY, f64::min);
            // 1800 cloud seconds are then at most 45 s here: the local floor.
            assert!(low >= 40.0, "seed {seed}: fell to {low}");
        }
    }

    #[test]
    fn a_machine_loaded_from_the_start_still_reads_the_pace() {
        // 100x, every answer read up to 300 ms late, from the first: single windows disagree
        // threefold, and a deadline taken two seconds in must already see the pace.
        for seed in 1..=20 {
            let p = Pace::default();
            let mut j = jitter(seed);
            let answers = steady(Duration::from_millis(20), 500).map(|a| Answer {
                late: Duration::from_millis(j(300)),
                ..a
            });
            let seen = feed(&p, 100.0, 0.0, answers);
            let held = &seen[100..];
            let low = held.iter().copied().fold(f64::INFINITY, f64::min);
            let top = held.iter().copied().fold(0.0, f64::max);
            assert!(low >= 40.0, "seed {seed}: {low}");
            assert!(top <= 105.0, "seed {seed}: {top}");
        }
    }

    #[test]
    fn answers_read_out_of_order_do_not_look_like_a_clock_gone_back() {
        // 100x, requests in parallel: one answer in three is read 150 ms late, after answers to
        // requests sent later, so its date (whole seconds) is up to 15 s behind theirs. That is
        // not a clock gone back (CI's `a_served_simulator_is_timed_by_its_own_clock`: the
        // console reads of a bootstrap run in parallel, and the pace fell back to 1).
        let p = Pace::default();
        let t0 = Instant::now();
        let mut reads: Vec<(Duration, i64)> = (0..600u64)
            .map(|i| {
                let stamped = Duration::from_millis(20 * i);
                let late = Duration::from_millis(if i % 3 == 0 { 150 } else { 0 });
                let date = 1_800_000_000 + (stamped.as_secs_f64() * 100.0) as i64;
                (stamped + late, date)
            })
            .collect();
        reads.sort_by_key(|r| r.0);
        let seen: Vec<f64> = reads
            .into_iter()
            .map(|(at, date)| {
                let date = SystemTime::UNIX_EPOCH + Duration::from_secs(date.unsigned_abs());
                p.observe(t0 + at, date);
                p.rate()
            })
            .collect();
        let held = &seen[150..];
        let low = held.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(low >= 40.0, "fell to {low}");
    }

    #[test]
    fn a_clock_that_slows_down_is_doubted_within_a_few_windows() {
        // 100x for five seconds, then the clock runs at 1x (a simulator's scale changed): the
        // pace held so far must not outlive the evidence.
        let p = Pace::default();
        let t0 = Instant::now();
        let date = |cloud: f64| SystemTime::UNIX_EPOCH + Duration::from_secs(cloud as u64);
        let mut cloud = 1_800_000_000.0;
        let mut seen = Vec::new();
        for i in 0..2000u64 {
            cloud += if i < 250 { 2.0 } else { 0.02 };
            p.observe(t0 + Duration::from_millis(20 * i), date(cloud));
            seen.push(p.rate());
        }
        assert!(seen[249] >= 60.0, "{}", seen[249]);
        // A window spans at least 10 cloud seconds: ten seconds here at 1x. Two of them, and
        // the one the change falls in.
        let back = seen[250..].iter().position(|r| *r == 1.0).map(|n| n + 250);
        assert!(back.is_some_and(|n| n <= 250 + 1600), "{back:?}");
        assert!(seen[back.unwrap_or(0)..].iter().all(|r| *r == 1.0));
    }

    #[test]
    fn a_stalled_client_does_not_look_faster() {
        // 10x; this process stalls for two seconds (20 cloud s): the answers stamped meanwhile
        // are all read when it wakes. The windows around the stall look slow or fast; the pace
        // believed never goes above the truth's resolution, and comes back after.
        let p = Pace::default();
        let stall = Duration::from_secs(3)..Duration::from_secs(5);
        let answers = steady(Duration::from_millis(10), 1000).map(|a| Answer {
            late: if stall.contains(&a.at) {
                stall.end - a.at
            } else {
                Duration::ZERO
            },
            ..a
        });
        let seen = feed(&p, 10.0, 0.0, answers);
        let top = seen.iter().copied().fold(0.0, f64::max);
        assert!(top <= 10.5, "{top}");
        assert!(seen[290] >= 8.0, "before the stall: {}", seen[290]);
        let r = p.rate();
        assert!((8.0..=10.0).contains(&r), "after: {r}");
    }

    #[test]
    fn answers_read_a_little_late_make_one_window_look_fast_not_the_pace() {
        // 10x; a short hitch (150 ms, within what agreeing windows allow): the window that
        // starts on a late answer is short here and looks 15% fast; the one before looks slow,
        // and the least of them stays at or below the truth.
        for hitch_at in [3000u64, 3330, 3670] {
            let p = Pace::default();
            let hitch = Duration::from_millis(hitch_at)..Duration::from_millis(hitch_at + 150);
            let answers = steady(Duration::from_millis(10), 1000).map(|a| Answer {
                late: if hitch.contains(&a.at) {
                    hitch.end - a.at
                } else {
                    Duration::ZERO
                },
                ..a
            });
            let seen = feed(&p, 10.0, 0.0, answers);
            let top = seen.iter().copied().fold(0.0, f64::max);
            assert!(top <= 10.0, "hitch at {hitch_at} ms: {top}");
        }
    }

    #[test]
    fn too_few_answers_leave_the_real_pace() {
        // 100x, answers 250 ms (25 cloud s) apart: a window takes two of them.
        let p = Pace::default();
        feed(&p, 100.0, 0.0, steady(Duration::from_millis(250), 4));
        assert_eq!(p.rate(), 1.0, "four answers make one window");
        let p = Pace::default();
        feed(&p, 100.0, 0.0, steady(Duration::from_millis(250), 5));
        assert!(p.rate() > 50.0, "five answers make two windows");
    }

    #[test]
    fn servers_whose_clocks_disagree_do_not_look_fast() {
        // API servers behind one address, seconds to minutes apart, answering in turn or at
        // random: a window from a late clock to an early one goes back, so the least of four is
        // not fast.
        let skews = [0, 90, 400];
        let p = Pace::default();
        let answers = steady(Duration::from_millis(60), 1000)
            .zip(0..)
            .map(|(a, i)| Answer {
                skew: skews[i % 3],
                ..a
            });
        let seen = feed(&p, 1.0, 0.0, answers);
        assert!(seen.iter().all(|r| *r == 1.0), "{seen:?}");
        let mut j = jitter(3);
        for skews in [[0, 9, 30, 600], [0, 3, 5, 8]] {
            let p = Pace::default();
            let answers = steady(Duration::from_millis(20), 5000).map(|a| Answer {
                skew: skews[j(4) as usize],
                ..a
            });
            let seen = feed(&p, 1.0, 0.0, answers);
            assert!(seen.iter().all(|r| *r == 1.0), "{skews:?}");
        }
    }

    #[test]
    fn a_stepped_clock_does_not_look_fast() {
        // An NTP step of an hour forward on a real cloud, early and late in a run.
        for at in [20, 600] {
            let p = Pace::default();
            let answers = steady(Duration::from_millis(60), 1000)
                .zip(0..)
                .map(|(a, i)| Answer {
                    skew: if i >= at { 3600 } else { 0 },
                    ..a
                });
            let seen = feed(&p, 1.0, 0.0, answers);
            assert!(seen.iter().all(|r| *r == 1.0), "step at {at}");
        }
        // A simulator's clock stepped back an hour: the pace is 1 at once (safe), and comes
        // back once the windows after the step are all that is left.
        let p = Pace::default();
        let answers = steady(Duration::from_millis(10), 600)
            .zip(0..)
            .map(|(a, i)| Answer {
                skew: if i >= 300 { -3600 } else { 0 },
                ..a
            });
        let seen = feed(&p, 50.0, 0.0, answers);
        assert!(seen[299] >= 40.0, "{}", seen[299]);
        assert_eq!(seen[300], 1.0);
        assert!(seen[599] >= 40.0, "{}", seen[599]);
    }

    #[test]
    fn a_date_header_is_read() {
        let p = Pace::default();
        let t0 = Instant::now();
        p.observe_header(t0, "Sun, 06 Nov 1994 08:49:37 GMT");
        for i in 1..=5u64 {
            let t = t0 + Duration::from_millis(250 * i);
            let s = 37 + 25 * i;
            let (m, s) = (49 + s / 60, s % 60);
            p.observe_header(t, &format!("Sun, 06 Nov 1994 08:{m:02}:{s:02} GMT"));
        }
        assert!(p.rate() > 50.0, "{}", p.rate());
        p.observe_header(t0, "not a date");
    }
}
