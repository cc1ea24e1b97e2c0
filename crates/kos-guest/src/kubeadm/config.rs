//! `kubeadm init|join --config FILE`: the multi-document file split into its GroupVersionKinds,
//! each checked against kubeadm's Go types ([`super::schema`]) and validated as kubeadm's
//! `validation.go` does for what kos uses, then turned into typed configs.
//!
//! kubeadm decodes leniently and only *warns* about unknown fields ("strict decoding error: unknown
//! field"), so a misspelled field silently loses its value. The guest fails instead, naming the field
//! and that consequence: a test oracle must not let a typo pass.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde_json::Value;

use super::schema::{self, Problem, Shape};
use crate::version::Version;

pub const KUBEADM_V1BETA4: &str = "kubeadm.k8s.io/v1beta4";
pub const KUBELET_V1BETA1: &str = "kubelet.config.k8s.io/v1beta1";
const DEFAULT_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// A bootstrap token `id.secret`; the secret never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub secret: String,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}.***)", self.id)
    }
}

impl Token {
    /// kubeadm's `^([a-z0-9]{6})\.([a-z0-9]{16})$`.
    pub fn parse(s: &str) -> Result<Token, String> {
        let ok = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        match s.split_once('.') {
            Some((id, secret)) if ok(id, 6) && ok(secret, 16) => Ok(Token {
                id: id.to_owned(),
                secret: secret.to_owned(),
            }),
            _ => Err("the bootstrap token \"***\" was not of the form \"^([a-z0-9]{6})\\.([a-z0-9]{16})$\"".into()),
        }
    }
}

/// One `bootstrapTokens` entry, defaulted as kubeadm defaults it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub token: Token,
    pub description: String,
    pub ttl: Duration,
    pub usages: Vec<String>,
    pub groups: Vec<String>,
}

/// A taint as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintSpec {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// `nodeRegistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRegistration {
    pub name: String,
    /// `None`: unset, kubeadm's default (the control-plane taint on control planes).
    pub taints: Option<Vec<TaintSpec>>,
    pub kubelet_args: Vec<(String, String)>,
}

impl NodeRegistration {
    /// The last value of a kubelet flag (later duplicates win on a command line).
    pub fn kubelet_arg(&self, name: &str) -> Option<&str> {
        self.kubelet_args
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// InitConfiguration + ClusterConfiguration + KubeletConfiguration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitDocs {
    pub tokens: Vec<TokenSpec>,
    pub node: NodeRegistration,
    /// Hex AES-256 key; `None`: kubeadm generates one (and `--skip-certificate-key-print` hides it).
    pub certificate_key: Option<String>,
    pub cluster: ClusterDoc,
    pub cgroup_driver: Option<String>,
}

/// ClusterConfiguration, defaulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDoc {
    pub cluster_name: String,
    pub kubernetes_version: Version,
    pub control_plane_endpoint: Option<String>,
    pub pod_subnet: Option<IpNet>,
    pub service_subnet: IpNet,
    pub certificates_dir: String,
    pub cert_sans: Vec<String>,
    pub dns_domain: String,
    /// `imageRepository`: where kubeadm's images are pulled from (default `registry.k8s.io`).
    pub image_repository: String,
    /// `dns.imageRepository`, when set (CoreDNS's repository instead of kubeadm's rule).
    pub dns_image_repository: Option<String>,
    /// `etcd.local.imageRepository`, when set.
    pub etcd_image_repository: Option<String>,
    /// `featureGates.ControlPlaneKubeletLocalMode` as written (see [`kubelet_local_mode`]).
    pub kubelet_local_mode_gate: Option<bool>,
    /// `apiServer.extraArgs`, in order: kubeadm turns them into `--name=value` flags of the API
    /// server's static pod.
    pub api_server_args: Vec<(String, String)>,
    /// `apiServer.extraVolumes`: hostPath volumes of the API server's static pod.
    pub api_server_volumes: Vec<HostPathMount>,
}

/// A v1beta4 `HostPathMount`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostPathMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: bool,
    /// `""` when not set.
    pub path_type: String,
}

/// The hostPath types the kubelet knows (core/v1 `HostPathType`).
const PATH_TYPES: [&str; 8] = [
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];

fn api_server_args(v: &Value) -> Vec<(String, String)> {
    v.pointer("/apiServer/extraArgs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| (str_at(x, "/name"), str_at(x, "/value")))
                .collect()
        })
        .unwrap_or_default()
}

