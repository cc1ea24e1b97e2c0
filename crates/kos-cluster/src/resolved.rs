//! What preflight learned from the cloud, in the form the desired graph needs: every name in the spec
//! resolved to an id, once. Preflight produces it; the graph consumes it. Nothing here calls the cloud.

use std::collections::BTreeMap;

use ipnet::Ipv4Net;

use crate::names::PoolName;

/// The cloud-side facts a cluster's desired graph is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The external network floating IPs and the router gateway come from.
    pub external_network: ExternalNetwork,
    /// The node network: made by kos, or the user's own.
    pub network: ResolvedNetwork,
    pub control_plane: ResolvedMachine,
    /// One entry per node pool of the spec, by pool name.
    pub pools: BTreeMap<PoolName, ResolvedMachine>,
    /// Octavia provider for the API load balancer (`None` for a floating-IP endpoint).
    pub lb_provider: Option<String>,
    /// Octavia provider for the Services' load balancers (the CCM's `lb-provider`); `None`: the
    /// cloud's default.
    pub service_lb_provider: Option<String>,
    /// The roles of the CCM's application credential ([`crate::credential::ccm_roles`]).
    pub ccm_roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalNetwork {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedNetwork {
    /// kos creates network, subnet, router and interface with this CIDR.
    Create {
        cidr: Ipv4Net,
        dns_servers: Vec<std::net::Ipv4Addr>,
    },
    /// Bring your own: never created, updated or deleted by kos.
    Existing {
        network_id: String,
        subnet_id: String,
        subnet_cidr: Ipv4Net,
        /// The router that connects the subnet to the external network, when the user named one (or
        /// preflight found the one with an interface on the subnet).
        router_id: Option<String>,
        /// That router's external gateway address (IPv4): where the nodes' traffic to the API's
        /// floating IP comes from.
        router_gateway: Option<String>,
    },
}

/// A flavor and an image, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedMachine {
    pub flavor_id: String,
    pub flavor_name: String,
    pub vcpus: u32,
    pub ram_mb: u64,
    /// Root disk of the flavor (0 = the flavor has none: a boot volume is required).
    pub disk_gb: u64,
    pub image_id: String,
    /// Zones to spread servers over, round-robin (empty: let Nova choose).
    pub availability_zones: Vec<String>,
    /// Boot from a new volume of this size and type instead of the flavor's disk.
    pub boot_volume: Option<ResolvedBootVolume>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedBootVolume {
    pub size_gb: u32,
    pub volume_type: Option<String>,
}
