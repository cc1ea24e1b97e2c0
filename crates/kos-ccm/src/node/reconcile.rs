//! One reconcile of one Node: lifecycle, then initialisation or maintenance (see the module docs
//! of [`super`]). Every write is a merge patch; the ones that replace `spec.taints` carry the
//! resourceVersion they were computed from, so a taint someone else added meanwhile is never lost
//! (the write fails with 409 and the reconcile runs again on fresh data).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::addresses::{self, Address};
use super::error::{Error, Result};
use super::instances::{Instances, Lookup, is_shut_down};
use super::labels::{
    self, EXCLUDE_FROM_LIFECYCLE, INSTANCE_TYPE, INSTANCE_TYPE_BETA, PROVIDED_NODE_IP, REGION,
    REGION_BETA, TAINT_SHUTDOWN, TAINT_UNINITIALIZED, ZONE, ZONE_BETA,
};
use super::{Settings, reason};
use crate::backoff::Backoff;
use crate::context::{Context, error_chain, patch_params};

const ACTION_INITIALIZE: &str = "InitializeNode";
const ACTION_UPDATE_ADDRESSES: &str = "UpdateNodeAddresses";
const ACTION_TAINT: &str = "TaintNode";
const ACTION_DELETE: &str = "DeleteNode";

/// The controller's state, shared by its reconciles.
pub struct NodeController {
    ctx: Arc<Context>,
    settings: Settings,
    instances: Instances,
    nodes: Api<Node>,
    /// The controller's node cache, to forget nodes that are gone.
    cache: Store<Node>,
    /// Node UID → last successful address refresh.
    refreshed: Mutex<HashMap<String, Instant>>,
    /// Retry delays after failures, per Node UID.
    backoff: Backoff,
}

impl std::fmt::Debug for NodeController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeController")
            .field("settings", &self.settings)
            .field("instances", &self.instances)
            .finish_non_exhaustive()
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn uid(node: &Node) -> String {
    node.uid().unwrap_or_else(|| node.name_any())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn has_taint(node: &Node, key: &str) -> bool {
    taints(node).iter().any(|t| t.key == key)
}

fn provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

fn current_addresses(node: &Node) -> Vec<Address> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| a.iter().filter_map(Address::from_node_address).collect())
        .unwrap_or_default()
}

/// Entry point for the kube-runtime `Controller`.
pub async fn reconcile(node: Arc<Node>, st: Arc<NodeController>) -> Result<Action> {
    let outcome = st.sync(&node).await;
    if outcome.is_ok() {
        st.backoff.reset(&uid(&node));
    }
    outcome
}

/// Retries with exponential backoff per node. A lost write race is not a failure: it is retried
/// after the shortest delay (the watch event of the winning write usually triggers it sooner).
pub fn error_policy(node: Arc<Node>, err: &Error, st: Arc<NodeController>) -> Action {
    if err.is_conflict() {
        // Routine under optimistic concurrency (the kubelet posts its status meanwhile): upstream's
        // node controller retries it silently (RetryOnConflict), so it is no warning here either.
        let delay = st.settings.retry_min;
        tracing::debug!(node = %node.name_any(), retry_in = ?delay, "lost a write race; retrying");
        return Action::requeue(delay);
    }
    let delay = st.backoff.failed(&uid(&node));
    tracing::warn!(
        node = %node.name_any(),
        reason = err.metric_label(),
        retry_in = ?delay,
        "{}",
        error_chain(err)
    );
    Action::requeue(delay)
}

impl NodeController {
    pub fn new(ctx: Arc<Context>, settings: Settings, cache: Store<Node>) -> NodeController {
        let instances = Instances::new(
            ctx.session.clone(),
            ctx.config.networking.clone(),
            ctx.region().map(str::to_owned),
            settings.regional_provider_id,
        );
        NodeController {
            nodes: Api::all(ctx.client.clone()),
            ctx,
            settings,
            instances,
            cache,
            refreshed: Mutex::new(HashMap::new()),
            backoff: Backoff::new(settings.retry_min, settings.retry_max),
        }
    }

