//! Observe: what the cloud holds for a cluster, matched to logical ids, in a number of API calls that does
//! not depend on the cluster's size.
//!
//! One list call per resource type. Nova, Octavia and Cinder take kos's tags (metadata) atomically on
//! create, so their lists are filtered by the cluster tag. Neutron resources are tagged *after* create
//! (real Neutron drops tags on single POSTs), so a crash in between leaves an untagged object that only its
//! deterministic name identifies: Neutron lists are therefore read whole and filtered here, by tag or by
//! the `kos-<cluster>-` name. Keypairs, server groups and application credentials have no tags: the name
//! is their identity.

use std::collections::{BTreeMap, BTreeSet};

use futures::try_join;
use kos_cloud::model::TagQuery;
use kos_cloud::model::block_storage::{Snapshot, SnapshotFilter, Volume, VolumeFilter};
use kos_cloud::model::compute::{Keypair, Server, ServerGroup, ServerStatus};
use kos_cloud::model::identity::ApplicationCredential;
use kos_cloud::model::load_balancer::{
    HealthMonitor, Listener, LoadBalancer, LoadBalancerFilter, Pool, ProvisioningStatus,
};
use kos_cloud::model::network::{
    FloatingIp, FloatingIpFilter, Network, NetworkFilter, Port, PortFilter, Router, RouterFilter,
    SecurityGroup, SecurityGroupFilter, Subnet, SubnetFilter,
};
use kos_cloud::{CloudError, Session};
use serde::Serialize;

use crate::graph::Kind;
use crate::names::{TAG_CLUSTER, TAG_ID};

/// Metadata key the Cinder CSI driver puts on the volumes and snapshots it makes.
pub const CSI_CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";
/// Device owner of router interface ports.
pub(crate) const ROUTER_INTERFACE: &str = "network:router_interface";

/// A router's first IPv4 external gateway address: where it SNATs its internal traffic to.
pub(crate) fn router_gateway_ip(r: &Router) -> Option<String> {
    r.external_gateway_info
        .as_ref()?
        .external_fixed_ips
        .iter()
        .find(|f| !f.ip_address.contains(':'))
        .map(|f| f.ip_address.clone())
}

/// One cloud object, as observed.
#[derive(Debug, Clone, Serialize)]
pub struct Resource {
    pub kind: Kind,
    /// The kos logical id (for run-time objects of the cluster: a description such as `ccm-lb`).
    pub logical_id: String,
    /// The cloud's id (the name, for keypairs).
    pub id: String,
    pub name: String,
    /// Carries kos's tags; `false`: found by its deterministic name only (a crash between create and tag).
    pub tagged: bool,
    /// The cloud's status word, when it has one.
    pub state: String,
    /// In a failure state (server/LB ERROR, volume error): to be replaced.
    pub failed: bool,
    pub facts: Facts,
}

/// What plan and apply compare or need, per kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Facts {
    /// Floating IP address, a port's first fixed IP, an LB's VIP.
    pub address: Option<String>,
    /// The port a floating IP points at; an LB's VIP port.
    pub port_id: Option<String>,
    /// The server a port is bound to; the router of a router interface.
    pub device_id: Option<String>,
    pub subnet_id: Option<String>,
    pub network_id: Option<String>,
    /// Nova's fault message of a server in ERROR.
    pub fault: Option<String>,
    pub allowed_cidrs: Vec<String>,
    /// A pool's member addresses; a server group's member servers.
    pub members: Vec<String>,
    pub address_pairs: Vec<String>,
    pub security_groups: Vec<String>,
    /// A port's groups that are not this cluster's (the CCM's `lb-sg-…` opening NodePorts to a
    /// Service's load balancer, or an operator's): kos leaves them where they are.
    pub foreign_security_groups: Vec<String>,
    /// Ingress rules (egress is never managed).
    pub rules: Vec<ObservedRule>,
    pub tags: Vec<String>,
    /// What a server was made of (a volume: its size, type and image): what a replacement changes.
    pub machine: Option<MachineFacts>,
    /// A subnet's DNS servers.
    pub dns_servers: Vec<String>,
    /// A server group's policy (Nova cannot change it).
    pub policy: Option<String>,
    /// When an application credential expires (RFC 3339); `None`: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// An application credential's roles.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

