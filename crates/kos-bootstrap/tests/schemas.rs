//! Every manifest kos renders for a cluster (the addons: the cloud-config Secret, the CCM, cinder-csi or
//! kos-csi, the StorageClass, the snapshot-controller and VolumeSnapshot CRDs; and the bootstrap-token
//! Secret), validated against Kubernetes' own API
//! schemas of each supported minor by `kubernetes-validate` (PyPI), a validator kos did not write, in strict mode: an
//! unknown or misspelled field fails, as `kubectl apply --validate=strict` would refuse it. The tool is
//! installed by scripts/test; a missing tool fails the test with how to install it.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use kos_bootstrap::addons::{self, Pins};
use kos_bootstrap::*;

/// `KOS_KUBERNETES_VALIDATE`, then the venv scripts/test installs it into.
fn validator() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_KUBERNETES_VALIDATE") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let p = home.join(".cache/kos/venv/bin/kubernetes-validate");
    assert!(
        p.is_file(),
        "`kubernetes-validate` is required by this test and is missing: run scripts/test (it installs it \
         into ~/.cache/kos/venv), or `pip install kubernetes-validate==1.37.0` and point \
         KOS_KUBERNETES_VALIDATE at it"
    );
    p
}

/// Runs the validator on `file` for Kubernetes `1.<minor>.0`: whether it passed, and what it said.
fn validate(file: &Path, minor: u32) -> (bool, String) {
    let out = Command::new(validator())
        .args(["--strict", "--no-warn", "--quiet", "-k"])
        .arg(format!("1.{minor}.0"))
        .arg(file)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The Python next to kubernetes-validate (its venv holds `jsonschema` and `yaml`, its dependencies).
fn python() -> PathBuf {
    validator().with_file_name("python3")
}

/// Validates a custom resource against the `openAPIV3Schema` of its CRD among the embedded ones, with
/// `jsonschema` (a validator kos did not write), strictly: an object schema that lists properties and
/// does not preserve unknown fields refuses others, as the API server's strict field validation does.
/// CEL rules (`x-kubernetes-validations`) are not evaluated; `metadata` is the API server's to check.
const CR_CHECK: &str = r#"
import sys, yaml, jsonschema
cr = yaml.safe_load(open(sys.argv[1]))
group, version = cr["apiVersion"].split("/")
def strict(s):
    if isinstance(s, dict):
        if s.get("type") == "object" and "properties" in s and "additionalProperties" not in s \
                and not s.get("x-kubernetes-preserve-unknown-fields"):
            s["additionalProperties"] = False
        for v in s.values():
            strict(v)
    elif isinstance(s, list):
        for v in s:
            strict(v)
for path in sys.argv[2:]:
    crd = yaml.safe_load(open(path))
    spec = crd["spec"]
    if spec["group"] != group or spec["names"]["kind"] != cr["kind"]:
        continue
    served = [v for v in spec["versions"] if v["name"] == version and v["served"]]
    if not served:
        sys.exit(f"{cr['kind']} {version} is not served by {crd['metadata']['name']}")
    schema = served[0]["schema"]["openAPIV3Schema"]
    strict(schema)
    try:
        jsonschema.validate(cr, schema)
    except jsonschema.ValidationError as e:
        sys.exit(f"{cr['kind']}/{cr['metadata']['name']}: {e.message} at {list(e.absolute_path)}")
    sys.exit(0)
sys.exit(f"no CRD for {cr['kind']}.{group}")
"#;

/// Runs [`CR_CHECK`] on `file` against the embedded CRDs: whether it passed, and what it said.
fn validate_cr(file: &Path) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let crds: Vec<PathBuf> = addons::SNAPSHOT_CRDS
        .iter()
        .map(|(name, yaml)| write(dir.path(), name, yaml.as_bytes()))
        .collect();
    let out = Command::new(python())
        .arg("-c")
        .arg(CR_CHECK)
        .arg(file)
        .args(&crds)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn variants(version: &str) -> Vec<(String, ClusterInput)> {
    let mut out = Vec::new();
    for (ccm_name, ccm) in [
        ("upstream", Ccm::Upstream),
        (
            "kos",
            Ccm::Kos {
                image: "registry.example.com/kos/kos-ccm:0.1.0".into(),
            },
        ),
    ] {
        for (csi_name, csi) in [
            ("cinder", Csi::Cinder),
            (
                "kos",
                Csi::Kos {
                    image: "registry.example.com/kos/kos-csi:0.1.0".into(),
                },
            ),
            ("none", Csi::None),
        ] {
            let mut c = cluster(version, 3, 2);
            c.ccm = ccm.clone();
            c.csi = csi;
            out.push((format!("ccm-{ccm_name}-csi-{csi_name}"), c));
        }
    }
    // Cinder's zones apart from Nova's: the StorageClass names the one its volumes go to.
    let mut zoned = cluster(version, 3, 2);
    zoned.cloud.csi_volume_zone = Some("nova".into());
    out.push(("ccm-upstream-csi-cinder-zoned".into(), zoned));
    out
}

#[test]
fn every_rendered_manifest_validates_against_each_supported_minor() {
    let dir = tempfile::tempdir().unwrap();
    let pins = Pins::builtin().unwrap();
    let minors: Vec<u32> = pins.supported_minors().collect();
    assert_eq!(minors.len(), 3, "the three newest minors: {minors:?}");
    let mut checked = 0;
    let mut failures = Vec::new();
    for minor in minors {
        let version = format!("1.{minor}.0");
        let mut files = Vec::new();
        for (name, c) in variants(&version) {
            for m in render_addons(&c).unwrap() {
                files.push(write(
                    dir.path(),
                    &format!("{minor}/{name}/{}", m.name),
                    m.yaml.expose().as_bytes(),
                ));
            }
        }
        let token = bootstrap_token_secret(&secrets()).unwrap();
        files.push(write(
            dir.path(),
            &format!("{minor}/{}", token.name),
            token.yaml.expose().as_bytes(),
        ));
        for f in files {
            // A custom resource: kubernetes-validate has no schema for it (see `validate_cr`).
            if f.parent().is_some_and(|d| d.ends_with(addons::CRS_DIR)) {
                let (ok, said) = validate_cr(&f);
                checked += 1;
                if !ok {
                    failures.push(format!("{}: {said}", f.display()));
                }
                continue;
            }
            let (ok, said) = validate(&f, minor);
            checked += 1;
            if !ok {
                // The file may hold the canary credential: name the file, show the validator's words only.
                failures.push(format!("{} for 1.{minor}: {said}", f.display()));
            }
        }
    }
    // Per minor: 2 CCMs × (cinder-csi, kos-csi: Secret, CCM, driver, StorageClass,
    // snapshot-controller, 3 CRDs, VolumeSnapshotClass; none: Secret, CCM), and the token Secret.
    assert!(
        checked >= 3 * (2 * (9 + 9 + 2) + 1),
        "only {checked} manifests checked"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The check can fail: a misspelled field in a rendered manifest is refused.
#[test]
fn a_misspelled_field_in_a_rendered_manifest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster("1.36.0", 1, 0);
    let addons = render_addons(&c).unwrap();
    let sc = addons
        .iter()
        .find(|m| m.yaml.expose().contains("kind: StorageClass"))
        .expect("a StorageClass manifest");
    let (ok, said) = validate(
        &write(dir.path(), "sc.yaml", sc.yaml.expose().as_bytes()),
        36,
    );
    assert!(ok, "{said}");
    let broken = sc
        .yaml
        .expose()
        .replace("reclaimPolicy:", "reclaimPolicyy:");
    assert_ne!(
        broken,
        *sc.yaml.expose(),
        "the StorageClass has a reclaimPolicy"
    );
    let (ok, said) = validate(&write(dir.path(), "broken.yaml", broken.as_bytes()), 36);
    assert!(!ok, "a misspelled field passed: {said}");
    assert!(said.contains("reclaimPolicyy"), "{said}");

    // Deep in a later document of a multi-document manifest: the CCM's DaemonSet's pod spec.
    let ccm = addons
        .iter()
        .find(|m| m.yaml.expose().contains("kind: DaemonSet"))
        .expect("the CCM's DaemonSet");
    let broken = ccm
        .yaml
        .expose()
        .replace("serviceAccountName:", "serviceAcountName:");
    assert_ne!(broken, *ccm.yaml.expose());
    let (ok, said) = validate(&write(dir.path(), "ccm.yaml", broken.as_bytes()), 36);
    assert!(!ok, "a misspelled field passed: {said}");
    assert!(said.contains("serviceAcountName"), "{said}");
}

/// The custom resource check can fail: the VolumeSnapshotClass with a misspelled field, a value its
/// CRD's enum lacks, or a required field missing, is refused.
#[test]
fn a_wrong_volume_snapshot_class_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = cluster("1.36.0", 1, 0);
    let class = render_addons(&c)
        .unwrap()
        .into_iter()
        .find(|m| m.name.starts_with(&format!("{}/", addons::CRS_DIR)))
        .expect("a VolumeSnapshotClass");
    let yaml = class.yaml.expose().to_string();
    let (ok, said) = validate_cr(&write(dir.path(), "class.yaml", yaml.as_bytes()));
    assert!(ok, "{said}");
    for (from, to, expect) in [
        (
            "deletionPolicy: Delete",
            "deletionPolicy: Delete\nparameterz: {}",
            "parameterz",
        ),
        ("deletionPolicy: Delete", "deletionPolicy: Keep", "Keep"),
        ("driver: cinder.csi.openstack.org\n", "", "driver"),
        (
            "kind: VolumeSnapshotClass",
            "kind: VolumeSnapshotKlass",
            "no CRD",
        ),
    ] {
        let broken = yaml.replace(from, to);
        assert_ne!(broken, yaml, "{from}");
        let (ok, said) = validate_cr(&write(dir.path(), "broken.yaml", broken.as_bytes()));
        assert!(!ok, "{from} -> {to} passed: {said}");
        assert!(said.contains(expect), "{said}");
    }
}
