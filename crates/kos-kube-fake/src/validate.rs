//! The validation a real API server would refuse a write with (422 Invalid), for what controllers
//! write: names, label keys and values, annotation keys, finalizer names, Node taints and the
//! providerID rule, the required fields of `events.k8s.io/v1` Events, the total size of
//! annotations, CRDs ([`crate::crd::check`]), the storage types ([`crate::storage::check`]) and
//! custom resources against their schema ([`crate::schema::validate_custom`]) and its CEL rules
//! ([`crate::cel::check`]). Everything found is reported, not only the first problem.

use serde_json::Value;

use crate::error::Cause;
use crate::resources::{NameRule, ResourceType};

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: message.into(),
    }
}

fn required(field: impl Into<String>) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        field: field.into(),
        message: "Required value".into(),
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain as apimachinery's `IsDNS1123Subdomain` checks it: the whole name at most
/// 253, each dot-separated part of label characters but of any length (the attach-detach
/// controller's VolumeAttachment names, `csi-` and a sha256, are one 68-character part).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !p.starts_with('-')
                && !p.ends_with('-')
        })
}

/// RFC 1035 label: a DNS label that starts with a letter.
fn is_rfc1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63: a label value (or empty) and the name
/// part of a qualified name.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// `[prefix/]name` with a DNS-subdomain prefix: label and annotation keys, finalizers, taint keys.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// Everything wrong with `obj` (already normalised) as a `rt`; `old` is the stored version for
/// updates.
pub fn check(
    rt: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
    gates: crate::storage::Gates,
) -> Vec<Cause> {
    let mut out = Vec::new();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name_ok = match rt.name_rule {
        NameRule::Subdomain => is_dns_subdomain(name),
        NameRule::Label => is_rfc1035_label(name),
        NameRule::PathSegment => {
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%'])
        }
    };
    if name.is_empty() {
        out.push(required("metadata.name"));
    } else if !name_ok {
        out.push(invalid(
            "metadata.name",
            format!("Invalid value: {name:?}: {}", match rt.name_rule {
                NameRule::Subdomain => "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                NameRule::Label => "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
                NameRule::PathSegment => "may not be '.' or '..' and may not contain '/' or '%'",
            }),
        ));
    }
    if let Some(Value::Object(labels)) = obj.pointer("/metadata/labels") {
        for (k, v) in labels {
            if !is_qualified_name(k) {
                out.push(invalid(
                    "metadata.labels",
                    format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                ));
            }
            match v.as_str() {
                Some(s) if is_label_value(s) => {}
                _ => out.push(invalid(
                    "metadata.labels",
                    format!("Invalid value: {v}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)"),
                )),
            }
        }
    }
    if let Some(Value::Object(ann)) = obj.pointer("/metadata/annotations") {
        for (k, v) in ann {
            if !is_qualified_name(k) {
                out.push(invalid(
                    "metadata.annotations",
                    format!("Invalid value: {k:?}: not a qualified name"),
                ));
            }
            if !v.is_string() {
                out.push(invalid(
                    format!("metadata.annotations[{k}]"),
                    "annotation values must be strings",
                ));
            }
        }
    }
    if let Some(Value::Array(fins)) = obj.pointer("/metadata/finalizers") {
        for f in fins {
            if !f.as_str().is_some_and(is_qualified_name) {
                out.push(invalid(
                    "metadata.finalizers",
                    format!("Invalid value: {f}: not a qualified name"),
                ));
            }
        }
    }
    if let Some(Value::Object(ann)) = obj.pointer("/metadata/annotations") {
        // ValidateAnnotationsSize: keys and values together, what a client-side `kubectl apply`
        // of a large CRD runs into through its last-applied-configuration annotation.
        let total: usize = ann
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > TOTAL_ANNOTATION_SIZE {
            out.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE} bytes"),
            });
        }
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Node") => check_node(obj, old, &mut out),
        ("events.k8s.io", "Event") => check_event(obj, &mut out),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crate::crd::check(obj, &mut out),
        (group @ ("" | "storage.k8s.io"), kind) => {
            crate::storage::check(group, kind, obj, old, gates, &mut out);
        }
        _ => {}
    }
    out.extend(crate::schema::validate_custom(rt, obj));
    if let Some(custom) = &rt.custom
        && !custom.schema.is_null()
    {
        out.extend(crate::cel::check(&custom.schema, obj, old));
    }
    out
}

