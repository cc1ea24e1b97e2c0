//! The CloudProvider service: each call resolves the Cluster its client's certificate names, reads
//! (or, for a change, re-reads) the Cluster and its servers, and answers from [`super::groups`].
//!
//! The autoscaler calls `Refresh` at the start of every loop, then a `NodeGroupForNode` per node and
//! more: reads between two refreshes are answered from what the last one read (one Cluster GET
//! and one server list per loop), changes from a fresh read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kos_cloud::model::TagQuery;
use kos_cluster::names::{ClusterName, cluster_tag};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use tonic::{Request, Response, Status};

use super::groups::{self, Group, Member};
use super::proto::cloud_provider_server::CloudProvider;
use super::proto::*;
use super::{template, tls};
use crate::identity::{self, Sessions};
use crate::reconcile::document;
use crate::resource::Cluster;

/// The label the autoscaler is told GPU nodes carry (kos has no GPU pools of its own kind yet).
pub const GPU_LABEL: &str = "kos.dev/gpu";

/// What one read of a Cluster showed.
struct View {
    cluster: Cluster,
    groups: Vec<Group>,
    members: Vec<Member>,
    /// What the Cluster's annotations record of its pools, as read with it.
    records: groups::Records,
}

/// kos-operator's CloudProvider.
pub struct Provider {
    client: kube::Client,
    sessions: Sessions,
    /// The last read of each Cluster (namespace, name), until its autoscaler's next `Refresh`.
    views: Mutex<HashMap<(String, String), Arc<View>>>,
}

type Who = (String, String);

impl Provider {
    #[must_use]
    pub fn new(client: kube::Client) -> Provider {
        Provider {
            client,
            sessions: Sessions::default(),
            views: Mutex::new(HashMap::new()),
        }
    }

    /// The service, for tonic's server.
    #[must_use]
    pub fn service(self) -> cloud_provider_server::CloudProviderServer<Provider> {
        cloud_provider_server::CloudProviderServer::new(self)
    }

    /// The Cluster the client's certificate speaks for.
    fn who<T>(request: &Request<T>) -> Result<Who, Status> {
        let certs = request
            .peer_certs()
            .ok_or_else(|| Status::unauthenticated("a client certificate is required"))?;
        let leaf = certs
            .first()
            .ok_or_else(|| Status::unauthenticated("a client certificate is required"))?;
        tls::cluster_of(leaf).ok_or_else(|| {
            Status::permission_denied(
                "the client certificate's common name is not <namespace>/<cluster>",
            )
        })
    }

    fn forget(&self, who: &Who) {
        self.views
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(who);
    }

    /// The Cluster and its servers: the last read's, or a fresh one.
    async fn view(&self, who: &Who, fresh: bool) -> Result<Arc<View>, Status> {
        if !fresh {
            let held = self
                .views
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(who)
                .cloned();
            if let Some(v) = held {
                return Ok(v);
            }
        }
        let (namespace, name) = who;
        let clusters: Api<Cluster> = Api::namespaced(self.client.clone(), namespace);
        let cluster = clusters
            .get_opt(name)
            .await
            .map_err(|e| Status::unavailable(format!("reading Cluster {namespace}/{name}: {e}")))?
            .ok_or_else(|| Status::not_found(format!("no Cluster {namespace}/{name}")))?;
        let connected = self.connect(&cluster).await?;
        let cluster_name = ClusterName::new(name)
            .map_err(|e| Status::failed_precondition(format!("Cluster {namespace}/{name}: {e}")))?;
        let servers = connected
            .session
            .compute()
            .list_servers(&TagQuery::all([cluster_tag(&cluster_name)]))
            .await
            .map_err(|e| Status::unavailable(format!("listing the cluster's servers: {e}")))?;
        let records = groups::Records::of(
            cluster.annotations(),
            time::OffsetDateTime::now_utc().unix_timestamp(),
        );
        let members = groups::with_failed(
            groups::members(&servers, &records.all_accounted()),
            &records,
        );
        let view = Arc::new(View {
            groups: groups::groups(&cluster.spec.cluster),
            members,
            records,
            cluster,
        });
        self.views
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(who.clone(), Arc::clone(&view));
        Ok(view)
    }

    async fn connect(&self, cluster: &Cluster) -> Result<Arc<identity::Connected>, Status> {
        let namespace = cluster.namespace().unwrap_or_default();
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
        identity::connect(
            &secrets,
            &namespace,
            &cluster.spec.identity_ref,
            &self.sessions,
        )
        .await
        .map_err(|e| Status::unavailable(format!("the cluster's cloud: {e}")))
    }

