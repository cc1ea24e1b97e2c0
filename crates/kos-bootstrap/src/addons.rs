//! Cluster addons: the CNI pin, the `cloud-config` Secret, the OpenStack CCM, cinder-csi and a default
//! StorageClass.
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
//! The cinder-csi snapshotter sidecar is left out: it needs the VolumeSnapshot CRDs, which nothing
//! installs yet, and would crash-loop without them.

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
    /// False until someone checked the sha256 against the real download: the script then refuses it.
    pub verified: bool,
    /// A pod network the manifest hard-codes and the script rewrites to the cluster's (empty: none).
    pub pod_cidr_default: String,
}

/// The pinned images.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Images {
    pub openstack_cloud_controller_manager: String,
    pub cinder_csi_plugin: String,
    pub csi_attacher: String,
    pub csi_provisioner: String,
    pub csi_resizer: String,
    pub csi_node_driver_registrar: String,
    pub livenessprobe: String,
}

/// The pins table (`src/pins.yaml`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    pub cni: BTreeMap<String, CniPin>,
    pub images: Images,
}

const PINS: &str = include_str!("pins.yaml");

impl Pins {
    /// The built-in table.
    pub fn builtin() -> Result<Self> {
        serde_saphyr::from_str(PINS).map_err(|e| Error::Pins(e.to_string()))
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
            },
            None => entry.clone(),
        })
    }
}

/// gcfg quoting: values are double-quoted, `\` and `"` escaped (validation already refused newlines).
fn gcfg(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The `cloud.conf` shared by the CCM and cinder-csi.
pub fn cloud_conf(cluster: &ClusterInput) -> Sensitive {
    let c = &cluster.cloud;
    Sensitive::new(format!(
        "[Global]\nauth-url = {}\nregion = {}\napplication-credential-id = {}\napplication-credential-secret = {}\n\n\
         [LoadBalancer]\nfloating-network-id = {}\nsubnet-id = {}\n\n\
         [BlockStorage]\n# upstream's documented default; unset, cinder-csi reports no attach limit at all\nnode-volume-attach-limit = 256\n",
        gcfg(&c.auth_url),
        gcfg(&c.region),
        gcfg(&c.application_credential_id),
        gcfg(c.application_credential_secret.expose_secret()),
        gcfg(&c.floating_network_id),
        gcfg(&c.subnet_id),
    ))
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
    let data = BTreeMap::from([(
        "cloud.conf",
        serde_saphyr::LitString(cloud_conf(cluster).expose().to_string()),
    )]);
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

/// Every addon manifest, in apply order: Secret, CCM, cinder-csi, StorageClass.
pub fn render_addons(cluster: &ClusterInput) -> Result<Vec<Manifest>> {
    cluster.validate()?;
    let pins = Pins::builtin()?;
    let i = &pins.images;
    let ccm_image = match &cluster.ccm {
        Ccm::Upstream => i.openstack_cloud_controller_manager.as_str(),
        Ccm::Kos { image } => image.as_str(),
    };
    let vars = [
        ("CLUSTER_NAME", cluster.name.as_str()),
        ("CCM_IMAGE", ccm_image),
        ("CINDER_CSI_IMAGE", i.cinder_csi_plugin.as_str()),
        ("CSI_ATTACHER_IMAGE", i.csi_attacher.as_str()),
        ("CSI_PROVISIONER_IMAGE", i.csi_provisioner.as_str()),
        ("CSI_RESIZER_IMAGE", i.csi_resizer.as_str()),
        (
            "CSI_NODE_DRIVER_REGISTRAR_IMAGE",
            i.csi_node_driver_registrar.as_str(),
        ),
        ("LIVENESSPROBE_IMAGE", i.livenessprobe.as_str()),
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
    match cluster.csi {
        Csi::Cinder => {
            manifests.push(file(
                "20-cinder-csi.yaml",
                include_str!("addons/cinder-csi.yaml"),
            )?);
            manifests.push(file(
                "30-storageclass.yaml",
                include_str!("addons/storageclass.yaml"),
            )?);
        }
        Csi::None => {}
    }
    Ok(manifests)
}

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

    #[test]
    fn templates_fill_every_placeholder() {
        assert!(fill("a: @X@\n", &[]).is_err());
        assert_eq!(
            fill("a: @X@ b@sha256:1\n", &[("X", "1")]).unwrap(),
            "a: 1 b@sha256:1\n"
        );
    }
}
