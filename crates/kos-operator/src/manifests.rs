//! What `kubectl apply` needs to run kos-operator, as `kos-operator manifests` prints it: its
//! Namespace, the CRD, a ServiceAccount, the RBAC of [`crate::rbac`] (nothing more), and a
//! Deployment of two replicas with leader election, probes and a locked-down container. The chart
//! (charts/kos-operator) renders the same objects with its default values; tests/chart.rs keeps
//! the two equal.

use serde_json::{Value, json};

use crate::rbac::{self, Scope};

/// The namespace the operator runs in (its Lease is there).
pub const NAMESPACE: &str = "kos-system";
/// The ServiceAccount's (and the Deployment's, and the roles') name.
pub const NAME: &str = "kos-operator";
/// The port of `/metrics`, as controller-runtime's default.
pub const METRICS_PORT: u16 = 8080;
/// The port of `/healthz` and `/readyz`, as controller-runtime's default.
pub const PROBE_PORT: u16 = 8081;

/// Every object, in apply order.
#[must_use]
pub fn objects(image: &str) -> Vec<Value> {
    let labels = json!({"app.kubernetes.io/name": NAME});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        serde_json::to_value(crate::resource::crd()).unwrap_or_default(),
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NAME},
            "rules": rbac::rules(Scope::Cluster),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "rules": rbac::rules(Scope::Own),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "securityContext": {
                            "runAsNonRoot": true,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        // Replicas on different nodes: a node lost takes one of them.
                        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"},
                        }]}},
                        "containers": [{
                            "name": NAME,
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            // The image has no entrypoint (scripts/image): the command is named.
                            "command": ["/bin/kos-operator"],
                            "args": [
                                "--leader-elect",
                                format!("--metrics-bind-address=:{METRICS_PORT}"),
                                format!("--health-probe-bind-address=:{PROBE_PORT}"),
                            ],
                            "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                            "ports": [{"name": "metrics", "containerPort": METRICS_PORT},
                                      {"name": "probes", "containerPort": PROBE_PORT}],
                            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "probes"}},
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "probes"}},
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                          "limits": {"memory": "512Mi"}},
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            // The cloud's CA bundle is written here for the session (0600).
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        }),
    ]
}

/// The Deployment's annotation naming the cluster a self-hosted operator keeps: `kos adopt` takes
/// the operator out of that cluster only.
pub const SELF_HOSTED: &str = "kos.dev/self-hosted";

/// [`objects`] for a self-hosted cluster, where the operator runs in the cluster it keeps
/// (`cluster`, in its Deployment's [`SELF_HOSTED`] annotation): its replicas on the control planes
/// (tolerating their taint, the cluster's critical priority), never on a worker a scale-down or
/// the autoscaler may remove.
#[must_use]
pub fn self_hosted(image: &str, cluster: &str) -> Vec<Value> {
    let mut all = objects(image);
    for o in &mut all {
        if o["kind"] == "Deployment" {
            o["metadata"]["annotations"] = json!({ SELF_HOSTED: cluster });
            let pod = &mut o["spec"]["template"]["spec"];
            pod["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""});
            pod["tolerations"] = json!([{
                "key": "node-role.kubernetes.io/control-plane",
                "operator": "Exists",
                "effect": "NoSchedule",
            }]);
            pod["priorityClassName"] = json!("system-cluster-critical");
        }
    }
    all
}

/// The objects as one YAML stream.
///
/// # Errors
/// Never in practice: serialising JSON values.
pub fn yaml(image: &str) -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for o in objects(image) {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&o)?);
    }
    Ok(out)
}
