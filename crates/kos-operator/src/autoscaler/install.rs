//! cluster-autoscaler installed into a Cluster with autoscaled pools, wired to the operator's
//! endpoint: in the cluster's `kube-system`, its ServiceAccount and RBAC (what it reads and writes,
//! no more: [`CLUSTER_RULES`], [`NAMESPACE_RULES`]), the Secret of its externalgrpc cloud-config
//! and client certificate (common name `<namespace>/<cluster>`, signed by the endpoint's CA, kept
//! until a third of its year is left), and its Deployment on the control planes (never on a node
//! it may remove), of the cluster's minor (the pins table). Applied after every turn that ends
//! Ready, server-side as `kos-operator`; taken out when no pool is autoscaled any more.

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::{Value, json};

use super::tls::{CA_FILE, TlsError};

/// The CA's key beside `ca.crt` in `--autoscaler-tls-dir`: the operator signs the autoscalers'
/// client certificates with it.
pub const CA_KEY_FILE: &str = "ca.key";
/// Where it all goes in the cluster.
pub const NAMESPACE: &str = "kube-system";
/// The ServiceAccount, RBAC objects and Deployment (and the leader-election Lease it takes).
pub const NAME: &str = "cluster-autoscaler";
/// The Secret of the cloud-config and the client certificate.
pub const SECRET: &str = "cluster-autoscaler-externalgrpc";
/// Where the Secret is mounted in the container.
pub const MOUNT: &str = "/etc/kos-autoscaler";
/// The field manager of the objects.
pub const MANAGER: &str = "kos-operator";
/// The pod template's annotation holding the client certificate's digest: a new certificate rolls
/// the Deployment (the autoscaler reads its files once, at start).
pub const CERT_ANNOTATION: &str = "kos.dev/client-certificate";
/// A client certificate's lifetime.
pub const CERT_DAYS: i64 = 365;
/// The user the container runs as (the image's nonroot).
const USER: i64 = 65532;

/// One RBAC rule: `(API group, resources, verbs, resourceNames)`.
pub type Rule = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

/// What cluster-autoscaler reads and writes across the cluster: its informers' lists and watches,
/// its taints on nodes, evictions, pod conditions and Events. As upstream's chart grants for
/// the externalgrpc provider, less the `extensions` group (gone from every supported minor) and
/// the `endpoints` leader lock (1.36 elects on a Lease) and cluster-wide ConfigMaps (it reads its
/// own namespace's).
pub const CLUSTER_RULES: &[Rule] = &[
    ("", &["events"], &["create", "patch"], &[]),
    ("", &["pods/eviction"], &["create"], &[]),
    ("", &["pods/status"], &["update"], &[]),
    ("", &["nodes"], &["get", "list", "watch", "update"], &[]),
    (
        "",
        &[
            "namespaces",
            "pods",
            "services",
            "replicationcontrollers",
            "persistentvolumeclaims",
            "persistentvolumes",
        ],
        &["get", "list", "watch"],
        &[],
    ),
    (
        "apps",
        &["daemonsets", "replicasets", "statefulsets"],
        &["get", "list", "watch"],
        &[],
    ),
    (
        "batch",
        &["jobs", "cronjobs"],
        &["get", "list", "watch"],
        &[],
    ),
    ("policy", &["poddisruptionbudgets"], &["list", "watch"], &[]),
    (
        "storage.k8s.io",
        &[
            "storageclasses",
            "csinodes",
            "csidrivers",
            "csistoragecapacities",
        ],
        &["get", "list", "watch"],
        &[],
    ),
];

/// What it writes in `kube-system`: its status ConfigMap and its leader-election Lease.
pub const NAMESPACE_RULES: &[Rule] = &[
    ("", &["configmaps"], &["list", "watch", "create"], &[]),
    (
        "",
        &["configmaps"],
        &["get", "update", "delete"],
        &["cluster-autoscaler-status"],
    ),
    ("coordination.k8s.io", &["leases"], &["create"], &[]),
    (
        "coordination.k8s.io",
        &["leases"],
        &["get", "update"],
        &[NAME],
    ),
];

