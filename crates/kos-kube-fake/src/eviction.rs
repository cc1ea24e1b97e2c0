//! The Eviction API and PodDisruptionBudgets, as kube-apiserver's eviction REST
//! (`pkg/registry/core/pod/storage/eviction.go`) and the disruption controller
//! (`pkg/controller/disruption`) decide them:
//! - `POST .../pods/{name}/eviction` with a `policy/v1` Eviction deletes the pod and answers a
//!   `Status` Success 201, unless the one PodDisruptionBudget selecting it allows no disruption:
//!   then 429 TooManyRequests, "Cannot evict pod as it would violate the pod's disruption
//!   budget.", with a `DisruptionBudget` cause naming the budget. More than one budget is a 500, as
//!   the real server answers. A pod that is already terminal (Succeeded/Failed) or Pending is
//!   deleted without a budget check; an unhealthy pod (not Ready) is deleted when the budget is
//!   healthy (the default `unhealthyPodEvictionPolicy: IfHealthyBudget`) or the policy is
//!   `AlwaysAllow`.
//! - A budget's status: `expectedPods`, `currentHealthy` (matching pods Ready and not being
//!   deleted), `desiredHealthy` and `disruptionsAllowed = max(currentHealthy - desiredHealthy, 0)`.
//!   An integer `minAvailable` counts the matching pods as expected; a percentage or
//!   `maxUnavailable` needs the pods' controllers' scale (`spec.replicas` of their ReplicaSet,
//!   StatefulSet, ReplicationController or Deployment): pods without one make the budget allow
//!   nothing, as the controller's "found no controllers" does.
//!
//! Simplified: evictions are not tracked in `status.disruptedPods` (a deleted pod is gone at once
//! here), and `observedGeneration` is always current (the status is computed when asked).

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::store::{Scope, Store, WriteCtx};

const TOO_MANY: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

/// A `metav1.LabelSelector` (as JSON) against labels: a missing selector matches nothing, an empty
/// one everything (policy/v1).
fn selects(selector: Option<&Value>, obj: &Value) -> bool {
    let Some(sel) = selector.filter(|v| !v.is_null()) else {
        return false;
    };
    let labels = obj.pointer("/metadata/labels");
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let by_label = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_expr = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|es| {
            es.iter().all(|e| {
                let key = s(e, "/key").unwrap_or_default();
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match s(e, "/operator") {
                    Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                    Some("Exists") => label(key).is_some(),
                    Some("DoesNotExist") => label(key).is_none(),
                    _ => false,
                }
            })
        });
    by_label && by_expr
}

fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| s(c, "/type") == Some("Ready") && s(c, "/status") == Some("True"))
        })
}

fn deleting(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// An `IntOrString` of a budget against `expected`: an integer, or a percentage rounded up.
fn scaled(v: &Value, expected: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(p) => {
            let pct: i64 = p.strip_suffix('%')?.parse().ok()?;
            Some((pct * expected + 99) / 100)
        }
        _ => None,
    }
}

/// The scale of the controllers of the pods (`None` when one has no controller of a known kind).
fn controllers_scale(store: &Store, ns: &str, pods: &[Value]) -> Option<i64> {
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut total = 0;
    for p in pods {
        let owner = p
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|os| {
                os.iter()
                    .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            })?;
        let (kind, name) = (s(owner, "/kind")?, s(owner, "/name")?);
        if seen.contains(&(kind.to_owned(), name.to_owned())) {
            continue;
        }
        seen.push((kind.to_owned(), name.to_owned()));
        let (group, plural) = match kind {
            "ReplicaSet" => ("apps", "replicasets"),
            "StatefulSet" => ("apps", "statefulsets"),
            "Deployment" => ("apps", "deployments"),
            "ReplicationController" => ("", "replicationcontrollers"),
            _ => return None,
        };
        let res = store.type_index(group, "v1", plural)?;
        let obj = store.get(res, ns, name).ok()?;
        total += obj
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
    }
    Some(total)
}

/// A budget's status, computed as the disruption controller does.
fn budget_status(store: &Store, pods_res: usize, pdb: &Value) -> Value {
    let ns = s(pdb, "/metadata/namespace").unwrap_or_default();
    let selector = pdb.pointer("/spec/selector");
    let pods: Vec<Value> = store
        .list(pods_res, Some(ns), &Default::default(), &Default::default())
        .into_iter()
        .filter(|p| selects(selector, p))
        .collect();
    let healthy = pods.iter().filter(|p| ready(p) && !deleting(p)).count();
    let healthy = i64::try_from(healthy).unwrap_or(i64::MAX);
    let count = i64::try_from(pods.len()).unwrap_or(i64::MAX);
    let min = pdb.pointer("/spec/minAvailable");
    let max = pdb.pointer("/spec/maxUnavailable");
    let (expected, desired) = match (min, max) {
        (Some(Value::Number(n)), _) => (count, n.as_i64()),
        (Some(m), _) => match controllers_scale(store, ns, &pods) {
            Some(e) => (e, scaled(m, e)),
            None => (0, None),
        },
        (None, Some(m)) => match controllers_scale(store, ns, &pods) {
            Some(e) => (e, scaled(m, e).map(|u| (e - u).max(0))),
            None => (0, None),
        },
        (None, None) => (count, Some(0)),
    };
    let allowed = desired.map_or(0, |d| (healthy - d).max(0));
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let (cond, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    json!({
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired.unwrap_or(0),
        "expectedPods": expected,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": cond,
            "reason": reason,
            "message": "",
            "observedGeneration": generation,
            "lastTransitionTime": crate::store::now(),
        }],
    })
}

