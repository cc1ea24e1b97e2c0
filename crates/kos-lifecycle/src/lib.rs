//! What a kos run does to a running cluster, as opposed to the cloud objects under it (kos-cluster):
//! the day-two operations the CLI (and one day a controller) call. Each is a sequence of idempotent
//! steps decided from what the cloud and the cluster show, so a run killed anywhere is finished by
//! running it again.
//!
//! - [`audience`]: who a failure's help speaks to (the CLI's user or kos-operator's).
//! - [`formation`]: whether a cluster exists for the spec's control planes, which decides whether a new
//!   control plane runs `kubeadm init` or joins; decided from the cloud and the cluster, never from a name.
//! - [`decide`]: one turn's decision from the spec and what the cloud shows: the desired graph, the
//!   plan, who joins and who leaves, and the refusals (a release jump, a loss of quorum, a change no
//!   running cluster can take).
//! - [`health`]: which nodes of a group are unhealthy and whether they may be replaced, as Cluster
//!   API's MachineHealthCheck decides (`healthCheck` of the control planes and of each pool).
//! - [`kubeadm_config`]: the running cluster's ClusterConfiguration moved (release, certificate names)
//!   before control planes join, which read it there.
//! - [`addons`]: the cloud controller and CSI moved to the release of the cluster's minor after an upgrade.
//! - [`api`]: how the cluster's API fails, as the seams to it report it ([`api::ApiError`]).
//! - [`drain`]: a node's pods evicted (PodDisruptionBudgets honoured) before its server is deleted,
//!   as Cluster API drains a machine.
//! - [`etcd`]: the etcd client (the v3 gateway's JSON over TLS with a client certificate of the etcd CA,
//!   over a stream to the member, e.g. a port-forward through the API server).
//! - [`membership`]: the members of control planes made again, removed before they join.
//! - [`quorum`]: which etcd members may go, and in what order, so that etcd keeps its quorum at every step.
//! - [`roll`]: rolling replacement of servers made for another spec, control planes first, one at a time.
//! - [`succession`]: which servers a run holds and which leave: scale-up, scale-down, and a replaced
//!   server's successor joining before it leaves (`maxSurge`).
//! - [`run`]: one `kos up` as a sequence of turns, each decided afresh (converge, retire, replace,
//!   repair, remake), behind the [`run::Cluster`] trait the CLI (or a controller) implements.
//! - [`rotate`]: a new application credential for the cloud controller and CSI, put into the
//!   cluster's `cloud-config` Secret and rolled out before the old one is deleted.
//! - [`version`]: a running cluster's Kubernetes version moves one minor at a time, never back.

pub mod addons;
pub mod api;
pub mod audience;
pub mod decide;
pub mod drain;
pub mod encryption;
pub mod etcd;
pub mod formation;
pub mod health;
pub mod kubeadm_config;
pub mod membership;
pub mod quorum;
pub mod roll;
pub mod rotate;
pub mod run;
pub mod succession;
pub mod version;
