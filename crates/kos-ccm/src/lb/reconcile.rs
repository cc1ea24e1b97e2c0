//! One reconcile pass for one Service: locate its load balancer in the shared observation, check
//! ownership, then create it (fully populated, one POST), repair it (the first action of the
//! [`plan`](super::plan)), or delete what belongs to the Service. Never waits: a load balancer in
//! PENDING_* (or one just changed) is a requeue.
//!
//! Passes for different Services run in parallel; the only shared state is the snapshot cache,
//! the member cache and the list of recent creates, each behind a short-lived lock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};
use kos_cloud::model::load_balancer::{
    LoadBalancer, LoadBalancerCreate, LoadBalancerUpdate, ProvisioningStatus, Vip,
};
use kos_cloud::model::network::SubnetFilter;
use kos_cloud::{ApiErrorKind, CloudError, Session};
use tokio::time::Instant;
use tracing::{debug, info, instrument, warn};

use super::annotations::{self, ServiceOptions, VipChoice};
use super::desired::{self, Desired, MonitorOverride};
use super::error::LbError;
use super::fip::{self, FipInput, FipResult};
use super::naming::{self, Claim, Claimant};
use super::nodes::{self, Backends};
use super::observed::{MemberCache, Observed, Snapshots};
use super::outcome::{Outcome, reasons};
use super::plan::{self, LbAction, Membership, PlanInput};
use super::security_groups;
use crate::config::CloudConfig;

/// How the controller behaves; everything else comes from cloud.conf and the Service.
#[derive(Debug, Clone)]
pub struct LbSettings {
    /// `--cluster-name` (upstream default `kubernetes`).
    pub cluster: String,
    /// A unique id of the cluster (the wiring passes the `kube-system` namespace UID). Tagged on
    /// every load balancer, it keeps two clusters of the same name in one project apart.
    pub cluster_id: Option<String>,
    /// The `spec.loadBalancerClass` kos-ccm answers to. `None`: only Services without a class,
    /// like the generic service controller.
    pub load_balancer_class: Option<String>,
    /// Requeue delay while Octavia is busy (PENDING_*, or right after a change).
    pub pending_requeue: Duration,
    /// Requeue delay after a problem the user has to fix (a Warning event says what).
    pub retry_requeue: Duration,
    /// How old a shared snapshot may be when [`LoadBalancers::snapshot`] hands it out.
    pub snapshot_max_age: Duration,
    /// The deep verify: a pool whose cached members are older than this is listed again when
    /// they look as wanted, even with no sign of a change (see `observed::MemberCache`); one
    /// about to be replaced anyway is not. `None` (the default): members are listed only on a
    /// sign of a change (the pool's member ids, its load balancer's `updated_at`) or after a
    /// restart.
    pub member_verify_interval: Option<Duration>,
}

impl LbSettings {
    pub fn new(cluster: impl Into<String>) -> Self {
        LbSettings {
            cluster: cluster.into(),
            cluster_id: None,
            load_balancer_class: None,
            pending_requeue: Duration::from_secs(5),
            retry_requeue: Duration::from_secs(300),
            snapshot_max_age: Duration::from_secs(10),
            member_verify_interval: None,
        }
    }
}

/// The Service's identity and the names derived from it.
struct Ids {
    namespace: String,
    name: String,
    lb_name: String,
    legacy_name: String,
}

impl Ids {
    fn of(svc: &Service, cluster: &str) -> Result<Ids, LbError> {
        let namespace = svc.metadata.namespace.clone().ok_or(LbError::Unnamed)?;
        let name = svc.metadata.name.clone().ok_or(LbError::Unnamed)?;
        let uid = svc.metadata.uid.clone().unwrap_or_default();
        Ok(Ids {
            lb_name: naming::lb_name(cluster, &namespace, &name),
            // Without a UID there is no legacy name to find.
            legacy_name: if uid.is_empty() {
                String::new()
            } else {
                naming::legacy_lb_name(&uid)
            },
            namespace,
            name,
        })
    }

    fn made_for_us(&self, lb: &LoadBalancer) -> bool {
        lb.name == self.lb_name || (!self.legacy_name.is_empty() && lb.name == self.legacy_name)
    }
}

enum Located<'a> {
    Missing,
    Found {
        lb: &'a LoadBalancer,
        owner: bool,
    },
    /// Not this Service's to use: another cluster's, kos's, or another namespace's.
    Foreign {
        lb: &'a LoadBalancer,
        claim: Claim,
    },
    Ambiguous(Vec<String>),
    /// The observation predates a load balancer this process just created.
    Stale,
}

/// How a failed call is handled.
enum Failure {
    /// Busy (409) or moved (404): look again after the pending delay.
    Retry,
    /// The user can act on it: a Warning with the cloud's words.
    User(String),
    Fatal(CloudError),
}

fn classify(e: CloudError, octavia: bool) -> Failure {
    match e.kind() {
        Some(ApiErrorKind::Conflict) if octavia => Failure::Retry,
        Some(ApiErrorKind::NotFound) => Failure::Retry,
        Some(
            ApiErrorKind::BadRequest
            | ApiErrorKind::Forbidden
            | ApiErrorKind::OverQuota
            | ApiErrorKind::Conflict,
        ) => Failure::User(e.to_string()),
        _ => match e {
            CloudError::Ambiguous { .. } => Failure::Retry,
            CloudError::Invalid { .. } => Failure::User(e.to_string()),
            e => Failure::Fatal(e),
        },
    }
}

/// The load-balancer side of the cloud-controller-manager: decides and acts for one Service at a
/// time, sharing observations between Services. `Send + Sync`; call it from as many workers as
/// `--concurrent-service-syncs` allows (the wiring must not run two passes of one Service at once,
/// which kube-runtime's controller already guarantees).
pub struct LoadBalancers {
    session: Session,
    config: Arc<CloudConfig>,
    settings: LbSettings,
    snapshots: Snapshots,
    members: MemberCache,
    /// lb name → (id, when) of load balancers this process created: a snapshot older than that
    /// cannot be trusted to say the load balancer is missing.
    recent_creates: Mutex<HashMap<String, (String, Instant)>>,
    /// Ids of load balancers this process deleted (ERROR recreation): an annotation still naming
    /// one is expected, not news.
    deleted: Mutex<std::collections::HashSet<String>>,
    /// Service or load-balancer key → when a pass last wrote for it (see `ensure_service`).
    dirty: Mutex<HashMap<String, Instant>>,
}

