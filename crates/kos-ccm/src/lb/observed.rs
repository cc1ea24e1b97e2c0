//! What Octavia and Neutron hold, observed in bulk: [`Observed`] is one list per resource type
//! (load balancers, listeners, pools, health monitors, floating IPs) of the session's project,
//! shared by every Service of a resync, so a resync costs five calls whatever the number of
//! Services. Members are the exception (Octavia lists them per pool only): [`MemberCache`] lists a
//! pool's members only when a cheap signal says they may have changed: the pool's member ids
//! (which the pool list carries) differ from what was last seen, or its load balancer's
//! `updated_at` moved (Octavia locks the load balancer, a row update, for every member change),
//! or this process has no entry (it just started); and, when asked for, at a long deep-verify
//! interval.
//!
//! Guarantee: a snapshot is never newer than the writes it reflects; [`Snapshots`] hands out a
//! cached snapshot only while no write (and no observed PENDING state) happened since it was taken.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kos_cloud::model::load_balancer::{
    HealthMonitor, Listener, LoadBalancer, LoadBalancerFilter, Member, MemberIds, MemberSpec, Pool,
    ProvisioningStatus,
};
use kos_cloud::model::network::{FloatingIp, FloatingIpFilter};
use kos_cloud::{CloudError, Session};
use tokio::time::Instant;

use super::desired::DesiredMember;
use super::plan::{MemberKeys, Membership};

/// One bulk observation.
#[derive(Debug, Clone)]
pub struct Observed {
    pub load_balancers: Vec<LoadBalancer>,
    pub listeners: Vec<Listener>,
    pub pools: Vec<Pool>,
    pub monitors: Vec<HealthMonitor>,
    pub floating_ips: Vec<FloatingIp>,
    /// When the listing started: a write made after it is not in it.
    pub taken_at: Instant,
    /// When the listing was in hand: its age for reuse counts from here (a listing slower than
    /// the max age must still be shareable, or every pass would list the project again).
    listed_at: Instant,
    /// The member ids of each listed pool, folded as the list was read; the pools' own
    /// `members` are empty (at 1000 pools of 500 members the ids are half a million strings).
    member_ids: HashMap<String, MemberIds>,
    /// The write generation it was taken at (see [`Snapshots`]).
    generation: u64,
    /// The largest membership a pool showed: how the next listing pages the pools.
    largest_pool: usize,
}

/// Members per pool assumed by a pool listing with no earlier one to go by (its first page is
/// sized by it, the next ones by what the first showed).
const FIRST_MEMBERS_PER_POOL: usize = 500;

impl Observed {
    /// Lists the five resource types of the session's project, concurrently.
    pub async fn take(session: &Session) -> Result<Observed, CloudError> {
        Self::take_at(session, 0, FIRST_MEMBERS_PER_POOL).await
    }

