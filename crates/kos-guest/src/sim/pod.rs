//! What the kubelet gives a pod's container that the in-process stand-ins of the addons' pods (the
//! cloud controller, the CSI driver and its sidecars) need: its argument vector with `$(VAR)`
//! expanded from its `env`, files read through its Secret volumes, and the token of its
//! ServiceAccount with a client of the cluster's `kubernetes` Service.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use tokio::task::JoinHandle;

use crate::cluster::{Cluster, KUBE_SYSTEM};

/// How an in-process container's task ends: returned, or failed with a reason.
pub(crate) type Exit = Result<(), String>;

/// The kubelet's restart back-off.
pub(crate) const BACKOFF_START: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How long a stopping container gets (a pod's default grace).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The kubelet's back-off after `restarts` restarts: 10 s doubling to 5 min.
pub(crate) fn backoff(restarts: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(1u32 << restarts.min(5))
        .min(BACKOFF_MAX)
}

/// What became of a container whose task finished.
#[derive(Debug, PartialEq)]
pub(crate) enum Ended {
    /// It returned, or panicked (an `Err` naming the panic).
    Exited(Exit),
    /// The runtime dropped the task: the simulator is shutting down, which is no failure of the
    /// container's (the CCM once printed "panicked: task … was cancelled; restarting" at the end
    /// of every `kos up --cloud sim`).
    Cancelled,
}

/// The end of a finished task, without waiting.
pub(crate) fn ended(task: JoinHandle<Exit>) -> Ended {
    use futures::FutureExt as _;
    match task.now_or_never() {
        Some(Ok(exit)) => Ended::Exited(exit),
        Some(Err(e)) if e.is_cancelled() => Ended::Cancelled,
        Some(Err(e)) => Ended::Exited(Err(format!("panicked: {e}"))),
        None => Ended::Exited(Err("gone".into())),
    }
}

/// Waits (bounded by the grace period) for stopping containers to finish, then aborts them.
pub(crate) async fn wait_stopped(tasks: Vec<JoinHandle<Exit>>) {
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout(STOP_GRACE, t).await.is_err() {
            abort.abort();
        }
    }
}

/// A container's command line as its binary sees it: `command` then `args` with `$(VAR)` expanded
/// from its `env`, and the binary path the manifests pass first dropped (the images' entrypoints
/// drop it), when it ends in one of `binaries`; and the environment.
pub(crate) fn command_line(
    container: &Value,
    binaries: &[&str],
) -> Result<(Vec<String>, BTreeMap<String, String>), String> {
    let env = container_env(container)?;
    let mut args: Vec<String> = argv(container).iter().map(|a| expand(a, &env)).collect();
    if args
        .first()
        .is_some_and(|a| !a.starts_with('-') && binaries.iter().any(|b| a.ends_with(b)))
    {
        args.remove(0);
    }
    Ok((args, env))
}

/// The image's name without registry, path and tag (`csi-provisioner`).
pub(crate) fn image_name(container: &Value) -> Option<&str> {
    let image = container.get("image")?.as_str()?;
    image.rsplit('/').next()?.split([':', '@']).next()
}

/// One container of a pod template, with the pod spec it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Container<'a> {
    pub namespace: &'a str,
    /// `spec.template.spec`.
    pub pod: &'a Value,
    pub container: &'a Value,
}

pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `command` then `args` (without `command`, the image's entrypoint runs `args`; the CCM images'
/// entrypoints take the binary path as the first argument, as their manifests pass it).
pub(crate) fn argv(container: &Value) -> Vec<String> {
    let mut v = strings(container.get("command"));
    v.extend(strings(container.get("args")));
    v
}

/// The kubelet's `$(VAR)` expansion: a defined variable is replaced, `$$` is a literal `$`, and
/// anything else stays as written.
pub(crate) fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(val) = env.get(&inner[..end])
        {
            out.push_str(val);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

pub(crate) fn container_env(container: &Value) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for e in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = e.get("name").and_then(Value::as_str).unwrap_or_default();
        match e.get("value").and_then(Value::as_str) {
            Some(v) => {
                // Later variables may refer to earlier ones.
                let v = expand(v, &env);
                env.insert(name.to_owned(), v);
            }
            None if e.get("valueFrom").is_some() => {
                return Err(format!(
                    "env {name} uses valueFrom, which the simulated pod does not resolve"
                ));
            }
            None => {
                env.insert(name.to_owned(), String::new());
            }
        }
    }
    Ok(env)
}

