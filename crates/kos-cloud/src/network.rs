//! Neutron facade: networks, subnets, routers, ports, security groups and rules, floating IPs, tags,
//! quotas.
//!
//! Guarantee: a `create_*` whose request carries tags returns the object *with* those tags. Neutron
//! refuses `tags` in the POST of every resource but ports (`allow_post: False`), and keeps a port's only
//! when its ML2 driver `tag_ports_during_bulk_creation` runs (extension
//! [`PORT_TAGS_ON_CREATE`]); otherwise it accepts and ignores them. So the create is followed by one
//! `PUT …/tags` (replace-all), except for ports made by [`NetworkApi::create_ports`] on a cloud with
//! that extension. If the tag call fails, the object exists untagged: the error says so ("was created
//! but not tagged"), and kos finds it again by its deterministic name.

use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::CloudError;
use crate::model::common::{invalid, path_segment};
use crate::model::network::{
    FloatingIp, FloatingIpCreate, FloatingIpFilter, HostRoute, Network, NetworkCreate,
    NetworkFilter, NetworkQuotas, Port, PortCreate, PortFilter, PortUpdate, Router, RouterCreate,
    RouterFilter, RouterInterface, SecurityGroup, SecurityGroupCreate, SecurityGroupFilter,
    SecurityGroupRule, SecurityGroupRuleCreate, Subnet, SubnetCreate, SubnetFilter, Tagged,
    TaggedKind,
};
use crate::paging::util::{body, exactly_one, fetch, found, gone, run};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;

const SVC: ServiceKind = ServiceKind::Network;

/// The Neutron extension (ML2 driver `tag_ports_during_bulk_creation`) that keeps the `tags` of a port
/// POST, single or bulk. Without it Neutron accepts them and drops them.
pub const PORT_TAGS_ON_CREATE: &str = "tag-ports-during-bulk-creation";

/// Neutron, through one session: `session.network()`.
#[derive(Debug, Clone, Copy)]
pub struct NetworkApi<'a> {
    session: &'a Session,
    page_size: Option<u32>,
}

impl Session {
    pub fn network(&self) -> NetworkApi<'_> {
        NetworkApi {
            session: self,
            page_size: None,
        }
    }
}

