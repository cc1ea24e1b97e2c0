//! Waits by list-polling: every interval, one list call per resource type (servers, load balancers,
//! volumes) answers all pending waits of that type at once, instead of one GET per resource per poll.
//! The poller runs only while something is waited for.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::{VolumeFilter, VolumeStatus};
use kos_cloud::model::compute::ServerStatus;
use kos_cloud::model::load_balancer::{LoadBalancerFilter, ProvisioningStatus};
use kos_cloud::{CloudError, Session};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// What is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum WaitKind {
    Server,
    LoadBalancer,
    Volume,
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
    state: Arc<Mutex<State>>,
}

impl Waiter {
    pub(crate) fn new(session: Session, filters: Filters, interval: Duration) -> Self {
        Waiter {
            session,
            filters: Arc::new(filters),
            interval,
            state: Arc::default(),
        }
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
            let mut st = self.lock();
            st.entries.push(Entry {
                kind,
                id: id.to_owned(),
                target,
                deadline: Instant::now() + within,
                what: what.to_owned(),
                last: "not seen yet".into(),
                misses: 0,
                tx,
            });
            if !st.running {
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
        loop {
            tokio::time::sleep(self.interval).await;
            let kinds: BTreeSet<WaitKind> = {
                let mut st = self.lock();
                if st.entries.is_empty() {
                    st.running = false;
                    return;
                }
                st.entries.iter().map(|e| e.kind).collect()
            };
            for kind in kinds {
                let listed = self.list(kind).await;
                self.settle(kind, listed);
            }
        }
    }

    /// One list call: every object of the kind, with its status and failure message.
    async fn list(&self, kind: WaitKind) -> Result<Vec<Status>, CloudError> {
        Ok(match kind {
            WaitKind::Server => self
                .session
                .compute()
                .list_servers(&self.filters.servers)
                .await?
                .into_iter()
                .map(|s| Status {
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
                })
                .collect(),
            WaitKind::LoadBalancer => self
                .session
                .load_balancer()
                .list_load_balancers(&self.filters.load_balancers)
                .await?
                .into_iter()
                .map(|lb| Status {
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
                })
                .collect(),
            WaitKind::Volume => self
                .session
                .block_storage()
                .list_volumes(&self.filters.volumes)
                .await?
                .into_iter()
                .map(|v| Status {
                    failure: v
                        .status
                        .is_error()
                        .then(|| format!("volume {} went to {}", v.name, v.status)),
                    ready: matches!(v.status, VolumeStatus::Available | VolumeStatus::InUse),
                    state: v.status.to_string(),
                    id: v.id,
                    seen: Seen::default(),
                })
                .collect(),
        })
    }

    fn settle(&self, kind: WaitKind, listed: Result<Vec<Status>, CloudError>) {
        let now = Instant::now();
        let mut st = self.lock();
        let entries = std::mem::take(&mut st.entries);
        for mut e in entries {
            if e.kind != kind {
                st.entries.push(e);
                continue;
            }
            let outcome = match &listed {
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
                None => st.entries.push(e),
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
