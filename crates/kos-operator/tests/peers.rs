//! The CRD `kos-operator crd` prints, checked by validators kos did not write: Kubernetes' own
//! schema of `CustomResourceDefinition` for each supported minor (`kubernetes-validate`, strict),
//! and each example as a Cluster against the CRD's schema (`jsonschema`, with unknown fields
//! refused as strict field validation refuses them). Both are installed by scripts/test.

mod support;
use support::validator;

use std::path::{Path, PathBuf};
use std::process::Command;

fn crd_file(dir: &Path) -> PathBuf {
    let out = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .arg("crd")
        .output()
        .expect("run kos-operator");
    assert!(out.status.success(), "{out:?}");
    let path = dir.join("crd.yaml");
    std::fs::write(&path, &out.stdout).expect("write");
    path
}

fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_printed_crd_is_valid_for_each_supported_minor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crd = crd_file(dir.path());
    let minors: Vec<u32> = kos_bootstrap::addons::Pins::builtin()
        .expect("pins")
        .supported_minors()
        .collect();
    assert_eq!(minors.len(), 3, "{minors:?}");
    for minor in minors {
        let out = Command::new(validator())
            .args(["--strict", "--no-warn", "--quiet", "-k"])
            .arg(format!("1.{minor}.0"))
            .arg(&crd)
            .output()
            .expect("run kubernetes-validate");
        assert!(out.status.success(), "1.{minor}: {}", said(&out));
    }
}

/// Each example as a Cluster, validated against the CRD's schema; argv: the CRD, then the
/// examples. Objects that list properties and keep no unknown fields refuse others.
const CHECK: &str = r#"
import sys, yaml, jsonschema
crd = yaml.safe_load(open(sys.argv[1]))
schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
def strict(s):
    if isinstance(s, dict):
        if "properties" in s and not s.get("x-kubernetes-preserve-unknown-fields"):
            s.setdefault("additionalProperties", False)
        for v in s.values():
            strict(v)
    elif isinstance(s, list):
        for v in s:
            strict(v)
strict(schema["properties"]["spec"])
schema["properties"].pop("metadata", None)
def check(doc, what):
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        return f"{what}: {e.message} at {list(e.absolute_path)}"
    return None
bad = []
for path in sys.argv[2:]:
    doc = yaml.safe_load(open(path))
    doc["spec"]["identityRef"] = {"name": "cloud", "cloudName": "openstack"}
    doc.pop("metadata")
    err = check(doc, path)
    if err:
        bad.append(err)
    doc["spec"]["controlPlane"]["flavour"] = "x"
    if check(doc, path) is None:
        bad.append(f"{path}: a misspelt field was accepted")
if bad:
    sys.exit("\n".join(bad))
"#;

#[test]
fn every_example_is_valid_against_the_crd_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crd = crd_file(dir.path());
    let examples = support::documents();
    let out = Command::new(validator().with_file_name("python3"))
        .arg("-c")
        .arg(CHECK)
        .arg(&crd)
        .args(&examples)
        .output()
        .expect("run python");
    assert!(out.status.success(), "{}", said(&out));
}