    /// Time until the node's addresses are due for a refresh (zero: now).
    fn refresh_due_in(&self, node: &Node) -> Duration {
        locked(&self.refreshed)
            .get(&uid(node))
            .map_or(Duration::ZERO, |at| {
                self.settings
                    .status_update_frequency
                    .saturating_sub(at.elapsed())
            })
    }

    fn mark_refreshed(&self, node: &Node) {
        let mut r = locked(&self.refreshed);
        r.insert(uid(node), Instant::now());
        // Forget nodes deleted by others, now and then.
        let known = self.cache.state();
        if r.len() > 2 * known.len() + 8 {
            let uids: HashSet<String> = known.iter().map(|n| uid(n)).collect();
            r.retain(|u, _| uids.contains(u));
            self.backoff.retain(&uids);
        }
    }

    fn forget(&self, node: &Node) {
        let u = uid(node);
        locked(&self.refreshed).remove(&u);
        self.backoff.reset(&u);
    }

    async fn publish(
        &self,
        node: &Node,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.ctx
            .publish(&node.object_ref(&()), type_, reason, action, note)
            .await;
    }

    fn kube_err(node: &Node, what: &'static str) -> impl FnOnce(kube::Error) -> Error {
        let node = node.name_any();
        move |source| Error::Kube { node, what, source }
    }

    async fn sync(&self, node: &Node) -> Result<Action> {
        if node.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let mut cur = node.clone();
        let ready = is_ready(node);
        let uninitialized = has_taint(node, TAINT_UNINITIALIZED);
        let watched =
            self.settings.lifecycle && !node.labels().contains_key(EXCLUDE_FROM_LIFECYCLE);
        let mut lookup = None;

        // Lifecycle (upstream cloud-node-lifecycle): only NotReady nodes cost a cloud call.
        if watched && ready {
            if has_taint(&cur, TAINT_SHUTDOWN) {
                cur = self.set_shutdown_taint(&cur, false).await?;
            }
        } else if watched {
            match self.instances.lookup(&cur).await {
                Ok(Lookup::Gone { server_id }) => {
                    self.delete_node(&cur, &server_id).await?;
                    return Ok(Action::await_change());
                }
                Ok(Lookup::Found(server)) => {
                    let shut = is_shut_down(&server);
                    if shut != has_taint(&cur, TAINT_SHUTDOWN) {
                        cur = self.set_shutdown_taint(&cur, shut).await?;
                        if shut {
                            self.publish(
                                &cur,
                                EventType::Normal,
                                reason::INSTANCE_SHUTDOWN,
                                ACTION_TAINT,
                                format!(
                                    "Server {} is SHUTOFF: tainted {TAINT_SHUTDOWN}:NoSchedule",
                                    server.id
                                ),
                            )
                            .await;
                        }
                    }
                    lookup = Some(Lookup::Found(server));
                }
                Ok(other) => lookup = Some(other),
                // Initialisation looks again and reports what is wrong.
                Err(_) if uninitialized => {}
                Err(e) => return Err(e),
            }
        }

        if !self.settings.cloud_node {
            // Lifecycle only.
        } else if uninitialized {
            self.initialize(cur, lookup).await?;
        } else {
            let ga = labels::beta_to_ga(cur.labels());
            if !ga.is_empty() {
                cur = self
                    .patch(
                        &cur,
                        json!({"metadata": {"labels": ga}}),
                        "reconcile GA labels",
                    )
                    .await?;
            }
            if self.refresh_due_in(&cur).is_zero() {
                self.refresh(&cur, lookup).await?;
            }
        }
        let mut next = if self.settings.cloud_node {
            self.refresh_due_in(node)
        } else {
            Duration::MAX
        };
        if watched && !ready {
            next = next.min(self.settings.monitor_period);
        }
        if next == Duration::MAX {
            return Ok(Action::await_change());
        }
        Ok(Action::requeue(next.max(Duration::from_millis(100))))
    }

