//! Octavia facade: load balancers, listeners, pools, members, health monitors, status trees, providers
//! and flavors, and the wait for ACTIVE that must separate every change to one load balancer.
//!
//! Assumption: callers serialise changes per load balancer. Each child create/update/delete moves the LB
//! to PENDING_UPDATE, and Octavia answers 409 to the next change until it is ACTIVE again; call
//! [`LoadBalancerApi::wait_for_active`] in between (or create everything at once, fully populated).

use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::time::Instant;

use crate::error::CloudError;
use crate::model::TagQuery;
use crate::model::common::invalid;
use crate::model::load_balancer::{
    HealthMonitor, HealthMonitorCreate, HealthMonitorUpdate, LbFlavor, LbQuotas, Listener,
    ListenerCreate, ListenerUpdate, LoadBalancer, LoadBalancerCreate, LoadBalancerFilter,
    LoadBalancerState, LoadBalancerUpdate, Member, MemberSpec, Pool, PoolCreate, PoolMembersFolded,
    PoolParent, PoolUpdate, Provider, ProvisioningStatus, StatusTree,
};
use crate::paging::util::{body, fetch, found, gone, run};
use crate::paging::wait::{self, Step};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;

const SVC: ServiceKind = ServiceKind::LoadBalancer;

/// About how many member references one page of a project's pool list carries (~46 bytes of JSON
/// each: ~2.3 MB a page).
pub const POOL_PAGE_MEMBER_REFS: usize = 50_000;

/// Octavia's default `[api_settings] pagination_max_limit`: no page is longer whatever the limit.
const OCTAVIA_PAGE_MAX: usize = 1000;

/// The pools a page asks for when the largest membership is `members`.
fn pools_per_page(members: usize) -> u32 {
    let n = (POOL_PAGE_MEMBER_REFS / members.max(1)).clamp(1, OCTAVIA_PAGE_MAX);
    u32::try_from(n).unwrap_or(1)
}

/// Octavia, through one session: `session.load_balancer()`.
#[derive(Debug, Clone, Copy)]
pub struct LoadBalancerApi<'a> {
    session: &'a Session,
    page_size: Option<u32>,
}

impl Session {
    pub fn load_balancer(&self) -> LoadBalancerApi<'_> {
        LoadBalancerApi {
            session: self,
            page_size: None,
        }
    }
}

