//! The three client patch formats, applied to a stored object. (Server-side apply is in
//! [`crate::apply`].)
//!
//! - JSON patch (RFC 6902) and JSON merge patch (RFC 7386), through the `json-patch` crate, the one
//!   kube-core itself uses.
//! - Strategic merge patch, implemented here for the fields controllers patch. Maps merge
//!   recursively and `null` deletes a key, as in a merge patch; lists follow the Kubernetes type's
//!   `patchStrategy`/`patchMergeKey`, which this fake knows for these fields only (every other list
//!   is replaced whole, which is also the real default):
//!
//!   | field | strategy |
//!   |---|---|
//!   | `metadata.finalizers` | merge (set union of primitives) |
//!   | `metadata.ownerReferences` | merge by `uid` |
//!   | any `status.conditions` | merge by `type` |
//!   | Node `status.addresses` | merge by `type` (the real key, with its known flaw: two InternalIPs collapse into one; controllers should send a merge patch for addresses) |
//!   | Node `status.volumesAttached` | merge by `name` |
//!   | Node `spec.podCIDRs` | merge (primitives) |
//!   | Node `spec.taints` | **replace** (Taint has no patch strategy) |
//!   | Service `spec.ports` | merge by `port` |
//!   | Service `status.loadBalancer.ingress` | **replace** |
//!   | Pod `spec.containers`, `initContainers`, `ephemeralContainers`, `volumes`, `imagePullSecrets`, containers' `env` | merge by `name` |
//!   | containers' `volumeMounts`, `volumeDevices`, `ports` | merge by `mountPath`, `devicePath`, `containerPort` |
//!   | Pod `spec.hostAliases`, `spec.topologySpreadConstraints` | merge by `ip`, `topologyKey` |
//!   | the same fields of a workload's pod template (`spec.template.spec…`) | as in a Pod |
//!
//!   Directives: `$patch: replace|delete|merge` in maps and in keyed-list elements, `$retainKeys`,
//!   `$deleteFromPrimitiveList/<field>`. `$setElementOrder/<field>` is accepted and ignored
//!   (the merged order is: existing elements in place, new ones appended).

use serde_json::{Map, Value};

use crate::error::ApiError;

/// How the API server merges one list field under a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    Replace,
    MergePrimitives,
    MergeByKey(&'static str),
}

/// `path` is the field path from the object root, list indices left out. A workload's pod
/// template (`spec.template` of Deployments, DaemonSets, ReplicaSets, StatefulSets, Jobs, and
/// CronJobs' `spec.jobTemplate.spec.template`) merges as a Pod does: kubectl's `apply` of a
/// changed image sends only that container, keyed by its name.
fn list_strategy(kind: &str, path: &[String]) -> ListStrategy {
    use ListStrategy::{MergeByKey, MergePrimitives, Replace};
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let (kind, p): (&str, &[&str]) = match (kind, &p[..]) {
        (
            "Deployment"
            | "DaemonSet"
            | "ReplicaSet"
            | "StatefulSet"
            | "Job"
            | "ReplicationController",
            ["spec", "template", rest @ ..],
        ) => ("Pod", rest),
        ("CronJob", ["spec", "jobTemplate", "spec", "template", rest @ ..]) => ("Pod", rest),
        (k, all) => (k, all),
    };
    match (kind, p) {
        (_, ["metadata", "finalizers"]) => MergePrimitives,
        (_, ["metadata", "ownerReferences"]) => MergeByKey("uid"),
        (_, ["status", "conditions"]) => MergeByKey("type"),
        ("Node", ["status", "addresses"]) => MergeByKey("type"),
        ("Node", ["status", "volumesAttached"]) => MergeByKey("name"),
        ("Node", ["spec", "podCIDRs"]) => MergePrimitives,
        ("Service", ["spec", "ports"]) => MergeByKey("port"),
        (
            "Pod",
            [
                "spec",
                "containers"
                | "initContainers"
                | "ephemeralContainers"
                | "volumes"
                | "imagePullSecrets",
            ],
        ) => MergeByKey("name"),
        ("Pod", ["spec", "hostAliases"]) => MergeByKey("ip"),
        ("Pod", ["spec", "topologySpreadConstraints"]) => MergeByKey("topologyKey"),
        ("Pod", ["spec", "containers" | "initContainers", "env"]) => MergeByKey("name"),
        ("Pod", ["spec", "containers" | "initContainers", "volumeMounts"]) => {
            MergeByKey("mountPath")
        }
        ("Pod", ["spec", "containers" | "initContainers", "volumeDevices"]) => {
            MergeByKey("devicePath")
        }
        ("Pod", ["spec", "containers" | "initContainers", "ports"]) => MergeByKey("containerPort"),
        _ => Replace,
    }
}