impl LoadBalancers {
    #[must_use]
    pub fn new(session: Session, config: Arc<CloudConfig>, settings: LbSettings) -> Self {
        let members = MemberCache::new(settings.member_verify_interval);
        LoadBalancers {
            session,
            config,
            settings,
            snapshots: Snapshots::default(),
            members,
            recent_creates: Mutex::new(HashMap::new()),
            deleted: Mutex::new(std::collections::HashSet::new()),
            dirty: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &LbSettings {
        &self.settings
    }

    /// The upstream name of the Service's load balancer.
    pub fn load_balancer_name(&self, svc: &Service) -> Option<String> {
        Ids::of(svc, &self.settings.cluster).ok().map(|i| i.lb_name)
    }

    /// A fresh bulk observation (five list calls), not cached.
    pub async fn observe(&self) -> Result<Arc<Observed>, LbError> {
        let o = Observed::take(&self.session)
            .await
            .map_err(|source| LbError::Observe { source })?;
        self.members.prune(&o);
        Ok(Arc::new(o))
    }

    /// The shared observation: reused while younger than `snapshot_max_age` and not forced out;
    /// otherwise listed again (one refresh at a time).
    pub async fn snapshot(&self) -> Result<Arc<Observed>, LbError> {
        self.snapshot_after(None).await
    }

    async fn snapshot_after(&self, not_before: Option<Instant>) -> Result<Arc<Observed>, LbError> {
        let o = self
            .snapshots
            .get(&self.session, self.settings.snapshot_max_age, not_before)
            .await
            .map_err(|source| LbError::Observe { source })?;
        self.members.prune(&o);
        Ok(o)
    }

    /// Forgets the cached observation: the next [`snapshot`](Self::snapshot) lists again. The
    /// wiring calls it when a periodic resync starts, so drift made behind kos-ccm's back is seen.
    pub fn invalidate_snapshot(&self) {
        self.snapshots.force();
    }

    /// A deep verify of members: at its next pass, every pool whose cached membership looks as
    /// wanted is listed (what `member_verify_interval` does for old entries), so drift no cheap
    /// signal shows is found.
    pub fn verify_members(&self) {
        self.members.verify_all();
    }

    /// Which of `awaited` (load-balancer ids a pass left or found PENDING_*) have settled or are
    /// gone, from one light list of the project's load balancers (ids and provisioning statuses
    /// only), however many are awaited. Each settled one counts as changed from the list's
    /// start, so the next pass of a Service on it takes a snapshot listed after that, never an
    /// older one that still shows it pending.
    pub async fn settled(&self, awaited: &HashSet<String>) -> Result<Vec<String>, LbError> {
        if awaited.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let states = self
            .session
            .load_balancer()
            .list_load_balancer_states(self.session.project_id())
            .await
            .map_err(|source| LbError::Observe { source })?;
        let pending: HashSet<&str> = states
            .iter()
            .filter(|s| s.provisioning_status.is_pending())
            .map(|s| s.id.as_str())
            .collect();
        let settled: Vec<String> = awaited
            .iter()
            .filter(|id| !pending.contains(id.as_str()))
            .cloned()
            .collect();
        if !settled.is_empty() {
            let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            for id in &settled {
                let t = dirty.entry(format!("lb/{id}")).or_insert(started);
                *t = (*t).max(started);
            }
        }
        Ok(settled)
    }

    /// The earliest the next list of states should be taken: a wait that ends makes its pass
    /// refresh the snapshot, and such refreshes are spaced by their own cost (see
    /// `Snapshots::next_refresh_due`).
    pub fn next_settle_poll(&self) -> Option<Instant> {
        self.snapshots.next_refresh_due()
    }

    /// [`ensure`](Self::ensure) with the shared snapshot, new enough to hold this Service's own
    /// last writes (and those of any Service on the same load balancer).
    pub async fn ensure_service(&self, svc: &Service, nodes: &[Node]) -> Result<Outcome, LbError> {
        let keys = self.dirty_keys(svc);
        let wrote = self.snapshots.writes();
        let o = self.snapshot_after(self.last_write(&keys)).await?;
        let out = self.ensure(svc, nodes, &o).await;
        self.note_writes(keys, wrote, out.as_ref().ok());
        out
    }

    /// [`ensure_deleted`](Self::ensure_deleted) with the shared snapshot (as `ensure_service`).
    pub async fn ensure_service_deleted(&self, svc: &Service) -> Result<Outcome, LbError> {
        let keys = self.dirty_keys(svc);
        let wrote = self.snapshots.writes();
        let o = self.snapshot_after(self.last_write(&keys)).await?;
        let out = self.ensure_deleted(svc, &o).await;
        self.note_writes(keys, wrote, out.as_ref().ok());
        out
    }

    /// What a Service's writes are remembered under: the Service itself and the load balancer its
    /// annotation names (Services sharing one load balancer see each other's writes).
    fn dirty_keys(&self, svc: &Service) -> Vec<String> {
        let mut keys = vec![format!(
            "svc/{}/{}",
            svc.metadata.namespace.as_deref().unwrap_or_default(),
            svc.metadata.name.as_deref().unwrap_or_default()
        )];
        if let Some(id) = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::lb::annotations::LOAD_BALANCER_ID))
        {
            keys.push(format!("lb/{id}"));
        }
        keys
    }

    fn last_write(&self, keys: &[String]) -> Option<Instant> {
        let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter().filter_map(|k| dirty.get(k).copied()).max()
    }

    /// After a pass that wrote (or saw the cloud in transition), its next pass, and every pass on
    /// the same load balancer, needs a snapshot taken after now.
    fn note_writes(&self, mut keys: Vec<String>, writes_before: u64, out: Option<&Outcome>) {
        let wrote =
            self.snapshots.writes() != writes_before || out.is_some_and(|o| !o.writes.is_empty());
        if !wrote {
            return;
        }
        if let Some(id) =
            out.and_then(|o| o.annotations.get(crate::lb::annotations::LOAD_BALANCER_ID))
        {
            keys.push(format!("lb/{id}"));
        }
        let now = Instant::now();
        // An entry matters while a snapshot whose listing started before it can still be handed
        // out; snapshots only get newer, so one older than the current snapshot's start no longer
        // does. (Not by age: a refresh that started before a write and ended after it is
        // reusable for the max age from its end, and a pass whose own write had been dropped
        // took it, saw its pool as before its own member PUT and listed the members.)
        let settled = self.snapshots.current_taken_at();
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(settled) = settled {
            dirty.retain(|_, t| *t >= settled);
        }
        for k in keys {
            dirty.insert(k, now);
        }
    }

    fn is_ours(&self, svc: &Service) -> bool {
        let Some(spec) = &svc.spec else {
            return false;
        };
        spec.type_.as_deref() == Some("LoadBalancer")
            && match &spec.load_balancer_class {
                None => true,
                Some(c) => self.settings.load_balancer_class.as_ref() == Some(c),
            }
    }

    fn tags(&self, ids: &Ids) -> Vec<String> {
        let mut t = vec![
            ids.lb_name.clone(),
            naming::cluster_tag(&self.settings.cluster),
        ];
        if let Some(id) = &self.settings.cluster_id {
            t.push(naming::cluster_id_tag(id));
        }
        t
    }

    /// Tags an older kos-ccm put on its load balancers, taken off as the current ones go on.
    fn legacy_tags(&self) -> Vec<String> {
        vec![naming::legacy_cluster_tag(&self.settings.cluster)]
    }

    /// `namespace`: see [`Claimant::namespace`].
    fn claim(&self, lb: &LoadBalancer, namespace: Option<&str>) -> Claim {
        naming::claim(
            lb,
            &Claimant {
                cluster: &self.settings.cluster,
                cluster_id: self.settings.cluster_id.as_deref(),
                namespace,
            },
        )
    }

