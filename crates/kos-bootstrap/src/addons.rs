//! Cluster addons: the CNI pin, the `cloud-config` Secret, the OpenStack CCM (upstream's or kos-ccm),
//! the CSI driver (cinder-csi or kos-csi) and a default StorageClass.
//!
//! # Delivery
//! The first control plane applies them itself once its API answers, so clusters whose API is not reachable
//! from the workstation work too. They travel in that node's user-data (compressed with the rest):
//! measured, the CCM, CSI, Secret and StorageClass manifests are about 15 KB raw, under 3 KB of gzip, and
//! the whole first-control-plane user-data stays far below Nova's limit (see the size tests). The CNI is
//! different: its manifest (Calico ≈ 300 KB) is never carried; the node downloads it from the pinned URL
//! and checks its sha256 before `kubectl apply`. [`render_addons`] returns the same manifests so the CLI
//! can (re-)apply them through the API, e.g. to roll a new credential; applying twice is harmless.
//!
//! # Snapshots
//! With a CSI driver come external-snapshotter's VolumeSnapshot CRDs (upstream's files, unchanged),
//! its snapshot-controller, the driver's csi-snapshotter sidecar and a default VolumeSnapshotClass.
//! A custom resource cannot go in the same `kubectl apply` as its definition (kubectl finds no such
//! kind until the CRD is established), so the manifests come in three stages the script applies in
//! order: the top directory, then [`CRDS_DIR`] (waited for until established), then [`CRS_DIR`].
//! `kubectl apply -f DIR` does not descend into subdirectories.

use std::collections::BTreeMap;
use std::fmt;

use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::input::{Ccm, ClusterInput, Cni, Csi, ManifestPin};
use crate::{ClusterSecrets, Error, Result, Sensitive};

/// One manifest file (possibly several YAML documents), named for the order it is applied in.
#[derive(Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    /// The YAML; secret because the `cloud-config` Secret and the bootstrap-token Secret carry credentials.
    pub yaml: Sensitive,
}

impl fmt::Debug for Manifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Manifest({}, {} bytes)",
            self.name,
            self.yaml.expose().len()
        )
    }
}

/// One CNI entry of the pins table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CniPin {
    pub version: String,
    pub url: String,
    pub sha256: String,
    /// False until someone checked the sha256 against the real download: validation and the script
    /// then refuse it.
    pub verified: bool,
    /// A pod network the manifest hard-codes and the script rewrites to the cluster's (empty: none).
    pub pod_cidr_default: String,
    /// An image the manifest names without a tag, and the tag the script gives it.
    #[serde(default)]
    pub pin_image: Option<ImagePin>,
    /// The tagged images the manifest names, for `kos artefacts` (a mirror must hold them).
    #[serde(default)]
    pub images: Vec<String>,
}

impl CniPin {
    /// Whether the table vouches for this manifest: a verified checksum of a real URL.
    #[must_use]
    pub fn vouched(&self) -> bool {
        self.verified && !self.url.is_empty()
    }
}

/// An untagged image reference of a manifest and the release tag it gets.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagePin {
    pub name: String,
    pub tag: String,
}

/// The images that follow the cluster's minor: cloud-provider-openstack's release of that minor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinorImages {
    pub openstack_cloud_controller_manager: String,
    pub cinder_csi_plugin: String,
    /// cluster-autoscaler of the same minor (kos-operator installs it for autoscaled pools).
    pub cluster_autoscaler: String,
    /// What kubeadm of this minor pulls besides the control plane's images.
    pub kubeadm: KubeadmTable,
}

/// kubeadm's own image tags for the patches of one minor (`kubeadm config images list`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeadmTable {
    /// The newest patch whose kubeadm was read.
    pub read_through: u32,
    /// Oldest first; a row holds from its `from` patch until the next row's.
    pub rows: Vec<KubeadmImages>,
}

/// The tags of etcd, CoreDNS and the pause image that kubeadm of a release uses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeadmImages {
    pub from: u32,
    pub etcd: String,
    pub coredns: String,
    pub pause: String,
}

