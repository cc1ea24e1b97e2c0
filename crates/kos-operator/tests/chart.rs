//! The kos-operator Helm chart (charts/kos-operator), linted and rendered offline by Helm 4's own
//! Go code (helm-python-sdk, through `scripts/helm-render.py`): with its default values it renders
//! exactly what `kos-operator manifests` prints (but the Namespace, which `helm install
//! --create-namespace` makes), so its RBAC is the table's (`kos_operator::rbac`, which
//! tests/manifests.rs holds the manifests to) and its CRD the binary's; its values set the flags
//! the binary takes; every object it renders is valid for each supported minor
//! (`kubernetes-validate`, strict).

mod support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

/// The workspace of the checkout under test: the package's directory as cargo gives it when the
/// test runs (the one compiled in may be another checkout's, sharing the target directory).
fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../..")
}
const REPOSITORY: &str = "registry.example/kos/kos-operator";

/// `KOS_HELM_PYTHON`, then the venv scripts/test installs helm-python-sdk into; it must import it.
fn helm_python() -> PathBuf {
    let p = std::env::var_os("KOS_HELM_PYTHON").map_or_else(
        || {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/kos/venv/bin/python")
        },
        PathBuf::from,
    );
    let imports = Command::new(&p)
        .args(["-c", "import helm_python"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        imports,
        "helm-python-sdk is required by this test and {} cannot import it: run scripts/test (it \
         installs it into ~/.cache/kos/venv), or `pip install helm-python-sdk==0.2.2` and point \
         KOS_HELM_PYTHON at that Python",
        p.display()
    );
    p
}

/// Helm's lint and render of the chart with `values` (YAML), released as `kos-operator` in
/// `kos-system`: the JSON helm-render.py prints.
fn helm(values: &str) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).expect("values file");
    let out = Command::new(helm_python())
        .arg(root().join("scripts/helm-render.py"))
        .arg(root().join("charts/kos-operator"))
        .arg("--values")
        .arg(&file)
        .args(["--name", "kos-operator", "--namespace", "kos-system"])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "helm-render.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("helm-render.py prints JSON")
}

/// The objects a render made (NOTES.txt and empty documents left out), and its lint findings of
/// warning or error severity.
fn rendered(values: &str) -> (Vec<Value>, Vec<String>) {
    let v = helm(values);
    if let Some(e) = v["error"].as_str() {
        panic!("the chart did not render: {e}");
    }
    let mut lint: Vec<String> = v["lint"]["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["severity"].as_u64().unwrap_or(3) >= 2)
        .map(Value::to_string)
        .collect();
    lint.extend(
        v["lint"]["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(Value::to_string),
    );
    let objects = v["manifests"]
        .as_object()
        .expect("manifests")
        .iter()
        .filter(|(k, _)| !k.ends_with("NOTES.txt"))
        .flat_map(|(k, text)| {
            serde_saphyr::from_multiple::<Value>(text.as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{k} is not YAML: {e}"))
        })
        .filter(|d| !d.is_null())
        .collect();
    (objects, lint)
}

fn chart_version() -> String {
    let text =
        std::fs::read_to_string(root().join("charts/kos-operator/Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml is YAML");
    chart["appVersion"].as_str().expect("appVersion").to_owned()
}

/// An object without what only labels it (Helm's labels, the selectors built from them): what is
/// left must be the same in the chart's render and in `kos-operator manifests`.
fn unlabelled(mut o: Value) -> Value {
    if let Some(m) = o["metadata"].as_object_mut() {
        m.remove("labels");
        m.remove("annotations");
    }
    if o["kind"] == "Deployment" {
        let spec = o["spec"].as_object_mut().expect("spec");
        spec.remove("selector");
        spec["template"]
            .as_object_mut()
            .expect("template")
            .remove("metadata");
        let term = &mut spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            [0]["podAffinityTerm"];
        term.as_object_mut()
            .expect("the replicas spread")
            .remove("labelSelector");
    }
    numbers_as_floats(&mut o);
    o
}

/// JSON numbers as floats: the CRD's bounds are floats in k8s-openapi's types (`2048.0`), and
/// Helm's YAML round trip of the CRD file writes them as integers (`2048`), the same number to
/// the API server.
fn numbers_as_floats(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().and_then(serde_json::Number::from_f64) {
                *n = f;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(numbers_as_floats),
        Value::Object(map) => map.values_mut().for_each(numbers_as_floats),
        _ => {}
    }
}

fn key(o: &Value) -> String {
    format!("{} {}", o["kind"], o["metadata"]["name"])
}

#[test]
fn with_its_defaults_the_chart_renders_what_kos_operator_manifests_prints() {
    // The image's tag is the chart's appVersion, the workspace's version (scripts/image labels
    // the image with it).
    assert_eq!(chart_version(), env!("CARGO_PKG_VERSION"), "appVersion");
    // The CRD the chart carries is the binary's (its rules follow kos's pins).
    let crd_file =
        std::fs::read_to_string(root().join("charts/kos-operator/files/clusters.kos.dev.yaml"))
            .expect("the chart's CRD");
    assert!(
        crd_file == kos_operator::resource::crd_yaml().expect("crd"),
        "charts/kos-operator/files/clusters.kos.dev.yaml differs from the binary's CRD: run \
         `cargo run -p kos-operator -- crd > charts/kos-operator/files/clusters.kos.dev.yaml`"
    );
    let (chart, lint) = rendered(&format!("image:\n  repository: {REPOSITORY}\n"));
    assert!(lint.is_empty(), "helm lint: {lint:#?}");
    let image = format!("{REPOSITORY}:{}", chart_version());
    let mut want: Vec<Value> = kos_operator::manifests::objects(&image)
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .map(unlabelled)
        .collect();
    // Kept on uninstall: deleting the CRD would delete every Cluster, and their finalizers would
    // tear the clusters down.
    let crd = chart
        .iter()
        .find(|o| o["kind"] == "CustomResourceDefinition")
        .expect("the CRD");
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
        "{crd:#}"
    );
    let mut got: Vec<Value> = chart.into_iter().map(unlabelled).collect();
    want.sort_by_key(key);
    got.sort_by_key(key);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g == w,
            "{} differs:\nchart: {g:#}\nkos-operator manifests: {w:#}",
            key(w)
        );
    }
}

#[test]
fn values_set_the_binarys_flags_placement_and_the_crd() {
    let values = format!(
        r#"
image:
  repository: {REPOSITORY}
  tag: "0.1.0-rc1"
imagePullSecrets: [{{name: pull}}]
replicas: 3
crds:
  install: false
leaderElection:
  leaseDuration: 30
  renewMargin: 10
  retryPeriod: 4
maxRunsPerProject: 16
resyncPeriod: 300
retryPeriod: 30
extraArgs: ["--leader-elect-namespace=kos-system"]
extraEnv: [{{name: HTTPS_PROXY, value: "http://proxy.example:3128"}}]
nodeSelector: {{node-role.kubernetes.io/control-plane: ""}}
tolerations: [{{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}}]
priorityClassName: system-cluster-critical
podAnnotations: {{example.com/team: platform}}
"#
    );
    let (objects, lint) = rendered(&values);
    assert!(lint.is_empty(), "helm lint: {lint:#?}");
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "CustomResourceDefinition"),
        "crds.install=false"
    );
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(container["image"], format!("{REPOSITORY}:0.1.0-rc1"));
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "pull"}]));
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"],
        ""
    );
    assert_eq!(pod["tolerations"][0]["effect"], "NoSchedule");
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["annotations"]["example.com/team"],
        "platform"
    );
    assert_eq!(container["env"][2]["name"], "HTTPS_PROXY");
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    for want in [
        "--leader-elect-lease-duration=30",
        "--leader-elect-renew-margin=10",
        "--leader-elect-retry-period=4",
        "--max-runs-per-project=16",
        "--resync-period=300",
        "--retry-period=30",
        "--leader-elect-namespace=kos-system",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    // The binary takes every flag: it gets past its arguments and stops at the kubeconfig it is
    // given, which does not exist (clap refuses an unknown flag with exit code 2 before that).
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .args(&args)
        .arg("--kubeconfig")
        .arg(&missing)
        .output()
        .expect("run kos-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && out.status.code() != Some(2) && stderr.contains("--kubeconfig"),
        "{:?}: {stderr}",
        out.status
    );
}

