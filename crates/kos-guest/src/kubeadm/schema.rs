//! kubeadm's `v1beta4` Go types (cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go, with
//! bootstraptoken/v1 and core/v1 Taint) and the kubelet's `v1beta1` KubeletConfiguration field names,
//! as a schema to walk a parsed document against: every field name, its nesting and its JSON type.
//! A field the Go type lacks is reported with its path; a value of the wrong type is the decode error
//! kubeadm fails with.

use serde_json::Value;

/// The JSON shape a Go field takes.
#[derive(Debug)]
pub enum Shape {
    Str,
    Bool,
    Int,
    /// `metav1.Duration`: a Go duration string.
    Duration,
    List(&'static Shape),
    /// `map[string]string` or `map[string]bool`.
    Map(&'static Shape),
    Obj(&'static [(&'static str, Shape)]),
    /// Not checked deeper (kubelet sub-structs kos never writes).
    Any,
}

use Shape::{Any, Bool, Duration, Int, List, Map, Obj, Str};

const ARG: Shape = Obj(&[("name", Str), ("value", Str)]);
const TAINT: Shape = Obj(&[
    ("key", Str),
    ("value", Str),
    ("effect", Str),
    ("timeAdded", Str),
]);
const API_ENDPOINT: Shape = Obj(&[("advertiseAddress", Str), ("bindPort", Int)]);
const PATCHES: Shape = Obj(&[("directory", Str)]);
const TIMEOUTS: Shape = Obj(&[
    ("controlPlaneComponentHealthCheck", Duration),
    ("kubeletHealthCheck", Duration),
    ("kubernetesAPICall", Duration),
    ("etcdAPICall", Duration),
    ("tlsBootstrap", Duration),
    ("discovery", Duration),
    ("upgradeManifests", Duration),
]);
const NODE_REGISTRATION: Shape = Obj(&[
    ("name", Str),
    ("criSocket", Str),
    ("taints", List(&TAINT)),
    ("kubeletExtraArgs", List(&ARG)),
    ("ignorePreflightErrors", List(&Str)),
    ("imagePullPolicy", Str),
    ("imagePullSerial", Bool),
]);
const BOOTSTRAP_TOKEN: Shape = Obj(&[
    ("token", Str),
    ("description", Str),
    ("ttl", Duration),
    ("expires", Str),
    ("usages", List(&Str)),
    ("groups", List(&Str)),
]);
const ENV_VAR: Shape = Obj(&[("name", Str), ("value", Str), ("valueFrom", Any)]);
const HOST_PATH_MOUNT: Shape = Obj(&[
    ("name", Str),
    ("hostPath", Str),
    ("mountPath", Str),
    ("readOnly", Bool),
    ("pathType", Str),
]);
const COMPONENT: Shape = Obj(&[
    ("extraArgs", List(&ARG)),
    ("extraVolumes", List(&HOST_PATH_MOUNT)),
    ("extraEnvs", List(&ENV_VAR)),
]);
const API_SERVER: Shape = Obj(&[
    ("extraArgs", List(&ARG)),
    ("extraVolumes", List(&HOST_PATH_MOUNT)),
    ("extraEnvs", List(&ENV_VAR)),
    ("certSANs", List(&Str)),
]);
const LOCAL_ETCD: Shape = Obj(&[
    ("imageRepository", Str),
    ("imageTag", Str),
    ("dataDir", Str),
    ("extraArgs", List(&ARG)),
    ("extraEnvs", List(&ENV_VAR)),
    ("serverCertSANs", List(&Str)),
    ("peerCertSANs", List(&Str)),
]);
const EXTERNAL_ETCD: Shape = Obj(&[
    ("endpoints", List(&Str)),
    ("caFile", Str),
    ("certFile", Str),
    ("keyFile", Str),
]);

/// `InitConfiguration`.
pub const INIT_CONFIGURATION: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("bootstrapTokens", List(&BOOTSTRAP_TOKEN)),
    ("dryRun", Bool),
    ("nodeRegistration", NODE_REGISTRATION),
    ("localAPIEndpoint", API_ENDPOINT),
    ("certificateKey", Str),
    ("skipPhases", List(&Str)),
    ("patches", PATCHES),
    ("timeouts", TIMEOUTS),
]);

/// `ClusterConfiguration`.
pub const CLUSTER_CONFIGURATION: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    (
        "etcd",
        Obj(&[("local", LOCAL_ETCD), ("external", EXTERNAL_ETCD)]),
    ),
    (
        "networking",
        Obj(&[
            ("serviceSubnet", Str),
            ("podSubnet", Str),
            ("dnsDomain", Str),
        ]),
    ),
    ("kubernetesVersion", Str),
    ("controlPlaneEndpoint", Str),
    ("apiServer", API_SERVER),
    ("controllerManager", COMPONENT),
    ("scheduler", COMPONENT),
    (
        "dns",
        Obj(&[
            ("imageRepository", Str),
            ("imageTag", Str),
            ("disabled", Bool),
        ]),
    ),
    ("proxy", Obj(&[("disabled", Bool)])),
    ("certificatesDir", Str),
    ("imageRepository", Str),
    ("featureGates", Map(&Bool)),
    ("clusterName", Str),
    ("encryptionAlgorithm", Str),
    ("certificateValidityPeriod", Duration),
    ("caCertificateValidityPeriod", Duration),
]);

