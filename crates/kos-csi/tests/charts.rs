//! The Helm charts `charts/kos-ccm` and `charts/kos-csi`, checked with tools kos did not write:
//! Helm 4's own Go code (helm-python-sdk, through `scripts/helm-render.py`) lints and renders them
//! offline, and `kubernetes-validate` validates every rendered object strictly against Kubernetes' API
//! schemas of each minor kos supports (the VolumeSnapshotClass, a custom resource, by `jsonschema`
//! against its CRD's schema, which kos embeds). Then, against kos's own manifests
//! (`crates/kos-bootstrap/src/addons/`): the charts grant exactly the RBAC kos grants (a verb, resource
//! or name more fails), make the same objects, run the images kos pins, and give kos-ccm and kos-csi
//! arguments their own flag parsers accept; the cloud.conf with its secret is in a Secret only and
//! reaches kos-ccm's reader intact. Both tools are installed by scripts/test into its venv; a missing
//! one fails the test with how to install it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use clap::Parser;
use serde_json::Value;

/// The workspace of the checkout under test: the package's directory as cargo gives it when the
/// test runs (the one compiled in may be another checkout's, sharing the target directory).
fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../..")
}
const KOS_CCM: &str = include_str!("../../kos-bootstrap/src/addons/kos-ccm.yaml");
const CINDER_CSI: &str = include_str!("../../kos-bootstrap/src/addons/cinder-csi.yaml");
const STORAGE_CLASS: &str = include_str!("../../kos-bootstrap/src/addons/storageclass.yaml");
const SNAPSHOT_CLASS: &str =
    include_str!("../../kos-bootstrap/src/addons/volumesnapshotclass.yaml");
/// external-snapshotter's CRD of VolumeSnapshotClass, as kos installs it (the chart does not).
const SNAPSHOT_CLASS_CRD: &str = include_str!(
    "../../kos-bootstrap/src/addons/snapshot/snapshot.storage.k8s.io_volumesnapshotclasses.yaml"
);
const PINS: &str = include_str!("../../kos-bootstrap/src/pins.yaml");

/// The application-credential secret of the realistic values: gcfg's special characters included
/// (the cloud.conf escapes them, so its searchable part is `CANARY_MARK`).
const CANARY: &str = r#"CANARY-7d1e;#"q\uote-app-cred"#;
const CANARY_MARK: &str = "CANARY-7d1e";
const CSI_CANARY: &str = "CANARY-csi-9b3f-password";

fn home_venv(bin: &str) -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache/kos/venv/bin").join(bin)
}

