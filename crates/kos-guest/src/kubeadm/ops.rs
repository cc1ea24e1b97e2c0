//! `kubeadm init` and `kubeadm join` on a simulated node: the checks and effects of the phases that
//! matter for whether a cluster forms (kubeadm's cmd/kubeadm/app/cmd/{init,join}.go and
//! phases/...), each failing with kubeadm's text where the guest could read it (the discovery,
//! copycerts and preflight messages) and with a close paraphrase otherwise. Output is what current
//! kubeadm prints (cmd/kubeadm/app/util/errors: `error: <err>` then the "To see the stack trace ..."
//! hint; a failed preflight lists its `[ERROR <check>]` lines first and fails with "preflight checks
//! failed"), so the bootstrap script's reason (its `kubeadm_reason`) is computed from the same text.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use rand::Rng;

use super::config::{self, Token, TokenSpec};
use super::copycerts;
use super::images;
use crate::bootstrap::steps::{ADMIN_CONF, KUBEADM_CONFIG, PKI_DIR};
use crate::cluster::{Cluster, EtcdMember, KUBEADM_CERTS, NewCluster, secret_str, token_expiry};
use crate::error::GuestError;
use crate::guest::{Guest, KubeletOf, Sandbox, Server};
use crate::kubelet::{self, Readiness};
use crate::log::Logged;
use crate::pki;
use crate::proxy::{Proxy, Reach, Tool};
use crate::seam::{Host, ServerId};
use crate::static_pods;
use crate::version::Version;

const STACK: &str = "To see the stack trace of this error execute with --v=5 or higher";
/// kubeadm's `DefaultCertTokenDuration`: how long `kubeadm-certs` lives.
const CERT_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// kubeadm's output: `Ok` lines, or the lines of a failure.
pub(crate) type KubeadmOutput = Result<Vec<String>, Vec<String>>;

/// kubeadm's error handler: `error: ` before the error's text, then the stack-trace hint.
fn plain_err(msg: &str) -> Vec<String> {
    msg.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("error: {l}")
            } else {
                l.to_owned()
            }
        })
        .chain([STACK.to_owned()])
        .collect()
}

fn phase_err(phase: &str, msg: &str) -> Vec<String> {
    plain_err(&format!("error execution phase {phase}: {msg}"))
}

fn preflight_errors(errors: &[String]) -> Vec<String> {
    let mut out = vec!["[preflight] Some fatal errors occurred:".to_owned()];
    out.extend(errors.iter().map(|e| format!("\t[ERROR {e}")));
    out.push("[preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`".into());
    out.extend(phase_err("preflight", "preflight checks failed"));
    out
}

struct Flags {
    upload_certs: bool,
    config: Option<String>,
}

fn flags(args: &[String], init: bool) -> Result<Flags, Vec<String>> {
    let mut f = Flags {
        upload_certs: false,
        config: None,
    };
    for a in args {
        match a.as_str() {
            "--upload-certs" if init => f.upload_certs = true,
            "--skip-token-print" | "--skip-certificate-key-print" if init => {}
            a if a.starts_with("-v=") || a.starts_with("--v=") => {}
            a if a.starts_with("--config=") => f.config = Some(a["--config=".len()..].to_owned()),
            other => return Err(plain_err(&format!("unknown flag: {other}"))),
        }
    }
    Ok(f)
}

fn random_lower(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

fn random_hex(bytes: usize) -> String {
    let mut rng = rand::rng();
    (0..bytes)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://{server}\n  name: kubernetes\n"
    )
}

/// kubeadm's `NormalizeKubernetesVersion` (when it reads a config file or the cluster's
/// ClusterConfiguration): it deploys its own minor and the one before, no older
/// (`MinimumControlPlaneVersion`). A newer one is only `KubernetesVersionCheck`'s warning.
fn supported_control_plane(kubeadm: Version, v: Version) -> Result<(), String> {
    let oldest = (kubeadm.major, kubeadm.minor.saturating_sub(1));
    if (v.major, v.minor) < oldest {
        return Err(format!(
            "this version of kubeadm only supports deploying clusters with the control plane version >= v{}.{}.0. Current version: {v}",
            oldest.0, oldest.1
        ));
    }
    Ok(())
}

/// kubeadm's `ImagePull` preflight check (init, and a control-plane join's, with the cluster's
/// ClusterConfiguration): containerd pulls every image `kubeadm config images list` names, each
/// through the mirrors its registry's `hosts.toml` on the node names (the first host it reaches
/// serves it). An image no host serves is kubeadm's `[ERROR ImagePull]` with containerd's reason.
/// The warnings it prints (a sandbox image other than kubeadm's pause) are returned.
fn pull_images(
    id: &ServerId,
    srv: &mut Server,
    cluster: &config::ClusterDoc,
    host: &dyn Host,
    errors: &mut Vec<String>,
) -> Vec<String> {
    let Some(list) = images::control_plane(cluster) else {
        errors.push(format!(
            "ImagePull]: no images known for Kubernetes {}",
            cluster.kubernetes_version
        ));
        return Vec::new();
    };
    let mut warnings = Vec::new();
    let sandbox = sandbox_image(srv);
    if let Some(pause) = images::pause(cluster)
        && sandbox != pause
    {
        // klog's header: severity, month and day, time, thread id, file and line.
        let now = host.calendar();
        warnings.push(format!(
            "W{:02}{:02} {:02}:{:02}:{:02}.{:06}    4242 checks.go:827] detected that the sandbox image \"{sandbox}\" of the container runtime is inconsistent with that used by kubeadm. It is recommended to use \"{pause}\" as the CRI sandbox image.",
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            now.microsecond()
        ));
    }
    for image in list {
        if let Err(e) = pull(id, srv, &image, host) {
            errors.push(format!("ImagePull]: failed to pull image {image}: {e}"));
            return warnings;
        }
    }
    warnings
}