    fn group<'v>(view: &'v View, id: &str) -> Result<&'v Group, Status> {
        view.groups
            .iter()
            .find(|g| g.pool == id)
            .ok_or_else(|| Status::not_found(format!("no autoscaled pool {id}")))
    }

    /// Sets the pool's `count` to `to` (and, given, its accounted servers' annotation) in one
    /// patch; refused, nothing changed, if the Cluster changed the count or moved the pool since
    /// it was read.
    async fn set_target(
        &self,
        who: &Who,
        view: &View,
        group: &Group,
        to: u32,
        accounted: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<(), Status> {
        let (namespace, name) = who;
        let clusters: Api<Cluster> = Api::namespaced(self.client.clone(), namespace);
        let at = format!("/spec/nodePools/{}", group.position);
        let mut ops = vec![
            serde_json::json!({"op": "test", "path": format!("{at}/name"), "value": group.pool}),
            serde_json::json!({"op": "test", "path": format!("{at}/count"), "value": group.target}),
            serde_json::json!({"op": "replace", "path": format!("{at}/count"), "value": to}),
        ];
        if let Some(ids) = accounted {
            let key = groups::accounted_key(&group.pool);
            let value = ids.iter().cloned().collect::<Vec<_>>().join(",");
            let has = view.cluster.metadata.annotations.as_ref();
            match (has, value.is_empty()) {
                (None, true) => {}
                (None, false) => ops.push(serde_json::json!(
                    {"op": "add", "path": "/metadata/annotations", "value": {key: value}}
                )),
                (Some(a), true) if a.contains_key(&key) => ops.push(serde_json::json!(
                    {"op": "remove", "path": format!("/metadata/annotations/{}", pointer(&key))}
                )),
                (Some(_), true) => {}
                (Some(_), false) => ops.push(serde_json::json!(
                    {"op": "add", "path": format!("/metadata/annotations/{}", pointer(&key)), "value": value}
                )),
            }
            // A failed build the autoscaler named is its now: its record goes with the count.
            let key = groups::failed_key(&group.pool);
            if let Some(was) = view.records.failed.get(&group.pool) {
                let mut left = was.clone();
                left.retain(|server, _| !ids.contains(server));
                let path = format!("/metadata/annotations/{}", pointer(&key));
                ops.push(match groups::failures_value(&left) {
                    Some(value) => serde_json::json!({"op": "add", "path": path, "value": value}),
                    None => serde_json::json!({"op": "remove", "path": path}),
                });
            }
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(|e| Status::internal(format!("building the patch: {e}")))?;
        clusters
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 422 || s.code == 409 => Status::aborted(format!(
                    "pool {} of Cluster {namespace}/{name} changed meanwhile: {}",
                    group.pool, s.message
                )),
                e => Status::unavailable(format!("patching Cluster {namespace}/{name}: {e}")),
            })?;
        tracing::info!(cluster = %name, namespace = %namespace, pool = %group.pool,
            from = group.target, to, "autoscaler set the pool's target size");
        Ok(())
    }

    fn size_error(e: &groups::SizeError) -> Status {
        match e {
            groups::SizeError::NotInGroup { .. } => Status::not_found(e.to_string()),
            _ => Status::invalid_argument(e.to_string()),
        }
    }
}

/// `key` as a JSON pointer's segment (RFC 6901: `~` and `/` escaped).
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn node_group(g: &Group) -> NodeGroup {
    NodeGroup {
        id: g.pool.clone(),
        min_size: i32::try_from(g.min).unwrap_or(i32::MAX),
        max_size: i32::try_from(g.max).unwrap_or(i32::MAX),
        debug: format!(
            "pool {} ({}..={}, target {})",
            g.pool, g.min, g.max, g.target
        ),
    }
}

#[tonic::async_trait]
impl CloudProvider for Provider {
    async fn node_groups(
        &self,
        request: Request<NodeGroupsRequest>,
    ) -> Result<Response<NodeGroupsResponse>, Status> {
        let who = Self::who(&request)?;
        let view = self.view(&who, false).await?;
        Ok(Response::new(NodeGroupsResponse {
            node_groups: view.groups.iter().map(node_group).collect(),
        }))
    }

