//! `kos-operator manifests`: its RBAC grants exactly the calls of `kos_operator::rbac::CALLS`, no
//! verb more, and every object is valid for each supported Kubernetes minor by
//! `kubernetes-validate` (strict; installed by scripts/test), a validator kos did not write.

mod support;

use std::collections::BTreeSet;
use std::process::Command;

use kos_operator::rbac::{CALLS, Scope};
use serde_json::Value;

fn objects() -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .args([
            "manifests",
            "--image",
            "registry.example/kos/kos-operator:0.1.0",
        ])
        .output()
        .expect("run kos-operator");
    assert!(out.status.success(), "{out:?}");
    serde_saphyr::from_multiple(&String::from_utf8(out.stdout).expect("utf8")).expect("yaml")
}

/// (scope, group, resource, verb, name or "").
type Grant = (String, String, String, String, String);

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn granted(objects: &[Value]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for o in objects {
        let scope = match o["kind"].as_str() {
            Some("ClusterRole") => "cluster".to_owned(),
            Some("Role") => o["metadata"]["namespace"].as_str().expect("ns").to_owned(),
            _ => continue,
        };
        for rule in o["rules"].as_array().expect("rules") {
            let names = strs(&rule["resourceNames"]);
            let names = if names.is_empty() {
                vec![String::new()]
            } else {
                names
            };
            for g in strs(&rule["apiGroups"]) {
                for r in strs(&rule["resources"]) {
                    for v in strs(&rule["verbs"]) {
                        assert_ne!(v, "*", "a wildcard verb");
                        assert_ne!(r, "*", "a wildcard resource");
                        for n in &names {
                            out.insert((scope.clone(), g.clone(), r.clone(), v.clone(), n.clone()));
                        }
                    }
                }
            }
        }
    }
    out
}

fn needed() -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for c in CALLS {
        let scope = match c.scope {
            Scope::Cluster => "cluster".to_owned(),
            Scope::Own => kos_operator::manifests::NAMESPACE.to_owned(),
        };
        let names: Vec<String> = if c.names.is_empty() {
            vec![String::new()]
        } else {
            c.names.iter().map(|n| (*n).to_owned()).collect()
        };
        for v in c.verbs {
            for n in &names {
                out.insert((
                    scope.clone(),
                    c.group.to_owned(),
                    c.resource.to_owned(),
                    (*v).to_owned(),
                    n.clone(),
                ));
            }
        }
    }
    out
}

#[test]
fn the_rbac_grants_exactly_the_calls_of_the_table() {
    let objects = objects();
    assert_eq!(granted(&objects), needed());
    // What a person would worry about most: no Secret listed or watched across the cluster, no
    // delete of anything but through the finalizer's patch.
    let g = granted(&objects);
    assert!(
        !g.iter()
            .any(|(_, _, r, v, _)| r == "secrets" && (v == "list" || v == "watch"))
    );
    assert!(
        !g.iter()
            .any(|(_, _, _, v, _)| v == "delete" || v == "deletecollection")
    );
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
}

#[test]
fn every_object_is_valid_for_each_supported_minor() {
    support::validate_for_each_minor(&objects());
}

/// A self-hosted cluster's operator: the same objects and RBAC, its replicas placed on the control
/// planes; valid for each minor.
#[test]
fn a_self_hosted_operator_is_the_same_objects_on_the_control_planes() {
    let image = "registry.example/kos/kos-operator:0.1.0";
    let hosted = kos_operator::manifests::self_hosted(image, "demo");
    support::validate_for_each_minor(&hosted);
    let plain = kos_operator::manifests::objects(image);
    assert_eq!(hosted.len(), plain.len());
    for (h, p) in hosted.iter().zip(&plain) {
        if h["kind"] != "Deployment" {
            assert_eq!(h, p);
            continue;
        }
        let pod = &h["spec"]["template"]["spec"];
        assert_eq!(
            pod["nodeSelector"]["node-role.kubernetes.io/control-plane"],
            ""
        );
        assert_eq!(
            pod["tolerations"][0]["key"],
            "node-role.kubernetes.io/control-plane"
        );
        assert_eq!(pod["priorityClassName"], "system-cluster-critical");
        assert_eq!(
            h["metadata"]["annotations"][kos_operator::manifests::SELF_HOSTED],
            "demo"
        );
        let mut unplaced = h.clone();
        unplaced["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("annotations");
        let spec = unplaced["spec"]["template"]["spec"]
            .as_object_mut()
            .expect("pod spec");
        for k in ["nodeSelector", "tolerations", "priorityClassName"] {
            spec.remove(k);
        }
        assert_eq!(&unplaced, p, "only the placement differs");
    }
}