impl NetworkApi<'_> {
    /// Lists ask for pages of `n` (default: the service's own page size, usually everything).
    pub fn page_size(self, n: u32) -> Self {
        NetworkApi {
            page_size: Some(n),
            ..self
        }
    }

    async fn list<T: DeserializeOwned>(
        &self,
        op: &'static str,
        collection: &str,
        key: &str,
        query: Vec<(String, String)>,
    ) -> Result<Vec<T>, CloudError> {
        let mut r = ApiRequest::get(SVC, op, collection);
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

    async fn delete(&self, op: &'static str, path: String) -> Result<(), CloudError> {
        gone(run(self.session, ApiRequest::delete(SVC, op, path)).await)
    }

    /// POST, then PUT the tags if there are any.
    async fn create<T: DeserializeOwned + Tagged>(
        &self,
        op: &'static str,
        kind: TaggedKind,
        key: &str,
        req: &impl serde::Serialize,
        tags: &[String],
    ) -> Result<T, CloudError> {
        let mut obj: T = fetch(
            self.session,
            ApiRequest::post(SVC, op, kind.collection(), body(key, req)?),
            key,
        )
        .await?;
        if !tags.is_empty() {
            self.tag_created(kind, key, &mut obj, tags).await?;
        }
        Ok(obj)
    }

    /// Puts `tags` on an object just created without them; a failure says it was created.
    async fn tag_created<T: Tagged>(
        &self,
        kind: TaggedKind,
        key: &str,
        obj: &mut T,
        tags: &[String],
    ) -> Result<(), CloudError> {
        let applied =
            self.set_tags(kind, obj.id(), tags)
                .await
                .map_err(|e| CloudError::CreatedUntagged {
                    key: key.to_owned(),
                    id: obj.id().to_owned(),
                    source: Box::new(e),
                })?;
        *obj.tags_mut() = applied;
        Ok(())
    }

    // ------------------------------------------------------------ tags

    /// Replaces all tags of a resource; returns the tags Neutron now has.
    pub async fn set_tags(
        &self,
        kind: TaggedKind,
        id: &str,
        tags: &[String],
    ) -> Result<Vec<String>, CloudError> {
        let r = ApiRequest::put(
            SVC,
            kind.op_replace_tags(),
            format!("{}/{id}/tags", kind.collection()),
            json!({"tags": tags}),
        );
        fetch(self.session, r, "tags").await
    }

    /// Adds one tag (201, empty body; adding a tag that is there is a no-op).
    pub async fn add_tag(&self, kind: TaggedKind, id: &str, tag: &str) -> Result<(), CloudError> {
        let path = format!("{}/{id}/tags/{}", kind.collection(), path_segment(tag));
        run(
            self.session,
            ApiRequest::put_empty(SVC, kind.op_add_tag(), path),
        )
        .await
    }

    // ------------------------------------------------------------ networks

    pub async fn create_network(&self, req: &NetworkCreate) -> Result<Network, CloudError> {
        self.create(
            "network.create",
            TaggedKind::Network,
            "network",
            req,
            &req.tags,
        )
        .await
    }

    pub async fn get_network(&self, id: &str) -> Result<Option<Network>, CloudError> {
        self.get("network.get", format!("networks/{id}"), "network")
            .await
    }

    pub async fn list_networks(&self, f: &NetworkFilter) -> Result<Vec<Network>, CloudError> {
        self.list("network.list", "networks", "networks", f.to_query())
            .await
    }

    pub async fn delete_network(&self, id: &str) -> Result<(), CloudError> {
        self.delete("network.delete", format!("networks/{id}"))
            .await
    }

    /// The external network: the one named or with id `name_or_id`, or, without one, the only network
    /// with `router:external=true` (several are an error listing them: the user has to choose).
    pub async fn external_network(&self, name_or_id: Option<&str>) -> Result<Network, CloudError> {
        let all = self
            .list_networks(&NetworkFilter {
                external: Some(true),
                ..Default::default()
            })
            .await?;
        let (matches, what, hint) = match name_or_id {
            Some(n) => {
                let by_id: Vec<Network> = all.iter().filter(|x| x.id == n).cloned().collect();
                let m = if by_id.is_empty() {
                    all.into_iter().filter(|x| x.name == n).collect()
                } else {
                    by_id
                };
                (m, format!("external network '{n}'"), "pass an id")
            }
            None => (
                all,
                "external network (router:external=true)".to_owned(),
                "name one in the cluster spec",
            ),
        };
        exactly_one(matches, || what, |n| n.id.as_str(), hint)
    }

    // ------------------------------------------------------------ subnets

    pub async fn create_subnet(&self, req: &SubnetCreate) -> Result<Subnet, CloudError> {
        self.create(
            "subnet.create",
            TaggedKind::Subnet,
            "subnet",
            req,
            &req.tags,
        )
        .await
    }

    pub async fn get_subnet(&self, id: &str) -> Result<Option<Subnet>, CloudError> {
        self.get("subnet.get", format!("subnets/{id}"), "subnet")
            .await
    }

    pub async fn list_subnets(&self, f: &SubnetFilter) -> Result<Vec<Subnet>, CloudError> {
        self.list("subnet.list", "subnets", "subnets", f.to_query())
            .await
    }

    /// Sets a subnet's DNS servers (the whole list; `[]` clears it).
    pub async fn update_subnet_dns(
        &self,
        id: &str,
        dns_nameservers: &[String],
    ) -> Result<Subnet, CloudError> {
        let req = serde_json::json!({ "dns_nameservers": dns_nameservers });
        fetch(
            self.session,
            ApiRequest::put(
                SVC,
                "subnet.update",
                format!("subnets/{id}"),
                body("subnet", &req)?,
            ),
            "subnet",
        )
        .await
    }

    pub async fn delete_subnet(&self, id: &str) -> Result<(), CloudError> {
        self.delete("subnet.delete", format!("subnets/{id}")).await
    }

    // ------------------------------------------------------------ routers

    pub async fn create_router(&self, req: &RouterCreate) -> Result<Router, CloudError> {
        self.create(
            "router.create",
            TaggedKind::Router,
            "router",
            req,
            &req.tags,
        )
        .await
    }

    pub async fn get_router(&self, id: &str) -> Result<Option<Router>, CloudError> {
        self.get("router.get", format!("routers/{id}"), "router")
            .await
    }

    pub async fn list_routers(&self, f: &RouterFilter) -> Result<Vec<Router>, CloudError> {
        self.list("router.list", "routers", "routers", f.to_query())
            .await
    }

    pub async fn delete_router(&self, id: &str) -> Result<(), CloudError> {
        self.delete("router.delete", format!("routers/{id}")).await
    }

    /// Connects the subnet to the router (makes floating IPs on it work).
    pub async fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface, CloudError> {
        let r = ApiRequest::put(
            SVC,
            "router.interface.add",
            format!("routers/{router_id}/add_router_interface"),
            json!({"subnet_id": subnet_id}),
        );
        fetch(self.session, r, "").await
    }

    pub async fn remove_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface, CloudError> {
        let r = ApiRequest::put(
            SVC,
            "router.interface.remove",
            format!("routers/{router_id}/remove_router_interface"),
            json!({"subnet_id": subnet_id}),
        );
        fetch(self.session, r, "").await
    }

    /// Replaces the router's extra routes.
    pub async fn set_router_routes(
        &self,
        router_id: &str,
        routes: &[HostRoute],
    ) -> Result<Router, CloudError> {
        self.put_routes("router.update", format!("routers/{router_id}"), routes)
            .await
    }

    /// A PUT of `{"router": {"routes": …}}`: the whole list, or the atomic add and remove.
    async fn put_routes(
        &self,
        operation: &'static str,
        path: String,
        routes: &[HostRoute],
    ) -> Result<Router, CloudError> {
        let r = ApiRequest::put(SVC, operation, path, json!({"router": {"routes": routes}}));
        fetch(self.session, r, "router").await
    }

    /// The aliases of the API extensions Neutron has (`extraroute-atomic`, `allowed-address-pairs`…).
    pub async fn extension_aliases(&self) -> Result<Vec<String>, CloudError> {
        let rsp = self
            .session
            .send(ApiRequest::get(SVC, "extension.list", "extensions"))
            .await?;
        let v: serde_json::Value = rsp.json()?;
        Ok(v["extensions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["alias"].as_str().map(str::to_owned))
            .collect())
    }

    /// Adds extra routes atomically (`extraroute-atomic`): concurrent writers of other routes are
    /// not overwritten, unlike a PUT of the whole list.
    pub async fn add_router_routes(
        &self,
        router_id: &str,
        routes: &[HostRoute],
    ) -> Result<Router, CloudError> {
        let path = format!("routers/{router_id}/add_extraroutes");
        self.put_routes("router.add_extraroutes", path, routes)
            .await
    }

    /// Removes extra routes atomically (`extraroute-atomic`); routes not present are ignored.
    pub async fn remove_router_routes(
        &self,
        router_id: &str,
        routes: &[HostRoute],
    ) -> Result<Router, CloudError> {
        let path = format!("routers/{router_id}/remove_extraroutes");
        self.put_routes("router.remove_extraroutes", path, routes)
            .await
    }

    // ------------------------------------------------------------ ports

    pub async fn create_port(&self, req: &PortCreate) -> Result<Port, CloudError> {
        req.check()
            .map_err(|d| invalid(format!("port {:?}", req.name), d))?;
        self.create("port.create", TaggedKind::Port, "port", req, &req.tags)
            .await
    }

    /// Creates `reqs` with one bulk POST (`{"ports": [...]}`), which Neutron makes all or none; the
    /// answer lists them in the order asked.
    ///
    /// With `tags_on_create` (the cloud lists [`PORT_TAGS_ON_CREATE`]) each port's tags go in the POST;
    /// a port that comes back without all of them (or every port, without `tags_on_create`) gets one
    /// tag PUT, all at once. The outer error is the POST's (nothing, or with an ambiguous outcome maybe
    /// everything, was made); an inner one is that port's tag PUT ([`CloudError::CreatedUntagged`]).
    pub async fn create_ports(
        &self,
        reqs: &[PortCreate],
        tags_on_create: bool,
    ) -> Result<Vec<Result<Port, CloudError>>, CloudError> {
        let mut items = Vec::with_capacity(reqs.len());
        for req in reqs {
            req.check()
                .map_err(|d| invalid(format!("port {:?}", req.name), d))?;
            let mut v = serde_json::to_value(req).map_err(|e| CloudError::Invalid {
                what: format!("port {:?}", req.name),
                detail: format!("cannot encode: {e}"),
            })?;
            if tags_on_create && !req.tags.is_empty() {
                v["tags"] = json!(req.tags);
            }
            items.push(v);
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let made: Vec<Port> = fetch(
            self.session,
            ApiRequest::post(SVC, "port.create_bulk", "ports", json!({ "ports": items })),
            "ports",
        )
        .await?;
        if made.len() != reqs.len() {
            return Err(CloudError::Decode {
                service: SVC,
                operation: "port.create_bulk",
                detail: format!(
                    "asked for {} ports, the answer lists {}",
                    reqs.len(),
                    made.len()
                ),
            });
        }
        let tagged = made.into_iter().zip(reqs).map(|(mut p, req)| async move {
            if req.tags.iter().all(|t| p.tags.contains(t)) {
                return Ok(p);
            }
            self.tag_created(TaggedKind::Port, "port", &mut p, &req.tags)
                .await
                .map(|()| p)
        });
        Ok(futures::future::join_all(tagged).await)
    }

    pub async fn update_port(&self, id: &str, req: &PortUpdate) -> Result<Port, CloudError> {
        req.check().map_err(|d| invalid(format!("port {id}"), d))?;
        fetch(
            self.session,
            ApiRequest::put(
                SVC,
                "port.update",
                format!("ports/{id}"),
                body("port", req)?,
            ),
            "port",
        )
        .await
    }

    pub async fn get_port(&self, id: &str) -> Result<Option<Port>, CloudError> {
        self.get("port.get", format!("ports/{id}"), "port").await
    }

    pub async fn list_ports(&self, f: &PortFilter) -> Result<Vec<Port>, CloudError> {
        self.list("port.list", "ports", "ports", f.to_query()).await
    }

    pub async fn delete_port(&self, id: &str) -> Result<(), CloudError> {
        self.delete("port.delete", format!("ports/{id}")).await
    }

    // ------------------------------------------------------------ security groups

    pub async fn create_security_group(
        &self,
        req: &SecurityGroupCreate,
    ) -> Result<SecurityGroup, CloudError> {
        self.create(
            "security_group.create",
            TaggedKind::SecurityGroup,
            "security_group",
            req,
            &req.tags,
        )
        .await
    }

    pub async fn get_security_group(&self, id: &str) -> Result<Option<SecurityGroup>, CloudError> {
        self.get(
            "security_group.get",
            format!("security-groups/{id}"),
            "security_group",
        )
        .await
    }

    pub async fn list_security_groups(
        &self,
        f: &SecurityGroupFilter,
    ) -> Result<Vec<SecurityGroup>, CloudError> {
        self.list(
            "security_group.list",
            "security-groups",
            "security_groups",
            f.to_query(),
        )
        .await
    }

    pub async fn delete_security_group(&self, id: &str) -> Result<(), CloudError> {
        self.delete("security_group.delete", format!("security-groups/{id}"))
            .await
    }

    pub async fn create_security_group_rule(
        &self,
        req: &SecurityGroupRuleCreate,
    ) -> Result<SecurityGroupRule, CloudError> {
        let r = ApiRequest::post(
            SVC,
            "security_group_rule.create",
            "security-group-rules",
            body("security_group_rule", req)?,
        );
        fetch(self.session, r, "security_group_rule").await
    }

    /// The rules of one group.
    pub async fn list_security_group_rules(
        &self,
        security_group_id: &str,
    ) -> Result<Vec<SecurityGroupRule>, CloudError> {
        self.list(
            "security_group_rule.list",
            "security-group-rules",
            "security_group_rules",
            vec![("security_group_id".into(), security_group_id.into())],
        )
        .await
    }

    pub async fn delete_security_group_rule(&self, id: &str) -> Result<(), CloudError> {
        self.delete(
            "security_group_rule.delete",
            format!("security-group-rules/{id}"),
        )
        .await
    }

    // ------------------------------------------------------------ floating IPs

    pub async fn create_floating_ip(
        &self,
        req: &FloatingIpCreate,
    ) -> Result<FloatingIp, CloudError> {
        self.create(
            "floating_ip.create",
            TaggedKind::FloatingIp,
            "floatingip",
            req,
            &req.tags,
        )
        .await
    }

    pub async fn get_floating_ip(&self, id: &str) -> Result<Option<FloatingIp>, CloudError> {
        self.get("floating_ip.get", format!("floatingips/{id}"), "floatingip")
            .await
    }

    pub async fn list_floating_ips(
        &self,
        f: &FloatingIpFilter,
    ) -> Result<Vec<FloatingIp>, CloudError> {
        self.list(
            "floating_ip.list",
            "floatingips",
            "floatingips",
            f.to_query(),
        )
        .await
    }

    /// Points the floating IP at a port (and one of its fixed IPs, when it has several).
    ///
    /// Errors: 404 (`ApiErrorKind::NotFound`, `ExternalGatewayForFloatingIPNotFound`) when no router
    /// connects the port's subnet to the floating IP's network.
    pub async fn associate_floating_ip(
        &self,
        id: &str,
        port_id: &str,
        fixed_ip: Option<&str>,
    ) -> Result<FloatingIp, CloudError> {
        let mut fip = json!({"port_id": port_id});
        if let Some(ip) = fixed_ip {
            fip["fixed_ip_address"] = json!(ip);
        }
        let r = ApiRequest::put(
            SVC,
            "floating_ip.associate",
            format!("floatingips/{id}"),
            json!({"floatingip": fip}),
        );
        fetch(self.session, r, "floatingip").await
    }

    pub async fn disassociate_floating_ip(&self, id: &str) -> Result<FloatingIp, CloudError> {
        let r = ApiRequest::put(
            SVC,
            "floating_ip.disassociate",
            format!("floatingips/{id}"),
            json!({"floatingip": {"port_id": null}}),
        );
        fetch(self.session, r, "floatingip").await
    }

    pub async fn delete_floating_ip(&self, id: &str) -> Result<(), CloudError> {
        self.delete("floating_ip.delete", format!("floatingips/{id}"))
            .await
    }

    // ------------------------------------------------------------ quotas

    /// Limits and usage of the session's project.
    pub async fn quotas(&self) -> Result<NetworkQuotas, CloudError> {
        let r = ApiRequest::get(
            SVC,
            "quota.details",
            format!("quotas/{}/details", self.session.project_id()),
        );
        fetch(self.session, r, "quota").await
    }
}