/// [`KubeadmImages`] for one release, and whether that release's kubeadm was read or is assumed
/// to keep the newest row read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeadmTags<'a> {
    pub images: &'a KubeadmImages,
    pub read: bool,
}

/// The Kubernetes releases kos supports.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesPins {
    /// The newest patch of the newest minor: what new specs and the examples use.
    pub default: String,
    /// The supported minors (of 1.x) and their images.
    pub minors: BTreeMap<u32, MinorImages>,
}

/// The images that do not depend on the cluster's minor (cinder-csi's sidecars).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Images {
    pub csi_attacher: String,
    pub csi_provisioner: String,
    pub csi_resizer: String,
    pub csi_node_driver_registrar: String,
    pub livenessprobe: String,
    pub csi_snapshotter: String,
    /// external-snapshotter's controller, installed with either CSI driver.
    pub snapshot_controller: String,
}

/// The pins table (`src/pins.yaml`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    pub kubernetes: KubernetesPins,
    pub cni: BTreeMap<String, CniPin>,
    pub images: Images,
}

const PINS: &str = include_str!("pins.yaml");

impl Pins {
    /// The built-in table, parsed once.
    pub fn builtin() -> Result<&'static Self> {
        static TABLE: std::sync::OnceLock<std::result::Result<Pins, String>> =
            std::sync::OnceLock::new();
        TABLE
            .get_or_init(|| serde_saphyr::from_str(PINS).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Pins(e.clone()))
    }

    /// The CNI manifest to apply: the cluster's own pin (trusted as verified) or the table's entry.
    pub fn cni_for(&self, cni: Cni, own: Option<&ManifestPin>) -> Result<CniPin> {
        let entry = self
            .cni
            .get(cni.key())
            .ok_or_else(|| Error::Pins(format!("no entry for CNI {}", cni.key())))?;
        Ok(match own {
            Some(pin) => CniPin {
                version: "custom".into(),
                url: pin.url.clone(),
                sha256: pin.sha256.clone(),
                verified: true,
                pod_cidr_default: entry.pod_cidr_default.clone(),
                pin_image: None,
                // The user's manifest names images kos does not know.
                images: Vec::new(),
            },
            None => entry.clone(),
        })
    }

    /// Whether the table vouches for `cni`'s manifest (a verified checksum of a real URL).
    pub fn cni_verified(&self, cni: Cni) -> bool {
        self.cni.get(cni.key()).is_some_and(CniPin::vouched)
    }

    /// The images of a Kubernetes minor, `None` when kos does not support it.
    pub fn images_for(&self, minor: u32) -> Option<&MinorImages> {
        self.kubernetes.minors.get(&minor)
    }

    /// The tags kubeadm of `v` uses for etcd, CoreDNS and pause; `None` for an unsupported minor.
    pub fn kubeadm_images(&self, v: crate::KubeVersion) -> Option<KubeadmTags<'_>> {
        let table = &self.images_for(v.minor)?.kubeadm;
        let images = table.rows.iter().rev().find(|r| r.from <= v.patch)?;
        Some(KubeadmTags {
            images,
            read: v.patch <= table.read_through,
        })
    }

    /// The supported minors, oldest first.
    pub fn supported_minors(&self) -> impl Iterator<Item = u32> + '_ {
        self.kubernetes.minors.keys().copied()
    }
}

