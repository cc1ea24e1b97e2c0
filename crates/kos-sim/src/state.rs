//! The whole cloud's state: one struct per service, in one lock. Cross-service effects (a server binding a
//! port, a volume attached to a server, an LB's VIP port) are plain function calls between the service
//! modules, under that one lock, so they are atomic as in a real cloud's database transactions.

use serde::{Deserialize, Serialize};

use crate::cinder::CinderState;
use crate::clock::SimTime;
use crate::config::{Quotas, SimConfig};
use crate::glance::GlanceState;
use crate::keystone::KeystoneState;
use crate::neutron::NeutronState;
use crate::nova::NovaState;
use crate::octavia::OctaviaState;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Cloud {
    /// Simulated time of the last advance.
    pub now: SimTime,
    pub keystone: KeystoneState,
    pub nova: NovaState,
    pub neutron: NeutronState,
    pub glance: GlanceState,
    pub octavia: OctaviaState,
    pub cinder: CinderState,
    /// Quotas of the (single) project; the admin API can change them.
    pub quotas: Quotas,
    /// Compute availability zones; compute host `compute<i>` is in zone `zones[(i - 1) % len]`.
    #[serde(default = "default_zones")]
    pub zones: Vec<String>,
    /// Cinder's availability zones; empty: the compute zones' names (see [`Cloud::volume_zones`]).
    #[serde(default)]
    pub volume_zones: Vec<String>,
    /// What the servers cannot download from the internet (`/_sim/internet`).
    #[serde(default)]
    pub internet: Internet,
    /// The attached guest runtime's hooks (see [`crate::guests`]); not part of the saved cloud.
    #[serde(skip)]
    pub guests: crate::guests::Hooks,
    /// The cloud's date at simulated time 0 (its clock's [`crate::clock::Clock::epoch`]): set by
    /// the app that serves it, so that what the services stamp agrees with its `Date` header.
    #[serde(skip)]
    pub epoch: Option<chrono::DateTime<chrono::Utc>>,
}

/// The internet as the servers see it: every URL answers, but those an outage makes unreachable.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Internet {
    /// Regexes searched in a URL: a download of a matching URL from a server fails as an
    /// unreachable host does (the cloud's egress blocked, or the host down). A proxy the servers
    /// reach still reaches such a URL unless `down` matches it too.
    #[serde(default)]
    pub unreachable: Vec<String>,
    /// Regexes of URLs whose host is down for everyone: a proxy asked for one fails as well.
    #[serde(default)]
    pub down: Vec<String>,
}

impl Internet {
    /// Whether a server can download `url` now, directly. An invalid regex (refused when set)
    /// matches nothing.
    pub fn reaches(&self, url: &str) -> bool {
        !matches(&self.unreachable, url) && self.serves(url)
    }

    /// Whether `url`'s host answers anyone on the internet (a proxy): not down.
    pub fn serves(&self, url: &str) -> bool {
        !matches(&self.down, url)
    }
}

fn matches(regexes: &[String], url: &str) -> bool {
    regexes
        .iter()
        .filter_map(|r| regex::Regex::new(r).ok())
        .any(|r| r.is_match(url))
}

fn default_zones() -> Vec<String> {
    vec!["nova".into()]
}

impl Cloud {
    /// What a fresh cloud has: the project and user, an external network with a subnet, flavors, an image,
    /// default quotas.
    pub fn seeded(cfg: &SimConfig) -> Cloud {
        let mut c = Cloud {
            quotas: cfg.quotas.clone(),
            zones: if cfg.zones.is_empty() {
                default_zones()
            } else {
                cfg.zones.clone()
            },
            volume_zones: cfg.volume_zones.clone(),
            ..Default::default()
        };
        c.keystone.seed(cfg);
        let project_id = c.keystone.project_id().to_owned();
        crate::neutron::seed(&mut c, cfg, &project_id);
        crate::nova::seed(&mut c, cfg, &project_id);
        crate::glance::seed(&mut c, cfg, &project_id);
        crate::octavia::seed(&mut c, cfg, &project_id);
        crate::cinder::seed(&mut c, cfg, &project_id);
        c
    }

    /// The zone of a compute host (`compute<i>`).
    #[must_use]
    pub fn zone_of_host(&self, host: &str) -> String {
        let i: usize = host
            .strip_prefix("compute")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        match self.zones.len() {
            0 => "nova".into(),
            n => self.zones[(i.max(1) - 1) % n].clone(),
        }
    }

    /// The zone a server gets when none is asked for.
    #[must_use]
    pub fn default_zone(&self) -> String {
        self.zones.first().cloned().unwrap_or_else(|| "nova".into())
    }

    /// Cinder's availability zones: its own when configured, else the compute zones' names.
    #[must_use]
    pub fn volume_zones(&self) -> &[String] {
        if self.volume_zones.is_empty() {
            &self.zones
        } else {
            &self.volume_zones
        }
    }

    /// The zone a volume gets when none is asked for (Cinder's `default_availability_zone`).
    #[must_use]
    pub fn default_volume_zone(&self) -> String {
        self.volume_zones()
            .first()
            .cloned()
            .unwrap_or_else(|| "nova".into())
    }

    /// The cloud's date now: what its services and its servers' clocks stamp, the date its
    /// `Date` header shows. A cloud no app serves (unit tests) keeps this machine's date.
    #[must_use]
    pub fn date(&self) -> chrono::DateTime<chrono::Utc> {
        self.date_at(self.now)
    }

    /// The cloud's date at simulated time `at`.
    #[must_use]
    pub fn date_at(&self, at: SimTime) -> chrono::DateTime<chrono::Utc> {
        match self.epoch {
            Some(epoch) => epoch + chrono::Duration::microseconds((at.0.max(0.0) * 1e6) as i64),
            None => chrono::Utc::now(),
        }
    }

    /// Moves every resource whose deadline has passed to its next state.
    pub fn advance(&mut self, now: SimTime, cfg: &SimConfig) {
        if now.0 < self.now.0 {
            return;
        }
        self.now = now;
        crate::nova::advance(self, cfg);
        crate::octavia::advance(self, cfg);
        crate::cinder::advance(self, cfg);
        crate::neutron::advance(self, cfg);
    }
}

#[cfg(test)]
mod internet_tests {
    use super::Internet;

    /// `unreachable` is the servers' view only; `down` is everyone's, a proxy's included.
    #[test]
    fn unreachable_hosts_are_served_to_a_proxy_and_down_ones_are_not() {
        let net = Internet {
            unreachable: vec!["^https://registry\\.k8s\\.io/".into()],
            down: vec!["^https://quay\\.io/".into()],
        };
        let (blocked, down) = ("https://registry.k8s.io/v2/", "https://quay.io/v2/");
        assert!(!net.reaches(blocked) && net.serves(blocked));
        assert!(!net.reaches(down) && !net.serves(down));
        assert!(net.reaches("https://ghcr.io/v2/") && net.serves("https://ghcr.io/v2/"));
        let old: Internet = serde_json::from_str(r#"{"unreachable": []}"#).expect("without down");
        assert!(old.down.is_empty());
    }
}
