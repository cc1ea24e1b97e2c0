//! Volume waits shared by concurrent calls. Upstream cinder-csi polls `GET /volumes/{id}` for
//! each volume it waits on, so N volumes attached at once are N pollers. Here every wait of one
//! controller registers with one poller, which lists the cluster's volumes once per tick
//! (`GET /volumes/detail?metadata={"cinder.csi.openstack.org/cluster": <cluster>}`) and wakes each
//! waiter whose volume reached a wanted state or an error state. A volume the list does not show
//! (made by another cluster, or gone) is looked up by itself, as before. Each waiter keeps its own
//! deadline; a waiter whose call is dropped unregisters, and the poller stops when none is left.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kos_cloud::model::block_storage::{Volume, VolumeFilter, VolumeStatus};
use kos_cloud::{CloudError, Session};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use crate::CLUSTER_KEY;

/// The poller's tick in the cloud's time: a volume that settles is seen at most this late. Half
/// a second keeps that small next to Cinder's seconds per volume, at two lists a second while
/// anything is waited on.
const TICK: Duration = Duration::from_millis(500);
/// However fast the cloud's clock, no faster than this on this machine, nor slower than upstream's
/// longest pause between polls.
const TICK_FLOOR: Duration = Duration::from_millis(10);
const TICK_CEILING: Duration = Duration::from_secs(5);
/// A poller's first pause, doubling up to the tick: a lone wait on a fast cloud ends soon.
const FIRST_DELAY: Duration = Duration::from_millis(20);

/// How waits on volumes look at Cinder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// One poller for all concurrent waits, one list per tick.
    #[default]
    Batched,
    /// Each wait polls its own volume (`GET /volumes/{id}` with backoff), as upstream does: a
    /// baseline to compare the shared poller with.
    PerVolume,
}

/// The waits of one controller; clones share the poller.
#[derive(Clone)]
pub struct VolumeWaits {
    shared: Arc<Shared>,
}

struct Shared {
    session: Session,
    no_microversion: bool,
    filter: VolumeFilter,
    mode: WaitMode,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    waiters: HashMap<u64, Waiter>,
    polling: bool,
    ticks: u64,
}

struct Waiter {
    id: String,
    wanted: Vec<VolumeStatus>,
    /// `None` once answered.
    tx: Option<oneshot::Sender<Result<Volume, CloudError>>>,
    /// The volume's state at the last look, for the timeout message.
    last: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cinder(&self) -> kos_cloud::block_storage::BlockStorageApi<'_> {
        let api = self.session.block_storage();
        if self.no_microversion {
            api.without_microversion()
        } else {
            api
        }
    }
}

/// Unregisters a waiter when its call ends or is dropped.
struct Ticket {
    shared: Arc<Shared>,
    n: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.shared.lock().waiters.remove(&self.n);
    }
}

impl VolumeWaits {
    /// Waits of a controller for `cluster` (empty: the poller lists every volume of the project,
    /// as nothing tells this cluster's apart).
    pub fn new(session: Session, no_microversion: bool, cluster: &str, mode: WaitMode) -> Self {
        let metadata = if cluster.is_empty() {
            BTreeMap::new()
        } else {
            BTreeMap::from([(CLUSTER_KEY.to_owned(), cluster.to_owned())])
        };
        VolumeWaits {
            shared: Arc::new(Shared {
                session,
                no_microversion,
                filter: VolumeFilter {
                    metadata,
                    ..VolumeFilter::default()
                },
                mode,
                state: Mutex::new(State::default()),
            }),
        }
    }

    pub fn mode(&self) -> WaitMode {
        self.shared.mode
    }

    /// Calls waiting now.
    pub fn waiting(&self) -> usize {
        self.shared
            .lock()
            .waiters
            .values()
            .filter(|w| w.tx.is_some())
            .count()
    }

    /// Whether the shared poller runs.
    pub fn polling(&self) -> bool {
        self.shared.lock().polling
    }

    /// The shared poller's looks at Cinder so far (each one list, plus a lookup per volume the
    /// list did not show).
    pub fn ticks(&self) -> u64 {
        self.shared.lock().ticks
    }