/// Why the autoscaler could not be installed. Never holds key material.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("the autoscaler CA in {dir}: {source}")]
    Ca {
        dir: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("signing the autoscaler's client certificate: {0}")]
    Sign(#[source] rcgen::Error),
    #[error("{what} in the cluster: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// How the operator installs cluster-autoscaler: the address the clusters dial and the CA it signs
/// their certificates with, read from its directory at each install (cert-manager may renew it in
/// place, and the endpoint then trusts the new one: see [`super::tls::Tls`]).
pub struct Install {
    /// `host:port` of the endpoint as the clusters reach it; its serving certificate names `host`.
    pub address: String,
    dir: std::path::PathBuf,
    /// The CA as last read whole: kept when the directory stops making one.
    last: std::sync::Mutex<Ca>,
}

/// The CA's certificate (the autoscalers verify the endpoint with it) and key (it signs their
/// certificates).
#[derive(Clone)]
struct Ca {
    pem: String,
    key: SecretString,
}

impl std::fmt::Debug for Install {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Install")
            .field("address", &self.address)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Install {
    /// From `--autoscaler-advertise-address` and the `ca.crt` and `ca.key` of `--autoscaler-tls-dir`.
    ///
    /// # Errors
    /// A file that cannot be read, or a CA that does not parse.
    pub fn load(address: &str, dir: &Path) -> Result<Install, InstallError> {
        Ok(Install {
            address: address.to_owned(),
            dir: dir.to_owned(),
            last: std::sync::Mutex::new(Ca::read(dir)?),
        })
    }

    /// The CA as the directory holds it now, or the last one it held whole.
    fn ca(&self) -> Ca {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match Ca::read(&self.dir) {
            Ok(ca) => *last = ca,
            Err(e) => tracing::warn!("{e}; signing with the CA read before"),
        }
        last.clone()
    }
}

impl Ca {
    fn read(dir: &Path) -> Result<Ca, InstallError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| TlsError::Read { path, source })
        };
        let ca = Ca {
            pem: read(CA_FILE)?,
            key: SecretString::from(read(CA_KEY_FILE)?),
        };
        ca.issuer().map_err(|source| InstallError::Ca {
            dir: dir.display().to_string(),
            source,
        })?;
        Ok(ca)
    }

    fn issuer(&self) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>, rcgen::Error> {
        let key = rcgen::KeyPair::from_pem(self.key.expose_secret())?;
        rcgen::Issuer::from_ca_cert_pem(&self.pem, key)
    }

    /// A client certificate for the Cluster: `(cert PEM, key PEM)`.
    fn issue(&self, namespace: &str, name: &str) -> Result<(String, SecretString), InstallError> {
        let issuer = self.issuer().map_err(InstallError::Sign)?;
        let (cert, key) = super::tls::leaf(
            &issuer,
            &format!("{namespace}/{name}"),
            Vec::new(),
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        )
        .map_err(InstallError::Sign)?;
        Ok((cert, SecretString::from(key)))
    }
}

/// Whether `cert_pem` is a client certificate of this CA for `cn` with more than a third of its
/// lifetime left.
fn keeps(cert_pem: &str, ca_pem: &str, cn: &str) -> bool {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()) else {
        return false;
    };
    let Ok((_, ca)) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()) else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (pem.parse_x509(), ca.parse_x509()) else {
        return false;
    };
    let named = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        == Some(cn);
    let signed = cert.verify_signature(Some(ca.public_key())).is_ok();
    let v = cert.validity();
    let (from, to) = (v.not_before.timestamp(), v.not_after.timestamp());
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    named && signed && to - now > (to - from) / 3
}

/// The cloud-config of cluster-autoscaler's externalgrpc provider (its `cloudConfig`: the YAML keys
/// it reads, files as paths).
#[must_use]
pub fn cloud_config(address: &str) -> String {
    format!(
        "address: \"{address}\"\ncert: {MOUNT}/tls.crt\nkey: {MOUNT}/tls.key\ncacert: {MOUNT}/ca.crt\n\
         grpc_timeout: 10s\n"
    )
}

