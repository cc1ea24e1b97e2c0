//! Mirrors and a proxy for clouds whose nodes cannot reach the internet: what a node writes so that
//! containerd pulls from the mirrors (`/etc/containerd/certs.d/<registry>/hosts.toml`), kubeadm names
//! the mirrored images (`imageRepository`), apt and curl fetch from the package and manifest mirrors,
//! and containerd, the kubelet and the bootstrap itself go through the proxy with the cluster's own
//! ranges exempt. Also the list of everything a node fetches ([`artefacts`]), so an operator can fill
//! a mirror from it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::addons::Pins;
use crate::input::{Ccm, ClusterInput, Cni, Csi, KubeVersion, ManifestPin};
use crate::{Error, Result};

/// Where the Kubernetes packages come from without a mirror.
pub const PKGS_K8S_IO: &str = "https://pkgs.k8s.io";
/// kubeadm's default image repository.
pub const REGISTRY_K8S_IO: &str = "registry.k8s.io";
/// containerd's hosts directory (`config_path`).
pub const CERTS_D: &str = "/etc/containerd/certs.d";
/// The mirrors' CA bundle on the node, named by every `hosts.toml` and added to the system's trust.
pub const MIRROR_CA: &str = "/usr/local/share/ca-certificates/kos-mirror.crt";
/// The metadata service, never proxied.
const METADATA_V4: &str = "169.254.169.254";

/// The proxy the nodes go through. Its URLs may carry credentials: `Debug` hides them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Proxy {
    /// For `http://` URLs.
    pub http: Option<String>,
    /// For `https://` URLs.
    pub https: Option<String>,
    /// What the user exempts besides the cluster's own ranges (see [`Airgap::no_proxy`]).
    pub no_proxy: Vec<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("http", &self.http.as_ref().map(|u| redact(u)))
            .field("https", &self.https.as_ref().map(|u| redact(u)))
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

/// `scheme://user:password@host` → `scheme://***@host`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// Where a node fetches from instead of the public internet. `Default`: everything from its public
/// location, no proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Airgap {
    /// A public registry's host (`registry.k8s.io`, `docker.io`, …) → its mirror,
    /// `scheme://host[:port]`, which serves the same repository names.
    pub registries: BTreeMap<String, String>,
    /// PEM certificates the nodes trust for the mirrors.
    pub ca_bundle: Option<String>,
    /// Serves what `https://pkgs.k8s.io` serves, at the same paths.
    pub kubernetes_packages: Option<String>,
    /// The image distribution's apt archive (cloud-init's `apt.primary`).
    pub os_packages: Option<String>,
    /// Its security archive (cloud-init's `apt.security`); `os_packages` when `None`.
    pub os_security_packages: Option<String>,
    /// A manifest's public URL `https://HOST/PATH` is fetched as `<manifests>/HOST/PATH`.
    pub manifests: Option<String>,
    pub proxy: Option<Proxy>,
}

/// `scheme://host[:port]` → `host[:port]`.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

impl Airgap {
    /// Whether a node fetches anything differently from a connected cloud's.
    pub fn is_set(&self) -> bool {
        !self.registries.is_empty()
            || self.kubernetes_packages.is_some()
            || self.os_packages.is_some()
            || self.os_security_packages.is_some()
            || self.manifests.is_some()
            || self.proxy.is_some()
    }

    /// The URL a node fetches a manifest published at `url` from.
    pub fn manifest_url(&self, url: &str) -> String {
        match (&self.manifests, url.split_once("://")) {
            (Some(base), Some((_, rest))) if !url.is_empty() => {
                format!("{}/{rest}", base.trim_end_matches('/'))
            }
            _ => url.to_owned(),
        }
    }

    /// The base of the Kubernetes package repositories (`…/core:/stable:/v1.36/deb/` below it).
    pub fn packages_base(&self) -> String {
        self.kubernetes_packages
            .as_deref()
            .unwrap_or(PKGS_K8S_IO)
            .trim_end_matches('/')
            .to_owned()
    }

    /// kubeadm's `imageRepository`: the registry.k8s.io mirror's `host[:port]`, if mirrored.
    pub fn image_repository(&self) -> Option<String> {
        self.registries
            .get(REGISTRY_K8S_IO)
            .map(|m| authority(m).to_owned())
    }

    /// Where containerd pulls `image` (`registry/name:tag`, Docker Hub's short names included) from.
    pub fn pulled_from(&self, image: &str) -> String {
        let (registry, _) = split_image(image);
        match self.registries.get(registry) {
            Some(m) => format!(
                "{}/{}",
                authority(m),
                &image[image.find('/').map_or(0, |i| i + 1)..]
            ),
            None => image.to_owned(),
        }
    }

