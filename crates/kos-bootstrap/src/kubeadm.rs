//! Typed kubeadm configuration, `kubeadm.k8s.io/v1beta4` (every supported Kubernetes release, 1.31 and
//! newer, takes it; v1beta3 is deprecated there). The structs deny unknown fields, so a rendered
//! document parses back only if it is exactly what we meant.

use serde::{Deserialize, Serialize};

use crate::input::{ClusterInput, NodeInput, POOL_LABEL, PkiDelivery, Role, Taint};
use crate::{ClusterSecrets, Error, Result, Sensitive, token::go_duration};

/// The containerd socket the bootstrap script configures.
pub const CRI_SOCKET: &str = "unix:///run/containerd/containerd.sock";
/// Where kubeadm looks for the pre-generated PKI.
pub const CERTIFICATES_DIR: &str = "/etc/kubernetes/pki";
/// cloud-init Jinja placeholders: the instance id and hostname are unknown until Nova answers.
pub const INSTANCE_ID: &str = "{{ v1.instance_id }}";
pub const LOCAL_HOSTNAME: &str = "{{ v1.local_hostname }}";
const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane";
const TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// One `{name, value}` argument (v1beta4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arg {
    pub name: String,
    pub value: String,
}

/// The API version of every document rendered here.
pub const API_VERSION: &str = "kubeadm.k8s.io/v1beta4";

/// Extra arguments, v1beta4's list of `{name, value}`.
pub type ExtraArgs = Vec<Arg>;