/// A server's flavor, image, zone and key, or a boot volume's size, type and image, as the cloud
/// reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MachineFacts {
    /// The flavor's name (Nova reports a server's flavor by name since 2.47).
    pub flavor: Option<String>,
    /// A server's image (none when it boots from a volume), a volume's source image.
    pub image_id: Option<String>,
    pub availability_zone: Option<String>,
    pub key_name: Option<String>,
    pub size_gb: Option<u64>,
    pub volume_type: Option<String>,
    /// When Nova made the server (RFC 3339).
    pub created: Option<String>,
}

/// A security group rule as Neutron reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObservedRule {
    pub id: String,
    pub ethertype: String,
    pub protocol: Option<String>,
    pub ports: Option<(u16, u16)>,
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
}

/// Everything observed for one cluster, by logical id (several entries for one id are duplicates).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Observed {
    pub cluster: String,
    pub resources: BTreeMap<String, Vec<Resource>>,
    /// When it was observed (Unix seconds): what certificate lifetimes are measured against.
    pub at_unix: Option<i64>,
}

impl Observed {
    /// The resources seen for a logical id.
    #[must_use]
    pub fn get(&self, logical_id: &str) -> &[Resource] {
        self.resources.get(logical_id).map_or(&[], Vec::as_slice)
    }

    /// Every resource, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = &Resource> {
        self.resources.values().flatten()
    }

    /// Logical ids with more than one resource.
    pub fn duplicates(&self) -> impl Iterator<Item = (&str, &[Resource])> {
        self.resources
            .iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(k, v)| (k.as_str(), v.as_slice()))
    }
}

/// Lists what the cloud holds for `cluster`: one call per resource type (plus one for the API pool's
/// members), whatever the cluster's size.
///
/// # Errors
/// The first list call that failed (after the session's retries).
pub async fn observe(session: &Session, cluster: &str) -> Result<Observed, CloudError> {
    observe_listed(session, cluster).await.map(|(o, _)| o)
}

/// The lists an [`observe`] made that preflight asks for too (the project's networks, subnets,
/// routers, ports, security groups, floating IPs and server groups, the cluster's servers): a
/// run that looks with both ([`crate::preflight::preflight_listed`]) lists each type once.
#[derive(Debug, Clone)]
pub struct Listed {
    pub(crate) cluster: String,
    pub(crate) networks: Vec<Network>,
    pub(crate) subnets: Vec<Subnet>,
    pub(crate) routers: Vec<Router>,
    pub(crate) ports: Vec<Port>,
    /// All the project's (preflight keeps the cluster's).
    pub(crate) security_groups: Vec<SecurityGroup>,
    /// All the project's (preflight keeps the cluster's).
    pub(crate) floating_ips: Vec<FloatingIp>,
    /// The cluster's (by its tag).
    pub(crate) servers: Vec<Server>,
    pub(crate) server_groups: Vec<ServerGroup>,
}

/// [`observe`], with the lists it made.
///
/// # Errors
/// The first list call that failed (after the session's retries).
pub async fn observe_listed(
    session: &Session,
    cluster: &str,
) -> Result<(Observed, Listed), CloudError> {
    let inv = Inventory::fetch(session, Scope::Cluster(cluster)).await?;
    let mut observed = inv.classify(cluster);
    // Measured against what Nova stamped: the cloud's clock, as its answers just showed it.
    if let Some(now) = session.pace().now_unix() {
        observed.at_unix = Some(now);
    }
    let listed = Listed {
        cluster: cluster.to_owned(),
        networks: inv.networks,
        subnets: inv.subnets,
        routers: inv.routers,
        ports: inv.ports,
        security_groups: inv.security_groups,
        floating_ips: inv.floating_ips,
        servers: inv.servers,
        server_groups: inv.server_groups,
    };
    Ok((members(session, observed).await?, listed))
}

/// `observed` with its API pool's members.
async fn members(session: &Session, mut observed: Observed) -> Result<Observed, CloudError> {
    // Members have no tags and hang off the pool: one call for the (one) API pool.
    let pools: Vec<(String, String)> = observed
        .all()
        .filter(|r| r.kind == Kind::Pool)
        .map(|r| (r.logical_id.clone(), r.id.clone()))
        .collect();
    let mut seen = BTreeSet::new();
    for (logical, pool_id) in pools {
        let members_id = logical.replace("-pool", "-members");
        if !seen.insert(members_id.clone()) {
            continue;
        }
        let members = session.load_balancer().list_members(&pool_id).await?;
        let mut addresses: Vec<String> = members.into_iter().map(|m| m.address).collect();
        addresses.sort();
        observed.push(Resource {
            kind: Kind::Members,
            logical_id: members_id,
            id: pool_id,
            name: String::new(),
            tagged: true,
            state: String::new(),
            failed: false,
            facts: Facts {
                members: addresses,
                ..Facts::default()
            },
        });
    }
    Ok(observed)
}

