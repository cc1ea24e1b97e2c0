//! What Octavia and Neutron hold, observed in bulk: [`Observed`] is one list per resource type
//! (load balancers, listeners, pools, health monitors, floating IPs) of the session's project,
//! shared by every Service of a resync, so a resync costs five calls whatever the number of
//! Services. Members are the exception (Octavia lists them per pool only): [`MemberCache`] lists a
//! pool's members only when the pool's member ids (which the pool list carries) differ from what
//! was last seen, or when the entry is older than the verify interval.
//!
//! Guarantee: a snapshot is never newer than the writes it reflects; [`Snapshots`] hands out a
//! cached snapshot only while no write (and no observed PENDING state) happened since it was taken.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kos_cloud::model::load_balancer::{
    HealthMonitor, Listener, LoadBalancer, LoadBalancerFilter, Member, Pool, ProvisioningStatus,
};
use kos_cloud::model::network::{FloatingIp, FloatingIpFilter};
use kos_cloud::{CloudError, Session};
use tokio::time::Instant;

/// One bulk observation.
#[derive(Debug, Clone)]
pub struct Observed {
    pub load_balancers: Vec<LoadBalancer>,
    pub listeners: Vec<Listener>,
    pub pools: Vec<Pool>,
    pub monitors: Vec<HealthMonitor>,
    pub floating_ips: Vec<FloatingIp>,
    pub taken_at: Instant,
    /// The write generation it was taken at (see [`Snapshots`]).
    generation: u64,
}

impl Observed {
    /// Lists the five resource types of the session's project, concurrently.
    pub async fn take(session: &Session) -> Result<Observed, CloudError> {
        Self::take_at(session, 0).await
    }

    async fn take_at(session: &Session, generation: u64) -> Result<Observed, CloudError> {
        // When the listing starts: a write made while it runs may or may not be in it.
        let started = Instant::now();
        let lb = session.load_balancer();
        let project = Some(session.project_id().to_owned());
        let lbs = LoadBalancerFilter {
            project_id: project.clone(),
            ..Default::default()
        };
        let fips = FloatingIpFilter {
            project_id: project,
            ..Default::default()
        };
        let net = session.network();
        let (load_balancers, listeners, pools, monitors, floating_ips) = futures::try_join!(
            lb.list_load_balancers(&lbs),
            lb.list_project_listeners(),
            lb.list_project_pools(),
            lb.list_project_health_monitors(),
            net.list_floating_ips(&fips),
        )?;
        Ok(Observed {
            load_balancers,
            listeners,
            pools,
            monitors,
            floating_ips,
            taken_at: started,
            generation,
        })
    }

    /// An observation of an empty project (for tests and dry runs).
    pub fn empty() -> Observed {
        Observed {
            load_balancers: Vec::new(),
            listeners: Vec::new(),
            pools: Vec::new(),
            monitors: Vec::new(),
            floating_ips: Vec::new(),
            taken_at: Instant::now(),
            generation: 0,
        }
    }

    pub fn load_balancer(&self, id: &str) -> Option<&LoadBalancer> {
        self.load_balancers.iter().find(|l| l.id == id)
    }

    /// Load balancers with this name that are not on their way out (upstream
    /// `getLoadbalancerByName` skips DELETED and PENDING_DELETE).
    pub fn named(&self, name: &str) -> Vec<&LoadBalancer> {
        self.load_balancers
            .iter()
            .filter(|l| l.name == name)
            .filter(|l| {
                !matches!(
                    l.provisioning_status,
                    ProvisioningStatus::Deleted | ProvisioningStatus::PendingDelete
                )
            })
            .collect()
    }

    pub fn listeners_of(&self, lb_id: &str) -> Vec<&Listener> {
        self.listeners
            .iter()
            .filter(|l| l.loadbalancers.iter().any(|r| r.id == lb_id))
            .collect()
    }

    pub fn pool(&self, id: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.id == id)
    }

    pub fn monitor(&self, id: &str) -> Option<&HealthMonitor> {
        self.monitors.iter().find(|m| m.id == id)
    }

    /// The floating IP pointing at a port (a VIP port has at most one per external network; the
    /// first is taken, as upstream `GetFloatingIPByPortID`).
    pub fn fip_on_port(&self, port_id: &str) -> Option<&FloatingIp> {
        self.floating_ips
            .iter()
            .find(|f| f.port_id.as_deref() == Some(port_id))
    }

    pub fn fip_with_address(&self, address: &str) -> Option<&FloatingIp> {
        self.floating_ips
            .iter()
            .find(|f| f.floating_ip_address == address)
    }

    /// Floating IPs with exactly this description (the CCM's own for one Service).
    pub fn fips_described(&self, description: &str) -> Vec<&FloatingIp> {
        self.floating_ips
            .iter()
            .filter(|f| f.description == description)
            .collect()
    }
}

