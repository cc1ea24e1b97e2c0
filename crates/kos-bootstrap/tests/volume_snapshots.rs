//! Volume snapshots come with either CSI driver: external-snapshotter's CRDs (its release's files,
//! unchanged), its snapshot-controller, the driver's csi-snapshotter sidecar and a default
//! VolumeSnapshotClass. The RBAC is held to upstream's rules, written out here: a rule granting more
//! fails. The apply order is the script's: a custom resource only after its CRD is established.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use kos_bootstrap::addons::{self, CRDS_DIR, CRS_DIR, Pins};
use kos_bootstrap::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn docs(yaml: &str) -> Vec<Value> {
    yaml.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap())
        .filter(|d| !d.is_null())
        .collect()
}

fn all_docs(c: &ClusterInput) -> Vec<Value> {
    render_addons(c)
        .unwrap()
        .iter()
        .flat_map(|m| docs(m.yaml.expose()))
        .collect()
}

fn kos_csi(mut c: ClusterInput) -> ClusterInput {
    c.csi = Csi::Kos {
        image: "registry.example.com/kos/kos-csi:0.1.0".into(),
    };
    c
}

/// The rules of a role as (apiGroup, resource) → verbs, one entry per pair (so two rules cannot hide
/// a grant between them).
type Grants = BTreeMap<(String, String), BTreeSet<String>>;

fn grants(role: &Value) -> Grants {
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("a list: {v}"))
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut out = Grants::new();
    for rule in role["rules"].as_array().unwrap() {
        let keys: Vec<&str> = rule
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert!(
            keys.iter()
                .all(|k| ["apiGroups", "resources", "verbs"].contains(k)),
            "no resourceNames, nonResourceURLs or other fields kos does not expect: {keys:?}"
        );
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                out.entry((g.clone(), r))
                    .or_default()
                    .extend(strs(&rule["verbs"]));
            }
        }
    }
    out
}

fn expected(rules: &[(&str, &str, &[&str])]) -> Grants {
    let mut out = Grants::new();
    for (g, r, verbs) in rules {
        out.entry(((*g).into(), (*r).into()))
            .or_default()
            .extend(verbs.iter().map(|v| (*v).to_owned()));
    }
    out
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind}/{name}");
    found[0]
}