/// apimachinery's `TotalAnnotationSizeLimitB`.
const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

fn check_node(obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    if let Some(Value::Array(taints)) = obj.pointer("/spec/taints") {
        let mut seen = Vec::new();
        for (i, t) in taints.iter().enumerate() {
            let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
            if !is_qualified_name(key) {
                out.push(invalid(
                    format!("spec.taints[{i}].key"),
                    format!("Invalid value: {key:?}: not a qualified name"),
                ));
            }
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                out.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: format!("spec.taints[{i}].effect"),
                    message: format!("Unsupported value: {effect:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""),
                });
            }
            if let Some(v) = t.get("value").and_then(Value::as_str)
                && !is_label_value(v)
            {
                out.push(invalid(
                    format!("spec.taints[{i}].value"),
                    format!("Invalid value: {v:?}"),
                ));
            }
            if seen.contains(&(key, effect)) {
                out.push(Cause {
                    reason: "FieldValueDuplicate",
                    field: format!("spec.taints[{i}]"),
                    message: format!(
                        "Duplicate value: {key:?}: taints must be unique by key and effect pair"
                    ),
                });
            }
            seen.push((key, effect));
        }
    }
    // ValidateNodeUpdate: "node updates may not change providerID except from \"\" to valid".
    let provider = |v: &Value| {
        v.pointer("/spec/providerID")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if let Some(old) = old {
        let (before, after) = (provider(old), provider(obj));
        if !before.is_empty() && before != after {
            out.push(Cause {
                reason: "FieldValueForbidden",
                field: "spec.providerID".into(),
                message:
                    "Forbidden: node updates may not change providerID except from \"\" to valid"
                        .into(),
            });
        }
    }
}

fn check_event(obj: &Value, out: &mut Vec<Cause>) {
    for f in [
        "eventTime",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if obj.get(f).is_none_or(|v| v.is_null() || v == "") {
            out.push(required(f));
        }
    }
    if obj.get("regarding").is_none_or(Value::is_null) {
        out.push(required("regarding"));
    }
    if let Some(n) = obj.get("note").and_then(Value::as_str)
        && n.len() > 1024
    {
        out.push(invalid("note", "must have at most 1024 bytes"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_labels_and_qualified_names() {
        assert!(is_dns_subdomain("kos-a-cp-0.example"));
        assert!(!is_dns_subdomain("Upper"));
        // Parts are not limited to a label's 63 characters; the whole name is, to 253.
        assert!(is_dns_subdomain(&format!("csi-{}", "a".repeat(64))));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_qualified_name("node.kubernetes.io/instance-type"));
        assert!(is_qualified_name("kubernetes"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(is_label_value(""));
        assert!(is_label_value("m1.small"));
        assert!(!is_label_value("eu west"));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn node_taints_and_provider_id_are_checked() {
        let rt = ResourceType::of::<k8s_openapi::api::core::v1::Node>(false);
        let old = json!({"metadata": {"name": "n"}, "spec": {"providerID": "openstack:///a"}});
        let new = json!({"metadata": {"name": "n", "labels": {"zone": "a b"}}, "spec": {
            "providerID": "openstack:///b",
            "taints": [{"key": "k", "effect": "Sometimes"}, {"key": "k", "effect": "Sometimes"}]
        }});
        let fields: Vec<String> = check(
            &rt,
            &new,
            Some(&old),
            crate::storage::Gates::of_minor(crate::DEFAULT_MINOR),
        )
        .into_iter()
        .map(|c| c.field)
        .collect();
        assert_eq!(
            fields,
            [
                "metadata.labels",
                "spec.taints[0].effect",
                "spec.taints[1].effect",
                "spec.taints[1]",
                "spec.providerID"
            ]
        );
        let set_once = json!({"metadata": {"name": "n"}, "spec": {"providerID": "openstack:///a"}});
        assert!(
            check(
                &rt,
                &set_once,
                Some(&json!({"metadata": {"name": "n"}})),
                crate::storage::Gates::of_minor(crate::DEFAULT_MINOR)
            )
            .is_empty()
        );
    }
}
