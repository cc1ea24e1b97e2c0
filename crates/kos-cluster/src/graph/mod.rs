//! The desired graph: every OpenStack object a cluster needs, each a node with a stable logical id, its
//! deterministic name and tags, what it should look like, and the nodes it depends on.
//!
//! Built from the spec and preflight's [`Resolved`](crate::resolved::Resolved) without any cloud call
//! ([`desired`]); observe, plan, apply and teardown all speak in its logical ids. Edges point from a
//! dependency to its dependents, so a topological order is a create order and its reverse a delete order.

mod build;
pub mod record;
mod rules;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use petgraph::algo::toposort;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::Serialize;

use crate::bootstrap::NodeRole;
use crate::names::PoolName;

pub use build::{ApiVip, Slots, VIP_PORT, desired, desired_in};
pub(crate) use rules::host_cidr;
pub use rules::{Remote, Rule, Source};

/// What kind of cloud object a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Network,
    Subnet,
    Router,
    RouterInterface,
    SecurityGroup,
    /// The ingress rules of one security group (separate from the group: rules refer to other groups).
    SecurityGroupRules,
    ServerGroup,
    Keypair,
    FloatingIp,
    LoadBalancer,
    Listener,
    Pool,
    HealthMonitor,
    /// The whole membership of a pool, set in one batch call.
    Members,
    Port,
    Volume,
    /// A Cinder snapshot: never in the desired graph; the CSI driver's, found by teardown and gc.
    Snapshot,
    Server,
    FloatingIpAssociation,
    AppCredential,
}

impl Kind {
    /// Short human name, as shown in plans.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Network => "network",
            Kind::Subnet => "subnet",
            Kind::Router => "router",
            Kind::RouterInterface => "router interface",
            Kind::SecurityGroup => "security group",
            Kind::SecurityGroupRules => "security group rules",
            Kind::ServerGroup => "server group",
            Kind::Keypair => "keypair",
            Kind::FloatingIp => "floating IP",
            Kind::LoadBalancer => "load balancer",
            Kind::Listener => "listener",
            Kind::Pool => "pool",
            Kind::HealthMonitor => "health monitor",
            Kind::Members => "pool members",
            Kind::Port => "port",
            Kind::Volume => "volume",
            Kind::Snapshot => "snapshot",
            Kind::Server => "server",
            Kind::FloatingIpAssociation => "floating IP association",
            Kind::AppCredential => "application credential",
        }
    }

    /// Position in a delete order (lower goes first): what holds others goes before what it holds.
    #[must_use]
    pub fn delete_rank(self) -> u8 {
        match self {
            Kind::FloatingIpAssociation | Kind::FloatingIp => 0,
            Kind::Members | Kind::HealthMonitor | Kind::Pool | Kind::Listener => 1,
            Kind::LoadBalancer => 2,
            // Cinder refuses to delete a volume while it has a snapshot, even one being deleted.
            Kind::Server | Kind::Snapshot => 3,
            Kind::Port | Kind::Volume => 4,
            Kind::RouterInterface => 5,
            Kind::Router => 6,
            Kind::Subnet => 7,
            Kind::Network => 8,
            Kind::SecurityGroupRules | Kind::SecurityGroup => 9,
            Kind::ServerGroup | Kind::Keypair => 10,
            Kind::AppCredential => 11,
        }
    }

    /// Whether `id` has the shape of a logical id that [`desired`] gives objects of this kind.
    ///
    /// Objects without kos's tags are matched by their name `kos-<cluster>-<id>` only when it does: cluster
    /// names may extend each other (`demo`, `demo-b`), and `kos-demo-b-network` must never read as cluster
    /// `demo`'s object `b-network`.
    #[must_use]
    pub fn fits(self, id: &str) -> bool {
        let indexed = |prefix: &str| id.strip_prefix(prefix).is_some_and(is_host);
        match self {
            Kind::Network => id == "network",
            Kind::Subnet => id == "subnet",
            Kind::Router => id == "router",
            Kind::RouterInterface => id == "router-if",
            Kind::SecurityGroup => matches!(id, "sg-cp" | "sg-node"),
            Kind::SecurityGroupRules => matches!(id, "sgr-cp" | "sgr-node"),
            Kind::ServerGroup => id
                .strip_prefix("sgroup-")
                .is_some_and(|pool| PoolName::new(pool).is_ok()),
            Kind::Keypair => id == "keypair",
            Kind::FloatingIp => id == "api-fip",
            Kind::LoadBalancer => id == "api-lb",
            Kind::Listener => id == "api-listener",
            Kind::Pool => id == "api-pool",
            Kind::HealthMonitor => id == "api-monitor",
            Kind::Members => id == "api-members",
            Kind::Port => indexed("port-") || id == build::VIP_PORT,
            Kind::Volume => indexed("vol-"),
            Kind::Snapshot => false,
            Kind::Server => is_host(id),
            Kind::FloatingIpAssociation => id == "fip-assoc",
            Kind::AppCredential => id == "appcred-ccm",
        }
    }
}

