//! Services waiting on a load balancer in PENDING_*: while any is awaited, one light list of the
//! project's load balancers (ids and provisioning statuses) every
//! [`ServiceSettings::pending_poll`](super::ServiceSettings::pending_poll), and a pass of each
//! Service whose load balancer has settled, at once rather than at its pass's requeue. Nothing
//! is listed while nothing is awaited. Each settled wait costs its pass a refresh of the whole
//! observation, so no list is taken before the last refresh has been followed by four times its
//! own duration: a slow listing (a big project, a loaded cloud) is asked for less often. (The
//! upstream blocks a worker per load balancer, polling it alone in `waitLoadbalancerActive`;
//! here one call covers every wait.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use super::reconcile::ServiceController;

/// Per Service UID, the load balancer its last pass waits on.
#[derive(Default)]
pub(crate) struct Awaited {
    by_service: Mutex<HashMap<String, (String, ObjectRef<Service>)>>,
    wake: Notify,
}

impl Awaited {
    /// The Service (UID `uid`) now waits on `lb`, or on nothing.
    pub(crate) fn set(&self, svc: &Service, uid: String, lb: Option<&str>) {
        let mut m = self.by_service.lock().unwrap_or_else(|p| p.into_inner());
        match lb {
            Some(lb) => {
                m.insert(uid, (lb.to_owned(), ObjectRef::from_obj(svc)));
                self.wake.notify_one();
            }
            None => {
                m.remove(&uid);
            }
        }
    }

    /// Forgets the Services not in `live`.
    pub(crate) fn retain(&self, live: &HashSet<String>) {
        self.by_service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|uid, _| live.contains(uid));
    }

    fn load_balancers(&self) -> HashSet<String> {
        let m = self.by_service.lock().unwrap_or_else(|p| p.into_inner());
        m.values().map(|(lb, _)| lb.clone()).collect()
    }

    /// Takes out the Services waiting on any of `settled`: (UID, reference).
    pub(crate) fn take(&self, settled: &[String]) -> Vec<(String, ObjectRef<Service>)> {
        let settled: HashSet<&str> = settled.iter().map(String::as_str).collect();
        let mut m = self.by_service.lock().unwrap_or_else(|p| p.into_inner());
        let uids: Vec<String> = m
            .iter()
            .filter(|(_, (lb, _))| settled.contains(lb.as_str()))
            .map(|(uid, _)| uid.clone())
            .collect();
        uids.into_iter()
            .filter_map(|uid| m.remove(&uid).map(|(_, r)| (uid, r)))
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.by_service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Returns once some Service waits (at once if one does).
    async fn any(&self) {
        loop {
            // A `set` between the check and the wait leaves a permit: no wake-up is lost.
            let woken = self.wake.notified();
            if !self.is_empty() {
                return;
            }
            woken.await;
        }
    }
}

/// The Services to reconcile because their load balancer settled, for the controller's
/// `reconcile_on`. A failed list is logged; the passes' own requeues stand in for it.
pub(crate) fn settled(
    state: Arc<ServiceController>,
    poll: Duration,
) -> impl Stream<Item = ObjectRef<Service>> + Send {
    futures::stream::unfold(state, move |state| async move {
        loop {
            state.awaited().any().await;
            tokio::time::sleep(poll).await;
            // A settled wait costs its pass a refresh of the whole observation: no sooner than
            // the last refresh's cost allows, or a wave of creates settling second by second
            // keeps the cloud listing the project back to back.
            if let Some(due) = state.next_settle_poll() {
                tokio::time::sleep_until(due).await;
            }
            let lbs = state.awaited().load_balancers();
            match state.settled(&lbs).await {
                Ok(refs) if !refs.is_empty() => {
                    return Some((futures::stream::iter(refs), state));
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(
                    error = %e,
                    "listing the load balancers' states failed; the passes' requeues stand"
                ),
            }
        }
    })
    .flatten()
}
