//! Version skew, as the Kubernetes version skew policy states it
//! (kubernetes.io/releases/version-skew-policy): the newest and oldest kube-apiserver of a cluster
//! within one minor; a kubelet never newer than a kube-apiserver it talks to. A kubelet talks to
//! whatever its `kubelet.conf` names: the `controlPlaneEndpoint`, so every API server behind it
//! (a new control plane's kubelet reaching an older API server through the load balancer is
//! kubernetes/kubernetes#127316), or with kubeadm's `ControlPlaneKubeletLocalMode` only the API
//! server next to it.
//!
//! kubeadm enforces neither on a join (its join preflight checks the kubelet against no control
//! plane version), so the guest lets such joins happen and reports them here, for the invariants.

use std::collections::BTreeSet;

use crate::cluster::ClusterId;
use crate::guest::{Guest, Power, Server};
use crate::seam::ServerId;
use crate::static_pods;
use crate::version::Version;

/// An API server that runs: its server, node name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningApiServer {
    pub server: ServerId,
    pub node: String,
    pub version: Version,
}

fn node_name(s: &Server) -> String {
    s.kubelet
        .as_ref()
        .map_or_else(|| s.meta.local_hostname.clone(), |k| k.node.clone())
}

/// The `server:` of a kubeconfig the guest wrote, without `https://`.
fn kubeconfig_server(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .map(|s| s.trim().trim_start_matches("https://"))
}

/// Newer in major or minor (patches never break the policy).
fn newer_minor(a: Version, b: Version) -> bool {
    (a.major, a.minor) > (b.major, b.minor)
}

impl Guest {
    /// The version of the API server a server runs: its static pod manifest's, `None` for a
    /// worker.
    pub fn api_server_version(&self, server: &ServerId) -> Option<Version> {
        let s = self.servers.get(server)?;
        s.api_of?;
        static_pods::apiserver_version(&s.vfs)
    }

    /// The cluster's API servers that run (their server is on), oldest first.
    pub fn running_api_servers(&self, cluster: ClusterId) -> Vec<RunningApiServer> {
        let mut out: Vec<RunningApiServer> = self
            .servers
            .iter()
            .filter(|(_, s)| s.power == Power::On && s.api_of == Some(cluster))
            // Its etcd member removed, its etcd and with it its API server stopped.
            .filter(|(id, _)| {
                self.clusters
                    .get(&cluster)
                    .is_none_or(|c| !c.removed_members.contains(*id))
            })
            .filter_map(|(id, s)| {
                Some(RunningApiServer {
                    server: id.clone(),
                    node: node_name(s),
                    version: static_pods::apiserver_version(&s.vfs)?,
                })
            })
            .collect();
        out.sort_by(|a, b| a.version.cmp(&b.version).then(a.node.cmp(&b.node)));
        out
    }

    /// What breaks the version skew policy in a cluster now.
    pub fn skew_violations(&self, cluster: ClusterId) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let apis = self.running_api_servers(cluster);
        if let (Some(oldest), Some(newest)) = (apis.first(), apis.last()) {
            let (o, n) = (oldest.version, newest.version);
            if o.major != n.major || n.minor > o.minor + 1 {
                out.insert(format!(
                    "kube-apiservers more than one minor apart: {} on {} and {} on {}",
                    o, oldest.node, n, newest.node
                ));
            }
        }
        for (id, s) in &self.servers {
            let (Some(k), Some(kubelet)) = (&s.kubelet, s.installed) else {
                continue;
            };
            if s.power != Power::On || k.cluster != cluster {
                continue;
            }
            let conf = s
                .vfs
                .text("/etc/kubernetes/kubelet.conf")
                .unwrap_or_default();
            let local = s.local_api_endpoint();
            let only_own = s.api_of == Some(cluster)
                && local.is_some()
                && kubeconfig_server(conf) == local.as_deref();
            let reached = apis.iter().filter(|a| !only_own || &a.server == id);
            if let Some(older) = reached
                .filter(|a| newer_minor(kubelet, a.version))
                .min_by_key(|a| a.version)
            {
                out.insert(format!(
                    "kubelet {kubelet} of {} is newer than kube-apiserver {} on {}{}",
                    k.node,
                    older.version,
                    older.node,
                    if only_own {
                        ""
                    } else {
                        " (through the control-plane endpoint)"
                    }
                ));
            }
        }
        out
    }
}