/// `<pool>-<index>`: a server's logical id (`cp` is the control plane's pool).
fn is_host(s: &str) -> bool {
    s.rsplit_once('-').is_some_and(|(pool, index)| {
        !index.is_empty()
            && index.bytes().all(|b| b.is_ascii_digit())
            && PoolName::new(pool).is_ok()
    })
}

/// One object of the desired graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// Stable, short, unique in the cluster: `network`, `port-cp-0`, `workers-2`.
    pub id: String,
    pub kind: Kind,
    /// `kos-<cluster>-<id>` (floating IPs carry it as their description: they have no name).
    pub name: String,
    /// `kos-cluster=<name>`, `kos-id=<id>` and the spec's extra tags.
    pub tags: Vec<String>,
    pub spec: Desired,
    /// Logical ids this node needs first.
    pub deps: Vec<String>,
}

impl Node {
    /// A bring-your-own object: never created, updated or deleted.
    #[must_use]
    pub fn is_external(&self) -> bool {
        matches!(self.spec, Desired::External { .. })
    }
}

/// What a node should look like. References to other nodes are logical ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    /// The user's own object, by id.
    External {
        id: String,
    },
    Network,
    Subnet {
        network: String,
        cidr: String,
        dns_servers: Vec<String>,
    },
    Router {
        external_network_id: String,
    },
    RouterInterface {
        router: String,
        subnet: String,
    },
    SecurityGroup {
        description: String,
    },
    SecurityGroupRules {
        group: String,
        rules: Vec<Rule>,
    },
    ServerGroup {
        policy: &'static str,
    },
    Keypair {
        public_key: String,
    },
    FloatingIp {
        external_network_id: String,
        /// The port (logical id) it is created on; `None`: created free, associated later.
        port: Option<String>,
    },
    LoadBalancer {
        subnet: String,
        provider: Option<String>,
        /// The VIP port (logical id) kos made for it; `None`: Octavia makes one on `subnet`.
        vip_port: Option<String>,
    },
    Listener {
        lb: String,
        port: u16,
        /// Empty: everyone.
        allowed_cidrs: Vec<Source>,
    },
    Pool {
        lb: String,
        listener: String,
        ovn: bool,
    },
    HealthMonitor {
        lb: String,
        pool: String,
    },
    Members {
        lb: String,
        pool: String,
        subnet: String,
        /// Ports whose fixed IPs are the members (known before any server exists).
        ports: Vec<String>,
        port: u16,
    },
    Port {
        network: String,
        subnet: String,
        security_groups: Vec<String>,
        /// Pod and service CIDRs: traffic the CNI routes through the node.
        address_pairs: Vec<String>,
    },
    /// The API load balancer's VIP port, made before it: no security groups of kos's (Octavia puts
    /// its own on it), no address pairs; never compared with what Octavia made of it.
    VipPort {
        network: String,
        subnet: String,
    },
    Volume {
        size_gb: u32,
        volume_type: Option<String>,
        image_id: String,
        availability_zone: Option<String>,
    },
    Server(Box<ServerSpec>),
    FloatingIpAssociation {
        fip: String,
        target: AssocTarget,
    },
    /// The CCM's and CSI's credential: these roles, expiring this many days after it is made;
    /// with `access_rules`, limited to kos-ccm's and kos-csi's calls (`crate::access_rules`).
    AppCredential {
        roles: Vec<String>,
        lifetime_days: u32,
        access_rules: bool,
    },
}

