//! kubeadm's static pod manifests in `/etc/kubernetes/manifests` (its `control-plane` and `etcd`
//! phases of `init` and of `join --control-plane`): what the kubelet runs on a control plane. The
//! images' tags are the ClusterConfiguration's `kubernetesVersion` kubeadm ran with, so each API
//! server's version is its manifest's, fixed when it was written ([`apiserver_version`]), whatever
//! the cluster's ConfigMap says later. As kubeadm does, the API server's and etcd's carry the node's
//! advertise address in annotations (what `kubeadm upgrade` and kos's bootstrap read back).

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::version::Version;
use crate::vfs::Vfs;

/// kubeadm's `GetStaticPodDirectory`.
pub const MANIFESTS_DIR: &str = "/etc/kubernetes/manifests";
/// The etcd image kubeadm's static pod runs (the guest reports this version on `maintenance/status`).
pub const ETCD_VERSION: &str = "3.6.5";
const APISERVER: &str = "kube-apiserver";
const COMPONENTS: [&str; 4] = [
    "etcd",
    APISERVER,
    "kube-controller-manager",
    "kube-scheduler",
];

/// The image of a control-plane component at `kubernetes` (etcd's is pinned per release).
pub fn image(component: &str, kubernetes: Version) -> String {
    if component == "etcd" {
        format!("registry.k8s.io/etcd:{ETCD_VERSION}-0")
    } else {
        format!("registry.k8s.io/{component}:{kubernetes}")
    }
}

fn path(component: &str) -> String {
    format!("{MANIFESTS_DIR}/{component}.yaml")
}

/// kubeadm's annotation with the API server's `<advertise address>:<bind port>`.
const APISERVER_ENDPOINT: &str = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint";

/// `host:port` as Go's `net.JoinHostPort` writes it (an IPv6 address in brackets).
fn join_host_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V6(a) => format!("[{a}]:{port}"),
        IpAddr::V4(a) => format!("{a}:{port}"),
    }
}

/// The API server's flags and hostPath volumes from the ClusterConfiguration (`apiServer.extraArgs`
/// and `extraVolumes`), as kubeadm's control-plane phase puts them into its static pod.
#[derive(Debug, Clone, Default)]
pub struct ApiServerExtras<'a> {
    pub args: &'a [(String, String)],
    pub volumes: &'a [crate::kubeadm::config::HostPathMount],
}

impl<'a> ApiServerExtras<'a> {
    pub fn of(c: &'a crate::kubeadm::config::ClusterDoc) -> Self {
        ApiServerExtras {
            args: &c.api_server_args,
            volumes: &c.api_server_volumes,
        }
    }
}

fn manifest(
    component: &str,
    kubernetes: Version,
    advertise: Option<IpAddr>,
    extras: &ApiServerExtras<'_>,
) -> Value {
    let mut pod = plain_manifest(component, kubernetes, advertise);
    if component != APISERVER {
        return pod;
    }
    let command: Vec<Value> = std::iter::once(APISERVER.to_owned())
        .chain(extras.args.iter().map(|(n, v)| format!("--{n}={v}")))
        .map(Value::String)
        .collect();
    let mounts: Vec<Value> = extras
        .volumes
        .iter()
        .map(|m| json!({"name": m.name, "mountPath": m.mount_path, "readOnly": m.read_only}))
        .collect();
    let volumes: Vec<Value> = extras
        .volumes
        .iter()
        .map(|m| json!({"name": m.name, "hostPath": {"path": m.host_path, "type": m.path_type}}))
        .collect();
    pod["spec"]["containers"][0]["command"] = Value::Array(command);
    pod["spec"]["containers"][0]["volumeMounts"] = Value::Array(mounts);
    pod["spec"]["volumes"] = Value::Array(volumes);
    pod
}

fn plain_manifest(component: &str, kubernetes: Version, advertise: Option<IpAddr>) -> Value {
    let annotations = match (component, advertise) {
        (APISERVER, Some(ip)) => json!({APISERVER_ENDPOINT: join_host_port(ip, 6443)}),
        ("etcd", Some(ip)) => json!({
            "kubeadm.kubernetes.io/etcd.advertise-client-urls": format!("https://{}", join_host_port(ip, 2379)),
        }),
        _ => json!({}),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": component,
            "namespace": "kube-system",
            "annotations": annotations,
            "labels": {"component": component, "tier": "control-plane"},
        },
        "spec": {
            "hostNetwork": true,
            "priorityClassName": "system-node-critical",
            "containers": [{"name": component, "image": image(component, kubernetes), "command": [component]}],
        },
    })
}

/// Writes the four manifests for `kubernetes` as YAML, 0600 as kubeadm writes them; `advertise`:
/// the node's advertise address; `extras`: the API server's flags and volumes.
pub fn write(
    vfs: &mut Vfs,
    kubernetes: Version,
    advertise: Option<IpAddr>,
    extras: &ApiServerExtras<'_>,
) {
    for c in COMPONENTS {
        let text = serde_saphyr::to_string(&manifest(c, kubernetes, advertise, extras))
            .unwrap_or_default();
        vfs.write(&path(c), text.as_bytes(), 0o600, "root:root", false);
    }
}