impl LoadBalancerApi<'_> {
    /// Lists ask for pages of `n` (default: the service's own page size).
    pub fn page_size(self, n: u32) -> Self {
        LoadBalancerApi {
            page_size: Some(n),
            ..self
        }
    }

    async fn list<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
        query: Vec<(String, String)>,
    ) -> Result<Vec<T>, CloudError> {
        let mut r = ApiRequest::get(SVC, op, path);
        r.query = query;
        self.session.list_all(r, key, self.page_size).await
    }

    async fn get<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: String,
        key: &str,
    ) -> Result<Option<T>, CloudError> {
        found(fetch(self.session, ApiRequest::get(SVC, op, path), key).await)
    }

    async fn post<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
        req: &impl serde::Serialize,
    ) -> Result<T, CloudError> {
        fetch(
            self.session,
            ApiRequest::post(SVC, op, path, body(key, req)?),
            key,
        )
        .await
    }

    async fn put<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: String,
        key: &str,
        req: &impl serde::Serialize,
    ) -> Result<T, CloudError> {
        fetch(
            self.session,
            ApiRequest::put(SVC, op, path, body(key, req)?),
            key,
        )
        .await
    }

    async fn delete(&self, op: &'static str, path: String) -> Result<(), CloudError> {
        gone(run(self.session, ApiRequest::delete(SVC, op, path)).await)
    }

    // ------------------------------------------------------------ load balancers

    /// Starts the create (PENDING_CREATE); tags are taken on the POST by Octavia.
    pub async fn create_load_balancer(
        &self,
        req: &LoadBalancerCreate,
    ) -> Result<LoadBalancer, CloudError> {
        self.post(
            "loadbalancer.create",
            "lbaas/loadbalancers",
            "loadbalancer",
            req,
        )
        .await
    }

    pub async fn get_load_balancer(&self, id: &str) -> Result<Option<LoadBalancer>, CloudError> {
        self.get(
            "loadbalancer.get",
            format!("lbaas/loadbalancers/{id}"),
            "loadbalancer",
        )
        .await
    }

    pub async fn list_load_balancers(
        &self,
        f: &LoadBalancerFilter,
    ) -> Result<Vec<LoadBalancer>, CloudError> {
        self.list(
            "loadbalancer.list",
            "lbaas/loadbalancers",
            "loadbalancers",
            f.to_query(),
        )
        .await
    }

    /// The id and provisioning status of every load balancer of `project_id` (Octavia's `fields`
    /// selection: a few dozen bytes each): one light call to see which of many waits are over.
    pub async fn list_load_balancer_states(
        &self,
        project_id: &str,
    ) -> Result<Vec<LoadBalancerState>, CloudError> {
        let query = vec![
            ("project_id".to_owned(), project_id.to_owned()),
            ("fields".to_owned(), "id".to_owned()),
            ("fields".to_owned(), "provisioning_status".to_owned()),
        ];
        self.list(
            "loadbalancer.list_states",
            "lbaas/loadbalancers",
            "loadbalancers",
            query,
        )
        .await
    }

    pub async fn update_load_balancer(
        &self,
        id: &str,
        req: &LoadBalancerUpdate,
    ) -> Result<LoadBalancer, CloudError> {
        self.put(
            "loadbalancer.update",
            format!("lbaas/loadbalancers/{id}"),
            "loadbalancer",
            req,
        )
        .await
    }

    /// Starts the delete; with `cascade`, listeners, pools, members and monitors go too. Already gone
    /// is fine.
    pub async fn delete_load_balancer(&self, id: &str, cascade: bool) -> Result<(), CloudError> {
        let mut r = ApiRequest::delete(
            SVC,
            "loadbalancer.delete",
            format!("lbaas/loadbalancers/{id}"),
        );
        if cascade {
            r = r.query("cascade", "true");
        }
        gone(run(self.session, r).await)
    }

    /// The provisioning and operating status of the LB and all its children, in one call.
    pub async fn status_tree(&self, id: &str) -> Result<StatusTree, CloudError> {
        #[derive(serde::Deserialize)]
        struct Statuses {
            loadbalancer: StatusTree,
        }
        let s: Statuses = fetch(
            self.session,
            ApiRequest::get(
                SVC,
                "loadbalancer.status",
                format!("lbaas/loadbalancers/{id}/status"),
            ),
            "statuses",
        )
        .await?;
        Ok(s.loadbalancer)
    }

    /// Polls (GET, with backoff) until the LB is ACTIVE. ERROR, DELETED or the LB vanishing end the
    /// wait with an error naming it; so does the deadline, with the last status seen.
    pub async fn wait_for_active(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<LoadBalancer, CloudError> {
        let what = format!("load balancer {id}");
        let what = what.as_str();
        let this = *self;
        wait::until(what, deadline, move || async move {
            let Some(lb) = this.get_load_balancer(id).await? else {
                return Err(CloudError::Failed {
                    what: what.to_owned(),
                    detail: "disappeared while waiting for ACTIVE".into(),
                });
            };
            match &lb.provisioning_status {
                ProvisioningStatus::Active => Ok(Step::Done(lb)),
                ProvisioningStatus::Error | ProvisioningStatus::Deleted => {
                    Err(CloudError::Failed {
                        what: format!("load balancer {} ({id})", lb.name),
                        detail: format!(
                            "provisioning_status {} (operating_status {})",
                            lb.provisioning_status, lb.operating_status
                        ),
                    })
                }
                other => Ok(Step::Pending(other.to_string())),
            }
        })
        .await
    }

    /// Polls until the LB is gone (after a delete).
    pub async fn wait_for_deleted(&self, id: &str, deadline: Instant) -> Result<(), CloudError> {
        let what = format!("load balancer {id}");
        let this = *self;
        wait::until(&what, deadline, move || async move {
            Ok(match this.get_load_balancer(id).await? {
                None => Step::Done(()),
                Some(lb) => Step::Pending(lb.provisioning_status.to_string()),
            })
        })
        .await
    }

    // ------------------------------------------------------------ listeners

    pub async fn create_listener(&self, req: &ListenerCreate) -> Result<Listener, CloudError> {
        if req.loadbalancer_id.is_empty() {
            return Err(invalid(
                format!("listener {:?}", req.name),
                "needs a loadbalancer_id",
            ));
        }
        self.post("listener.create", "lbaas/listeners", "listener", req)
            .await
    }

    pub async fn get_listener(&self, id: &str) -> Result<Option<Listener>, CloudError> {
        self.get("listener.get", format!("lbaas/listeners/{id}"), "listener")
            .await
    }

    /// The listeners of one load balancer.
    pub async fn list_listeners(&self, loadbalancer_id: &str) -> Result<Vec<Listener>, CloudError> {
        self.list(
            "listener.list",
            "lbaas/listeners",
            "listeners",
            vec![("loadbalancer_id".into(), loadbalancer_id.into())],
        )
        .await
    }

    /// Listeners carrying these tags, across load balancers: one call for all of a cluster's listeners.
    pub async fn list_listeners_tagged(
        &self,
        tags: &TagQuery,
    ) -> Result<Vec<Listener>, CloudError> {
        self.list(
            "listener.list",
            "lbaas/listeners",
            "listeners",
            tags.to_query(),
        )
        .await
    }

    /// Every listener of the session's project, across load balancers, in one (paged) list: the
    /// bulk observation a controller shares between all the load balancers it manages.
    pub async fn list_project_listeners(&self) -> Result<Vec<Listener>, CloudError> {
        self.list(
            "listener.list",
            "lbaas/listeners",
            "listeners",
            self.project_query(),
        )
        .await
    }

    fn project_query(&self) -> Vec<(String, String)> {
        vec![("project_id".into(), self.session.project_id().to_owned())]
    }

    pub async fn update_listener(
        &self,
        id: &str,
        req: &ListenerUpdate,
    ) -> Result<Listener, CloudError> {
        self.put(
            "listener.update",
            format!("lbaas/listeners/{id}"),
            "listener",
            req,
        )
        .await
    }

    pub async fn delete_listener(&self, id: &str) -> Result<(), CloudError> {
        self.delete("listener.delete", format!("lbaas/listeners/{id}"))
            .await
    }

    // ------------------------------------------------------------ pools

    pub async fn create_pool(&self, req: &PoolCreate) -> Result<Pool, CloudError> {
        if req.parent == PoolParent::Inline {
            return Err(invalid(
                format!("pool {:?}", req.name),
                "needs a load balancer or listener",
            ));
        }
        self.post("pool.create", "lbaas/pools", "pool", &req.resolved())
            .await
    }

    pub async fn get_pool(&self, id: &str) -> Result<Option<Pool>, CloudError> {
        self.get("pool.get", format!("lbaas/pools/{id}"), "pool")
            .await
    }

    /// The pools of one load balancer.
    pub async fn list_pools(&self, loadbalancer_id: &str) -> Result<Vec<Pool>, CloudError> {
        self.list(
            "pool.list",
            "lbaas/pools",
            "pools",
            vec![("loadbalancer_id".into(), loadbalancer_id.into())],
        )
        .await
    }

    /// Pools carrying these tags, across load balancers: one call for all of a cluster's pools.
    pub async fn list_pools_tagged(&self, tags: &TagQuery) -> Result<Vec<Pool>, CloudError> {
        self.list("pool.list", "lbaas/pools", "pools", tags.to_query())
            .await
    }

    /// Every pool of the session's project, across load balancers, in one (paged) list.
    pub async fn list_project_pools(&self) -> Result<Vec<Pool>, CloudError> {
        self.list("pool.list", "lbaas/pools", "pools", self.project_query())
            .await
    }

    /// Every pool of the session's project, as [`Self::list_project_pools`], with each pool's
    /// member ids folded while the answer is read ([`PoolMembersFolded`]): no member id is kept.
    ///
    /// Paged by member references, most of the list's size (1000 pools of 500 members are ~24 MB
    /// of JSON in one answer, held twice while it is received): each page asks for as many pools
    /// as hold about [`POOL_PAGE_MEMBER_REFS`] members at the largest membership seen so far, or
    /// `members_per_pool` before any is seen (a page size set with [`Self::page_size`] wins).
    pub async fn list_project_pools_folded(
        &self,
        members_per_pool: usize,
    ) -> Result<Vec<PoolMembersFolded>, CloudError> {
        let mut r = ApiRequest::get(SVC, "pool.list", "lbaas/pools");
        r.query = self.project_query();
        let fixed = self.page_size;
        let mut largest = members_per_pool;
        let mut seen = 0;
        self.session
            .list_all_sized(r, "pools", |pools: &[PoolMembersFolded]| {
                if let Some(n) = fixed {
                    return n;
                }
                // (A restarted listing hands in fewer pools than were seen.)
                largest = pools
                    .get(seen..)
                    .unwrap_or(pools)
                    .iter()
                    .map(|p| p.member_ids.count())
                    .fold(largest, usize::max);
                seen = pools.len();
                pools_per_page(largest)
            })
            .await
    }

    pub async fn update_pool(&self, id: &str, req: &PoolUpdate) -> Result<Pool, CloudError> {
        self.put("pool.update", format!("lbaas/pools/{id}"), "pool", req)
            .await
    }

    pub async fn delete_pool(&self, id: &str) -> Result<(), CloudError> {
        self.delete("pool.delete", format!("lbaas/pools/{id}"))
            .await
    }

    // ------------------------------------------------------------ members

    /// Makes `members` the pool's whole membership in one call (202, empty body): members not listed
    /// are removed, listed ones added or updated (matched by address and port).
    pub async fn replace_members(
        &self,
        pool_id: &str,
        members: &[MemberSpec],
    ) -> Result<(), CloudError> {
        let r = ApiRequest::put(
            SVC,
            "member.replace",
            format!("lbaas/pools/{pool_id}/members"),
            json!({"members": members}),
        );
        run(self.session, r).await
    }

    /// Adds one member (for providers that cannot take the batch update).
    pub async fn create_member(
        &self,
        pool_id: &str,
        member: &MemberSpec,
    ) -> Result<Member, CloudError> {
        self.post(
            "member.create",
            &format!("lbaas/pools/{pool_id}/members"),
            "member",
            member,
        )
        .await
    }

    /// Removes one member; already gone is fine.
    pub async fn delete_member(&self, pool_id: &str, member_id: &str) -> Result<(), CloudError> {
        self.delete(
            "member.delete",
            format!("lbaas/pools/{pool_id}/members/{member_id}"),
        )
        .await
    }

    pub async fn list_members(&self, pool_id: &str) -> Result<Vec<Member>, CloudError> {
        self.list(
            "member.list",
            &format!("lbaas/pools/{pool_id}/members"),
            "members",
            Vec::new(),
        )
        .await
    }

    // ------------------------------------------------------------ health monitors

    pub async fn create_health_monitor(
        &self,
        req: &HealthMonitorCreate,
    ) -> Result<HealthMonitor, CloudError> {
        if req.pool_id.is_empty() {
            return Err(invalid("health monitor", "needs a pool_id"));
        }
        self.post(
            "healthmonitor.create",
            "lbaas/healthmonitors",
            "healthmonitor",
            req,
        )
        .await
    }

    pub async fn get_health_monitor(&self, id: &str) -> Result<Option<HealthMonitor>, CloudError> {
        self.get(
            "healthmonitor.get",
            format!("lbaas/healthmonitors/{id}"),
            "healthmonitor",
        )
        .await
    }

    /// Health monitors carrying these tags: one call for all of a cluster's monitors.
    pub async fn list_health_monitors(
        &self,
        tags: &TagQuery,
    ) -> Result<Vec<HealthMonitor>, CloudError> {
        self.list(
            "healthmonitor.list",
            "lbaas/healthmonitors",
            "healthmonitors",
            tags.to_query(),
        )
        .await
    }

    /// Every health monitor of the session's project, in one (paged) list.
    pub async fn list_project_health_monitors(&self) -> Result<Vec<HealthMonitor>, CloudError> {
        self.list(
            "healthmonitor.list",
            "lbaas/healthmonitors",
            "healthmonitors",
            self.project_query(),
        )
        .await
    }

    pub async fn update_health_monitor(
        &self,
        id: &str,
        req: &HealthMonitorUpdate,
    ) -> Result<HealthMonitor, CloudError> {
        self.put(
            "healthmonitor.update",
            format!("lbaas/healthmonitors/{id}"),
            "healthmonitor",
            req,
        )
        .await
    }

    pub async fn delete_health_monitor(&self, id: &str) -> Result<(), CloudError> {
        self.delete("healthmonitor.delete", format!("lbaas/healthmonitors/{id}"))
            .await
    }

    // ------------------------------------------------------------ catalog

    /// The enabled provider drivers (`amphora`, `ovn`, …).
    pub async fn list_providers(&self) -> Result<Vec<Provider>, CloudError> {
        self.list("provider.list", "lbaas/providers", "providers", Vec::new())
            .await
    }

    /// The operator's LB flavors.
    pub async fn list_flavors(&self) -> Result<Vec<LbFlavor>, CloudError> {
        self.list("lb_flavor.list", "lbaas/flavors", "flavors", Vec::new())
            .await
    }

    /// The session project's limits (Octavia reports no usage: count the load balancers instead).
    pub async fn quotas(&self) -> Result<LbQuotas, CloudError> {
        let path = format!("lbaas/quotas/{}", self.session.project_id());
        let m: std::collections::BTreeMap<String, serde_json::Value> = fetch(
            self.session,
            ApiRequest::get(SVC, "quota.get", path),
            "quota",
        )
        .await?;
        Ok(LbQuotas::from_map(&m))
    }
}