/// The sandbox image of the node's containerd (`sandbox_image` in its CRI plugin's configuration,
/// `sandbox` in containerd 2's), or containerd's default.
pub(crate) fn sandbox_image(srv: &Server) -> String {
    srv.vfs
        .text("/etc/containerd/config.toml")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            matches!(k.trim(), "sandbox_image" | "sandbox")
                .then(|| v.trim().trim_matches(['"', '\'']).to_owned())
        })
        .unwrap_or_else(|| images::CONTAINERD_DEFAULT_SANDBOX.to_owned())
}

/// containerd pulling `image` (`registry/path:tag`) through the node's `hosts.toml` for its
/// registry; containerd's error when no host serves it.
pub(crate) fn pull(
    id: &ServerId,
    srv: &mut Server,
    image: &str,
    host: &dyn Host,
) -> Result<(), String> {
    let Some((registry, path, tag)) = images::split(image) else {
        return Err(format!("invalid reference format: {image}"));
    };
    let hosts_toml = srv
        .vfs
        .text(&format!("/etc/containerd/certs.d/{registry}/hosts.toml"))
        .map(str::to_owned);
    let candidates = crate::internet::pull_hosts(registry, hosts_toml.as_deref());
    // containerd's proxy is its systemd drop-in's.
    let proxy = Proxy::of_service(&srv.vfs, "containerd");
    let mut proxy_error = None;
    let served = candidates.iter().find_map(|h| {
        let url = format!("{}/v2/{path}/manifests/{tag}", h.trim_end_matches('/'));
        match crate::proxy::reach(host, id, &url, proxy.as_ref()) {
            Reach::Reached => Some(url),
            Reach::Unreachable => None,
            Reach::Proxy(f) => {
                proxy_error = Some(format!(
                    "failed to resolve reference \"{image}\": failed to do request: Head \"{url}\": {}",
                    f.said_by(Tool::Containerd)
                ));
                None
            }
        }
    });
    match served {
        Some(url) => {
            srv.fetched.push(url);
            Ok(())
        }
        None => {
            if let Some(e) = proxy_error {
                return Err(e);
            }
            let last = candidates
                .last()
                .map_or(registry, |h| crate::internet::host_of(h));
            Err(format!(
                "failed to resolve reference \"{image}\": dial tcp: lookup {last}: no such host"
            ))
        }
    }
}

/// kubeadm's `KubernetesVersionCheck` (init, and a control-plane join's init checks): a control
/// plane newer than kubeadm is a warning, not an error.
fn kubernetes_version_warning(kubeadm: Version, v: Version) -> Option<String> {
    (v.major > kubeadm.major || (v.major == kubeadm.major && v.minor > kubeadm.minor)).then(|| {
        format!(
            "\t[WARNING KubernetesVersion]: Kubernetes version is greater than kubeadm version. Please consider to upgrade kubeadm. Kubernetes version: {}. Kubeadm version: {}.{}.x",
            &v.to_string()[1..],
            kubeadm.major,
            kubeadm.minor
        )
    })
}

/// kubeadm init's `KubeletVersionCheck` against the configuration's version (`addCommonChecks`;
/// a join passes no version, so only the kubelet's minimum applies there, and the node's kubelet
/// is kubeadm's own version).
fn version_checks(kubelet: Version, cluster: Version, errors: &mut Vec<String>) {
    if kubelet.major != cluster.major || kubelet.minor > cluster.minor {
        errors.push(format!(
            "KubeletVersion]: the kubelet version is higher than the control plane version. This is not a supported version skew and may lead to a malfunctional cluster. Kubelet version: \"{}\" Control plane version: \"{}\"",
            &kubelet.to_string()[1..],
            &cluster.to_string()[1..]
        ));
    } else if kubelet.minor + 3 < cluster.minor {
        errors.push(format!(
            "KubeletVersion]: Kubelet version \"{}\" is lower than kubeadm can support. Please upgrade kubelet",
            &kubelet.to_string()[1..]
        ));
    }
}