    /// `members_per_pool`: the largest membership expected (see
    /// `LoadBalancerApi::list_project_pools_folded`).
    async fn take_at(
        session: &Session,
        generation: u64,
        members_per_pool: usize,
    ) -> Result<Observed, CloudError> {
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
        let (load_balancers, listeners, folded, monitors, floating_ips) = futures::try_join!(
            lb.list_load_balancers(&lbs),
            lb.list_project_listeners(),
            lb.list_project_pools_folded(members_per_pool),
            lb.list_project_health_monitors(),
            net.list_floating_ips(&fips),
        )?;
        let mut member_ids = HashMap::with_capacity(folded.len());
        let mut largest_pool = 0;
        let pools = folded
            .into_iter()
            .map(|f| {
                largest_pool = largest_pool.max(f.member_ids.count());
                member_ids.insert(f.pool.id.clone(), f.member_ids);
                f.pool
            })
            .collect();
        Ok(Observed {
            load_balancers,
            listeners,
            pools,
            monitors,
            floating_ips,
            taken_at: started,
            listed_at: Instant::now(),
            member_ids,
            generation,
            largest_pool,
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
            listed_at: Instant::now(),
            member_ids: HashMap::new(),
            generation: 0,
            largest_pool: 0,
        }
    }

    /// The member ids the listing showed for this pool (folded when taken; for an observation
    /// made by hand, from the pool itself).
    fn member_ids(&self, pool: &Pool) -> MemberIds {
        self.member_ids
            .get(&pool.id)
            .copied()
            .unwrap_or_else(|| MemberIds::of(pool.members.iter().map(|m| m.id.as_str())))
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

/// A refresh asked for by settled waits comes no sooner than this many times the last refresh's
/// own duration after it: the refreshes take at most a fifth of the time however fast load
/// balancers settle (at 1000 load balancers of 500 members a refresh is 17 calls).
pub const REFRESH_GAP_FACTOR: u32 = 4;

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
    /// The current snapshot if it was younger than `max_age` when the caller asked (`asked`):
    /// a caller that waited for a refresh in flight takes its result, however long it took.
    fn fresh(
        &self,
        max_age: Duration,
        not_before: Option<Instant>,
        asked: Instant,
    ) -> Option<Arc<Observed>> {
        let generation = self.generation.load(Ordering::SeqCst);
        let cur = self.current.lock().ok()?;
        cur.as_ref()
            .filter(|o| {
                o.generation == generation
                    && asked.saturating_duration_since(o.listed_at) < max_age
                    && not_before.is_none_or(|t| o.taken_at >= t)
            })
            .cloned()
    }

    /// A snapshot no older than `max_age` when asked for (its age counted from when the listing
    /// was in hand), whose listing started after `not_before` (the asking Service's last write),
    /// and after the last [`Snapshots::force`].
    pub async fn get(
        &self,
        session: &Session,
        max_age: Duration,
        not_before: Option<Instant>,
    ) -> Result<Arc<Observed>, CloudError> {
        let asked = Instant::now();
        if let Some(o) = self.fresh(max_age, not_before, asked) {
            return Ok(o);
        }
        // Whoever waits here takes the refresh in flight (it started before the max age ran
        // out); before, a refresh slower than the max age was too old for the passes that
        // waited for it, and each of them listed the project again, one after the other.
        let _one = self.refresh.lock().await;
        if let Some(o) = self.fresh(max_age, not_before, asked) {
            return Ok(o);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let members_per_pool = self
            .current
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|o| o.largest_pool))
            .filter(|n| *n > 0)
            .unwrap_or(FIRST_MEMBERS_PER_POOL);
        let o = Arc::new(Observed::take_at(session, generation, members_per_pool).await?);
        if let Ok(mut cur) = self.current.lock() {
            *cur = Some(o.clone());
        }
        Ok(o)
    }

    /// The earliest a refresh made for waits that ended should start: the last refresh's end
    /// plus [`REFRESH_GAP_FACTOR`] times what it took. A listing that takes long (a big project,
    /// a loaded cloud) is asked for less often; `None` before the first.
    pub fn next_refresh_due(&self) -> Option<Instant> {
        let cur = self.current.lock().ok()?;
        let o = cur.as_ref()?;
        let took = o.listed_at.saturating_duration_since(o.taken_at);
        Some(o.listed_at + took * REFRESH_GAP_FACTOR)
    }

    /// When the listing of the current snapshot started: every snapshot handed out from now on
    /// started no earlier (refreshes run one at a time).
    pub fn current_taken_at(&self) -> Option<Instant> {
        self.current.lock().ok()?.as_ref().map(|o| o.taken_at)
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
    /// The pool's member ids when `members` was last confirmed; `None` for a membership this
    /// process wrote and no pool listing has shown yet.
    ids: Option<MemberIds>,
    /// The pool's load balancer's `updated_at` when `members` was last confirmed with it
    /// ACTIVE; `None` until it is seen settled after this process wrote to it (or listed the
    /// members while a change was in flight): the next settled look adopts it.
    stamp: Option<String>,
    /// The load balancer of the pool (once known): this process's own writes to it move its
    /// `updated_at`, which then is not a sign of someone else's change.
    lb_id: Option<String>,
    /// A deep verify was asked for ([`MemberCache::verify_all`]).
    verify: bool,
    /// Folded for a batch provider (a few bytes a pool), listed for a serial one (its plan
    /// deletes members by id).
    members: Arc<Membership>,
    /// When listed, or written.
    fetched: Instant,
}

/// Members per pool, listed only when needed (see the module docs). A membership this process
/// wrote (a batch replace, or a fully populated create) is remembered as written: the next pool
/// listing that shows as many member ids as were written confirms it without a member list, so a
/// node join costs one PUT per pool and no list. Octavia's batch replace keeps the members it
/// does not change and makes the rest, so its result has exactly the written count.
#[derive(Debug)]
pub struct MemberCache {
    entries: Mutex<HashMap<String, CachedMembers>>,
    /// The deep verify: entries older than this are listed again when they look as wanted
    /// (drift no cheap signal shows). `None`: never.
    verify_every: Option<Duration>,
    /// How long a fully populated create's members wait for their pool's id.
    created_ttl: Duration,
    /// The listing the entries were last pruned against (its start): every pass asks for the
    /// shared snapshot, but pruning once per snapshot is enough.
    pruned: Mutex<Option<Instant>>,
}

/// Where a fully populated create's members are remembered until its pool id is known.
fn created_key(lb_id: &str, listener: &str) -> String {
    format!("created/{lb_id}/{listener}")
}

/// A member as the cloud will show the spec once it is made (its id unknown).
fn as_member(s: &MemberSpec) -> Member {
    Member {
        name: s.name.clone(),
        address: s.address.clone(),
        protocol_port: s.protocol_port,
        subnet_id: s.subnet_id.clone(),
        weight: Some(s.weight.unwrap_or(1)),
        monitor_port: s.monitor_port,
        admin_state_up: s.admin_state_up.unwrap_or(true),
        tags: s.tags.clone(),
        ..Member::default()
    }
}

/// What the pool's load balancer shows of its last change: its `updated_at` while it is ACTIVE,
/// `None` while a change is in flight (or it is not in the listing).
fn settled_stamp(observed: &Observed, pool: &Pool) -> Option<String> {
    let lb = observed.load_balancer(&pool.loadbalancers.first()?.id)?;
    (lb.provisioning_status == ProvisioningStatus::Active)
        .then(|| lb.updated_at.clone())
        .flatten()
}

impl MemberCache {
    pub fn new(verify_every: Option<Duration>) -> Self {
        MemberCache {
            entries: Mutex::new(HashMap::new()),
            verify_every,
            // A create takes a minute or two to be listed with its pool; ten is plenty.
            created_ttl: Duration::from_secs(600),
            pruned: Mutex::new(None),
        }
    }

    /// From the cache: a listing whose ids the pool still shows, or a membership written here
    /// that the pool now shows as many ids as (then confirmed from this listing on). `created`:
    /// the key of a create that may have made this pool (see [`MemberCache::created`]).
    /// `serial`: only listed members will do (a fold has no ids). `want`: the members the pass
    /// wants in the pool.
    ///
    /// `stamp`: the load balancer's `updated_at` if it is settled ([`settled_stamp`]). A moved
    /// stamp (someone changed the load balancer: a member's weight, by hand) or a deep verify
    /// due makes the cache usable only to decide on a write: the same member ids are the same
    /// members, whose address and port Octavia never changes, so a membership unlike `want`
    /// needs the batch replace whatever else drifted, and a list would not change the plan (a
    /// node join costs one PUT per pool). A membership like `want` is listed, so drift in what
    /// the ids do not show is found.
    fn cached(
        &self,
        pool: &Pool,
        ids: MemberIds,
        stamp: Option<&str>,
        created: Option<&str>,
        serial: bool,
        want: &[DesiredMember],
    ) -> Option<Arc<Membership>> {
        let mut entries = self.entries.lock().ok()?;
        if !entries.contains_key(&pool.id)
            && let Some(e) = created.and_then(|k| entries.remove(k))
        {
            entries.insert(pool.id.clone(), e);
        }
        let e = entries.get_mut(&pool.id)?;
        if serial && matches!(*e.members, Membership::Folded(_)) {
            return None;
        }
        let confirmed = match e.ids {
            Some(seen) => seen == ids,
            None if e.members.len() == ids.count() => {
                e.ids = Some(ids);
                true
            }
            None => false,
        };
        if !confirmed {
            return None;
        }
        if e.lb_id.is_none() {
            e.lb_id = pool.loadbalancers.first().map(|r| r.id.clone());
        }
        let moved = match (e.stamp.as_deref(), stamp) {
            (Some(seen), Some(now)) => seen != now,
            // Written here, or listed mid-change: the first settled look is the baseline.
            (None, Some(now)) => {
                e.stamp = Some(now.to_owned());
                false
            }
            // A change in flight: the settled look after it decides.
            (_, None) => false,
        };
        let deep = e.verify || self.verify_every.is_some_and(|v| e.fetched.elapsed() >= v);
        (!(moved || deep) || (!serial && !e.members.matches(want))).then(|| e.members.clone())
    }

    /// The pool's members: from the cache when the pool still lists the same member ids (or as
    /// many as this process last wrote), else one list call. The cache keeps them folded unless
    /// `serial` (see [`Membership`]). `pool`: as `observed` lists it; `want`: the members the
    /// pass wants in it (see [`MemberCache::cached`] for the verify interval).
    pub async fn members(
        &self,
        session: &Session,
        observed: &Observed,
        pool: &Pool,
        created: Option<&str>,
        serial: bool,
        want: &[DesiredMember],
    ) -> Result<Arc<Membership>, CloudError> {
        let stamp = settled_stamp(observed, pool);
        let ids = observed.member_ids(pool);
        if let Some(m) = self.cached(pool, ids, stamp.as_deref(), created, serial, want) {
            return Ok(m);
        }
        let members = session.load_balancer().list_members(&pool.id).await?;
        let ids = MemberIds::of(members.iter().map(|m| m.id.as_str()));
        let listed = Arc::new(Membership::Listed(members));
        let kept = if serial {
            listed.clone()
        } else {
            Arc::new(Membership::Folded(listed.folded()))
        };
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                pool.id.clone(),
                CachedMembers {
                    ids: Some(ids),
                    stamp,
                    lb_id: pool.loadbalancers.first().map(|r| r.id.clone()),
                    verify: false,
                    members: kept,
                    fetched: Instant::now(),
                },
            );
        }
        Ok(listed)
    }

