//! `/openapi/v3`: the index of group versions and, per group version, an OpenAPI 3.0 document of
//! its paths.
//!
//! What kubectl 1.32 reads from it, and so what the documents hold:
//! - before a write it asks whether the type's PATCH operation takes the `fieldValidation`
//!   parameter (cli-runtime's `QueryParamVerifierV3`); when it does, kubectl leaves validation to
//!   the server (`?fieldValidation=Strict`), otherwise it wants the v2 document (which it only
//!   takes as protobuf) for client-side validation and fails without it;
//! - client-side `apply` computes a strategic merge patch from the v3 schemas when the PATCH
//!   operation lists `application/strategic-merge-patch+json`, and otherwise from the patch
//!   strategies compiled into kubectl for the built-in types (the same ones the real server's
//!   schemas carry) or a JSON merge patch for custom resources (what it does with a real server
//!   too, whose CRD paths do not list strategic merge patch). The documents here carry no
//!   component schemas, so their PATCH operations do not list strategic merge patch: kubectl then
//!   takes its compiled-in strategies instead of failing to compute a patch from empty schemas.
//!
//! `/openapi/v2` (which kubectl takes only as protobuf) is a valid Swagger 2.0 document without
//! paths or definitions: kubectl reads it only to validate, on the client, a kind the v3 documents
//! do not describe (a custom resource whose CRD comes in the same `kubectl apply`), finds no
//! schema for it and goes on to map it, failing as against a real server with `no matches for
//! kind … ensure CRDs are installed first`. Without it kubectl would stop at `failed to download
//! openapi`. Not served for want of schemas: `kubectl explain`, and the client-side validation
//! of kubectl before 1.27 (which validates against v2 instead of sending `fieldValidation`): the
//! server's default, `Warn`, then drops an unknown field and says so in a warning.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceType;
use crate::store::Store;

/// The index: every served group version and the content-addressed URL of its document (kubectl
/// caches documents by that hash, so it changes whenever the document does).
pub fn index(store: &Store) -> Value {
    let mut gvs: Vec<(String, String)> = store
        .served()
        .map(|t| (t.group.clone(), t.version.clone()))
        .collect();
    gvs.sort();
    gvs.dedup();
    let mut paths = Map::new();
    for (group, version) in gvs {
        let path = path_of(&group, &version);
        let hash = hash_of(&document(store, &group, &version));
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/g/v}`.
pub fn group_version(store: &Store, rest: &str) -> ApiResult<Value> {
    let (group, version) = match rest.split('/').collect::<Vec<_>>()[..] {
        ["api", v] => (String::new(), v.to_owned()),
        ["apis", g, v] => (g.to_owned(), v.to_owned()),
        _ => return Err(ApiError::no_route(&format!("/openapi/v3/{rest}"))),
    };
    if !store
        .served()
        .any(|t| t.group == group && t.version == version)
    {
        return Err(ApiError::no_route(&format!("/openapi/v3/{rest}")));
    }
    Ok(document(store, &group, &version))
}

/// `/openapi/v2` as gnostic's `openapi_v2.Document` protobuf: `swagger` (1) and `info` (2,
/// with `title` 1 and `version` 2), nothing else.
pub fn v2_document() -> Vec<u8> {
    fn string_field(num: u8, s: &str, out: &mut Vec<u8>) {
        out.push(num << 3 | 2);
        // Short strings only: one-byte lengths.
        out.push(u8::try_from(s.len()).unwrap_or(0));
        out.extend_from_slice(s.as_bytes());
    }
    let mut info = Vec::new();
    string_field(1, "Kubernetes", &mut info);
    string_field(2, "v1.34.0", &mut info);
    let mut doc = Vec::new();
    string_field(1, "2.0", &mut doc);
    doc.push(2 << 3 | 2);
    doc.push(u8::try_from(info.len()).unwrap_or(0));
    doc.extend(info);
    doc
}

/// The `Content-Type` of `/openapi/v2` (kubectl asks for `…spec.v2@v1.0+protobuf`, a type Go's
/// MIME parser refuses in a response, so the server answers with a `.` for the `@`).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

fn path_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn hash_of(doc: &Value) -> String {
    let mut h = DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

fn query_param(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

/// A path's own parameters: `{namespace}` and `{name}` where it has them.
fn path_params(namespaced: bool, named: bool) -> Value {
    let mut v = Vec::new();
    if named {
        v.push(path_param("name"));
    }
    if namespaced {
        v.push(path_param("namespace"));
    }
    Value::Array(v)
}

fn operation(t: &ResourceType, action: &str, params: &[&str], body: &[&str]) -> Value {
    let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
    let mut op = json!({
        "operationId": format!("{action}{}", t.kind),
        "parameters": params.iter().map(|p| query_param(p)).collect::<Vec<_>>(),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    });
    if !body.is_empty() {
        let content: Map<String, Value> = body
            .iter()
            .map(|ct| ((*ct).to_owned(), json!({"schema": {"type": "object"}})))
            .collect();
        op["requestBody"] = json!({"content": content, "required": true});
    }
    op
}

const WRITE_PARAMS: [&str; 3] = ["dryRun", "fieldManager", "fieldValidation"];
const PATCH_PARAMS: [&str; 4] = ["dryRun", "fieldManager", "fieldValidation", "force"];
const PATCH_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

fn document(store: &Store, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    for t in store
        .served()
        .filter(|t| t.group == group && t.version == version)
    {
        let base = format!("/{}", path_of(group, version));
        let collection = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", t.plural)
        } else {
            format!("{base}/{}", t.plural)
        };
        paths.insert(
            collection.clone(),
            json!({
                "get": operation(t, "list", &["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"], &[]),
                "post": operation(t, "post", &WRITE_PARAMS, &["application/json"]),
                "delete": operation(t, "deletecollection", &["dryRun", "propagationPolicy"], &[]),
                "parameters": path_params(t.namespaced, false),
            }),
        );
        let object = format!("{collection}/{{name}}");
        paths.insert(
            object.clone(),
            json!({
                "get": operation(t, "get", &[], &[]),
                "put": operation(t, "put", &WRITE_PARAMS, &["application/json"]),
                "patch": operation(t, "patch", &PATCH_PARAMS, &PATCH_TYPES),
                "delete": operation(t, "delete", &["dryRun", "propagationPolicy", "gracePeriodSeconds"], &[]),
                "parameters": path_params(t.namespaced, true),
            }),
        );
        if t.status_subresource {
            paths.insert(
                format!("{object}/status"),
                json!({
                    "get": operation(t, "get", &[], &[]),
                    "put": operation(t, "put", &WRITE_PARAMS, &["application/json"]),
                    "patch": operation(t, "patch", &PATCH_PARAMS, &PATCH_TYPES),
                    "parameters": path_params(t.namespaced, true),
                }),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": {}},
    })
}
