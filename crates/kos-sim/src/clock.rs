//! Simulated time. Every duration in the model (per-call latency, server boot, LB provisioning, volume
//! creation) is given in *cloud seconds*; the time scale maps them to real time, so tests run the same
//! state machines in milliseconds and benchmarks in realistic proportions.

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

/// A point in simulated time: cloud seconds since the simulator started.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
pub struct SimTime(pub f64);

impl SimTime {
    pub fn after(self, cloud_secs: f64) -> SimTime {
        SimTime(self.0 + cloud_secs)
    }
    pub fn reached(self, deadline: SimTime) -> bool {
        self.0 >= deadline.0
    }
}

#[derive(Debug, Clone)]
pub struct Clock {
    started: Instant,
    /// This machine's wall clock at `started`: the cloud's clock starts there and runs at the scale.
    started_wall: SystemTime,
    /// Real seconds per cloud second (1.0 = real time, 0.001 = a 30 s boot takes 30 ms).
    scale: f64,
    /// Simulated time at `started` (non-zero when state was restored from disk).
    offset: f64,
}

impl Clock {
    pub fn new(scale: f64) -> Self {
        Self::resumed(scale, SimTime(0.0))
    }

    /// A clock that continues from `at` (a simulator whose state was saved and loaded again).
    pub fn resumed(scale: f64, at: SimTime) -> Self {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        Clock {
            started: Instant::now(),
            started_wall: SystemTime::now(),
            scale,
            offset: at.0,
        }
    }

    pub fn now(&self) -> SimTime {
        SimTime(self.offset + self.started.elapsed().as_secs_f64() / self.scale)
    }

    /// The cloud's wall clock (its `Date` header): this machine's at the start, then running at the
    /// scale, so a minute of this machine is an hour of a cloud at scale 1/60.
    pub fn wall(&self) -> SystemTime {
        self.started_wall + self.started.elapsed().div_f64(self.scale)
    }

    /// The cloud's wall clock at simulated time 0: [`Clock::wall`] is this plus [`Clock::now`].
    pub fn epoch(&self) -> SystemTime {
        self.started_wall
            .checked_sub(Duration::from_secs_f64(self.offset.max(0.0)))
            .unwrap_or(self.started_wall)
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Real duration of `cloud_secs` simulated seconds.
    pub fn real(&self, cloud_secs: f64) -> Duration {
        Duration::from_secs_f64((cloud_secs * self.scale).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_maps_cloud_time_to_real_time() {
        let c = Clock::new(0.001);
        assert_eq!(c.real(30.0), Duration::from_millis(30));
        let t = c.now();
        assert!(t.after(5.0).0 > t.0);
        assert!(!t.reached(t.after(1.0)));
        // A nonsense scale falls back to real time rather than dividing by zero.
        assert_eq!(Clock::new(0.0).scale(), 1.0);
    }

    #[test]
    fn the_wall_clock_runs_at_the_scale() {
        let c = Clock::new(0.001);
        let before = c.wall();
        std::thread::sleep(Duration::from_millis(20));
        let ran = c.wall().duration_since(before).unwrap_or_default();
        // 20 ms here are at least 20 s there (more on a slow machine).
        assert!(ran >= Duration::from_secs(20), "{ran:?}");
    }
}