    /// This process replaced the pool's members with `specs` (a batch update Octavia accepted).
    pub fn written(&self, pool_id: &str, specs: &[MemberSpec]) {
        self.remember(pool_id.to_owned(), specs);
    }

    /// The key under which a fully populated create's members of one listener wait for their
    /// pool's id: pass it to [`MemberCache::members`] for the pool of that listener.
    pub fn created_key(lb_id: &str, listener: &str) -> String {
        created_key(lb_id, listener)
    }

    /// This process created load balancer `lb_id` with a listener (`listener`: its key) whose
    /// pool has `specs` as members.
    pub fn created(&self, lb_id: &str, listener: &str, specs: &[MemberSpec]) {
        self.remember(created_key(lb_id, listener), specs);
    }

    fn remember(&self, key: String, specs: &[MemberSpec]) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                key,
                CachedMembers {
                    ids: None,
                    stamp: None,
                    lb_id: None,
                    verify: false,
                    // Written only by batch replaces and fully populated creates (never for
                    // a serial provider): the fold is all a later pass compares.
                    members: Arc::new(Membership::Folded(MemberKeys::of(
                        &specs.iter().map(as_member).collect::<Vec<_>>(),
                    ))),
                    fetched: Instant::now(),
                },
            );
        }
    }

    /// This process changed load balancer `lb_id` (its `updated_at` moves): its pools' entries
    /// take the next settled stamp as their baseline instead of reading it as someone else's
    /// change.
    pub fn lb_written(&self, lb_id: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            for e in entries
                .values_mut()
                .filter(|e| e.lb_id.as_deref() == Some(lb_id))
            {
                e.stamp = None;
            }
        }
    }

    /// A deep verify: every pool whose membership looks as wanted is listed at its next pass
    /// (what the deep-verify interval does for entries older than it).
    pub fn verify_all(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            for e in entries.values_mut() {
                e.verify = true;
            }
        }
    }

    /// Forget a pool (after writing its members, or deleting it).
    pub fn forget(&self, pool_id: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(pool_id);
        }
    }

    /// Drops entries of pools that no longer exist, and creates never confirmed in time.
    /// Once per snapshot: a pass on a snapshot already pruned against costs nothing.
    pub fn prune(&self, observed: &Observed) {
        if let Ok(mut pruned) = self.pruned.lock() {
            if *pruned == Some(observed.taken_at) {
                return;
            }
            *pruned = Some(observed.taken_at);
        }
        let pools: HashSet<&str> = observed.pools.iter().map(|p| p.id.as_str()).collect();
        if let Ok(mut entries) = self.entries.lock() {
            let ttl = self.created_ttl;
            entries.retain(|id, e| {
                if id.starts_with("created/") {
                    e.fetched.elapsed() < ttl
                } else {
                    pools.contains(id.as_str())
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(taken_at: Instant, listed_at: Instant) -> Observed {
        Observed {
            taken_at,
            listed_at,
            ..Observed::empty()
        }
    }

    /// The refresh a settled wait asks for is spaced by the last refresh's own cost: a listing
    /// that took 3 s is not asked for again within 12 s of its end (at 1000 load balancers of
    /// 500 members, unspaced, the project was listed back to back).
    #[test]
    fn a_refresh_for_settled_waits_is_due_four_listings_after_the_last() {
        let s = Snapshots::default();
        assert_eq!(s.next_refresh_due(), None, "nothing listed yet: no wait");
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(3);
        if let Ok(mut cur) = s.current.lock() {
            *cur = Some(Arc::new(observed(t0, end)));
        }
        assert_eq!(s.next_refresh_due(), Some(end + Duration::from_secs(12)));
    }
}