/// `JoinConfiguration`.
pub const JOIN_CONFIGURATION: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("dryRun", Bool),
    ("nodeRegistration", NODE_REGISTRATION),
    ("caCertPath", Str),
    (
        "discovery",
        Obj(&[
            (
                "bootstrapToken",
                Obj(&[
                    ("token", Str),
                    ("apiServerEndpoint", Str),
                    ("caCertHashes", List(&Str)),
                    ("unsafeSkipCAVerification", Bool),
                ]),
            ),
            ("file", Obj(&[("kubeConfigPath", Str)])),
            ("tlsBootstrapToken", Str),
        ]),
    ),
    (
        "controlPlane",
        Obj(&[("localAPIEndpoint", API_ENDPOINT), ("certificateKey", Str)]),
    ),
    ("skipPhases", List(&Str)),
    ("patches", PATCHES),
    ("timeouts", TIMEOUTS),
]);

/// `kubelet.config.k8s.io/v1beta1` KubeletConfiguration: names checked, the fields kos writes typed.
pub const KUBELET_CONFIGURATION: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("cgroupDriver", Str),
    ("serverTLSBootstrap", Bool),
    ("enableServer", Any),
    ("staticPodPath", Any),
    ("podLogsDir", Any),
    ("syncFrequency", Any),
    ("fileCheckFrequency", Any),
    ("httpCheckFrequency", Any),
    ("staticPodURL", Any),
    ("staticPodURLHeader", Any),
    ("address", Any),
    ("port", Any),
    ("readOnlyPort", Any),
    ("tlsCertFile", Any),
    ("tlsPrivateKeyFile", Any),
    ("tlsCipherSuites", Any),
    ("tlsMinVersion", Any),
    ("rotateCertificates", Any),
    ("authentication", Any),
    ("authorization", Any),
    ("registryPullQPS", Any),
    ("registryBurst", Any),
    ("imagePullCredentialsVerificationPolicy", Any),
    ("preloadedImagesVerificationAllowlist", Any),
    ("eventRecordQPS", Any),
    ("eventBurst", Any),
    ("enableDebuggingHandlers", Any),
    ("enableContentionProfiling", Any),
    ("healthzPort", Any),
    ("healthzBindAddress", Any),
    ("oomScoreAdj", Any),
    ("clusterDomain", Any),
    ("clusterDNS", Any),
    ("streamingConnectionIdleTimeout", Any),
    ("nodeStatusUpdateFrequency", Any),
    ("nodeStatusReportFrequency", Any),
    ("nodeLeaseDurationSeconds", Any),
    ("imageMinimumGCAge", Any),
    ("imageMaximumGCAge", Any),
    ("imageGCHighThresholdPercent", Any),
    ("imageGCLowThresholdPercent", Any),
    ("volumeStatsAggPeriod", Any),
    ("kubeletCgroups", Any),
    ("systemCgroups", Any),
    ("cgroupRoot", Any),
    ("cgroupsPerQOS", Any),
    ("cpuManagerPolicy", Any),
    ("cpuManagerPolicyOptions", Any),
    ("cpuManagerReconcilePeriod", Any),
    ("memoryManagerPolicy", Any),
    ("topologyManagerPolicy", Any),
    ("topologyManagerScope", Any),
    ("topologyManagerPolicyOptions", Any),
    ("qosReserved", Any),
    ("runtimeRequestTimeout", Any),
    ("hairpinMode", Any),
    ("maxPods", Any),
    ("podCIDR", Any),
    ("podPidsLimit", Any),
    ("resolvConf", Any),
    ("runOnce", Any),
    ("cpuCFSQuota", Any),
    ("cpuCFSQuotaPeriod", Any),
    ("nodeStatusMaxImages", Any),
    ("maxOpenFiles", Any),
    ("contentType", Any),
    ("kubeAPIQPS", Any),
    ("kubeAPIBurst", Any),
    ("serializeImagePulls", Any),
    ("maxParallelImagePulls", Any),
    ("evictionHard", Any),
    ("evictionSoft", Any),
    ("evictionSoftGracePeriod", Any),
    ("evictionPressureTransitionPeriod", Any),
    ("evictionMaxPodGracePeriod", Any),
    ("evictionMinimumReclaim", Any),
    ("mergeDefaultEvictionSettings", Any),
    ("podsPerCore", Any),
    ("enableControllerAttachDetach", Any),
    ("protectKernelDefaults", Any),
    ("makeIPTablesUtilChains", Any),
    ("iptablesMasqueradeBit", Any),
    ("iptablesDropBit", Any),
    ("featureGates", Any),
    ("failSwapOn", Any),
    ("memorySwap", Any),
    ("containerLogMaxSize", Any),
    ("containerLogMaxFiles", Any),
    ("containerLogMaxWorkers", Any),
    ("containerLogMonitorInterval", Any),
    ("configMapAndSecretChangeDetectionStrategy", Any),
    ("systemReserved", Any),
    ("kubeReserved", Any),
    ("reservedSystemCPUs", Any),
    ("showHiddenMetricsForVersion", Any),
    ("systemReservedCgroup", Any),
    ("kubeReservedCgroup", Any),
    ("enforceNodeAllocatable", Any),
    ("allowedUnsafeSysctls", Any),
    ("volumePluginDir", Any),
    ("providerID", Any),
    ("kernelMemcgNotification", Any),
    ("logging", Any),
    ("enableSystemLogHandler", Any),
    ("enableSystemLogQuery", Any),
    ("shutdownGracePeriod", Any),
    ("shutdownGracePeriodCriticalPods", Any),
    ("shutdownGracePeriodByPodPriority", Any),
    ("crashLoopBackOff", Any),
    ("reservedMemory", Any),
    ("enableProfilingHandler", Any),
    ("enableDebugFlagsHandler", Any),
    ("seccompDefault", Any),
    ("memoryThrottlingFactor", Any),
    ("registerWithTaints", Any),
    ("registerNode", Any),
    ("tracing", Any),
    ("localStorageCapacityIsolation", Any),
    ("containerRuntimeEndpoint", Any),
    ("imageServiceEndpoint", Any),
    ("failCgroupV1", Any),
    ("userNamespaces", Any),
    ("singleProcessOOMKill", Any),
]);