fn str_at(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// kubeadm's `ValidateHostPathMounts`-like checks, and the kubelet's on the path type.
fn api_server_volumes(v: &Value) -> Result<Vec<HostPathMount>, String> {
    let mut out = Vec::new();
    let list = v
        .pointer("/apiServer/extraVolumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, x) in list.iter().enumerate() {
        let m = HostPathMount {
            name: str_at(x, "/name"),
            host_path: str_at(x, "/hostPath"),
            mount_path: str_at(x, "/mountPath"),
            read_only: x
                .pointer("/readOnly")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            path_type: str_at(x, "/pathType"),
        };
        let at = format!("apiServer.extraVolumes[{i}]");
        for (field, value) in [
            ("name", &m.name),
            ("hostPath", &m.host_path),
            ("mountPath", &m.mount_path),
        ] {
            if value.is_empty() {
                return Err(format!("{at}.{field}: Required value"));
            }
        }
        if !PATH_TYPES.contains(&m.path_type.as_str()) {
            return Err(format!(
                "{at}.pathType: Unsupported value: {:?}: supported values: \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\"",
                m.path_type
            ));
        }
        if out.iter().any(|o: &HostPathMount| o.name == m.name) {
            return Err(format!("{at}.name: Duplicate value: {:?}", m.name));
        }
        out.push(m);
    }
    Ok(out)
}

/// Whether a control plane that kubeadm `kubeadm` makes has its kubelet talk to its own API server
/// instead of the `controlPlaneEndpoint` (KEP-4471, kubernetes/enhancements#4471): alpha and off by
/// default in 1.31 and 1.32, beta and on by default in 1.33 and 1.34, GA and locked on in 1.35
/// (kubernetes/kubernetes#134106), gone in 1.36, where kubeadm refuses the unknown gate as it
/// refuses any.
///
/// # Errors
/// kubeadm's refusal of the gate.
pub fn kubelet_local_mode(kubeadm: Version, gate: Option<bool>) -> Result<bool, String> {
    let unknown = || format!("unrecognized feature-gate key: {KUBELET_LOCAL_MODE}");
    match (kubeadm.minor, gate) {
        (..=30, Some(_)) => Err(unknown()),
        (..=30, None) => Ok(false),
        (31..=32, g) => Ok(g.unwrap_or(false)),
        (33..=34, g) => Ok(g.unwrap_or(true)),
        (35, Some(false)) => Err(format!(
            "cannot set feature gate {KUBELET_LOCAL_MODE} to false, feature is locked to true"
        )),
        (35, _) => Ok(true),
        (_, Some(_)) => Err(unknown()),
        (_, None) => Ok(true),
    }
}

/// The feature gate of [`ClusterDoc::kubelet_local_mode_gate`].
pub const KUBELET_LOCAL_MODE: &str = "ControlPlaneKubeletLocalMode";

/// JoinConfiguration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinDocs {
    pub endpoint: String,
    pub token: Token,
    pub ca_cert_hashes: Vec<String>,
    pub unsafe_skip_ca_verification: bool,
    /// `Some`: a control-plane join, with its certificate key if any.
    pub control_plane: Option<Option<String>>,
    pub node: NodeRegistration,
}