/// RFC 7386: `null` deletes, maps merge, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    if !patch.is_object() {
        return Err(ApiError::bad_request("a merge patch must be a JSON object"));
    }
    json_patch::merge(target, patch);
    Ok(())
}

/// RFC 6902, all operations or none.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    let mut work = target.clone();
    // A failed `test` op (a client's optimistic-concurrency check) or a missing path: 422, as the
    // real server answers.
    for op in ops.0 {
        if tests_null_at_absent_key(&work, &op) {
            continue;
        }
        json_patch::patch(&mut work, &json_patch::Patch(vec![op])).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        })?;
    }
    *target = work;
    Ok(())
}

/// A `test` of `null` at a key its object does not have: passes on kube-apiserver, whose
/// json-patch (evanphx, v4) reads a missing key as null (kube-runtime's finalizer helper adds the
/// first finalizer after such a test). The `json-patch` crate fails it as a missing path. A
/// missing parent still fails, as it does there.
fn tests_null_at_absent_key(doc: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(t) = op else {
        return false;
    };
    if !t.value.is_null() {
        return false;
    }
    let Some((parent, last)) = t.path.as_str().rsplit_once('/') else {
        return false;
    };
    let key = last.replace("~1", "/").replace("~0", "~");
    matches!(doc.pointer(parent), Some(Value::Object(m)) if !m.contains_key(&key))
}

