//! kos's own model of the OpenStack objects it uses: what the facades take and return. Nothing outside
//! kos-cloud sees openstack_sdk types. Responses tolerate unknown and missing fields (`#[serde(default)]`)
//! and unknown status strings (`Unknown(..)`), since clouds differ in versions and extensions; request
//! types are shaped so that invalid combinations cannot be written down.

pub mod block_storage;
pub mod common;
pub mod compute;
pub mod identity;
pub mod image;
pub mod load_balancer;
pub mod network;

pub use common::{Link, QuotaUsage, TagQuery};

/// Test helper: one API-reference sample from testdata/api-samples.
#[cfg(test)]
pub(crate) fn sample(path: &str) -> std::io::Result<String> {
    let p = std::path::Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../../testdata/api-samples")
    .join(path);
    std::fs::read_to_string(&p)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

/// Test helper: decodes `sample(path)[key]` (or the whole document when `key` is empty) as `T`.
#[cfg(test)]
pub(crate) fn parse_sample<T: serde::de::DeserializeOwned>(
    path: &str,
    key: &str,
) -> Result<T, Box<dyn std::error::Error>> {
    let v: serde_json::Value = serde_json::from_str(&sample(path)?)?;
    let v = if key.is_empty() {
        v
    } else {
        v.get(key).cloned().ok_or(format!("{path}: no {key:?}"))?
    };
    serde_json::from_value(v).map_err(|e| format!("{path}: {e}").into())
}

/// Test helper: the sorted key set of `sample(path)[key]`, to compare with what a request struct sends.
#[cfg(test)]
pub(crate) fn sample_keys(
    path: &str,
    key: &str,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let v: serde_json::Value = serde_json::from_str(&sample(path)?)?;
    Ok(keys(v.get(key).ok_or(format!("{path}: no {key:?}"))?))
}

/// Test helper: the sorted keys of a JSON object.
#[cfg(test)]
pub(crate) fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}
