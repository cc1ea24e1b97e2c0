//! Defaulting, as kube-apiserver applies it to every object it stores (the `SetDefaults_*`
//! functions of `pkg/apis/*/v1/defaults.go`, and what the Pod admission plugins add), for the
//! fields `kubectl get -o yaml` and `kubectl describe` show on the types this fake serves:
//!
//! - Services: `type`, `sessionAffinity`, each port's `protocol` and `targetPort`,
//!   `internalTrafficPolicy`, `externalTrafficPolicy` and `allocateLoadBalancerNodePorts` where
//!   they apply (the allocations themselves, cluster IPs and node ports, are in [`crate::alloc`]);
//! - Deployments, DaemonSets, ReplicaSets: replicas, rollout strategy, revision history, progress
//!   deadline, and their pod template;
//! - Pod specs: restart and DNS policy, grace period, scheduler, security context; containers'
//!   termination message, image pull policy (`Always` for `:latest` or no tag), port protocol and
//!   probe timings; volume modes of Secret and ConfigMap volumes;
//! - Pods also: `enableServiceLinks`, `priority`, `preemptionPolicy`, the `default`
//!   ServiceAccount, and `phase: Pending` on create;
//! - Namespaces: phase `Active`, the `kubernetes` finalizer and the `kubernetes.io/metadata.name`
//!   label; Secrets: `type: Opaque`; StorageClasses: reclaim policy and binding mode; CRDs:
//!   conversion strategy `None`;
//! - PersistentVolumes: reclaim policy `Retain`, `volumeMode: Filesystem`, phase `Pending`, their
//!   quantities in canonical form (as the real server's serialisation writes them);
//!   PersistentVolumeClaims: `volumeMode: Filesystem`, phase `Pending`; VolumeAttachments:
//!   `status.attached: false`; CSIDrivers: `attachRequired: true`, the other booleans false,
//!   `fsGroupPolicy: ReadWriteOnceWithFSType`, `volumeLifecycleModes: [Persistent]`.
//!
//! Defaulting only fills what is missing, so applying it to an already defaulted object changes
//! nothing.

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;

/// Sets `obj[key]` when it is absent (or null).
fn or_insert(obj: &mut Map<String, Value>, key: &str, v: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.to_owned(), v);
    }
}

/// The map at `key`, made when absent.
fn map_at<'a>(obj: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.to_owned(), json!({}));
    }
    obj.get_mut(key).and_then(Value::as_object_mut)
}

fn each_in<'a>(
    obj: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    obj.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Fills the defaults of `obj`, an object of type `rt`.
pub fn apply(rt: &ResourceType, obj: &mut Value) {
    if rt.group.is_empty() {
        crate::storage::canonicalize(&rt.kind, obj);
    }
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Service") => service(o),
        ("", "Pod") => pod(o),
        ("", "Namespace") => namespace(o),
        ("", "Secret") => or_insert(o, "type", json!("Opaque")),
        ("apps", "Deployment") => deployment(o),
        ("apps", "DaemonSet") => daemon_set(o),
        ("apps", "ReplicaSet") => {
            if let Some(spec) = map_at(o, "spec") {
                or_insert(spec, "replicas", json!(1));
                template(spec);
            }
        }
        ("", kind @ ("PersistentVolume" | "PersistentVolumeClaim")) => storage_defaults(kind, o),
        _ => other_defaults(rt, o),
    }
}