fn args(pairs: Vec<(&str, String)>) -> ExtraArgs {
    pairs
        .into_iter()
        .map(|(name, value)| Arg {
            name: name.to_owned(),
            value,
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootstrapTokenSpec {
    pub token: Sensitive,
    pub description: String,
    pub ttl: String,
    pub usages: Vec<String>,
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeTaint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeRegistration {
    pub name: String,
    pub cri_socket: String,
    /// Always written (an empty list means "no taints"; absent would mean kubeadm's default).
    pub taints: Vec<KubeTaint>,
    pub kubelet_extra_args: ExtraArgs,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitConfiguration {
    pub api_version: String,
    pub kind: String,
    pub bootstrap_tokens: Vec<BootstrapTokenSpec>,
    pub node_registration: NodeRegistration,
    pub certificate_key: Sensitive,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Networking {
    pub pod_subnet: String,
    pub service_subnet: String,
    pub dns_domain: String,
}

/// A v1beta4 `HostPathMount`: a host path a control-plane static pod mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostPathMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: bool,
    pub path_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiServer {
    #[serde(rename = "certSANs")]
    pub cert_sans: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: ExtraArgs,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_volumes: Vec<HostPathMount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    pub extra_args: ExtraArgs,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterConfiguration {
    pub api_version: String,
    pub kind: String,
    pub cluster_name: String,
    pub kubernetes_version: String,
    pub control_plane_endpoint: String,
    pub certificates_dir: String,
    pub networking: Networking,
    pub api_server: ApiServer,
    pub controller_manager: Component,
    /// Where kubeadm's images come from: the registry.k8s.io mirror, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// CoreDNS's repository: with a custom `imageRepository` kubeadm drops registry.k8s.io's
    /// `coredns/` level, so it is named here to keep the mirror's layout registry.k8s.io's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dns {
    pub image_repository: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiscoveryToken {
    pub api_server_endpoint: String,
    pub token: Sensitive,
    pub ca_cert_hashes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Discovery {
    pub bootstrap_token: DiscoveryToken,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinControlPlane {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_key: Option<Sensitive>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinConfiguration {
    pub api_version: String,
    pub kind: String,
    pub discovery: Discovery,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<JoinControlPlane>,
    pub node_registration: NodeRegistration,
}

/// `kubelet.config.k8s.io/v1beta1`, uploaded by `kubeadm init` for every node's kubelet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,
    pub cgroup_driver: String,
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: bool,
}

/// The documents of one node, typed.
// Built once per node and rendered right away: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Documents {
    Init {
        init: InitConfiguration,
        cluster: ClusterConfiguration,
        kubelet: KubeletConfiguration,
    },
    Join(JoinConfiguration),
}

fn kubelet_args(node: &NodeInput) -> ExtraArgs {
    let mut labels = node.labels.clone();
    labels.insert(POOL_LABEL.into(), node.pool.clone());
    let labels = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    args(vec![
        ("cloud-provider", "external".into()),
        ("provider-id", format!("openstack:///{INSTANCE_ID}")),
        ("node-labels", labels),
    ])
}

fn taints(role: Role, extra: &[Taint]) -> Vec<KubeTaint> {
    let cp = role.is_control_plane().then(|| KubeTaint {
        key: CONTROL_PLANE_TAINT.into(),
        value: None,
        effect: "NoSchedule".into(),
    });
    cp.into_iter()
        .chain(extra.iter().map(|t| KubeTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().into(),
        }))
        .collect()
}

/// The API server's part of the ClusterConfiguration: with encryption at rest, the flag and the
/// directory the configuration file is in, mounted read-only (joining control planes take both
/// from `kubeadm-config`; their user_data writes the file).
fn api_server(cluster: &ClusterInput, cert_sans: Vec<String>) -> ApiServer {
    use crate::encryption::{CONFIG_DIR, CONFIG_PATH, FLAG, VOLUME};
    let Some(_) = &cluster.encryption else {
        return ApiServer {
            cert_sans,
            extra_args: ExtraArgs::new(),
            extra_volumes: Vec::new(),
        };
    };
    ApiServer {
        cert_sans,
        extra_args: args(vec![(FLAG, CONFIG_PATH.into())]),
        extra_volumes: vec![HostPathMount {
            name: VOLUME.into(),
            host_path: CONFIG_DIR.into(),
            mount_path: CONFIG_DIR.into(),
            read_only: true,
            path_type: "DirectoryOrCreate".into(),
        }],
    }
}

/// The typed documents for one node.
pub fn documents(
    cluster: &ClusterInput,
    node: &NodeInput,
    secrets: &ClusterSecrets,
) -> Result<Documents> {
    cluster.validate()?;
    node.validate()?;
    let api_version = API_VERSION.to_string();
    let registration = NodeRegistration {
        name: LOCAL_HOSTNAME.into(),
        cri_socket: CRI_SOCKET.into(),
        taints: taints(node.role, &node.taints),
        kubelet_extra_args: kubelet_args(node),
    };
    let endpoint = cluster.endpoint.to_string();
    Ok(match node.role {
        Role::InitControlPlane => {
            let mut sans = vec![cluster.endpoint.host.clone()];
            for s in &cluster.cert_sans {
                if !sans.contains(s) {
                    sans.push(s.clone());
                }
            }
            Documents::Init {
                init: InitConfiguration {
                    api_version: api_version.clone(),
                    kind: "InitConfiguration".into(),
                    bootstrap_tokens: vec![BootstrapTokenSpec {
                        token: secrets.token.value(),
                        description: format!("kos bootstrap token for cluster {}", cluster.name),
                        ttl: go_duration(secrets.token.ttl),
                        usages: vec!["signing".into(), "authentication".into()],
                        groups: vec![TOKEN_GROUP.into()],
                    }],
                    node_registration: registration,
                    certificate_key: secrets.certificate_key.clone(),
                },
                cluster: ClusterConfiguration {
                    api_version,
                    kind: "ClusterConfiguration".into(),
                    cluster_name: cluster.name.clone(),
                    kubernetes_version: cluster.kubernetes_version.tag(),
                    control_plane_endpoint: endpoint,
                    certificates_dir: CERTIFICATES_DIR.into(),
                    networking: Networking {
                        pod_subnet: cluster.pod_cidr.to_string(),
                        service_subnet: cluster.service_cidr.to_string(),
                        dns_domain: "cluster.local".into(),
                    },
                    api_server: api_server(cluster, sans),
                    controller_manager: Component {
                        extra_args: args(vec![("cloud-provider", "external".into())]),
                    },
                    image_repository: cluster.airgap.image_repository(),
                    dns: cluster.airgap.image_repository().map(|r| Dns {
                        image_repository: format!("{r}/coredns"),
                    }),
                },
                kubelet: KubeletConfiguration {
                    api_version: "kubelet.config.k8s.io/v1beta1".into(),
                    kind: "KubeletConfiguration".into(),
                    cgroup_driver: "systemd".into(),
                    server_tls_bootstrap: cluster.server_tls_bootstrap,
                },
            }
        }
        Role::JoinControlPlane | Role::Worker => Documents::Join(JoinConfiguration {
            api_version,
            kind: "JoinConfiguration".into(),
            discovery: Discovery {
                bootstrap_token: DiscoveryToken {
                    api_server_endpoint: endpoint,
                    token: secrets.token.value(),
                    ca_cert_hashes: vec![secrets.discovery_hash()?],
                },
            },
            control_plane: (node.role == Role::JoinControlPlane).then(|| JoinControlPlane {
                certificate_key: (cluster.pki_delivery == PkiDelivery::UploadCerts)
                    .then(|| secrets.certificate_key.clone()),
            }),
            node_registration: registration,
        }),
    })
}

use crate::yaml::to_string as to_yaml;

impl Documents {
    /// Multi-document YAML.
    pub fn to_yaml(&self) -> Result<String> {
        let docs = match self {
            Self::Init {
                init,
                cluster,
                kubelet,
            } => vec![to_yaml(init)?, to_yaml(cluster)?, to_yaml(kubelet)?],
            Self::Join(join) => vec![to_yaml(join)?],
        };
        Ok(docs.join("---\n"))
    }

    /// Parses multi-document YAML back into the strict types (the role decides the shape).
    pub fn parse(yaml: &str) -> Result<Self> {
        let docs: Vec<&str> = yaml.split("\n---\n").collect();
        let parse_err = |e: serde_saphyr::Error| Error::Yaml(e.to_string());
        match docs.as_slice() {
            [init, cluster, kubelet] => Ok(Self::Init {
                init: serde_saphyr::from_str(init).map_err(parse_err)?,
                cluster: serde_saphyr::from_str(cluster).map_err(parse_err)?,
                kubelet: serde_saphyr::from_str(kubelet).map_err(parse_err)?,
            }),
            [join] => Ok(Self::Join(serde_saphyr::from_str(join).map_err(parse_err)?)),
            _ => Err(Error::Yaml(format!(
                "expected 1 or 3 documents, got {}",
                docs.len()
            ))),
        }
    }
}

/// The kubeadm configuration (multi-document YAML) for a node. It contains the bootstrap token (and for
/// the first control plane the certificate key).
pub fn render_kubeadm(
    cluster: &ClusterInput,
    node: &NodeInput,
    secrets: &ClusterSecrets,
) -> Result<Sensitive> {
    Ok(Sensitive::new(
        documents(cluster, node, secrets)?.to_yaml()?,
    ))
}
