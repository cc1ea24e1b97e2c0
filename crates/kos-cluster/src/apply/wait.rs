//! Waits by list-polling: one list call per resource type (servers, load balancers, volumes, snapshots) answers all
//! pending waits of that type at once, instead of one GET per resource per poll.
//!
//! Each wait is looked at soon after it starts and then less often: a tenth of the time waited so far,
//! between a quarter `interval` and `interval` (a load balancer: every quarter `interval`, see
//! [`poll_after`]). Many waits are short (an LB child update takes seconds)
//! and a fixed interval would add half of it to each of them, one after another on the LB's critical
//! path; a long wait costs few polls, and is seen to end at most `interval` late. The poller runs only
//! while something is waited for, and sleeps until the next wait is due.
//! [`PollMode::GetPerResource`] polls the way Terraform's providers do, for benchmark baselines.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;

use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::{SnapshotFilter, SnapshotStatus, VolumeFilter, VolumeStatus};
use kos_cloud::model::compute::ServerStatus;
use kos_cloud::model::load_balancer::{LoadBalancerFilter, ProvisioningStatus};
use kos_cloud::{CloudError, Session};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::{PollMode, WaitClock};

/// The shortest pause between two polls on this machine, however fast the cloud's clock runs.
const MIN_LOCAL_POLL: Duration = Duration::from_millis(50);

/// What is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum WaitKind {
    Server,
    LoadBalancer,
    Volume,
    /// Only ever waited for to be gone (teardown).
    Snapshot,
}

/// Ready (ACTIVE / available) or gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Ready,
    Gone,
}

/// What the last poll saw of the object.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    pub address: Option<String>,
    pub port_id: Option<String>,
}

/// The lists the poller makes (filtered to the cluster during apply, wider during teardown).
#[derive(Debug, Clone, Default)]
pub(crate) struct Filters {
    pub servers: TagQuery,
    pub load_balancers: LoadBalancerFilter,
    pub volumes: VolumeFilter,
}

struct Entry {
    kind: WaitKind,
    id: String,
    target: Target,
    since: Instant,
    /// When it is polled next.
    due: Instant,
    deadline: Instant,
    what: String,
    last: String,
    misses: u32,
    tx: oneshot::Sender<Result<Seen, CloudError>>,
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    running: bool,
}

/// Shared by every task of a run.
#[derive(Clone)]
pub(crate) struct Waiter {
    session: Session,
    filters: Arc<Filters>,
    interval: Duration,
    mode: PollMode,
    clock: WaitClock,
    state: Arc<Mutex<State>>,
    /// Wakes the poller when a wait is added (it may be due before the poller's next wake-up).
    wake: Arc<Notify>,
}

impl Waiter {
    pub(crate) fn new(session: Session, filters: Filters, interval: Duration) -> Self {
        Waiter {
            session,
            filters: Arc::new(filters),
            interval,
            mode: PollMode::default(),
            clock: WaitClock::default(),
            state: Arc::default(),
            wake: Arc::default(),
        }
    }

    pub(crate) fn with_mode(self, mode: PollMode) -> Self {
        Waiter { mode, ..self }
    }

    pub(crate) fn with_clock(self, clock: WaitClock) -> Self {
        Waiter { clock, ..self }
    }

    /// The poll interval on this machine's clock (asked again at every poll: the cloud's pace is
    /// learned from its answers as the run goes).
    pub(crate) fn local_interval(&self) -> Duration {
        self.local_span(self.interval)
    }

    /// A pause of `d` of the run's clock, on this machine's.
    pub(crate) fn local_span(&self, d: Duration) -> Duration {
        match self.clock {
            // Polling a fast cloud faster than this gains nothing and loads this machine.
            WaitClock::Cloud => self.session.pace().local(d).max(MIN_LOCAL_POLL.min(d)),
            WaitClock::Local => d,
        }
    }

    /// A deadline of the run's clock, on this machine's.
    pub(crate) fn local_deadline(&self, within: Duration) -> Duration {
        match self.clock {
            WaitClock::Cloud => self.session.pace().local_deadline(within),
            WaitClock::Local => within,
        }
    }

    /// When a wait that started at `since` is polled next, seen from `now`.
    fn next_poll(&self, kind: WaitKind, since: Instant, now: Instant) -> Instant {
        now + poll_after(self.mode, kind, self.local_interval(), now - since)
    }