/// The file `path` as the container sees it through its Secret volumes.
pub(crate) fn mounted_file(
    cluster: &Cluster,
    pod: &Container<'_>,
    path: &str,
) -> Result<String, String> {
    let mounts = pod
        .container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (mount, rel) = mounts
        .iter()
        .filter_map(|m| {
            let at = m.get("mountPath")?.as_str()?.trim_end_matches('/');
            let rel = path.strip_prefix(at)?.strip_prefix('/')?;
            Some((m, rel))
        })
        .max_by_key(|(m, _)| {
            m.get("mountPath")
                .and_then(Value::as_str)
                .map_or(0, str::len)
        })
        .ok_or_else(|| format!("{path}: no volume is mounted there"))?;
    let volume_name = mount
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let secret_name = pod
        .pod
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(volume_name))
        .and_then(|v| v.pointer("/secret/secretName"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!("{path}: volume {volume_name} is not a Secret volume (not simulated)")
        })?;
    let secret = cluster
        .kube
        .get::<k8s_openapi::api::core::v1::Secret>(Some(pod.namespace), secret_name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!("MountVolume.SetUp failed for volume \"{volume_name}\": secret \"{secret_name}\" not found")
        })?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(rel))
        .map(|b| b.0.clone())
        .ok_or_else(|| format!("{path}: secret {secret_name} has no key {rel}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{path} is not text"))
}

/// The token the kubelet mounts for the pod: its `serviceAccountName`'s (`default` when unnamed).
pub(crate) fn service_account_token(
    cluster: &Cluster,
    pod: &Container<'_>,
) -> Result<String, String> {
    let name = pod
        .pod
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    let ns = pod.namespace;
    if pod.pod.get("automountServiceAccountToken") == Some(&Value::Bool(false)) {
        return Err(format!(
            "automountServiceAccountToken is false: no token of {ns}/{name} to reach the API with"
        ));
    }
    cluster
        .kube
        .service_account_token(pod.namespace, name)
        .map_err(|_| {
            format!(
                "error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
            )
        })
}

/// A client of the cluster's `kubernetes` Service with the pod's token, verifying the API servers'
/// certificates for the Service's name as a pod does.
pub(crate) fn client(service: SocketAddr, ca: &str, token: String) -> Result<kube::Client, String> {
    let uri: http::Uri = format!("https://{service}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let ca_der = x509_parser::pem::parse_x509_pem(ca.as_bytes())
        .map_err(|e| format!("cluster CA: {e}"))?
        .1
        .contents;
    let mut config = kube::Config::new(uri);
    config.root_cert = Some(vec![ca_der]);
    config.tls_server_name = Some("kubernetes.default.svc".into());
    config.auth_info.token = Some(secrecy::SecretString::from(token));
    config.default_namespace = KUBE_SYSTEM.into();
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_is_the_kubelets() {
        let env = BTreeMap::from([
            ("CLUSTER_NAME".to_owned(), "demo".to_owned()),
            (
                "CLOUD_CONFIG".to_owned(),
                "/etc/config/cloud.conf".to_owned(),
            ),
        ]);
        assert_eq!(
            expand("--cluster-name=$(CLUSTER_NAME)", &env),
            "--cluster-name=demo"
        );
        assert_eq!(expand("--x=$(UNSET)", &env), "--x=$(UNSET)");
        assert_eq!(expand("--x=$$(CLUSTER_NAME)", &env), "--x=$(CLUSTER_NAME)");
        assert_eq!(
            expand("$(CLOUD_CONFIG)$(CLUSTER_NAME)", &env),
            "/etc/config/cloud.confdemo"
        );
        assert_eq!(expand("cost: $5", &env), "cost: $5");
    }
}
