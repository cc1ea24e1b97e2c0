//! The guest's state outside the process: every server (filesystem, power, program, console) and
//! every cluster (identity, etcd membership, CNI, and its API objects as a kube-fake snapshot), so a
//! simulated cloud saved by one command and loaded by the next finds its clusters running.
//!
//! The state holds the clusters' keys (the nodes' `/etc/kubernetes/pki`, Secrets): whoever writes
//! it writes it 0600 (kos-sim's `persist::save_bytes`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, ClusterId, CniState, EtcdMember, Serving};
use crate::error::GuestError;
use crate::guest::{Guest, Server};
use crate::log::Entry;
use crate::seam::ServerId;

/// A guest, as saved.
#[derive(Serialize, Deserialize)]
pub struct GuestState {
    servers: Vec<(ServerId, Server)>,
    clusters: Vec<ClusterState>,
    log: Vec<Entry>,
    next_cluster: u32,
}

#[derive(Serialize, Deserialize)]
struct ClusterState {
    id: ClusterId,
    name: String,
    endpoint: Option<String>,
    ca_hash: String,
    pod_subnet: Option<String>,
    etcd: Vec<EtcdMember>,
    #[serde(default)]
    removed_members: std::collections::BTreeSet<ServerId>,
    cni: Option<CniState>,
    serving: Serving,
    /// Saved before minors were kept: the fake's default.
    #[serde(default = "default_minor")]
    minor: u32,
    kube: kos_kube_fake::Snapshot,
}

fn default_minor() -> u32 {
    kos_kube_fake::DEFAULT_MINOR
}

impl Guest {
    /// Everything the guest holds.
    pub fn state(&self) -> GuestState {
        GuestState {
            servers: self
                .servers
                .iter()
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect(),
            clusters: self
                .clusters
                .values()
                .map(|c| ClusterState {
                    id: c.id,
                    name: c.name.clone(),
                    endpoint: c.endpoint.clone(),
                    ca_hash: c.ca_hash.clone(),
                    pod_subnet: c.pod_subnet.clone(),
                    etcd: c.etcd.clone(),
                    removed_members: c.removed_members.clone(),
                    cni: c.cni.clone(),
                    serving: c.serving.clone(),
                    minor: c.minor,
                    kube: c.kube.snapshot(),
                })
                .collect(),
            log: self.log.clone(),
            next_cluster: self.next_cluster,
        }
    }

    /// A guest holding `state`; each cluster's API is served again (a new address). Call it inside
    /// a tokio runtime.
    ///
    /// # Errors
    /// A cluster's API that cannot start again.
    pub fn restore(state: GuestState) -> Result<Guest, GuestError> {
        let mut clusters = BTreeMap::new();
        for c in state.clusters {
            let kube = kos_kube_fake::FakeKube::start_sync_from(
                kos_kube_fake::Config {
                    minor: c.minor,
                    ..kos_kube_fake::Config::default()
                },
                &c.kube,
            )?;
            clusters.insert(
                c.id,
                Cluster {
                    id: c.id,
                    name: c.name,
                    endpoint: c.endpoint,
                    ca_hash: c.ca_hash,
                    pod_subnet: c.pod_subnet,
                    etcd: c.etcd,
                    removed_members: c.removed_members,
                    etcd_raft: crate::cluster::EtcdRaft::default(),
                    cni: c.cni,
                    serving: c.serving,
                    minor: c.minor,
                    kube,
                    csrs_seen: Default::default(),
                },
            );
        }
        Ok(Guest {
            servers: state.servers.into_iter().collect(),
            clusters,
            log: state.log,
            next_cluster: state.next_cluster,
        })
    }
}

/// Bytes as base64 in JSON (file contents are mostly text, keys and certificates).
pub(crate) mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}
