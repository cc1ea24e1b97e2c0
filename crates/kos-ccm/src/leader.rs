//! Leader election: of the kos-ccm replicas of a cluster (one per control plane), only the holder of
//! a `coordination.k8s.io/v1` Lease reconciles. Behind [`Elector`] so that tests, and
//! `--leader-elect=false`, need no Lease.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;

/// Leader election's API calls (see [`crate::rbac`]): kube-lease-manager reads the Lease, creates
/// it when missing and patches it to take, renew and release it; in the leader-election namespace
/// only, and by name except the create (RBAC cannot restrict a create by name).
pub const API_CALLS: &[crate::rbac::ApiCall] = &[
    crate::rbac::ApiCall {
        by: "leader: take, renew, release",
        verbs: &["get", "patch"],
        group: "coordination.k8s.io",
        resource: "leases",
        scope: crate::rbac::Scope::LeaderElection,
        names: &[crate::rbac::LEASE_NAME],
    },
    crate::rbac::ApiCall {
        by: "leader: the first campaign",
        verbs: &["create"],
        group: "coordination.k8s.io",
        resource: "leases",
        scope: crate::rbac::Scope::LeaderElection,
        names: &[],
    },
];

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
}

/// Whether this instance leads, as it changes. Dropping it ends the campaign and releases the Lease
/// if held (a quick hand-over on shutdown instead of waiting out the lease duration).
pub struct Leadership {
    leading: watch::Receiver<bool>,
    campaign: Option<tokio::task::JoinHandle<()>>,
}

impl Leadership {
    /// A leadership that never changes (`--leader-elect=false`, tests).
    pub fn fixed(leading: bool) -> Self {
        let (tx, rx) = watch::channel(leading);
        // Keep the sender alive for as long as the receiver: a closed channel means "lost".
        let campaign = tokio::spawn(async move {
            tx.closed().await;
        });
        Leadership {
            leading: rx,
            campaign: Some(campaign),
        }
    }

    /// Built from a channel someone else drives (tests that hand leadership over).
    pub fn from_channel(leading: watch::Receiver<bool>) -> Self {
        Leadership {
            leading,
            campaign: None,
        }
    }

    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits until this instance leads. `false` when the campaign ended first.
    pub async fn acquired(&mut self) -> bool {
        self.leading.wait_for(|l| *l).await.is_ok()
    }

    /// Waits until this instance no longer leads (or the campaign ended).
    pub async fn lost(&mut self) {
        let _ = self.leading.wait_for(|l| !*l).await;
    }

    /// Ends the campaign, releasing the Lease if held, and waits for that to be done.
    pub async fn step_down(mut self) {
        let campaign = self.campaign.take();
        // Closing the channel is what makes the campaign release the Lease and stop.
        drop(self);
        if let Some(c) = campaign {
            let _ = c.await;
        }
    }
}

