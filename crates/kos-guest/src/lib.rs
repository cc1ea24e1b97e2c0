//! kos-guest: the simulated guest. It does to a booted server what a real node does with kos's
//! user_data, as a **test oracle**: it shares no code with kos-bootstrap (the renderer), so a
//! misreading of cloud-init, kubeadm or the kubelet cannot hide by agreeing with itself.
//!
//! # Overview
//! - [`Guest`] holds every simulated server and the clusters they make. The host feeds it
//!   [`ServerEvent`]s with [`Guest::handle`] and lets time pass with [`Guest::tick`].
//! - [`Host`] is the seam (module [`seam`]): the host's clock, the console, and which servers an
//!   endpoint reaches from a server. [`sim::SimGuests`] implements it over kos-sim's cloud (as
//!   kos-sim's guest runtime); the tests implement it in memory ([`testing`]).
//! - On [`ServerEvent::Boot`], [`cloud_init`] decodes the user_data (gzip, MIME multipart),
//!   renders `## template: jinja` with the `v1.*` instance data, and runs `write_files` and
//!   `runcmd` with cloud-init's semantics into the node's [`vfs::Vfs`]. Unknown keys, unsupported
//!   parts and commands are reported ([`log::Logged::Reported`] and a console line), never dropped.
//! - A runcmd of kos's bootstrap script starts its steps ([`bootstrap`]), read from the script the
//!   node was given; a step the guest does not know fails with "not simulated". Each step writes the
//!   marker the real script writes (`kos-bootstrap: <step> ok|failed: <reason>`).
//! - `kubeadm init|join` ([`kubeadm`]) parse their config strictly against kubeadm's v1beta4 Go
//!   types, validate it, and act on a [`cluster::Cluster`]: a `kos_kube_fake::FakeKube` holding the
//!   Secrets, ConfigMaps, Nodes and addon objects, plus the cluster's identity (CA hash) and etcd
//!   membership. `--upload-certs` really encrypts `kubeadm-certs` (AES-256-GCM). The cluster's
//!   version is its `kube-system/kubeadm-config` ClusterConfiguration's, read by every join; each
//!   control plane runs the version of the static pods it wrote ([`static_pods`]), and what breaks
//!   the version skew policy is reported ([`skew`]).
//! - The kubelet ([`kubelet`]) registers the Node (name, providerID, labels, taints including
//!   `node.cloudprovider.kubernetes.io/uninitialized`) and keeps its Ready condition; on control
//!   planes it creates the mirror pods of kubeadm's static pods (`etcd-<node>`, ...).
//! - Attached to kos-sim, each member's etcd serves etcd's JSON gateway over TLS with client
//!   certificates from the etcd CA, reached through `pods/portforward` of `etcd-<node>`
//!   ([`sim::etcd`]); `GET /_sim/clusters` reports nodes, members and invariant violations
//!   ([`sim::invariants`]).
//!
//! # What is a stand-in
//! - The internet ([`internet`]) knows only the pinned CNI manifest URLs and their real sha256; it
//!   cannot have their content, so applying a CNI creates its DaemonSet in kube-system as a stand-in
//!   and makes the nodes' network ready.
//! - A CA kubeadm generates (none on disk) is a random hash: nothing can pin it.
//! - Clusters' APIs are in-process fakes (kos-kube-fake); attached to kos-sim ([`sim`]), each
//!   control plane serves its cluster's over TLS with a certificate from the cluster's CA, each API
//!   endpoint has a local address on this machine, and the cloud controller runs in-process.
//!
//! # Example
//! ```no_run
//! # fn demo(host: &dyn kos_guest::Host, user_data: Vec<u8>) -> Result<(), kos_guest::GuestError> {
//! use kos_guest::{Boot, Guest, Image, Metadata, ServerEvent, ServerId};
//!
//! let mut guest = Guest::new();
//! let id = ServerId::from("9f1c...");
//! let boot = Boot {
//!     metadata: Metadata {
//!         instance_id: id.0.clone(),
//!         local_hostname: "kos-demo-cp-0".into(),
//!         availability_zone: "nova".into(),
//!         region: "RegionOne".into(),
//!     },
//!     user_data: Some(user_data),
//!     image: Image::ubuntu(),
//!     addresses: vec![std::net::IpAddr::from([10, 0, 0, 5])],
//!     config_drive: true,
//! };
//! guest.handle(&id, ServerEvent::Boot(Box::new(boot)), host)?;
//! // Later, whenever the host's clock moved:
//! guest.tick(host)?;
//! println!("{:?}", guest.markers(&id));
//! # Ok(()) }
//! ```

pub mod bootstrap;
pub mod certificates;
pub mod cloud_init;
pub mod cluster;
pub mod error;
pub mod firewall;
mod guest;
pub mod internet;
pub mod kubeadm;
pub mod kubelet;
pub mod log;
pub mod persist;
pub mod pki;
pub mod proxy;
pub mod seam;
pub mod sim;
pub mod skew;
pub mod static_pods;
pub mod testing;
pub mod version;
pub mod vfs;

pub use cluster::{Cluster, ClusterId, EtcdMember};
pub use error::GuestError;
pub use guest::{Guest, MetadataView, Power, ProgramState, marker};
pub use log::{Entry, Logged};
pub use seam::{Boot, Host, Image, Metadata, ServerEvent, ServerId};
pub use version::Version;