/// The API server's `<advertise address>:<port>` from its manifest's kubeadm annotation.
pub fn apiserver_endpoint(vfs: &Vfs) -> Option<String> {
    let pod: Value = serde_saphyr::from_str(vfs.text(&path(APISERVER))?).ok()?;
    pod.pointer("/metadata/annotations")?
        .get(APISERVER_ENDPOINT)?
        .as_str()
        .map(str::to_owned)
}

/// `kubeadm reset` removes them.
pub fn remove(vfs: &mut Vfs) {
    for c in COMPONENTS {
        vfs.remove(&path(c));
    }
}

/// The file kube-apiserver's `--encryption-provider-config` names, read as the container sees it:
/// through the hostPath volume whose mount covers the path. `Ok(None)` without the flag (or
/// without a manifest); `Err` is why kube-apiserver exits (the file is not in the container).
pub fn encryption_config(vfs: &Vfs) -> Result<Option<String>, String> {
    let Some(text) = vfs.text(&path(APISERVER)) else {
        return Ok(None);
    };
    let Ok(pod) = serde_saphyr::from_str::<Value>(text) else {
        return Ok(None);
    };
    let container = &pod["spec"]["containers"][0];
    let Some(file) = container["command"].as_array().and_then(|c| {
        c.iter()
            .filter_map(Value::as_str)
            .find_map(|a| a.strip_prefix("--encryption-provider-config="))
    }) else {
        return Ok(None);
    };
    let missing = || {
        format!(
            "error while parsing file: error reading encryption provider configuration file \"{file}\": open {file}: no such file or directory"
        )
    };
    // The longest mount path that holds the file decides which host path it is.
    let mount = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["name"].as_str()?, m["mountPath"].as_str()?)))
        .filter(|(_, at)| {
            file == *at || file.starts_with(&format!("{}/", at.trim_end_matches('/')))
        })
        .max_by_key(|(_, at)| at.len());
    let Some((name, at)) = mount else {
        return Err(missing());
    };
    let host = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == name)
        .and_then(|v| v["hostPath"]["path"].as_str())
        .ok_or_else(missing)?;
    let on_host = format!("{host}{}", &file[at.len()..]);
    vfs.text(&on_host)
        .map(|t| Some(t.to_owned()))
        .ok_or_else(missing)
}

/// The encryption configuration the node's kube-apiserver starts with (none without the flag);
/// `Err` is what it exits with: the file not in the container, or a file its loader refuses.
pub fn apiserver_encryption(vfs: &Vfs) -> Result<kos_kube_fake::EncryptionConfig, String> {
    match encryption_config(vfs)? {
        None => Ok(kos_kube_fake::EncryptionConfig::none()),
        Some(text) => kos_kube_fake::EncryptionConfig::parse(&text).map_err(|e| e.message),
    }
}

/// The version of the kube-apiserver the node's manifest runs: its image's tag. `None` without a
/// manifest (no API server, or a node saved before the guest wrote manifests) or with an image
/// that names no version.
pub fn apiserver_version(vfs: &Vfs) -> Option<Version> {
    let text = vfs.text(&path(APISERVER))?;
    let pod: Value = serde_saphyr::from_str(text).ok()?;
    let image = pod
        .pointer("/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c["name"] == APISERVER)?["image"]
        .as_str()?;
    Version::parse(image.rsplit_once(':')?.1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_version_is_its_manifests_image_tag() {
        let mut vfs = Vfs::new();
        assert_eq!(apiserver_version(&vfs), None);
        let v = Version::parse("1.35.2").unwrap();
        write(
            &mut vfs,
            v,
            Some(IpAddr::from([10, 0, 0, 5])),
            &ApiServerExtras::default(),
        );
        assert_eq!(apiserver_version(&vfs), Some(v));
        // kubeadm's annotation, as YAML the script's sed reads line by line.
        assert_eq!(apiserver_endpoint(&vfs).as_deref(), Some("10.0.0.5:6443"));
        assert!(
            vfs.text("/etc/kubernetes/manifests/kube-apiserver.yaml")
                .unwrap()
                .lines()
                .any(|l| l.trim()
                    == "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 10.0.0.5:6443"),
        );
        write(
            &mut vfs,
            v,
            Some("fd00::5".parse().unwrap()),
            &ApiServerExtras::default(),
        );
        assert_eq!(apiserver_endpoint(&vfs).as_deref(), Some("[fd00::5]:6443"));
        assert!(
            vfs.text("/etc/kubernetes/manifests/kube-scheduler.yaml")
                .unwrap()
                .contains("registry.k8s.io/kube-scheduler:v1.35.2")
        );
        remove(&mut vfs);
        assert_eq!(apiserver_version(&vfs), None);
    }
}
