//! Every manifest kos renders for a cluster (the addons: the cloud-config Secret, the CCM, cinder-csi or
//! kos-csi, the StorageClass; and the bootstrap-token Secret), validated against Kubernetes' own API
//! schemas of each supported minor by `kubernetes-validate` (PyPI), a validator kos did not write, in strict mode: an
//! unknown or misspelled field fails, as `kubectl apply --validate=strict` would refuse it. The tool is
//! installed by scripts/test; a missing tool fails the test with how to install it.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use kos_bootstrap::addons::Pins;
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
            let (ok, said) = validate(&f, minor);
            checked += 1;
            if !ok {
                // The file may hold the canary credential: name the file, show the validator's words only.
                failures.push(format!("{} for 1.{minor}: {said}", f.display()));
            }
        }
    }
    // Per minor: 2 CCMs × (cinder-csi, kos-csi: Secret, CCM, driver, StorageClass; none: Secret,
    // CCM), and the token Secret.
    assert!(
        checked >= 3 * (2 * (4 + 4 + 2) + 1),
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