/// The kubelet's mirror pods of the static pods kubeadm wrote (replacing a previous node's), as
/// the kubelet makes them: created as itself (the server clears their status), then their status.
fn put_mirror_pods(
    c: &Cluster,
    node: &Node,
    ip: Option<std::net::IpAddr>,
    v: Version,
) -> Result<(), GuestError> {
    use k8s_openapi::api::core::v1::Pod;
    let name = node.metadata.name.clone().unwrap_or_default();
    let me = kubelet::acting(&c.kube, &name);
    let mine = me.list::<Pod>(Some("kube-system"), &format!("spec.nodeName={name}"))?;
    for p in kubelet::mirror_pods(node, ip, v) {
        let pod = p.metadata.name.clone().unwrap_or_default();
        if mine
            .iter()
            .any(|m| m.metadata.name.as_deref() == Some(pod.as_str()))
        {
            me.delete::<Pod>(Some("kube-system"), &pod)?;
        }
        me.create(&p)?;
        me.update::<Pod>(Some("kube-system"), &pod, true, |m| {
            m.status = p.status.clone()
        })?;
    }
    Ok(())
}

/// The user a bootstrap token authenticates as: `system:bootstrap:<id>` in
/// `system:bootstrappers` and the token's `auth-extra-groups`.
fn bootstrap_user(id: &str, token: &k8s_openapi::api::core::v1::Secret) -> kos_kube_fake::User {
    let mut groups = vec!["system:bootstrappers".to_owned()];
    groups.extend(
        secret_str(token, "auth-extra-groups")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned),
    );
    kos_kube_fake::User::authenticated(format!("system:bootstrap:{id}"), groups)
}

/// The kubelet registers its Node as itself (`registered`: no control-plane marks, which
/// NodeRestriction refuses it), or takes an existing one over (adding its labels). A refusal is
/// the kubelet's failure to register.
fn register_node(
    c: &Cluster,
    registered: &Node,
    exists: bool,
) -> Result<Result<Node, String>, GuestError> {
    let name = registered.metadata.name.clone().unwrap_or_default();
    let me = kubelet::acting(&c.kube, &name);
    let done = if exists {
        me.update::<Node>(None, &name, false, |n| {
            let labels = n.metadata.labels.get_or_insert_with(Default::default);
            for (k, v) in registered.metadata.labels.iter().flatten() {
                labels.insert(k.clone(), v.clone());
            }
        })
    } else {
        me.create(registered)
    };
    match done {
        Ok(n) => Ok(Ok(n)),
        Err(kos_kube_fake::FakeError::Api(e)) if e.code == 403 => Ok(Err(format!(
            "the kubelet cannot register its Node: {}",
            e.message
        ))),
        Err(e) => Err(e.into()),
    }
}

/// kubeadm's mark-control-plane phase with admin.conf (`MarkControlPlane`: `PatchNodeOnce` gets
/// the Node, then sends a strategic merge patch of its labels and taints); the error is the
/// phase's (`error applying control-plane label and taints: ...`).
fn mark_control_plane(
    c: &Cluster,
    name: &str,
    marked: &Node,
    kubeadm: Version,
) -> Result<Result<Node, String>, GuestError> {
    let admin = c.kubeadm_admin(kubeadm);
    let refused = |e: kos_kube_fake::ApiError| -> Result<Result<Node, String>, GuestError> {
        Ok(Err(format!(
            "error applying control-plane label and taints: {}",
            e.message
        )))
    };
    let node = match admin.get::<Node>(None, name) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Ok(Err(format!(
                "error applying control-plane label and taints: timed out waiting for the condition (Node {name:?} not found)"
            )));
        }
        Err(kos_kube_fake::FakeError::Api(e)) => return refused(e),
        Err(e) => return Err(e.into()),
    };
    let mut want = node.clone();
    kubelet::mark_control_plane(&mut want, marked);
    let patch = serde_json::json!({
        "metadata": {"labels": want.metadata.labels},
        "spec": {"taints": want.spec.as_ref().and_then(|s| s.taints.clone())},
    });
    match admin.patch::<Node>(None, name, "", true, &patch) {
        Ok(n) => Ok(Ok(n)),
        Err(kos_kube_fake::FakeError::Api(e)) => refused(e),
        Err(e) => Err(e.into()),
    }
}

impl Guest {
    /// `kubeadm reset -f` between attempts: the node's local control-plane state goes (the attempt
    /// that failed changed nothing in any cluster: the guest's kubeadm is all or nothing).
    pub(crate) fn kubeadm_reset(&mut self, _id: &ServerId, srv: &mut Server) {
        for p in srv
            .vfs
            .list(PKI_DIR)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
        {
            srv.vfs.remove(&p);
        }
        srv.vfs.remove(ADMIN_CONF);
        srv.vfs.remove("/etc/kubernetes/kubelet.conf");
        static_pods::remove(&mut srv.vfs);
    }