impl Observed {
    pub(crate) fn push(&mut self, r: Resource) {
        self.resources
            .entry(r.logical_id.clone())
            .or_default()
            .push(r);
    }
}

/// Which objects to list: one cluster's (tag-filtered where the service allows) or the whole project's.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    Cluster(&'a str),
    All,
}

/// The raw lists, one per resource type.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    pub networks: Vec<Network>,
    pub subnets: Vec<Subnet>,
    pub routers: Vec<Router>,
    pub ports: Vec<Port>,
    pub security_groups: Vec<SecurityGroup>,
    pub floating_ips: Vec<FloatingIp>,
    pub servers: Vec<Server>,
    pub volumes: Vec<Volume>,
    /// The project's (teardown and gc: the CSI driver's); none listed for one cluster's observe, as
    /// kos itself makes no snapshot.
    pub snapshots: Vec<Snapshot>,
    pub load_balancers: Vec<LoadBalancer>,
    pub listeners: Vec<Listener>,
    pub pools: Vec<Pool>,
    pub monitors: Vec<HealthMonitor>,
    pub keypairs: Vec<Keypair>,
    pub server_groups: Vec<ServerGroup>,
    pub app_credentials: Vec<ApplicationCredential>,
}

impl Inventory {
    pub(crate) async fn fetch(session: &Session, scope: Scope<'_>) -> Result<Self, CloudError> {
        let tags = match scope {
            Scope::Cluster(c) => TagQuery::all([format!("{TAG_CLUSTER}={c}")]),
            Scope::All => TagQuery::default(),
        };
        let volume_filter = match scope {
            Scope::Cluster(c) => VolumeFilter {
                metadata: BTreeMap::from([(TAG_CLUSTER.to_owned(), c.to_owned())]),
                ..VolumeFilter::default()
            },
            Scope::All => VolumeFilter::default(),
        };
        let (net, lb, compute, volumes_api, identity) = (
            session.network(),
            session.load_balancer(),
            session.compute(),
            session.block_storage(),
            session.identity(),
        );
        let (nf, sf, rf, pf, gf, ff) = (
            NetworkFilter::default(),
            SubnetFilter::default(),
            RouterFilter::default(),
            PortFilter::default(),
            SecurityGroupFilter::default(),
            FloatingIpFilter::default(),
        );
        let lb_filter = LoadBalancerFilter {
            tags: tags.clone(),
            ..LoadBalancerFilter::default()
        };
        let (networks, subnets, routers, ports, security_groups, floating_ips) = try_join!(
            net.list_networks(&nf),
            net.list_subnets(&sf),
            net.list_routers(&rf),
            net.list_ports(&pf),
            net.list_security_groups(&gf),
            net.list_floating_ips(&ff),
        )?;
        let (servers, volumes, load_balancers, listeners, pools, monitors) = try_join!(
            compute.list_servers(&tags),
            volumes_api.list_volumes(&volume_filter),
            lb.list_load_balancers(&lb_filter),
            lb.list_listeners_tagged(&tags),
            lb.list_pools_tagged(&tags),
            lb.list_health_monitors(&tags),
        )?;
        let snapshots = async {
            match scope {
                Scope::All => volumes_api.list_snapshots(&SnapshotFilter::default()).await,
                Scope::Cluster(_) => Ok(Vec::new()),
            }
        };
        let (keypairs, server_groups, app_credentials, snapshots) = try_join!(
            compute.list_keypairs(),
            compute.list_server_groups(),
            // All of the user's: the CCM's alternates between two names (`kos rotate credential`).
            identity.list_application_credentials(None),
            snapshots,
        )?;
        Ok(Inventory {
            networks,
            subnets,
            routers,
            ports,
            security_groups,
            floating_ips,
            servers,
            volumes,
            snapshots,
            load_balancers,
            listeners,
            pools,
            monitors,
            keypairs,
            server_groups,
            app_credentials,
        })
    }

