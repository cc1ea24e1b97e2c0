//! Discovery: `/version`, the legacy documents (`/api`, `/apis`, `/apis/{g}`, `/api/v1`,
//! `/apis/{g}/{v}`) and the aggregated one (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList` for
//! `/api` and `/apis`), which kubectl asks for first and which spares it one request per group
//! version. Both come from the served types, custom resources included, so a CRD is discoverable
//! as soon as it is established.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceType;
use crate::store::Store;

/// The `Content-Type` of an aggregated discovery document: clients check it (not the body's
/// `kind`) before parsing it as one (client-go's `ContentTypeIsGVK`).
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The `Accept` header asks for the v2 aggregated document (among its alternatives).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn version() -> Value {
    version_of(1, 34, "v1.34.0-kos-kube-fake")
}

/// kube-apiserver's `/version` (`version.Info`) for a server at `major.minor` (`gitVersion` as
/// `v1.35.2`): it emulates its own version and is compatible with the minor before.
pub fn version_of(major: u32, minor: u32, git_version: &str) -> Value {
    json!({
        "major": major.to_string(), "minor": minor.to_string(), "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc",
        "platform": "linux/amd64", "emulationMajor": major.to_string(), "emulationMinor": minor.to_string(),
        "minCompatibilityMajor": major.to_string(), "minCompatibilityMinor": minor.saturating_sub(1).to_string()
    })
}

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

/// The served (group, version) pairs of named groups, each group's versions in the order their
/// types were registered (the first is the preferred one).
fn group_versions(store: &Store) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in store.served() {
        if t.group.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) if !versions.contains(&t.version) => {
                versions.push(t.version.clone())
            }
            Some(_) => {}
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": versions.clone(), "preferredVersion": versions.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis` (every group) or `/apis/{g}`.
pub fn groups(store: &Store, only: Option<&str>) -> ApiResult<Value> {
    let all = group_versions(store);
    match only {
        Some(g) => {
            let (name, versions) = all
                .iter()
                .find(|(n, _)| n == g)
                .ok_or_else(|| ApiError::no_route(&format!("/apis/{g}")))?;
            let mut v = group_doc(name, versions);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            Ok(v)
        }
        None => Ok(json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": all.iter().map(|(g, v)| group_doc(g, v)).collect::<Vec<_>>(),
        })),
    }
}

/// `/api/v1` or `/apis/{g}/{v}`: the resources of one group version.
pub fn resources(store: &Store, group: &str, version: &str) -> ApiResult<Value> {
    let mut list = Vec::new();
    for t in store
        .served()
        .filter(|t| t.group == group && t.version == version)
    {
        list.push(json!({
            "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": VERBS, "shortNames": t.short_names,
            "categories": t.categories,
        }));
        for sub in subresources(t) {
            list.push(json!({
                "name": format!("{}/{sub}", t.plural), "singularName": "", "namespaced": t.namespaced,
                "kind": t.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if list.is_empty() {
        return Err(ApiError::no_route(&format!("{group}/{version}")));
    }
    Ok(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": gv(group, version), "resources": list,
    }))
}

fn gv(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

fn resource_discovery(t: &ResourceType) -> Value {
    let kind = json!({"group": t.group, "version": t.version, "kind": t.kind});
    let mut r = json!({
        "resource": t.plural,
        "responseKind": kind,
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": t.singular,
        "verbs": VERBS,
    });
    if !t.short_names.is_empty() {
        r["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        r["categories"] = json!(t.categories);
    }
    let subs: Vec<Value> = subresources(t)
        .into_iter()
        .map(|sub| json!({"subresource": sub, "responseKind": kind, "verbs": ["get", "patch", "update"]}))
        .collect();
    if !subs.is_empty() {
        r["subresources"] = Value::Array(subs);
    }
    r
}

/// The subresources a type serves besides its main resource.
fn subresources(t: &ResourceType) -> Vec<&'static str> {
    let mut out = Vec::new();
    if crate::csr::is_csr(t) {
        out.push("approval");
    }
    if t.status_subresource {
        out.push("status");
    }
    out
}

/// The aggregated document of `/api` (`core`) or `/apis` (every named group).
pub fn aggregated(store: &Store, core: bool) -> Value {
    let items: Vec<Value> = if core {
        let resources: Vec<Value> = store
            .served()
            .filter(|t| t.group.is_empty())
            .map(resource_discovery)
            .collect();
        vec![json!({
            "metadata": {"creationTimestamp": null},
            "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}],
        })]
    } else {
        group_versions(store)
            .into_iter()
            .map(|(group, versions)| {
                let versions: Vec<Value> = versions
                    .iter()
                    .map(|v| {
                        let resources: Vec<Value> = store
                            .served()
                            .filter(|t| t.group == group && t.version == *v)
                            .map(resource_discovery)
                            .collect();
                        json!({"version": v, "resources": resources, "freshness": "Current"})
                    })
                    .collect();
                json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
            })
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {}, "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_discovery_is_chosen_only_when_asked_for() {
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(wants_aggregated(
            "application/json; as=APIGroupDiscoveryList; v=v2; g=apidiscovery.k8s.io"
        ));
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        ));
        assert!(!wants_aggregated("application/json, */*"));
    }
}