/// The shared, cached snapshot: one refresh at a time (others wait for it and reuse it). A
/// snapshot is reused while it is younger than the max age, was not forced out by a resync, and
/// started after the asking Service's own last write: a pass must see what it wrote itself, but
/// one Service's write must not make every other Service list the project again. (Were every
/// write to force a refresh, a storm of N new Services would cost N refreshes one after the
/// other; this way it costs one per wave of passes.)
#[derive(Debug, Default)]
pub struct Snapshots {
    current: Mutex<Option<Arc<Observed>>>,
    refresh: tokio::sync::Mutex<()>,
    /// Bumped by [`Snapshots::force`]: snapshots of an older generation are not reused.
    generation: AtomicU64,
    /// Bumped by every [`Snapshots::invalidate`]: tells a pass whether it wrote.
    writes: AtomicU64,
}

impl Snapshots {
    fn fresh(&self, max_age: Duration, not_before: Option<Instant>) -> Option<Arc<Observed>> {
        let generation = self.generation.load(Ordering::SeqCst);
        let cur = self.current.lock().ok()?;
        cur.as_ref()
            .filter(|o| {
                o.generation == generation
                    && o.taken_at.elapsed() < max_age
                    && not_before.is_none_or(|t| o.taken_at >= t)
            })
            .cloned()
    }

    /// A snapshot no older than `max_age`, taken after `not_before` (the asking Service's last
    /// write) and after the last [`Snapshots::force`].
    pub async fn get(
        &self,
        session: &Session,
        max_age: Duration,
        not_before: Option<Instant>,
    ) -> Result<Arc<Observed>, CloudError> {
        if let Some(o) = self.fresh(max_age, not_before) {
            return Ok(o);
        }
        let _one = self.refresh.lock().await;
        if let Some(o) = self.fresh(max_age, not_before) {
            return Ok(o);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let o = Arc::new(Observed::take_at(session, generation).await?);
        if let Ok(mut cur) = self.current.lock() {
            *cur = Some(o.clone());
        }
        Ok(o)
    }

    /// The cloud changed (we wrote, or saw something in transition): the Service whose pass this
    /// is needs a newer snapshot next time (see [`Snapshots::writes`]).
    pub fn invalidate(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    /// How many [`Snapshots::invalidate`] calls so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Nothing listed before now is reused (a periodic resync looks for drift).
    pub fn force(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct CachedMembers {
    ids: BTreeSet<String>,
    members: Vec<Member>,
    fetched: Instant,
}

/// Members per pool, listed only when needed (see the module docs).
#[derive(Debug)]
pub struct MemberCache {
    entries: Mutex<HashMap<String, CachedMembers>>,
    verify_every: Duration,
}

impl MemberCache {
    pub fn new(verify_every: Duration) -> Self {
        MemberCache {
            entries: Mutex::new(HashMap::new()),
            verify_every,
        }
    }

    fn cached(&self, pool: &Pool, ids: &BTreeSet<String>) -> Option<Vec<Member>> {
        let entries = self.entries.lock().ok()?;
        entries
            .get(&pool.id)
            .filter(|e| &e.ids == ids && e.fetched.elapsed() < self.verify_every)
            .map(|e| e.members.clone())
    }

    /// The pool's members: from the cache when the pool still lists the same member ids, else one
    /// list call.
    pub async fn members(&self, session: &Session, pool: &Pool) -> Result<Vec<Member>, CloudError> {
        let ids: BTreeSet<String> = pool.members.iter().map(|m| m.id.clone()).collect();
        if let Some(m) = self.cached(pool, &ids) {
            return Ok(m);
        }
        let members = session.load_balancer().list_members(&pool.id).await?;
        let listed: BTreeSet<String> = members.iter().map(|m| m.id.clone()).collect();
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                pool.id.clone(),
                CachedMembers {
                    ids: listed,
                    members: members.clone(),
                    fetched: Instant::now(),
                },
            );
        }
        Ok(members)
    }

    /// Forget a pool (after writing its members, or deleting it).
    pub fn forget(&self, pool_id: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(pool_id);
        }
    }

    /// Drops entries of pools that no longer exist.
    pub fn prune(&self, observed: &Observed) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|id, _| observed.pool(id).is_some());
        }
    }
}
