//! An in-memory [`Host`] for tests and demos: a manual clock, console logs per server, and a static
//! network (endpoint → the servers it reaches, the same from every server).

use std::collections::BTreeMap;
use std::sync::Mutex;

use time::OffsetDateTime;

use crate::guest::Guest;
use crate::seam::{Host, ServerId};

/// The host of the tests.
#[derive(Debug)]
pub struct MemoryHost {
    now: Mutex<OffsetDateTime>,
    consoles: Mutex<BTreeMap<ServerId, Vec<String>>>,
    network: Mutex<BTreeMap<String, Vec<ServerId>>>,
    /// URL prefixes no download reaches.
    offline: Mutex<Vec<String>>,
    /// URL prefixes whose host is down for everyone, proxies included.
    down: Mutex<Vec<String>>,
}

impl MemoryHost {
    pub fn new(start: OffsetDateTime) -> MemoryHost {
        MemoryHost {
            now: Mutex::new(start),
            consoles: Mutex::new(BTreeMap::new()),
            network: Mutex::new(BTreeMap::new()),
            offline: Mutex::new(Vec::new()),
            down: Mutex::new(Vec::new()),
        }
    }

    /// Moves the clock.
    pub fn advance(&self, d: time::Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += d;
    }

    /// Sets which servers `endpoint` reaches, in order.
    pub fn route(&self, endpoint: &str, backends: &[&ServerId]) {
        self.network
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                endpoint.to_owned(),
                backends.iter().map(|s| (*s).clone()).collect(),
            );
    }

    /// Makes downloads of URLs starting with `prefix` fail (`true`), or reach again (`false`).
    pub fn set_offline(&self, prefix: &str, offline: bool) {
        set(&self.offline, prefix, offline);
    }

    /// Makes the host of URLs starting with `prefix` down for everyone (`true`): a proxy fails
    /// too. `false` brings it back.
    pub fn set_down(&self, prefix: &str, down: bool) {
        set(&self.down, prefix, down);
    }

    /// A server's console as the host received it.
    pub fn console_of(&self, server: &ServerId) -> Vec<String> {
        self.consoles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(server)
            .cloned()
            .unwrap_or_default()
    }

    /// Ticks the guest, then jumps the clock to its next wake-up, until nothing is due any more or
    /// `limit` of simulated time has passed. Returns the time it stopped at.
    pub fn settle(
        &self,
        guest: &mut Guest,
        limit: time::Duration,
    ) -> Result<OffsetDateTime, crate::GuestError> {
        let end = self.now() + limit;
        loop {
            guest.tick(self)?;
            match guest.next_wake() {
                Some(t) if t <= end => {
                    let mut now = self
                        .now
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if t > *now {
                        *now = t;
                    }
                }
                _ => return Ok(self.now()),
            }
        }
    }
}

impl Host for MemoryHost {
    /// One clock: the tests move the date with the host's time.
    fn calendar(&self) -> OffsetDateTime {
        self.now()
    }

    fn now(&self) -> OffsetDateTime {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn console(&self, server: &ServerId, line: &str) {
        self.consoles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(server.clone())
            .or_default()
            .push(line.to_owned());
    }

    fn internet_reaches(&self, _from: &ServerId, url: &str) -> bool {
        !listed(&self.offline, url) && self.internet_serves(url)
    }

    fn internet_serves(&self, url: &str) -> bool {
        !listed(&self.down, url)
    }

    fn api_backends(&self, _from: &ServerId, endpoint: &str) -> Vec<ServerId> {
        self.network
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(endpoint)
            .cloned()
            .unwrap_or_default()
    }
}

fn set(list: &Mutex<Vec<String>>, prefix: &str, on: bool) {
    let mut list = list
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    list.retain(|p| p != prefix);
    if on {
        list.push(prefix.to_owned());
    }
}

fn listed(list: &Mutex<Vec<String>>, url: &str) -> bool {
    list.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .any(|p| url.starts_with(p.as_str()))
}