    async fn node_group_for_node(
        &self,
        request: Request<NodeGroupForNodeRequest>,
    ) -> Result<Response<NodeGroupForNodeResponse>, Status> {
        let who = Self::who(&request)?;
        let node = request.into_inner().node.unwrap_or_default();
        let view = self.view(&who, false).await?;
        let member = view
            .members
            .iter()
            .find(|m| groups::server_id(&node.provider_id).is_some_and(|id| id == m.server_id));
        // A node of no autoscaled pool (a control plane, a fixed pool, not kos's) gets id "".
        let group = member
            .and_then(|m| view.groups.iter().find(|g| g.pool == m.pool))
            .map(node_group)
            .unwrap_or_default();
        Ok(Response::new(NodeGroupForNodeResponse {
            node_group: Some(group),
        }))
    }

    async fn pricing_node_price(
        &self,
        _: Request<PricingNodePriceRequest>,
    ) -> Result<Response<PricingNodePriceResponse>, Status> {
        Err(Status::unimplemented("kos knows no prices"))
    }

    async fn pricing_pod_price(
        &self,
        _: Request<PricingPodPriceRequest>,
    ) -> Result<Response<PricingPodPriceResponse>, Status> {
        Err(Status::unimplemented("kos knows no prices"))
    }

    async fn gpu_label(
        &self,
        request: Request<GpuLabelRequest>,
    ) -> Result<Response<GpuLabelResponse>, Status> {
        Self::who(&request)?;
        Ok(Response::new(GpuLabelResponse {
            label: GPU_LABEL.to_owned(),
        }))
    }

    async fn get_available_gpu_types(
        &self,
        request: Request<GetAvailableGpuTypesRequest>,
    ) -> Result<Response<GetAvailableGpuTypesResponse>, Status> {
        Self::who(&request)?;
        Ok(Response::new(GetAvailableGpuTypesResponse::default()))
    }

    async fn cleanup(
        &self,
        request: Request<CleanupRequest>,
    ) -> Result<Response<CleanupResponse>, Status> {
        let who = Self::who(&request)?;
        self.forget(&who);
        Ok(Response::new(CleanupResponse {}))
    }

    async fn refresh(
        &self,
        request: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        let who = Self::who(&request)?;
        self.view(&who, true).await?;
        Ok(Response::new(RefreshResponse {}))
    }

    async fn node_group_target_size(
        &self,
        request: Request<NodeGroupTargetSizeRequest>,
    ) -> Result<Response<NodeGroupTargetSizeResponse>, Status> {
        let who = Self::who(&request)?;
        let id = request.into_inner().id;
        let view = self.view(&who, false).await?;
        let g = Self::group(&view, &id)?;
        Ok(Response::new(NodeGroupTargetSizeResponse {
            target_size: i32::try_from(g.target).unwrap_or(i32::MAX),
        }))
    }

