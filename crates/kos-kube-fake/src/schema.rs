//! Decoding a written object as its type, as kube-apiserver does before it stores anything:
//! fields the type does not have are dropped (and, by the request's `fieldValidation`, reported
//! as warnings or refused), values of the wrong JSON type are refused.
//!
//! - Built-in types are decoded through their k8s-openapi struct, which keeps exactly the fields
//!   the Go type has: a field of the request that does not survive the round trip is unknown.
//!   A value that does not decode (`"replicas": "three"`) is a 400, as Go's decoder answers.
//! - Custom resources are pruned and checked against their CRD version's structural schema:
//!   `properties`, `additionalProperties`, `items`, `x-kubernetes-preserve-unknown-fields`,
//!   `x-kubernetes-embedded-resource`, `x-kubernetes-int-or-string`, and `type`, `nullable`,
//!   `required` and `enum` (422, as apiextensions' validation answers); a `null` the schema
//!   does not allow and has no default for is dropped first, as apiextensions prunes it. Bounds
//!   (`minimum`, `maxLength`, `pattern`, `maxItems`, …) are checked, formats are not; CEL rules
//!   are, by [`crate::cel`].
//!
//! `fieldValidation`: `Strict` refuses unknown fields (400 on create and update, 422 on a patch),
//! `Warn` (the server's default) answers with a `Warning` header per field, `Ignore` drops them
//! silently. Types a test adds to [`crate::Config::resources`] that are neither built in here
//! nor made by a CRD are stored as sent.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult, Cause};
use crate::resources::ResourceType;

/// The request's `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn from_query(q: Option<&str>) -> ApiResult<FieldValidation> {
        match q {
            None | Some("" | "Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn, Strict (got {other:?})"
            ))),
        }
    }
}

/// How the write came: the strict-decoding error of a patch is about the patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Update,
    Patch,
}

/// Drops what the type does not have from `obj` and returns the unknown fields' paths
/// (`spec.template.spec.containers[0].foo`), or the error for a value that does not decode.
pub fn decode(rt: &ResourceType, obj: &mut Value) -> ApiResult<Vec<String>> {
    let mut unknown = Vec::new();
    if let Some(custom) = &rt.custom {
        if let Some(meta) = obj.get_mut("metadata") {
            let known =
                roundtrip::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(meta)
                    .map_err(|e| cannot_decode(rt, &e))?;
            prune_by_example(meta, &known, "metadata", &mut unknown);
        }
        if !custom.schema.is_null()
            && let Value::Object(m) = obj
        {
            let props = custom.schema.get("properties");
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match props.and_then(|p| p.get(&k)) {
                    Some(s) if m.get(&k).is_some_and(|v| null_to_drop(v, s)) => {
                        m.remove(&k);
                    }
                    Some(s) => {
                        if let Some(v) = m.get_mut(&k) {
                            prune(v, s, &k, &mut unknown);
                        }
                    }
                    None if preserves(&custom.schema) => {}
                    None => {
                        m.remove(&k);
                        unknown.push(k);
                    }
                }
            }
        }
        return Ok(unknown);
    }
    let Some(known) = builtin_roundtrip(rt, obj) else {
        return Ok(unknown);
    };
    let known = known.map_err(|e| cannot_decode(rt, &e))?;
    prune_by_example(obj, &known, "", &mut unknown);
    Ok(unknown)
}

/// The error for unknown fields under `Strict`.
pub fn strict_error(rt: &ResourceType, name: &str, unknown: &[String], how: Write) -> ApiError {
    let list = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect::<Vec<_>>()
        .join(", ");
    match how {
        Write::Patch => ApiError::invalid(
            rt,
            name,
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "patch".into(),
                message: format!("Invalid value: \"...\": strict decoding error: {list}"),
            }],
        ),
        Write::Create | Write::Update => ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {list}",
            kind = rt.kind,
            v = rt.version
        )),
    }
}

fn cannot_decode(rt: &ResourceType, e: &serde_json::Error) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{v}\" cannot be handled as a {kind}: {e}",
        kind = rt.kind,
        v = rt.version
    ))
}

fn roundtrip<K: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, serde_json::Error> {
    let typed: K = serde_json::from_value(v.clone())?;
    serde_json::to_value(typed)
}

