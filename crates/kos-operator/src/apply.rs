//! Objects applied server-side, as `kubectl apply --server-side` does: each by its own kind's API
//! (a `DynamicObject`), under one field manager, forced (the objects are kos's).

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;

/// An object the API refused.
#[derive(Debug, thiserror::Error)]
#[error("applying {kind} {name}: {source}")]
pub struct ApplyError {
    pub kind: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// The API of `object`'s kind (namespaced when it names a namespace) and its name.
#[must_use]
pub fn api_of(client: &kube::Client, object: &Value) -> (Api<DynamicObject>, String) {
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap_or_default();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let api = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    (api, name)
}

/// Applies `objects` in order as `manager`.
///
/// # Errors
/// The first object the API refuses.
pub async fn apply_all(
    client: &kube::Client,
    objects: impl IntoIterator<Item = Value>,
    manager: &str,
) -> Result<(), ApplyError> {
    let params = PatchParams::apply(manager).force();
    for object in objects {
        let (api, name) = api_of(client, &object);
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(|source| ApplyError {
                kind: object["kind"].as_str().unwrap_or_default().to_owned(),
                name: name.clone(),
                source,
            })?;
    }
    Ok(())
}
