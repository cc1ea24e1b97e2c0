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
    /// What the nodes fetch from outside the cluster instead of the internet: the spec's mirrors
    /// and proxy, by `host` and TCP port (empty: the public internet, not checked).
    pub fetch_from: Vec<FetchTarget>,
}

/// A mirror or proxy the nodes must reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTarget {
    /// `registry mirror (registry.k8s.io)`, `proxy`.
    pub what: String,
    /// As the spec gives it: an address or a name.
    pub host: String,
    pub port: u16,
}

fn fetch_from(spec: &ClusterSpec) -> Vec<FetchTarget> {
    let m = &spec.mirrors;
    let mut out: Vec<FetchTarget> = Vec::new();
    let mut add = |what: String, u: &crate::spec::HttpUrl| {
        let port = u
            .authority()
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(if u.scheme() == "https" { 443 } else { 80 });
        let host = u.host().trim_matches(['[', ']']).to_owned();
        if let Some(t) = out.iter_mut().find(|t| t.host == host && t.port == port) {
            t.what.push_str(&format!(", {what}"));
        } else {
            out.push(FetchTarget { what, host, port });
        }
    };
    for (registry, u) in &m.registries {
        add(format!("mirror of {registry}"), u);
    }
    if let Some(u) = &m.kubernetes_packages {
        add("package mirror".into(), u);
    }
    if let Some(u) = &m.os_packages {
        add("OS package mirror".into(), u);
    }
    if let Some(u) = &m.os_security_packages {
        add("OS security package mirror".into(), u);
    }
    if let Some(u) = &m.manifests {
        add("manifest mirror".into(), u);
    }
    if let Some(p) = &spec.proxy {
        for u in p.http.iter().chain(p.https.iter()) {
            add("proxy".into(), u);
        }
    }
    out
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
            fetch_from: fetch_from(spec),
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