/// Where the API floating IP points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssocTarget {
    /// A control plane's port (floating-IP endpoint).
    Port(String),
    /// The load balancer's VIP port.
    LoadBalancerVip(String),
}

/// A server and everything its create call needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub flavor_id: String,
    /// What Nova reports as the server's flavor (`original_name`).
    pub flavor_name: String,
    /// The kubelet and kubeadm it installs (`1.MINOR.PATCH`).
    pub kubernetes_version: String,
    pub image_id: String,
    pub port: String,
    pub volume: Option<String>,
    pub server_group: Option<String>,
    pub keypair: Option<String>,
    pub availability_zone: Option<String>,
    pub role: NodeRole,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<String>,
    /// A control plane's record of what the whole cluster was made with (kubeadm's
    /// ClusterConfiguration and the CNI); `None` on workers.
    pub cluster: Option<ClusterRecord>,
}

/// Cluster-wide settings a running cluster cannot change, recorded in its control planes' tags
/// ([`record`]) so that a later plan refuses a change to them instead of ignoring it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRecord {
    /// `network.podCIDR`.
    pub pod_cidr: String,
    /// `network.serviceCIDR`.
    pub service_cidr: String,
    /// `addons.cni`.
    pub cni: String,
    /// `addons.ccm`: `upstream` or `kos`.
    pub ccm: String,
    /// `addons.csi`: `cinder`, `kos` or `none` (as for `ccm`, kos-csi's image is not recorded).
    pub csi: String,
    /// `apiEndpoint.dnsName`, a name in the API server's certificates: `-` for none.
    pub api_dns_name: String,
}

/// Where the API endpoint's address comes from, once that node exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiSource {
    /// The pre-allocated floating IP (public endpoints).
    FloatingIp(String),
    /// The load balancer's private VIP.
    LoadBalancerVip(String),
    /// The single control plane's fixed IP (private floating-IP endpoint).
    PortIp(String),
}

impl ApiSource {
    /// The logical id of the node that provides the address.
    #[must_use]
    pub fn node(&self) -> &str {
        match self {
            ApiSource::FloatingIp(n) | ApiSource::LoadBalancerVip(n) | ApiSource::PortIp(n) => n,
        }
    }
}

/// Why a graph could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("the desired graph has a dependency cycle through `{0}`")]
    Cycle(String),
    #[error("node `{node}` depends on `{missing}`, which is not in the graph")]
    MissingDependency { node: String, missing: String },
    #[error("node pool `{0}` was not resolved by preflight")]
    UnresolvedPool(String),
    #[error("logical id `{0}` is used twice (a node pool named like a kos object?)")]
    DuplicateId(String),
}

/// The whole desired state of one cluster, in dependency order.
#[derive(Debug, Clone)]
pub struct DesiredGraph {
    pub cluster: String,
    /// Nodes by logical id.
    pub nodes: BTreeMap<String, Node>,
    /// Logical ids, dependencies first.
    pub order: Vec<String>,
    pub api: ApiSource,
}

impl DesiredGraph {
    /// Checks references and cycles, and computes the create order.
    ///
    /// # Errors
    /// A dependency on a missing node, a duplicate id, or a cycle.
    pub fn new(cluster: &str, nodes: Vec<Node>, api: ApiSource) -> Result<Self, GraphError> {
        let mut by_id = BTreeMap::new();
        for n in nodes {
            let id = n.id.clone();
            if by_id.insert(id.clone(), n).is_some() {
                return Err(GraphError::DuplicateId(id));
            }
        }
        let (g, _) = petgraph_of(&by_id)?;
        let order = toposort(&g, None)
            .map_err(|c| GraphError::Cycle(g[c.node_id()].clone()))?
            .into_iter()
            .map(|i| g[i].clone())
            .collect();
        Ok(DesiredGraph {
            cluster: cluster.to_owned(),
            nodes: by_id,
            order,
            api,
        })
    }

