//! Deleting observed objects in a safe order, waiting for absence where the cloud deletes asynchronously.
//! Shared by apply (scale-down, duplicates, failed objects) and teardown.
//!
//! Cinder refuses (400) a DELETE of a volume or snapshot that is not in a deletable state, `deleting`
//! included. A refused delete is therefore followed by a look at the object: already `deleting` (an
//! earlier DELETE took effect, its answer lost and the request retried) or gone is progress, waited
//! for like an accepted delete; held by something that goes by itself (an attachment, a snapshot still
//! being made) is asked again; held by what kos will not delete (a snapshot a user took) fails at once,
//! naming it, instead of after the deadline.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kos_cloud::model::block_storage::{SnapshotFilter, SnapshotStatus, VolumeStatus};
use kos_cloud::model::network::TaggedKind;
use kos_cloud::{ApiErrorKind, CloudError, Session};
use tokio::sync::mpsc::Sender;

use super::wait::{Target, WaitKind, Waiter};
use crate::events::{Event, emit};
use crate::graph::Kind;
use crate::observe::Resource;

/// How deletes are run.
pub(crate) struct Deleter<'a> {
    pub session: &'a Session,
    pub waiter: &'a Waiter,
    pub deadline: Duration,
    pub poll: Duration,
    pub events: Option<&'a Sender<Event>>,
}

/// A resource that could not be deleted, and why.
pub(crate) type Failure = (Resource, CloudError);