/// Splits a multi-document YAML into parsed documents (`---` lines).
fn documents(yaml: &str) -> Result<Vec<Value>, String> {
    let mut docs = Vec::new();
    let mut cur = String::new();
    let mut push = |cur: &mut String| -> Result<(), String> {
        if cur.trim().is_empty() {
            cur.clear();
            return Ok(());
        }
        let v: Value = serde_saphyr::from_str(cur).map_err(|e| {
            format!(
                "error converting YAML to JSON: {}",
                e.to_string().lines().next().unwrap_or_default()
            )
        })?;
        cur.clear();
        if !v.is_null() {
            docs.push(v);
        }
        Ok(())
    };
    for line in yaml.lines() {
        if line.trim_end() == "---" {
            push(&mut cur)?;
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    push(&mut cur)?;
    Ok(docs)
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|x| !x.is_empty())
}

/// The documents by kind, each checked against its Go type.
struct Docs {
    init: Option<Value>,
    cluster: Option<Value>,
    join: Option<Value>,
    kubelet: Option<Value>,
}

fn problems_to_error(kind: &str, problems: Vec<Problem>) -> Result<(), String> {
    // A decode error is fatal in kubeadm itself: report it first.
    if let Some(Problem::Type {
        path,
        go_type,
        found,
    }) = problems.iter().find(|p| matches!(p, Problem::Type { .. }))
    {
        return Err(format!(
            "json: cannot unmarshal {found} into Go struct field {kind}.{path} of type {go_type}"
        ));
    }
    if let Some(Problem::Unknown(path)) = problems.first() {
        return Err(format!(
            "unknown field \"{path}\" in {kind} (kubeadm ignores it with a warning, so its value is silently lost)"
        ));
    }
    Ok(())
}

fn split(yaml: &str) -> Result<Docs, String> {
    let mut d = Docs {
        init: None,
        cluster: None,
        join: None,
        kubelet: None,
    };
    for doc in documents(yaml)? {
        let (Some(api), Some(kind)) = (s(&doc, "/apiVersion"), s(&doc, "/kind")) else {
            return Err("invalid configuration for GroupVersionKind: kind and apiVersion is mandatory information that must be specified".into());
        };
        let (slot, shape): (&mut Option<Value>, &Shape) = match (api, kind) {
            (KUBEADM_V1BETA4, "InitConfiguration") => (&mut d.init, &schema::INIT_CONFIGURATION),
            (KUBEADM_V1BETA4, "ClusterConfiguration") => {
                (&mut d.cluster, &schema::CLUSTER_CONFIGURATION)
            }
            (KUBEADM_V1BETA4, "JoinConfiguration") => (&mut d.join, &schema::JOIN_CONFIGURATION),
            (KUBELET_V1BETA1, "KubeletConfiguration") => {
                (&mut d.kubelet, &schema::KUBELET_CONFIGURATION)
            }
            (a, k) if a.starts_with("kubeadm.k8s.io/") && a != KUBEADM_V1BETA4 => {
                return Err(format!(
                    "{a} {k}: only kubeadm.k8s.io/v1beta4 is simulated by kos-guest (kos renders v1beta4 for Kubernetes >= 1.31)"
                ));
            }
            (a, k) => {
                return Err(format!(
                    "unknown configuration {a} {k} (kubeadm ignores the document with a warning, so its settings are silently lost)"
                ));
            }
        };
        if slot.is_some() {
            return Err(format!(
                "invalid configuration: kind {kind:?} is specified twice in YAML file"
            ));
        }
        let mut problems = Vec::new();
        schema::check(&doc, shape, "", &mut problems);
        problems_to_error(kind, problems)?;
        *slot = Some(doc);
    }
    Ok(d)
}

fn str_list(v: &Value, ptr: &str) -> Vec<String> {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain, as Kubernetes validates object names.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn node_registration(v: &Value, field: &str) -> Result<NodeRegistration, String> {
    let name = s(v, "/nodeRegistration/name")
        .unwrap_or_default()
        .to_owned();
    if !is_dns_subdomain(&name) {
        return Err(format!(
            "{field}.nodeRegistration.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    let taints = match v.pointer("/nodeRegistration/taints") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|t| {
                    let key = s(t, "/key").unwrap_or_default().to_owned();
                    let effect = s(t, "/effect").unwrap_or_default().to_owned();
                    if !matches!(effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                        return Err(format!(
                            "{field}.nodeRegistration.taints: Unsupported value: {effect:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
                        ));
                    }
                    Ok(TaintSpec {
                        key,
                        value: s(t, "/value").map(str::to_owned),
                        effect,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => None,
    };
    let kubelet_args = v
        .pointer("/nodeRegistration/kubeletExtraArgs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        s(x, "/name").unwrap_or_default().to_owned(),
                        x.pointer("/value")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(NodeRegistration {
        name,
        taints,
        kubelet_args,
    })
}

fn certificate_key(v: &Value, ptr: &str, field: &str) -> Result<Option<String>, String> {
    match s(v, ptr) {
        None => Ok(None),
        Some(k) if k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Some(k.to_owned()))
        }
        Some(_) => Err(format!(
            "{field}: Invalid value: \"***\": certificate key must be a hex-encoded AES-256 key (64 hex characters)"
        )),
    }
}

/// `host:port` or `host` with a valid IP or DNS name; the port, if any, 1-65535.
fn endpoint_ok(ep: &str, port_required: bool) -> bool {
    let (host, port) = if let Some(rest) = ep.strip_prefix('[') {
        match rest.split_once("]:") {
            Some((h, p)) => (h, Some(p)),
            None => (rest.trim_end_matches(']'), None),
        }
    } else {
        match ep.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            _ => (ep, None),
        }
    };
    let host_ok = host.parse::<IpAddr>().is_ok() || is_dns_subdomain(host);
    let port_ok = match port {
        Some(p) => p.parse::<u16>().is_ok_and(|p| p > 0),
        None => !port_required,
    };
    host_ok && port_ok
}

fn cidrs(v: &str, field: &str) -> Result<Vec<IpNet>, String> {
    v.split(',')
        .map(|c| {
            c.trim()
                .parse::<IpNet>()
                .map_err(|_| format!("{field}: Invalid value: {v:?}: couldn't parse subnet"))
        })
        .collect()
}

fn cluster_doc(v: Option<&Value>) -> Result<ClusterDoc, String> {
    let empty = Value::Null;
    let v = v.unwrap_or(&empty);
    let version_text = s(v, "/kubernetesVersion").unwrap_or("stable-1");
    let kubernetes_version = Version::parse(version_text).ok_or_else(|| {
        format!("couldn't parse Kubernetes version {version_text:?} (a release label needs the internet, which kos-guest does not simulate)")
    })?;
    let control_plane_endpoint = s(v, "/controlPlaneEndpoint").map(str::to_owned);
    if let Some(ep) = &control_plane_endpoint
        && !endpoint_ok(ep, false)
    {
        return Err(format!(
            "controlPlaneEndpoint: Invalid value: {ep:?}: the controlPlaneEndpoint must be a valid IP address or a RFC-1123 DNS subdomain with an optional TCP port"
        ));
    }
    let service = s(v, "/networking/serviceSubnet").unwrap_or("10.96.0.0/12");
    let service_subnets = cidrs(service, "networking.serviceSubnet")?;
    for net in &service_subnets {
        let (bits, min) = if net.addr().is_ipv4() {
            (32, 12)
        } else {
            (128, 108)
        };
        if net.prefix_len() < min {
            return Err(format!(
                "networking.serviceSubnet: Invalid value: {service:?}: specified service subnet is too large; for {bits}-bit addresses, the mask must be >= {min}"
            ));
        }
    }
    let pod_subnet = match s(v, "/networking/podSubnet") {
        None => None,
        Some(p) => {
            let nets = cidrs(p, "networking.podSubnet")?;
            for net in &nets {
                let node_mask = if net.addr().is_ipv4() { 24 } else { 64 };
                if net.prefix_len() > node_mask {
                    return Err(format!(
                        "networking.podSubnet: Invalid value: {p:?}: the size of pod subnet with mask {} is smaller than the size of node subnet with mask {node_mask}",
                        net.prefix_len()
                    ));
                }
            }
            nets.first().copied()
        }
    };
    let cluster_name = s(v, "/clusterName").unwrap_or("kubernetes").to_owned();
    Ok(ClusterDoc {
        cluster_name,
        kubernetes_version,
        control_plane_endpoint,
        pod_subnet,
        service_subnet: service_subnets[0],
        certificates_dir: s(v, "/certificatesDir")
            .unwrap_or("/etc/kubernetes/pki")
            .to_owned(),
        cert_sans: str_list(v, "/apiServer/certSANs"),
        dns_domain: s(v, "/networking/dnsDomain")
            .unwrap_or("cluster.local")
            .to_owned(),
        kubelet_local_mode_gate: v
            .pointer(&format!("/featureGates/{KUBELET_LOCAL_MODE}"))
            .and_then(Value::as_bool),
        api_server_args: api_server_args(v),
        api_server_volumes: api_server_volumes(v)?,
        image_repository: s(v, "/imageRepository")
            .unwrap_or(super::images::DEFAULT_REPOSITORY)
            .to_owned(),
        dns_image_repository: s(v, "/dns/imageRepository")
            .filter(|r| !r.is_empty())
            .map(str::to_owned),
        etcd_image_repository: s(v, "/etcd/local/imageRepository")
            .filter(|r| !r.is_empty())
            .map(str::to_owned),
    })
}

/// The ClusterConfiguration of the `kube-system/kubeadm-config` ConfigMap (key
/// `ClusterConfiguration`), as `kubeadm join` and `upgrade` read it back
/// (`FetchInitConfigurationFromCluster`): one v1beta4 ClusterConfiguration, checked against the Go
/// type and validated as a config file's is.
pub fn parse_cluster_configuration(yaml: &str) -> Result<ClusterDoc, String> {
    let d = split(yaml)?;
    if let Some((kind, _)) = [
        ("InitConfiguration", &d.init),
        ("JoinConfiguration", &d.join),
        ("KubeletConfiguration", &d.kubelet),
    ]
    .into_iter()
    .find(|(_, v)| v.is_some())
    {
        return Err(format!(
            "the ClusterConfiguration key holds a {kind} document: only a ClusterConfiguration decodes into it"
        ));
    }
    let Some(cluster) = d.cluster else {
        return Err("no ClusterConfiguration document in the ClusterConfiguration key".into());
    };
    cluster_doc(Some(&cluster))
}

/// The ClusterConfiguration `kubeadm init` uploads into `kube-system/kubeadm-config` (its
/// `upload-config` phase): the defaulted configuration it ran with.
pub fn render_cluster_configuration(c: &ClusterDoc) -> String {
    let q = |x: &str| serde_json::Value::String(x.to_owned()).to_string();
    let mut out = format!(
        "apiVersion: {KUBEADM_V1BETA4}\nkind: ClusterConfiguration\nclusterName: {}\nkubernetesVersion: {}\n",
        q(&c.cluster_name),
        c.kubernetes_version
    );
    if let Some(ep) = &c.control_plane_endpoint {
        out.push_str(&format!("controlPlaneEndpoint: {}\n", q(ep)));
    }
    out.push_str(&format!("certificatesDir: {}\n", q(&c.certificates_dir)));
    out.push_str(&format!("imageRepository: {}\n", q(&c.image_repository)));
    if let Some(r) = &c.dns_image_repository {
        out.push_str(&format!("dns:\n  imageRepository: {}\n", q(r)));
    }
    if let Some(r) = &c.etcd_image_repository {
        out.push_str(&format!("etcd:\n  local:\n    imageRepository: {}\n", q(r)));
    }
    out.push_str("networking:\n");
    out.push_str(&format!(
        "  serviceSubnet: {}\n",
        q(&c.service_subnet.to_string())
    ));
    if let Some(p) = &c.pod_subnet {
        out.push_str(&format!("  podSubnet: {}\n", q(&p.to_string())));
    }
    out.push_str(&format!("  dnsDomain: {}\n", q(&c.dns_domain)));
    if !c.cert_sans.is_empty() || !c.api_server_args.is_empty() || !c.api_server_volumes.is_empty()
    {
        out.push_str("apiServer:\n");
    }
    if !c.cert_sans.is_empty() {
        out.push_str("  certSANs:\n");
        for san in &c.cert_sans {
            out.push_str(&format!("  - {}\n", q(san)));
        }
    }
    if !c.api_server_args.is_empty() {
        out.push_str("  extraArgs:\n");
        for (name, value) in &c.api_server_args {
            out.push_str(&format!("  - name: {}\n    value: {}\n", q(name), q(value)));
        }
    }
    if !c.api_server_volumes.is_empty() {
        out.push_str("  extraVolumes:\n");
        for m in &c.api_server_volumes {
            out.push_str(&format!(
                "  - name: {}\n    hostPath: {}\n    mountPath: {}\n    readOnly: {}\n",
                q(&m.name),
                q(&m.host_path),
                q(&m.mount_path),
                m.read_only
            ));
            if !m.path_type.is_empty() {
                out.push_str(&format!("    pathType: {}\n", q(&m.path_type)));
            }
        }
    }
    if let Some(g) = c.kubelet_local_mode_gate {
        out.push_str(&format!("featureGates:\n  {KUBELET_LOCAL_MODE}: {g}\n"));
    }
    out
}

fn token_spec(t: &Value, i: usize) -> Result<TokenSpec, String> {
    let token = Token::parse(s(t, "/token").unwrap_or_default())
        .map_err(|e| format!("bootstrapTokens[{i}].token: {e}"))?;
    let ttl = match s(t, "/ttl") {
        Some(d) => schema::parse_go_duration(d)
            .ok_or_else(|| format!("bootstrapTokens[{i}].ttl: invalid duration {d:?}"))?,
        None => Duration::from_secs(24 * 3600),
    };
    let mut usages = str_list(t, "/usages");
    if t.pointer("/usages").is_none() {
        usages = vec!["signing".into(), "authentication".into()];
    }
    for u in &usages {
        if !matches!(u.as_str(), "signing" | "authentication") {
            return Err(format!(
                "bootstrapTokens[{i}].usages: Invalid value: {u:?}: invalid bootstrap token usage string: {u}, valid usage options: authentication,signing"
            ));
        }
    }
    let mut groups = str_list(t, "/groups");
    if t.pointer("/groups").is_none() {
        groups = vec![DEFAULT_TOKEN_GROUP.into()];
    }
    for g in &groups {
        let rest = g.strip_prefix("system:bootstrappers:").unwrap_or_default();
        let ok = !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
            && rest
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !ok {
            return Err(format!(
                "bootstrapTokens[{i}].groups: Invalid value: {g:?}: bootstrap group {g:?} is invalid (must match ^system:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]$)"
            ));
        }
    }
    Ok(TokenSpec {
        token,
        description: s(t, "/description").unwrap_or_default().to_owned(),
        ttl,
        usages,
        groups,
    })
}

/// `kubeadm init --config`.
pub fn parse_init(yaml: &str) -> Result<InitDocs, String> {
    let d = split(yaml)?;
    if d.join.is_some() && d.init.is_none() {
        return Err("kubeadm init was given a JoinConfiguration and no InitConfiguration".into());
    }
    let empty = Value::Null;
    let init = d.init.as_ref().unwrap_or(&empty);
    let tokens = init
        .pointer("/bootstrapTokens")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, t)| token_spec(t, i))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    Ok(InitDocs {
        tokens,
        node: node_registration(init, "InitConfiguration")?,
        certificate_key: certificate_key(
            init,
            "/certificateKey",
            "InitConfiguration.certificateKey",
        )?,
        cluster: cluster_doc(d.cluster.as_ref())?,
        cgroup_driver: d
            .kubelet
            .as_ref()
            .and_then(|k| s(k, "/cgroupDriver"))
            .map(str::to_owned),
    })
}

/// `kubeadm join --config`.
pub fn parse_join(yaml: &str) -> Result<JoinDocs, String> {
    let d = split(yaml)?;
    let join = d
        .join
        .ok_or("no JoinConfiguration in the config file (kubeadm join needs one)")?;
    if join
        .pointer("/discovery/file")
        .is_some_and(|f| !f.is_null())
    {
        return Err("file discovery is not simulated by kos-guest".into());
    }
    let endpoint = s(&join, "/discovery/bootstrapToken/apiServerEndpoint")
        .unwrap_or_default()
        .to_owned();
    if !endpoint_ok(&endpoint, true) {
        return Err(format!(
            "discovery.bootstrapToken.apiServerEndpoint: Invalid value: {endpoint:?}: address must be host:port with a valid IP address or DNS name"
        ));
    }
    let token = Token::parse(s(&join, "/discovery/bootstrapToken/token").unwrap_or_default())
        .map_err(|e| format!("discovery.bootstrapToken.token: {e}"))?;
    let hashes = str_list(&join, "/discovery/bootstrapToken/caCertHashes");
    for h in &hashes {
        let Some((kind, hex)) = h.split_once(':') else {
            return Err(format!(
                "invalid hash {h:?}, expected \"format:hex-value\". Known format(s) are: sha256"
            ));
        };
        if kind != "sha256" {
            return Err(format!(
                "unknown hash format {kind:?}. Known format(s) are: sha256"
            ));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "expected a 32 byte SHA-256 hash, found {} bytes",
                hex.len() / 2
            ));
        }
    }
    let unsafe_skip = join
        .pointer("/discovery/bootstrapToken/unsafeSkipCAVerification")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if hashes.is_empty() && !unsafe_skip {
        return Err("discovery.bootstrapToken: Invalid value: \"\": using token-based discovery without caCertHashes can be unsafe. Set unsafeSkipCAVerification as true in your kubeadm config file or pass --discovery-token-unsafe-skip-ca-verification flag to continue".into());
    }
    let control_plane = match join.pointer("/controlPlane") {
        None | Some(Value::Null) => None,
        Some(_) => Some(certificate_key(
            &join,
            "/controlPlane/certificateKey",
            "controlPlane.certificateKey",
        )?),
    };
    Ok(JoinDocs {
        endpoint,
        token,
        ca_cert_hashes: hashes.iter().map(|h| h.to_ascii_lowercase()).collect(),
        unsafe_skip_ca_verification: unsafe_skip,
        control_plane,
        node: node_registration(&join, "JoinConfiguration")?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const JOIN: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 203.0.113.10:6443\n    token: abcdef.0123456789abcdef\n    caCertHashes:\n    - sha256:0000000000000000000000000000000000000000000000000000000000000000\nnodeRegistration:\n  name: w-1\n  taints: []\n";

    #[test]
    fn join_parses_and_validates() {
        let j = parse_join(JOIN).unwrap();
        assert_eq!(
            (j.endpoint.as_str(), j.token.id.as_str()),
            ("203.0.113.10:6443", "abcdef")
        );
        assert_eq!(j.node.taints, Some(vec![]));
        let typo = JOIN.replace("  taints: []", "  taint: []");
        let e = parse_join(&typo).unwrap_err();
        assert!(
            e.contains("unknown field \"nodeRegistration.taint\""),
            "{e}"
        );
        let bad_token = JOIN.replace("abcdef.", "ABCDEF.");
        assert!(!parse_join(&bad_token).unwrap_err().contains("ABCDEF"));
        let bad_hash = JOIN.replace("sha256:00", "sha256:0");
        assert!(parse_join(&bad_hash).unwrap_err().contains("32 byte"));
        let no_port = JOIN.replace(":6443", "");
        assert!(parse_join(&no_port).is_err());
        let bad_name = JOIN.replace("name: w-1", "name: W_1");
        assert!(parse_join(&bad_name).unwrap_err().contains("RFC 1123"));
    }

    const INIT: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-0\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: demo\nkubernetesVersion: v1.35.2\ncontrolPlaneEndpoint: 203.0.113.10:6443\nnetworking:\n  podSubnet: 10.244.0.0/16\napiServer:\n  certSANs: [203.0.113.10]\nfeatureGates:\n  ControlPlaneKubeletLocalMode: true\n";

    #[test]
    fn the_uploaded_cluster_configuration_reads_back_as_init_ran_it() {
        let ran = parse_init(INIT).unwrap().cluster;
        assert_eq!(ran.kubelet_local_mode_gate, Some(true));
        let uploaded = render_cluster_configuration(&ran);
        assert_eq!(parse_cluster_configuration(&uploaded).unwrap(), ran);
        let bumped = uploaded.replace("v1.35.2", "v1.36.0");
        assert_eq!(
            parse_cluster_configuration(&bumped)
                .unwrap()
                .kubernetes_version,
            Version::parse("1.36.0").unwrap()
        );
        // Strict as a config file: a typo, a wrong type, a label, another kind.
        let typo = uploaded.replace("kubernetesVersion", "kubernetesVerison");
        assert!(
            parse_cluster_configuration(&typo)
                .unwrap_err()
                .contains("unknown field \"kubernetesVerison\"")
        );
        let list = uploaded.replace("kubernetesVersion: v1.35.2", "kubernetesVersion: [v1.35.2]");
        assert!(
            parse_cluster_configuration(&list)
                .unwrap_err()
                .contains("cannot unmarshal array")
        );
        let label = uploaded.replace("v1.35.2", "stable-1.36");
        assert!(parse_cluster_configuration(&label).is_err());
        assert!(
            parse_cluster_configuration(INIT)
                .unwrap_err()
                .contains("InitConfiguration")
        );
    }

    #[test]
    fn kubelet_local_mode_follows_each_kubeadm_release() {
        let v = |m| Version {
            major: 1,
            minor: m,
            patch: 0,
        };
        assert_eq!(kubelet_local_mode(v(32), None), Ok(false));
        assert_eq!(kubelet_local_mode(v(32), Some(true)), Ok(true));
        assert_eq!(kubelet_local_mode(v(34), None), Ok(true));
        assert_eq!(kubelet_local_mode(v(34), Some(false)), Ok(false));
        assert_eq!(kubelet_local_mode(v(35), None), Ok(true));
        assert!(kubelet_local_mode(v(35), Some(false)).is_err(), "locked");
        assert_eq!(kubelet_local_mode(v(36), None), Ok(true));
        assert!(kubelet_local_mode(v(36), Some(true)).is_err(), "gone");
    }
}