/// The object as its built-in struct keeps it; `None` for a type not built in here.
fn builtin_roundtrip(rt: &ResourceType, v: &Value) -> Option<Result<Value, serde_json::Error>> {
    use k8s_openapi::api::{apps, coordination, core, discovery, events, rbac, storage};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    Some(
        match (rt.group.as_str(), rt.version.as_str(), rt.kind.as_str()) {
            ("", "v1", "Node") => roundtrip::<core::v1::Node>(v),
            ("", "v1", "Namespace") => roundtrip::<core::v1::Namespace>(v),
            ("", "v1", "Service") => roundtrip::<core::v1::Service>(v),
            ("", "v1", "Pod") => roundtrip::<core::v1::Pod>(v),
            ("", "v1", "Event") => roundtrip::<core::v1::Event>(v),
            ("", "v1", "Secret") => roundtrip::<core::v1::Secret>(v),
            ("", "v1", "ConfigMap") => roundtrip::<core::v1::ConfigMap>(v),
            ("", "v1", "Endpoints") => roundtrip::<core::v1::Endpoints>(v),
            ("", "v1", "ServiceAccount") => roundtrip::<core::v1::ServiceAccount>(v),
            ("events.k8s.io", "v1", "Event") => roundtrip::<events::v1::Event>(v),
            ("coordination.k8s.io", "v1", "Lease") => roundtrip::<coordination::v1::Lease>(v),
            ("discovery.k8s.io", "v1", "EndpointSlice") => {
                roundtrip::<discovery::v1::EndpointSlice>(v)
            }
            ("apps", "v1", "DaemonSet") => roundtrip::<apps::v1::DaemonSet>(v),
            ("apps", "v1", "Deployment") => roundtrip::<apps::v1::Deployment>(v),
            ("apps", "v1", "ReplicaSet") => roundtrip::<apps::v1::ReplicaSet>(v),
            ("rbac.authorization.k8s.io", "v1", "ClusterRole") => {
                roundtrip::<rbac::v1::ClusterRole>(v)
            }
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
                roundtrip::<rbac::v1::ClusterRoleBinding>(v)
            }
            ("rbac.authorization.k8s.io", "v1", "Role") => roundtrip::<rbac::v1::Role>(v),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding") => {
                roundtrip::<rbac::v1::RoleBinding>(v)
            }
            ("storage.k8s.io", "v1", "StorageClass") => roundtrip::<storage::v1::StorageClass>(v),
            ("storage.k8s.io", "v1", "CSIDriver") => roundtrip::<storage::v1::CSIDriver>(v),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
                roundtrip::<apiextensions::CustomResourceDefinition>(v)
            }
            _ => return None,
        },
    )
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Removes from `v` what `known` (its decoded form) lacks; nulls are left alone (the decoder
/// drops an explicit null of a known optional field too).
fn prune_by_example(v: &mut Value, known: &Value, path: &str, unknown: &mut Vec<String>) {
    match (v, known) {
        (Value::Object(m), Value::Object(k)) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for key in keys {
                let p = join(path, &key);
                match (m.get_mut(&key), k.get(&key)) {
                    (Some(Value::Null), _) => {}
                    (Some(x), Some(kx)) => prune_by_example(x, kx, &p, unknown),
                    (Some(_), None) => {
                        m.remove(&key);
                        unknown.push(p);
                    }
                    (None, _) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(k)) => {
            for (i, (x, kx)) in a.iter_mut().zip(k).enumerate() {
                prune_by_example(x, kx, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

/// A `null` where the schema allows none and has no default: apiextensions drops the field or
/// map entry before validating (`PruneNonNullableNullsWithoutDefaults`), so `labels: {a: null}`
/// is stored as `labels: {}`, never refused. A list's `null` items are kept (and refused).
fn null_to_drop(v: &Value, schema: &Value) -> bool {
    v.is_null()
        && schema.get("nullable").and_then(Value::as_bool) != Some(true)
        && schema.get("default").is_none()
}

/// Structural pruning of a custom resource's field against its schema.
fn prune(v: &mut Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
            let keys: Vec<String> = m.keys().cloned().collect();
            for key in keys {
                let p = join(path, &key);
                let sub = props.and_then(|ps| ps.get(&key)).or(match additional {
                    Some(a @ Value::Object(_)) => Some(a),
                    _ => None,
                });
                match sub {
                    Some(s) if m.get(&key).is_some_and(|x| null_to_drop(x, s)) => {
                        m.remove(&key);
                    }
                    Some(s) => {
                        if let Some(x) = m.get_mut(&key) {
                            prune(x, s, &p, unknown);
                        }
                    }
                    None if additional == Some(&Value::Bool(true)) || preserves(schema) => {}
                    None if embedded
                        && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") => {}
                    None => {
                        m.remove(&key);
                        unknown.push(p);
                    }
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, x) in a.iter_mut().enumerate() {
                    prune(x, items, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// What the CRD version's schema says is wrong with a (pruned) custom resource.
pub fn validate_custom(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let Some(custom) = &rt.custom else {
        return out;
    };
    if custom.schema.is_null() {
        return out;
    }
    if let (Some(props), Value::Object(m)) = (custom.schema.get("properties"), obj) {
        for (k, v) in m {
            if let Some(s) = props.get(k)
                && !matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
            {
                check(v, s, k, &mut out);
            }
        }
        required(custom.schema.get("required"), m, "", &mut out);
    }
    out
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn required(req: Option<&Value>, m: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    for r in req.and_then(Value::as_array).into_iter().flatten() {
        if let Some(r) = r.as_str()
            && !m.contains_key(r)
        {
            out.push(Cause {
                reason: "FieldValueRequired",
                field: join(path, r),
                message: "Required value".into(),
            });
        }
    }
}

fn check(v: &Value, schema: &Value, path: &str, out: &mut Vec<Cause>) {
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if v.is_null() && nullable {
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let actual = type_name(v);
    if int_or_string {
        if !matches!(actual, "integer" | "string") {
            out.push(Cause {
                reason: "FieldValueInvalid",
                field: path.to_owned(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type integer,string: {actual:?}",
                    shown(v)
                ),
            });
        } else {
            // The bounds of whichever it is (a quantity's `pattern` on its string form).
            bounds(v, schema, path, out);
        }
        return;
    }
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let ok = actual == want || (want == "number" && actual == "integer");
        if !ok {
            out.push(Cause {
                reason: "FieldValueInvalid",
                field: path.to_owned(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type {want}: {actual:?}",
                    shown(v)
                ),
            });
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list = allowed.iter().map(shown).collect::<Vec<_>>().join(", ");
        out.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            message: format!("Unsupported value: {}: supported values: {list}", shown(v)),
        });
    }
    bounds(v, schema, path, out);
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, x) in m {
                if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
                    check(x, s, &join(path, k), out);
                }
            }
            required(schema.get("required"), m, path, out);
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for (i, x) in a.iter().enumerate() {
                    check(x, items, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn invalid(path: &str, v: &Value, detail: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        message: format!("Invalid value: {}: {detail}", shown(v)),
    }
}

/// A schema's `pattern`, compiled once. Go's RE2 and Rust's `regex` share their syntax; a
/// pattern Rust cannot compile is not checked (apiextensions refuses a CRD whose pattern Go cannot
/// compile, so such a CRD would not be stored by a real server either way).
fn pattern_matches(pattern: &str, text: &str) -> Option<bool> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(pattern.to_owned())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .as_ref()
        .map(|re| re.is_match(text))
}

/// The value bounds of kube-openapi's validator: `minimum`/`maximum` (with their `exclusive`
/// flags), `multipleOf`, `minLength`/`maxLength` (characters), `pattern` (a match anywhere, as
/// Go's `MatchString`), `minItems`/`maxItems`, `minProperties`/`maxProperties`. `format` is not
/// checked.
fn bounds(v: &Value, schema: &Value, path: &str, out: &mut Vec<Cause>) {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    let count = |k: &str| schema.get(k).and_then(Value::as_u64);
    match v {
        Value::Number(n) => {
            let Some(x) = n.as_f64() else { return };
            if let Some(min) = num("minimum") {
                let exclusive = flag("exclusiveMinimum");
                if x < min || (exclusive && x == min) {
                    let how = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    out.push(invalid(
                        path,
                        v,
                        format!("{path} in body should be {how} {}", schema["minimum"]),
                    ));
                }
            }
            if let Some(max) = num("maximum") {
                let exclusive = flag("exclusiveMaximum");
                if x > max || (exclusive && x == max) {
                    let how = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    out.push(invalid(
                        path,
                        v,
                        format!("{path} in body should be {how} {}", schema["maximum"]),
                    ));
                }
            }
            if let Some(m) = num("multipleOf")
                && m > 0.0
                && (x / m).fract() != 0.0
            {
                out.push(invalid(
                    path,
                    v,
                    format!(
                        "{path} in body should be a multiple of {}",
                        schema["multipleOf"]
                    ),
                ));
            }
        }
        Value::String(text) => {
            let chars = text.chars().count() as u64;
            if let Some(max) = count("maxLength")
                && chars > max
            {
                out.push(Cause {
                    reason: "FieldValueTooLong",
                    field: path.to_owned(),
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = count("minLength")
                && chars < min
            {
                out.push(invalid(
                    path,
                    v,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && pattern_matches(p, text) == Some(false)
            {
                out.push(invalid(
                    path,
                    v,
                    format!("{path} in body should match '{p}'"),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = count("maxItems")
                && n > max
            {
                out.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_owned(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(min) = count("minItems")
                && n < min
            {
                out.push(invalid(
                    path,
                    v,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
        }
        Value::Object(m) => {
            let n = m.len() as u64;
            if let Some(max) = count("maxProperties")
                && n > max
            {
                out.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_owned(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(min) = count("minProperties")
                && n < min
            {
                out.push(invalid(
                    path,
                    v,
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Custom;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    #[test]
    fn bounds_of_numbers_strings_lists_and_maps_are_checked() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 10, "exclusiveMaximum": true},
            "s": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[a-z]+$"},
            "l": {"type": "array", "maxItems": 1, "items": {"type": "string"}},
            "m": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}}});
        let fields = |v: Value| {
            let mut out = Vec::new();
            check(&v, &schema, "", &mut out);
            out.into_iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect::<Vec<_>>()
        };
        assert!(fields(json!({"n": 9, "s": "abc", "l": ["x"], "m": {"a": "b"}})).is_empty());
        assert_eq!(
            fields(json!({"n": 10, "s": "ABCD", "l": ["x", "y"], "m": {}})),
            [
                "l: Too many: 2: must have at most 1 items",
                "m: Invalid value: {}: m in body should have at least 1 properties",
                "n: Invalid value: 10: n in body should be less than 10",
                "s: Too long: may not be more than 3 bytes",
                "s: Invalid value: \"ABCD\": s in body should match '^[a-z]+$'",
            ]
        );
        assert_eq!(
            fields(json!({"n": -1, "s": ""})),
            [
                "n: Invalid value: -1: n in body should be greater than or equal to 0",
                "s: Invalid value: \"\": s in body should be at least 1 chars long",
                "s: Invalid value: \"\": s in body should match '^[a-z]+$'",
            ]
        );
    }

    #[test]
    fn builtin_unknown_fields_are_found_and_dropped() -> ApiResult<()> {
        let rt = ResourceType::of::<Deployment>(true);
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"replicas": 2, "foo": "x", "selector": {"matchLabels": {"a": "b"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "i", "colour": "red"}]}}},
            "status": null});
        let unknown = decode(&rt, &mut d)?;
        assert_eq!(
            unknown,
            [
                "metadata.bogus",
                "spec.foo",
                "spec.template.spec.containers[0].colour"
            ]
        );
        assert!(d["spec"].get("foo").is_none());
        assert_eq!(d["spec"]["replicas"], 2);
        let mut bad = json!({"spec": {"replicas": "three"}});
        let e = decode(&rt, &mut bad).err().map(|e| e.code);
        assert_eq!(e, Some(400));
        Ok(())
    }

    #[test]
    fn custom_resources_are_pruned_and_checked_by_their_schema() -> ApiResult<()> {
        let mut rt = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
        rt.custom = Some(Box::new(Custom {
            crd: "widgets.example.com".into(),
            schema: json!({"type": "object", "properties": {
                "spec": {"type": "object", "required": ["size"], "properties": {
                    "size": {"type": "integer"},
                    "colour": {"type": "string", "enum": ["red", "blue"]},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}}),
            columns: Vec::new(),
            served: true,
        }));
        let mut w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": "big", "colour": "green", "shape": "round",
                     "extra": {"anything": 1}, "labels": {"k": "v"}}, "top": 1});
        let unknown = decode(&rt, &mut w)?;
        assert_eq!(unknown, ["spec.shape", "top"]);
        assert_eq!(w["spec"]["extra"], json!({"anything": 1}));
        let mut fields: Vec<String> = validate_custom(&rt, &w)
            .into_iter()
            .map(|c| c.field)
            .collect();
        fields.sort();
        assert_eq!(fields, ["spec.colour", "spec.size"]);
        // A null the schema does not allow is dropped, not refused (a map's entry, a property,
        // a top-level field); a null in a list is still refused.
        let mut nulls = json!({"spec": {"size": 1, "colour": null, "labels": {"k": null, "j": "v"}},
            "list": [null]});
        let mut with_list = rt.clone();
        if let Some(c) = with_list.custom.as_mut() {
            c.schema["properties"]["list"] = json!({"type": "array", "items": {"type": "string"}});
        }
        assert!(decode(&with_list, &mut nulls)?.is_empty());
        assert_eq!(nulls["spec"], json!({"size": 1, "labels": {"j": "v"}}));
        let causes: Vec<String> = validate_custom(&with_list, &nulls)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(causes, ["list[0]"]);
        let mut top = json!({"spec": null});
        decode(&rt, &mut top)?;
        assert_eq!(top, json!({}));
        let mut missing = json!({"spec": {}});
        decode(&rt, &mut missing)?;
        let causes = validate_custom(&rt, &missing);
        assert_eq!(causes[0].message, "Required value");
        Ok(())
    }
}