fn storage_defaults(kind: &str, o: &mut Map<String, Value>) {
    match kind {
        "PersistentVolume" => {
            if let Some(spec) = map_at(o, "spec") {
                // Retain: a manually made volume is kept; provisioners set Delete themselves.
                or_insert(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
                or_insert(spec, "volumeMode", json!("Filesystem"));
            }
            if let Some(status) = map_at(o, "status") {
                or_insert(status, "phase", json!("Pending"));
            }
        }
        _ => {
            if let Some(spec) = map_at(o, "spec") {
                or_insert(spec, "volumeMode", json!("Filesystem"));
            }
            if let Some(status) = map_at(o, "status") {
                or_insert(status, "phase", json!("Pending"));
            }
        }
    }
}

fn other_defaults(rt: &ResourceType, o: &mut Map<String, Value>) {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("storage.k8s.io", "VolumeAttachment") => {
            if let Some(status) = map_at(o, "status") {
                // `attached` is not omitempty: a new attachment reads `attached: false`.
                or_insert(status, "attached", json!(false));
            }
        }
        ("storage.k8s.io", "CSIDriver") => {
            if let Some(spec) = map_at(o, "spec") {
                // SetDefaults_CSIDriver; seLinuxMount as SELinuxMountReadWriteOncePod (beta, on)
                // has it.
                or_insert(spec, "attachRequired", json!(true));
                or_insert(spec, "podInfoOnMount", json!(false));
                or_insert(spec, "storageCapacity", json!(false));
                or_insert(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
                if spec
                    .get("volumeLifecycleModes")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
                {
                    spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
                }
                or_insert(spec, "requiresRepublish", json!(false));
                or_insert(spec, "seLinuxMount", json!(false));
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            or_insert(o, "reclaimPolicy", json!("Delete"));
            or_insert(o, "volumeBindingMode", json!("Immediate"));
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            if let Some(spec) = map_at(o, "spec") {
                or_insert(spec, "conversion", json!({"strategy": "None"}));
            }
        }
        _ => {}
    }
}

fn service(o: &mut Map<String, Value>) {
    let Some(spec) = map_at(o, "spec") else {
        return;
    };
    or_insert(spec, "type", json!("ClusterIP"));
    let type_ = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    or_insert(spec, "sessionAffinity", json!("None"));
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP") {
        or_insert(
            spec,
            "sessionAffinityConfig",
            json!({"clientIP": {"timeoutSeconds": 10800}}),
        );
    }
    for port in each_in(spec, "ports") {
        or_insert(port, "protocol", json!("TCP"));
        let target = port.get("port").cloned().unwrap_or(Value::Null);
        or_insert(port, "targetPort", target);
    }
    if type_ != "ExternalName" {
        or_insert(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    // Every externally accessible Service: node ports, or a ClusterIP with external IPs.
    let external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if matches!(type_.as_str(), "NodePort" | "LoadBalancer")
        || (type_ == "ClusterIP" && external_ips)
    {
        or_insert(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if type_ == "LoadBalancer" {
        or_insert(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
}

fn namespace(o: &mut Map<String, Value>) {
    let name = o
        .get("metadata")
        .and_then(|m| m.get("name"))
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(labels) = map_at(o, "metadata").and_then(|m| map_at(m, "labels")) {
        // The NamespaceDefaultLabelName label: always the namespace's own name.
        labels.insert("kubernetes.io/metadata.name".into(), name);
    }
    if let Some(spec) = map_at(o, "spec") {
        or_insert(spec, "finalizers", json!(["kubernetes"]));
    }
    if let Some(status) = map_at(o, "status") {
        or_insert(status, "phase", json!("Active"));
    }
}

fn deployment(o: &mut Map<String, Value>) {
    let Some(spec) = map_at(o, "spec") else {
        return;
    };
    or_insert(spec, "replicas", json!(1));
    if let Some(strategy) = map_at(spec, "strategy") {
        or_insert(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate")
            && let Some(ru) = map_at(strategy, "rollingUpdate")
        {
            or_insert(ru, "maxUnavailable", json!("25%"));
            or_insert(ru, "maxSurge", json!("25%"));
        }
    }
    or_insert(spec, "revisionHistoryLimit", json!(10));
    or_insert(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

fn daemon_set(o: &mut Map<String, Value>) {
    let Some(spec) = map_at(o, "spec") else {
        return;
    };
    if let Some(strategy) = map_at(spec, "updateStrategy") {
        or_insert(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate")
            && let Some(ru) = map_at(strategy, "rollingUpdate")
        {
            or_insert(ru, "maxUnavailable", json!(1));
            or_insert(ru, "maxSurge", json!(0));
        }
    }
    or_insert(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}

/// `spec.template.spec` of a workload.
fn template(spec: &mut Map<String, Value>) {
    if let Some(pod_spec) = spec
        .get_mut("template")
        .and_then(Value::as_object_mut)
        .and_then(|t| map_at(t, "spec"))
    {
        pod_spec_defaults(pod_spec);
    }
}

fn pod(o: &mut Map<String, Value>) {
    let mirror = o
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if let Some(spec) = map_at(o, "spec") {
        pod_spec_defaults(spec);
        or_insert(spec, "enableServiceLinks", json!(true));
        or_insert(spec, "priority", json!(0));
        or_insert(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
        // The ServiceAccount admission plugin, which leaves mirror pods without one.
        if !mirror {
            or_insert(spec, "serviceAccountName", json!("default"));
        }
        if let Some(sa) = spec.get("serviceAccountName").cloned() {
            or_insert(spec, "serviceAccount", sa);
        }
    }
    if let Some(status) = map_at(o, "status") {
        or_insert(status, "phase", json!("Pending"));
    }
}

fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    or_insert(spec, "restartPolicy", json!("Always"));
    or_insert(spec, "terminationGracePeriodSeconds", json!(30));
    or_insert(spec, "dnsPolicy", json!("ClusterFirst"));
    or_insert(spec, "securityContext", json!({}));
    or_insert(spec, "schedulerName", json!("default-scheduler"));
    for key in ["containers", "initContainers"] {
        for c in each_in(spec, key) {
            container(c);
        }
    }
    for v in each_in(spec, "volumes") {
        for source in ["secret", "configMap", "projected", "downwardAPI"] {
            if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
                or_insert(s, "defaultMode", json!(420));
            }
        }
    }
}

/// `:latest` or no tag pulls always; a digest or another tag only when absent.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn container(c: &mut Map<String, Value>) {
    or_insert(c, "terminationMessagePath", json!("/dev/termination-log"));
    or_insert(c, "terminationMessagePolicy", json!("File"));
    or_insert(c, "resources", json!({}));
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    or_insert(c, "imagePullPolicy", json!(pull_policy(&image)));
    for p in each_in(c, "ports") {
        or_insert(p, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            or_insert(p, "timeoutSeconds", json!(1));
            or_insert(p, "periodSeconds", json!(10));
            or_insert(p, "successThreshold", json!(1));
            or_insert(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                or_insert(h, "scheme", json!("HTTP"));
            }
        }
    }
    for e in each_in(c, "env") {
        if let Some(f) = e
            .get_mut("valueFrom")
            .and_then(Value::as_object_mut)
            .and_then(|vf| vf.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            or_insert(f, "apiVersion", json!("v1"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;

    #[test]
    fn a_deployment_gets_what_kubectl_create_deployment_shows() {
        let mut d = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}});
        apply(&ResourceType::of::<Deployment>(true), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["containers"][0]["terminationMessagePolicy"], "File");
        let again = d.clone();
        apply(&ResourceType::of::<Deployment>(true), &mut d);
        assert_eq!(d, again, "defaulting twice changes nothing");
    }

    #[test]
    fn a_load_balancer_service_gets_its_policies_and_ports_their_protocol() {
        let mut s = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        apply(&ResourceType::of::<Service>(true), &mut s);
        assert_eq!(
            s["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(s["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(s["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(s["spec"]["sessionAffinity"], "None");
        // kubernetes' test/integration/service: a ClusterIP with external IPs is reachable from
        // outside, and gets the policy too.
        let mut external =
            json!({"spec": {"externalIPs": ["198.51.100.7"], "ports": [{"port": 80}]}});
        apply(&ResourceType::of::<Service>(true), &mut external);
        assert_eq!(external["spec"]["externalTrafficPolicy"], "Cluster");
        let mut internal = json!({"spec": {"ports": [{"port": 80}]}});
        apply(&ResourceType::of::<Service>(true), &mut internal);
        assert_eq!(internal["spec"].get("externalTrafficPolicy"), None);
        let mut headless = json!({"spec": {"type": "ExternalName", "externalName": "x.example"}});
        apply(&ResourceType::of::<Service>(true), &mut headless);
        assert!(headless["spec"].get("internalTrafficPolicy").is_none());
    }

    #[test]
    fn image_pull_policy_follows_the_tag() {
        assert_eq!(pull_policy("nginx"), "Always");
        assert_eq!(pull_policy("nginx:latest"), "Always");
        assert_eq!(pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(pull_policy("registry:5000/nginx"), "Always");
        assert_eq!(pull_policy("nginx@sha256:abc"), "IfNotPresent");
    }
}