    /// `NO_PROXY`: the user's entries, then the cluster's own: the node subnet, pod and service
    /// ranges, the API endpoint's host and certificate names, in-cluster names, loopback and the
    /// metadata service. Nothing of the cluster itself ever goes through the proxy. (The caller puts
    /// the node subnet, which only it knows, into [`Proxy::no_proxy`].)
    pub fn no_proxy(&self, cluster: &ClusterInput) -> String {
        let mut out: Vec<String> = self
            .proxy
            .as_ref()
            .map(|p| p.no_proxy.clone())
            .unwrap_or_default();
        out.push(cluster.pod_cidr.to_string());
        out.push(cluster.service_cidr.to_string());
        out.push(cluster.endpoint.host.clone());
        out.extend(cluster.cert_sans.iter().cloned());
        for fixed in [
            ".svc",
            ".cluster.local",
            "localhost",
            "127.0.0.1",
            "::1",
            METADATA_V4,
        ] {
            out.push(fixed.to_owned());
        }
        let mut seen = std::collections::BTreeSet::new();
        out.retain(|e| seen.insert(e.clone()));
        out.join(",")
    }

    /// containerd's hosts configuration: one `hosts.toml` per mirrored registry (pull from the
    /// mirror), and one per mirror itself (reached directly by name when kubeadm's
    /// `imageRepository` names it), each trusting the CA bundle if given. Path and content.
    pub fn containerd_hosts(&self) -> Vec<(String, String)> {
        let ca = self
            .ca_bundle
            .as_ref()
            .map(|_| format!("  ca = \"{MIRROR_CA}\"\n"))
            .unwrap_or_default();
        let mut out = Vec::new();
        for (registry, mirror) in &self.registries {
            // Docker Hub's API is not served at its short name.
            let server = if registry == "docker.io" {
                "https://registry-1.docker.io".to_owned()
            } else {
                format!("https://{registry}")
            };
            out.push((
                format!("{CERTS_D}/{registry}/hosts.toml"),
                format!(
                    "# kos: {registry}'s images from its mirror\nserver = \"{server}\"\n\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n{ca}"
                ),
            ));
        }
        let mirrors: std::collections::BTreeSet<&String> = self.registries.values().collect();
        for mirror in mirrors {
            let dir = authority(mirror);
            if self.registries.contains_key(dir) {
                continue;
            }
            out.push((
                format!("{CERTS_D}/{dir}/hosts.toml"),
                format!(
                    "# kos: the registry mirror, named directly\nserver = \"{mirror}\"\n\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n{ca}"
                ),
            ));
        }
        out
    }

    /// A systemd drop-in giving a service the proxy's environment; `None` without a proxy.
    pub fn proxy_drop_in(&self, no_proxy: &str) -> Option<String> {
        let p = self.proxy.as_ref()?;
        let mut env = Vec::new();
        if let Some(h) = &p.http {
            env.push(format!("\"HTTP_PROXY={h}\" \"http_proxy={h}\""));
        }
        if let Some(h) = &p.https {
            env.push(format!("\"HTTPS_PROXY={h}\" \"https_proxy={h}\""));
        }
        env.push(format!("\"NO_PROXY={no_proxy}\" \"no_proxy={no_proxy}\""));
        Some(format!(
            "# kos: the cluster's proxy (spec.proxy)\n[Service]\nEnvironment={}\n",
            env.join(" ")
        ))
    }
}

/// `registry`, `rest` of an image reference, Docker Hub's conventions applied (`calico/node` is
/// `docker.io/calico/node`).
fn split_image(image: &str) -> (&str, &str) {
    match image.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first, rest),
        _ => ("docker.io", image),
    }
}

/// What a node fetches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An apt repository (its `Release.key` and packages below it).
    PackageRepository,
    /// A file checked against its sha256.
    Manifest,
    /// A container image.
    Image,
}

/// One thing a node fetches, as fetched and as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artefact {
    pub kind: Kind,
    /// What fetches it: `packages`, `cni`, `kubeadm`, `addons`.
    pub step: &'static str,
    /// The URL or image reference a node uses (after mirroring).
    pub fetched: String,
    /// Where it is published.
    pub origin: String,
    /// The pinned sha256 of its content, for files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// What else a mirror must hold for it (packages, the kubeadm images whose tags kubeadm decides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Everything the cluster's nodes fetch, in bootstrap order: the Kubernetes package repository, the
/// CNI manifest, kubeadm's images, the CNI's and the addons' images.
pub fn artefacts(cluster: &ClusterInput) -> Result<Vec<Artefact>> {
    artefacts_for(
        cluster.kubernetes_version,
        cluster.cni,
        cluster.cni_manifest.as_ref(),
        &cluster.ccm,
        &cluster.csi,
        &cluster.airgap,
    )
}

