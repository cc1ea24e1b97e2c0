//! The differential fidelity check: one recorded sequence of kos-cloud calls ([`sequence`]) runs
//! against kos-sim and against a real cloud; each call's outcome is normalised to an
//! [`Observation`] (status code, error kind, collapsed state sequence, response key set, counts and a
//! few chosen values; never ids, times or addresses), the two recordings are compared ([`compare`]),
//! and every difference must be listed with its reason in docs/fidelity.md ([`known`]).
//!
//! The calls go through [`kos_cloud::Session::send`] (kos's one request path) at the wire level,
//! because response key sets are exactly what the typed facades hide.

pub mod compare;
pub mod known;
pub mod record;
pub mod sequence;

pub use compare::{Difference, diff};
pub use known::{Known, Report};
pub use record::{Observation, Recorder, Recording};
pub use sequence::record;

/// The simulator for the check: real time scaled by 1/20, no per-call latency. Slow enough that every
/// intermediate state a real cloud shows for seconds (BUILD, creating, PENDING_*) lasts several polls.
pub fn sim_config() -> kos_sim::SimConfig {
    kos_sim::SimConfig {
        time_scale: 0.05,
        latency: kos_sim::LatencyModel::instant(),
        ..Default::default()
    }
}

/// docs/fidelity.md in the workspace.
pub fn known_differences_file() -> std::path::PathBuf {
    crate::workspace().join("docs/fidelity.md")
}