fn indices(store: &Store) -> ApiResult<(usize, usize)> {
    let pods = store
        .type_index("", "v1", "pods")
        .ok_or_else(|| ApiError::no_route("pods"))?;
    let pdbs = store
        .type_index("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::no_route("poddisruptionbudgets"))?;
    Ok((pods, pdbs))
}

fn status_ctx() -> WriteCtx {
    WriteCtx {
        manager: "disruption-controller".into(),
        scope: Scope::Status,
        dry_run: false,
        keep_status: true,
        validation: None,
        warnings: Default::default(),
        user: None,
    }
}

/// The disruption controller's pass: every budget's status brought up to date (written only when
/// it changed, the transition time aside).
pub(crate) fn reconcile_budgets(store: &mut Store) -> ApiResult<bool> {
    let (pods, pdbs) = indices(store)?;
    let mut changed = false;
    for pdb in store.list(pdbs, None, &Default::default(), &Default::default()) {
        let mut want = budget_status(store, pods, &pdb);
        let old = pdb.get("status").cloned().unwrap_or(Value::Null);
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(c) = v.pointer_mut("/conditions/0")
                && let Some(m) = c.as_object_mut()
            {
                m.remove("lastTransitionTime");
            }
            v
        };
        if strip(&old) == strip(&want) {
            continue;
        }
        if old.pointer("/conditions/0/status") == want.pointer("/conditions/0/status")
            && let (Some(t), Some(c)) = (
                old.pointer("/conditions/0/lastTransitionTime").cloned(),
                want.pointer_mut("/conditions/0"),
            )
        {
            c["lastTransitionTime"] = t;
        }
        let mut obj = pdb.clone();
        obj["status"] = want;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let ns = s(&pdb, "/metadata/namespace")
            .unwrap_or_default()
            .to_owned();
        let name = s(&pdb, "/metadata/name").unwrap_or_default().to_owned();
        store.update(pdbs, &ns, &name, obj, &status_ctx())?;
        changed = true;
    }
    Ok(changed)
}

/// `POST pods/{name}/eviction`: the `Status` of an eviction that deleted the pod.
pub(crate) fn evict(store: &mut Store, ns: &str, name: &str, body: &Value) -> ApiResult<Value> {
    let (pods, pdbs) = indices(store)?;
    if let Some(kind) = s(body, "/kind")
        && kind != "Eviction"
    {
        return Err(ApiError::bad_request(format!(
            "the body is a {kind}, not an Eviction"
        )));
    }
    // As `EvictionREST.Create`: the body's name must be the URL's, a missing one included.
    if s(body, "/metadata/name") != Some(name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let pod = store.get(pods, ns, name)?;
    let opts = body.get("deleteOptions").cloned().unwrap_or(Value::Null);
    let dry_run = opts
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"));
    let phase = s(&pod, "/status/phase").unwrap_or("Pending");
    let success = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    if matches!(phase, "Succeeded" | "Failed" | "Pending") || deleting(&pod) {
        store.delete(pods, ns, name, &opts, dry_run)?;
        return Ok(success);
    }
    let budgets: Vec<Value> = store
        .list(pdbs, Some(ns), &Default::default(), &Default::default())
        .into_iter()
        .filter(|b| selects(b.pointer("/spec/selector"), &pod))
        .collect();
    match budgets.as_slice() {
        [] => {}
        [pdb] => {
            let status = budget_status(store, pods, pdb);
            let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
            let healthy = status["currentHealthy"].as_i64().unwrap_or(0);
            let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
            let pdb_name = s(pdb, "/metadata/name").unwrap_or_default();
            let policy = s(pdb, "/spec/unhealthyPodEvictionPolicy").unwrap_or("IfHealthyBudget");
            let unhealthy_ok =
                !ready(&pod) && (policy == "AlwaysAllow" || (healthy >= desired && desired > 0));
            if !unhealthy_ok && allowed <= 0 {
                return Err(ApiError::new(429, "TooManyRequests", TOO_MANY).with_causes(vec![
                    Cause {
                        reason: "DisruptionBudget",
                        field: String::new(),
                        message: format!(
                            "The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently"
                        ),
                    },
                ]));
            }
        }
        _ => {
            // Returned by the eviction handler as a bare Status: no reason, no details.
            return Err(ApiError::new(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    }
    store.delete(pods, ns, name, &opts, dry_run)?;
    if !dry_run {
        reconcile_budgets(store)?;
    }
    Ok(success)
}
