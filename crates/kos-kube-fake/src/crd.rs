//! `CustomResourceDefinition`s: what the apiextensions apiserver checks of one, the status its
//! controllers give it, and the [`ResourceType`]s it makes served.
//!
//! The fake establishes a CRD in the same write that stores it (the real server's controllers
//! do it moments later, in two status updates): it is stored with `NamesAccepted` and
//! `Established` True, its `acceptedNames` and `storedVersions`, and its resource is served at
//! once (discovery, OpenAPI, CRUD, watch, `/status` when declared). Deleting it deletes its
//! custom resources first, as the CRD finalizer does, and the resource then answers 404.
//!
//! Simplified: each served version is its own store of objects (no conversion between versions,
//! which the real server does for `conversion: None` by rewriting `apiVersion`); name conflicts
//! between CRDs are not detected; the `scale` subresource is not served.

use serde_json::{Value, json};

use crate::error::Cause;
use crate::resources::{Custom, NameRule, ResourceType};
use crate::store::now;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The names the CRD leaves out: `singular` (the lower-case kind) and `listKind`.
pub fn default_names(crd: &mut Value) {
    let kind = s(crd, "/spec/names/kind").to_owned();
    if kind.is_empty() {
        return;
    }
    if let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        if names.get("singular").is_none_or(|v| v.is_null() || v == "") {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names.get("listKind").is_none_or(|v| v.is_null() || v == "") {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
}

/// What apiextensions' validation refuses (a subset: names, scope, versions and schemas).
pub fn check(crd: &Value, out: &mut Vec<Cause>) {
    let invalid = |field: &str, message: String| Cause {
        reason: "FieldValueInvalid",
        field: field.to_owned(),
        message,
    };
    let required = |field: &str| Cause {
        reason: "FieldValueRequired",
        field: field.to_owned(),
        message: "Required value".into(),
    };
    let name = s(crd, "/metadata/name");
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    if group.is_empty() {
        out.push(required("spec.group"));
    } else if !group.contains('.') {
        out.push(invalid(
            "spec.group",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        out.push(required("spec.names.plural"));
    }
    if s(crd, "/spec/names/kind").is_empty() {
        out.push(required("spec.names.kind"));
    }
    if name != format!("{plural}.{group}") {
        out.push(invalid(
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match s(crd, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        other => out.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.scope".into(),
            message: format!(
                "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
        }),
    }
    let vs = versions(crd);
    if vs.is_empty() {
        out.push(Cause {
            reason: "FieldValueInvalid",
            field: "spec.versions".into(),
            message: "Invalid value: null: must have exactly one version marked as storage version"
                .into(),
        });
    }
    let storage = vs
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !vs.is_empty() && storage != 1 {
        out.push(invalid(
            "spec.versions",
            format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                json!(vs)
            ),
        ));
    }
    for (i, v) in vs.iter().enumerate() {
        if s(v, "/name").is_empty() {
            out.push(required(&format!("spec.versions[{i}].name")));
        }
        if v.pointer("/schema/openAPIV3Schema")
            .is_none_or(Value::is_null)
        {
            out.push(Cause {
                reason: "FieldValueRequired",
                field: format!("spec.versions[{i}].schema.openAPIV3Schema"),
                message: "Required value: schemas are required".into(),
            });
        }
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            crate::cel::compile_errors(
                schema,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                out,
            );
        }
    }
}

/// The status the CRD's controllers give it once its names are accepted.
pub fn establish(crd: &mut Value) {
    let names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let stored: Vec<&str> = versions(crd)
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| s(v, "/name"))
        .collect();
    let mut stored_versions: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in stored {
        if !stored_versions.iter().any(|x| x == v) {
            stored_versions.push(json!(v));
        }
    }
    let since = |t: &str| {
        crd.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| s(c, "/type") == t))
            .map_or_else(now, |c| s(c, "/lastTransitionTime").to_owned())
    };
    let conditions = json!([
        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
         "message": "no conflicts found", "lastTransitionTime": since("NamesAccepted")},
        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted", "lastTransitionTime": since("Established")},
    ]);
    crd["status"] = json!({
        "acceptedNames": names,
        "conditions": conditions,
        "storedVersions": stored_versions,
    });
}

/// The types a stored CRD serves, one per served version.
pub fn served_types(crd: &Value) -> Vec<ResourceType> {
    let name = s(crd, "/metadata/name");
    let group = s(crd, "/spec/group");
    let str_list = |p: &str| -> Vec<String> {
        crd.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    versions(crd)
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
        .map(|v| {
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .unwrap_or(Value::Null);
            let mut t = ResourceType::new(
                group,
                s(v, "/name"),
                s(crd, "/spec/names/plural"),
                s(crd, "/spec/names/kind"),
                s(crd, "/spec/scope") == "Namespaced",
            );
            t.status_subresource = v.pointer("/subresources/status").is_some();
            t.name_rule = NameRule::Subdomain;
            t.singular = s(crd, "/spec/names/singular").to_owned();
            t.short_names = str_list("/spec/names/shortNames");
            t.categories = str_list("/spec/names/categories");
            t.custom = Some(Box::new(Custom {
                crd: name.to_owned(),
                schema,
                columns: crate::table::printer_columns(v),
                served: true,
            }));
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object"}},
                 "subresources": {"status": {}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
                {"name": "v1beta1", "served": false, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    #[test]
    fn a_crd_serves_its_served_versions_with_what_it_declares() {
        let mut c = crd();
        default_names(&mut c);
        let mut causes = Vec::new();
        check(&c, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        let types = served_types(&c);
        assert_eq!(types.len(), 1);
        let t = &types[0];
        assert_eq!(
            (t.api_version().as_str(), t.plural.as_str(), t.namespaced),
            ("example.com/v1", "widgets", true)
        );
        assert!(t.status_subresource);
        assert_eq!(t.singular, "widget");
        assert_eq!(t.short_names, ["wd"]);
        assert_eq!(t.custom.as_ref().map(|c| c.columns.len()), Some(1));
        establish(&mut c);
        assert_eq!(
            c.pointer("/status/conditions/1/type"),
            Some(&json!("Established"))
        );
        assert_eq!(c.pointer("/status/storedVersions"), Some(&json!(["v1"])));
        assert_eq!(
            c.pointer("/status/acceptedNames/listKind"),
            Some(&json!("WidgetList"))
        );
    }

    #[test]
    fn a_crd_named_unlike_its_resource_or_without_a_schema_is_invalid() {
        let mut c = crd();
        c["metadata"]["name"] = json!("widget.example.com");
        c["spec"]["versions"][0]["schema"] = Value::Null;
        let mut causes = Vec::new();
        check(&c, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["metadata.name", "spec.versions[0].schema.openAPIV3Schema"]
        );
    }

    #[test]
    fn a_crd_whose_rule_does_not_compile_is_invalid() {
        let mut c = crd();
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "object",
            "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
                {"rule": "has(self.size)"}, {"rule": "self.size >"}]}}});
        let mut causes = Vec::new();
        check(&c, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule"
            ]
        );
        assert!(
            causes[0]
                .message
                .starts_with("Invalid value: apiextensions.ValidationRule{Rule:\"self.size >\""),
            "{causes:?}"
        );
        assert!(
            causes[0].message.contains(": compilation failed: "),
            "{causes:?}"
        );
    }
}
