//! cloud-init user-data per node: a Jinja-templated `#cloud-config` that writes the files and runs the
//! one bootstrap script.
//!
//! The first line is `## template: jinja` so cloud-init fills in `{{ v1.instance_id }}` and
//! `{{ v1.local_hostname }}` (unknown before Nova creates the server). Every other part must therefore be
//! free of Jinja delimiters; [`render_user_data`] checks that instead of letting cloud-init mangle a file.

use std::fmt;

use base64::Engine;
use ipnet::IpNet;
use serde::Serialize;
use serde_saphyr::LitString;

use crate::addons::{Pins, render_addons};
use crate::input::{ClusterInput, NodeInput, PkiDelivery, Role};
use crate::kubeadm::{INSTANCE_ID, LOCAL_HOSTNAME, render_kubeadm};
use crate::{ClusterSecrets, Error, Result, Sensitive, size};

/// Where the script lands and what runcmd runs.
pub const SCRIPT_PATH: &str = "/usr/local/sbin/kos-bootstrap";
/// The bootstrap script, as shipped.
pub const BOOTSTRAP_SCRIPT: &str = include_str!("scripts/bootstrap.sh");
const METADATA_UNIT: &str = include_str!("scripts/kos-metadata-block.service");
/// How many times the first control plane tries `kubeadm init`.
const INIT_ATTEMPTS: u32 = 3;
/// How many times other nodes try `kubeadm join` (backoff 10 s doubling to 120 s, with jitter).
const JOIN_ATTEMPTS: u32 = 8;

/// One file cloud-init writes.
#[derive(Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub permissions: &'static str,
    pub content: Sensitive,
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "File({} {}, {} bytes)",
            self.path,
            self.permissions,
            self.content.expose().len()
        )
    }
}

/// A node's rendered user-data.
#[derive(Clone)]
pub struct UserData {
    /// Which node this is for (used in errors and progress).
    pub node: String,
    /// The files, in the order cloud-init writes them.
    pub files: Vec<File>,
    /// The cloud-config text (a Jinja template), before compression.
    pub text: Sensitive,
    payload: Vec<u8>,
    /// Whether the payload is gzipped.
    pub gzipped: bool,
}

impl fmt::Debug for UserData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserData")
            .field("node", &self.node)
            .field("files", &self.files)
            .field("text_bytes", &self.text.expose().len())
            .field("payload_bytes", &self.payload.len())
            .field("gzipped", &self.gzipped)
            .finish()
    }
}

impl UserData {
    /// The bytes before base64 (gzip or the text itself).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// What goes into Nova's `user_data` field.
    pub fn base64(&self) -> Sensitive {
        Sensitive::new(base64::engine::general_purpose::STANDARD.encode(&self.payload))
    }

    /// Length of [`base64`](Self::base64), compared against [`size::NOVA_USER_DATA_LIMIT`].
    pub fn base64_len(&self) -> usize {
        size::base64_len(self.payload.len())
    }
}

#[derive(Serialize)]
struct WriteFile<'a> {
    path: &'a str,
    owner: &'static str,
    permissions: &'static str,
    content: LitString,
}

#[derive(Serialize)]
struct CloudConfig<'a> {
    /// cloud-init's apt module (`cc_apt_configure`, before runcmd): the OS package mirror.
    #[serde(skip_serializing_if = "Option::is_none")]
    apt: Option<Apt<'a>>,
    write_files: Vec<WriteFile<'a>>,
    runcmd: Vec<Vec<&'static str>>,
}

/// `apt.primary` and `apt.security`: cloud-init writes the distribution's sources from its own
/// template with these archives instead of the image's.
#[derive(Serialize)]
struct Apt<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    primary: Option<[AptArchive<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    security: Option<[AptArchive<'a>; 1]>,
}

#[derive(Serialize)]
struct AptArchive<'a> {
    arches: [&'static str; 1],
    uri: &'a str,
}

impl<'a> Apt<'a> {
    fn of(a: &'a crate::Airgap) -> Option<Apt<'a>> {
        let archive = |uri: &'a String| {
            [AptArchive {
                arches: ["default"],
                uri: uri.as_str(),
            }]
        };
        let primary = a.os_packages.as_ref().map(archive);
        let security = a
            .os_security_packages
            .as_ref()
            .or(a.os_packages.as_ref())
            .map(archive);
        (primary.is_some() || security.is_some()).then_some(Apt { primary, security })
    }
}

fn file(path: impl Into<String>, permissions: &'static str, content: impl Into<String>) -> File {
    File {
        path: path.into(),
        permissions,
        content: Sensitive::new(content.into()),
    }
}

/// Single-quotes a value for a sourced shell file.
fn sh_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
}

fn sysctls(pod_cidr: &IpNet) -> String {
    let mut s = String::from(
        "net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n",
    );
    if pod_cidr.addr().is_ipv6() {
        s.push_str("net.ipv6.conf.all.forwarding = 1\n");
    }
    s
}

