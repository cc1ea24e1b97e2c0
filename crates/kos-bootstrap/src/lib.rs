//! kos-bootstrap renders every node's complete bootstrap before any server boots, so control planes and
//! workers boot in parallel and nothing logs into a machine: PKI and tokens, kubeadm configuration,
//! cloud-init user-data with one bootstrap script, addon manifests and an admin kubeconfig.
//!
//! Pure: no IO, no clock, no logging. Randomness is taken from the caller (key material excepted, which
//! aws-lc-rs draws itself); time is passed in. Secrets are [`Sensitive`] and print as `***`.

/// Cluster addons (CNI pin, cloud-config Secret, CCM, cinder-csi, StorageClass) and how they are delivered.
pub mod addons;
/// Mirrors and a proxy for air-gapped clouds; the list of what nodes fetch.
pub mod airgap;
/// cloud-init user-data per node.
pub mod cloud_init;
/// kubeadm's upload-certs, made by kos for control planes that join a running cluster.
pub mod copycerts;
/// Encryption at rest: the keys and kube-apiserver's EncryptionConfiguration.
pub mod encryption;
/// The error type.
pub mod error;
/// Inputs: the cluster and its nodes.
pub mod input;
/// Typed kubeadm configuration (v1beta3 and v1beta4).
pub mod kubeadm;
/// The offline-signed admin kubeconfig.
pub mod kubeconfig;
/// CAs, key pairs, client certificates and the discovery hash.
pub mod pki;
/// A string that prints as `***`.
pub mod secret;
/// The cluster's secrets and their stored bundle.
pub mod secrets;
/// Nova's user-data limit, gzip.
pub mod size;
/// Bootstrap tokens and the certificate key.
pub mod token;
/// The YAML writer.
pub mod yaml;

pub use addons::{Manifest, bootstrap_token_secret, render_addons};
pub use airgap::{Airgap, Artefact, Proxy, artefacts, artefacts_for};
pub use cloud_init::{UserData, render_user_data};
pub use encryption::{Encryption, EncryptionKey};
pub use error::{Error, Result};
pub use input::{
    ApiEndpoint, Ccm, CloudConf, ClusterInput, Cni, Csi, KubeVersion, ManifestPin, NodeInput,
    PkiDelivery, Role, Taint, TaintEffect,
};
pub use kubeadm::render_kubeadm;
pub use kubeconfig::render_kubeconfig;
pub use secret::Sensitive;
pub use secrets::{ClusterSecrets, DEFAULT_TOKEN_TTL};