    /// The lookup result, or the reason the node cannot be matched to a server, reported.
    async fn server_for(
        &self,
        node: &Node,
        lookup: Option<Lookup>,
        action: &str,
    ) -> Result<Box<kos_cloud::model::compute::Server>> {
        let name = node.name_any();
        let lookup = match lookup {
            Some(l) => l,
            None => match self.instances.lookup(node).await {
                Ok(l) => l,
                Err(e) => {
                    if matches!(
                        e,
                        Error::ProviderId { .. }
                            | Error::RegionMismatch { .. }
                            | Error::ServersNamedAlike { .. }
                    ) {
                        self.publish(
                            node,
                            EventType::Warning,
                            reason::INSTANCE_LOOKUP_FAILED,
                            action,
                            error_chain(&e),
                        )
                        .await;
                    }
                    return Err(e);
                }
            },
        };
        match lookup {
            Lookup::Found(s) => Ok(s),
            Lookup::NoServerNamed => {
                let e = Error::NoServerNamed { node: name };
                self.publish(
                    node,
                    EventType::Warning,
                    reason::INSTANCE_NOT_FOUND,
                    action,
                    format!("{}: the node name must be its server's name, or kubelet must set --provider-id=openstack:///<server id>", error_chain(&e)),
                )
                .await;
                Err(e)
            }
            Lookup::Gone { server_id } => {
                let e = Error::ServerGone {
                    node: name,
                    server_id,
                    provider_id: provider_id(node).unwrap_or_default().to_owned(),
                };
                self.publish(
                    node,
                    EventType::Warning,
                    reason::INSTANCE_NOT_FOUND,
                    action,
                    error_chain(&e),
                )
                .await;
                Err(e)
            }
        }
    }