    fn read_config<'a>(srv: &'a Server, f: &Flags) -> Result<&'a str, Vec<String>> {
        let path = f.config.as_deref().unwrap_or(KUBEADM_CONFIG);
        srv.vfs.text(path).ok_or_else(|| {
            plain_err(&format!(
                "unable to read config from \"{path}\" : open {path}: no such file or directory"
            ))
        })
    }

    /// `kubeadm init`.
    pub(crate) fn kubeadm_init(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        args: &[String],
        host: &dyn Host,
    ) -> Result<KubeadmOutput, GuestError> {
        let f = match flags(args, true) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let Some(kubeadm) = srv.installed else {
            return Ok(Err(vec!["bash: kubeadm: command not found".into()]));
        };
        let docs = match Self::read_config(srv, &f).map(config::parse_init) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Ok(Err(plain_err(&e))),
            Err(e) => return Ok(Err(e)),
        };
        let v = docs.cluster.kubernetes_version;
        if let Err(e) = supported_control_plane(kubeadm, v) {
            return Ok(Err(plain_err(&e)));
        }
        let mut errors = Vec::new();
        version_checks(kubeadm, v, &mut errors);
        if srv.api_of.is_some() {
            errors.push("Port-6443]: Port 6443 is in use".into());
        }
        let pull_warnings = pull_images(id, srv, &docs.cluster, host, &mut errors);
        if !errors.is_empty() {
            return Ok(Err(preflight_errors(&errors)));
        }
        // The kubelet runs the static pods in sandboxes of containerd's own image: one it cannot
        // pull leaves them uncreated, and kubeadm waits for an API server that never comes.
        let sandbox = sandbox_image(srv);
        if let Err(e) = pull(id, srv, &sandbox, host) {
            return Ok(Err(phase_err(
                "wait-control-plane",
                &format!(
                    "kube-apiserver is not healthy: its pod sandbox was never created: failed to get sandbox image \"{sandbox}\": {e}"
                ),
            )));
        }
        let dir = docs.cluster.certificates_dir.clone();
        let ca_crt = srv
            .vfs
            .get(&format!("{dir}/ca.crt"))
            .map(|f| f.content.clone());
        let ca_key = srv.vfs.exists(&format!("{dir}/ca.key"));
        let (ca_hash, ca_pem, generated) = match (ca_crt, ca_key) {
            (Some(crt), true) => match pki::discovery_hash(&crt) {
                Ok(h) => (h, crt, false),
                Err(e) => {
                    return Ok(Err(phase_err(
                        "certs/ca",
                        &format!("failure loading ca certificate authority: {e}"),
                    )));
                }
            },
            (Some(_), false) => {
                return Ok(Err(phase_err(
                    "certs/ca",
                    &format!(
                        "failure loading ca certificate authority: couldn't load the private key file {dir}/ca.key: open {dir}/ca.key: no such file or directory"
                    ),
                )));
            }
            // kubeadm generates a CA: a stand-in whose hash no pin can match.
            (None, _) => (format!("sha256:{}", random_hex(32)), Vec::new(), true),
        };
        let endpoint = docs.cluster.control_plane_endpoint.clone();
        let existing = endpoint
            .as_deref()
            .map(|ep| self.answering(id, Some(srv), ep, host).clusters)
            .unwrap_or_default();
        let date = host.calendar();
        let cid = self.new_cluster_id();
        let node_name = docs.node.name.clone();
        let cluster = Cluster::create(
            NewCluster {
                id: cid,
                name: docs.cluster.cluster_name.clone(),
                endpoint: endpoint.clone(),
                ca_hash,
                configuration: docs.cluster.clone(),
                pod_subnet: docs.cluster.pod_subnet.map(|n| n.to_string()),
                serving: crate::cluster::Serving::of(&docs.cluster),
                first: EtcdMember::new(
                    id.clone(),
                    node_name.clone(),
                    srv.addresses.first().copied(),
                ),
                kubeadm,
            },
            &ca_pem,
        )?;
        // control-plane phase: the static pods, before kubeadm talks to the API server.
        static_pods::write(
            &mut srv.vfs,
            v,
            srv.addresses.first().copied(),
            &static_pods::ApiServerExtras::of(&docs.cluster),
        );
        // kubeadm waits for the API server it wrote; one that exits on its configuration fails it.
        match static_pods::apiserver_encryption(&srv.vfs) {
            // What kubeadm writes from here on (tokens, kubeadm-certs) goes through this server.
            Ok(enc) => cluster.kube.set_encryption(std::sync::Arc::new(enc)),
            Err(e) => {
                static_pods::remove(&mut srv.vfs);
                return Ok(Err(phase_err(
                    "wait-control-plane",
                    &format!("kube-apiserver is not healthy: it exited: {e}"),
                )));
            }
        }
        let mut out = vec![
            format!("[init] Using Kubernetes version: {v}"),
            "[preflight] Running pre-flight checks".to_owned(),
        ];
        out.extend(kubernetes_version_warning(kubeadm, v));
        out.extend(pull_warnings);
        for t in &docs.tokens {
            cluster.create_token(t, date, kubeadm)?;
        }
        out.push("[bootstrap-token] Configured bootstrap token".into());
        if f.upload_certs {
            let key = match &docs.certificate_key {
                Some(k) => k.clone(),
                None => {
                    let r = "kubeadm init --upload-certs generated a certificate key that --skip-certificate-key-print hides: no control plane can download the certificates".to_owned();
                    self.record(id, Logged::Reported(r), host);
                    random_hex(32)
                }
            };
            let owner = cluster.create_token(
                &TokenSpec {
                    token: Token {
                        id: random_lower(6),
                        secret: random_lower(16),
                    },
                    description: "Proxy for managing TTL for the kubeadm-certs secret".into(),
                    ttl: CERT_TOKEN_TTL,
                    usages: Vec::new(),
                    groups: Vec::new(),
                },
                date,
                kubeadm,
            )?;
            let mut entries = BTreeMap::new();
            for file in copycerts::SHARED_FILES {
                let sealed = match srv.vfs.get(&format!("{dir}/{file}")) {
                    Some(content) => match copycerts::encrypt(&content.content, &key) {
                        Ok(s) => s,
                        Err(e) => return Ok(Err(phase_err("upload-certs", &e))),
                    },
                    None => Vec::new(),
                };
                entries.insert(copycerts::secret_key(file), sealed);
            }
            cluster.upload_certs(entries, &owner, kubeadm)?;
            out.push(format!(
                "[upload-certs] Storing the certificates in Secret \"{KUBEADM_CERTS}\" in the \"kube-system\" Namespace"
            ));
        }
        let registration = |control_plane| {
            kubelet::node(
                &docs.node,
                control_plane,
                kubeadm,
                Readiness::NetworkNotReady,
                date,
            )
        };
        let (registered, marked) = match (registration(false), registration(true)) {
            (Ok(r), Ok(m)) => (r, m),
            (Err(e), _) | (_, Err(e)) => return Ok(Err(phase_err("kubelet-start", &e))),
        };
        if let Err(e) = register_node(&cluster, &registered, false)? {
            return Ok(Err(phase_err("kubelet-start", &e)));
        }
        let node = match mark_control_plane(&cluster, &node_name, &marked, kubeadm)? {
            Ok(n) => n,
            Err(e) => return Ok(Err(phase_err("mark-control-plane", &e))),
        };
        put_mirror_pods(&cluster, &node, srv.addresses.first().copied(), v)?;
        let local = endpoint
            .clone()
            .unwrap_or_else(|| format!("{}:6443", srv.meta.local_hostname));
        srv.vfs.write(
            ADMIN_CONF,
            kubeconfig(&local).as_bytes(),
            0o600,
            "root:root",
            false,
        );
        // ControlPlaneKubeletLocalMode: the kubelet talks to the API server next to it.
        let local_mode =
            match config::kubelet_local_mode(kubeadm, docs.cluster.kubelet_local_mode_gate) {
                Ok(m) => m,
                Err(e) => return Ok(Err(plain_err(&e))),
            };
        let kubelet_server = if local_mode {
            srv.local_api_endpoint().unwrap_or_else(|| local.clone())
        } else {
            local.clone()
        };
        srv.vfs.write(
            "/etc/kubernetes/kubelet.conf",
            kubeconfig(&kubelet_server).as_bytes(),
            0o600,
            "root:root",
            false,
        );
        srv.api_of = Some(cid);
        srv.serving = Some(crate::cluster::Serving::of(&docs.cluster));
        srv.kubelet = Some(KubeletOf {
            cluster: cid,
            node: node_name,
            sandbox: Sandbox::Pulled,
        });
        self.clusters.insert(cid, cluster);
        if generated {
            self.record(id, Logged::GeneratedCa { cluster: cid }, host);
        }
        if !existing.is_empty() {
            let ep = endpoint.unwrap_or_default();
            let names: Vec<String> = existing.iter().map(ToString::to_string).collect();
            let line = format!(
                "kos-guest: split brain: kubeadm init on {id} made {cid} while {ep} already serves {}",
                names.join(", ")
            );
            self.say(id, srv, line, host);
            self.record(
                id,
                Logged::SplitBrain {
                    endpoint: ep,
                    new: cid,
                    existing,
                },
                host,
            );
        }
        out.push("Your Kubernetes control-plane has initialized successfully!".into());
        Ok(Ok(out))
    }

    /// `kubeadm join`.
    pub(crate) fn kubeadm_join(
        &mut self,
        id: &ServerId,
        srv: &mut Server,
        args: &[String],
        host: &dyn Host,
    ) -> Result<KubeadmOutput, GuestError> {
        let f = match flags(args, false) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let Some(kubelet_version) = srv.installed else {
            return Ok(Err(vec!["bash: kubeadm: command not found".into()]));
        };
        let docs = match Self::read_config(srv, &f).map(config::parse_join) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Ok(Err(plain_err(&e))),
            Err(e) => return Ok(Err(e)),
        };
        let date = host.calendar();
        let discovery = |msg: &str| {
            Ok(Err(phase_err(
                "preflight",
                &format!("couldn't validate the identity of the API Server: {msg}"),
            )))
        };
        let answer = self.answering(id, Some(srv), &docs.endpoint, host);
        let Some(&cid) = answer.clusters.first() else {
            return discovery("abort connecting to API servers after timeout of 5m0s");
        };
        if answer.clusters.len() > 1 {
            let names: Vec<String> = answer.clusters.iter().map(ToString::to_string).collect();
            let r = format!(
                "kubeadm join on {id} sees {} behind {}: it joins {cid}",
                names.join(" and "),
                docs.endpoint
            );
            self.record(id, Logged::Reported(r), host);
        }
        let Some(c) = self.clusters.get(&cid) else {
            return discovery("abort connecting to API servers after timeout of 5m0s");
        };
        let token_name = format!("bootstrap-token-{}", docs.token.id);
        let token = c.secret(&token_name)?;
        // The bootstrap signer signs cluster-info only for unexpired tokens with the signing usage.
        let signed = token.as_ref().filter(|t| {
            token_expiry(t).is_none_or(|e| e > date)
                && secret_str(t, "usage-bootstrap-signing").as_deref() == Some("true")
        });
        let Some(token) = signed else {
            // Current kubeadm polls cluster-info for the signature until its discovery timeout.
            return discovery(&format!(
                "could not find a JWS signature in the cluster-info ConfigMap for token ID \"{}\"",
                docs.token.id
            ));
        };
        if secret_str(token, "token-secret").as_deref() != Some(docs.token.secret.as_str()) {
            return discovery(
                "failed to verify JWS signature of received cluster info object, can't trust this API Server",
            );
        }
        if !docs.unsafe_skip_ca_verification && !docs.ca_cert_hashes.contains(&c.ca_hash) {
            return discovery(&format!(
                "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys \"{}\" are pinned",
                c.ca_hash
            ));
        }
        // The joining node's kubeadm reads the cluster's ClusterConfiguration (its InitCfg, in the
        // preflight phase of every join): a control plane's static pods are written at its
        // kubernetesVersion, whatever kubeadm's own version.
        let fetch = |e: String| {
            Ok(Err(phase_err(
                "preflight",
                &format!("unable to fetch the kubeadm-config ConfigMap: {e}"),
            )))
        };
        // kubeadm join's client is the bootstrap token's user until the kubelet has its own
        // credential: what it reads, RBAC (kubeadm's roles for the token's groups) decides.
        let joining = c
            .kube
            .acting_as(bootstrap_user(&docs.token.id, token), "kubeadm");
        if let Err(e) = joining.get::<k8s_openapi::api::core::v1::ConfigMap>(
            Some(crate::cluster::KUBE_SYSTEM),
            "kubeadm-config",
        ) {
            return fetch(e.to_string());
        }
        let cluster_cfg = match c.cluster_configuration()? {
            Ok(d) => d,
            Err(e) => return fetch(e),
        };
        let v = cluster_cfg.kubernetes_version;
        if let Err(e) = supported_control_plane(kubelet_version, v) {
            return fetch(e);
        }
        // The fetched configuration's feature gates are checked as this kubeadm knows them.
        if let Err(e) =
            config::kubelet_local_mode(kubelet_version, cluster_cfg.kubelet_local_mode_gate)
        {
            return fetch(e);
        }
        // No KubeletVersionCheck against the cluster here: a join's own checks pass it no version,
        // and a control-plane join's init checks leave it out (isSecondaryControlPlane).
        let control_plane = docs.control_plane.is_some();
        if control_plane {
            // control-plane-prepare writes the static pods before the kubelet starts; an API server
            // that exits on its configuration never becomes healthy and the join fails waiting.
            static_pods::write(
                &mut srv.vfs,
                v,
                srv.addresses.first().copied(),
                &static_pods::ApiServerExtras::of(&cluster_cfg),
            );
            if let Err(e) = static_pods::apiserver_encryption(&srv.vfs) {
                static_pods::remove(&mut srv.vfs);
                return Ok(Err(phase_err(
                    "control-plane-join",
                    &format!("kube-apiserver is not healthy: it exited: {e}"),
                )));
            }
        }
        let existing: Option<Node> = match joining.get::<Node>(None, &docs.node.name) {
            Ok(n) => n,
            Err(kos_kube_fake::FakeError::Api(e)) if e.code == 403 => {
                return Ok(Err(phase_err("kubelet-start", &e.message)));
            }
            Err(e) => return Err(e.into()),
        };
        if existing.as_ref().and_then(kubelet::ready_status) == Some("True") {
            return Ok(Err(phase_err(
                "kubelet-start",
                &format!(
                    "a Node with name \"{}\" and status \"Ready\" already exists in the cluster. You must delete the existing Node or change the name of this new joining Node",
                    docs.node.name
                ),
            )));
        }
        let mut out = vec![
            "[preflight] Running pre-flight checks".to_owned(),
            format!(
                "[discovery] Successfully established connection with API Server \"{}\"",
                docs.endpoint
            ),
        ];
        if control_plane {
            out.extend(kubernetes_version_warning(kubelet_version, v));
        }
        if let Some(cert_key) = &docs.control_plane {
            if cluster_cfg.control_plane_endpoint.is_none() {
                return Ok(Err(phase_err(
                    "preflight",
                    "unable to add a new control plane instance to a cluster that doesn't have a stable controlPlaneEndpoint address",
                )));
            }
            // The control-plane join's preflight pulls kubeadm's images, as the cluster names them.
            let mut errors = Vec::new();
            let warnings = pull_images(id, srv, &cluster_cfg, host, &mut errors);
            if !errors.is_empty() {
                static_pods::remove(&mut srv.vfs);
                return Ok(Err(preflight_errors(&errors)));
            }
            out.extend(warnings);
            match cert_key {
                Some(key) => {
                    let certs = |msg: String| {
                        Ok(Err(phase_err(
                            "control-plane-prepare/download-certs",
                            &format!("error downloading certs: {msg}"),
                        )))
                    };
                    let Some(secret) = c.secret(KUBEADM_CERTS)? else {
                        return certs(format!(
                            "error downloading the secret: Secret \"{KUBEADM_CERTS}\" was not found in the \"kube-system\" Namespace. This Secret might have expired. Please, run `kubeadm init phase upload-certs --upload-certs` on a control plane to generate a new one"
                        ));
                    };
                    let data = secret.data.unwrap_or_default();
                    let mut plain = BTreeMap::new();
                    for (k, v) in &data {
                        if v.0.is_empty() {
                            continue;
                        }
                        match copycerts::decrypt(&v.0, key) {
                            Ok(p) => {
                                plain.insert(k.clone(), p);
                            }
                            Err(e) => {
                                return certs(format!(
                                    "error decoding secret data with provided key: {e}"
                                ));
                            }
                        }
                    }
                    for file in copycerts::SHARED_FILES {
                        let entry = copycerts::secret_key(file);
                        match plain.get(&entry) {
                            Some(content) => srv.vfs.write(
                                &format!("{PKI_DIR}/{file}"),
                                content,
                                0o600,
                                "root:root",
                                false,
                            ),
                            None if data.contains_key(&entry) => {}
                            None => {
                                return certs(format!(
                                    "the Secret does not include the required certificate or key - name: {file}, path: {PKI_DIR}/{file}"
                                ));
                            }
                        }
                    }
                    out.push(format!("[download-certs] Downloading the certificates in Secret \"{KUBEADM_CERTS}\" in the \"kube-system\" Namespace"));
                }
                None => {
                    if let Some(missing) = copycerts::SHARED_FILES
                        .iter()
                        .find(|f| !srv.vfs.exists(&format!("{PKI_DIR}/{f}")))
                    {
                        let path = format!("{PKI_DIR}/{missing}");
                        return Ok(Err(phase_err(
                            "preflight",
                            &format!(
                                "\nOne or more conditions for hosting a new control plane instance is not satisfied.\n\n[failure loading certificate or key {missing}: open {path}: no such file or directory]\n\nPlease ensure that:\n* The cluster has a stable controlPlaneEndpoint address.\n* The certificates that must be shared among control plane instances are provided.\n"
                            ),
                        )));
                    }
                }
            }
            let disk = srv
                .vfs
                .get(&format!("{PKI_DIR}/ca.crt"))
                .map(|f| pki::discovery_hash(&f.content));
            match disk {
                Some(Ok(h)) if h == c.ca_hash => {}
                Some(Ok(h)) => {
                    return Ok(Err(phase_err(
                        "control-plane-prepare/certs",
                        &format!(
                            "the CA on disk ({h}) is not the cluster's ({}): the control plane's certificates would not be trusted",
                            c.ca_hash
                        ),
                    )));
                }
                Some(Err(e)) => return Ok(Err(phase_err("control-plane-prepare/certs", &e))),
                None => {
                    return Ok(Err(phase_err(
                        "control-plane-prepare/certs",
                        "no CA certificate on disk",
                    )));
                }
            }
            if !c.has_quorum(&|m| self.is_up_seen_from(m, id, Some(srv))) {
                return Ok(Err(phase_err(
                    "control-plane-join/etcd",
                    "error creating local etcd static pod manifest file: etcdserver: unhealthy cluster",
                )));
            }
            // kubeadm's AddMember meets ErrPeerURLExist and reuses the member registered with this
            // node's peer URL; etcd then starts on an empty data directory as that existing member
            // and exits (raft: "tocommit(N) is out of range [lastIndex(0)]"), so the wait for the
            // cluster fails. The stale member has to be removed first.
            // Only a member whose server no longer runs can hold this address's peer URL (two
            // live servers never share a fixed IP; the in-memory hosts give every server one).
            let ip = srv.addresses.first().copied();
            let stale = c.etcd.iter().find(|m| {
                ip.is_some()
                    && m.ip == ip
                    && m.server != *id
                    && self
                        .servers
                        .get(&m.server)
                        .is_none_or(|s| s.power == crate::guest::Power::Deleted)
            });
            if let Some(stale) = stale {
                return Ok(Err(phase_err(
                    "control-plane-join/etcd",
                    &format!(
                        "error creating local etcd static pod manifest file: timeout waiting for etcd cluster to be available (the member {:x} with peer URL {} already exists: etcd cannot rejoin it with an empty data directory)",
                        stale.id,
                        stale.peer_url()
                    ),
                )));
            }
        }
        // TLS bootstrap: the kubelet authenticates with the token and creates its CSR.
        if secret_str(token, "usage-bootstrap-authentication").as_deref() != Some("true") {
            return Ok(Err(phase_err(
                "kubelet-start",
                "timed out waiting for the kubelet to perform the TLS Bootstrap: the bootstrap token was refused: Unauthorized (it lacks usage-bootstrap-authentication)",
            )));
        }
        // The kubelet's CSR, approved and signed by kube-controller-manager with the cluster CA
        // (a control plane's; a throwaway one when the guest never saw the CA's key).
        let ca = match crate::sim::apiserver::cluster_ca(self, cid) {
            Some(ca) => ca,
            None => match crate::certificates::throwaway_ca() {
                Ok(ca) => ca,
                Err(e) => return Ok(Err(phase_err("kubelet-start", &e))),
            },
        };
        let c = self
            .clusters
            .get(&cid)
            .ok_or(GuestError::UnknownServer { server: id.clone() })?;
        let bootstrapped = crate::certificates::kubelet_bootstrap(
            &c.kube,
            bootstrap_user(&docs.token.id, token),
            &docs.node.name,
            &crate::certificates::Ca {
                cert: &ca.0,
                key: &ca.1,
            },
            date,
        )?;
        let (cert, key) = match bootstrapped {
            Ok(issued) => issued,
            Err(why) => {
                return Ok(Err(phase_err(
                    "kubelet-start",
                    &format!(
                        "timed out waiting for the kubelet to perform the TLS Bootstrap: {why}"
                    ),
                )));
            }
        };
        srv.vfs.write(
            "/var/lib/kubelet/pki/kubelet-client-current.pem",
            format!("{cert}{key}").as_bytes(),
            0o600,
            "root:root",
            false,
        );
        let registration = |marks| {
            kubelet::node(
                &docs.node,
                marks,
                kubelet_version,
                Readiness::NetworkNotReady,
                date,
            )
        };
        let (node, marked) = match (registration(false), registration(control_plane)) {
            (Ok(r), Ok(m)) => (r, m),
            (Err(e), _) | (_, Err(e)) => return Ok(Err(phase_err("kubelet-start", &e))),
        };
        if let Some(old) = &existing {
            // The kubelet takes the existing Node over; providerID is immutable once set.
            let old_pid = old.spec.as_ref().and_then(|s| s.provider_id.clone());
            let new_pid = node.spec.as_ref().and_then(|s| s.provider_id.clone());
            if old_pid.is_some() && old_pid != new_pid {
                let r = format!(
                    "Node {} keeps providerID {} (immutable) though the joining kubelet has {}",
                    docs.node.name,
                    old_pid.clone().unwrap_or_default(),
                    new_pid.unwrap_or_default()
                );
                self.log_reported(id, r, host);
            }
        }
        let c = self
            .clusters
            .get(&cid)
            .ok_or(GuestError::UnknownServer { server: id.clone() })?;
        if let Err(e) = register_node(c, &node, existing.is_some())? {
            return Ok(Err(phase_err("kubelet-start", &e)));
        }
        // control-plane-join's mark-control-plane, with the admin.conf this node's kubeadm made.
        if control_plane
            && let Err(e) = mark_control_plane(c, &docs.node.name, &marked, kubelet_version)?
        {
            return Ok(Err(phase_err("control-plane-join/mark-control-plane", &e)));
        }
        let c = self
            .clusters
            .get_mut(&cid)
            .ok_or(GuestError::UnknownServer { server: id.clone() })?;
        if control_plane {
            // kubeadm join's control-plane phase writes the static pods from the ClusterConfiguration
            // it fetched from kubeadm-config, extraArgs and extraVolumes included.
            static_pods::write(
                &mut srv.vfs,
                v,
                srv.addresses.first().copied(),
                &static_pods::ApiServerExtras::of(&cluster_cfg),
            );
            if let Some(n) = c.kube.get::<Node>(None, &docs.node.name)? {
                put_mirror_pods(c, &n, srv.addresses.first().copied(), v)?;
            }
            c.etcd_raft.index += 1;
            c.etcd.push(EtcdMember::new(
                id.clone(),
                docs.node.name.clone(),
                srv.addresses.first().copied(),
            ));
            srv.api_of = Some(cid);
            // kubeadm's certs phase issues the API server's certificate from the ClusterConfiguration
            // it fetched: names added to kubeadm-config's certSANs reach the control planes that
            // join after (Cluster API updates kubeadm-config before it rolls them).
            srv.serving = Some(crate::cluster::Serving::of(&cluster_cfg));
            srv.vfs.write(
                ADMIN_CONF,
                kubeconfig(&docs.endpoint).as_bytes(),
                0o600,
                "root:root",
                false,
            );
        }
        // Checked above, where a refused gate fails the join.
        let local_mode = control_plane
            && config::kubelet_local_mode(kubelet_version, cluster_cfg.kubelet_local_mode_gate)
                .unwrap_or(false);
        let kubelet_server = match srv.local_api_endpoint() {
            Some(local) if local_mode => local,
            _ => docs.endpoint.clone(),
        };
        srv.vfs.write(
            "/etc/kubernetes/kubelet.conf",
            kubeconfig(&kubelet_server).as_bytes(),
            0o600,
            "root:root",
            false,
        );
        srv.kubelet = Some(KubeletOf {
            cluster: cid,
            node: docs.node.name.clone(),
            // The kubelet pulls the sandbox when its first pod starts; the node is NotReady
            // until then. (A joining control plane's static pods are not held back by it here.)
            sandbox: Sandbox::wanted(host.now()),
        });
        out.push("This node has joined the cluster".into());
        Ok(Ok(out))
    }

    fn log_reported(&mut self, id: &ServerId, r: String, host: &dyn Host) {
        self.record(id, Logged::Reported(r), host);
    }
}