/// The roles bound to `sa` in kube-system (ClusterRoles by ClusterRoleBindings, Roles by
/// RoleBindings), by kind and name.
fn bound_to(docs: &[Value], sa: &str) -> BTreeSet<(String, String)> {
    docs.iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
        .filter(|b| {
            b["subjects"].as_array().unwrap().iter().any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == sa
                    && (s["namespace"] == "kube-system"
                        || (s["namespace"].is_null()
                            && b["metadata"]["namespace"] == "kube-system"))
            })
        })
        .map(|b| {
            (
                b["roleRef"]["kind"].as_str().unwrap().to_owned(),
                b["roleRef"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// external-snapshotter's `deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml`
/// (external-snapshotter-runner) at v8.4.0, less its group-snapshot rules: no more.
const CSI_SNAPSHOTTER: &[(&str, &str, &[&str])] = &[
    (
        "",
        "events",
        &["list", "watch", "create", "update", "patch"],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshotclasses",
        &["get", "list", "watch"],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshotcontents",
        &["get", "list", "watch", "update", "patch"],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshotcontents/status",
        &["update", "patch"],
    ),
];

/// external-snapshotter's `deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml`
/// (snapshot-controller-runner) at v8.4.0, less its group-snapshot rules: no more.
const SNAPSHOT_CONTROLLER: &[(&str, &str, &[&str])] = &[
    ("", "persistentvolumes", &["get", "list", "watch"]),
    (
        "",
        "persistentvolumeclaims",
        &["get", "list", "watch", "update"],
    ),
    (
        "",
        "events",
        &["list", "watch", "create", "update", "patch"],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshotclasses",
        &["get", "list", "watch"],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshotcontents",
        &[
            "create", "get", "list", "watch", "update", "delete", "patch",
        ],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshotcontents/status",
        &["patch"],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshots",
        &[
            "create", "get", "list", "watch", "update", "patch", "delete",
        ],
    ),
    (
        "snapshot.storage.k8s.io",
        "volumesnapshots/status",
        &["update", "patch"],
    ),
];

/// Leader election, upstream's for either: leases in kube-system only.
const LEADER_ELECTION: &[(&str, &str, &[&str])] = &[(
    "coordination.k8s.io",
    "leases",
    &["get", "watch", "list", "delete", "update", "create"],
)];

#[test]
fn rbac_grants_no_more_than_upstreams() {
    for c in [cluster("1.36.4", 1, 0), kos_csi(cluster("1.35.0", 1, 0))] {
        let d = all_docs(&c);
        assert_eq!(
            grants(find(&d, "ClusterRole", "csi-snapshotter-role")),
            expected(CSI_SNAPSHOTTER)
        );
        assert_eq!(
            grants(find(&d, "ClusterRole", "snapshot-controller-runner")),
            expected(SNAPSHOT_CONTROLLER)
        );
        let le = find(&d, "Role", "snapshot-controller-leaderelection");
        assert_eq!(le["metadata"]["namespace"], "kube-system");
        assert_eq!(grants(le), expected(LEADER_ELECTION));
        // The snapshot-controller's account holds these two roles and nothing else.
        assert_eq!(
            bound_to(&d, "snapshot-controller"),
            BTreeSet::from([
                ("ClusterRole".into(), "snapshot-controller-runner".into()),
                ("Role".into(), "snapshot-controller-leaderelection".into()),
            ])
        );
        let deployment = find(&d, "Deployment", "snapshot-controller");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["serviceAccountName"],
            "snapshot-controller"
        );
        // The controller's account got the csi-snapshotter's role besides the other sidecars'.
        let sa = "csi-cinder-controller-sa";
        assert!(
            bound_to(&d, sa).contains(&("ClusterRole".into(), "csi-snapshotter-role".into())),
            "{:?}",
            bound_to(&d, sa)
        );
        // Across every role the controller's account holds, no snapshot grant beyond the
        // csi-snapshotter's and the csi-provisioner's upstream get/list (restoring a claim from a
        // snapshot reads it): upstream cinder-csi's own csi-snapshotter-role grants create and delete
        // of contents, which the sidecar does not use.
        let mut snapshot = Grants::new();
        for (kind, name) in bound_to(&d, sa) {
            for ((g, r), verbs) in grants(find(&d, &kind, &name)) {
                if g == "snapshot.storage.k8s.io" {
                    snapshot.entry((g, r)).or_default().extend(verbs);
                }
            }
        }
        let mut allowed = expected(CSI_SNAPSHOTTER);
        allowed.retain(|(g, _), _| g == "snapshot.storage.k8s.io");
        for (g, r, verbs) in [
            (
                "snapshot.storage.k8s.io",
                "volumesnapshots",
                &["get", "list"],
            ),
            (
                "snapshot.storage.k8s.io",
                "volumesnapshotcontents",
                &["get", "list"],
            ),
        ] {
            allowed
                .entry((g.into(), r.into()))
                .or_default()
                .extend(verbs.iter().map(|v| (*v).to_owned()));
        }
        assert_eq!(snapshot, allowed);
    }
}

/// The check can fail: one more verb, or one more resource, in the csi-snapshotter's role.
#[test]
fn one_more_grant_is_caught() {
    let d = all_docs(&cluster("1.36.4", 1, 0));
    let mut role = find(&d, "ClusterRole", "csi-snapshotter-role").clone();
    role["rules"][2]["verbs"]
        .as_array_mut()
        .unwrap()
        .push(Value::from("delete"));
    assert_ne!(grants(&role), expected(CSI_SNAPSHOTTER));
    let mut role = find(&d, "ClusterRole", "snapshot-controller-runner").clone();
    role["rules"][0]["resources"]
        .as_array_mut()
        .unwrap()
        .push(Value::from("secrets"));
    assert_ne!(grants(&role), expected(SNAPSHOT_CONTROLLER));
}

/// The CRDs are external-snapshotter v8.4.0's `client/config/crd/` files byte for byte (the release
/// of the pinned snapshot-controller and csi-snapshotter; `git show v8.4.0:PATH | sha256sum`).
#[test]
fn crds_are_the_pinned_releases_files() {
    let pins = Pins::builtin().unwrap();
    for image in [
        &pins.images.snapshot_controller,
        &pins.images.csi_snapshotter,
    ] {
        assert!(
            image.ends_with(":v8.4.0"),
            "{image}: update the CRDs with it"
        );
    }
    let want = [
        (
            "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
            "75e6565aac2c0f2949ed13ea884bbaa388cb7be576b558b709cf1168e011828d",
        ),
        (
            "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
            "895a3c1e73b60f06a0deb566dd123d01bdf1b2efc5d5ff5231ff8bbcf42dafc7",
        ),
        (
            "snapshot.storage.k8s.io_volumesnapshots.yaml",
            "b032116e987fb1d7d93cec7d942833adeb9d95c9bdc7e00c10b280c2fe4a6c33",
        ),
    ];
    let got: Vec<(&str, String)> = addons::SNAPSHOT_CRDS
        .iter()
        .map(|(name, yaml)| (*name, hex(&Sha256::digest(yaml.as_bytes()))))
        .collect();
    assert_eq!(
        got,
        want.map(|(n, h)| (n, h.to_owned())).to_vec(),
        "the embedded CRDs are not the release's files"
    );
    // And they are what the cluster gets, unchanged, in their own directory.
    let rendered = render_addons(&cluster("1.36.4", 1, 0)).unwrap();
    for (name, yaml) in addons::SNAPSHOT_CRDS {
        let m = rendered
            .iter()
            .find(|m| m.name == format!("{CRDS_DIR}/{name}"))
            .unwrap_or_else(|| panic!("{name} is not rendered"));
        assert_eq!(m.yaml.expose(), yaml);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Snapshots come with either CSI driver and not without one; the images are the pins; the default
/// class names the driver the CSIDriver registers.
#[test]
fn snapshots_come_with_a_csi_driver() {
    let pins = Pins::builtin().unwrap();
    for c in [cluster("1.34.1", 1, 0), kos_csi(cluster("1.36.4", 1, 0))] {
        let d = all_docs(&c);
        let crds: BTreeSet<&str> = d
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            crds,
            BTreeSet::from([
                "volumesnapshotclasses.snapshot.storage.k8s.io",
                "volumesnapshotcontents.snapshot.storage.k8s.io",
                "volumesnapshots.snapshot.storage.k8s.io",
            ])
        );
        let sc = find(&d, "Deployment", "snapshot-controller");
        let ct = &sc["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(ct["image"], pins.images.snapshot_controller.as_str());
        assert!(
            ct["args"]
                .as_array()
                .unwrap()
                .contains(&Value::from("--leader-election=true")),
            "two replicas, one leader"
        );
        assert_eq!(sc["metadata"]["namespace"], "kube-system");
        let class = find(&d, "VolumeSnapshotClass", "csi-cinder-snapclass");
        let driver = find(&d, "CSIDriver", "cinder.csi.openstack.org");
        assert_eq!(class["driver"], driver["metadata"]["name"]);
        assert_eq!(class["deletionPolicy"], "Delete");
        assert_eq!(
            class["metadata"]["annotations"]["snapshot.storage.kubernetes.io/is-default-class"],
            "true"
        );
    }
    let mut none = cluster("1.36.4", 1, 0);
    none.csi = Csi::None;
    let rendered = render_addons(&none).unwrap();
    assert!(
        rendered
            .iter()
            .all(|m| !m.name.contains('/') && !m.yaml.expose().contains("snapshot")),
        "{rendered:?}"
    );
}

/// `kubectl apply -f DIR` takes the files of DIR, not of its subdirectories: the CRDs are in one
/// the script applies after the top directory and waits for until established, and the custom
/// resources in another it applies after that. No custom resource is in a directory applied with or
/// before its definition.
#[test]
fn custom_resources_are_applied_after_their_crds_are_established() {
    let rendered = render_addons(&cluster("1.36.4", 1, 0)).unwrap();
    let dir_of = |m: &addons::Manifest| m.name.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
    for m in &rendered {
        let kinds: Vec<String> = docs(m.yaml.expose())
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_owned())
            .collect();
        let dir = dir_of(m);
        let crd = kinds.iter().any(|k| k == "CustomResourceDefinition");
        let cr = kinds.iter().any(|k| k == "VolumeSnapshotClass");
        match dir.as_str() {
            d if d == CRDS_DIR => assert!(kinds.iter().all(|k| k == "CustomResourceDefinition")),
            d if d == CRS_DIR => assert!(cr && !crd, "{}: {kinds:?}", m.name),
            "" => assert!(!crd && !cr, "{}: {kinds:?}", m.name),
            other => panic!("{}: a directory the script does not apply: {other}", m.name),
        }
    }
    // The script's addons step, in order.
    let script = kos_bootstrap::cloud_init::BOOTSTRAP_SCRIPT;
    let body: Vec<&str> = script
        .lines()
        .map(str::trim)
        .skip_while(|l| *l != "addons() {")
        .skip(1)
        .take_while(|l| *l != "}")
        .filter(|l| l.starts_with("retry "))
        .collect();
    assert_eq!(
        body,
        [
            r#"retry 10 local_kubectl apply -f "$ADDONS_DIR""#.to_owned(),
            format!(r#"retry 10 local_kubectl apply -f "$ADDONS_DIR/{CRDS_DIR}""#),
            format!(
                r#"retry 10 local_kubectl wait --for condition=established --timeout=60s -f "$ADDONS_DIR/{CRDS_DIR}""#
            ),
            format!(r#"retry 10 local_kubectl apply -f "$ADDONS_DIR/{CRS_DIR}""#),
        ]
    );
}