/// The per-node parameters the script sources.
pub fn bootstrap_env(
    cluster: &ClusterInput,
    node: &NodeInput,
    secrets: &ClusterSecrets,
) -> Result<String> {
    let pins = Pins::builtin()?;
    let pin = pins.cni_for(cluster.cni, cluster.cni_manifest.as_ref())?;
    // containerd runs pods on kubeadm's own pause image, from kubeadm's repository: one pause for
    // a mirror to hold, and no preflight warning.
    let pause = pins
        .kubeadm_images(cluster.kubernetes_version)
        .map(|t| {
            let repo = cluster
                .airgap
                .image_repository()
                .unwrap_or_else(|| crate::airgap::REGISTRY_K8S_IO.to_owned());
            format!("{repo}/pause:{}", t.images.pause)
        })
        .ok_or_else(|| {
            Error::invalid(
                "kubernetes version",
                format!(
                    "{} has no kubeadm images in the pins table",
                    cluster.kubernetes_version
                ),
            )
        })?;
    let (iptables, metadata) = if cluster.pod_cidr.addr().is_ipv4() {
        ("iptables", "169.254.169.254/32")
    } else {
        ("ip6tables", "fe80::a9fe:a9fe/128")
    };
    let v = &cluster.kubernetes_version;
    let ttl = secrets.token.ttl.as_secs().to_string();
    let (image, image_tag) = pin.pin_image.map(|i| (i.name, i.tag)).unwrap_or_default();
    let a = &cluster.airgap;
    let proxy = a.proxy.as_ref();
    let no_proxy = if proxy.is_some() {
        a.no_proxy(cluster)
    } else {
        String::new()
    };
    let vars: Vec<(&str, String)> = vec![
        ("KOS_ROLE", node.role.key().into()),
        ("KOS_K8S_VERSION", v.to_string()),
        ("KOS_K8S_CHANNEL", v.channel()),
        ("KOS_K8S_PACKAGES", a.packages_base()),
        ("KOS_PAUSE_IMAGE", pause),
        ("KOS_ENDPOINT", cluster.endpoint.to_string()),
        ("KOS_POD_CIDR", cluster.pod_cidr.to_string()),
        ("KOS_IPTABLES", iptables.into()),
        ("KOS_METADATA_ADDR", metadata.into()),
        ("KOS_API_WAIT_SECONDS", ttl.clone()),
        ("KOS_INIT_ATTEMPTS", INIT_ATTEMPTS.to_string()),
        ("KOS_JOIN_ATTEMPTS", JOIN_ATTEMPTS.to_string()),
        ("KOS_CNI_NAME", cluster.cni.key().into()),
        ("KOS_CNI_VERSION", pin.version),
        // The mirror's copy when there is one: the same bytes, checked against the same sha256.
        ("KOS_CNI_URL", a.manifest_url(&pin.url)),
        ("KOS_CNI_SHA256", pin.sha256),
        ("KOS_CNI_VERIFIED", pin.verified.to_string()),
        ("KOS_CNI_POD_CIDR_DEFAULT", pin.pod_cidr_default),
        ("KOS_CNI_IMAGE", image),
        ("KOS_CNI_IMAGE_TAG", image_tag),
        ("KOS_EXPECTED_NODES", cluster.expected_nodes.to_string()),
        ("KOS_TOKEN_ID", secrets.token.id.clone()),
        ("KOS_TOKEN_TTL_SECONDS", ttl),
        (
            "KOS_HTTP_PROXY",
            proxy.and_then(|p| p.http.clone()).unwrap_or_default(),
        ),
        (
            "KOS_HTTPS_PROXY",
            proxy.and_then(|p| p.https.clone()).unwrap_or_default(),
        ),
        ("KOS_NO_PROXY", no_proxy),
    ];
    let mut s = String::from(
        "# kos bootstrap parameters, sourced by /usr/local/sbin/kos-bootstrap\n# shellcheck shell=bash disable=SC2034\n",
    );
    for (k, v) in vars {
        s.push_str(&format!("{k}={}\n", sh_quote(&v)));
    }
    Ok(s)
}

