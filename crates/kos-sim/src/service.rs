//! The services kos-sim serves, and where each one lives under the server's root URL.

use serde::{Deserialize, Serialize};

/// One OpenStack service (or the simulator's own admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    Identity,
    Compute,
    Network,
    Image,
    LoadBalancer,
    BlockStorage,
    /// `/_sim/…`: the simulator's admin endpoints (faults, log, counters).
    Admin,
}

impl Service {
    pub const CLOUD: [Service; 6] = [
        Service::Identity,
        Service::Compute,
        Service::Network,
        Service::Image,
        Service::LoadBalancer,
        Service::BlockStorage,
    ];

    /// Path prefix of the service on the simulator (devstack's layout: one host, one prefix per service).
    pub fn prefix(self) -> &'static str {
        match self {
            Service::Identity => "/identity",
            Service::Compute => "/compute",
            Service::Network => "/network",
            Service::Image => "/image",
            Service::LoadBalancer => "/load-balancer",
            Service::BlockStorage => "/volume",
            Service::Admin => "/_sim",
        }
    }

    /// Catalog service type.
    pub fn catalog_type(self) -> &'static str {
        match self {
            Service::Identity => "identity",
            Service::Compute => "compute",
            Service::Network => "network",
            Service::Image => "image",
            Service::LoadBalancer => "load-balancer",
            Service::BlockStorage => "block-storage",
            Service::Admin => "kos-sim",
        }
    }

    /// Catalog service name (what devstack registers).
    pub fn catalog_name(self) -> &'static str {
        match self {
            Service::Identity => "keystone",
            Service::Compute => "nova",
            Service::Network => "neutron",
            Service::Image => "glance",
            Service::LoadBalancer => "octavia",
            Service::BlockStorage => "cinder",
            Service::Admin => "kos-sim",
        }
    }

    /// Which service a request path belongs to.
    pub fn from_path(path: &str) -> Option<Service> {
        [
            Service::Identity,
            Service::Compute,
            Service::Network,
            Service::Image,
            Service::LoadBalancer,
            Service::BlockStorage,
            Service::Admin,
        ]
        .into_iter()
        .find(|s| {
            let p = s.prefix();
            path == p
                || path
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    pub fn parse(name: &str) -> Option<Service> {
        Self::CLOUD
            .into_iter()
            .chain([Service::Admin])
            .find(|s| s.catalog_type() == name || s.catalog_name() == name)
            .or(match name {
                "volume" | "volumev3" | "cinder" => Some(Service::BlockStorage),
                _ => None,
            })
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.catalog_type())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_services() {
        assert_eq!(
            Service::from_path("/compute/v2.1/servers"),
            Some(Service::Compute)
        );
        assert_eq!(Service::from_path("/network"), Some(Service::Network));
        assert_eq!(Service::from_path("/networkx"), None);
        assert_eq!(
            Service::from_path("/volume/v3/abc/volumes"),
            Some(Service::BlockStorage)
        );
        assert_eq!(Service::from_path("/_sim/log"), Some(Service::Admin));
        assert_eq!(Service::parse("volumev3"), Some(Service::BlockStorage));
    }
}
