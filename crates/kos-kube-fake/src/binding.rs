//! `POST pods/{name}/binding`: how the scheduler assigns a pod to a node (kubernetes
//! `pkg/registry/core/pod/storage` `BindingREST`): the body's name must be the URL's, its target a
//! Node by name; a pod already assigned, or being deleted, is a conflict; the pod gets `nodeName`,
//! the binding's annotations and `PodScheduled=True`, and the answer is a `Status` 201.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::store::{Scope, Store, WriteCtx, now};

fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

pub(crate) fn bind(store: &mut Store, ns: &str, name: &str, body: &Value) -> ApiResult<Value> {
    let pods = store
        .type_index("", "v1", "pods")
        .ok_or_else(|| ApiError::no_route("pods"))?;
    let rt = store.types[pods].clone();
    if let Some(kind) = s(body, "/kind")
        && kind != "Binding"
    {
        return Err(ApiError::bad_request(format!(
            "the body is a {kind}, not a Binding"
        )));
    }
    if s(body, "/metadata/name") != Some(name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    // ValidatePodBinding: a Node by name.
    let mut causes = Vec::new();
    if !matches!(s(body, "/target/kind"), None | Some("" | "Node")) {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "target.kind".into(),
            message: format!(
                "Unsupported value: {:?}: supported values: \"Node\", \"<empty>\"",
                s(body, "/target/kind").unwrap_or_default()
            ),
        });
    }
    let node = s(body, "/target/name").unwrap_or_default();
    if node.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: "target.name".into(),
            message: "Required value".into(),
        });
    }
    if !causes.is_empty() {
        return Err(
            ApiError::new(422, "Invalid", format!("Binding \"{name}\" is invalid"))
                .with_causes(causes),
        );
    }
    let mut pod = store.get(pods, ns, name)?;
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(ApiError::conflict(
            &rt,
            name,
            &format!("pod {name} is being deleted, cannot be assigned to a host"),
        ));
    }
    if let Some(assigned) = s(&pod, "/spec/nodeName").filter(|n| !n.is_empty()) {
        return Err(ApiError::conflict(
            &rt,
            name,
            &format!("pod {name} is already assigned to node \"{assigned}\""),
        ));
    }
    pod["spec"]["nodeName"] = json!(node);
    if let Some(Value::Object(extra)) = body.pointer("/metadata/annotations") {
        let meta = pod["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("the stored pod has no metadata"))?;
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = annotations.as_object_mut() {
            for (k, v) in extra {
                a.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(m) = pod["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let ctx = |scope| WriteCtx {
        manager: "kube-scheduler".into(),
        scope,
        dry_run: false,
        keep_status: true,
        validation: None,
        warnings: Default::default(),
        user: None,
    };
    // The registry writes both at once; here the spec, then the status.
    let mut pod = store.update(pods, ns, name, pod, &ctx(Scope::Main))?;
    let mut conditions: Vec<Value> = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()}));
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    pod["status"]["conditions"] = Value::Array(conditions);
    if let Some(m) = pod["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    store.update(pods, ns, name, pod, &ctx(Scope::Status))?;
    Ok(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}
