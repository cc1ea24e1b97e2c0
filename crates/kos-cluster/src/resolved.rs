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
    /// The Cinder zone the CSI driver makes volumes in when the nodes' compute zones are not all
    /// Cinder's (`addons.csiAvailabilityZone`, else Cinder's only zone); `None`: a volume goes to its
    /// node's zone.
    pub csi_volume_zone: Option<String>,
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
    /// The spec's `bootVolume.availabilityZone`, which preflight found among Cinder's zones.
    pub availability_zone: Option<String>,
    /// Cinder's available zones as preflight listed them; `None` when Cinder would not list them.
    pub cinder_zones: Option<Vec<String>>,
}

impl ResolvedBootVolume {
    /// The Cinder zone for the boot volume of a server in compute zone `compute` (`None`: Nova
    /// chooses); `None` back means the create names no zone and Cinder uses its default.
    ///
    /// Cinder's zones are its own: a cloud with compute zones `az1, az2` often has one volume zone
    /// `nova`, and Cinder refuses a volume in `az1`. So: the zone the spec names; else the compute
    /// zone when Cinder has one of that name (Nova's `[cinder] cross_az_attach = False` then still
    /// boots it); else Cinder's only zone; else Cinder's default, as Nova itself does for the
    /// volumes it makes. When Cinder's zones are unknown, the compute zone, as kos always did.
    #[must_use]
    pub fn zone_for(&self, compute: Option<&str>) -> Option<String> {
        if let Some(named) = &self.availability_zone {
            return Some(named.clone());
        }
        let Some(cinder) = &self.cinder_zones else {
            return compute.map(str::to_owned);
        };
        if let Some(c) = compute
            && cinder.iter().any(|z| z == c)
        {
            return Some(c.to_owned());
        }
        match &cinder[..] {
            [only] => Some(only.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bv(named: Option<&str>, cinder: Option<&[&str]>) -> ResolvedBootVolume {
        ResolvedBootVolume {
            size_gb: 20,
            volume_type: None,
            availability_zone: named.map(str::to_owned),
            cinder_zones: cinder.map(|z| z.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn a_named_zone_wins_even_over_a_matching_compute_zone() {
        let b = bv(Some("nova"), Some(&["nova", "az1"]));
        assert_eq!(b.zone_for(Some("az1")).as_deref(), Some("nova"));
        assert_eq!(b.zone_for(None).as_deref(), Some("nova"));
    }

    #[test]
    fn the_compute_zone_when_cinder_has_one_of_that_name() {
        let b = bv(None, Some(&["az1", "az2", "az3"]));
        assert_eq!(b.zone_for(Some("az2")).as_deref(), Some("az2"));
    }

    #[test]
    fn cinders_only_zone_when_it_lacks_the_compute_zone() {
        let b = bv(None, Some(&["nova"]));
        assert_eq!(b.zone_for(Some("az1")).as_deref(), Some("nova"));
        // Nova chooses the server's zone: the volume still goes where Cinder can make it.
        assert_eq!(b.zone_for(None).as_deref(), Some("nova"));
    }

    #[test]
    fn cinders_default_when_it_has_several_zones_and_not_the_compute_one() {
        let b = bv(None, Some(&["ceph-a", "ceph-b"]));
        assert_eq!(b.zone_for(Some("az1")), None);
        assert_eq!(b.zone_for(None), None);
        assert_eq!(bv(None, Some(&[])).zone_for(Some("az1")), None);
    }

    #[test]
    fn unknown_cinder_zones_keep_the_compute_zone() {
        let b = bv(None, None);
        assert_eq!(b.zone_for(Some("az1")).as_deref(), Some("az1"));
        assert_eq!(b.zone_for(None), None);
    }
}