/// What is wrong with a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A field the Go type has not (kubeadm: a strict-decoding warning, the value is dropped).
    Unknown(String),
    /// A value the Go type cannot take (kubeadm: a decode error).
    Type {
        path: String,
        go_type: &'static str,
        found: &'static str,
    },
}

fn go_type(s: &Shape) -> &'static str {
    match s {
        Str | Duration => "string",
        Bool => "bool",
        Int => "int32",
        List(_) => "[]",
        Map(_) => "map",
        Obj(_) => "struct",
        Any => "any",
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Walks `v` against `shape`, appending every problem with its dotted path.
pub fn check(v: &Value, shape: &Shape, path: &str, out: &mut Vec<Problem>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    let wrong = |out: &mut Vec<Problem>| {
        out.push(Problem::Type {
            path: path.to_owned(),
            go_type: go_type(shape),
            found: json_type(v),
        });
    };
    if v.is_null() {
        return; // null decodes to the zero value
    }
    match shape {
        Any => {}
        Str => {
            if !v.is_string() {
                wrong(out);
            }
        }
        Duration => match v.as_str() {
            Some(s) if parse_go_duration(s).is_some() => {}
            _ => wrong(out),
        },
        Bool => {
            if !v.is_boolean() {
                wrong(out);
            }
        }
        Int => {
            if !v.is_i64() {
                wrong(out);
            }
        }
        List(item) => match v.as_array() {
            Some(a) => {
                for (i, x) in a.iter().enumerate() {
                    check(x, item, &format!("{path}[{i}]"), out);
                }
            }
            None => wrong(out),
        },
        Map(item) => match v.as_object() {
            Some(m) => {
                for (k, x) in m {
                    check(x, item, &join(k), out);
                }
            }
            None => wrong(out),
        },
        Obj(fields) => match v.as_object() {
            Some(m) => {
                for (k, x) in m {
                    match fields.iter().find(|(name, _)| name == k) {
                        Some((_, s)) => check(x, s, &join(k), out),
                        None => out.push(Problem::Unknown(join(k))),
                    }
                }
            }
            None => wrong(out),
        },
    }
}

/// Go's `time.ParseDuration` for what configs use: a sequence of `<number><unit>` (h, m, s, ms, us,
/// µs, ns), or `0`.
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    if s == "0" {
        return Some(std::time::Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let (unit, len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("h", 3600.0),
            ("m", 60.0),
            ("s", 1.0),
        ]
        .iter()
        .find(|(u, _)| rest.starts_with(u))
        .map(|(u, f)| (*f, u.len()))?;
        total += n * unit;
        rest = &rest[len..];
    }
    Some(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_mistyped_fields_have_paths() {
        let v: Value = serde_json::json!({
            "apiVersion": "x", "kind": "JoinConfiguration",
            "nodeRegistration": {"taint": [], "kubeletExtraArgs": {"a": "b"}},
            "discovery": {"bootstrapToken": {"token": "t", "caCertHashes": "sha256:x"}}
        });
        let mut p = Vec::new();
        check(&v, &JOIN_CONFIGURATION, "", &mut p);
        assert!(p.contains(&Problem::Unknown("nodeRegistration.taint".into())));
        assert!(p.iter().any(|x| matches!(x, Problem::Type { path, .. } if path == "nodeRegistration.kubeletExtraArgs")));
        assert!(p.iter().any(|x| matches!(x, Problem::Type { path, .. } if path == "discovery.bootstrapToken.caCertHashes")));
        assert_eq!(parse_go_duration("2h").unwrap().as_secs(), 7200);
        assert_eq!(parse_go_duration("1h30m").unwrap().as_secs(), 5400);
        assert!(parse_go_duration("2 hours").is_none());
    }
}