    /// The namespace rule for a Service joining a load balancer made for another: within its
    /// namespace, unless cloud.conf allows more.
    fn sharing_namespace<'a>(&self, ids: &'a Ids) -> Option<&'a str> {
        (!self.config.load_balancer.cross_namespace_sharing).then_some(ids.namespace.as_str())
    }

    fn created_after(&self, lb_name: &str, observed: &Observed) -> bool {
        self.recent_creates
            .lock()
            .ok()
            .and_then(|m| m.get(lb_name).map(|(_, at)| *at > observed.taken_at))
            .unwrap_or(false)
    }

    /// By the load-balancer-id annotation, then by name and legacy name (upstream order);
    /// a load balancer that is not the Service's to use (another cluster's, kos's, or, when
    /// `namespace` is given, another namespace's) is reported, never used.
    fn locate<'a>(
        &self,
        ids: &Ids,
        lb_id: Option<&str>,
        namespace: Option<&str>,
        observed: &'a Observed,
    ) -> Located<'a> {
        if let Some(id) = lb_id
            && let Some(lb) = observed.load_balancer(id)
            && !matches!(
                lb.provisioning_status,
                ProvisioningStatus::PendingDelete | ProvisioningStatus::Deleted
            )
        {
            let owner = ids.made_for_us(lb);
            // Its own load balancer is the Service's whoever joined it since.
            return match self.claim(lb, namespace.filter(|_| !owner)) {
                Claim::Ours => Located::Found { lb, owner },
                claim => Located::Foreign { lb, claim },
            };
        }
        let mut named = observed.named(&ids.lb_name);
        if named.is_empty() && !ids.legacy_name.is_empty() {
            named = observed.named(&ids.legacy_name);
        }
        let (ours, foreign): (Vec<&LoadBalancer>, Vec<&LoadBalancer>) = named
            .into_iter()
            .partition(|lb| self.claim(lb, None) == Claim::Ours);
        match ours.as_slice() {
            [lb] => Located::Found { lb, owner: true },
            [] if self.created_after(&ids.lb_name, observed) => Located::Stale,
            [] => {
                // Another cluster's load balancer with our name: we make our own next to it; the
                // tags keep the two apart from now on.
                if let Some(lb) = foreign.first() {
                    debug!(lb = %lb.id, "a load balancer of another cluster has this Service's name");
                }
                Located::Missing
            }
            many => Located::Ambiguous(many.iter().map(|l| l.id.clone()).collect()),
        }
    }

    /// Makes the Service's load balancer match the Service and the nodes.
    ///
    /// Guarantees: at most one change to Octavia per pass (the load balancer is locked after
    /// each), plus floating-IP calls to Neutron; a pass that finds nothing to change makes no
    /// write at all. Another cluster's load balancer is never changed.
    ///
    /// Assumptions: `observed` is no older than the last write made through this value (use
    /// [`snapshot`](Self::snapshot)); Services that are not `type: LoadBalancer` or have another
    /// `loadBalancerClass` are left alone (the wiring calls [`ensure_deleted`](Self::ensure_deleted)
    /// for those that still carry the finalizer).
    ///
    /// Errors: only failures the backoff should retry; the rest are events and requeues in the
    /// [`Outcome`].
    #[instrument(skip_all, fields(service = ?svc.metadata.name, namespace = ?svc.metadata.namespace))]
    pub async fn ensure(
        &self,
        svc: &Service,
        nodes: &[Node],
        observed: &Observed,
    ) -> Result<Outcome, LbError> {
        if !self.is_ours(svc) {
            return Ok(Outcome::ignored());
        }
        let ids = Ids::of(svc, &self.settings.cluster)?;
        let opts = match annotations::parse(svc, &self.config) {
            Ok(o) => o,
            Err(problems) => return Ok(Outcome::invalid(&problems)),
        };
        let mut out = Outcome::default();
        for n in &opts.notes {
            out.warning(reasons::IGNORED, n.to_string());
        }
        let backends = nodes::backends(nodes, &opts.node_selector, opts.ipv6);
        if !backends.without_address.is_empty() {
            out.warning(
                reasons::NODES_WITHOUT_ADDRESS,
                format!(
                    "nodes without an {} InternalIP or ExternalIP are not members: {}",
                    if opts.ipv6 { "IPv6" } else { "IPv4" },
                    backends.without_address.join(", ")
                ),
            );
        }
        if backends.backends.is_empty() {
            out.warning(
                reasons::NO_NODES,
                "no node is eligible as a member (all excluded, tainted for deletion, unselected \
                 by node-selector, or without an address): the pools stay empty",
            );
        }
        let namespace = self.sharing_namespace(&ids);
        match self.locate(&ids, opts.load_balancer_id.as_deref(), namespace, observed) {
            Located::Stale => {
                out.requeue(self.settings.pending_requeue);
                self.snapshots.invalidate();
            }
            Located::Foreign { lb, claim } => {
                let (reason, note) = refusal(lb, &claim);
                out.warning(reason, note);
            }
            Located::Ambiguous(ids_found) => {
                out.warning(
                    reasons::AMBIGUOUS,
                    format!(
                        "several load balancers are named {}: {}; delete the extra ones or point \
                         {} at the right one",
                        ids.lb_name,
                        ids_found.join(", "),
                        annotations::LOAD_BALANCER_ID
                    ),
                );
                out.requeue(self.settings.retry_requeue);
            }
            Located::Missing => {
                let ours_deleted = opts
                    .load_balancer_id
                    .as_ref()
                    .is_some_and(|id| self.deleted.lock().is_ok_and(|d| d.contains(id)));
                if let Some(id) = opts.load_balancer_id.as_ref().filter(|_| !ours_deleted) {
                    out.warning(
                        reasons::NOT_FOUND,
                        format!(
                            "load balancer {id} ({}) does not exist (any more): creating {}",
                            annotations::LOAD_BALANCER_ID,
                            ids.lb_name
                        ),
                    );
                }
                self.create(svc, &ids, &opts, &backends, observed, &mut out)
                    .await?;
            }
            Located::Found { lb, owner } => {
                self.update(svc, &ids, &opts, &backends, observed, lb, owner, &mut out)
                    .await?;
            }
        }
        Ok(out)
    }

    /// The VIP subnet when nothing is configured: the subnet holding the first member's address
    /// (upstream asks Neutron for the node's port; one subnet list does it without a providerID).
    async fn autodetect_subnet(&self, address: &str) -> Result<Option<String>, CloudError> {
        let Ok(ip) = address.parse::<std::net::IpAddr>() else {
            return Ok(None);
        };
        let subnets = self
            .session
            .network()
            .list_subnets(&SubnetFilter::default())
            .await?;
        Ok(subnets
            .into_iter()
            .filter_map(|s| {
                let net: ipnet::IpNet = s.cidr.parse().ok()?;
                net.contains(&ip).then_some((net.prefix_len(), s.id))
            })
            // The most specific subnet, should several overlap.
            .max()
            .map(|(_, id)| id))
    }

    async fn create(
        &self,
        svc: &Service,
        ids: &Ids,
        opts: &ServiceOptions,
        backends: &Backends,
        observed: &Observed,
        out: &mut Outcome,
    ) -> Result<(), LbError> {
        let (vip, vip_subnet) = match &opts.vip {
            VipChoice::Port(p) => (Vip::Port(p.clone()), None),
            VipChoice::Subnet(s) => (Vip::Subnet(s.clone()), Some(s.clone())),
            VipChoice::Network(n) => (Vip::Network(n.clone()), None),
            VipChoice::Auto => {
                let Some(first) = backends.backends.first() else {
                    out.warning(
                        reasons::NO_NODES,
                        "cannot choose a VIP subnet without a node address: set [LoadBalancer] \
                         subnet-id or the loadbalancer.openstack.org/subnet-id annotation",
                    );
                    out.requeue(self.settings.retry_requeue);
                    return Ok(());
                };
                let found =
                    self.autodetect_subnet(&first.address)
                        .await
                        .map_err(|e| LbError::Cloud {
                            action: "list subnets to find the VIP subnet".into(),
                            lb: ids.lb_name.clone(),
                            source: e,
                        })?;
                match found {
                    Some(s) => (Vip::Subnet(s.clone()), Some(s)),
                    None => {
                        out.warning(
                            reasons::CLOUD_REFUSED,
                            format!(
                                "no subnet holds node address {} (node {}): set [LoadBalancer] \
                                 subnet-id or the loadbalancer.openstack.org/subnet-id annotation",
                                first.address, first.name
                            ),
                        );
                        out.requeue(self.settings.retry_requeue);
                        return Ok(());
                    }
                }
            }
        };
        let member_subnet = opts.member_subnet_id.clone().or(vip_subnet);
        let d = desired::desired(svc, opts, backends, &ids.lb_name, member_subnet.as_deref());
        self.monitor_notes(&d, out);
        let lbc = &self.config.load_balancer;
        let mut req = LoadBalancerCreate::new(&ids.lb_name, vip);
        req.description = Some(naming::lb_description(
            &ids.namespace,
            &ids.name,
            &self.settings.cluster,
        ));
        req.provider = Some(lbc.lb_provider.clone());
        req.flavor_id = opts.flavor_id.clone();
        req.availability_zone = opts.availability_zone.clone();
        req.tags = self.tags(ids);
        // An internal Service's loadBalancerIP is its VIP; an external one's is the floating IP.
        if opts.internal {
            req.vip_address = opts.load_balancer_ip.map(|ip| ip.to_string());
        }
        // Serial providers get the children one call at a time by the following passes.
        if !lbc.provider_requires_serial_api_calls {
            req.listeners = d
                .ports
                .iter()
                .map(|p| p.populated_listener(&ids.lb_name))
                .collect();
        }
        info!(lb = %ids.lb_name, ports = d.ports.len(), "creating load balancer");
        self.snapshots.invalidate();
        let lb = match self
            .session
            .load_balancer()
            .create_load_balancer(&req)
            .await
        {
            Ok(lb) => lb,
            Err(e) => {
                return self.failed(e, true, "create the load balancer", &ids.lb_name, out);
            }
        };
        if let Ok(mut m) = self.recent_creates.lock() {
            m.insert(ids.lb_name.clone(), (lb.id.clone(), Instant::now()));
        }
        // What the create made is known: its pools' first look needs no member list.
        for (port, l) in d.ports.iter().zip(&req.listeners) {
            if let Some(pool) = &l.default_pool {
                self.members
                    .created(&lb.id, &listener_key(&port.listener.key), &pool.members);
            }
        }
        out.writes.push(format!(
            "create load balancer {} with {} listeners",
            ids.lb_name,
            req.listeners.len()
        ));
        out.normal(
            reasons::CREATING,
            format!(
                "creating load balancer {} ({}) with {} listener(s) and their pools, members and \
                 monitors in one request",
                ids.lb_name,
                lb.id,
                req.listeners.len()
            ),
        );
        out.annotations
            .insert(annotations::LOAD_BALANCER_ID.to_owned(), lb.id.clone());
        // The VIP port exists as soon as the create is accepted: the floating IP needs no wait.
        if let Some(port) = lb.vip_port_id.as_deref().filter(|p| !p.is_empty()) {
            let vip = lb.vip_address.clone().unwrap_or_default();
            self.floating_ip(ids, opts, observed, port, &vip, true, out)
                .await?;
        }
        out.await_settled(&lb.id, self.settings.pending_requeue);
        Ok(())
    }

    fn monitor_notes(&self, d: &Desired, out: &mut Outcome) {
        match d.monitor_override {
            Some(MonitorOverride::ForcedForLocalTraffic { by_annotation }) => out.warning(
                reasons::MONITOR_FORCED,
                format!(
                    "externalTrafficPolicy: Local needs a health monitor, or nodes without a local \
                     endpoint get traffic they drop (upstream #2866): an HTTP monitor on the \
                     health-check node port /healthz is used although {} is off",
                    if by_annotation {
                        annotations::ENABLE_HEALTH_MONITOR
                    } else {
                        "[LoadBalancer] create-monitor"
                    }
                ),
            ),
            Some(MonitorOverride::NoHttpOnOvn) => out.warning(
                reasons::MONITOR_FORCED,
                "the OVN provider has no HTTP health monitors: externalTrafficPolicy: Local gets \
                 a connect monitor on the node port instead of /healthz",
            ),
            None => {}
        }
    }

    /// Turns a failed write into a requeue, a Warning or an error.
    fn failed(
        &self,
        e: CloudError,
        octavia: bool,
        action: &str,
        lb: &str,
        out: &mut Outcome,
    ) -> Result<(), LbError> {
        self.snapshots.invalidate();
        match classify(e, octavia) {
            Failure::Retry => {
                debug!(action, lb, "busy or stale, looking again soon");
                out.requeue(self.settings.pending_requeue);
                Ok(())
            }
            Failure::User(msg) => {
                out.warning(reasons::CLOUD_REFUSED, format!("cannot {action}: {msg}"));
                out.requeue(self.settings.retry_requeue);
                Ok(())
            }
            Failure::Fatal(source) => Err(LbError::Cloud {
                action: action.to_owned(),
                lb: lb.to_owned(),
                source,
            }),
        }
    }

    #[allow(clippy::too_many_arguments)] // One pass's context; a struct would only rename it.
    async fn floating_ip(
        &self,
        ids: &Ids,
        opts: &ServiceOptions,
        observed: &Observed,
        vip_port: &str,
        vip_address: &str,
        owner: bool,
        out: &mut Outcome,
    ) -> Result<FipResult, LbError> {
        let description =
            naming::fip_description(&ids.namespace, &ids.name, &self.settings.cluster);
        let input = FipInput {
            observed,
            vip_port_id: vip_port,
            internal: opts.internal,
            owner,
            keep: opts.keep_floating_ip,
            load_balancer_ip: opts.load_balancer_ip,
            description: &description,
        };
        let writes = out.writes.len();
        let r = fip::ensure(&self.session, &input, opts, vip_address, out)
            .await
            .map_err(|source| LbError::Cloud {
                action: "manage the floating IP".into(),
                lb: ids.lb_name.clone(),
                source,
            });
        if out.writes.len() != writes {
            self.snapshots.invalidate();
        }
        let r = r?;
        if out.writes.len() != writes {
            out.normal(
                reasons::UPDATING,
                out.writes[writes..].join("; ").to_string(),
            );
        }
        Ok(r)
    }

    #[allow(clippy::too_many_arguments)] // One pass's context; a struct would only rename it.
    async fn update(
        &self,
        svc: &Service,
        ids: &Ids,
        opts: &ServiceOptions,
        backends: &Backends,
        observed: &Observed,
        lb: &LoadBalancer,
        owner: bool,
        out: &mut Outcome,
    ) -> Result<(), LbError> {
        let lbc = &self.config.load_balancer;
        if !owner {
            // Sharing rules (upstream): tags count the Services; an internal one may not join.
            let others = naming::service_tags(lb)
                .filter(|t| *t != ids.lb_name)
                .count();
            let joined = lb.tags.contains(&ids.lb_name);
            if opts.internal && !joined {
                out.warning(
                    reasons::CANNOT_SHARE,
                    format!(
                        "an internal Service cannot share load balancer {}: if its owner became \
                         external, this Service would be exposed; drop {} or the internal \
                         annotation",
                        lb.id,
                        annotations::LOAD_BALANCER_ID
                    ),
                );
                return Ok(());
            }
            let max = usize::try_from(lbc.max_shared_lb).unwrap_or(usize::MAX);
            if !joined && others + 1 > max {
                out.warning(
                    reasons::SHARED_LIMIT,
                    format!(
                        "load balancer {} is already shared by {others} Service(s), and [LoadBalancer] \
                         max-shared-lb is {max}: raise it or use another load balancer",
                        lb.id
                    ),
                );
                return Ok(());
            }
        }
        match &lb.provisioning_status {
            ProvisioningStatus::Active => {}
            ProvisioningStatus::Error => {
                self.snapshots.invalidate();
                if !owner {
                    out.warning(
                        reasons::IN_ERROR,
                        format!(
                            "shared load balancer {} is in ERROR; it is not kos-ccm's to delete: \
                             fix or fail it over in Octavia",
                            lb.id
                        ),
                    );
                    out.requeue(self.settings.retry_requeue);
                    return Ok(());
                }
                warn!(lb = %lb.id, "load balancer in ERROR, deleting it to create it again");
                // Free the floating IP first, so the new load balancer gets the same address.
                if let Some(port) = lb.vip_port_id.as_deref().filter(|p| !p.is_empty())
                    && let Some(f) = observed.fip_on_port(port)
                {
                    match self.session.network().disassociate_floating_ip(&f.id).await {
                        Ok(_) => out
                            .writes
                            .push(format!("detach floating IP {}", f.floating_ip_address)),
                        Err(e) => self.failed(e, false, "detach the floating IP", &lb.id, out)?,
                    }
                }
                match self
                    .session
                    .load_balancer()
                    .delete_load_balancer(&lb.id, true)
                    .await
                {
                    Ok(()) => {
                        if let Ok(mut d) = self.deleted.lock() {
                            d.insert(lb.id.clone());
                        }
                        out.writes
                            .push(format!("delete load balancer {} (ERROR)", lb.id));
                        out.warning(
                            reasons::IN_ERROR,
                            format!(
                                "load balancer {} went to ERROR (see Octavia for why); it was \
                                 deleted and will be created again",
                                lb.id
                            ),
                        );
                        out.await_settled(&lb.id, self.settings.pending_requeue);
                    }
                    Err(e) => {
                        self.failed(e, true, "delete the load balancer in ERROR", &lb.id, out)?;
                    }
                }
                return Ok(());
            }
            other => {
                // PENDING_*: immutable. The floating IP is Neutron's and can go ahead.
                debug!(lb = %lb.id, status = %other, "load balancer busy");
                self.snapshots.invalidate();
                if !matches!(other, ProvisioningStatus::PendingDelete)
                    && let Some(port) = lb.vip_port_id.as_deref().filter(|p| !p.is_empty())
                {
                    let vip = lb.vip_address.clone().unwrap_or_default();
                    self.floating_ip(ids, opts, observed, port, &vip, owner, out)
                        .await?;
                }
                out.await_settled(&lb.id, self.settings.pending_requeue);
                return Ok(());
            }
        }

        let listeners = observed.listeners_of(&lb.id);
        let member_subnet = opts
            .member_subnet_id
            .clone()
            .or_else(|| lb.vip_subnet_id.clone());
        let d = desired::desired(svc, opts, backends, &ids.lb_name, member_subnet.as_deref());
        let taken = plan::conflicts(&d, &listeners, &ids.lb_name, owner);
        if !taken.is_empty() {
            let ports: Vec<String> = taken
                .iter()
                .map(|p| format!("{} {}", p.listener.key.protocol, p.listener.key.port))
                .collect();
            out.warning(
                reasons::PORT_CONFLICT,
                format!(
                    "load balancer {} already has listeners of another Service on {}: change the \
                     Service's ports or share another load balancer",
                    lb.id,
                    ports.join(", ")
                ),
            );
            out.requeue(self.settings.retry_requeue);
            return Ok(());
        }
        self.monitor_notes(&d, out);
        if owner {
            for (what, want, have) in [
                (
                    annotations::FLAVOR_ID,
                    opts.flavor_id.as_deref(),
                    lb.flavor_id.as_deref(),
                ),
                (
                    annotations::AVAILABILITY_ZONE,
                    opts.availability_zone.as_deref(),
                    lb.availability_zone.as_deref(),
                ),
            ] {
                if let Some(want) = want
                    && have.is_some_and(|h| h != want)
                {
                    out.warning(
                        reasons::IMMUTABLE,
                        format!(
                            "{what} {want:?} is not applied: load balancer {} was created with \
                             {:?} and Octavia cannot change it; recreate the Service to apply it",
                            lb.id,
                            have.unwrap_or_default()
                        ),
                    );
                }
            }
            if opts.internal
                && let Some(ip) = opts.load_balancer_ip
                && lb.vip_address.as_deref() != Some(ip.to_string().as_str())
            {
                out.warning(
                    reasons::IMMUTABLE,
                    format!(
                        "spec.loadBalancerIP {ip} is not applied: the VIP of load balancer {} is \
                         {} and cannot change; recreate the Service to apply it",
                        lb.id,
                        lb.vip_address.as_deref().unwrap_or_default()
                    ),
                );
            }
        }

        // Members of this Service's pools: from the cache, listed only where the ids changed.
        let mut members: HashMap<String, Arc<Membership>> = HashMap::new();
        for port in &d.ports {
            let pool = listeners
                .iter()
                .find(|l| plan::key_of(l) == port.listener.key)
                .and_then(|l| l.default_pool_id.as_deref())
                .and_then(|id| observed.pool(id));
            if let Some(pool) = pool {
                let created = MemberCache::created_key(&lb.id, &listener_key(&port.listener.key));
                let m = self
                    .members
                    .members(
                        &self.session,
                        observed,
                        pool,
                        Some(&created),
                        lbc.provider_requires_serial_api_calls,
                        &port.members,
                    )
                    .await
                    .map_err(|source| LbError::Cloud {
                        action: format!("list the members of pool {}", pool.id),
                        lb: lb.id.clone(),
                        source,
                    });
                match m {
                    Ok(m) => {
                        members.insert(pool.id.clone(), m);
                    }
                    // The pool vanished since the snapshot: look again.
                    Err(LbError::Cloud { source, .. }) if source.is_not_found() => {
                        self.snapshots.invalidate();
                        out.requeue(self.settings.pending_requeue);
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let lb_tags = self.tags(ids);
        let legacy_tags = self.legacy_tags();
        let actions = plan::plan(&PlanInput {
            desired: &d,
            lb,
            observed,
            members: &members,
            service_tag: &ids.lb_name,
            owner,
            lb_tags: &lb_tags,
            drop_tags: &legacy_tags,
            serial: lbc.provider_requires_serial_api_calls,
        });
        let changed = if let Some(first) = actions.first() {
            info!(lb = %lb.id, action = %first, pending = actions.len() - 1, "changing load balancer");
            self.snapshots.invalidate();
            let applied = self.apply(first).await;
            // Whatever the outcome, the load balancer may have moved on our account.
            self.members.lb_written(&lb.id);
            match applied {
                Ok(()) => {
                    out.writes.push(first.to_string());
                    out.normal(
                        reasons::UPDATING,
                        format!("load balancer {}: {first}", lb.id),
                    );
                    out.await_settled(&lb.id, self.settings.pending_requeue);
                }
                Err(e) => self.failed(e, true, &first.to_string(), &lb.id, out)?,
            }
            true
        } else {
            false
        };
        // manage-security-groups: once the load balancer and its members are in place. A failure
        // is a Warning and a requeue; it never holds up the status.
        let sg_ok = changed
            || self
                .security_group(svc, ids, opts, backends, member_subnet.as_deref(), out)
                .await;

        let vip = lb.vip_address.clone().unwrap_or_default();
        let address = match lb.vip_port_id.as_deref().filter(|p| !p.is_empty()) {
            Some(port) => {
                self.floating_ip(ids, opts, observed, port, &vip, owner, out)
                    .await?
            }
            None => FipResult::Address(vip),
        };
        out.annotations
            .insert(annotations::LOAD_BALANCER_ID.to_owned(), lb.id.clone());
        if let FipResult::Address(addr) = &address {
            out.annotations
                .insert(annotations::LOAD_BALANCER_ADDRESS.to_owned(), addr.clone());
        }
        if !changed && let FipResult::Address(addr) = address {
            let status = self.status(opts, &addr);
            let before = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref());
            if before != Some(&status) {
                out.normal(
                    reasons::ENSURED,
                    format!("load balancer {} serves the Service at {addr}", lb.id),
                );
            }
            out.status = Some(status);
            out.converged = out.writes.is_empty() && sg_ok;
            if !out.converged {
                // A floating-IP or security-group change this pass: confirm it on the next one.
                out.requeue(self.settings.pending_requeue);
            }
        } else if !changed {
            out.requeue(self.settings.retry_requeue);
        }
        Ok(())
    }

    /// `status.loadBalancer` (upstream `createLoadBalancerStatus`): the hostname annotation wins;
    /// PROXY with `enable-ingress-hostname` reports `<ip>.<suffix>`; otherwise the IP, with
    /// `ipMode: Proxy` for PROXY so kube-proxy does not short-circuit in-cluster clients past the
    /// load balancer (KEP-1860).
    fn status(&self, opts: &ServiceOptions, address: &str) -> LoadBalancerStatus {
        let lbc = &self.config.load_balancer;
        let ingress = if let Some(h) = &opts.hostname {
            LoadBalancerIngress {
                hostname: Some(h.clone()),
                ..Default::default()
            }
        } else if opts.proxy.is_some() && lbc.enable_ingress_hostname {
            LoadBalancerIngress {
                hostname: Some(format!("{address}.{}", lbc.ingress_hostname_suffix)),
                ..Default::default()
            }
        } else {
            LoadBalancerIngress {
                ip: Some(address.to_owned()),
                ip_mode: Some(if opts.proxy.is_some() { "Proxy" } else { "VIP" }.to_owned()),
                ..Default::default()
            }
        };
        LoadBalancerStatus {
            ingress: Some(vec![ingress]),
        }
    }

    async fn apply(&self, action: &LbAction) -> Result<(), CloudError> {
        let api = self.session.load_balancer();
        match action {
            LbAction::UpdateLoadBalancer { id, req, .. } => {
                api.update_load_balancer(id, req).await.map(drop)
            }
            LbAction::DeletePool { id, .. } => {
                let r = api.delete_pool(id).await;
                self.members.forget(id);
                r
            }
            LbAction::DeleteListener { id, .. } => api.delete_listener(id).await,
            LbAction::CreateListener { req } => api.create_listener(req).await.map(drop),
            LbAction::UpdateListener { id, req, .. } => {
                api.update_listener(id, req).await.map(drop)
            }
            LbAction::CreatePool { req } => api.create_pool(req).await.map(drop),
            LbAction::UpdatePool { id, req, .. } => api.update_pool(id, req).await.map(drop),
            LbAction::ReplaceMembers {
                pool_id, members, ..
            } => {
                let r = api.replace_members(pool_id, members).await;
                match &r {
                    Ok(()) => self.members.written(pool_id, members),
                    Err(_) => self.members.forget(pool_id),
                }
                r
            }
            LbAction::CreateMember { pool_id, member } => {
                let r = api.create_member(pool_id, member).await.map(drop);
                self.members.forget(pool_id);
                r
            }
            LbAction::DeleteMember {
                pool_id, member_id, ..
            } => {
                let r = api.delete_member(pool_id, member_id).await;
                self.members.forget(pool_id);
                r
            }
            LbAction::DeleteMonitor { id, .. } => api.delete_health_monitor(id).await,
            LbAction::CreateMonitor { req } => api.create_health_monitor(req).await.map(drop),
            LbAction::UpdateMonitor { id, req, .. } => {
                api.update_health_monitor(id, req).await.map(drop)
            }
        }
    }

    /// Removes what belongs to the Service, with the upstream's ownership rules: the load balancer
    /// goes only when a CCM made it (its name is a Service's) and no other Service's tag remains;
    /// a shared or user-made load balancer only loses this Service's listeners (with their pools)
    /// and tag; a floating IP goes only when a CCM made it and `keep-floatingip` is not set.
    ///
    /// Guarantees: `converged` is true only when nothing of the Service is left, so the finalizer
    /// can go; another cluster's load balancer is never touched (and does not hold the finalizer).
    /// Annotations are read leniently: a Service with bad annotations can still be deleted.
    #[instrument(skip_all, fields(service = ?svc.metadata.name, namespace = ?svc.metadata.namespace))]
    pub async fn ensure_deleted(
        &self,
        svc: &Service,
        observed: &Observed,
    ) -> Result<Outcome, LbError> {
        let mut out = self.delete_load_balancer(svc, observed).await?;
        // manage-security-groups: the Service's group comes off the node ports and goes; until
        // it is gone the finalizer stays.
        if !self.delete_security_group(svc, &mut out).await {
            out.converged = false;
        }
        Ok(out)
    }

    /// The load-balancer half of [`ensure_deleted`](Self::ensure_deleted).
    async fn delete_load_balancer(
        &self,
        svc: &Service,
        observed: &Observed,
    ) -> Result<Outcome, LbError> {
        let ids = Ids::of(svc, &self.settings.cluster)?;
        let ann = svc.metadata.annotations.clone().unwrap_or_default();
        let lb_id = ann
            .get(annotations::LOAD_BALANCER_ID)
            .map(|v| v.trim().to_owned())
            .filter(|v| annotations::is_openstack_id(v));
        let keep = ann
            .get(annotations::KEEP_FLOATING_IP)
            .is_some_and(|v| v == "true");
        let mut out = Outcome::default();
        // A delete in flight: the finalizer stays until the load balancer is gone (should the
        // delete end in ERROR, the next pass deletes it again).
        let deleting = observed.load_balancers.iter().find(|l| {
            l.provisioning_status == ProvisioningStatus::PendingDelete
                && (lb_id.as_deref() == Some(l.id.as_str()) || ids.made_for_us(l))
                && self.claim(l, None) == Claim::Ours
        });
        if let Some(l) = deleting {
            self.snapshots.invalidate();
            out.await_settled(&l.id, self.settings.pending_requeue);
            return Ok(out);
        }
        // No namespace rule here: a Service may always take its own listeners and tag off a load
        // balancer it joined; what is not this cluster's, or is kos's, stays untouched.
        let (lb, owner) = match self.locate(&ids, lb_id.as_deref(), None, observed) {
            Located::Missing => {
                self.delete_leftover_fips(&ids, keep, observed, &mut out)
                    .await?;
                out.converged = out.writes.is_empty();
                if !out.converged {
                    out.requeue(self.settings.pending_requeue);
                }
                return Ok(out);
            }
            Located::Stale => {
                self.snapshots.invalidate();
                out.requeue(self.settings.pending_requeue);
                return Ok(out);
            }
            Located::Foreign { lb, claim } => {
                let (reason, why) = match &claim {
                    Claim::Kos(why) => (reasons::OWNED_BY_KOS, format!("kos made it: {why}")),
                    Claim::Foreign(why) => (reasons::FOREIGN, format!("another cluster's: {why}")),
                    Claim::OtherNamespace(why) => {
                        (reasons::CANNOT_SHARE, format!("another namespace's: {why}"))
                    }
                    Claim::Ours => (reasons::FOREIGN, String::new()),
                };
                out.warning(
                    reason,
                    format!(
                        "load balancer {} is not this Service's ({why}): left as it is",
                        lb.id
                    ),
                );
                out.converged = true;
                return Ok(out);
            }
            Located::Ambiguous(found) => {
                out.warning(
                    reasons::AMBIGUOUS,
                    format!(
                        "several load balancers are named {}: {}; delete the extra ones by hand",
                        ids.lb_name,
                        found.join(", ")
                    ),
                );
                out.requeue(self.settings.retry_requeue);
                return Ok(out);
            }
            Located::Found { lb, owner } => (lb, owner),
        };
        let status = &lb.provisioning_status;
        if !matches!(
            status,
            ProvisioningStatus::Active | ProvisioningStatus::Error
        ) {
            self.snapshots.invalidate();
            out.await_settled(&lb.id, self.settings.pending_requeue);
            return Ok(out);
        }
        let others = naming::service_tags(lb)
            .filter(|t| *t != ids.lb_name)
            .count();
        let made_by_ccm = lb.name.starts_with(naming::SERVICE_PREFIX) || ids.made_for_us(lb);
        // The last Service on a CCM's load balancer takes it along, but never one made for a
        // Service of another namespace (an untagged upstream one counts no Service tag).
        let may_take = owner || self.claim(lb, self.sharing_namespace(&ids)) == Claim::Ours;
        if made_by_ccm && others == 0 && may_take {
            return self.delete_whole(&ids, lb, keep, observed, out).await;
        }
        if *status == ProvisioningStatus::Error {
            out.warning(
                reasons::IN_ERROR,
                format!(
                    "load balancer {} is in ERROR: this Service's listeners cannot be removed from \
                     it until Octavia repairs it (it is shared or not made by kos-ccm, so it is \
                     not deleted)",
                    lb.id
                ),
            );
            out.requeue(self.settings.retry_requeue);
            return Ok(out);
        }
        // Shared or user-made: only this Service's listeners (pool first), then its tags.
        let listeners = observed.listeners_of(&lb.id);
        let mine = listeners
            .iter()
            .find(|l| plan::listener_is_ours(l, &ids.lb_name, owner));
        let action = if let Some(l) = mine {
            match l
                .default_pool_id
                .as_ref()
                .filter(|p| observed.pool(p).is_some())
            {
                Some(pool) => Some(LbAction::DeletePool {
                    id: pool.clone(),
                    why: "Service deleted".into(),
                }),
                None => Some(LbAction::DeleteListener {
                    id: l.id.clone(),
                    why: "Service deleted".into(),
                }),
            }
        } else {
            let cluster_prefix = format!("{}{}_", naming::SERVICE_PREFIX, self.settings.cluster);
            let ours_left = naming::service_tags(lb)
                .any(|t| t != ids.lb_name && t.starts_with(&cluster_prefix));
            let ours = [self.tags(&ids), self.legacy_tags()].concat();
            let tags: Vec<String> = lb
                .tags
                .iter()
                .filter(|t| **t != ids.lb_name)
                .filter(|t| ours_left || !ours.contains(t))
                .cloned()
                .collect();
            (tags != lb.tags).then(|| LbAction::UpdateLoadBalancer {
                id: lb.id.clone(),
                req: LoadBalancerUpdate {
                    tags: Some(tags),
                    ..Default::default()
                },
                why: format!("drop the tags of {}", ids.lb_name),
            })
        };
        match action {
            None => {
                out.converged = true;
                out.normal(
                    reasons::DELETED,
                    format!(
                        "this Service's listeners are gone from load balancer {}, which stays \
                         (shared or not made by kos-ccm)",
                        lb.id
                    ),
                );
            }
            Some(a) => {
                self.snapshots.invalidate();
                let applied = self.apply(&a).await;
                // A shared load balancer: the other Services' pools see our own change.
                self.members.lb_written(&lb.id);
                match applied {
                    Ok(()) => {
                        out.writes.push(a.to_string());
                        out.normal(reasons::DELETING, format!("load balancer {}: {a}", lb.id));
                        out.requeue(self.settings.pending_requeue);
                    }
                    Err(e) => self.failed(e, true, &a.to_string(), &lb.id, &mut out)?,
                }
            }
        }
        Ok(out)
    }

    /// The Service's own load balancer, with nobody else on it: its floating IP (if a CCM made it
    /// and it is not kept), then the load balancer (cascade, or children one pass at a time).
    async fn delete_whole(
        &self,
        ids: &Ids,
        lb: &LoadBalancer,
        keep: bool,
        observed: &Observed,
        mut out: Outcome,
    ) -> Result<Outcome, LbError> {
        if !keep
            && let Some(port) = lb.vip_port_id.as_deref().filter(|p| !p.is_empty())
            && let Some(f) = observed.fip_on_port(port)
            && naming::fip_made_by_ccm(&f.description)
        {
            self.snapshots.invalidate();
            match self.session.network().delete_floating_ip(&f.id).await {
                Ok(()) => out
                    .writes
                    .push(format!("delete floating IP {}", f.floating_ip_address)),
                Err(e) => self.failed(e, false, "delete the floating IP", &lb.id, &mut out)?,
            }
        }
        self.delete_leftover_fips(ids, keep, observed, &mut out)
            .await?;
        let action = if self.config.load_balancer.cascade_delete {
            None
        } else {
            self.next_child_delete(lb, observed)
        };
        self.snapshots.invalidate();
        let api = self.session.load_balancer();
        let (what, r) = match &action {
            Some(a) => (a.to_string(), self.apply(a).await),
            None => (
                format!("delete load balancer {} ({})", lb.name, lb.id),
                api.delete_load_balancer(&lb.id, self.config.load_balancer.cascade_delete)
                    .await,
            ),
        };
        match r {
            Ok(()) => {
                out.normal(reasons::DELETING, what.clone());
                out.writes.push(what);
                out.await_settled(&lb.id, self.settings.pending_requeue);
            }
            Err(e) => self.failed(e, true, &what, &lb.id, &mut out)?,
        }
        Ok(out)
    }

    /// Without cascade: monitors, then pools, then listeners, one per pass.
    fn next_child_delete(&self, lb: &LoadBalancer, observed: &Observed) -> Option<LbAction> {
        let pools: Vec<_> = observed
            .pools
            .iter()
            .filter(|p| p.loadbalancers.iter().any(|r| r.id == lb.id))
            .collect();
        if let Some(m) = pools
            .iter()
            .filter_map(|p| p.healthmonitor_id.as_deref())
            .find(|id| !id.is_empty())
        {
            return Some(LbAction::DeleteMonitor {
                id: m.to_owned(),
                why: "Service deleted".into(),
            });
        }
        if let Some(p) = pools.first() {
            return Some(LbAction::DeletePool {
                id: p.id.clone(),
                why: "Service deleted".into(),
            });
        }
        observed
            .listeners_of(&lb.id)
            .first()
            .map(|l| LbAction::DeleteListener {
                id: l.id.clone(),
                why: "Service deleted".into(),
            })
    }

    /// This Service's CCM-made floating IPs left detached (after an ERROR recreate, say).
    async fn delete_leftover_fips(
        &self,
        ids: &Ids,
        keep: bool,
        observed: &Observed,
        out: &mut Outcome,
    ) -> Result<(), LbError> {
        if keep {
            return Ok(());
        }
        let description =
            naming::fip_description(&ids.namespace, &ids.name, &self.settings.cluster);
        for f in observed
            .fips_described(&description)
            .into_iter()
            .filter(|f| f.port_id.is_none())
        {
            self.snapshots.invalidate();
            match self.session.network().delete_floating_ip(&f.id).await {
                Ok(()) => out.writes.push(format!(
                    "delete detached floating IP {}",
                    f.floating_ip_address
                )),
                Err(e) => self.failed(e, false, "delete a floating IP", &ids.lb_name, out)?,
            }
        }
        Ok(())
    }

    /// manage-security-groups in a pass of `update`: the Service's group, its rules and its node
    /// ports. False when it failed (a Warning and a requeue are in `out`).
    #[allow(clippy::too_many_arguments)] // One pass's context; a struct would only rename it.
    async fn security_group(
        &self,
        svc: &Service,
        ids: &Ids,
        opts: &ServiceOptions,
        backends: &Backends,
        member_subnet: Option<&str>,
        out: &mut Outcome,
    ) -> bool {
        if !self.config.load_balancer.manage_security_groups {
            return true;
        }
        let uid = svc.metadata.uid.as_deref().unwrap_or_default();
        let Some(subnet) = member_subnet.filter(|s| !s.is_empty() && !uid.is_empty()) else {
            out.warning(
                reasons::SECURITY_GROUP_FAILED,
                "manage-security-groups: no member subnet (or no Service UID) to build the \
                 security group from; set [LoadBalancer] member-subnet-id or subnet-id",
            );
            out.requeue(self.settings.retry_requeue);
            return false;
        };
        let input = security_groups::SgInput {
            svc,
            name: security_groups::sg_name(uid, &ids.namespace, &ids.name),
            description: security_groups::sg_description(
                &ids.namespace,
                &ids.name,
                &self.settings.cluster,
            ),
            member_subnet_id: subnet,
            ovn: opts.ovn,
            ipv6: opts.ipv6,
            members: backends
                .backends
                .iter()
                .map(|b| b.address.as_str())
                .collect(),
        };
        let before = out.writes.len();
        let r = security_groups::ensure(&self.session, &input, &mut out.writes).await;
        self.security_group_result(&input.name, before, r, out)
    }

    /// The group of a deleted Service off its ports, then gone. False when that failed. Also with
    /// `manage-security-groups` off, as upstream: a group made while it was on must not outlive its
    /// Service (one lookup by name when there is none).
    async fn delete_security_group(&self, svc: &Service, out: &mut Outcome) -> bool {
        let meta = &svc.metadata;
        let (Some(uid), Some(ns), Some(name)) = (&meta.uid, &meta.namespace, &meta.name) else {
            return true;
        };
        if uid.is_empty() {
            return true;
        }
        let sg = security_groups::sg_name(uid, ns, name);
        let before = out.writes.len();
        let r = security_groups::ensure_deleted(&self.session, &sg, &mut out.writes).await;
        self.security_group_result(&sg, before, r, out)
    }

    fn security_group_result(
        &self,
        sg: &str,
        before: usize,
        r: Result<(), security_groups::SgFailure>,
        out: &mut Outcome,
    ) -> bool {
        if out.writes.len() != before {
            let done = out.writes[before..].join("; ");
            out.normal(reasons::UPDATING, format!("security group {sg}: {done}"));
        }
        let Err(e) = r else {
            return true;
        };
        warn!(sg, error = %e, "security group not in line");
        // Gone or changed under us: look again soon; anything else waits for the retry delay.
        let soon = matches!(
            e.source.kind(),
            Some(ApiErrorKind::NotFound | ApiErrorKind::Conflict)
        );
        out.warning(
            reasons::SECURITY_GROUP_FAILED,
            format!("security group {sg}: {e}"),
        );
        out.requeue(if soon {
            self.settings.pending_requeue
        } else {
            self.settings.retry_requeue
        });
        false
    }
}

/// A listener's key as the member cache remembers a create's pools by.
fn listener_key(k: &desired::ListenerKey) -> String {
    format!("{}/{}", k.protocol, k.port)
}

/// The Warning for a Service whose `load-balancer-id` names a load balancer it may not use: the
/// reason and a note naming the annotation, why, and the way out.
fn refusal(lb: &LoadBalancer, claim: &Claim) -> (&'static str, String) {
    let ann = annotations::LOAD_BALANCER_ID;
    let what = format!("load balancer {} ({}) named by {ann}", lb.name, lb.id);
    match claim {
        Claim::Kos(why) => (
            reasons::OWNED_BY_KOS,
            format!(
                "{what} was made by kos for the cluster itself, such as its API load balancer \
                 ({why}): a Service never gets listeners on it; remove the {ann} annotation"
            ),
        ),
        Claim::OtherNamespace(why) => (
            reasons::CANNOT_SHARE,
            format!(
                "{what} is another namespace's ({why}): Services share a load balancer only \
                 within one namespace unless [LoadBalancer] enable-cross-namespace-sharing is \
                 true; remove the {ann} annotation"
            ),
        ),
        Claim::Foreign(why) => (
            reasons::FOREIGN,
            format!(
                "{what} belongs to another cluster ({why}); kos-ccm leaves it alone: remove the \
                 {ann} annotation or give the clusters distinct --cluster-name"
            ),
        ),
        // Not reached: an owned load balancer is located as found.
        Claim::Ours => (reasons::FOREIGN, what),
    }
}