fn rules(table: &[Rule]) -> Vec<Value> {
    table
        .iter()
        .map(|(group, resources, verbs, names)| {
            let mut r = json!({"apiGroups": [group], "resources": resources, "verbs": verbs});
            if !names.is_empty() {
                r["resourceNames"] = json!(names);
            }
            r
        })
        .collect()
}

/// Every object but the Secret, for `image`, with the client certificate's digest on the pod.
#[must_use]
pub fn objects(image: &str, cert_digest: &str) -> Vec<Value> {
    let labels = json!({
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/managed-by": MANAGER,
    });
    let meta = |namespaced: bool| {
        let mut m = json!({"name": NAME, "labels": labels});
        if namespaced {
            m["namespace"] = json!(NAMESPACE);
        }
        m
    };
    let subject = json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]);
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(true),
               "automountServiceAccountToken": true}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": meta(false), "rules": rules(CLUSTER_RULES)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": meta(false),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
               "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": meta(true), "rules": rules(NAMESPACE_RULES)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": meta(true),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
               "subjects": subject}),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(true),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                "template": {
                    "metadata": {"labels": labels, "annotations": {CERT_ANNOTATION: cert_digest}},
                    "spec": {
                        "serviceAccountName": NAME,
                        "priorityClassName": "system-cluster-critical",
                        // On a control plane: never on a node it may remove.
                        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                        "tolerations": [
                            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                             "effect": "NoSchedule"},
                            {"key": "node.cloudprovider.kubernetes.io/uninitialized",
                             "operator": "Exists", "effect": "NoSchedule"},
                        ],
                        "securityContext": {
                            "runAsNonRoot": true, "runAsUser": USER, "runAsGroup": USER,
                            "fsGroup": USER, "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [{
                            "name": NAME,
                            "image": image,
                            "command": ["/cluster-autoscaler"],
                            "args": [
                                "--cloud-provider=externalgrpc",
                                format!("--cloud-config={MOUNT}/cloud-config"),
                                format!("--namespace={NAMESPACE}"),
                                "--leader-elect=true",
                                "--balance-similar-node-groups=true",
                                "--expander=least-waste",
                                "--v=2",
                            ],
                            "ports": [{"name": "metrics", "containerPort": 8085, "protocol": "TCP"}],
                            "livenessProbe": {"httpGet": {"path": "/health-check", "port": "metrics"}},
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "300Mi"},
                                "limits": {"memory": "600Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "config", "mountPath": MOUNT, "readOnly": true}],
                        }],
                        "volumes": [{"name": "config",
                                     "secret": {"secretName": SECRET, "defaultMode": 0o440}}],
                    },
                },
            },
        }),
    ]
}

/// Installs (or keeps) the autoscaler of Cluster `namespace/name` in the cluster `client` reaches,
/// at `image`.
///
/// # Errors
/// [`InstallError`].
pub async fn ensure(
    client: &kube::Client,
    install: &Install,
    namespace: &str,
    name: &str,
    image: &str,
) -> Result<(), InstallError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let what = |what: &str| {
        let what = what.to_owned();
        move |source| InstallError::Api { what, source }
    };
    let held = secrets
        .get_opt(SECRET)
        .await
        .map_err(what("reading its Secret"))?;
    let text = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    let cn = format!("{namespace}/{name}");
    let ca = install.ca();
    let kept = held.as_ref().and_then(|s| {
        let cert = text(s, "tls.crt")?;
        let key = text(s, "tls.key")?;
        (keeps(&cert, &ca.pem, &cn)
            && text(s, "ca.crt").as_deref() == Some(ca.pem.as_str())
            && text(s, "cloud-config") == Some(cloud_config(&install.address)))
        .then(|| (cert, SecretString::from(key)))
    });
    let (cert, key) = match kept {
        Some(k) => k,
        None => ca.issue(namespace, name)?,
    };
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": MANAGER}},
        "type": "Opaque",
        "stringData": {
            "cloud-config": cloud_config(&install.address),
            "tls.crt": cert,
            "tls.key": key.expose_secret(),
            "ca.crt": ca.pem,
        },
    });
    let digest = {
        use sha2::Digest as _;
        let d = sha2::Sha256::digest(cert.as_bytes());
        d.iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    crate::apply::apply_all(
        client,
        std::iter::once(secret).chain(objects(image, &digest)),
        MANAGER,
    )
    .await
    .map_err(|e| InstallError::Api {
        what: format!("applying {} {}", e.kind, e.name),
        source: e.source,
    })
}