/// gcfg quoting: values are double-quoted, `\` and `"` escaped (validation already refused newlines).
fn gcfg(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Where the `cloud-config` Secret is mounted in the CCM and cinder-csi pods (every manifest mounts it
/// there), so its `ca.crt` key is this file.
pub const CA_FILE: &str = "/etc/config/ca.crt";

/// The `cloud.conf` shared by the CCM and cinder-csi, as a careful operator writes it:
/// - `manage-security-groups`: each Service's NodePorts are opened on the nodes' ports for what its
///   load balancer really sends from (the amphora's address on the member subnet, or with OVN the
///   clients themselves, limited to `loadBalancerSourceRanges`): `sg-node` admits NodePorts only from
///   other nodes, so without it no Service load balancer reaches its members;
/// - `lb-provider` when the Services' provider is not the cloud's default, with `SOURCE_IP_PORT`
///   for OVN (the only algorithm it has; the CCM's default ROUND_ROBIN is refused there);
/// - `ca-file` when the cloud's clouds.yaml needs a `cacert`: the CA travels in the same Secret.
pub fn cloud_conf(cluster: &ClusterInput) -> Sensitive {
    let c = &cluster.cloud;
    let mut global = format!(
        "[Global]\nauth-url = {}\nregion = {}\napplication-credential-id = {}\napplication-credential-secret = {}\n",
        gcfg(&c.auth_url),
        gcfg(&c.region),
        gcfg(&c.application_credential_id),
        gcfg(c.application_credential_secret.expose_secret()),
    );
    if c.ca_cert.is_some() {
        global.push_str(&format!("ca-file = {}\n", gcfg(CA_FILE)));
    }
    let mut lb = format!(
        "[LoadBalancer]\nfloating-network-id = {}\nsubnet-id = {}\nmanage-security-groups = true\n",
        gcfg(&c.floating_network_id),
        gcfg(&c.subnet_id),
    );
    if let Some(provider) = &c.lb_provider {
        lb.push_str(&format!("lb-provider = {}\n", gcfg(provider)));
        if provider == "ovn" {
            lb.push_str("lb-method = \"SOURCE_IP_PORT\"\n");
        }
    }
    let mut bs = String::from(
        "[BlockStorage]\n# upstream's documented default; unset, cinder-csi reports no attach limit at all\nnode-volume-attach-limit = 256\n",
    );
    if c.csi_volume_zone.is_some() {
        // Cinder's zones are not the nodes': a volume is made in the StorageClass's `availability`
        // zone and is reachable from the node that asked for it (its topology is the node's).
        bs.push_str("ignore-volume-az = true\n");
    }
    Sensitive::new(format!("{global}\n{lb}\n{bs}"))
}

/// The default StorageClass, naming the Cinder zone its volumes are made in when the nodes' zones
/// are not Cinder's (`parameters.availability`, read with cloud.conf's `ignore-volume-az`). The
/// parameters go right after the class's `provisioner` line, whatever else the file holds.
fn storage_class(template: &str, zone: Option<&str>) -> Result<String> {
    let Some(z) = zone else {
        return Ok(template.to_owned());
    };
    let at = template
        .find("\nprovisioner:")
        .and_then(|i| template[i + 1..].find('\n').map(|j| i + 1 + j + 1))
        .ok_or_else(|| Error::Pins("the StorageClass template has no provisioner line".into()))?;
    // A JSON string is a YAML scalar: the zone is quoted whatever it holds.
    let params = format!(
        "parameters:\n  availability: {}\n",
        serde_json::Value::from(z)
    );
    Ok(format!("{}{params}{}", &template[..at], &template[at..]))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: String,
    namespace: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Secret<V> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta,
    #[serde(rename = "type")]
    type_: &'static str,
    string_data: BTreeMap<&'static str, V>,
}

fn secret_yaml<V: Serialize>(
    name: String,
    type_: &'static str,
    data: BTreeMap<&'static str, V>,
) -> Result<Sensitive> {
    let s = Secret {
        api_version: "v1",
        kind: "Secret",
        metadata: Meta {
            name,
            namespace: "kube-system".into(),
        },
        type_,
        string_data: data,
    };
    crate::yaml::to_string(&s).map(Sensitive::new)
}

/// The `kube-system/cloud-config` Secret the CCM and cinder-csi mount.
pub fn cloud_config_secret(cluster: &ClusterInput) -> Result<Manifest> {
    let mut data = BTreeMap::from([(
        "cloud.conf",
        serde_saphyr::LitString(cloud_conf(cluster).expose().to_string()),
    )]);
    if let Some(ca) = &cluster.cloud.ca_cert {
        data.insert("ca.crt", serde_saphyr::LitString(ca.clone()));
    }
    Ok(Manifest {
        name: "00-cloud-config-secret.yaml".into(),
        yaml: secret_yaml("cloud-config".into(), "Opaque", data)?,
    })
}

/// The bootstrap-token Secret for `secrets.token`, as kubeadm would create it. The CLI applies it through
/// the API after a re-run refreshed an expired token, so re-provisioned nodes can join.
pub fn bootstrap_token_secret(secrets: &ClusterSecrets) -> Result<Manifest> {
    let t = &secrets.token;
    let expiration = t
        .expires
        .format(&Rfc3339)
        .map_err(|_| Error::invalid("token expiry", "cannot be written as RFC 3339"))?;
    let plain = |s: &str| s.to_string();
    let data = BTreeMap::from([
        ("description", plain("kos bootstrap token")),
        ("token-id", plain(&t.id)),
        ("token-secret", plain(t.secret.expose())),
        ("expiration", plain(&expiration)),
        ("usage-bootstrap-authentication", plain("true")),
        ("usage-bootstrap-signing", plain("true")),
        (
            "auth-extra-groups",
            plain("system:bootstrappers:kubeadm:default-node-token"),
        ),
    ]);
    Ok(Manifest {
        name: format!("bootstrap-token-{}.yaml", t.id),
        yaml: secret_yaml(
            format!("bootstrap-token-{}", t.id),
            "bootstrap.kubernetes.io/token",
            data,
        )?,
    })
}

fn fill(template: &str, vars: &[(&str, &str)]) -> Result<String> {
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("@{k}@"), v);
    }
    if out
        .split('@')
        .skip(1)
        .any(|seg| !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
    {
        return Err(Error::Pins(
            "a manifest template has an unfilled @PLACEHOLDER@".into(),
        ));
    }
    Ok(out)
}

/// Every addon manifest, in apply order: Secret, CCM, CSI driver, StorageClass, snapshot-controller,
/// then (in their subdirectories) the VolumeSnapshot CRDs and the default VolumeSnapshotClass.
pub fn render_addons(cluster: &ClusterInput) -> Result<Vec<Manifest>> {
    cluster.validate()?;
    let pins = Pins::builtin()?;
    let i = &pins.images;
    let minor = cluster.kubernetes_version.minor;
    let m = pins.images_for(minor).ok_or_else(|| {
        Error::invalid(
            "kubernetes version",
            format!(
                "{} has no images in the pins table",
                cluster.kubernetes_version
            ),
        )
    })?;
    let ccm_image = match &cluster.ccm {
        Ccm::Upstream => m.openstack_cloud_controller_manager.as_str(),
        Ccm::Kos { image } => image.as_str(),
    };
    // Only the kos-csi template names it.
    let kos_csi_image = match &cluster.csi {
        Csi::Kos { image } => image.as_str(),
        Csi::Cinder | Csi::None => "",
    };
    let vars = [
        ("CLUSTER_NAME", cluster.name.as_str()),
        ("CCM_IMAGE", ccm_image),
        ("CINDER_CSI_IMAGE", m.cinder_csi_plugin.as_str()),
        ("KOS_CSI_IMAGE", kos_csi_image),
        ("CSI_ATTACHER_IMAGE", i.csi_attacher.as_str()),
        ("CSI_PROVISIONER_IMAGE", i.csi_provisioner.as_str()),
        ("CSI_RESIZER_IMAGE", i.csi_resizer.as_str()),
        (
            "CSI_NODE_DRIVER_REGISTRAR_IMAGE",
            i.csi_node_driver_registrar.as_str(),
        ),
        ("LIVENESSPROBE_IMAGE", i.livenessprobe.as_str()),
        ("CSI_SNAPSHOTTER_IMAGE", i.csi_snapshotter.as_str()),
        ("SNAPSHOT_CONTROLLER_IMAGE", i.snapshot_controller.as_str()),
    ];
    let file = |name: &str, template: &str| -> Result<Manifest> {
        Ok(Manifest {
            name: name.into(),
            yaml: Sensitive::new(fill(template, &vars)?),
        })
    };
    let mut manifests = vec![
        cloud_config_secret(cluster)?,
        match cluster.ccm {
            Ccm::Upstream => file(
                "10-openstack-cloud-controller-manager.yaml",
                include_str!("addons/ccm.yaml"),
            )?,
            Ccm::Kos { .. } => file("10-kos-ccm.yaml", include_str!("addons/kos-ccm.yaml"))?,
        },
    ];
    // kos-csi is the same driver (`cinder.csi.openstack.org`): the same StorageClass serves it.
    let driver = match cluster.csi {
        Csi::Cinder => Some(file(
            "20-cinder-csi.yaml",
            include_str!("addons/cinder-csi.yaml"),
        )?),
        Csi::Kos { .. } => Some(file(
            "20-kos-csi.yaml",
            include_str!("addons/kos-csi.yaml"),
        )?),
        Csi::None => None,
    };
    if let Some(driver) = driver {
        manifests.push(driver);
        let class = fill(include_str!("addons/storageclass.yaml"), &vars)?;
        manifests.push(Manifest {
            name: "30-storageclass.yaml".into(),
            yaml: Sensitive::new(storage_class(
                &class,
                cluster.cloud.csi_volume_zone.as_deref(),
            )?),
        });
        manifests.push(file(
            "40-snapshot-controller.yaml",
            include_str!("addons/snapshot-controller.yaml"),
        )?);
        // Upstream's generated files, byte for byte: no template, nothing to fill.
        for (name, yaml) in SNAPSHOT_CRDS {
            manifests.push(Manifest {
                name: format!("{CRDS_DIR}/{name}"),
                yaml: Sensitive::new(yaml.to_string()),
            });
        }
        manifests.push(file(
            &format!("{CRS_DIR}/50-volumesnapshotclass.yaml"),
            include_str!("addons/volumesnapshotclass.yaml"),
        )?);
    }
    Ok(manifests)
}

/// The subdirectory of the addons whose CustomResourceDefinitions are applied after the top
/// directory's manifests and waited for until established.
pub const CRDS_DIR: &str = "crds";
/// The subdirectory of the addons whose custom resources are applied once [`CRDS_DIR`]'s are served.
pub const CRS_DIR: &str = "crs";

/// external-snapshotter's v1 CRDs at the release of the pinned snapshot-controller (`pins.yaml`).
pub const SNAPSHOT_CRDS: [(&str, &str); 3] = [
    (
        "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
        include_str!("addons/snapshot/snapshot.storage.k8s.io_volumesnapshotclasses.yaml"),
    ),
    (
        "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
        include_str!("addons/snapshot/snapshot.storage.k8s.io_volumesnapshotcontents.yaml"),
    ),
    (
        "snapshot.storage.k8s.io_volumesnapshots.yaml",
        include_str!("addons/snapshot/snapshot.storage.k8s.io_volumesnapshots.yaml"),
    ),
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pins_table_is_consistent() {
        let pins = Pins::builtin().unwrap();
        for cni in [Cni::Calico, Cni::Cilium, Cni::Flannel, Cni::KubeRouter] {
            let p = pins.cni_for(cni, None).unwrap();
            assert!(
                p.url.is_empty() || p.url.starts_with("https://"),
                "{}",
                cni.key()
            );
            if p.verified {
                assert!(p.sha256.len() == 64 && p.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
            } else {
                // An unverified entry carries no hash at all: nothing that looks trustworthy.
                assert!(p.sha256.is_empty(), "{}", cni.key());
            }
        }
        let own = ManifestPin {
            url: "https://example.com/cni.yaml".into(),
            sha256: "a".repeat(64),
        };
        let p = pins.cni_for(Cni::Flannel, Some(&own)).unwrap();
        assert!(p.verified);
        assert_eq!(p.pod_cidr_default, "10.244.0.0/16");
    }

    /// The built-in CNIs a real cluster gets are the verified releases of research/cni-pins.md, each
    /// manifest at its release tag; only cilium (no static manifest upstream) has none.
    #[test]
    fn builtin_cnis_are_verified_releases_but_cilium() {
        let pins = Pins::builtin().unwrap();
        for (cni, version, sha) in [
            (
                Cni::Calico,
                "v3.32.1",
                "a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744",
            ),
            (
                Cni::Flannel,
                "v0.28.9",
                "e875824be2f552b45711dbda91af81b17eb961d00025d914d9fef18fad8f09c0",
            ),
            (
                Cni::KubeRouter,
                "v2.11.1",
                "847b9b7a47c31d8e10149f5b4d94c78ea214d1c1d70df1640744ae21b0b9121a",
            ),
        ] {
            let p = pins.cni_for(cni, None).unwrap();
            assert!(pins.cni_verified(cni), "{}", cni.key());
            assert_eq!((p.version.as_str(), p.sha256.as_str()), (version, sha));
            assert!(
                p.url.starts_with("https://raw.githubusercontent.com/")
                    && p.url.contains(&format!("/{version}/")),
                "{}: the manifest must be the file at the release tag",
                p.url
            );
        }
        assert!(!pins.cni_verified(Cni::Cilium));
        // kube-router's manifest names its image untagged: the pin gives it the release's tag.
        let kr = pins.cni_for(Cni::KubeRouter, None).unwrap();
        assert_eq!(
            kr.pin_image,
            Some(ImagePin {
                name: "docker.io/cloudnativelabs/kube-router".into(),
                tag: "v2.11.1".into()
            })
        );
    }

    /// Three consecutive minors, the default the newest of them, and the CCM and cinder-csi of each
    /// minor's own cloud-provider-openstack release.
    #[test]
    fn kubernetes_minors_carry_their_own_cloud_provider_release() {
        let pins = Pins::builtin().unwrap();
        let minors: Vec<u32> = pins.supported_minors().collect();
        assert_eq!(minors.len(), 3);
        assert!(minors.windows(2).all(|w| w[1] == w[0] + 1), "{minors:?}");
        let default: crate::KubeVersion = pins.kubernetes.default.parse().unwrap();
        assert_eq!(Some(&default.minor), minors.last());
        for minor in minors {
            let m = pins.images_for(minor).unwrap();
            let tag = format!(":v1.{minor}.");
            assert!(
                m.openstack_cloud_controller_manager.contains(&tag)
                    && m.cinder_csi_plugin.contains(&tag)
                    && m.cluster_autoscaler.contains(&tag),
                "{m:?}"
            );
        }
    }

    /// Each minor's kubeadm rows start at patch 0, ascend, and carry tags shaped as registry.k8s.io
    /// names them; a patch past the newest read keeps the last row and says it was not read.
    #[test]
    fn kubeadm_images_cover_every_patch_of_each_minor() {
        let pins = Pins::builtin().unwrap();
        for minor in pins.supported_minors() {
            let t = &pins.images_for(minor).unwrap().kubeadm;
            assert_eq!(t.rows.first().map(|r| r.from), Some(0), "1.{minor}");
            assert!(
                t.rows.windows(2).all(|w| w[0].from < w[1].from),
                "1.{minor}"
            );
            for r in &t.rows {
                assert!(
                    r.etcd.ends_with("-0") && r.coredns.starts_with('v'),
                    "{r:?}"
                );
                assert!(!r.pause.starts_with('v'), "{r:?}");
            }
        }
        let v = |s: &str| s.parse::<crate::KubeVersion>().unwrap();
        let at = |s: &str| pins.kubeadm_images(v(s)).unwrap();
        assert_eq!(at("1.34.1").images.etcd, "3.6.4-0");
        assert_eq!(at("1.34.2").images.etcd, "3.6.5-0");
        assert!(at("1.34.10").read);
        let newest = at("1.36.99");
        assert_eq!(newest.images.pause, "3.10.2");
        assert!(!newest.read);
        let old = crate::KubeVersion {
            major: 1,
            minor: 20,
            patch: 0,
        };
        assert!(pins.kubeadm_images(old).is_none());
    }

    #[test]
    fn templates_fill_every_placeholder() {
        assert!(fill("a: @X@\n", &[]).is_err());
        assert_eq!(
            fill("a: @X@ b@sha256:1\n", &[("X", "1")]).unwrap(),
            "a: 1 b@sha256:1\n"
        );
    }
}
