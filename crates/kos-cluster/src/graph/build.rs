//! [`desired`]: the spec and preflight's resolutions turned into nodes and edges (research/deployers.md §2).

use super::{
    ApiSource, AssocTarget, Desired, DesiredGraph, GraphError, Kind, Node, ServerSpec, rules,
};
use crate::bootstrap::{Formation, NodeRole};
use crate::names::{ClusterName, cluster_tag, id_tag, resource_name};
use crate::resolved::{Resolved, ResolvedMachine, ResolvedNetwork};
use crate::spec::{ClusterSpec, EndpointKind, LbProvider, ServerGroupPolicy};

/// The API load balancer's VIP port, when kos makes it ([`ApiVip::Kos`]).
pub const VIP_PORT: &str = "api-vip-port";

/// Which servers the graph holds, by index: `cp-0` … `cp-{count-1}` and `<pool>-0` … for a new
/// cluster, and for a running one what exists, less those leaving, plus those joining (a replacement's
/// successor joins under a fresh index before its predecessor leaves: kos-lifecycle decides, from what
/// the cloud shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slots {
    /// Ascending, never empty.
    control_plane: Vec<u32>,
    /// Ascending, by pool name; a pool not listed has `0 … count-1`.
    pools: std::collections::BTreeMap<String, Vec<u32>>,
    /// Who made the API load balancer's VIP port.
    api_vip: ApiVip,
}

/// Who makes the API load balancer's VIP port, when a floating IP points at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApiVip {
    /// kos (`api-vip-port`), before the load balancer: the floating IP is created on it, so it is
    /// never free for anyone to take while Octavia builds the load balancer.
    #[default]
    Kos,
    /// Octavia, as kos made it before: a running cluster's load balancer keeps its VIP (changing it
    /// would change the API's address), and its floating IP is associated once the LB is ACTIVE.
    Octavia,
}

impl Slots {
    /// `0 … count-1` of each group: a new cluster's.
    #[must_use]
    pub fn counted(spec: &ClusterSpec) -> Slots {
        Slots::control_planes(0..spec.control_plane.count.get())
    }

    /// These control-plane indexes, sorted and deduplicated (none: `cp-0` alone, as a cluster has at
    /// least one); every pool `0 … count-1`.
    #[must_use]
    pub fn control_planes(indexes: impl IntoIterator<Item = u32>) -> Slots {
        let mut control_plane = sorted(indexes);
        if control_plane.is_empty() {
            control_plane.push(0);
        }
        Slots {
            control_plane,
            pools: std::collections::BTreeMap::new(),
            api_vip: ApiVip::default(),
        }
    }

    /// With the API load balancer's VIP port made by `who` (what the cloud shows decides).
    #[must_use]
    pub fn with_api_vip(mut self, who: ApiVip) -> Slots {
        self.api_vip = who;
        self
    }

    /// With these indexes for pool `name`.
    #[must_use]
    pub fn with_pool(mut self, name: &str, indexes: impl IntoIterator<Item = u32>) -> Slots {
        self.pools.insert(name.to_owned(), sorted(indexes));
        self
    }

    /// The control-plane indexes, ascending.
    #[must_use]
    pub fn control_plane(&self) -> &[u32] {
        &self.control_plane
    }

    /// Pool `name`'s indexes, ascending (`0 … count-1` when not set).
    #[must_use]
    pub fn pool(&self, name: &str, count: u32) -> Vec<u32> {
        self.pools
            .get(name)
            .cloned()
            .unwrap_or_else(|| (0..count).collect())
    }
}