    /// Waits until the volume is in one of `wanted`; an error state, or the volume gone, ends the
    /// wait with [`CloudError::Failed`], and `deadline` with [`CloudError::Timeout`].
    pub async fn wait_for_status(
        &self,
        id: &str,
        wanted: &[VolumeStatus],
        deadline: Instant,
    ) -> Result<Volume, CloudError> {
        if self.shared.mode == WaitMode::PerVolume {
            return self
                .shared
                .cinder()
                .wait_for_status(id, wanted, deadline)
                .await;
        }
        let start = Instant::now();
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut s = self.shared.lock();
            let n = s.next;
            s.next += 1;
            s.waiters.insert(
                n,
                Waiter {
                    id: id.to_owned(),
                    wanted: wanted.to_vec(),
                    tx: Some(tx),
                    last: "not yet looked at".into(),
                },
            );
            if !s.polling {
                s.polling = true;
                tokio::spawn(poll(self.shared.clone()));
            }
            Ticket {
                shared: self.shared.clone(),
                n,
            }
        };
        let names: Vec<&str> = wanted.iter().map(VolumeStatus::as_str).collect();
        let what = || format!("volume {id} to be {}", names.join(" or "));
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(answer)) => answer,
            // The poller ended without answering: it only does so when it panicked.
            Ok(Err(_)) => Err(CloudError::Failed {
                what: what(),
                detail: "the shared poller stopped".into(),
            }),
            Err(_) => {
                let last = self
                    .shared
                    .lock()
                    .waiters
                    .get(&ticket.n)
                    .map(|w| w.last.clone())
                    .unwrap_or_default();
                Err(CloudError::Timeout {
                    what: what(),
                    detail: format!("still {last} after {:.1}s", start.elapsed().as_secs_f64()),
                })
            }
        }
    }
}

/// The shared poller: runs while any waiter waits.
async fn poll(shared: Arc<Shared>) {
    let mut delay = FIRST_DELAY;
    loop {
        let tick = shared
            .session
            .pace()
            .local(TICK)
            .clamp(TICK_FLOOR, TICK_CEILING);
        delay = delay.min(tick);
        tokio::time::sleep(delay).await;
        delay *= 2;
        let ids: Vec<String> = {
            let mut s = shared.lock();
            let mut ids: Vec<String> = s
                .waiters
                .values()
                .filter(|w| w.tx.is_some())
                .map(|w| w.id.clone())
                .collect();
            if ids.is_empty() {
                s.polling = false;
                return;
            }
            s.ticks += 1;
            ids.sort();
            ids.dedup();
            ids
        };
        let cinder = shared.cinder();
        let mut seen: HashMap<String, Look> = HashMap::new();
        match cinder.list_volumes(&shared.filter).await {
            Ok(vols) => {
                for v in vols {
                    if ids.binary_search(&v.id).is_ok() {
                        seen.insert(v.id.clone(), Look::Found(Box::new(v)));
                    }
                }
            }
            // Each volume is then looked up by itself, and its own error ends its own wait.
            Err(e) => debug!(error = %e, "listing volumes for the waits failed"),
        }
        for id in &ids {
            if !seen.contains_key(id) {
                seen.insert(id.clone(), cinder.get_volume(id).await.into());
            }
        }
        let mut s = shared.lock();
        for w in s.waiters.values_mut() {
            let Some(look) = seen.get_mut(&w.id) else {
                continue;
            };
            if w.tx.is_none() {
                continue;
            }
            if let Some(done) = judge(w, look)
                && let Some(tx) = w.tx.take()
            {
                // The waiter may be gone meanwhile: nothing to tell.
                let _ = tx.send(done);
            }
        }
    }
}

/// A waiter's outcome from one look, or `None` while it must wait on (its `last` updated).
fn judge(w: &mut Waiter, look: &mut Look) -> Option<Result<Volume, CloudError>> {
    let id = w.id.as_str();
    let v = match look {
        Look::Found(v) => v,
        Look::Gone => {
            return Some(Err(CloudError::Failed {
                what: format!("volume {id}"),
                detail: format!(
                    "disappeared while waiting for {}",
                    names(&w.wanted).join(" or ")
                ),
            }));
        }
        // The lookup's error ends the first waiter's wait, as its own poll's would; another
        // waiter of the same volume looks again at the next tick.
        Look::Failed(e) => {
            w.last = "unknown (the lookup failed)".into();
            return e.take().map(Err);
        }
    };
    if w.wanted.contains(&v.status) {
        Some(Ok((**v).clone()))
    } else if v.status.is_error() {
        Some(Err(CloudError::Failed {
            what: format!("volume {} ({id})", v.name),
            detail: format!("went to {}", v.status),
        }))
    } else {
        w.last = v.status.to_string();
        None
    }
}

/// One look at a volume.
enum Look {
    Found(Box<Volume>),
    Gone,
    /// The error, until a waiter takes it.
    Failed(Option<CloudError>),
}

impl From<Result<Option<Volume>, CloudError>> for Look {
    fn from(r: Result<Option<Volume>, CloudError>) -> Self {
        match r {
            Ok(Some(v)) => Look::Found(Box::new(v)),
            Ok(None) => Look::Gone,
            Err(e) => Look::Failed(Some(e)),
        }
    }
}

fn names(s: &[VolumeStatus]) -> Vec<&str> {
    s.iter().map(VolumeStatus::as_str).collect()
}