/// [`artefacts`] from the parts that decide them (no cloud needed).
pub fn artefacts_for(
    version: KubeVersion,
    cni: Cni,
    cni_manifest: Option<&ManifestPin>,
    ccm: &Ccm,
    csi: &Csi,
    a: &Airgap,
) -> Result<Vec<Artefact>> {
    let v = &version;
    let pins = Pins::builtin()?;
    let cni = pins.cni_for(cni, cni_manifest)?;
    let mut out = Vec::new();
    // The OS packages come from the image's distribution archive (its apt sources, or the mirror
    // cloud-init's `apt` module puts in their place): the script's first `apt-get install`.
    const OS_PACKAGES: &str = "apt-transport-https, ca-certificates, curl, gpg, containerd, conntrack, socat, ethtool, iptables and their dependencies";
    const OS_ORIGIN: &str = "the image's distribution archive (http://archive.ubuntu.com/ubuntu, http://deb.debian.org/debian)";
    let security = a.os_security_packages.as_ref().or(a.os_packages.as_ref());
    out.push(Artefact {
        kind: Kind::PackageRepository,
        step: "packages",
        fetched: a
            .os_packages
            .clone()
            .unwrap_or_else(|| OS_ORIGIN.to_owned()),
        origin: OS_ORIGIN.to_owned(),
        sha256: None,
        note: Some(format!(
            "{OS_PACKAGES}, from the suites <release> and <release>-updates of the image's release{}",
            if security.is_some() && a.os_security_packages.is_none() {
                " (and <release>-security)"
            } else {
                ""
            }
        )),
    });
    if let Some(s) = &a.os_security_packages {
        out.push(Artefact {
            kind: Kind::PackageRepository,
            step: "packages",
            fetched: s.clone(),
            origin: "the distribution's security archive (http://security.ubuntu.com/ubuntu, http://security.debian.org/debian-security)".to_owned(),
            sha256: None,
            note: Some("the suite <release>-security".to_owned()),
        });
    }
    let path = format!("/core:/stable:/{}/deb/", v.channel());
    out.push(Artefact {
        kind: Kind::PackageRepository,
        step: "packages",
        fetched: format!("{}{path}", a.packages_base()),
        origin: format!("{PKGS_K8S_IO}{path}"),
        sha256: None,
        note: Some(format!(
            "Release.key, and kubelet, kubeadm, kubectl {v} with their dependencies (cri-tools, kubernetes-cni)"
        )),
    });
    if !cni.url.is_empty() {
        out.push(Artefact {
            kind: Kind::Manifest,
            step: "cni",
            fetched: a.manifest_url(&cni.url),
            origin: cni.url.clone(),
            sha256: Some(cni.sha256.clone()),
            note: None,
        });
    }
    let image = |step: &'static str, origin: String, note: Option<String>| Artefact {
        kind: Kind::Image,
        step,
        fetched: a.pulled_from(&origin),
        origin,
        sha256: None,
        note,
    };
    let repo = a
        .image_repository()
        .unwrap_or_else(|| REGISTRY_K8S_IO.to_owned());
    for name in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    ] {
        out.push(Artefact {
            kind: Kind::Image,
            step: "kubeadm",
            fetched: format!("{repo}/{name}:{}", v.tag()),
            origin: format!("{REGISTRY_K8S_IO}/{name}:{}", v.tag()),
            sha256: None,
            note: None,
        });
    }
    // kubeadm's own images at their registry.k8s.io paths (kos names CoreDNS's repository so a
    // custom `imageRepository` keeps that layout: `kubeadm.rs`).
    let tags = pins.kubeadm_images(version).ok_or_else(|| {
        Error::invalid(
            "kubernetes version",
            format!("{v} has no kubeadm images in the pins table"),
        )
    })?;
    let unread = (!tags.read).then(|| {
        format!(
            "as kubeadm of the newest {}.{} release kos read lists it; confirm with `kubeadm config images list --kubernetes-version {}`",
            v.major,
            v.minor,
            v.tag()
        )
    });
    let k = tags.images;
    for (name, tag) in [
        ("etcd", &k.etcd),
        ("coredns/coredns", &k.coredns),
        ("pause", &k.pause),
    ] {
        out.push(Artefact {
            kind: Kind::Image,
            step: "kubeadm",
            fetched: format!("{repo}/{name}:{tag}"),
            origin: format!("{REGISTRY_K8S_IO}/{name}:{tag}"),
            sha256: None,
            note: unread.clone(),
        });
    }
    for i in &cni.images {
        out.push(image("cni", i.clone(), None));
    }
    if let Some(p) = &cni.pin_image {
        out.push(image("cni", format!("{}:{}", p.name, p.tag), None));
    }
    let m = pins.images_for(v.minor).ok_or_else(|| {
        Error::invalid(
            "kubernetes version",
            format!("{v} has no images in the pins table"),
        )
    })?;
    let ccm = match ccm {
        Ccm::Upstream => m.openstack_cloud_controller_manager.clone(),
        Ccm::Kos { image } => image.clone(),
    };
    out.push(image("addons", ccm, None));
    let driver = match csi {
        Csi::Cinder => Some(&m.cinder_csi_plugin),
        Csi::Kos { image } => Some(image),
        Csi::None => None,
    };
    if let Some(driver) = driver {
        // kos-csi runs with cinder-csi's sidecars; either comes with the snapshot-controller.
        let i = &pins.images;
        for img in [
            driver,
            &i.csi_attacher,
            &i.csi_provisioner,
            &i.csi_resizer,
            &i.csi_node_driver_registrar,
            &i.livenessprobe,
            &i.csi_snapshotter,
            &i.snapshot_controller,
        ] {
            out.push(image("addons", img.clone(), None));
        }
    }
    Ok(out)
}