fn sorted(indexes: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = indexes.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Builds the desired graph of a new cluster (control planes `0 … count-1`): see [`desired_in`].
///
/// # Errors
/// As [`desired_in`].
pub fn desired(
    spec: &ClusterSpec,
    resolved: &Resolved,
    formation: Formation,
) -> Result<DesiredGraph, GraphError> {
    desired_in(spec, resolved, formation, &Slots::counted(spec))
}

/// Builds the desired graph of a cluster. No cloud call: everything comes from `spec`, `resolved`,
/// `formation` (whether a cluster exists, which decides if the first control plane runs `kubeadm init`
/// or joins) and `slots` (which control planes).
///
/// # Errors
/// A pool preflight did not resolve, or a graph that is not a DAG (a bug, or a pool named like a kos id).
pub fn desired_in(
    spec: &ClusterSpec,
    resolved: &Resolved,
    formation: Formation,
    slots: &Slots,
) -> Result<DesiredGraph, GraphError> {
    let mut b = Builder {
        cluster: &spec.name.value,
        extra_tags: spec.tags.iter().map(|t| t.as_str().to_owned()).collect(),
        kubernetes_version: spec.kubernetes_version.to_string(),
        nodes: Vec::new(),
        record: super::ClusterRecord {
            pod_cidr: spec.network.pod_cidr.value.to_string(),
            service_cidr: spec.network.service_cidr.value.to_string(),
            // A manifest of the user's is recorded by its checksum: kos applies it once, at init.
            cni: match &spec.addons.cni_manifest {
                None => spec.addons.cni.key().to_owned(),
                Some(m) => format!(
                    "{}+{}",
                    spec.addons.cni.key(),
                    m.sha256.get(..16).unwrap_or(&m.sha256)
                ),
            },
            ccm: match spec.addons.ccm {
                crate::spec::Ccm::Upstream => "upstream",
                crate::spec::Ccm::Kos { .. } => "kos",
            }
            .to_owned(),
            csi: spec.addons.csi.key().to_owned(),
            api_dns_name: spec
                .api_endpoint
                .dns_name
                .as_ref()
                .map_or_else(|| "-".to_owned(), |d| d.as_str().to_owned()),
        },
    };

    // Network: made by kos, or the user's own (external references, never touched).
    let public = spec.api_endpoint.public;
    let (subnet_cidr, routed, gateway) = match &resolved.network {
        ResolvedNetwork::Create { cidr, dns_servers } => {
            b.add("network", Kind::Network, Desired::Network, &[]);
            b.add(
                "subnet",
                Kind::Subnet,
                Desired::Subnet {
                    network: "network".into(),
                    cidr: cidr.to_string(),
                    dns_servers: dns_servers.iter().map(ToString::to_string).collect(),
                },
                &["network"],
            );
            b.add(
                "router",
                Kind::Router,
                Desired::Router {
                    external_network_id: resolved.external_network.id.clone(),
                },
                &[],
            );
            b.add(
                "router-if",
                Kind::RouterInterface,
                Desired::RouterInterface {
                    router: "router".into(),
                    subnet: "subnet".into(),
                },
                &["router", "subnet"],
            );
            let gateway = if public {
                rules::Gateway::Router("router".into())
            } else {
                rules::Gateway::NotUsed
            };
            (*cidr, true, gateway)
        }
        ResolvedNetwork::Existing {
            network_id,
            subnet_id,
            subnet_cidr,
            router_id,
            router_gateway,
        } => {
            b.external("network", Kind::Network, network_id);
            b.external("subnet", Kind::Subnet, subnet_id);
            if let Some(r) = router_id {
                b.external("router", Kind::Router, r);
            }
            let gateway = match (public, router_gateway) {
                (false, _) => rules::Gateway::NotUsed,
                (true, Some(ip)) => rules::Gateway::Address(ip.clone()),
                (true, None) => rules::Gateway::Unknown,
            };
            (*subnet_cidr, false, gateway)
        }
    };

    b.add(
        "sg-cp",
        Kind::SecurityGroup,
        Desired::SecurityGroup {
            description: format!("kos {}: control planes", b.cluster),
        },
        &[],
    );
    b.add(
        "sg-node",
        Kind::SecurityGroup,
        Desired::SecurityGroup {
            description: format!("kos {}: all nodes", b.cluster),
        },
        &[],
    );
    for (id, group, rules) in [
        (
            "sgr-cp",
            "sg-cp",
            rules::control_plane(spec, subnet_cidr, &gateway),
        ),
        ("sgr-node", "sg-node", rules::node(spec)),
    ] {
        let mut deps = vec!["sg-cp", "sg-node"];
        if rules
            .iter()
            .any(|r| matches!(r.remote, rules::Remote::RouterGateway(_)))
        {
            deps.push("router");
        }
        b.add(
            id,
            Kind::SecurityGroupRules,
            Desired::SecurityGroupRules {
                group: group.into(),
                rules,
            },
            &deps,
        );
    }
    if let Some(key) = &spec.ssh_public_key {
        b.add(
            "keypair",
            Kind::Keypair,
            Desired::Keypair {
                public_key: key.as_str().to_owned(),
            },
            &[],
        );
    }
    b.add(
        "appcred-ccm",
        Kind::AppCredential,
        Desired::AppCredential {
            roles: resolved.ccm_roles.clone(),
            lifetime_days: spec.addons.credential_lifetime_days(),
            access_rules: spec.addons.credential_access_rules,
        },
        &[],
    );
    if let Some(n) = b.nodes.last_mut() {
        // What operators look for in Keystone: `kos-<cluster>-ccm`.
        n.name = format!("kos-{}-ccm", b.cluster);
    }

    // The API endpoint. The floating IP is allocated before any server, so its address is known when
    // their user_data is rendered; it is created on the port it serves (a control plane's, or the
    // load balancer's VIP that kos makes first), so it is never free for another to take.
    let external_network_id = resolved.external_network.id.as_str();
    let cp_ports: Vec<String> = slots
        .control_plane
        .iter()
        .map(|i| format!("port-cp-{i}"))
        .collect();
    // A floating-IP endpoint is its one control plane's port (no surge there: validation).
    let first_port = cp_ports.first().cloned().unwrap_or_default();
    let api = match spec.api_endpoint.kind.value {
        EndpointKind::LoadBalancer { provider } => {
            let lb_provider = resolved
                .lb_provider
                .clone()
                .unwrap_or_else(|| provider.as_str().to_owned());
            // The OVN provider refuses listener allowed_cidrs (501) and keeps the clients' addresses:
            // there `sg-cp` alone admits `allowedCIDRs` and the nodes.
            let sources = if lb_provider == LbProvider::Ovn.as_str() {
                Vec::new()
            } else {
                rules::listener_sources(spec, subnet_cidr, &gateway)
            };
            let via_router = sources
                .iter()
                .any(|s| matches!(s, rules::Source::RouterGateway(_)));
            // A new load balancer is created with its listener, pool, monitor and members in one call
            // (apply/lb.rs): what they need must exist first.
            let mut lb_deps: Vec<&str> = vec!["subnet"];
            lb_deps.extend(cp_ports.iter().map(String::as_str));
            if via_router {
                lb_deps.push("router");
            }
            let own_vip = public && slots.api_vip == ApiVip::Kos;
            if own_vip {
                b.add(
                    VIP_PORT,
                    Kind::Port,
                    Desired::VipPort {
                        network: "network".into(),
                        subnet: "subnet".into(),
                    },
                    &["network", "subnet"],
                );
                lb_deps.push(VIP_PORT);
                b.api_fip(external_network_id, Some(VIP_PORT), routed);
            } else if public {
                b.api_fip(external_network_id, None, routed);
            }
            b.add(
                "api-lb",
                Kind::LoadBalancer,
                Desired::LoadBalancer {
                    subnet: "subnet".into(),
                    provider: Some(lb_provider),
                    vip_port: own_vip.then(|| VIP_PORT.to_owned()),
                },
                &lb_deps,
            );
            let mut deps = vec!["api-lb"];
            if via_router {
                deps.push("router");
            }
            b.add(
                "api-listener",
                Kind::Listener,
                Desired::Listener {
                    lb: "api-lb".into(),
                    port: 6443,
                    allowed_cidrs: sources,
                },
                &deps,
            );
            b.add(
                "api-pool",
                Kind::Pool,
                Desired::Pool {
                    lb: "api-lb".into(),
                    listener: "api-listener".into(),
                    ovn: provider == LbProvider::Ovn,
                },
                &["api-listener"],
            );
            b.add(
                "api-monitor",
                Kind::HealthMonitor,
                Desired::HealthMonitor {
                    lb: "api-lb".into(),
                    pool: "api-pool".into(),
                },
                &["api-pool"],
            );
            let mut deps: Vec<&str> = vec!["api-monitor"];
            deps.extend(cp_ports.iter().map(String::as_str));
            b.add(
                "api-members",
                Kind::Members,
                Desired::Members {
                    lb: "api-lb".into(),
                    pool: "api-pool".into(),
                    subnet: "subnet".into(),
                    ports: cp_ports.clone(),
                    port: 6443,
                },
                &deps,
            );
            if own_vip {
                b.assoc(AssocTarget::Port(VIP_PORT.into()), routed);
                ApiSource::FloatingIp("api-fip".into())
            } else if public {
                b.assoc(AssocTarget::LoadBalancerVip("api-lb".into()), routed);
                ApiSource::FloatingIp("api-fip".into())
            } else {
                ApiSource::LoadBalancerVip("api-lb".into())
            }
        }
        EndpointKind::FloatingIp => {
            if public {
                b.api_fip(external_network_id, Some(&first_port), routed);
                b.assoc(AssocTarget::Port(first_port), routed);
                ApiSource::FloatingIp("api-fip".into())
            } else {
                ApiSource::PortIp(first_port)
            }
        }
    };

    let pod_and_service = vec![
        spec.network.pod_cidr.to_string(),
        spec.network.service_cidr.to_string(),
    ];
    let cp = &spec.control_plane;
    let cp_group = b.server_group("sgroup-cp", cp.server_group_policy);
    for (k, &i) in slots.control_plane.iter().enumerate() {
        // Only a fresh cluster has an initializer; a re-created `cp-0` of a running one joins it.
        let role = if k == 0 && formation == Formation::Fresh {
            NodeRole::InitControlPlane
        } else {
            NodeRole::JoinControlPlane
        };
        b.machine(
            &Machine {
                prefix: "cp",
                index: i,
                resolved: &resolved.control_plane,
                security_groups: &["sg-cp", "sg-node"],
                address_pairs: &pod_and_service,
                server_group: cp_group.as_deref(),
                role,
                labels: Default::default(),
                taints: Vec::new(),
            },
            &api,
            spec.ssh_public_key.is_some(),
        );
    }
    for pool in &spec.node_pools {
        let name = pool.name.value.as_str();
        let r = resolved
            .pools
            .get(&pool.name.value)
            .ok_or_else(|| GraphError::UnresolvedPool(name.to_owned()))?;
        let group = b.server_group(&format!("sgroup-{name}"), pool.server_group_policy);
        for i in slots.pool(name, pool.count.value) {
            b.machine(
                &Machine {
                    prefix: name,
                    index: i,
                    resolved: r,
                    security_groups: &["sg-node"],
                    address_pairs: &pod_and_service,
                    server_group: group.as_deref(),
                    role: NodeRole::Worker {
                        pool: name.to_owned(),
                    },
                    labels: pool
                        .labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    taints: pool.taints.iter().map(ToString::to_string).collect(),
                },
                &api,
                spec.ssh_public_key.is_some(),
            );
        }
    }
    DesiredGraph::new(b.cluster.as_str(), b.nodes, api)
}

struct Builder<'a> {
    cluster: &'a ClusterName,
    extra_tags: Vec<String>,
    kubernetes_version: String,
    nodes: Vec<Node>,
    /// What the control planes record of the cluster.
    record: super::ClusterRecord,
}