/// Takes out the Deployment and the Secret kos-operator made, when no pool is autoscaled (the
/// RBAC objects stay: they grant nothing with no pod running as the ServiceAccount).
///
/// # Errors
/// [`InstallError`].
pub async fn remove(client: &kube::Client) -> Result<(), InstallError> {
    let gone = |r: Result<_, kube::Error>, what: &str| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(InstallError::Api {
            what: what.to_owned(),
            source,
        }),
    };
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), NAMESPACE);
    let managed = |labels: Option<&std::collections::BTreeMap<String, String>>| {
        labels
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str)
            == Some(MANAGER)
    };
    if let Some(d) = deployments
        .get_opt(NAME)
        .await
        .map_err(|source| InstallError::Api {
            what: "reading its Deployment".into(),
            source,
        })?
        && managed(d.metadata.labels.as_ref())
    {
        gone(
            deployments
                .delete(NAME, &DeleteParams::default())
                .await
                .map(drop),
            "deleting its Deployment",
        )?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
        gone(
            secrets
                .delete(SECRET, &DeleteParams::default())
                .await
                .map(drop),
            "deleting its Secret",
        )?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn new_ca() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "autoscalers");
        Ca {
            pem: params.self_signed(&key).unwrap().pem(),
            key: SecretString::from(key.serialize_pem()),
        }
    }

    fn write(dir: &Path, ca: &Ca) {
        std::fs::write(dir.join(CA_FILE), &ca.pem).unwrap();
        std::fs::write(dir.join(CA_KEY_FILE), ca.key.expose_secret()).unwrap();
    }

    #[test]
    fn a_client_certificate_is_kept_while_it_is_this_cas_and_the_clusters() {
        let ca = new_ca();
        let (cert, _) = ca.issue("fleet", "demo").unwrap();
        assert!(keeps(&cert, &ca.pem, "fleet/demo"));
        assert_eq!(
            super::super::tls::cluster_of(
                &x509_parser::pem::parse_x509_pem(cert.as_bytes())
                    .unwrap()
                    .1
                    .contents
            ),
            Some(("fleet".into(), "demo".into()))
        );
        assert!(!keeps(&cert, &ca.pem, "fleet/other"));
        assert!(!keeps(&cert, &new_ca().pem, "fleet/demo"), "another CA's");
        assert!(!keeps("junk", &ca.pem, "fleet/demo"));
    }

    /// cert-manager renews the CA in place: the next install signs with the new one (whose
    /// certificates the endpoint now asks for); a directory caught half written keeps the last.
    #[test]
    fn the_ca_is_read_again_at_each_install() {
        let dir = tempfile::tempdir().unwrap();
        let (first, renewed) = (new_ca(), new_ca());
        write(dir.path(), &first);
        let install = Install::load("kos.example:8443", dir.path()).unwrap();
        assert_eq!(install.ca().pem, first.pem);
        write(dir.path(), &renewed);
        let (cert, _) = install.ca().issue("fleet", "demo").unwrap();
        assert!(keeps(&cert, &renewed.pem, "fleet/demo"));
        std::fs::write(dir.path().join(CA_KEY_FILE), "not a key").unwrap();
        assert_eq!(install.ca().pem, renewed.pem);
    }

    #[test]
    fn the_cloud_config_names_the_mounted_files() {
        let c = cloud_config("kos.example:8443");
        assert!(c.contains("address: \"kos.example:8443\""));
        for f in ["tls.crt", "tls.key", "ca.crt"] {
            assert!(c.contains(&format!("{MOUNT}/{f}")), "{f}");
        }
    }
}