/// The files a node gets, in write order.
pub fn files(
    cluster: &ClusterInput,
    node: &NodeInput,
    secrets: &ClusterSecrets,
) -> Result<Vec<File>> {
    let mut out = vec![
        file(
            "/etc/modules-load.d/kubernetes.conf",
            "0644",
            "overlay\nbr_netfilter\n",
        ),
        file(
            "/etc/sysctl.d/99-kubernetes.conf",
            "0644",
            sysctls(&cluster.pod_cidr),
        ),
        file(
            "/etc/systemd/system/kos-metadata-block.service",
            "0644",
            METADATA_UNIT,
        ),
        file(
            "/etc/kos/bootstrap.env",
            "0600",
            bootstrap_env(cluster, node, secrets)?,
        ),
        File {
            path: "/etc/kos/kubeadm.yaml".into(),
            permissions: "0600",
            content: render_kubeadm(cluster, node, secrets)?,
        },
    ];
    out.extend(airgap_files(cluster));
    let carries_pki = match node.role {
        Role::InitControlPlane => true,
        Role::JoinControlPlane => cluster.pki_delivery == PkiDelivery::AllControlPlanes,
        Role::Worker => false,
    };
    if carries_pki {
        let pki = "/etc/kubernetes/pki";
        for (name, ca) in [
            ("ca", &secrets.ca),
            ("front-proxy-ca", &secrets.front_proxy_ca),
            ("etcd/ca", &secrets.etcd_ca),
        ] {
            out.push(file(
                format!("{pki}/{name}.crt"),
                "0600",
                ca.cert_pem.clone(),
            ));
            out.push(File {
                path: format!("{pki}/{name}.key"),
                permissions: "0600",
                content: ca.key_pem.clone(),
            });
        }
        out.push(File {
            path: format!("{pki}/sa.key"),
            permissions: "0600",
            content: secrets.service_account.private_pem.clone(),
        });
        out.push(file(
            format!("{pki}/sa.pub"),
            "0600",
            secrets.service_account.public_pem.clone(),
        ));
    }
    // Every control plane's kube-apiserver reads it (joining ones through kubeadm-config's flag);
    // a worker never gets the key.
    if node.role.is_control_plane()
        && let Some(enc) = &cluster.encryption
    {
        out.push(File {
            path: crate::encryption::CONFIG_PATH.into(),
            permissions: "0600",
            content: enc.render()?,
        });
    }
    if node.role == Role::InitControlPlane {
        for m in render_addons(cluster)? {
            out.push(File {
                path: format!("/etc/kos/addons/{}", m.name),
                permissions: "0600",
                content: m.yaml,
            });
        }
    }
    out.push(file(SCRIPT_PATH, "0700", BOOTSTRAP_SCRIPT));
    Ok(out)
}

/// What containerd, the kubelet and the trust store need for the mirrors and the proxy: written
/// before the script runs, so the packages' own units start with them.
fn airgap_files(cluster: &ClusterInput) -> Vec<File> {
    let a = &cluster.airgap;
    let mut out = Vec::new();
    if let Some(ca) = &a.ca_bundle {
        let mut pem = ca.clone();
        if !pem.ends_with('\n') {
            pem.push('\n');
        }
        out.push(file(crate::airgap::MIRROR_CA, "0644", pem));
    }
    for (path, toml) in a.containerd_hosts() {
        out.push(file(path, "0644", toml));
    }
    // The proxy URL may hold credentials: readable by root only.
    if let Some(unit) = a.proxy_drop_in(&a.no_proxy(cluster)) {
        for service in ["containerd", "kubelet"] {
            out.push(file(
                format!("/etc/systemd/system/{service}.service.d/http-proxy.conf"),
                "0600",
                unit.clone(),
            ));
        }
    }
    out
}

fn check_jinja(f: &File) -> Result<()> {
    let mut text = f.content.expose().to_string();
    if f.path == "/etc/kos/kubeadm.yaml" {
        text = text.replace(INSTANCE_ID, "").replace(LOCAL_HOSTNAME, "");
    }
    if ["{{", "{%", "{#"].iter().any(|d| text.contains(d)) {
        return Err(Error::JinjaDelimiter {
            part: f.path.clone(),
        });
    }
    Ok(())
}

/// A short description of the node for errors: role and pool.
pub fn node_label(node: &NodeInput) -> String {
    format!("{} node of pool {}", node.role.key(), node.pool)
}

/// Renders a node's user-data: gzipped when large, refused when over Nova's limit.
pub fn render_user_data(
    cluster: &ClusterInput,
    node: &NodeInput,
    secrets: &ClusterSecrets,
) -> Result<UserData> {
    let files = files(cluster, node, secrets)?;
    for f in &files {
        check_jinja(f)?;
    }
    let cc = CloudConfig {
        apt: Apt::of(&cluster.airgap),
        write_files: files
            .iter()
            .map(|f| WriteFile {
                path: &f.path,
                owner: "root:root",
                permissions: f.permissions,
                content: LitString(f.content.expose().to_string()),
            })
            .collect(),
        runcmd: vec![vec![SCRIPT_PATH, "run"]],
    };
    let body = crate::yaml::to_string(&cc)?;
    let text = format!(
        "## template: jinja\n#cloud-config\n# kos cluster {}: {}\n{body}",
        cluster.name,
        node_label(node)
    );
    let parts: Vec<(String, usize)> = files
        .iter()
        .map(|f| (f.path.clone(), f.content.expose().len()))
        .collect();
    let node_name = node_label(node);
    let (payload, gzipped) = size::fit(&node_name, text.as_bytes(), &parts)?;
    Ok(UserData {
        node: node_name,
        files,
        text: Sensitive::new(text),
        payload,
        gzipped,
    })
}