    /// Addresses first, then labels, providerID and the taint's removal in one guarded update.
    async fn initialize(&self, mut cur: Node, lookup: Option<Lookup>) -> Result<()> {
        let name = cur.name_any();
        let server = self.server_for(&cur, lookup, ACTION_INITIALIZE).await?;
        let meta = self.instances.metadata(&name, &server).await?;
        let want = match addresses::for_node(
            &meta.addresses,
            &current_addresses(&cur),
            cur.annotations().get(PROVIDED_NODE_IP).map(String::as_str),
        ) {
            Ok(w) => w,
            Err(source) => {
                let e = Error::ProvidedNodeIp { node: name, source };
                self.publish(
                    &cur,
                    EventType::Warning,
                    reason::PROVIDED_NODE_IP_INVALID,
                    ACTION_INITIALIZE,
                    error_chain(&e),
                )
                .await;
                return Err(e);
            }
        };
        if !meta.addresses.is_empty() && want != current_addresses(&cur) {
            cur = self.write_addresses(&cur, &want).await?;
        }

        let mut labels: BTreeMap<String, String> = BTreeMap::new();
        let mut set = |keys: [&str; 2], v: &Option<String>| {
            if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
                for k in keys {
                    labels.insert(k.to_owned(), v.clone());
                }
            }
        };
        set(
            [INSTANCE_TYPE, INSTANCE_TYPE_BETA],
            &Some(meta.instance_type.clone()),
        );
        set([ZONE, ZONE_BETA], &meta.zone);
        set([REGION, REGION_BETA], &meta.region);
        for (k, v) in &meta.additional_labels {
            // Never a Kubernetes-namespaced key; never overwrite (upstream rules).
            if !labels::is_kubernetes_namespaced(k) && !cur.labels().contains_key(k) {
                labels.insert(k.clone(), v.clone());
            }
        }
        labels.retain(|k, v| cur.labels().get(k) != Some(v));
        let remaining: Vec<Taint> = taints(&cur)
            .into_iter()
            .filter(|t| t.key != TAINT_UNINITIALIZED)
            .collect();
        let mut spec =
            json!({"taints": if remaining.is_empty() { Value::Null } else { json!(remaining) }});
        if provider_id(&cur).is_none() {
            spec["providerID"] = json!(meta.provider_id.to_string());
        }
        let body = json!({
            "metadata": {"resourceVersion": cur.resource_version(), "labels": labels},
            "spec": spec,
        });
        cur = self.patch(&cur, body, "initialize").await?;
        tracing::info!(node = %name, server = %server.id, "node initialized");
        self.publish(
            &cur,
            EventType::Normal,
            reason::SYNCED,
            ACTION_INITIALIZE,
            "Node synced successfully".into(),
        )
        .await;
        self.mark_refreshed(&cur);
        Ok(())
    }

    /// The periodic address refresh of an initialised node.
    async fn refresh(&self, cur: &Node, lookup: Option<Lookup>) -> Result<()> {
        let name = cur.name_any();
        let server = match self.server_for(cur, lookup, ACTION_UPDATE_ADDRESSES).await {
            Ok(s) => s,
            Err(Error::NoServerNamed { .. } | Error::ServerGone { .. }) => {
                // Reported; a Ready node is kept, a NotReady one the lifecycle check deletes.
                self.mark_refreshed(cur);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let meta = self.instances.metadata(&name, &server).await?;
        let current = current_addresses(cur);
        match addresses::for_node(
            &meta.addresses,
            &current,
            cur.annotations().get(PROVIDED_NODE_IP).map(String::as_str),
        ) {
            Ok(want) if !meta.addresses.is_empty() && want != current => {
                tracing::info!(node = %name, "node addresses changed");
                self.write_addresses(cur, &want).await?;
            }
            Ok(_) => {}
            Err(source) => {
                let e = Error::ProvidedNodeIp { node: name, source };
                self.publish(
                    cur,
                    EventType::Warning,
                    reason::PROVIDED_NODE_IP_INVALID,
                    ACTION_UPDATE_ADDRESSES,
                    error_chain(&e),
                )
                .await;
            }
        }
        self.mark_refreshed(cur);
        Ok(())
    }

    async fn write_addresses(&self, cur: &Node, addrs: &[Address]) -> Result<Node> {
        let list: Vec<_> = addrs.iter().map(Address::to_node_address).collect();
        // A merge patch replaces the list: the strategic one would merge by `type` and collapse two
        // InternalIPs into one.
        self.nodes
            .patch_status(
                &cur.name_any(),
                &patch_params(),
                &Patch::Merge(json!({"status": {"addresses": list}})),
            )
            .await
            .map_err(Self::kube_err(cur, "write status.addresses"))
    }

    async fn patch(&self, cur: &Node, body: Value, what: &'static str) -> Result<Node> {
        self.nodes
            .patch(&cur.name_any(), &patch_params(), &Patch::Merge(body))
            .await
            .map_err(Self::kube_err(cur, what))
    }

    async fn set_shutdown_taint(&self, cur: &Node, on: bool) -> Result<Node> {
        let mut ts: Vec<Taint> = taints(cur)
            .into_iter()
            .filter(|t| t.key != TAINT_SHUTDOWN)
            .collect();
        if on {
            ts.push(Taint {
                key: TAINT_SHUTDOWN.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            });
        }
        let body = json!({
            "metadata": {"resourceVersion": cur.resource_version()},
            "spec": {"taints": if ts.is_empty() { Value::Null } else { json!(ts) }},
        });
        tracing::info!(node = %cur.name_any(), shutdown = on, "shutdown taint");
        self.patch(
            cur,
            body,
            if on {
                "add the shutdown taint"
            } else {
                "remove the shutdown taint"
            },
        )
        .await
    }

    async fn delete_node(&self, cur: &Node, server_id: &str) -> Result<()> {
        let name = cur.name_any();
        tracing::info!(node = %name, server = server_id, "deleting node: its server is gone");
        self.publish(
            cur,
            EventType::Normal,
            reason::DELETING_NODE,
            ACTION_DELETE,
            format!("Deleting node {name} because it does not exist in the cloud provider"),
        )
        .await;
        let dp = DeleteParams {
            // Only this node: not one of the same name registered meanwhile.
            preconditions: Some(Preconditions {
                uid: cur.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.nodes.delete(&name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                let e = Error::Kube {
                    node: name.clone(),
                    what: "delete the node",
                    source,
                };
                self.publish(
                    cur,
                    EventType::Warning,
                    reason::DELETING_NODE_FAILED,
                    ACTION_DELETE,
                    format!("Failed deleting node {name}: {}", error_chain(&e)),
                )
                .await;
                return Err(e);
            }
        }
        self.forget(cur);
        Ok(())
    }
}