struct Machine<'a> {
    prefix: &'a str,
    index: u32,
    resolved: &'a ResolvedMachine,
    security_groups: &'a [&'a str],
    address_pairs: &'a [String],
    server_group: Option<&'a str>,
    role: NodeRole,
    labels: std::collections::BTreeMap<String, String>,
    taints: Vec<String>,
}

impl Builder<'_> {
    fn add(&mut self, id: &str, kind: Kind, spec: Desired, deps: &[&str]) {
        let mut tags = vec![cluster_tag(self.cluster), id_tag(id)];
        tags.extend(self.extra_tags.iter().cloned());
        self.nodes.push(Node {
            id: id.to_owned(),
            kind,
            name: resource_name(self.cluster, id),
            tags,
            spec,
            deps: deps.iter().map(|d| (*d).to_owned()).collect(),
        });
    }

    fn external(&mut self, id: &str, kind: Kind, cloud_id: &str) {
        self.add(
            id,
            kind,
            Desired::External {
                id: cloud_id.to_owned(),
            },
            &[],
        );
    }

    /// The API floating IP, created on `port` (a logical id) when there is one: Neutron refuses a port
    /// whose subnet has no route to the external network, so a routed one waits for its interface.
    fn api_fip(&mut self, external_network_id: &str, port: Option<&str>, routed: bool) {
        let mut deps: Vec<&str> = port.into_iter().collect();
        if routed && port.is_some() {
            deps.push("router-if");
        }
        self.add(
            "api-fip",
            Kind::FloatingIp,
            Desired::FloatingIp {
                external_network_id: external_network_id.to_owned(),
                port: port.map(str::to_owned),
            },
            &deps,
        );
    }

    fn assoc(&mut self, target: AssocTarget, routed: bool) {
        let mut deps = vec!["api-fip"];
        deps.push(match &target {
            AssocTarget::Port(p) => p.as_str(),
            AssocTarget::LoadBalancerVip(lb) => lb.as_str(),
        });
        if routed {
            deps.push("router-if");
        }
        let deps: Vec<String> = deps.into_iter().map(str::to_owned).collect();
        let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
        self.add(
            "fip-assoc",
            Kind::FloatingIpAssociation,
            Desired::FloatingIpAssociation {
                fip: "api-fip".into(),
                target,
            },
            &deps,
        );
    }

    fn server_group(&mut self, id: &str, policy: ServerGroupPolicy) -> Option<String> {
        let policy = policy.nova_policy()?;
        self.add(id, Kind::ServerGroup, Desired::ServerGroup { policy }, &[]);
        Some(id.to_owned())
    }

    fn machine(&mut self, m: &Machine<'_>, api: &ApiSource, keypair: bool) {
        let host = format!("{}-{}", m.prefix, m.index);
        let port = format!("port-{host}");
        let az = (!m.resolved.availability_zones.is_empty()).then(|| {
            let n = m.resolved.availability_zones.len();
            m.resolved.availability_zones[m.index as usize % n].clone()
        });
        let mut port_deps = vec!["network", "subnet"];
        port_deps.extend(m.security_groups.iter().copied());
        self.add(
            &port,
            Kind::Port,
            Desired::Port {
                network: "network".into(),
                subnet: "subnet".into(),
                security_groups: m.security_groups.iter().map(|s| (*s).to_owned()).collect(),
                address_pairs: m.address_pairs.to_vec(),
            },
            &port_deps,
        );
        let volume = m.resolved.boot_volume.as_ref().map(|bv| {
            let id = format!("vol-{host}");
            self.add(
                &id,
                Kind::Volume,
                Desired::Volume {
                    size_gb: bv.size_gb,
                    volume_type: bv.volume_type.clone(),
                    image_id: m.resolved.image_id.clone(),
                    // Cinder's zone, not necessarily the server's (preflight chose it).
                    availability_zone: bv.zone_for(az.as_deref()),
                },
                &[],
            );
            id
        });
        let mut deps: Vec<String> = vec![port.clone()];
        deps.extend(volume.iter().cloned());
        deps.extend(m.server_group.map(str::to_owned));
        if keypair {
            deps.push("keypair".into());
        }
        if api.node() != port {
            deps.push(api.node().to_owned());
        }
        if m.role == NodeRole::InitControlPlane {
            // Its user_data carries the CCM's cloud.conf: the credential must exist first.
            deps.push("appcred-ccm".into());
        }
        let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
        let spec = ServerSpec {
            flavor_id: m.resolved.flavor_id.clone(),
            flavor_name: m.resolved.flavor_name.clone(),
            kubernetes_version: self.kubernetes_version.clone(),
            image_id: m.resolved.image_id.clone(),
            port,
            volume: volume.clone(),
            server_group: m.server_group.map(str::to_owned),
            keypair: keypair.then(|| "keypair".to_owned()),
            availability_zone: az,
            role: m.role.clone(),
            labels: m.labels.clone(),
            taints: m.taints.clone(),
            cluster: (!matches!(m.role, NodeRole::Worker { .. })).then(|| self.record.clone()),
        };
        let record = super::record::tags(&spec);
        self.add(&host, Kind::Server, Desired::Server(Box::new(spec)), &deps);
        if let Some(n) = self.nodes.last_mut() {
            n.tags.extend(record);
        }
    }
}