/// `KOS_HELM_PYTHON`, then the venv scripts/test installs helm-python-sdk into; it must import it.
fn python() -> PathBuf {
    let p = std::env::var_os("KOS_HELM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| home_venv("python"));
    let ok = Command::new(&p)
        .args(["-c", "import helm_python"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "helm-python-sdk (Helm 4's library) is required by this test and {} cannot import it: run \
         scripts/test (it installs it into ~/.cache/kos/venv), or `pip install helm-python-sdk==0.2.2` \
         and point KOS_HELM_PYTHON at that Python",
        p.display()
    );
    p
}

/// `KOS_KUBERNETES_VALIDATE`, then the venv scripts/test installs it into.
fn validator() -> PathBuf {
    let p = std::env::var_os("KOS_KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home_venv("kubernetes-validate"));
    assert!(
        p.is_file(),
        "`kubernetes-validate` is required by this test and is missing: run scripts/test (it installs \
         it into ~/.cache/kos/venv), or `pip install kubernetes-validate==1.37.0` and point \
         KOS_KUBERNETES_VALIDATE at it"
    );
    p
}

/// What Helm made of a chart and values.
struct Render {
    lint: Value,
    /// Template path → rendered text (NOTES.txt included).
    manifests: BTreeMap<String, String>,
    error: Option<String>,
}

fn render_in(chart: &str, values: &str, namespace: &str) -> Render {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).expect("values file");
    let out = Command::new(python())
        .arg(root().join("scripts/helm-render.py"))
        .arg(root().join("charts").join(chart))
        .arg("--values")
        .arg(&file)
        .args(["--name", "kos", "--namespace", namespace])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "helm-render.py {chart}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("helm-render.py prints JSON");
    let manifests = v["manifests"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, t)| (k.clone(), t.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    Render {
        lint: v["lint"].clone(),
        manifests,
        error: v["error"].as_str().map(str::to_owned),
    }
}

fn render(chart: &str, values: &str) -> Render {
    render_in(chart, values, "kube-system")
}

impl Render {
    /// Panics naming Helm's error when the chart did not render.
    fn ok(self) -> Self {
        if let Some(e) = &self.error {
            panic!("the chart did not render: {e}");
        }
        self
    }

    /// Lint findings of warning or error severity (2, 3), and lint errors.
    fn lint_problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.lint["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["severity"].as_u64().unwrap_or(3) >= 2)
            .map(|m| m.to_string())
            .collect();
        out.extend(
            self.lint["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e.to_string()),
        );
        out
    }

    fn notes(&self) -> &str {
        self.manifests
            .iter()
            .find(|(k, _)| k.ends_with("NOTES.txt"))
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }

    /// Every rendered object (empty documents dropped), as kubectl would read them.
    fn objects(&self) -> Vec<Value> {
        self.manifests
            .iter()
            .filter(|(k, _)| !k.ends_with("NOTES.txt"))
            .flat_map(|(k, text)| {
                serde_saphyr::from_multiple::<Value>(text)
                    .unwrap_or_else(|e| panic!("{k} is not YAML: {e}"))
            })
            .filter(|d| !d.is_null())
            .collect()
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// kos's own manifest as documents, its placeholders filled as kos fills them: `@X_IMAGE@` with
/// pins.yaml's `images.x`, the rest (the cluster's name, the CCM and cinder-csi images) with
/// placeholders the tests replace.
fn kos_manifest(text: &str) -> Vec<Value> {
    let pins: Value = serde_saphyr::from_str(PINS).expect("pins.yaml");
    let mut t = text.to_owned();
    while let Some(start) = t.find('@') {
        let Some(len) = t[start + 1..].find('@') else {
            break;
        };
        let name = t[start + 1..start + 1 + len].to_owned();
        let key = name.to_lowercase();
        let pin = key
            .strip_suffix("_image")
            .and_then(|k| pins["images"][k].as_str());
        let value = pin.map_or_else(|| format!("placeholder-{key}"), str::to_owned);
        t = t.replace(&format!("@{name}@"), &value);
    }
    serde_saphyr::from_multiple::<Value>(&t)
        .expect("kos's manifest is YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Values

const CCM_MINIMAL: &str =
    "image:\n  repository: registry.example.com/kos/kos-ccm\nsecret:\n  create: false\n";

fn ccm_realistic() -> String {
    // The canary in a YAML single-quoted scalar: only `'` would need escaping.
    format!(
        r#"image:
  repository: registry.example.com/kos/kos-ccm
cluster:
  name: prod-eu
logVerbosityLevel: 2
commonAnnotations:
  team: platform
podLabels:
  tier: control
extraEnv:
  - name: OS_CCM_REGIONAL
    value: "true"
controllerExtraArgs: |-
  - --lb-resync-period=2m
resources:
  requests: {{cpu: 100m, memory: 64Mi}}
  limits: {{memory: 256Mi}}
cloudConfig:
  global:
    auth-url: https://keystone.example.com:5000/v3
    region: RegionOne
    application-credential-id: 4f1c0e8a9b7d4c2e
    application-credential-secret: '{CANARY}'
  networking:
    internal-network-name: nodes
  loadBalancer:
    floating-network-id: 7c9e2f5a-1b3d-4e6f-8a0b-2c4d6e8f0a1b
    create-monitor: true
    lb-method: ROUND_ROBIN
  blockStorage:
    ignore-volume-az: true
  metadata:
    search-order: configDrive,metadataService
"#
    )
}

const CSI_MINIMAL: &str =
    "csi:\n  plugin:\n    image:\n      repository: registry.example.com/kos/kos-csi\n";

fn csi_realistic() -> String {
    format!(
        r#"csi:
  plugin:
    image:
      repository: registry.example.com/kos/kos-csi
      tag: 0.1.0-rc1
    httpEndpoint:
      enabled: true
      port: 8081
    nodePlugin:
      kubeletDir: /var/lib/k0s/kubelet
    controllerPlugin:
      replicas: 2
      nodeSelector:
        node-role.kubernetes.io/control-plane: ""
    volumes:
      - name: cacert
        hostPath:
          path: /etc/cacert
    volumeMounts:
      - name: cloud-config
        mountPath: /etc/config
        readOnly: true
      - name: cacert
        mountPath: /etc/cacert
        readOnly: true
  provisioner:
    extraArgs: |-
      - --worker-threads=20
  snapshotter:
    extraArgs: |-
      - --worker-threads=4
logVerbosityLevel: 2
clusterID: prod-eu
volumeSnapshotClass:
  isDefault: false
  deletionPolicy: Retain
  parameters:
    force-create: true
commonAnnotations:
  team: platform
secret:
  enabled: true
  create: true
  name: cinder-csi-cloud-config
  data:
    cloud.conf: |-
      [Global]
      auth-url = https://keystone.example.com:5000/v3
      username = csi
      password = "{CSI_CANARY}"
      user-domain-name = Default
      tenant-name = prod
      region = RegionOne
      [BlockStorage]
      node-volume-attach-limit = 16
      rescan-on-resize = true
storageClass:
  delete:
    isDefault: false
    parameters:
      type: standard
  retain:
    enabled: true
    isDefault: true
  classes:
    - name: ssd-az1
      reclaimPolicy: Delete
      allowVolumeExpansion: false
      parameters:
        type: ssd
        availability: az1
        csi.storage.k8s.io/fstype: xfs
"#
    )
}

/// A values file shaped as one for upstream's openstack-cloud-controller-manager chart (its keys,
/// their usual values; nulls where its defaults are empty), with only the image changed.
const CCM_UPSTREAM_SHAPED: &str = r#"commonAnnotations: {}
imagePullSecrets: []
image:
  repository: registry.example.com/kos/kos-ccm
  tag: ""
extraInitContainers: []
extraEnv: []
resources: {}
livenessProbe: {}
readinessProbe: {}
dnsPolicy: ClusterFirst
nodeSelector:
  node-role.kubernetes.io/control-plane: ""
tolerations:
  - key: node.cloudprovider.kubernetes.io/uninitialized
    value: "true"
    effect: NoSchedule
  - key: node-role.kubernetes.io/control-plane
    effect: NoSchedule
podAnnotations: {}
podLabels: {}
podSecurityContext:
  runAsUser: 1001
securityContext: {}
enabledControllers: [cloud-node, cloud-node-lifecycle, route, service]
controllerExtraArgs: {}
serviceMonitor: {}
secret:
  enabled: true
  create: true
  name: cloud-config
logVerbosityLevel: 2
cloudConfig:
  global:
    auth-url: https://keystone.example.com:5000/v3
    username: ccm
    password: CANARY-upstream-shaped
    tenant-name: prod
    domain-name: Default
  networking:
  loadBalancer:
    floating-network-id: 7c9e2f5a-1b3d-4e6f-8a0b-2c4d6e8f0a1b
  blockStorage:
  metadata:
  route:
priorityClassName:
extraVolumes:
  - name: flexvolume-dir
    hostPath:
      path: /usr/libexec/kubernetes/kubelet-plugins/volume/exec
  - name: k8s-certs
    hostPath:
      path: /etc/kubernetes/pki
extraVolumeMounts:
  - name: flexvolume-dir
    mountPath: /usr/libexec/kubernetes/kubelet-plugins/volume/exec
    readOnly: true
  - name: k8s-certs
    mountPath: /etc/kubernetes/pki
    readOnly: true
cluster:
  name: kubernetes
clusterRoleName: system:cloud-controller-manager
serviceAccountName: cloud-controller-manager
"#;

/// The same for upstream's openstack-cinder-csi chart: the node's /etc/config (its default), a
/// snapshotter block (its extraRbac not read), upstream's map-shaped empty extraArgs, a custom StorageClass, and
/// nameOverride giving kos's own workload names.
const CSI_UPSTREAM_SHAPED: &str = r#"nameOverride: csi-cinder
timeout: 3m
csi:
  attacher:
    image: {repository: registry.k8s.io/sig-storage/csi-attacher, tag: v4.10.0, pullPolicy: IfNotPresent}
    resources: {}
    extraArgs: {}
    extraEnv: []
  snapshotter:
    image: {repository: registry.k8s.io/sig-storage/csi-snapshotter, tag: v8.4.0, pullPolicy: IfNotPresent}
    extraRbac: {}
  plugin:
    image:
      repository: registry.example.com/kos/kos-csi
      pullPolicy: IfNotPresent
      tag:
    volumes:
      - name: cacert
        hostPath:
          path: /etc/cacert
    volumeMounts:
      - name: cacert
        mountPath: /etc/cacert
        readOnly: true
      - name: cloud-config
        mountPath: /etc/config
        readOnly: true
    nodePlugin:
      dnsPolicy: ClusterFirstWithHostNet
      podAnnotations: {}
      podLabels: {}
      podSecurityContext: {}
      securityContext: {}
      affinity: {}
      nodeSelector: {}
      tolerations:
        - operator: Exists
      kubeletDir: /var/lib/kubelet
      extraArgs: {}
    controllerPlugin:
      replicas: 1
      podSecurityContext: {}
      securityContext: {}
      affinity: {}
      nodeSelector: {}
      tolerations: []
      extraArgs: {}
    resources: {}
    httpEndpoint:
      enabled: false
      port: 8080
    podMonitor:
      enabled: false
    extraArgs: {}
    extraEnv: []
logVerbosityLevel: 2
secret:
  enabled: false
  hostMount: true
  create: false
  filename: cloud.conf
storageClass:
  enabled: true
  delete:
    isDefault: false
    allowVolumeExpansion: true
  retain:
    isDefault: false
    allowVolumeExpansion: true
  custom: |-
    ---
    apiVersion: storage.k8s.io/v1
    kind: StorageClass
    metadata:
      name: sas
    provisioner: cinder.csi.openstack.org
    volumeBindingMode: WaitForFirstConsumer
    allowVolumeExpansion: true
    parameters:
      type: SAS
clusterID: "kubernetes"
pvcAnnotations: false
priorityClassName: ""
imagePullSecrets: []
commonAnnotations: {}
"#;

/// (name, chart, values, namespace) of every render that must succeed.
fn renders() -> Vec<(&'static str, &'static str, String, &'static str)> {
    vec![
        (
            "ccm-upstream-shaped",
            "kos-ccm",
            CCM_UPSTREAM_SHAPED.to_owned(),
            "kube-system",
        ),
        (
            "csi-upstream-shaped",
            "kos-csi",
            CSI_UPSTREAM_SHAPED.to_owned(),
            "kube-system",
        ),
        (
            "ccm-minimal",
            "kos-ccm",
            CCM_MINIMAL.to_owned(),
            "kube-system",
        ),
        ("ccm-realistic", "kos-ccm", ccm_realistic(), "kube-system"),
        (
            "ccm-other-namespace",
            "kos-ccm",
            CCM_MINIMAL.to_owned(),
            "kos-system",
        ),
        (
            "csi-minimal",
            "kos-csi",
            CSI_MINIMAL.to_owned(),
            "kube-system",
        ),
        ("csi-realistic", "kos-csi", csi_realistic(), "kube-system"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Helm: lint and the values the charts refuse

#[test]
fn helm_lints_both_charts_clean_with_default_and_realistic_values() {
    for (chart, values) in [
        ("kos-ccm", String::new()),
        ("kos-ccm", ccm_realistic()),
        ("kos-csi", String::new()),
        ("kos-csi", csi_realistic()),
    ] {
        let r = render(chart, &values);
        assert_eq!(r.lint["total_charts_linted"], 1, "{chart}: {}", r.lint);
        let problems = r.lint_problems();
        assert!(problems.is_empty(), "{chart}: {problems:?}");
    }
}

#[test]
fn default_values_are_refused_naming_what_kos_cannot_default() {
    // kos publishes no image: the repository is the one value a user must give.
    let e = render("kos-csi", "").error.expect("refused");
    assert!(e.contains("csi.plugin.image.repository is required"), "{e}");
    let e = render("kos-ccm", "secret:\n  create: false\n")
        .error
        .expect("refused");
    assert!(e.contains("image.repository is required"), "{e}");
    // The chart makes the cloud.conf Secret by default (upstream's default): it needs the cloud.
    let e = render("kos-ccm", "image:\n  repository: r.example/kos-ccm\n")
        .error
        .expect("refused");
    assert!(e.contains("cloudConfig.global.auth-url is required"), "{e}");
    // A key kos-ccm would refuse is refused when rendering, naming it.
    let e = render(
        "kos-ccm",
        "image:\n  repository: r.example/kos-ccm\ncloudConfig:\n  global:\n    auth-url: https://k\n    auth_url: https://k\n",
    )
    .error
    .expect("refused");
    assert!(e.contains("\"auth_url\" in [Global]"), "{e}");
    let e = render(
        "kos-csi",
        &format!("{CSI_MINIMAL}storageClass:\n  retain:\n    enabled: true\n    isDefault: true\n"),
    )
    .error
    .expect("refused");
    assert!(e.contains("more than one class has isDefault"), "{e}");
    let e = render(
        "kos-csi",
        &format!("{CSI_MINIMAL}secret:\n  create: true\n  data:\n    other.conf: x\n"),
    )
    .error
    .expect("refused");
    assert!(e.contains("secret.data must hold cloud.conf"), "{e}");
    let e = render(
        "kos-csi",
        &format!("{CSI_MINIMAL}volumeSnapshotClass:\n  deletionPolicy: Recycle\n"),
    )
    .error
    .expect("refused");
    assert!(
        e.contains("volumeSnapshotClass.deletionPolicy must be Delete or Retain"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// kubernetes-validate

fn validate(files: &[PathBuf], minor: u32) -> (bool, String) {
    let out = Command::new(validator())
        .args(["--strict", "--no-warn", "--quiet", "-k"])
        .arg(format!("1.{minor}.0"))
        .args(files)
        .output()
        .expect("kubernetes-validate runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The minors kos supports, from its pins table.
fn supported_minors() -> Vec<u32> {
    let pins: Value = serde_saphyr::from_str(PINS).expect("pins.yaml");
    pins["kubernetes"]["minors"]
        .as_object()
        .expect("minors")
        .keys()
        .map(|k| k.parse().expect("a minor"))
        .collect()
}

fn write_objects(dir: &Path, name: &str, objects: &[Value]) -> PathBuf {
    let text: Vec<String> = objects.iter().map(Value::to_string).collect();
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(&p, text.join("\n---\n")).expect("write");
    p
}

/// Validates a VolumeSnapshotClass against the `openAPIV3Schema` of v1 in its CRD with `jsonschema`
/// (kubernetes-validate's dependency, in its venv), strictly: an object schema listing properties
/// refuses others unless it preserves unknown fields, as strict field validation does. CEL rules are
/// not evaluated; `metadata` is the API server's to check.
const SNAPSHOT_CLASS_CHECK: &str = r#"
import json, sys, yaml, jsonschema
cr = json.load(open(sys.argv[1]))
crd = yaml.safe_load(open(sys.argv[2]))
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
if cr["apiVersion"] != crd["spec"]["group"] + "/v1" or cr["kind"] != crd["spec"]["names"]["kind"]:
    sys.exit(f"not a {crd['spec']['names']['kind']}: {cr['apiVersion']} {cr['kind']}")
v1 = [v for v in crd["spec"]["versions"] if v["name"] == "v1" and v["served"]]
schema = v1[0]["schema"]["openAPIV3Schema"]
strict(schema)
try:
    jsonschema.validate(cr, schema)
except jsonschema.ValidationError as e:
    sys.exit(f"{e.message} at {list(e.absolute_path)}")
"#;

fn validate_snapshot_class(class: &Value) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cr, crd) = (dir.path().join("cr.json"), dir.path().join("crd.yaml"));
    std::fs::write(&cr, class.to_string()).expect("write");
    std::fs::write(&crd, SNAPSHOT_CLASS_CRD).expect("write");
    let out = Command::new(validator().with_file_name("python3"))
        .arg("-c")
        .arg(SNAPSHOT_CLASS_CHECK)
        .arg(&cr)
        .arg(&crd)
        .output()
        .expect("the venv's python runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn every_rendered_object_validates_strictly_for_each_supported_minor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    let mut count = 0;
    let mut classes = 0;
    for (name, chart, values, ns) in renders() {
        let (custom, objects): (Vec<Value>, Vec<Value>) = render_in(chart, &values, ns)
            .ok()
            .objects()
            .into_iter()
            .partition(|o| o["kind"] == "VolumeSnapshotClass");
        // A custom resource: kubernetes-validate has no schema for it.
        for class in &custom {
            let (ok, said) = validate_snapshot_class(class);
            assert!(ok, "{name}: {said}");
        }
        classes += custom.len();
        count += objects.len();
        files.push(write_objects(dir.path(), name, &objects));
    }
    assert!(count >= 40, "only {count} objects rendered");
    assert!(
        classes >= 3,
        "only {classes} VolumeSnapshotClasses rendered"
    );
    let minors = supported_minors();
    assert_eq!(minors.len(), 3, "{minors:?}");
    for minor in minors {
        let (ok, said) = validate(&files, minor);
        // The files hold the canaries: show the validator's words only.
        assert!(ok, "1.{minor}: {said}");
    }
}

/// The check can fail: a misspelled field deep in a rendered pod spec is refused.
#[test]
fn a_misspelled_field_in_a_rendered_object_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let objects = render("kos-csi", CSI_MINIMAL).ok().objects();
    let good = write_objects(dir.path(), "good", &objects);
    assert!(validate(std::slice::from_ref(&good), 36).0);
    let text = std::fs::read_to_string(&good).expect("read");
    let broken = text.replacen("\"mountPropagation\"", "\"mountPropagaton\"", 1);
    assert_ne!(broken, text);
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, broken).expect("write");
    let (ok, said) = validate(&[bad], 36);
    assert!(!ok, "a misspelled field passed: {said}");
    assert!(said.contains("mountPropagaton"), "{said}");
}

/// The class check can fail: a misspelled field, or a deletionPolicy the CRD does not allow.
#[test]
fn a_volume_snapshot_class_the_crd_refuses_is_refused() {
    let objects = render("kos-csi", CSI_MINIMAL).ok().objects();
    let class = find(&objects, "VolumeSnapshotClass", "csi-cinder-snapclass");
    let (ok, said) = validate_snapshot_class(class);
    assert!(ok, "{said}");
    let mut misspelled = class.clone();
    misspelled["deletionPolicyy"] = "Delete".into();
    let (ok, said) = validate_snapshot_class(&misspelled);
    assert!(!ok && said.contains("deletionPolicyy"), "{said}");
    let mut policy = class.clone();
    policy["deletionPolicy"] = "Recycle".into();
    let (ok, said) = validate_snapshot_class(&policy);
    assert!(!ok && said.contains("Recycle"), "{said}");
}

// ---------------------------------------------------------------------------------------------
// RBAC: the charts grant what kos grants, no more

/// One permission: (scope, API group, resource, verb, resource name or ""). The scope is "cluster"
/// or the namespace, the release's written as kube-system (where kos puts everything).
type Grant = (String, String, String, String, String);

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// ServiceAccount → every permission the bindings among `objects` give it, expanded.
fn grants(objects: &[Value], release_ns: &str) -> BTreeMap<String, BTreeSet<Grant>> {
    let ns = |n: &str| {
        if n == release_ns {
            "kube-system".to_owned()
        } else {
            n.to_owned()
        }
    };
    let mut out: BTreeMap<String, BTreeSet<Grant>> = BTreeMap::new();
    for b in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = &b["roleRef"]["name"];
        let role_ns = b["metadata"]["namespace"].as_str().unwrap_or(release_ns);
        let role = objects.iter().find(|o| {
            o["kind"] == role_kind
                && &o["metadata"]["name"] == role_name
                && (role_kind == "ClusterRole" || o["metadata"]["namespace"] == role_ns)
        });
        let Some(role) = role else {
            panic!(
                "{} binds a missing {role_kind} {role_name}",
                b["metadata"]["name"]
            );
        };
        let scope = if b["kind"] == "ClusterRoleBinding" {
            "cluster".to_owned()
        } else {
            ns(role_ns)
        };
        for s in b["subjects"].as_array().into_iter().flatten() {
            let who = format!(
                "{}:{}/{}",
                s["kind"].as_str().unwrap_or_default(),
                ns(s["namespace"].as_str().unwrap_or(release_ns)),
                s["name"].as_str().unwrap_or_default()
            );
            let set = out.entry(who).or_default();
            for rule in role["rules"].as_array().into_iter().flatten() {
                let names = strs(&rule["resourceNames"]);
                let names = if names.is_empty() {
                    vec![String::new()]
                } else {
                    names
                };
                for g in strs(&rule["apiGroups"]) {
                    for r in strs(&rule["resources"]) {
                        for v in strs(&rule["verbs"]) {
                            for n in &names {
                                set.insert((
                                    scope.clone(),
                                    g.clone(),
                                    r.clone(),
                                    v.clone(),
                                    n.clone(),
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// What the chart grants beyond kos's manifest, and what kos grants that the chart lacks.
fn rbac_drift(chart: &[Value], release_ns: &str, kos: &[Value]) -> (Vec<String>, Vec<String>) {
    let (c, k) = (grants(chart, release_ns), grants(kos, "kube-system"));
    let mut more = Vec::new();
    let mut less = Vec::new();
    let who: BTreeSet<&String> = c.keys().chain(k.keys()).collect();
    let empty = BTreeSet::new();
    for w in who {
        let (cg, kg) = (c.get(w).unwrap_or(&empty), k.get(w).unwrap_or(&empty));
        more.extend(cg.difference(kg).map(|g| format!("{w}: {g:?}")));
        less.extend(kg.difference(cg).map(|g| format!("{w}: {g:?}")));
    }
    (more, less)
}

#[test]
fn the_charts_grant_exactly_the_rbac_kos_grants() {
    for (name, chart, values, ns) in renders() {
        let objects = render_in(chart, &values, ns).ok().objects();
        let kos = kos_manifest(if chart == "kos-ccm" {
            KOS_CCM
        } else {
            CINDER_CSI
        });
        let (more, less) = rbac_drift(&objects, ns, &kos);
        assert!(
            more.is_empty(),
            "{name} grants more than kos does:\n{}",
            more.join("\n")
        );
        assert!(
            less.is_empty(),
            "{name} grants less than kos does:\n{}",
            less.join("\n")
        );
        assert!(!grants(&objects, ns).is_empty(), "{name}: no bindings");
    }
}

/// The check can fail: one verb, one resource name dropped or one binding more is found.
#[test]
fn a_chart_granting_more_than_kos_is_caught() {
    let objects = render("kos-ccm", CCM_MINIMAL).ok().objects();
    let kos = kos_manifest(KOS_CCM);
    let with = |f: &dyn Fn(&mut Vec<Value>)| {
        let mut o = objects.clone();
        f(&mut o);
        rbac_drift(&o, "kube-system", &kos).0
    };
    let more = with(&|o| {
        let cr = o
            .iter_mut()
            .find(|x| x["kind"] == "ClusterRole")
            .expect("a ClusterRole");
        cr["rules"][0]["verbs"]
            .as_array_mut()
            .expect("verbs")
            .push("update".into());
    });
    assert_eq!(more.len(), 1, "{more:?}");
    assert!(more[0].contains("\"nodes\", \"update\""), "{more:?}");
    // A rule limited to kube-system's Namespace, widened to every Namespace.
    let more = with(&|o| {
        let cr = o
            .iter_mut()
            .find(|x| x["kind"] == "ClusterRole")
            .expect("a ClusterRole");
        for r in cr["rules"].as_array_mut().expect("rules") {
            if let Some(m) = r.as_object_mut() {
                m.remove("resourceNames");
            }
        }
    });
    assert!(
        more.iter()
            .any(|m| m.contains("\"namespaces\", \"get\", \"\"")),
        "{more:?}"
    );
    // The leader-election Role bound cluster-wide.
    let more = with(&|o| {
        o.push(serde_json::json!({
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "x"},
            "roleRef": {"kind": "ClusterRole", "name": "secrets"},
            "subjects": [{"kind": "ServiceAccount", "name": "cloud-controller-manager", "namespace": "kube-system"}],
        }));
        o.push(serde_json::json!({
            "kind": "ClusterRole", "metadata": {"name": "secrets"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
        }));
    });
    assert_eq!(more.len(), 1, "{more:?}");
    assert!(more[0].contains("secrets"), "{more:?}");
}

// ---------------------------------------------------------------------------------------------
// The same objects as kos renders

/// Where `chart` lacks or changes what `kos` says, as paths. Maps compare key by key (the chart may
/// add keys); lists of named items by name (the same names); lists of strings as sets that the
/// chart's must include (it may add arguments); other lists and scalars by value.
fn uncovered(kos: &Value, chart: &Value, path: &str, out: &mut Vec<String>) {
    match (kos, chart) {
        (Value::Object(k), Value::Object(c)) => {
            for (key, kv) in k {
                match c.get(key) {
                    Some(cv) => uncovered(kv, cv, &format!("{path}.{key}"), out),
                    None => out.push(format!("{path}.{key}: missing")),
                }
            }
        }
        (Value::Array(k), Value::Array(c)) if k.iter().all(|x| x.get("name").is_some()) => {
            let names = |a: &Vec<Value>| -> Vec<String> {
                a.iter()
                    .map(|x| x["name"].as_str().unwrap_or_default().to_owned())
                    .collect()
            };
            let (kn, cn): (BTreeSet<_>, BTreeSet<_>) = (
                names(k).into_iter().collect(),
                names(c).into_iter().collect(),
            );
            if kn != cn {
                out.push(format!("{path}: names {kn:?} != {cn:?}"));
            }
            for kv in k {
                if let Some(cv) = c.iter().find(|x| x["name"] == kv["name"]) {
                    uncovered(kv, cv, &format!("{path}[{}]", kv["name"]), out);
                }
            }
        }
        (Value::Array(k), Value::Array(c)) if k.iter().all(Value::is_string) => {
            for s in k {
                if !c.contains(s) {
                    out.push(format!("{path}: {s} missing"));
                }
            }
        }
        _ if kos == chart => {}
        _ => out.push(format!("{path}: {kos} != {chart}")),
    }
}

/// kos's objects, each with the chart's object of the same kind and role, compared.
fn same_objects(chart: &[Value], kos: &[Value], renamed: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for k in kos {
        let kind = k["kind"].as_str().unwrap_or_default();
        let name = k["metadata"]["name"].as_str().unwrap_or_default();
        let want = renamed
            .iter()
            .find(|(from, _)| *from == name)
            .map_or(name, |(_, to)| to);
        let Some(c) = chart
            .iter()
            .find(|c| c["kind"] == kind && c["metadata"]["name"] == want)
        else {
            out.push(format!("{kind} {name}: not made by the chart"));
            continue;
        };
        let mut k = k.clone();
        // Labels and selectors are the chart's own (Helm's conventions); kos's plugin image is a
        // placeholder here (pins are checked on their own).
        if let Some(m) = k.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("labels");
            m.remove("name");
        }
        if let Some(s) = k.get_mut("spec").and_then(Value::as_object_mut) {
            s.remove("selector");
            if let Some(t) = s.get_mut("template").and_then(Value::as_object_mut) {
                t.remove("metadata");
            }
        }
        let mut diffs = Vec::new();
        uncovered(&k, c, &format!("{kind} {name}"), &mut diffs);
        out.extend(diffs);
    }
    out
}

#[test]
fn the_kos_ccm_chart_makes_what_kos_renders_for_ccm_kos() {
    let chart = render("kos-ccm", CCM_MINIMAL).ok().objects();
    let mut kos = kos_manifest(KOS_CCM);
    // The image kos is given (placeholder here) versus the chart's; checked by the pins test.
    kos.iter_mut()
        .filter(|o| o["kind"] == "DaemonSet")
        .for_each(|o| {
            o["spec"]["template"]["spec"]["containers"][0]["image"] =
                "registry.example.com/kos/kos-ccm:0.1.0".into();
            o["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"] = "kubernetes".into();
        });
    let diffs = same_objects(&chart, &kos, &[]);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    let kinds = |o: &[Value]| -> BTreeSet<String> {
        o.iter()
            .map(|x| format!("{} {}", x["kind"], x["metadata"]["name"]))
            .collect()
    };
    assert_eq!(
        kinds(&chart),
        kinds(&kos),
        "with an existing Secret: kos's objects, no more"
    );
}

#[test]
fn the_kos_csi_chart_makes_what_kos_renders_for_csi_cinder() {
    let chart = render("kos-csi", CSI_MINIMAL).ok().objects();
    let mut kos = kos_manifest(CINDER_CSI);
    kos.extend(kos_manifest(STORAGE_CLASS));
    kos.extend(kos_manifest(SNAPSHOT_CLASS));
    let plugin = "registry.example.com/kos/kos-csi:0.1.0";
    for o in kos
        .iter_mut()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet")
    {
        let spec = &mut o["spec"]["template"]["spec"];
        // kos names the cloud.conf's volume secret-cinderplugin, upstream's chart cloud-config.
        for v in spec["volumes"].as_array_mut().into_iter().flatten() {
            if v["name"] == "secret-cinderplugin" {
                v["name"] = "cloud-config".into();
            }
        }
        for c in spec["containers"].as_array_mut().into_iter().flatten() {
            for m in c["volumeMounts"].as_array_mut().into_iter().flatten() {
                if m["name"] == "secret-cinderplugin" {
                    m["name"] = "cloud-config".into();
                }
            }
            if c["name"] == "cinder-csi-plugin" {
                c["image"] = plugin.into();
                // kos-csi's arguments in place of cinder-csi-plugin's; the rest must be there.
                let args = c["args"].as_array_mut().expect("args");
                assert_eq!(args[0], "/bin/cinder-csi-plugin");
                args[0] = "/bin/kos-csi".into();
                for e in c["env"].as_array_mut().into_iter().flatten() {
                    if e["name"] == "CLUSTER_NAME" {
                        e["value"] = "kubernetes".into();
                    }
                }
            }
        }
    }
    let diffs = same_objects(
        &chart,
        &kos,
        &[
            ("csi-cinder-controllerplugin", "kos-csi-controllerplugin"),
            ("csi-cinder-nodeplugin", "kos-csi-nodeplugin"),
        ],
    );
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert_eq!(chart.len(), kos.len(), "kos's objects, no more");
}

// ---------------------------------------------------------------------------------------------
// Images: kos's pins

fn chart_yaml(chart: &str) -> Value {
    let text = std::fs::read_to_string(root().join("charts").join(chart).join("Chart.yaml"))
        .expect("Chart.yaml");
    serde_saphyr::from_str(&text).expect("Chart.yaml is YAML")
}

fn images(objects: &[Value]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for o in objects {
        for c in o["spec"]["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            out.insert(
                format!(
                    "{}/{}",
                    o["metadata"]["name"].as_str().unwrap_or_default(),
                    c["name"].as_str().unwrap_or_default()
                ),
                c["image"].as_str().unwrap_or_default().to_owned(),
            );
        }
    }
    out
}

#[test]
fn default_images_are_the_versions_kos_pins() {
    // kos-ccm and kos-csi are built from this workspace: their images carry its version
    // (scripts/image labels them with it), which is each chart's appVersion and default tag.
    let version = env!("CARGO_PKG_VERSION");
    for chart in ["kos-ccm", "kos-csi"] {
        assert_eq!(
            chart_yaml(chart)["appVersion"],
            version,
            "{chart}'s appVersion"
        );
    }
    let ccm = images(&render("kos-ccm", CCM_MINIMAL).ok().objects());
    assert_eq!(
        ccm.values().collect::<Vec<_>>(),
        [&format!("registry.example.com/kos/kos-ccm:{version}")]
    );
    // The sidecars: pins.yaml's `images`, which kos's cinder-csi manifest runs.
    let pins: Value = serde_saphyr::from_str(PINS).expect("pins.yaml");
    let pin = |k: &str| pins["images"][k].as_str().expect("a pin").to_owned();
    let csi = images(&render("kos-csi", CSI_MINIMAL).ok().objects());
    let plugin = format!("registry.example.com/kos/kos-csi:{version}");
    let want: BTreeMap<String, String> = [
        ("kos-csi-controllerplugin/csi-attacher", pin("csi_attacher")),
        (
            "kos-csi-controllerplugin/csi-provisioner",
            pin("csi_provisioner"),
        ),
        ("kos-csi-controllerplugin/csi-resizer", pin("csi_resizer")),
        (
            "kos-csi-controllerplugin/csi-snapshotter",
            pin("csi_snapshotter"),
        ),
        (
            "kos-csi-controllerplugin/liveness-probe",
            pin("livenessprobe"),
        ),
        ("kos-csi-controllerplugin/cinder-csi-plugin", plugin.clone()),
        (
            "kos-csi-nodeplugin/node-driver-registrar",
            pin("csi_node_driver_registrar"),
        ),
        ("kos-csi-nodeplugin/liveness-probe", pin("livenessprobe")),
        ("kos-csi-nodeplugin/cinder-csi-plugin", plugin),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(csi, want);
}

// ---------------------------------------------------------------------------------------------
// The binaries accept what the charts run

/// A container's argv (`command` then `args`) with `$(VAR)` expanded from its env, as the kubelet does.
fn argv(container: &Value) -> Vec<String> {
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    strs(&container["command"])
        .into_iter()
        .chain(strs(&container["args"]))
        .map(|a| {
            env.iter()
                .fold(a, |acc, (k, v)| acc.replace(&format!("$({k})"), v))
        })
        .collect()
}

fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

#[derive(Parser)]
struct CcmCli {
    #[command(flatten)]
    run: kos_ccm::options::RunArgs,
}

#[derive(Parser)]
struct CsiCli {
    #[command(flatten)]
    opts: kos_csi::run::Options,
}

fn ccm_options(objects: &[Value]) -> kos_ccm::options::Options {
    let ds = objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("the DaemonSet");
    let argv = argv(container(ds, "kos-ccm"));
    assert_eq!(argv[0], "/bin/kos-ccm", "{argv:?}");
    let cli = CcmCli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    cli.run.check().unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

fn csi_options(workload: &Value) -> kos_csi::run::Options {
    let argv = argv(container(workload, "cinder-csi-plugin"));
    // The image has no entrypoint: the first argument is the binary (kos-csi drops a second path).
    assert_eq!(argv[0], "/bin/kos-csi", "{argv:?}");
    let cli = CsiCli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    cli.opts.check().unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    cli.opts
}

#[test]
fn kos_ccm_accepts_the_arguments_the_chart_gives_it() {
    let minimal = ccm_options(&render("kos-ccm", CCM_MINIMAL).ok().objects());
    assert_eq!(minimal.cluster_name, "kubernetes");
    assert_eq!(minimal.cloud_config, Path::new("/etc/config/cloud.conf"));
    assert_eq!(
        minimal.controllers.len(),
        kos_ccm::options::Controller::ALL.len()
    );
    let lease = minimal
        .leader_election
        .expect("one per control plane: elects");
    assert_eq!(lease.namespace, "kube-system");
    // The probe asks where kos-ccm serves.
    let objects = render("kos-ccm", CCM_MINIMAL).ok().objects();
    let probe =
        &container(find(&objects, "DaemonSet", "kos-ccm"), "kos-ccm")["livenessProbe"]["httpGet"];
    let served = minimal.serve_on.expect("serves /healthz");
    assert_eq!(probe["host"], served.ip().to_string());
    assert_eq!(probe["port"], served.port());

    let realistic = ccm_options(&render("kos-ccm", &ccm_realistic()).ok().objects());
    assert_eq!(realistic.cluster_name, "prod-eu");
    // In another namespace, kos-ccm's Lease follows its Role there.
    let other = ccm_options(
        &render_in("kos-ccm", CCM_MINIMAL, "kos-system")
            .ok()
            .objects(),
    );
    assert_eq!(
        other.leader_election.expect("elects").namespace,
        "kos-system"
    );
}

#[test]
fn every_render_gives_the_binaries_arguments_they_accept() {
    for (name, chart, values, ns) in renders() {
        let objects = render_in(chart, &values, ns).ok().objects();
        let workloads: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "DaemonSet" || o["kind"] == "Deployment")
            .collect();
        if chart == "kos-ccm" {
            assert_eq!(workloads.len(), 1, "{name}");
            ccm_options(&objects);
        } else {
            assert_eq!(workloads.len(), 2, "{name}");
            workloads.iter().for_each(|w| {
                csi_options(w);
            });
        }
    }
}

#[test]
fn kos_csi_accepts_the_arguments_the_chart_gives_it() {
    let objects = render("kos-csi", CSI_MINIMAL).ok().objects();
    let ctl = csi_options(find(&objects, "Deployment", "kos-csi-controllerplugin"));
    assert!(ctl.provide_controller_service && !ctl.provide_node_service);
    assert_eq!(ctl.cluster, "kubernetes");
    assert_eq!(ctl.cloud_config, [PathBuf::from("/etc/config/cloud.conf")]);
    let node = csi_options(find(&objects, "DaemonSet", "kos-csi-nodeplugin"));
    assert!(node.provide_node_service && !node.provide_controller_service);
    assert_eq!(node.kubelet_dir, Path::new("/var/lib/kubelet"));

    let objects = render("kos-csi", &csi_realistic()).ok().objects();
    let ctl = csi_options(find(&objects, "Deployment", "kos-csi-controllerplugin"));
    assert_eq!(ctl.cluster, "prod-eu");
    assert_eq!(ctl.http_endpoint, ":8081");
    assert_eq!(ctl.verbosity, 2);
    let node = csi_options(find(&objects, "DaemonSet", "kos-csi-nodeplugin"));
    // The kubelet's directory: where the node plugin may act, and what it mounts.
    assert_eq!(node.kubelet_dir, Path::new("/var/lib/k0s/kubelet"));
    let ds = find(&objects, "DaemonSet", "kos-csi-nodeplugin");
    let mounts = &container(ds, "cinder-csi-plugin")["volumeMounts"];
    assert!(
        mounts
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["mountPath"] == "/var/lib/k0s/kubelet"),
        "{mounts}"
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets

/// The Secret's files, decoded.
fn secret_files(secret: &Value) -> BTreeMap<String, String> {
    secret["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or_default())
                .expect("base64");
            (k.clone(), String::from_utf8(bytes).expect("UTF-8"))
        })
        .collect()
}

/// The canary is in the Secret named `secret` only: no other object (ConfigMaps, annotations
/// included) and not NOTES.txt.
fn only_in_the_secret(r: &Render, secret: &str, canary: &str) {
    let objects = r.objects();
    assert!(
        !objects.iter().any(|o| o["kind"] == "ConfigMap"),
        "the charts make no ConfigMap"
    );
    let mut holders = Vec::new();
    for o in &objects {
        let text = if o["kind"] == "Secret" {
            secret_files(o).into_values().collect::<Vec<_>>().join("\n")
        } else {
            o.to_string()
        };
        if text.contains(canary) || o.to_string().contains(canary) {
            holders.push(format!("{} {}", o["kind"], o["metadata"]["name"]));
        }
    }
    assert_eq!(holders, [format!("\"Secret\" \"{secret}\"")]);
    assert!(!r.notes().is_empty(), "NOTES.txt is rendered");
    assert!(!r.notes().contains(canary), "NOTES.txt shows the secret");
}

#[test]
fn the_cloud_conf_is_in_a_secret_only_and_reaches_kos_ccm_intact() {
    let r = render("kos-ccm", &ccm_realistic()).ok();
    only_in_the_secret(&r, "cloud-config", CANARY_MARK);
    let objects = r.objects();
    let files = secret_files(find(&objects, "Secret", "cloud-config"));
    let conf = &files["cloud.conf"];
    // kos-ccm's own reader: every key known, the secret with its `;`, `#`, quote and backslash.
    let loaded = kos_ccm::config::CloudConfig::parse("cloud.conf", conf)
        .unwrap_or_else(|e| panic!("kos-ccm refuses the chart's cloud.conf: {e}"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = &loaded.config;
    assert_eq!(
        c.global.auth_url.as_deref(),
        Some("https://keystone.example.com:5000/v3")
    );
    assert_eq!(
        c.global.application_credential_id.as_deref(),
        Some("4f1c0e8a9b7d4c2e")
    );
    assert!(c.load_balancer.create_monitor);
    assert!(c.block_storage.ignore_volume_az);
    let doc = kos_ccm::config::gcfg::parse("cloud.conf", conf).expect("gcfg");
    let secret = doc
        .sections
        .iter()
        .flat_map(|s| &s.entries)
        .find(|e| e.name == "application-credential-secret")
        .and_then(|e| e.value.clone());
    assert_eq!(secret.as_deref(), Some(CANARY));

    let r = render("kos-csi", &csi_realistic()).ok();
    only_in_the_secret(&r, "cinder-csi-cloud-config", CSI_CANARY);
    let objects = r.objects();
    let files = secret_files(find(&objects, "Secret", "cinder-csi-cloud-config"));
    let loaded = kos_ccm::config::CloudConfig::parse("cloud.conf", &files["cloud.conf"])
        .unwrap_or_else(|e| panic!("kos-csi refuses the chart's cloud.conf: {e}"));
    assert_eq!(
        loaded.config.block_storage.node_volume_attach_limit,
        Some(16)
    );
    assert!(loaded.config.block_storage.rescan_on_resize);
    // Both plugins mount that Secret.
    for (kind, name) in [
        ("Deployment", "kos-csi-controllerplugin"),
        ("DaemonSet", "kos-csi-nodeplugin"),
    ] {
        let vols = &find(&objects, kind, name)["spec"]["template"]["spec"]["volumes"];
        assert!(
            vols.as_array()
                .into_iter()
                .flatten()
                .any(|v| v["secret"]["secretName"] == "cinder-csi-cloud-config"),
            "{name}: {vols}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// StorageClasses

#[test]
fn storage_classes_carry_cinder_type_and_zone() {
    let objects = render("kos-csi", &csi_realistic()).ok().objects();
    let classes: BTreeMap<String, &Value> = objects
        .iter()
        .filter(|o| o["kind"] == "StorageClass")
        .map(|o| {
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                o,
            )
        })
        .collect();
    assert_eq!(
        classes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["csi-cinder-sc-delete", "csi-cinder-sc-retain", "ssd-az1"]
    );
    for sc in classes.values() {
        assert_eq!(sc["provisioner"], "cinder.csi.openstack.org");
        assert_eq!(sc["volumeBindingMode"], "WaitForFirstConsumer");
    }
    let default = |n: &str| {
        classes[n]["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"]
            == "true"
    };
    assert!(
        !default("csi-cinder-sc-delete") && default("csi-cinder-sc-retain") && !default("ssd-az1")
    );
    assert_eq!(
        classes["csi-cinder-sc-delete"]["parameters"]["type"],
        "standard"
    );
    assert_eq!(classes["csi-cinder-sc-retain"]["reclaimPolicy"], "Retain");
    let ssd = classes["ssd-az1"];
    assert_eq!(ssd["parameters"]["type"], "ssd");
    assert_eq!(ssd["parameters"]["availability"], "az1");
    assert_eq!(ssd["parameters"]["csi.storage.k8s.io/fstype"], "xfs");
    assert_eq!(ssd["allowVolumeExpansion"], false);
}

// ---------------------------------------------------------------------------------------------
// Snapshots

#[test]
fn the_snapshot_class_follows_its_values_and_the_crds_stay_the_clusters() {
    let objects = render("kos-csi", &csi_realistic()).ok().objects();
    let class = find(&objects, "VolumeSnapshotClass", "csi-cinder-snapclass");
    assert_eq!(class["driver"], "cinder.csi.openstack.org");
    assert_eq!(class["deletionPolicy"], "Retain");
    assert_eq!(class["parameters"]["force-create"], "true");
    assert!(
        class["metadata"]["annotations"].is_null(),
        "not the default class: {class}"
    );
    // Switched off: no class, the sidecar and its RBAC stay (as kos runs them).
    let off = render(
        "kos-csi",
        &format!("{CSI_MINIMAL}volumeSnapshotClass:\n  enabled: false\n"),
    )
    .ok()
    .objects();
    assert!(!off.iter().any(|o| o["kind"] == "VolumeSnapshotClass"));
    container(
        find(&off, "Deployment", "kos-csi-controllerplugin"),
        "csi-snapshotter",
    );
    find(&off, "ClusterRoleBinding", "csi-snapshotter-binding");
    // The CRDs and the snapshot-controller are the cluster's, as with upstream's chart: in no render.
    for (name, chart, values, ns) in renders() {
        for o in render_in(chart, &values, ns).ok().objects() {
            assert_ne!(o["kind"], "CustomResourceDefinition", "{name}");
            let n = o["metadata"]["name"].as_str().unwrap_or_default();
            assert!(!n.contains("snapshot-controller"), "{name}: {o}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The documentation's examples

/// The ```yaml blocks of a Markdown file.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    markdown
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(y, _)| y.to_owned()))
        .collect()
}

#[test]
fn the_values_the_docs_show_render() {
    for (doc, chart) in [
        ("docs/install-helm.md", "kos-ccm"),
        ("charts/kos-ccm/README.md", "kos-ccm"),
        ("charts/kos-csi/README.md", "kos-csi"),
    ] {
        let text = std::fs::read_to_string(root().join(doc)).expect("doc");
        let blocks = yaml_blocks(&text);
        assert_eq!(blocks.len(), 1, "{doc}: one values example");
        let r = render(chart, &blocks[0]);
        if let Some(e) = r.error {
            panic!("{doc}'s example does not render: {e}");
        }
        assert!(
            r.lint_problems().is_empty(),
            "{doc}: {:?}",
            r.lint_problems()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The standalone manifests (manifests/, for `kubectl apply -f`)

/// What scripts/manifests writes, and the tests read as committed.
const STANDALONE: [&str; 3] = ["kos-ccm.yaml", "kos-csi-snapshotclass.yaml", "kos-csi.yaml"];
/// The registry the manifests name, which the user replaces.
const PLACEHOLDER: &str = "your-registry.invalid/";

fn committed(name: &str) -> String {
    std::fs::read_to_string(root().join("manifests").join(name))
        .unwrap_or_else(|e| panic!("manifests/{name}: {e}"))
}

fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The first line where two texts differ, for a message that says where.
fn first_difference(a: &str, b: &str) -> Option<(usize, String, String)> {
    let (mut la, mut lb) = (a.lines(), b.lines());
    for n in 1.. {
        match (la.next(), lb.next()) {
            (None, None) => return None,
            (x, y) if x != y => {
                return Some((
                    n,
                    x.unwrap_or("<end>").to_owned(),
                    y.unwrap_or("<end>").to_owned(),
                ));
            }
            _ => {}
        }
    }
    None
}

#[test]
fn the_committed_manifests_are_a_fresh_render_of_the_charts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(python())
        .arg(root().join("scripts/manifests.py"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "scripts/manifests: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, STANDALONE);
    // A difference in any byte, comments included, fails: the files say they are generated.
    for name in STANDALONE {
        let fresh = std::fs::read_to_string(dir.path().join(name)).expect("read");
        let old = committed(name);
        assert!(
            old == fresh,
            "manifests/{name} is not what scripts/manifests renders from the charts now (run it and \
             commit the result); first difference, line {:?}",
            first_difference(&old, &fresh)
        );
    }
}

#[test]
fn the_standalone_manifests_validate_strictly_for_each_supported_minor() {
    let files: Vec<PathBuf> = ["kos-ccm.yaml", "kos-csi.yaml"]
        .iter()
        .map(|n| root().join("manifests").join(n))
        .collect();
    for minor in supported_minors() {
        let (ok, said) = validate(&files, minor);
        assert!(ok, "1.{minor}: {said}");
    }
    // The custom resource, apart: its kind exists only once the CRDs are installed.
    let classes = documents(&committed("kos-csi-snapshotclass.yaml"));
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0]["kind"], "VolumeSnapshotClass");
    let (ok, said) = validate_snapshot_class(&classes[0]);
    assert!(ok, "{said}");
    for name in ["kos-ccm.yaml", "kos-csi.yaml"] {
        assert!(
            !documents(&committed(name))
                .iter()
                .any(|o| o["kind"] == "VolumeSnapshotClass"
                    || o["kind"] == "CustomResourceDefinition"),
            "{name}"
        );
    }
}

/// Every container image of a set of objects (init containers included).
fn container_images(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .flat_map(|o| {
            let spec = &o["spec"]["template"]["spec"];
            ["containers", "initContainers"]
                .into_iter()
                .flat_map(move |k| spec[k].as_array().into_iter().flatten())
        })
        .filter_map(|c| c["image"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_standalone_manifests_hold_no_secret_and_name_the_image_to_set() {
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("charts/kos-ccm/Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("YAML");
    let version = chart["appVersion"].as_str().expect("appVersion");
    let pins: Value = serde_saphyr::from_str(PINS).expect("pins.yaml");
    let pinned: BTreeSet<String> = pins["images"]
        .as_object()
        .expect("images")
        .values()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let ccm = documents(&committed("kos-ccm.yaml"));
    let csi = documents(&committed("kos-csi.yaml"));
    for (name, objects, own) in [("kos-ccm", &ccm, "kos-ccm"), ("kos-csi", &csi, "kos-csi")] {
        // The credentials are the user's Secret, made beside the manifests, never in them.
        assert!(
            !objects.iter().any(|o| o["kind"] == "Secret"),
            "{name} makes a Secret"
        );
        let (placeholders, others): (BTreeSet<String>, BTreeSet<String>) =
            container_images(objects)
                .into_iter()
                .partition(|i| i.starts_with(PLACEHOLDER));
        assert_eq!(
            placeholders,
            BTreeSet::from([format!("{PLACEHOLDER}{own}:{version}")]),
            "{name}"
        );
        let unpinned: Vec<&String> = others.difference(&pinned).collect();
        assert!(unpinned.is_empty(), "{name}: not kos's pins: {unpinned:?}");
    }
    // The binaries accept what the manifests run (kos-ccm reads kube-system/cloud-config).
    let ccm_opts = ccm_options(&ccm);
    assert_eq!(ccm_opts.cloud_config, Path::new("/etc/config/cloud.conf"));
    let ds = find(&ccm, "DaemonSet", "kos-ccm");
    assert!(
        ds["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["secret"]["secretName"] == "cloud-config"),
        "{ds}"
    );
    let ctl = csi_options(find(&csi, "Deployment", "kos-csi-controllerplugin"));
    assert!(ctl.provide_controller_service);
    let node = csi_options(find(&csi, "DaemonSet", "kos-csi-nodeplugin"));
    assert!(node.provide_node_service);
}