/// Starts a campaign.
pub trait Elector: Send {
    fn campaign(
        self: Box<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<Leadership, LeaderError>> + Send>>;
}

/// Campaigns on a Lease with kube-lease-manager (the upstream CCM's flags map onto it:
/// `--leader-elect-resource-namespace`, `--leader-elect-resource-name`,
/// `--leader-elect-lease-duration`, `--leader-elect-renew-deadline`).
pub struct LeaseElector {
    pub client: kube::Client,
    pub namespace: String,
    pub name: String,
    /// Unique per replica: the pod or host name plus a random suffix, as upstream does.
    pub identity: String,
    pub lease_duration: Duration,
    /// How long before expiry the holder renews.
    pub renew_margin: Duration,
    /// How often a standby looks for a released Lease (client-go's `RetryPeriod`).
    pub retry_period: Duration,
}

type Campaign = (
    watch::Receiver<bool>,
    tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
);

impl LeaseElector {
    async fn start(&self) -> Result<Campaign, LeaderError> {
        let manager = kube_lease_manager::LeaseManagerBuilder::new(self.client.clone(), &self.name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.lease_duration.as_secs().max(1))
            .with_grace(self.renew_margin.as_secs().max(1))
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            })?;
        Ok(manager.watch().await)
    }

    /// The Lease has no holder (its last one released it). A failed read says no: the
    /// campaign's own reads report the API's trouble.
    async fn released(&self) -> bool {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(self.client.clone(), &self.namespace);
        match leases.get_opt(&self.name).await {
            Ok(Some(l)) => l
                .spec
                .and_then(|s| s.holder_identity)
                .is_none_or(|h| h.is_empty()),
            Ok(None) => true,
            Err(e) => {
                tracing::debug!(name = %self.name, "reading the Lease: {e}");
                false
            }
        }
    }

    /// Passes kube-lease-manager's leadership on to `out` until `out`'s receiver is dropped
    /// (then releases the Lease). Its standby sleeps until the holder's Lease would expire; one
    /// that was released is taken within a retry period, as client-go's standby takes it, by
    /// campaigning afresh.
    async fn supervise(self: Box<Self>, first: Campaign, out: watch::Sender<bool>) {
        let (mut inner, mut task) = first;
        loop {
            let leading = *inner.borrow_and_update();
            out.send_if_modified(|l| std::mem::replace(l, leading) != leading);
            tokio::select! {
                () = out.closed() => break,
                r = inner.changed() => if r.is_err() { break },
                () = tokio::time::sleep(self.retry_period), if !leading => {
                    if self.released().await {
                        drop(inner);
                        let _ = task.await;
                        match self.start().await {
                            Ok(c) => (inner, task) = c,
                            Err(e) => {
                                tracing::warn!("leader election ended: {e}");
                                return;
                            }
                        }
                    }
                }
            }
        }
        drop(inner);
        let (namespace, name) = (&self.namespace, &self.name);
        match task.await {
            Ok(Ok(_)) => tracing::debug!(%namespace, %name, "lease released"),
            Ok(Err(e)) => {
                tracing::warn!(%namespace, %name, error = %e, "leader election ended")
            }
            Err(e) => {
                tracing::warn!(%namespace, %name, error = %e, "leader election task failed")
            }
        }
    }
}

impl Elector for LeaseElector {
    fn campaign(
        self: Box<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<Leadership, LeaderError>> + Send>> {
        Box::pin(async move {
            let first = self.start().await?;
            let (out, leading) = watch::channel(*first.0.borrow());
            let campaign = tokio::spawn(self.supervise(first, out));
            Ok(Leadership {
                leading,
                campaign: Some(campaign),
            })
        })
    }
}

/// `--leader-elect=false`: this instance always leads.
pub struct Unelected;

impl Elector for Unelected {
    fn campaign(
        self: Box<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<Leadership, LeaderError>> + Send>> {
        Box::pin(async { Ok(Leadership::fixed(true)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elector(client: &kube::Client, who: &str) -> Box<LeaseElector> {
        Box::new(LeaseElector {
            client: client.clone(),
            namespace: "kube-system".into(),
            name: "cloud-controller-manager".into(),
            identity: who.into(),
            // Far longer than the test waits: a standby that leads proves the release.
            lease_duration: Duration::from_secs(600),
            renew_margin: Duration::from_secs(60),
            retry_period: Duration::from_millis(200),
        })
    }

    /// A replica that steps down (SIGTERM: a control plane drained and replaced) releases the
    /// Lease, and the standby takes it within a retry period, not when it would have expired.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_released_lease_is_taken_by_the_standby() {
        let fake = kos_kube_fake::FakeKube::start().await.expect("fake");
        let client = fake.client().expect("client");
        let mut a = elector(&client, "a").campaign().await.expect("a");
        assert!(
            tokio::time::timeout(Duration::from_secs(60), a.acquired())
                .await
                .expect("a leads")
        );
        let mut b = elector(&client, "b").campaign().await.expect("b");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!b.is_leading(), "two leaders");
        a.step_down().await;
        assert!(
            tokio::time::timeout(Duration::from_secs(60), b.acquired())
                .await
                .expect("the standby never took the released Lease")
        );
        b.step_down().await;
    }

    #[tokio::test]
    async fn fixed_and_handed_over() {
        let mut l = Box::new(Unelected).campaign().await.expect("unelected");
        assert!(l.acquired().await);
        assert!(l.is_leading());
        l.step_down().await;

        let (tx, rx) = watch::channel(false);
        let mut l = Leadership::from_channel(rx);
        assert!(!l.is_leading());
        tx.send(true).expect("send");
        assert!(l.acquired().await);
        tx.send(false).expect("send");
        l.lost().await;
        assert!(!l.is_leading());
        // The campaign ended: never leading again.
        drop(tx);
        assert!(!l.acquired().await);
    }
}