    #[must_use]
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id)
    }

    /// Nodes in create order.
    pub fn in_order(&self) -> impl Iterator<Item = &Node> {
        self.order.iter().filter_map(|id| self.nodes.get(id))
    }

    /// Graphviz rendering (`kos plan --graph dot`): externals dashed, servers boxed.
    #[must_use]
    pub fn dot(&self) -> String {
        let mut out = format!("digraph \"kos-{}\" {{\n  rankdir=LR;\n", self.cluster);
        for n in self.in_order() {
            let style = if n.is_external() {
                ", style=dashed"
            } else if n.kind == Kind::Server {
                ", shape=box"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  \"{}\" [label=\"{}\\n{}\"{style}];",
                n.id,
                n.id,
                n.kind.as_str()
            );
        }
        for n in self.in_order() {
            for d in &n.deps {
                let _ = writeln!(out, "  \"{d}\" -> \"{}\";", n.id);
            }
        }
        out.push_str("}\n");
        out
    }
}

type Graph = DiGraph<String, ()>;

fn petgraph_of(
    nodes: &BTreeMap<String, Node>,
) -> Result<(Graph, BTreeMap<String, NodeIndex>), GraphError> {
    let mut g = Graph::new();
    let idx: BTreeMap<String, NodeIndex> = nodes
        .keys()
        .map(|id| (id.clone(), g.add_node(id.clone())))
        .collect();
    for n in nodes.values() {
        for d in &n.deps {
            let from = idx.get(d).ok_or_else(|| GraphError::MissingDependency {
                node: n.id.clone(),
                missing: d.clone(),
            })?;
            g.add_edge(*from, idx[&n.id], ());
        }
    }
    Ok((g, idx))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bootstrap::Formation;
    use crate::resolved::{
        ExternalNetwork, Resolved, ResolvedBootVolume, ResolvedMachine, ResolvedNetwork,
    };

    fn machine() -> ResolvedMachine {
        ResolvedMachine {
            flavor_id: "f".into(),
            flavor_name: "m1.small".into(),
            vcpus: 2,
            ram_mb: 4096,
            disk_gb: 20,
            image_id: "i".into(),
            availability_zones: Vec::new(),
            boot_volume: Some(ResolvedBootVolume {
                size_gb: 20,
                volume_type: None,
                availability_zone: None,
                cinder_zones: None,
            }),
        }
    }

    /// Every name validation lets through builds a graph (no `DuplicateId`), even names that look like
    /// kos's fixed ids; and every id has the shape [`Kind::fits`] matches untagged objects by.
    #[test]
    fn pool_names_like_fixed_ids_build_and_every_id_fits_its_kind() {
        let pools = [
            "api",
            "network",
            "subnet",
            "router",
            "router-if",
            "sg",
            "sg-cp",
            "sgroup",
            "sgroup0",
            "keypair",
            "ccm",
            "appcred-ccm",
            "api-fip",
            "fip-assoc",
            "port",
            "vol",
            "cp-0",
            "workers",
        ];
        let yaml: String = pools
            .iter()
            .map(|p| {
                format!("    - {{name: {p}, count: 2, flavor: m1.small, image: u, bootVolume: {{sizeGB: 20}}}}\n")
            })
            .collect();
        let text = format!(
            "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: demo}}\nspec:\n  kubernetesVersion: \"1.36.4\"\n  sshPublicKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBRy6hQTfuZ21OSeYgWgxWM66OLh6yHnC+cDozVhPY0b me@host\n  network: {{create: {{cidr: 10.0.0.0/20}}}}\n  apiEndpoint: {{type: loadBalancer}}\n  controlPlane: {{count: 3, flavor: m1.small, image: u, bootVolume: {{sizeGB: 20}}}}\n  nodePools:\n{yaml}"
        );
        let spec = match crate::load("c.yaml", &text) {
            Ok(l) => l.spec,
            Err(e) => panic!("{e:?}"),
        };
        let resolved = Resolved {
            external_network: ExternalNetwork {
                id: "ext".into(),
                name: "public".into(),
            },
            network: ResolvedNetwork::Create {
                cidr: "10.0.0.0/20".parse().expect("a CIDR"),
                dns_servers: Vec::new(),
            },
            control_plane: machine(),
            pools: spec
                .node_pools
                .iter()
                .map(|p| (p.name.value.clone(), machine()))
                .collect::<BTreeMap<_, _>>(),
            lb_provider: Some("amphora".into()),
            service_lb_provider: Some("amphora".into()),
            ccm_roles: vec!["member".into()],
            csi_volume_zone: None,
        };
        let g = desired(&spec, &resolved, Formation::Fresh).expect("no duplicate id");
        for n in g.nodes.values() {
            assert!(
                n.kind.fits(&n.id),
                "{} ({}) does not fit",
                n.id,
                n.kind.as_str()
            );
        }
        assert!(g.node("port-cp-0-1").is_some() && g.node("sgroup-cp-0").is_some());
    }

    fn roles(g: &DesiredGraph) -> Vec<(String, NodeRole)> {
        g.nodes
            .values()
            .filter_map(|n| match &n.spec {
                Desired::Server(s) => Some((n.id.clone(), s.role.clone())),
                _ => None,
            })
            .collect()
    }

    /// Only a fresh cluster has an initializer: in a formed one a (re-created) `cp-0` joins like the
    /// others, and nothing waits for the CCM credential, which only the initializer carries.
    #[test]
    fn only_a_fresh_cluster_has_an_initializer() {
        let fresh = graph_with(3, Formation::Fresh);
        let inits: Vec<_> = roles(&fresh)
            .into_iter()
            .filter(|(_, r)| *r == NodeRole::InitControlPlane)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(inits, ["cp-0"]);
        assert!(
            fresh
                .node("cp-0")
                .is_some_and(|n| n.deps.iter().any(|d| d == "appcred-ccm"))
        );

        let formed = graph_with(3, Formation::Formed);
        let roles = roles(&formed);
        assert_eq!(roles.len(), 3);
        for (id, role) in &roles {
            assert_eq!(*role, NodeRole::JoinControlPlane, "{id}");
            assert!(
                !formed
                    .node(id)
                    .is_some_and(|n| n.deps.iter().any(|d| d == "appcred-ccm"))
            );
        }
    }

    fn graph_of(
        api_endpoint: &str,
        network: &str,
        resolved_network: ResolvedNetwork,
    ) -> DesiredGraph {
        graph_full(api_endpoint, network, resolved_network, 1, Formation::Fresh)
    }

    fn graph_with(control_planes: u32, formation: Formation) -> DesiredGraph {
        graph_full(
            "{type: loadBalancer}",
            "{create: {cidr: 10.0.0.0/20}}",
            created(),
            control_planes,
            formation,
        )
    }

    fn graph_full(
        api_endpoint: &str,
        network: &str,
        resolved_network: ResolvedNetwork,
        control_planes: u32,
        formation: Formation,
    ) -> DesiredGraph {
        let text = format!(
            "apiVersion: kos.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: demo}}\nspec:\n  kubernetesVersion: \"1.36.4\"\n  network: {network}\n  apiEndpoint: {api_endpoint}\n  controlPlane: {{count: {control_planes}, flavor: m1.small, image: u, bootVolume: {{sizeGB: 20}}}}\n"
        );
        let spec = match crate::load("c.yaml", &text) {
            Ok(l) => l.spec,
            Err(e) => panic!("{e:?}"),
        };
        let resolved = Resolved {
            external_network: ExternalNetwork {
                id: "ext".into(),
                name: "public".into(),
            },
            network: resolved_network,
            control_plane: machine(),
            pools: BTreeMap::new(),
            lb_provider: match spec.api_endpoint.kind.value {
                crate::spec::EndpointKind::LoadBalancer { provider } => {
                    Some(provider.as_str().to_owned())
                }
                crate::spec::EndpointKind::FloatingIp => None,
            },
            service_lb_provider: None,
            ccm_roles: vec!["member".into()],
            csi_volume_zone: None,
        };
        desired(&spec, &resolved, formation).expect("graph")
    }

    fn created() -> ResolvedNetwork {
        ResolvedNetwork::Create {
            cidr: "10.0.0.0/24".parse().expect("a CIDR"),
            dns_servers: Vec::new(),
        }
    }

    fn listener_sources(g: &DesiredGraph) -> Vec<Source> {
        match g.node("api-listener").map(|n| &n.spec) {
            Some(Desired::Listener { allowed_cidrs, .. }) => allowed_cidrs.clone(),
            other => panic!("{other:?}"),
        }
    }

    fn cp_remotes(g: &DesiredGraph) -> Vec<Remote> {
        match g.node("sgr-cp").map(|n| &n.spec) {
            Some(Desired::SecurityGroupRules { rules, .. }) => rules
                .iter()
                .filter(|r| r.ports == Some((6443, 6443)))
                .map(|r| r.remote.clone())
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    /// `allowedCIDRs` restricts clients, never the nodes: the listener admits the node subnet (kubelets
    /// that reach the VIP) and the router's gateway (kubelets that reach the floating IP come back SNATed
    /// to it), and so does `sg-cp` for a load balancer that keeps that source address (OVN).
    #[test]
    fn allowed_cidrs_never_lock_the_nodes_out_of_their_api() {
        let g = graph_of(
            "{type: loadBalancer, provider: amphora, allowedCIDRs: [198.51.100.0/24]}",
            "{create: {cidr: 10.0.0.0/24}}",
            created(),
        );
        assert_eq!(
            listener_sources(&g),
            vec![
                Source::Cidr("10.0.0.0/24".into()),
                Source::Cidr("198.51.100.0/24".into()),
                Source::RouterGateway("router".into()),
            ]
        );
        let listener = g.node("api-listener").expect("listener");
        assert!(listener.deps.iter().any(|d| d == "router"), "{listener:?}");
        let remotes = cp_remotes(&g);
        assert!(
            remotes.contains(&Remote::RouterGateway("router".into())),
            "{remotes:?}"
        );
        assert!(remotes.contains(&Remote::Cidr("198.51.100.0/24".into())));
        assert!(!remotes.contains(&Remote::Cidr("0.0.0.0/0".into())));
        assert!(
            g.node("sgr-cp")
                .expect("rules")
                .deps
                .iter()
                .any(|d| d == "router")
        );

        // OVN refuses listener allowed_cidrs: none are set, and sg-cp (clients, nodes through the
        // router's gateway, the node subnet) does the admitting, as the members see the sources.
        let ovn = graph_of(
            "{type: loadBalancer, provider: ovn, allowedCIDRs: [198.51.100.0/24]}",
            "{create: {cidr: 10.0.0.0/24}}",
            created(),
        );
        assert!(listener_sources(&ovn).is_empty());
        let remotes = cp_remotes(&ovn);
        for r in [
            Remote::Cidr("198.51.100.0/24".into()),
            Remote::Cidr("10.0.0.0/24".into()),
            Remote::RouterGateway("router".into()),
        ] {
            assert!(remotes.contains(&r), "{r:?} in {remotes:?}");
        }
        assert!(!remotes.contains(&Remote::Cidr("0.0.0.0/0".into())));

        // A private endpoint is reached from the subnet only; no router on the way.
        let private = graph_of(
            "{type: loadBalancer, provider: amphora, public: false, allowedCIDRs: [172.16.0.0/12]}",
            "{create: {cidr: 10.0.0.0/24}}",
            created(),
        );
        assert_eq!(
            listener_sources(&private),
            vec![
                Source::Cidr("10.0.0.0/24".into()),
                Source::Cidr("172.16.0.0/12".into()),
            ]
        );
        assert!(
            !cp_remotes(&private)
                .iter()
                .any(|r| matches!(r, Remote::RouterGateway(_)))
        );

        // The user's router: its gateway address, read by preflight.
        let byo = graph_of(
            "{type: floatingIP, allowedCIDRs: [198.51.100.0/24]}",
            "{existing: {network: n, subnet: s, router: r}}",
            ResolvedNetwork::Existing {
                network_id: "n".into(),
                subnet_id: "s".into(),
                subnet_cidr: "10.10.0.0/24".parse().expect("a CIDR"),
                router_id: Some("r".into()),
                router_gateway: Some("172.24.4.7".into()),
            },
        );
        assert!(cp_remotes(&byo).contains(&Remote::Cidr("172.24.4.7/32".into())));

        // No allowedCIDRs: everyone, nodes included.
        let open = graph_of(
            "{type: loadBalancer, provider: ovn}",
            "{create: {cidr: 10.0.0.0/24}}",
            created(),
        );
        assert!(listener_sources(&open).is_empty());
        assert!(cp_remotes(&open).contains(&Remote::Cidr("0.0.0.0/0".into())));
    }
}