#[test]
fn without_an_image_repository_the_chart_is_refused_naming_it() {
    let v = helm("{}\n");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("image.repository is required"), "{v:#}");
}

#[test]
fn every_object_the_chart_renders_is_valid_for_each_supported_minor() {
    let (objects, _) = rendered(&format!(
        "image:\n  repository: {REPOSITORY}\nextraEnv: [{{name: NO_PROXY, value: .svc}}]\n"
    ));
    support::validate_for_each_minor(&objects);
}

/// `autoscaler.enabled` serves cluster-autoscaler's externalgrpc: the binary's flags, its port, the
/// TLS Secret mounted read-only, and a Service of it; all of it valid for each minor and taken by
/// the binary. Off (the default), none of it.
#[test]
fn the_autoscaler_endpoint_is_served_and_exposed_when_enabled() {
    let values = format!(
        r#"
image:
  repository: {REPOSITORY}
autoscaler:
  enabled: true
  advertiseAddress: kos.example.net:8443
  service: {{type: LoadBalancer}}
"#
    );
    let (objects, lint) = rendered(&values);
    assert!(lint.is_empty(), "helm lint: {lint:#?}");
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    for want in [
        "--autoscaler-bind-address=:8443",
        "--autoscaler-tls-dir=/etc/kos-operator/autoscaler-tls",
        "--autoscaler-advertise-address=kos.example.net:8443",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "autoscaler-tls")
        .expect("the TLS mount");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "autoscaler-tls")
        .expect("the TLS volume");
    assert_eq!(
        volume["secret"]["secretName"],
        "kos-operator-autoscaler-tls"
    );
    let service = objects
        .iter()
        .find(|o| o["kind"] == "Service")
        .expect("Service");
    assert_eq!(service["spec"]["type"], "LoadBalancer");
    assert_eq!(service["spec"]["ports"][0]["port"], 8443);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "autoscaler");
    support::validate_for_each_minor(&objects);
    // The binary takes the flags (it stops at the kubeconfig, which does not exist).
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_kos-operator"))
        .args(&args)
        .arg("--kubeconfig")
        .arg(dir.path().join("no-kubeconfig"))
        .output()
        .expect("run kos-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() != Some(2) && stderr.contains("--kubeconfig"),
        "{:?}: {stderr}",
        out.status
    );
    let (plain, _) = rendered(&format!("image:\n  repository: {REPOSITORY}\n"));
    assert!(!plain.iter().any(|o| o["kind"] == "Service"));
}