    /// Every cluster named by a `kos-cluster` tag (or kos's volume metadata) in the lists.
    pub(crate) fn clusters(&self) -> BTreeSet<String> {
        let of = |tags: &[String]| -> Option<String> {
            tags.iter()
                .find_map(|t| t.strip_prefix(TAG_CLUSTER)?.strip_prefix('='))
                .map(str::to_owned)
        };
        let neutron = (self.networks.iter().map(|x| &x.tags))
            .chain(self.subnets.iter().map(|x| &x.tags))
            .chain(self.routers.iter().map(|x| &x.tags))
            .chain(self.ports.iter().map(|x| &x.tags))
            .chain(self.security_groups.iter().map(|x| &x.tags))
            .chain(self.floating_ips.iter().map(|x| &x.tags));
        let others = (self.servers.iter().map(|x| &x.tags))
            .chain(self.load_balancers.iter().map(|x| &x.tags));
        neutron
            .chain(others)
            .filter_map(|t| of(t))
            .chain(
                self.volumes
                    .iter()
                    .filter_map(|v| v.metadata.get(TAG_CLUSTER).cloned()),
            )
            .collect()
    }

    /// The resources of `cluster`, matched to logical ids.
    pub(crate) fn classify(&self, cluster: &str) -> Observed {
        let known = self.clusters();
        let m = Matcher::new(cluster, known.iter().map(String::as_str));
        let networks: BTreeSet<&String> = self
            .networks
            .iter()
            .filter(|x| m.neutron(Kind::Network, &x.tags, &x.name).is_some())
            .map(|x| &x.id)
            .collect();
        let mut o = Observed {
            cluster: cluster.to_owned(),
            at_unix: Some(time::OffsetDateTime::now_utc().unix_timestamp()),
            ..Observed::default()
        };
        let mut add = |kind,
                       (logical, tagged): (String, bool),
                       id: &str,
                       name: &str,
                       state: String,
                       failed,
                       facts| {
            o.push(Resource {
                kind,
                logical_id: logical,
                id: id.to_owned(),
                name: name.to_owned(),
                tagged,
                state,
                failed,
                facts,
            });
        };
        for x in &self.networks {
            if let Some(l) = m.neutron(Kind::Network, &x.tags, &x.name) {
                add(
                    Kind::Network,
                    l,
                    &x.id,
                    &x.name,
                    x.status.clone(),
                    false,
                    tags_only(&x.tags),
                );
            }
        }
        for x in &self.subnets {
            if let Some(l) = m.neutron(Kind::Subnet, &x.tags, &x.name) {
                let facts = Facts {
                    network_id: Some(x.network_id.clone()),
                    address: Some(x.cidr.clone()),
                    dns_servers: x.dns_nameservers.clone(),
                    ..tags_only(&x.tags)
                };
                add(Kind::Subnet, l, &x.id, &x.name, String::new(), false, facts);
            }
        }
        for x in &self.routers {
            if let Some(l) = m.neutron(Kind::Router, &x.tags, &x.name) {
                let facts = Facts {
                    network_id: x
                        .external_gateway_info
                        .as_ref()
                        .map(|g| g.network_id.clone()),
                    address: router_gateway_ip(x),
                    ..tags_only(&x.tags)
                };
                add(
                    Kind::Router,
                    l,
                    &x.id,
                    &x.name,
                    x.status.clone(),
                    false,
                    facts,
                );
            }
        }
        // This cluster's security groups: any other group on its ports is someone else's to manage.
        let ours: BTreeSet<&str> = self
            .security_groups
            .iter()
            .filter(|x| m.neutron(Kind::SecurityGroup, &x.tags, &x.name).is_some())
            .map(|x| x.id.as_str())
            .collect();
        for x in &self.ports {
            let kind = if x.device_owner == ROUTER_INTERFACE {
                Kind::RouterInterface
            } else {
                Kind::Port
            };
            let Some((logical, tagged)) = m.neutron(kind, &x.tags, &x.name) else {
                continue;
            };
            // Found by name only: it must be on the cluster's network when the cluster has one (one more
            // guard against a name that another cluster's objects could also have).
            if !tagged && !networks.is_empty() && !networks.contains(&x.network_id) {
                continue;
            }
            let mut sgs = x.security_groups.clone();
            sgs.sort();
            let foreign: Vec<String> = sgs
                .iter()
                .filter(|g| !ours.contains(g.as_str()))
                .cloned()
                .collect();
            let mut pairs: Vec<String> = x
                .allowed_address_pairs
                .iter()
                .map(|p| p.ip_address.clone())
                .collect();
            pairs.sort();
            let facts = Facts {
                address: x.fixed_ips.first().map(|f| f.ip_address.clone()),
                subnet_id: x.fixed_ips.first().map(|f| f.subnet_id.clone()),
                network_id: Some(x.network_id.clone()),
                device_id: (!x.device_id.is_empty()).then(|| x.device_id.clone()),
                address_pairs: pairs,
                security_groups: sgs,
                foreign_security_groups: foreign,
                ..tags_only(&x.tags)
            };
            add(
                kind,
                (logical, tagged),
                &x.id,
                &x.name,
                x.status.clone(),
                false,
                facts,
            );
        }
        for x in &self.security_groups {
            let Some((logical, tagged)) = m.neutron(Kind::SecurityGroup, &x.tags, &x.name) else {
                continue;
            };
            let rules: Vec<ObservedRule> = x
                .security_group_rules
                .iter()
                .filter(|r| r.direction == "ingress")
                .map(|r| ObservedRule {
                    id: r.id.clone(),
                    ethertype: r.ethertype.clone(),
                    protocol: r.protocol.clone(),
                    ports: r.port_range_min.zip(r.port_range_max),
                    remote_ip_prefix: r.remote_ip_prefix.clone(),
                    remote_group_id: r.remote_group_id.clone(),
                })
                .collect();
            if let Some(suffix) = logical.strip_prefix("sg-") {
                add(
                    Kind::SecurityGroupRules,
                    (format!("sgr-{suffix}"), true),
                    &x.id,
                    &x.name,
                    String::new(),
                    false,
                    Facts {
                        rules,
                        ..Facts::default()
                    },
                );
            }
            add(
                Kind::SecurityGroup,
                (logical, tagged),
                &x.id,
                &x.name,
                String::new(),
                false,
                tags_only(&x.tags),
            );
        }
        for x in &self.floating_ips {
            let Some((logical, tagged)) = m.neutron(Kind::FloatingIp, &x.tags, &x.description)
            else {
                continue;
            };
            if let Some(port) = &x.port_id
                && logical == "api-fip"
            {
                add(
                    Kind::FloatingIpAssociation,
                    ("fip-assoc".into(), true),
                    &x.id,
                    &x.description,
                    x.status.clone(),
                    false,
                    Facts {
                        port_id: Some(port.clone()),
                        ..Facts::default()
                    },
                );
            }
            let facts = Facts {
                address: Some(x.floating_ip_address.clone()),
                port_id: x.port_id.clone(),
                ..tags_only(&x.tags)
            };
            add(
                Kind::FloatingIp,
                (logical, tagged),
                &x.id,
                &x.description,
                x.status.clone(),
                false,
                facts,
            );
        }
        for x in &self.servers {
            if let Some(l) = m.tagged(&x.tags) {
                let facts = Facts {
                    fault: x.fault.as_ref().map(|f| f.message.clone()),
                    machine: Some(MachineFacts {
                        flavor: x.flavor.original_name.clone(),
                        image_id: x.image_id.clone(),
                        availability_zone: x.availability_zone.clone().filter(|z| !z.is_empty()),
                        key_name: x.key_name.clone(),
                        created: x.created.clone(),
                        ..MachineFacts::default()
                    }),
                    ..tags_only(&x.tags)
                };
                let failed = x.status == ServerStatus::Error;
                add(
                    Kind::Server,
                    l,
                    &x.id,
                    &x.name,
                    x.status.to_string(),
                    failed,
                    facts,
                );
            }
        }
        for x in &self.volumes {
            if x.metadata.get(TAG_CLUSTER).map(String::as_str) != Some(cluster) {
                continue;
            }
            if let Some(id) = x.metadata.get(TAG_ID) {
                add(
                    Kind::Volume,
                    (id.clone(), true),
                    &x.id,
                    &x.name,
                    x.status.to_string(),
                    x.status.is_error(),
                    Facts {
                        machine: Some(MachineFacts {
                            image_id: x.image_id().map(str::to_owned),
                            availability_zone: x.availability_zone.clone(),
                            size_gb: Some(x.size),
                            volume_type: x.volume_type.clone(),
                            ..MachineFacts::default()
                        }),
                        ..Facts::default()
                    },
                );
            }
        }
        for x in &self.load_balancers {
            if let Some(l) = m.tagged(&x.tags) {
                let facts = Facts {
                    address: x.vip_address.clone(),
                    port_id: x.vip_port_id.clone(),
                    ..tags_only(&x.tags)
                };
                let failed = x.provisioning_status == ProvisioningStatus::Error;
                add(
                    Kind::LoadBalancer,
                    l,
                    &x.id,
                    &x.name,
                    x.provisioning_status.to_string(),
                    failed,
                    facts,
                );
            }
        }
        for x in &self.listeners {
            if let Some(l) = m.tagged(&x.tags) {
                let mut cidrs = x.allowed_cidrs.clone();
                cidrs.sort();
                let facts = Facts {
                    allowed_cidrs: cidrs,
                    ..tags_only(&x.tags)
                };
                add(
                    Kind::Listener,
                    l,
                    &x.id,
                    &x.name,
                    x.provisioning_status.to_string(),
                    false,
                    facts,
                );
            }
        }
        for x in &self.pools {
            if let Some(l) = m.tagged(&x.tags) {
                add(
                    Kind::Pool,
                    l,
                    &x.id,
                    &x.name,
                    x.provisioning_status.to_string(),
                    false,
                    tags_only(&x.tags),
                );
            }
        }
        for x in &self.monitors {
            if let Some(l) = m.tagged(&x.tags) {
                add(
                    Kind::HealthMonitor,
                    l,
                    &x.id,
                    &x.name,
                    x.provisioning_status.to_string(),
                    false,
                    tags_only(&x.tags),
                );
            }
        }
        for x in &self.keypairs {
            if let Some(l) = m.by_name(Kind::Keypair, &x.name) {
                add(
                    Kind::Keypair,
                    (l, true),
                    &x.name,
                    &x.name,
                    String::new(),
                    false,
                    Facts::default(),
                );
            }
        }
        for x in &self.server_groups {
            if let Some(l) = m.by_name(Kind::ServerGroup, &x.name) {
                add(
                    Kind::ServerGroup,
                    (l, true),
                    &x.id,
                    &x.name,
                    String::new(),
                    false,
                    Facts {
                        // Empty from a Nova that did not say: not taken for a change.
                        policy: Some(x.policy.as_str().to_owned()).filter(|p| !p.is_empty()),
                        members: x.members.clone(),
                        ..Facts::default()
                    },
                );
            }
        }
        for x in &self.app_credentials {
            if m.by_name(Kind::AppCredential, &x.name).is_some() {
                add(
                    Kind::AppCredential,
                    ("appcred-ccm".into(), true),
                    &x.id,
                    &x.name,
                    String::new(),
                    false,
                    Facts {
                        expires_at: x
                            .expires()
                            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                        roles: x.roles.iter().filter_map(|r| r.name.clone()).collect(),
                        ..Facts::default()
                    },
                );
            }
        }
        o
    }
}

