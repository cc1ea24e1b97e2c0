//! What the spec says the cluster needs beyond what the cloud shows: its CNI (whose traffic to check),
//! who must reach the API, and the pod CIDR.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use crate::spec::{ClusterSpec, Cni};

/// The spec's connectivity intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub cni: Cni,
    /// Who must reach the API from outside: `apiEndpoint.allowedCIDRs`, or everyone for a public
    /// endpoint without them; empty for a private endpoint without them (only the nodes).
    pub api_clients: Vec<IpNet>,
    /// `apiEndpoint.public`: a floating IP in front of the API.
    pub public: bool,
    pub pod_cidr: IpNet,
}

impl Intent {
    #[must_use]
    pub fn of(spec: &ClusterSpec) -> Intent {
        let api = &spec.api_endpoint;
        let mut api_clients: Vec<IpNet> = api.allowed_cidrs.iter().map(|c| c.value).collect();
        if api_clients.is_empty() && api.public {
            api_clients.push(anywhere());
        }
        Intent {
            cni: spec.addons.cni,
            api_clients,
            public: api.public,
            pod_cidr: IpNet::V4(spec.network.pod_cidr.value),
        }
    }
}

/// `0.0.0.0/0`.
#[must_use]
pub fn anywhere() -> IpNet {
    IpNet::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0).unwrap_or_default()
}

/// The CNI's name as the spec spells it.
#[must_use]
pub fn cni_name(cni: Cni) -> &'static str {
    match cni {
        Cni::Calico => "calico",
        Cni::Cilium => "cilium",
        Cni::Flannel => "flannel",
        Cni::KubeRouter => "kube-router",
    }
}