    async fn node_group_increase_size(
        &self,
        request: Request<NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<NodeGroupIncreaseSizeResponse>, Status> {
        let who = Self::who(&request)?;
        let r = request.into_inner();
        let view = self.view(&who, true).await?;
        let g = Self::group(&view, &r.id)?;
        let to = g.increased(r.delta).map_err(|e| Self::size_error(&e))?;
        self.set_target(&who, &view, g, to, None).await?;
        self.forget(&who);
        Ok(Response::new(NodeGroupIncreaseSizeResponse {}))
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<NodeGroupDeleteNodesResponse>, Status> {
        let who = Self::who(&request)?;
        let r = request.into_inner();
        let view = self.view(&who, true).await?;
        let g = Self::group(&view, &r.id)?;
        let nodes: Vec<(String, String)> = r
            .nodes
            .into_iter()
            .map(|n| (n.provider_id, n.name))
            .collect();
        let d = g
            .deleting(&nodes, &view.members)
            .map_err(|e| Self::size_error(&e))?;
        // The tags first: with the count lowered and no tag, the turn would take another server;
        // and off a server a failed call left tagged, which would leave in place of these.
        let connected = self.connect(&view.cluster).await?;
        let compute = connected.session.compute();
        let retire = kos_lifecycle::succession::TAG_RETIRE;
        for m in &d.untag {
            compute
                .remove_server_tag(&m.server_id, retire)
                .await
                .map_err(|e| Status::unavailable(format!("untagging {}: {e}", m.name)))?;
            tracing::info!(node = %m.name, pool = %g.pool, "a failed DeleteNodes' tag taken off");
        }
        for m in &d.tag {
            compute
                .add_server_tag(&m.server_id, retire)
                .await
                .map_err(|e| Status::unavailable(format!("tagging {}: {e}", m.name)))?;
            tracing::info!(node = %m.name, pool = %g.pool, "autoscaler named the node to leave");
        }
        // The count lowered and the servers recorded together: asked again, none is counted twice.
        if !d.account.is_empty() || view.records.accounted_of(&g.pool) != d.accounted {
            self.set_target(&who, &view, g, d.target, Some(&d.accounted))
                .await?;
        }
        // Those Nova will not tag (a build that failed, one being built) go now, the count
        // lowered for them: the autoscaler deletes what failed to be created this way.
        for m in &d.remove {
            compute
                .delete_server(&m.server_id)
                .await
                .map_err(|e| Status::unavailable(format!("deleting {}: {e}", m.name)))?;
            tracing::info!(node = %m.name, pool = %g.pool, status = %m.status,
                "autoscaler named a node that never joined: its server deleted");
        }
        self.forget(&who);
        Ok(Response::new(NodeGroupDeleteNodesResponse {}))
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<NodeGroupDecreaseTargetSizeResponse>, Status> {
        let who = Self::who(&request)?;
        let r = request.into_inner();
        let view = self.view(&who, true).await?;
        let g = Self::group(&view, &r.id)?;
        let to = g
            .decreased(r.delta, &view.members)
            .map_err(|e| Self::size_error(&e))?;
        self.set_target(&who, &view, g, to, None).await?;
        self.forget(&who);
        Ok(Response::new(NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn node_group_nodes(
        &self,
        request: Request<NodeGroupNodesRequest>,
    ) -> Result<Response<NodeGroupNodesResponse>, Status> {
        let who = Self::who(&request)?;
        let id = request.into_inner().id;
        let view = self.view(&who, false).await?;
        let g = Self::group(&view, &id)?;
        let instances = view
            .members
            .iter()
            .filter(|m| m.pool == g.pool)
            .map(|m| Instance {
                id: m.provider_id(),
                status: Some(m.status()),
            })
            .collect();
        Ok(Response::new(NodeGroupNodesResponse { instances }))
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<NodeGroupTemplateNodeInfoResponse>, Status> {
        let who = Self::who(&request)?;
        let id = request.into_inner().id;
        let view = self.view(&who, false).await?;
        Self::group(&view, &id)?;
        let loaded = kos_cluster::load("Cluster", &document(&view.cluster)).map_err(|e| {
            Status::failed_precondition(format!("the Cluster's spec is refused: {e}"))
        })?;
        let spec = loaded.spec;
        let pool = spec
            .node_pools
            .iter()
            .find(|p| p.name.value.to_string() == id)
            .ok_or_else(|| Status::not_found(format!("no autoscaled pool {id}")))?;
        let connected = self.connect(&view.cluster).await?;
        let flavor = connected
            .session
            .compute()
            .find_flavor(&pool.machine.flavor.value)
            .await
            .map_err(|e| Status::unavailable(format!("the pool's flavor: {e}")))?;
        let labels: BTreeMap<String, String> = pool
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let taints: Vec<(String, Option<String>, String)> = pool
            .taints
            .iter()
            .map(|t| {
                (
                    t.key.to_string(),
                    t.value.as_ref().map(ToString::to_string),
                    t.effect.as_str().to_owned(),
                )
            })
            .collect();
        let zone = match pool.machine.availability_zones.as_slice() {
            [one] => Some(one.value.as_str()),
            _ => None,
        };
        let version = spec.kubernetes_version.to_string();
        let cluster_name = view.cluster.name_any();
        let shape = template::Shape {
            cluster: &cluster_name,
            pool: &id,
            flavor: &flavor,
            disk_gb: pool
                .machine
                .boot_volume
                .as_ref()
                .map(|b| u64::from(b.size_gb)),
            zone,
            region: connected.session.region(),
            labels: &labels,
            taints: &taints,
            kubernetes_version: &version,
        };
        Ok(Response::new(NodeGroupTemplateNodeInfoResponse {
            node_bytes: template::bytes(&shape),
        }))
    }

    async fn node_group_get_options(
        &self,
        request: Request<NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<NodeGroupAutoscalingOptionsResponse>, Status> {
        let who = Self::who(&request)?;
        let r = request.into_inner();
        let view = self.view(&who, false).await?;
        Self::group(&view, &r.id)?;
        // kos has no per-pool options: the autoscaler's own defaults hold.
        Ok(Response::new(NodeGroupAutoscalingOptionsResponse {
            node_group_autoscaling_options: r.defaults,
        }))
    }
}