fn tags_only(tags: &[String]) -> Facts {
    Facts {
        tags: tags.to_vec(),
        ..Facts::default()
    }
}

/// Tells which objects belong to a cluster and under which logical id.
pub(crate) struct Matcher {
    cluster_tag: String,
    prefix: String,
    /// `kos-<other>-` of the other clusters seen whose names extend this one's (`demo-b` for `demo`): their
    /// objects' names start with this cluster's prefix too.
    shadowed: Vec<String>,
}

impl Matcher {
    /// `known`: every cluster seen in the project (only those that extend `cluster` matter).
    pub(crate) fn new<'a>(cluster: &str, known: impl IntoIterator<Item = &'a str>) -> Self {
        let prefix = format!("kos-{cluster}-");
        let shadowed = known
            .into_iter()
            .filter(|other| other.starts_with(&prefix[4..]))
            .map(|other| format!("kos-{other}-"))
            .collect();
        Matcher {
            cluster_tag: format!("{TAG_CLUSTER}={cluster}"),
            prefix,
            shadowed,
        }
    }

    /// By the `kos-id` tag on an object tagged for the cluster.
    pub(crate) fn tagged(&self, tags: &[String]) -> Option<(String, bool)> {
        if !tags.contains(&self.cluster_tag) {
            return None;
        }
        tags.iter()
            .find_map(|t| t.strip_prefix(TAG_ID)?.strip_prefix('='))
            .map(|id| (id.to_owned(), true))
    }

    /// Tagged, or untagged (no kos tag at all) with the cluster's deterministic name for `kind`.
    pub(crate) fn neutron(
        &self,
        kind: Kind,
        tags: &[String],
        name: &str,
    ) -> Option<(String, bool)> {
        if let Some(t) = self.tagged(tags) {
            return Some(t);
        }
        let foreign = tags.iter().any(|t| {
            t.strip_prefix(TAG_CLUSTER)
                .or_else(|| t.strip_prefix(TAG_ID))
                .is_some_and(|rest| rest.starts_with('='))
        });
        if foreign {
            return None;
        }
        self.by_name(kind, name).map(|l| (l, false))
    }

    /// `kos-<cluster>-<id>` → `<id>`, when `<id>` is a logical id of `kind` ([`Kind::fits`]) and the name is
    /// not that of a cluster whose name extends this one's.
    pub(crate) fn by_name(&self, kind: Kind, name: &str) -> Option<String> {
        let rest = name.strip_prefix(&self.prefix)?;
        if self.shadowed.iter().any(|p| name.starts_with(p.as_str())) {
            return None;
        }
        // The app credential is named `kos-<cluster>-ccm`, what operators look for in Keystone, or
        // `kos-<cluster>-ccm-b`: rotation alternates between the two, as names are unique per user.
        let id = match (kind, rest) {
            (Kind::AppCredential, "ccm" | "ccm-b") => "appcred-ccm",
            _ => rest,
        };
        kind.fits(id).then(|| id.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_cluster_whose_name_extends_this_one_never_match() {
        let demo = Matcher::new("demo", ["demo", "demo-b", "demo-port-x"]);
        for (kind, name) in [
            (Kind::Network, "kos-demo-b-network"),
            (Kind::SecurityGroup, "kos-demo-b-sg-node"),
            (Kind::Port, "kos-demo-b-port-workers-0"),
            (Kind::ServerGroup, "kos-demo-b-sgroup-cp"),
            (Kind::Keypair, "kos-demo-b-keypair"),
            (Kind::AppCredential, "kos-demo-b-ccm"),
            (Kind::AppCredential, "kos-demo-b-ccm-b"),
            (Kind::AppCredential, "kos-demo-ccm-c"),
            // Fits `port-<pool>-<n>` for a pool `x-port-cp`, but cluster `demo-port-x` exists.
            (Kind::Port, "kos-demo-port-x-port-cp-0"),
            // Right shape, wrong kind.
            (Kind::Network, "kos-demo-subnet"),
            (Kind::Port, "kos-demo-port-workers"),
        ] {
            assert_eq!(demo.by_name(kind, name), None, "{name}");
        }
        for (kind, name, id) in [
            (Kind::Network, "kos-demo-network", "network"),
            (Kind::Port, "kos-demo-port-b-0", "port-b-0"),
            (
                Kind::ServerGroup,
                "kos-demo-sgroup-workers",
                "sgroup-workers",
            ),
            (Kind::AppCredential, "kos-demo-ccm", "appcred-ccm"),
            (Kind::AppCredential, "kos-demo-ccm-b", "appcred-ccm"),
        ] {
            assert_eq!(demo.by_name(kind, name).as_deref(), Some(id), "{name}");
        }
        let longer = Matcher::new("demo-b", ["demo"]);
        assert_eq!(longer.by_name(Kind::Port, "kos-demo-port-b-0"), None);
        assert_eq!(
            longer
                .by_name(Kind::Network, "kos-demo-b-network")
                .as_deref(),
            Some("network")
        );
    }

    #[test]
    fn foreign_tags_win_over_a_matching_name() {
        let demo = Matcher::new("demo", []);
        let other = vec!["kos-cluster=demo-b".to_owned()];
        assert_eq!(
            demo.neutron(Kind::Network, &other, "kos-demo-network"),
            None
        );
        let mine = vec!["kos-cluster=demo".to_owned(), "kos-id=network".to_owned()];
        assert_eq!(
            demo.neutron(Kind::Network, &mine, "whatever"),
            Some(("network".to_owned(), true))
        );
        assert_eq!(
            demo.neutron(Kind::Network, &[], "kos-demo-network"),
            Some(("network".to_owned(), false))
        );
    }
}