impl Deleter<'_> {
    /// Deletes everything, each object as soon as what holds it is gone ([`holds`]): a server's port
    /// once that server is gone, the subnet once its ports and interface are, and so on; the load
    /// balancer, the servers and the floating IPs all at once from the start. A failure does not stop
    /// what it held (what can go, goes: teardown must work on half-made clusters; a held object
    /// then retries until its deadline), but everything that failed is returned.
    pub(crate) async fn delete_all(&self, resources: Vec<Resource>) -> Vec<Failure> {
        let n = resources.len();
        let mut left = vec![0_usize; n];
        let mut held: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, r) in resources.iter().enumerate() {
            for (j, by) in resources.iter().enumerate() {
                if i != j && holds(by, r, &resources) {
                    left[i] += 1;
                    held[j].push(i);
                }
            }
        }
        let delete = |i: usize| {
            let r = &resources[i];
            async move { (i, self.delete_one(r).await) }
        };
        let mut started = vec![false; n];
        let mut running = FuturesUnordered::new();
        for i in (0..n).filter(|&i| left[i] == 0) {
            started[i] = true;
            running.push(delete(i));
        }
        let mut failures = Vec::new();
        loop {
            let Some((i, out)) = running.next().await else {
                // Only a cycle in `holds` could leave any: delete them anyway, all at once.
                let rest: Vec<usize> = (0..n).filter(|&i| !started[i]).collect();
                if rest.is_empty() {
                    break;
                }
                for i in rest {
                    started[i] = true;
                    running.push(delete(i));
                }
                continue;
            };
            let r = &resources[i];
            match out {
                Ok(()) => emit(
                    self.events,
                    Event::Deleted {
                        id: r.logical_id.clone(),
                        kind: r.kind,
                        name: r.name.clone(),
                    },
                ),
                Err(e) => failures.push((r.clone(), e)),
            }
            for &d in &held[i] {
                left[d] -= 1;
                if left[d] == 0 && !started[d] {
                    started[d] = true;
                    running.push(delete(d));
                }
            }
        }
        failures
    }

    pub(crate) async fn delete_one(&self, r: &Resource) -> Result<(), CloudError> {
        let (net, lb, volumes) = (
            self.session.network(),
            self.session.load_balancer(),
            self.session.block_storage(),
        );
        let what = format!("{} {} ({})", r.kind.as_str(), r.name, r.id);
        match r.kind {
            Kind::FloatingIpAssociation => net.disassociate_floating_ip(&r.id).await.map(drop),
            Kind::FloatingIp => net.delete_floating_ip(&r.id).await,
            // Children go with their load balancer (cascade); members and rules with pool and group.
            Kind::Members | Kind::SecurityGroupRules => Ok(()),
            Kind::Listener => self.session.load_balancer().delete_listener(&r.id).await,
            Kind::Pool => self.session.load_balancer().delete_pool(&r.id).await,
            Kind::HealthMonitor => {
                self.session
                    .load_balancer()
                    .delete_health_monitor(&r.id)
                    .await
            }
            Kind::LoadBalancer => {
                self.retry_busy(|| lb.delete_load_balancer(&r.id, true))
                    .await?;
                self.gone(WaitKind::LoadBalancer, &r.id, &what).await
            }
            Kind::Server => {
                self.session.compute().delete_server(&r.id).await?;
                self.gone(WaitKind::Server, &r.id, &what).await
            }
            Kind::Port => self.retry_busy(|| net.delete_port(&r.id)).await,
            Kind::Volume => {
                self.delete_settling(
                    || volumes.delete_volume(&r.id),
                    || self.volume_refusal(&r.id),
                )
                .await?;
                self.gone(WaitKind::Volume, &r.id, &what).await
            }
            Kind::Snapshot => {
                self.delete_settling(
                    || volumes.delete_snapshot(&r.id),
                    || self.snapshot_refusal(&r.id),
                )
                .await?;
                self.gone(WaitKind::Snapshot, &r.id, &what).await
            }
            Kind::RouterInterface => {
                let (Some(router), Some(subnet)) = (&r.facts.device_id, &r.facts.subnet_id) else {
                    return net.delete_port(&r.id).await;
                };
                match net.remove_router_interface(router, subnet).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Kind::Router => self.retry_busy(|| net.delete_router(&r.id)).await,
            Kind::Subnet => self.retry_busy(|| net.delete_subnet(&r.id)).await,
            Kind::Network => self.retry_busy(|| net.delete_network(&r.id)).await,
            Kind::SecurityGroup => self.retry_busy(|| net.delete_security_group(&r.id)).await,
            Kind::ServerGroup => self.session.compute().delete_server_group(&r.id).await,
            Kind::Keypair => self.session.compute().delete_keypair(&r.id).await,
            Kind::AppCredential => {
                self.session
                    .identity()
                    .delete_application_credential(&r.id)
                    .await
            }
        }
    }

    async fn gone(&self, kind: WaitKind, id: &str, what: &str) -> Result<(), CloudError> {
        emit(
            self.events,
            Event::Waiting {
                id: id.to_owned(),
                what: format!("{what} to go away"),
            },
        );
        self.waiter
            .wait(kind, id, Target::Gone, self.deadline, what)
            .await
            .map(drop)
    }

    /// Sends `delete` until it is accepted; a refusal (400, 409) is explained by `why`: the object is
    /// already going (done here; the caller waits for absence), held for a while (asked again, with
    /// backoff, until the deadline), or held by what will not go by itself (that error, at once).
    async fn delete_settling<D, DF, W, WF>(&self, delete: D, why: W) -> Result<(), CloudError>
    where
        D: Fn() -> DF,
        DF: Future<Output = Result<(), CloudError>>,
        W: Fn() -> WF,
        WF: Future<Output = Result<Refusal, CloudError>>,
    {
        let end = tokio::time::Instant::now() + self.waiter.local_deadline(self.deadline);
        let mut pause = self.waiter.local_span(self.poll);
        loop {
            let refused = match delete().await {
                Err(e)
                    if matches!(
                        e.kind(),
                        Some(ApiErrorKind::Conflict | ApiErrorKind::BadRequest)
                    ) =>
                {
                    e
                }
                other => return other,
            };
            match why().await? {
                Refusal::Going => {
                    tracing::debug!("already being deleted: {refused}");
                    return Ok(());
                }
                Refusal::Held(e) => return Err(e),
                Refusal::Busy if tokio::time::Instant::now() < end => {
                    tracing::debug!("busy, retrying: {refused}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.waiter.local_span(Duration::from_secs(10)));
                }
                Refusal::Busy => return Err(refused),
            }
        }
    }

    /// Why Cinder refused to delete volume `id`.
    async fn volume_refusal(&self, id: &str) -> Result<Refusal, CloudError> {
        let cinder = self.session.block_storage();
        let Some(v) = cinder.get_volume(id).await? else {
            return Ok(Refusal::Going);
        };
        match v.status {
            VolumeStatus::Deleting => return Ok(Refusal::Going),
            // Only an administrator's reset-state gets it out of there.
            VolumeStatus::ErrorDeleting => {
                return Ok(Refusal::Held(CloudError::Failed {
                    what: "Cinder keeps it".into(),
                    detail: "error_deleting: Cinder failed to delete it; an administrator must reset its state".into(),
                }));
            }
            _ => {}
        }
        // Snapshots block a delete whatever their state; those being deleted go by themselves.
        let kept: Vec<String> = cinder
            .list_snapshots(&SnapshotFilter {
                volume_id: Some(id.to_owned()),
                ..SnapshotFilter::default()
            })
            .await?
            .into_iter()
            .filter(|s| s.status != SnapshotStatus::Deleting)
            .map(|s| format!("{} ({})", s.name, s.id))
            .collect();
        if kept.is_empty() || !v.attachments.is_empty() {
            // Attached, detaching, being made or extended: it settles by itself.
            return Ok(Refusal::Busy);
        }
        Ok(Refusal::Held(CloudError::Failed {
            what: "Cinder keeps it".into(),
            detail: format!(
                "it has snapshots: {}; kos deletes a snapshot only when the cluster's CSI driver made it (its `cinder.csi.openstack.org/cluster` metadata): delete these, then run again",
                kept.join(", ")
            ),
        }))
    }

    /// Why Cinder refused to delete snapshot `id`.
    async fn snapshot_refusal(&self, id: &str) -> Result<Refusal, CloudError> {
        let Some(s) = self.session.block_storage().get_snapshot(id).await? else {
            return Ok(Refusal::Going);
        };
        Ok(match s.status {
            SnapshotStatus::Deleting => Refusal::Going,
            SnapshotStatus::ErrorDeleting => Refusal::Held(CloudError::Failed {
                what: "Cinder keeps it".into(),
                detail: "error_deleting: Cinder failed to delete it; an administrator must reset its state".into(),
            }),
            // Being made (or restored from): it becomes available, then deletable.
            _ => Refusal::Busy,
        })
    }

    /// Retries "in use" answers (409, or Cinder's 400 for an attached volume) until the deadline: what
    /// holds the object (a deleted server's port, a detaching volume) goes away on its own.
    async fn retry_busy<F, Fut>(&self, op: F) -> Result<(), CloudError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), CloudError>>,
    {
        let end = tokio::time::Instant::now() + self.waiter.local_deadline(self.deadline);
        let mut pause = self.waiter.local_span(self.poll);
        loop {
            match op().await {
                Err(e)
                    if matches!(
                        e.kind(),
                        Some(ApiErrorKind::Conflict | ApiErrorKind::BadRequest)
                    ) && tokio::time::Instant::now() < end =>
                {
                    tracing::debug!("busy, retrying: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.waiter.local_span(Duration::from_secs(10)));
                }
                other => return other,
            }
        }
    }
}

/// Whether `by` must be gone before `r` is deleted (`all`: everything being deleted). Follows what
/// the services refuse, not a fixed order of kinds: Neutron keeps a subnet with ports and a router
/// with interfaces, a security group in use, an interface a floating IP needs; Cinder keeps an
/// attached volume or one with snapshots; Octavia a load balancer whose children are being deleted.
fn holds(by: &Resource, r: &Resource, all: &[Resource]) -> bool {
    use Kind as K;
    let b = by.kind;
    match r.kind {
        K::FloatingIpAssociation
        | K::FloatingIp
        | K::Server
        | K::Snapshot
        | K::Keypair
        | K::Members
        | K::HealthMonitor
        | K::Pool
        | K::Listener
        | K::SecurityGroupRules => false,
        // Its children first when they go one by one. Not its floating IP: Neutron lets its VIP port
        // go with one attached (and kos's own VIP port waits for the load balancer anyway).
        K::LoadBalancer => matches!(b, K::Members | K::HealthMonitor | K::Pool | K::Listener),
        K::RouterInterface => matches!(b, K::FloatingIp | K::FloatingIpAssociation),
        K::Router => b == K::RouterInterface,
        // A server's port once that server is gone; another (a VIP port, one left behind) once every
        // server and load balancer is.
        K::Port => match r.facts.device_id.as_deref() {
            Some(d) if all.iter().any(|x| x.kind == K::Server && x.id == d) => {
                b == K::Server && by.id == d
            }
            _ => matches!(b, K::Server | K::LoadBalancer),
        },
        K::Volume => matches!(b, K::Server | K::Snapshot),
        K::ServerGroup => b == K::Server,
        K::Subnet => matches!(
            b,
            K::Port | K::RouterInterface | K::LoadBalancer | K::Server
        ),
        K::Network => matches!(
            b,
            K::Subnet | K::Port | K::RouterInterface | K::LoadBalancer | K::Server
        ),
        K::SecurityGroup => matches!(b, K::Port | K::Server | K::LoadBalancer),
        K::AppCredential => matches!(b, K::Server | K::LoadBalancer),
    }
}

/// Why a delete was refused, as the object's state shows.
enum Refusal {
    /// Gone or being deleted already: an earlier delete took effect.
    Going,
    /// Held by something that goes by itself: ask again.
    Busy,
    /// Held by what will not go by itself: this error, now.
    Held(CloudError),
}

/// The Neutron tag collection of a kind, for kinds tagged after create.
pub(crate) fn tagged_kind(kind: Kind) -> Option<TaggedKind> {
    Some(match kind {
        Kind::Network => TaggedKind::Network,
        Kind::Subnet => TaggedKind::Subnet,
        Kind::Router => TaggedKind::Router,
        Kind::Port | Kind::RouterInterface => TaggedKind::Port,
        Kind::SecurityGroup => TaggedKind::SecurityGroup,
        Kind::FloatingIp => TaggedKind::FloatingIp,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Facts;

    fn r(kind: Kind, id: &str, device: Option<&str>, port: Option<&str>) -> Resource {
        Resource {
            kind,
            logical_id: id.to_owned(),
            id: id.to_owned(),
            name: id.to_owned(),
            tagged: true,
            state: String::new(),
            failed: false,
            facts: Facts {
                device_id: device.map(str::to_owned),
                port_id: port.map(str::to_owned),
                ..Facts::default()
            },
        }
    }

    /// What a cluster behind a load balancer holds: the load balancer, the servers and the floating
    /// IP go at once; each port waits for its own server only; the subnet for every port.
    #[test]
    fn only_what_holds_an_object_goes_before_it() {
        let all = vec![
            r(Kind::FloatingIp, "fip", None, Some("vip")),
            r(Kind::LoadBalancer, "lb", None, Some("vip")),
            r(Kind::Server, "s1", None, None),
            r(Kind::Server, "s2", None, None),
            r(Kind::Port, "p1", Some("s1"), None),
            r(Kind::Port, "p2", Some("s2"), None),
            r(Kind::Port, "vip", None, None),
            r(Kind::RouterInterface, "rif", Some("router"), None),
            r(Kind::Router, "router", None, None),
            r(Kind::Subnet, "subnet", None, None),
            r(Kind::Network, "network", None, None),
            r(Kind::SecurityGroup, "sg", None, None),
            r(Kind::Keypair, "key", None, None),
        ];
        let get = |id: &str| all.iter().find(|x| x.id == id).expect(id);
        let holds = |by: &str, x: &str| holds(get(by), get(x), &all);
        let first: Vec<&str> = all
            .iter()
            .filter(|x| !all.iter().any(|b| b.id != x.id && holds(&b.id, &x.id)))
            .map(|x| x.id.as_str())
            .collect();
        assert_eq!(first, ["fip", "lb", "s1", "s2", "key"]);
        assert!(
            !holds("fip", "lb"),
            "a floating IP on its VIP port does not hold it"
        );
        assert!(holds("s1", "p1") && !holds("s2", "p1") && !holds("lb", "p1"));
        assert!(
            holds("lb", "vip") && holds("s1", "vip"),
            "a port of no server"
        );
        assert!(holds("fip", "rif") && holds("rif", "router"));
        for by in ["p1", "p2", "vip", "rif", "lb"] {
            assert!(holds(by, "subnet"), "{by} holds the subnet");
        }
        assert!(holds("subnet", "network") && holds("p1", "sg"));
        assert!(!holds("lb", "s1") && !holds("s1", "lb"));
    }
}