/// Strategic merge patch for an object of `kind` (see the module docs for what it knows).
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    kind: &str,
) -> Result<(), ApiError> {
    let Value::Object(p) = patch else {
        return Err(ApiError::bad_request(
            "a strategic merge patch must be a JSON object",
        ));
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut path = Vec::new();
    merge_map(target, p, kind, &mut path)
}

fn merge_map(
    target: &mut Value,
    patch: &Map<String, Value>,
    kind: &str,
    path: &mut Vec<String>,
) -> Result<(), ApiError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = patch.clone();
            m.remove("$patch");
            strip_directives(&mut m);
            *target = Value::Object(m);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch type {other:?} in map at {}",
                path.join(".")
            )));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(remove) = v else {
                return Err(ApiError::bad_request(format!("{k} must be a list")));
            };
            if let Some(Value::Array(list)) = t.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        path.push(k.clone());
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(sub) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                merge_map(slot, sub, kind, path)?;
                if slot.is_null() {
                    t.remove(k);
                }
            }
            Value::Array(items) => {
                let strategy = list_strategy(kind, path);
                let current = t.remove(k);
                let merged = merge_list(current, items, strategy, kind, path)?;
                t.insert(k.clone(), merged);
            }
            scalar => {
                t.insert(k.clone(), scalar.clone());
            }
        }
        path.pop();
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(
    current: Option<Value>,
    items: &[Value],
    strategy: ListStrategy,
    kind: &str,
    path: &mut Vec<String>,
) -> Result<Value, ApiError> {
    let replace_all = items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let current = match current {
        Some(Value::Array(a)) if !replace_all => a,
        _ => Vec::new(),
    };
    match strategy {
        ListStrategy::Replace => Ok(Value::Array(
            items.iter().cloned().map(without_directives).collect(),
        )),
        ListStrategy::MergePrimitives => {
            let mut out = current;
            for i in items {
                if !out.contains(i) {
                    out.push(i.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::MergeByKey(key) => {
            let mut out = current;
            for item in items {
                let Value::Object(patch_el) = item else {
                    return Err(ApiError::bad_request(format!(
                        "{}: elements must be objects with the merge key {key:?}",
                        path.join(".")
                    )));
                };
                if patch_el.get("$patch").and_then(Value::as_str) == Some("replace")
                    && patch_el.len() == 1
                {
                    continue;
                }
                let Some(kv) = patch_el.get(key) else {
                    return Err(ApiError::bad_request(format!(
                        "{}: element has no merge key {key:?}",
                        path.join(".")
                    )));
                };
                let pos = out.iter().position(|e| e.get(key) == Some(kv));
                let delete = patch_el.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => merge_map(&mut out[i], patch_el, kind, path)?,
                    (None, false) => out.push(without_directives(item.clone())),
                }
            }
            Ok(Value::Array(out))
        }
    }
}

fn without_directives(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        strip_directives(m);
    }
    v
}

fn strip_directives(m: &mut Map<String, Value>) {
    m.retain(|k, _| !k.starts_with('$'));
    for v in m.values_mut() {
        match v {
            Value::Object(sub) => strip_directives(sub),
            Value::Array(items) => {
                for i in items {
                    if let Value::Object(sub) = i {
                        strip_directives(sub);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_patch_merges_finalizers_and_conditions_and_replaces_taints() -> Result<(), ApiError>
    {
        let mut node = json!({
            "metadata": {"name": "n", "finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
            "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}, {"key": "t2", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure", "status": "False"}]}
        });
        strategic_merge_patch(
            &mut node,
            &json!({
                "metadata": {"finalizers": ["b", "a"], "labels": {"x": null, "z": "3"}},
                "spec": {"taints": [{"key": "t2", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }),
            "Node",
        )?;
        assert_eq!(node["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(node["metadata"]["labels"], json!({"y": "2", "z": "3"}));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "t2", "effect": "NoSchedule"}])
        );
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}])
        );
        Ok(())
    }

    #[test]
    fn strategic_directives_delete_replace_and_retain() -> Result<(), ApiError> {
        let mut svc = json!({
            "metadata": {"finalizers": ["a", "b"], "annotations": {"k": "v"}},
            "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}
        });
        strategic_merge_patch(
            &mut svc,
            &json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "annotations": {"$patch": "replace", "n": "w"}},
                "spec": {"ports": [{"port": 80, "$patch": "delete"}, {"port": 8080, "name": "alt"}]}
            }),
            "Service",
        )?;
        assert_eq!(svc["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(svc["metadata"]["annotations"], json!({"n": "w"}));
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 443, "name": "https"}, {"port": 8080, "name": "alt"}])
        );
        let mut o = json!({"spec": {"a": 1, "b": 2}});
        strategic_merge_patch(
            &mut o,
            &json!({"spec": {"$retainKeys": ["a", "c"], "c": 3}}),
            "X",
        )?;
        assert_eq!(o, json!({"spec": {"a": 1, "c": 3}}));
        Ok(())
    }

    #[test]
    fn a_workloads_pod_template_merges_as_a_pod_spec_does() -> Result<(), ApiError> {
        let mut d = json!({"spec": {"template": {"spec": {
            "containers": [
                {"name": "a", "image": "a:1", "args": ["--x"], "env": [{"name": "E", "value": "1"}]},
                {"name": "b", "image": "b:1"}],
            "volumes": [{"name": "v", "emptyDir": {}}]}}}});
        // What `kubectl apply` sends when only a's image changed.
        strategic_merge_patch(
            &mut d,
            &json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                "containers": [{"name": "a", "image": "a:2"}]}}}}),
            "Deployment",
        )?;
        let cs = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            cs[0],
            json!({"name": "a", "image": "a:2", "args": ["--x"], "env": [{"name": "E", "value": "1"}]})
        );
        assert_eq!(cs[1], json!({"name": "b", "image": "b:1"}));
        let mut ds = d.clone();
        strategic_merge_patch(
            &mut ds,
            &json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "env": [{"name": "F", "value": "2"}]}]}}}}),
            "DaemonSet",
        )?;
        assert_eq!(
            ds["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "E", "value": "1"}, {"name": "F", "value": "2"}])
        );
        Ok(())
    }

    #[test]
    fn a_null_test_passes_where_the_key_is_absent_and_not_where_the_parent_is() {
        // What kube-runtime's finalizer helper sends for an object with no finalizers yet.
        let mut o = json!({"metadata": {"name": "c"}});
        json_patch(
            &mut o,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["kos.dev/cluster"]}]),
        )
        .expect("applied");
        assert_eq!(o["metadata"]["finalizers"], json!(["kos.dev/cluster"]));
        // Now present: the same test fails (someone else added one first).
        let r = json_patch(
            &mut o,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
        );
        assert!(r.is_err());
        let r = json_patch(
            &mut o,
            &json!([{"op": "test", "path": "/spec/nothing/here", "value": null}]),
        );
        assert!(r.is_err(), "a missing parent is a missing path");
    }

    #[test]
    fn json_patch_is_all_or_nothing() {
        let mut o = json!({"metadata": {"resourceVersion": "5"}, "spec": {"a": 1}});
        let r = json_patch(
            &mut o,
            &json!([{"op": "replace", "path": "/spec/a", "value": 2},
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "4"}]),
        );
        assert!(r.is_err());
        assert_eq!(o["spec"]["a"], json!(1));
    }
}
