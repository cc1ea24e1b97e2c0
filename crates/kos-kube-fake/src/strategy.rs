//! What the API server does to an object on every write before validating and storing it, beyond
//! server-owned metadata: a Secret's write-only `stringData` is merged into `data` (base64), its keys
//! winning over `data`'s, and never stored (k8s.io/kubernetes pkg/apis/core/v1 conversion of Secret).

use base64::Engine as _;
use serde_json::Value;

use crate::resources::ResourceType;

/// Applies the write-time conversions of `rt` to `obj`.
pub(crate) fn prepare(rt: &ResourceType, obj: &mut Value) {
    if rt.group.is_empty() && rt.kind == "Secret" {
        merge_string_data(obj);
    }
}

fn merge_string_data(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = map.remove("stringData") else {
        return;
    };
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !data.is_object() {
        *data = Value::Object(serde_json::Map::new());
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in string_data {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            d.insert(
                k,
                Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_lands_in_data_and_wins() {
        let rt = crate::resources::builtin()
            .into_iter()
            .find(|t| t.kind == "Secret")
            .expect("Secret is served");
        let mut s = serde_json::json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "two", "c": "three"}});
        prepare(&rt, &mut s);
        assert_eq!(
            s,
            serde_json::json!({"data": {"a": "eA==", "b": "dHdv", "c": "dGhyZWU="}})
        );
    }
}