    /// Waits until the object reaches `target`, fails (with the cloud's fault message), or `within` passes.
    pub(crate) async fn wait(
        &self,
        kind: WaitKind,
        id: &str,
        target: Target,
        within: Duration,
        what: &str,
    ) -> Result<Seen, CloudError> {
        let (tx, rx) = oneshot::channel();
        {
            let now = Instant::now();
            let mut st = self.lock();
            st.entries.push(Entry {
                kind,
                id: id.to_owned(),
                target,
                since: now,
                due: self.next_poll(kind, now, now),
                deadline: now + self.local_deadline(within),
                what: what.to_owned(),
                last: "not seen yet".into(),
                misses: 0,
                tx,
            });
            if st.running {
                self.wake.notify_one();
            } else {
                st.running = true;
                tokio::spawn(self.clone().poll());
            }
        }
        rx.await.unwrap_or_else(|_| {
            Err(CloudError::Failed {
                what: what.to_owned(),
                detail: "the wait was abandoned".into(),
            })
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn poll(self) {
        let this = &self;
        loop {
            let next = {
                let mut st = self.lock();
                let Some(next) = st.entries.iter().map(|e| e.due).min() else {
                    st.running = false;
                    return;
                };
                next
            };
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = self.wake.notified() => continue,
            }
            let now = Instant::now();
            let due: Vec<(WaitKind, String)> = self
                .lock()
                .entries
                .iter()
                .filter(|e| e.due <= now)
                .map(|e| (e.kind, e.id.clone()))
                .collect();
            match self.mode {
                PollMode::ListPerKind => {
                    // Every kind with a due wait, listed at once; a list answers all waits of its kind.
                    let kinds: BTreeSet<WaitKind> = due.iter().map(|(k, _)| *k).collect();
                    let lists = join_all(
                        kinds
                            .into_iter()
                            .map(|k| async move { (k, this.list(k).await) }),
                    )
                    .await;
                    for (kind, listed) in lists {
                        self.settle(|e| e.kind == kind, &listed, now);
                    }
                }
                PollMode::GetPerResource => {
                    let gets = join_all(
                        due.iter()
                            .map(|(k, id)| async move { (*k, id, this.get(*k, id).await) }),
                    )
                    .await;
                    for (kind, id, got) in gets {
                        let got = got.map(|s| s.into_iter().collect());
                        self.settle(|e| e.kind == kind && &e.id == id, &got, now);
                    }
                }
            }
        }
    }

    /// One GET (the baseline's way): the object's status, `None` when it is gone.
    async fn get(&self, kind: WaitKind, id: &str) -> Result<Option<Status>, CloudError> {
        Ok(match kind {
            WaitKind::Server => self
                .session
                .compute()
                .get_server(id)
                .await?
                .map(server_status),
            WaitKind::LoadBalancer => self
                .session
                .load_balancer()
                .get_load_balancer(id)
                .await?
                .map(lb_status),
            WaitKind::Volume => self
                .session
                .block_storage()
                .get_volume(id)
                .await?
                .map(volume_status),
            WaitKind::Snapshot => self
                .session
                .block_storage()
                .get_snapshot(id)
                .await?
                .map(snapshot_status),
        })
    }

    /// One list call: every object of the kind, with its status and failure message.
    async fn list(&self, kind: WaitKind) -> Result<Vec<Status>, CloudError> {
        let f = &self.filters;
        Ok(match kind {
            WaitKind::Server => {
                let all = self.session.compute().list_servers(&f.servers).await?;
                all.into_iter().map(server_status).collect()
            }
            WaitKind::LoadBalancer => {
                let lbs = self.session.load_balancer();
                let all = lbs.list_load_balancers(&f.load_balancers).await?;
                all.into_iter().map(lb_status).collect()
            }
            WaitKind::Volume => {
                let all = self
                    .session
                    .block_storage()
                    .list_volumes(&f.volumes)
                    .await?;
                all.into_iter().map(volume_status).collect()
            }
            WaitKind::Snapshot => {
                let all = self
                    .session
                    .block_storage()
                    .list_snapshots(&SnapshotFilter::default())
                    .await?;
                all.into_iter().map(snapshot_status).collect()
            }
        })
    }

    /// Settles the waits `covered` by one answer (a list of their kind, or one GET), and schedules the
    /// next poll of those still pending, counted from when this one started (so the schedule does not
    /// drift by the calls' own latency).
    fn settle(
        &self,
        covered: impl Fn(&Entry) -> bool,
        listed: &Result<Vec<Status>, CloudError>,
        polled: Instant,
    ) {
        let now = Instant::now();
        let mut st = self.lock();
        let entries = std::mem::take(&mut st.entries);
        for mut e in entries {
            if !covered(&e) {
                st.entries.push(e);
                continue;
            }
            let outcome = match listed {
                Err(err) => {
                    e.last = format!("list failed: {err}");
                    None
                }
                Ok(all) => match (all.iter().find(|s| s.id == e.id), e.target) {
                    (None, Target::Gone) => Some(Ok(Seen::default())),
                    (None, Target::Ready) => {
                        // A create may show in lists a moment late; three misses in a row means gone.
                        e.misses += 1;
                        (e.misses >= 3).then(|| {
                            Err(CloudError::Failed {
                                what: e.what.clone(),
                                detail: "disappeared while waiting for it".into(),
                            })
                        })
                    }
                    (Some(s), Target::Ready) => {
                        e.last.clone_from(&s.state);
                        if let Some(f) = &s.failure {
                            Some(Err(CloudError::Failed {
                                what: e.what.clone(),
                                detail: f.clone(),
                            }))
                        } else {
                            s.ready.then(|| Ok(s.seen.clone()))
                        }
                    }
                    (Some(s), Target::Gone) => {
                        e.last.clone_from(&s.state);
                        None
                    }
                },
            };
            let outcome = outcome.or_else(|| {
                (now >= e.deadline).then(|| {
                    Err(CloudError::Timeout {
                        what: e.what.clone(),
                        detail: format!(
                            "still {} at the deadline ({})",
                            e.last,
                            match e.target {
                                Target::Ready => "waiting to become ready",
                                Target::Gone => "waiting for it to go away",
                            }
                        ),
                    })
                })
            });
            match outcome {
                Some(r) => {
                    let _ = e.tx.send(r);
                }
                None => {
                    e.due = self.next_poll(e.kind, e.since, polled);
                    st.entries.push(e);
                }
            }
        }
    }
}

struct Status {
    id: String,
    state: String,
    ready: bool,
    failure: Option<String>,
    seen: Seen,
}

fn server_status(s: kos_cloud::model::compute::Server) -> Status {
    Status {
        failure: (s.status == ServerStatus::Error).then(|| {
            format!(
                "server {} went to ERROR: {}",
                s.name,
                s.fault
                    .as_ref()
                    .map_or("no fault message", |f| f.message.as_str())
            )
        }),
        ready: s.status == ServerStatus::Active,
        state: s.status.to_string(),
        id: s.id,
        seen: Seen::default(),
    }
}

fn lb_status(lb: kos_cloud::model::load_balancer::LoadBalancer) -> Status {
    Status {
        failure: (lb.provisioning_status == ProvisioningStatus::Error).then(|| {
            format!(
                "load balancer {} went to ERROR (operating status {})",
                lb.name, lb.operating_status
            )
        }),
        ready: lb.provisioning_status == ProvisioningStatus::Active,
        state: lb.provisioning_status.to_string(),
        id: lb.id,
        seen: Seen {
            address: lb.vip_address,
            port_id: lb.vip_port_id,
        },
    }
}

fn volume_status(v: kos_cloud::model::block_storage::Volume) -> Status {
    Status {
        failure: v
            .status
            .is_error()
            .then(|| format!("volume {} went to {}", v.name, v.status)),
        ready: matches!(v.status, VolumeStatus::Available | VolumeStatus::InUse),
        state: v.status.to_string(),
        id: v.id,
        seen: Seen::default(),
    }
}

fn snapshot_status(s: kos_cloud::model::block_storage::Snapshot) -> Status {
    Status {
        failure: s
            .status
            .is_error()
            .then(|| format!("snapshot {} went to {}", s.name, s.status)),
        ready: s.status == SnapshotStatus::Available,
        state: s.status.to_string(),
        id: s.id,
        seen: Seen::default(),
    }
}

/// The pause before the next poll of a wait that has lasted `age` (see the module doc).
///
/// A load balancer is polled every quarter interval however long it has waited: the API's load
/// balancer is the longest object on a create's and a teardown's critical path, so the interval
/// cap showed as up to a whole interval (half on average) added to both (docs/benchmarks.md). One
/// list of the cluster's load balancers is cheap; Nova's and Cinder's lists keep the long cap.
fn poll_after(mode: PollMode, kind: WaitKind, interval: Duration, age: Duration) -> Duration {
    match (mode, kind) {
        (PollMode::ListPerKind, WaitKind::LoadBalancer) => interval / 4,
        (PollMode::ListPerKind, _) => (age / 10).clamp(interval / 4, interval),
        (PollMode::GetPerResource, _) => interval,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_densely_at_first_then_a_tenth_of_the_age_up_to_the_interval() {
        let (i, s) = (Duration::from_secs(2), Duration::from_secs);
        let list = |age| poll_after(PollMode::ListPerKind, WaitKind::Server, i, age);
        assert_eq!(list(s(0)), Duration::from_millis(500));
        assert_eq!(list(s(5)), Duration::from_millis(500));
        assert_eq!(list(s(12)), Duration::from_millis(1200));
        assert_eq!(list(s(600)), i);
        assert_eq!(
            poll_after(PollMode::GetPerResource, WaitKind::Server, i, s(0)),
            i
        );
    }

    /// A load balancer that has waited a minute is still seen ready within a quarter interval
    /// (it was a whole interval: up to 2 s on a create's critical path).
    #[test]
    fn a_load_balancer_is_polled_every_quarter_interval_however_long_it_waits() {
        let (i, s) = (Duration::from_secs(2), Duration::from_secs);
        for age in [0, 5, 12, 60, 600] {
            assert_eq!(
                poll_after(PollMode::ListPerKind, WaitKind::LoadBalancer, i, s(age)),
                Duration::from_millis(500),
                "after {age} s"
            );
        }
        assert_eq!(
            poll_after(PollMode::GetPerResource, WaitKind::LoadBalancer, i, s(0)),
            i
        );
    }
}
