//! kubectl, a client kos did not write, against the fake: what an operator does first on a new
//! cluster (`get nodes -o wide`, `get pods -A`, `describe node`, `apply -f` of the addon manifests
//! kos applies, CRDs and their custom resources, `create deployment`, `expose
//! --type=LoadBalancer`, `get svc -w`, `delete`) answered as kube-apiserver answers it.
//!
//! kubectl is `KOS_KUBECTL`, else `/usr/bin/kubectl`, else the first on `PATH`; without one the
//! tests fail and say how to install it. Each test runs kubectl with its own `HOME` (discovery
//! cache) and a kubeconfig for the fake's plain-HTTP address.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, Service};
use kos_kube_fake::FakeKube;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{Instant, timeout};

type R = Result<(), Box<dyn std::error::Error>>;

const DEADLINE: Duration = Duration::from_secs(60);

/// The kubectl to test with, or a failure that says how to get one.
fn kubectl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KOS_KUBECTL") {
        return PathBuf::from(p);
    }
    let usr = Path::new("/usr/bin/kubectl");
    if usr.exists() {
        return usr.to_owned();
    }
    if let Some(p) = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
    {
        return p;
    }
    panic!(
        "kubectl not found (KOS_KUBECTL, /usr/bin/kubectl, PATH): these tests run the real kubectl \
         against the fake. Install Debian's `kubernetes-client` (`apt-get install \
         kubernetes-client`, as .ci/run does) or set KOS_KUBECTL to a kubectl binary"
    );
}

/// kubectl pointed at one fake, with a home of its own.
struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
}

/// What one kubectl run printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    /// The client's minor version (`kubectl version --client`).
    async fn minor(&self) -> u32 {
        let v: Value = serde_json::from_str(&self.ok(&["version", "--client", "-o", "json"]).await)
            .expect("kubectl version -o json");
        v.pointer("/clientVersion/minor")
            .and_then(Value::as_str)
            .map(|m| m.trim_end_matches('+'))
            .and_then(|m| m.parse().ok())
            .expect("a minor version")
    }

    fn new(fake: &FakeKube) -> Kubectl {
        let home = tempfile::tempdir().expect("temp dir");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: admin\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n\
             current-context: fake\n",
            fake.url()
        );
        std::fs::write(home.path().join("kubeconfig"), config).expect("kubeconfig");
        Kubectl {
            bin: kubectl_binary(),
            home,
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("KUBECONFIG", self.home.path().join("kubeconfig"))
            .current_dir(self.home.path())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> Run {
        let out = timeout(DEADLINE, self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs and expects success; the output.
    async fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args).await;
        assert!(r.ok, "kubectl {args:?} failed:\n{}\n{}", r.stdout, r.stderr);
        r.stdout
    }

    /// Runs and expects success; stderr (warnings).
    async fn ok_with_stderr(&self, args: &[&str]) -> String {
        let r = self.run(args).await;
        assert!(r.ok, "kubectl {args:?} failed:\n{}\n{}", r.stdout, r.stderr);
        r.stderr
    }

    /// Runs and expects failure; stdout and stderr.
    async fn fails(&self, args: &[&str]) -> Run {
        let r = self.run(args).await;
        assert!(!r.ok, "kubectl {args:?} succeeded:\n{}", r.stdout);
        r
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.home.path().join(name);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).expect("dir");
        }
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    }
}

/// The row of a `kubectl get` table whose first cell (or second, with a NAMESPACE column) is
/// `name`, split into cells.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name) || cells.get(1) == Some(&name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
}

fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture")
}

/// A Node as the kubelet registers and updates it (kos's kubelet flags: external cloud provider,
/// provider ID), with kubeadm's control-plane label and taint on control planes.
fn kubelet_node(name: &str, ip: &str, control_plane: bool) -> Node {
    let mut labels = json!({
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
    });
    let mut taints = vec![];
    if control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = json!("");
        taints
            .push(json!({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}));
    }
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    typed(json!({
        "metadata": {"name": name, "labels": labels, "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"providerID": format!("openstack:///{name}-uuid"), "podCIDR": "10.244.0.0/24",
                 "taints": taints},
        "status": {
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "2", "memory": "4026496Ki", "pods": "110", "ephemeral-storage": "20134592Ki"},
            "allocatable": {"cpu": "2", "memory": "3924096Ki", "pods": "110", "ephemeral-storage": "18556039957"},
            "nodeInfo": {"kubeletVersion": "v1.34.2", "kubeProxyVersion": "v1.34.2",
                         "osImage": "Ubuntu 24.04.3 LTS", "kernelVersion": "6.8.0-85-generic",
                         "containerRuntimeVersion": "containerd://1.7.28", "operatingSystem": "linux",
                         "architecture": "amd64", "machineID": "0f0e", "systemUUID": "5a2b", "bootID": "77c1"},
        },
    }))
}

/// A running kube-system pod on `node`.
fn system_pod(name: &str, node: &str, ip: &str, image: &str) -> Pod {
    typed(json!({
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"tier": "control-plane"}},
        "spec": {"nodeName": node, "containers": [{"name": name.split('-').next().unwrap_or(name), "image": image}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
                   "containerStatuses": [{"name": name.split('-').next().unwrap_or(name), "ready": true,
                       "restartCount": 0, "image": image, "imageID": "",
                       "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
    }))
}

/// A fake holding what a kubeadm cluster of one control plane and one worker has once its nodes
/// registered: namespaces, Nodes, their Leases, the control plane's static pods, kube-proxy and
/// CoreDNS, and the kubelet's `Starting` Event.
async fn cluster() -> Result<FakeKube, Box<dyn std::error::Error>> {
    let fake = FakeKube::start().await?;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        fake.insert::<Namespace>(&typed(json!({"metadata": {"name": ns}})))?;
    }
    for (name, ip, cp) in [
        ("demo-cp-0", "10.0.0.10", true),
        ("demo-w-0", "10.0.0.20", false),
    ] {
        fake.insert(&kubelet_node(name, ip, cp))?;
        fake.insert::<k8s_openapi::api::coordination::v1::Lease>(&typed(json!({
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"}
        })))?;
    }
    let cp = "demo-cp-0";
    for (component, image) in [
        ("etcd", "registry.k8s.io/etcd:3.6.4-0"),
        ("kube-apiserver", "registry.k8s.io/kube-apiserver:v1.34.2"),
        (
            "kube-controller-manager",
            "registry.k8s.io/kube-controller-manager:v1.34.2",
        ),
        ("kube-scheduler", "registry.k8s.io/kube-scheduler:v1.34.2"),
    ] {
        fake.insert(&system_pod(
            &format!("{component}-{cp}"),
            cp,
            "10.0.0.10",
            image,
        ))?;
    }
    fake.insert(&system_pod(
        "kube-proxy-x7k2p",
        "demo-w-0",
        "10.0.0.20",
        "registry.k8s.io/kube-proxy:v1.34.2",
    ))?;
    fake.insert(&system_pod(
        "coredns-66bc5c9577-4m2qz",
        "demo-w-0",
        "10.244.1.2",
        "registry.k8s.io/coredns/coredns:v1.12.1",
    ))?;
    // The kubelet names the node by name in its events' involvedObject.uid.
    fake.insert::<k8s_openapi::api::core::v1::Event>(&typed(json!({
        "metadata": {"name": "demo-cp-0.1879a", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": cp, "uid": cp},
        "reason": "Starting", "message": "Starting kubelet.", "type": "Normal",
        "source": {"component": "kubelet", "host": cp}, "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
    })))?;
    Ok(fake)
}

#[tokio::test]
async fn get_nodes_pods_and_describe_node_read_as_on_a_kubeadm_cluster() -> R {
    let fake = cluster().await?;
    let k = Kubectl::new(&fake);

    let nodes = k.ok(&["get", "nodes", "-o", "wide"]).await;
    assert_eq!(
        header(&nodes),
        [
            "NAME",
            "STATUS",
            "ROLES",
            "AGE",
            "VERSION",
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME"
        ]
    );
    let cp = row(&nodes, "demo-cp-0");
    assert_eq!(&cp[..3], ["demo-cp-0", "Ready", "control-plane"]);
    assert_eq!(&cp[4..6], ["v1.34.2", "10.0.0.10"]);
    assert_eq!(cp[6], "<none>");
    assert!(
        nodes.contains("Ubuntu 24.04.3 LTS") && nodes.contains("containerd://1.7.28"),
        "{nodes}"
    );
    assert_eq!(
        &row(&nodes, "demo-w-0")[..3],
        ["demo-w-0", "Ready", "<none>"]
    );
    // Without -o wide, the priority-1 columns are not shown.
    assert_eq!(
        header(&k.ok(&["get", "nodes"]).await),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    );

    let pods = k.ok(&["get", "pods", "-A"]).await;
    assert_eq!(
        header(&pods),
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(
        &row(&pods, "etcd-demo-cp-0")[..5],
        ["kube-system", "etcd-demo-cp-0", "1/1", "Running", "0"]
    );
    assert_eq!(pods.lines().count(), 7, "six pods and the header:\n{pods}");
    let wide = k
        .ok(&["get", "pods", "-n", "kube-system", "-o", "wide"])
        .await;
    assert_eq!(
        row(&wide, "coredns-66bc5c9577-4m2qz")[5..7],
        ["10.244.1.2", "demo-w-0"]
    );
    let none = k.run(&["get", "pods"]).await;
    assert!(
        none.ok
            && none
                .stderr
                .contains("No resources found in default namespace."),
        "{}",
        none.stderr
    );

    let d = k.ok(&["describe", "node", "demo-cp-0"]).await;
    for want in [
        "Roles:              control-plane",
        "Taints:             node-role.kubernetes.io/control-plane:NoSchedule",
        "HolderIdentity:  demo-cp-0",
        "ProviderID:                   openstack:///demo-cp-0-uuid",
        "Non-terminated Pods:          (4 in total)",
        "kube-system                 kube-apiserver-demo-cp-0",
        "Normal  Starting",
        "Starting kubelet.",
    ] {
        assert!(d.contains(want), "describe node lacks {want:?}:\n{d}");
    }
    Ok(())
}

/// The addon manifests kos applies on the first control plane, as kos-bootstrap renders them.
fn kos_addons() -> Vec<kos_bootstrap::Manifest> {
    use kos_bootstrap::*;
    let cluster = ClusterInput {
        name: "demo".into(),
        kubernetes_version: "1.34.2".parse().unwrap(),
        endpoint: ApiEndpoint {
            host: "203.0.113.10".into(),
            port: 6443,
        },
        cert_sans: vec!["203.0.113.10".into()],
        pod_cidr: "10.244.0.0/16".parse().unwrap(),
        service_cidr: "10.96.0.0/12".parse().unwrap(),
        cni: Cni::Calico,
        cni_manifest: None,
        ccm: Ccm::Upstream,
        csi: Csi::Cinder,
        cloud: CloudConf {
            auth_url: "https://keystone.example.com:5000/v3".into(),
            region: "RegionOne".into(),
            application_credential_id: "0b8f1c0e6a4d4f2b9e3c7a1d5f6e8b90".into(),
            application_credential_secret: secrecy::SecretString::from("not-a-real-secret"),
            floating_network_id: "6f1a7c7e-0b1e-4a55-9f53-2d1f0c3b9a11".into(),
            subnet_id: "c2d9e1f4-3a5b-4c6d-8e7f-9a0b1c2d3e4f".into(),
            lb_provider: None,
            ca_cert: None,
            csi_volume_zone: None,
        },
        pki_delivery: PkiDelivery::AllControlPlanes,
        expected_nodes: 2,
        server_tls_bootstrap: false,
        encryption: None,
        airgap: Default::default(),
    };
    render_addons(&cluster).expect("addons render")
}

#[tokio::test]
async fn apply_of_kos_addons_client_and_server_side_with_strict_field_validation() -> R {
    let fake = cluster().await?;
    let k = Kubectl::new(&fake);
    for m in kos_addons() {
        k.write(&format!("addons/{}", m.name), m.yaml.expose());
    }
    let dir = k.home.path().join("addons").display().to_string();

    let first = k.ok(&["apply", "-f", &dir]).await;
    for want in [
        "secret/cloud-config created",
        "daemonset.apps/openstack-cloud-controller-manager created",
        "clusterrole.rbac.authorization.k8s.io/system:cloud-controller-manager created",
        "deployment.apps/csi-cinder-controllerplugin created",
        "daemonset.apps/csi-cinder-nodeplugin created",
        "csidriver.storage.k8s.io/cinder.csi.openstack.org created",
        "storageclass.storage.k8s.io/csi-cinder-sc-delete created",
    ] {
        assert!(first.contains(want), "{want:?} not in\n{first}");
    }
    // Applying again changes nothing; the last-applied annotation is what kubectl diffs against.
    // Except the cloud-config Secret: its `stringData` is write-only (the server keeps only `data`),
    // so kubectl patches it every time and says `configured`, as against a real API server
    // (kubernetes/kubernetes#87736).
    let again = k.ok(&["apply", "-f", &dir]).await;
    let others: Vec<&str> = again
        .lines()
        .filter(|l| !l.starts_with("secret/cloud-config "))
        .collect();
    assert!(
        !again.contains("created")
            && !others.iter().any(|l| l.contains("configured"))
            && again.contains("secret/cloud-config configured"),
        "{again}"
    );
    assert!(
        again.contains("daemonset.apps/openstack-cloud-controller-manager unchanged"),
        "{again}"
    );
    let ds: Value = serde_json::from_str(
        &k.ok(&[
            "-n",
            "kube-system",
            "get",
            "ds",
            "openstack-cloud-controller-manager",
            "-o",
            "json",
        ])
        .await,
    )?;
    assert!(
        ds.pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
            .is_some()
    );
    // The server defaulted the template as kube-apiserver does.
    assert_eq!(
        ds.pointer("/spec/updateStrategy/type"),
        Some(&json!("RollingUpdate"))
    );
    assert_eq!(
        ds.pointer("/spec/template/spec/dnsPolicy"),
        Some(&json!("ClusterFirst"))
    );
    // The default StorageClass is printed as such.
    let sc = k.ok(&["get", "storageclass"]).await;
    assert_eq!(
        header(&sc),
        [
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE"
        ]
    );
    assert!(
        sc.contains("(default)") && sc.contains("cinder.csi.openstack.org"),
        "{sc}"
    );

    // A changed value is sent as a strategic merge patch: a ConfigMap's key, and a workload's
    // image, which is merged into its container by name, the container's other fields kept.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: kube-system\ndata:\n  mode: fast\n";
    let path = k.write("cm.yaml", cm);
    k.ok(&["apply", "-f", &path]).await;
    k.write("cm.yaml", &cm.replace("fast", "safe"));
    assert!(
        k.ok(&["apply", "-f", &path])
            .await
            .contains("configmap/settings configured")
    );
    assert_eq!(
        fake.get::<ConfigMap>(Some("kube-system"), "settings")?
            .and_then(|c| c.data)
            .and_then(|d| d.get("mode").cloned())
            .as_deref(),
        Some("safe")
    );
    let containers = |v: Value| v["spec"]["template"]["spec"]["containers"].clone();
    let before = containers(serde_json::to_value(
        fake.get::<Deployment>(Some("kube-system"), "csi-cinder-controllerplugin")?,
    )?);
    let csi = k.home.path().join("addons/20-cinder-csi.yaml");
    let text = std::fs::read_to_string(&csi)?;
    let (old, new) = (
        "sig-storage/csi-attacher:v4.10.0",
        "sig-storage/csi-attacher:v4.99.0",
    );
    assert!(
        text.contains(old),
        "the attacher pin moved: update this test"
    );
    std::fs::write(&csi, text.replace(old, new))?;
    let applied = k.ok(&["apply", "-f", &csi.display().to_string()]).await;
    assert!(
        applied.contains("deployment.apps/csi-cinder-controllerplugin configured"),
        "{applied}"
    );
    let after = containers(serde_json::to_value(
        fake.get::<Deployment>(Some("kube-system"), "csi-cinder-controllerplugin")?,
    )?);
    let mut want = before.clone();
    for c in want.as_array_mut().into_iter().flatten() {
        if c["image"].as_str().is_some_and(|i| i.ends_with(old)) {
            c["image"] = json!(format!("registry.k8s.io/{new}"));
        }
    }
    assert_ne!(before, want, "no container had the attacher image");
    assert_eq!(after, want);

    // Server-side apply of the same manifests, then a conflicting value from another manager.
    let ssa = k.ok(&["apply", "--server-side", "-f", &dir]).await;
    assert!(
        ssa.contains("daemonset.apps/openstack-cloud-controller-manager serverside-applied"),
        "{ssa}"
    );
    k.write("cm.yaml", &cm.replace("fast", "slow"));
    let conflict = k
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &path,
        ])
        .await;
    assert!(
        conflict.stderr.contains("Apply failed with 1 conflict")
            && conflict.stderr.contains(".data.mode"),
        "{}",
        conflict.stderr
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &path,
    ])
    .await;

    // From 1.27 on kubectl leaves validation to the server (fieldValidation=Strict), which refuses
    // unknown fields. An older kubectl sends no fieldValidation: the server's default, Warn,
    // stores the object without the field and says so (such a kubectl would have checked the
    // field itself against /openapi/v2, which the fake publishes without schemas).
    let typo = k.write(
        "typo.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: typo\nspec:\n  replica: 2\n  selector: {matchLabels: {app: typo}}\n  template:\n    metadata: {labels: {app: typo}}\n    spec: {containers: [{name: c, image: nginx}]}\n",
    );
    let warn_args: &[&str] = if k.minor().await >= 27 {
        let refused = k.fails(&["apply", "-f", &typo]).await;
        assert!(
            refused.stderr.contains(r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.replica""#),
            "{}",
            refused.stderr
        );
        assert!(fake.get::<Deployment>(Some("default"), "typo")?.is_none());
        &["apply", "--validate=warn", "-f", &typo]
    } else {
        &["apply", "-f", &typo]
    };
    let warned = k.run(warn_args).await;
    assert!(
        warned.ok
            && warned
                .stderr
                .contains(r#"Warning: unknown field "spec.replica""#),
        "{}",
        warned.stderr
    );
    let stored = serde_json::to_value(fake.get::<Deployment>(Some("default"), "typo")?)?;
    assert!(
        stored.pointer("/spec/replica").is_none()
            && stored.pointer("/spec/replicas") == Some(&json!(1))
    );
    Ok(())
}

const CRD_AND_CR: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ippools.crd.projectcalico.org
spec:
  group: crd.projectcalico.org
  names: {kind: IPPool, listKind: IPPoolList, plural: ippools, singular: ippool}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: CIDR, type: string, jsonPath: .spec.cidr}
    - {name: Block, type: integer, jsonPath: .spec.blockSize}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [cidr]
            properties:
              cidr: {type: string}
              blockSize: {type: integer}
              natOutgoing: {type: boolean}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
---
apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata:
  name: default-ipv4-ippool
spec:
  cidr: 10.244.0.0/16
  blockSize: 26
  natOutgoing: true
"#;

const NAMESPACED_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: networkpolicies.crd.projectcalico.org
spec:
  group: crd.projectcalico.org
  names: {kind: NetworkPolicy, listKind: NetworkPolicyList, plural: networkpolicies, singular: networkpolicy, shortNames: [cnp]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[tokio::test]
async fn crds_make_their_resources_served_and_a_cr_beside_its_crd_needs_a_second_apply() -> R {
    let fake = cluster().await?;
    let k = Kubectl::new(&fake);
    let file = k.write("ippool.yaml", CRD_AND_CR);

    // kubectl maps every object of the file before it creates any: the CR's kind is unknown then,
    // so the first apply creates the CRD and fails on the CR, as against a real server
    // (kubernetes/kubectl#1179); the second applies the CR.
    let first = k.fails(&["apply", "-f", &file]).await;
    assert!(
        first.stdout.contains(
            "customresourcedefinition.apiextensions.k8s.io/ippools.crd.projectcalico.org created"
        ),
        "{}",
        first.stdout
    );
    // (From 1.26 on kubectl adds "ensure CRDs are installed first".)
    assert!(
        first
            .stderr
            .contains(r#"no matches for kind "IPPool" in version "crd.projectcalico.org/v1""#),
        "{}",
        first.stderr
    );
    let second = k.ok(&["apply", "-f", &file]).await;
    assert!(
        second.contains("ippool.crd.projectcalico.org/default-ipv4-ippool created"),
        "{second}"
    );

    // Established at once, with the columns it declares.
    let crd = k
        .ok(&[
            "get",
            "crd",
            "ippools.crd.projectcalico.org",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ])
        .await;
    assert_eq!(crd, "True");
    let pools = k.ok(&["get", "ippools"]).await;
    assert_eq!(header(&pools), ["NAME", "CIDR", "BLOCK", "AGE"]);
    assert_eq!(
        &row(&pools, "default-ipv4-ippool")[..3],
        ["default-ipv4-ippool", "10.244.0.0/16", "26"]
    );
    assert_eq!(
        header(&k.ok(&["get", "crds"]).await),
        ["NAME", "CREATED", "AT"]
    );

    // The status subresource: the main resource does not change status, /status does.
    k.ok(&[
        "patch",
        "ippool",
        "default-ipv4-ippool",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":true}}"#,
    ])
    .await;
    assert!(
        !k.ok(&["get", "ippool", "default-ipv4-ippool", "-o", "json"])
            .await
            .contains("ready")
    );
    let status_patch = r#"{"status":{"ready":true}}"#;
    if k.minor().await >= 24 {
        k.ok(&[
            "patch",
            "ippool",
            "default-ipv4-ippool",
            "--subresource=status",
            "--type=merge",
            "-p",
            status_patch,
        ])
        .await;
    } else {
        // kubectl gained --subresource in 1.24: the controller's write, through kube-rs.
        let gvk = kube::api::GroupVersionKind::gvk("crd.projectcalico.org", "v1", "IPPool");
        let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "ippools");
        let pools: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(fake.client()?, &ar);
        let patch: Value = serde_json::from_str(status_patch)?;
        pools
            .patch_status(
                "default-ipv4-ippool",
                &Default::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await?;
    }
    assert!(
        k.ok(&["get", "ippool", "default-ipv4-ippool", "-o", "json"])
            .await
            .contains(r#""ready": true"#)
    );

    // The CRD's schema: unknown fields are refused, wrong types and missing required fields too.
    let bad = k.write("bad.yaml", "apiVersion: crd.projectcalico.org/v1\nkind: IPPool\nmetadata: {name: bad}\nspec: {cidr: 10.0.0.0/8, colour: red}\n");
    if k.minor().await >= 27 {
        let refused = k.fails(&["apply", "-f", &bad]).await;
        assert!(
            refused
                .stderr
                .contains(r#"strict decoding error: unknown field "spec.colour""#),
            "{}",
            refused.stderr
        );
    } else {
        let warned = k.ok_with_stderr(&["apply", "-f", &bad]).await;
        assert!(
            warned.contains(r#"Warning: unknown field "spec.colour""#),
            "{warned}"
        );
        k.ok(&["delete", "ippool", "bad"]).await;
    }
    let bad = k.write("bad.yaml", "apiVersion: crd.projectcalico.org/v1\nkind: IPPool\nmetadata: {name: bad}\nspec: {blockSize: big}\n");
    let invalid = k.fails(&["apply", "-f", &bad]).await;
    assert!(
        invalid.stderr.contains("spec.blockSize: Invalid value")
            && invalid.stderr.contains("spec.cidr: Required value"),
        "{}",
        invalid.stderr
    );

    // A namespaced custom resource, found by its short name; `get all` does not list it.
    let np = k.write("np.yaml", NAMESPACED_CRD);
    k.ok(&["apply", "-f", &np]).await;
    let cr = k.write("cr.yaml", "apiVersion: crd.projectcalico.org/v1\nkind: NetworkPolicy\nmetadata: {name: allow-dns, namespace: kube-system}\nspec: {order: 10}\n");
    k.ok(&["apply", "-f", &cr]).await;
    let cnp = k.ok(&["get", "cnp", "-A"]).await;
    assert_eq!(header(&cnp), ["NAMESPACE", "NAME", "AGE"]);
    assert_eq!(&row(&cnp, "allow-dns")[..2], ["kube-system", "allow-dns"]);

    // Deleting the CRD deletes its resources and the kind is gone: 404 for the kubectl whose
    // discovery cache still has it, unknown to one that discovers afresh.
    k.ok(&["delete", "crd", "ippools.crd.projectcalico.org"])
        .await;
    let cached = k.fails(&["get", "ippools"]).await;
    assert!(
        cached
            .stderr
            .contains("the server could not find the requested resource"),
        "{}",
        cached.stderr
    );
    std::fs::remove_dir_all(k.home.path().join(".kube/cache"))?;
    let gone = k.fails(&["get", "ippools"]).await;
    assert!(
        gone.stderr
            .contains(r#"the server doesn't have a resource type "ippools""#),
        "{}",
        gone.stderr
    );
    assert!(
        fake.list_json("crd.projectcalico.org/v1", "IPPool", None)
            .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn create_deployment_expose_watch_the_load_balancer_and_delete() -> R {
    let fake = cluster().await?;
    let k = Kubectl::new(&fake);

    // kubectl's typed clients send protobuf.
    assert_eq!(
        k.ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--port=80",
            "--replicas=2"
        ])
        .await
        .trim(),
        "deployment.apps/web created"
    );
    let d = fake
        .get::<Deployment>(Some("default"), "web")?
        .expect("deployment");
    let spec = d.spec.clone();
    assert_eq!(spec.replicas, Some(2));
    let c = &spec.template.spec.expect("pod spec").containers[0];
    assert_eq!(
        (c.name.as_str(), c.image.as_deref()),
        ("nginx", Some("nginx:1.27"))
    );
    assert_eq!(c.ports.as_ref().map(|p| p[0].container_port), Some(80));
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let deploys = k.ok(&["get", "deploy", "-o", "wide"]).await;
    assert_eq!(
        header(&deploys),
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(row(&deploys, "web")[..4], ["web", "0/2", "0", "0"]);
    let described = k.ok(&["describe", "deployment", "web"]).await;
    assert!(
        described.contains("RollingUpdateStrategy:  25% max unavailable, 25% max surge"),
        "{described}"
    );
    for (args, want) in [
        (
            vec!["create", "namespace", "shop"],
            "namespace/shop created",
        ),
        (
            vec!["create", "configmap", "cfg", "--from-literal=mode=fast"],
            "configmap/cfg created",
        ),
        (
            vec![
                "create",
                "secret",
                "generic",
                "creds",
                "--from-literal=password=hunter2",
            ],
            "secret/creds created",
        ),
        (
            vec!["create", "serviceaccount", "robot"],
            "serviceaccount/robot created",
        ),
    ] {
        assert_eq!(k.ok(&args).await.trim(), want);
    }
    assert_eq!(
        fake.get::<ConfigMap>(Some("default"), "cfg")?
            .and_then(|c| c.data)
            .map(|d| d["mode"].clone())
            .as_deref(),
        Some("fast")
    );
    assert_eq!(
        fake.get::<Secret>(Some("default"), "creds")?
            .and_then(|s| s.data)
            .map(|d| d["password"].0.clone()),
        Some(b"hunter2".to_vec())
    );
    assert!(fake.get::<Namespace>(None, "shop")?.is_some());

    assert_eq!(
        k.ok(&[
            "expose",
            "deployment",
            "web",
            "--type=LoadBalancer",
            "--port=80"
        ])
        .await
        .trim(),
        "service/web exposed"
    );
    let svc = fake
        .get::<Service>(Some("default"), "web")?
        .expect("service");
    let spec = svc.spec.expect("spec");
    let ip: std::net::Ipv4Addr = spec.cluster_ip.as_deref().expect("cluster IP").parse()?;
    assert!(
        ip.octets()[0] == 10 && (96..112).contains(&ip.octets()[1]),
        "{ip} not in 10.96.0.0/12"
    );
    let node_port = spec
        .ports
        .as_ref()
        .and_then(|p| p[0].node_port)
        .expect("node port");
    assert!((30000..=32767).contains(&node_port));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
    // A node port another Service holds is refused, as the allocator refuses it.
    let file = k.write(
        "taken.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: taken\nspec:\n  type: NodePort\n  ports:\n  - port: 80\n    nodePort: {node_port}\n"
        ),
    );
    let taken = k.fails(&["create", "-f", &file]).await;
    assert!(
        taken.stderr.contains(&format!(
            "Service \"taken\" is invalid: spec.ports[0].nodePort: Invalid value: {node_port}: provided port is already allocated"
        )),
        "{}",
        taken.stderr
    );
    let services = k.ok(&["get", "svc", "web"]).await;
    assert_eq!(
        header(&services),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(
        row(&services, "web")[..5],
        [
            "web",
            "LoadBalancer",
            &ip.to_string(),
            "<pending>",
            &format!("80:{node_port}/TCP")
        ]
    );

    // `get svc -w` shows the address once a controller sets it.
    let mut watch = k
        .command(&["get", "svc", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let end = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    let mut set = false;
    loop {
        let line = timeout(
            end.saturating_duration_since(Instant::now()),
            lines.next_line(),
        )
        .await
        .map_err(|_| format!("watch printed no address; saw {seen:?}"))??
        .ok_or("kubectl get -w ended")?;
        if line.contains("172.24.4.50") {
            break;
        }
        seen.push(line);
        if !set && seen.iter().any(|l| l.starts_with("web")) {
            fake.modify::<Service>(Some("default"), "web", |s| {
                s.status = Some(typed(
                    json!({"loadBalancer": {"ingress": [{"ip": "172.24.4.50"}]}}),
                ));
            })?;
            set = true;
        }
    }
    watch.kill().await?;
    assert_eq!(
        header(&seen[0]),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );

    // Deleting the Deployment takes what it owns with it (the garbage collector's cascade).
    let owner = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}]);
    let rs = |name: &str| -> ReplicaSet {
        typed(
            json!({"metadata": {"name": name, "namespace": "default", "ownerReferences": owner},
                     "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}}),
        )
    };
    fake.insert(&rs("web-6d4cf56db6"))?;
    assert_eq!(
        k.ok(&["delete", "deployment", "web", "--cascade=foreground"])
            .await
            .trim(),
        r#"deployment.apps "web" deleted"#
    );
    assert!(
        fake.get::<ReplicaSet>(Some("default"), "web-6d4cf56db6")?
            .is_none()
    );
    // --cascade=orphan leaves the dependents, without their owner reference.
    k.ok(&["create", "deployment", "api", "--image=nginx"])
        .await;
    let api = fake
        .get::<Deployment>(Some("default"), "api")?
        .expect("api");
    let mut orphan = rs("api-7f9c");
    orphan.metadata.owner_references.as_mut().expect("refs")[0].uid =
        api.metadata.uid.expect("uid");
    fake.insert(&orphan)?;
    k.ok(&["delete", "deployment", "api", "--cascade=orphan"])
        .await;
    let left = fake
        .get::<ReplicaSet>(Some("default"), "api-7f9c")?
        .expect("orphan kept");
    assert!(
        left.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    assert_eq!(
        k.ok(&["delete", "svc", "web"]).await.trim(),
        r#"service "web" deleted"#
    );
    assert!(
        k.run(&["get", "svc", "web"])
            .await
            .stderr
            .contains(r#"services "web" not found"#)
    );
    Ok(())
}

const STORAGE: &str = r#"apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: csi-cinder-sc-delete
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: cinder.csi.openstack.org
allowVolumeExpansion: true
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: default
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pvc-0c3d7e2a
spec:
  accessModes: [ReadWriteOnce]
  capacity:
    storage: 1Gi
  persistentVolumeReclaimPolicy: Delete
  storageClassName: csi-cinder-sc-delete
  claimRef:
    namespace: default
    name: data
  csi:
    driver: cinder.csi.openstack.org
    volumeHandle: 0c3d7e2a-1b2c-4d5e-8f90-a1b2c3d4e5f6
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: cinder.csi.openstack.org
spec:
  attachRequired: true
  podInfoOnMount: true
  volumeLifecycleModes:
  - Persistent
  - Ephemeral
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: demo-w-0
spec:
  drivers:
  - name: cinder.csi.openstack.org
    nodeID: 6b1f0c3e-2d4a-4b5c-9e8f-7a6b5c4d3e2f
    topologyKeys: [topology.cinder.csi.openstack.org/zone]
    allocatable:
      count: 256
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: csi-5a1c
spec:
  attacher: cinder.csi.openstack.org
  nodeName: demo-w-0
  source:
    persistentVolumeName: pvc-0c3d7e2a
"#;

#[tokio::test]
async fn get_pv_pvc_volumeattachments_csinodes_and_the_storage_refusals() -> R {
    let fake = cluster().await?;
    let k = Kubectl::new(&fake);
    let file = k.write("storage.yaml", STORAGE);
    let out = k.ok(&["apply", "-f", &file]).await;
    for made in [
        "storageclass.storage.k8s.io/csi-cinder-sc-delete created",
        "persistentvolumeclaim/data created",
        "persistentvolume/pvc-0c3d7e2a created",
        "csinode.storage.k8s.io/demo-w-0 created",
        "volumeattachment.storage.k8s.io/csi-5a1c created",
    ] {
        assert!(out.contains(made), "{out}");
    }

    // Applying the same file again changes nothing: what the server added (the default class,
    // volumeMode, the protection finalizers) is not the file's to remove.
    let again = k.ok(&["apply", "-f", &file]).await;
    assert!(
        again.contains("persistentvolumeclaim/data unchanged")
            && again.contains("persistentvolume/pvc-0c3d7e2a unchanged"),
        "{again}"
    );
    let described = k.ok(&["describe", "pvc", "data"]).await;
    assert!(
        described.contains("kubernetes.io/pvc-protection")
            && described.contains("csi-cinder-sc-delete"),
        "{described}"
    );
    k.ok(&["describe", "pv", "pvc-0c3d7e2a"]).await;

    // Pending, with the default class the admission plugin gave it.
    let pvcs = k.ok(&["get", "pvc"]).await;
    assert_eq!(
        header(&pvcs),
        [
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS",
            "MODES",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "AGE"
        ]
    );
    assert_eq!(
        &row(&pvcs, "data")[..4],
        ["data", "Pending", "csi-cinder-sc-delete", "<unset>"]
    );
    let pvs = k.ok(&["get", "pv", "-o", "wide"]).await;
    assert_eq!(
        header(&pvs),
        [
            "NAME",
            "CAPACITY",
            "ACCESS",
            "MODES",
            "RECLAIM",
            "POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "REASON",
            "AGE",
            "VOLUMEMODE"
        ]
    );
    let pv = row(&pvs, "pvc-0c3d7e2a");
    assert_eq!(
        (&pv[..8], pv[9]),
        (
            &[
                "pvc-0c3d7e2a",
                "1Gi",
                "RWO",
                "Delete",
                "Pending",
                "default/data",
                "csi-cinder-sc-delete",
                "<unset>"
            ][..],
            "Filesystem"
        )
    );

    // The binder's writes: volumeName once, the phase through /status; then it reads Bound.
    k.ok(&[
        "patch",
        "pvc",
        "data",
        "--type=merge",
        "-p",
        r#"{"spec":{"volumeName":"pvc-0c3d7e2a"}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "pvc",
        "data",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"}}}"#,
    ])
    .await;
    assert_eq!(
        &row(&k.ok(&["get", "pvc", "data"]).await, "data")[..7],
        [
            "data",
            "Bound",
            "pvc-0c3d7e2a",
            "1Gi",
            "RWO",
            "csi-cinder-sc-delete",
            "<unset>"
        ]
    );
    // Growth is allowed (the class allows expansion), a new access mode is not.
    k.ok(&[
        "patch",
        "pvc",
        "data",
        "--type=merge",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ])
    .await;
    let refused = k
        .fails(&[
            "patch",
            "pvc",
            "data",
            "--type=merge",
            "-p",
            r#"{"spec":{"accessModes":["ReadWriteMany"]}}"#,
        ])
        .await;
    assert!(
        refused.stderr.contains(
            r#"The PersistentVolumeClaim "data" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"#
        ),
        "{}",
        refused.stderr
    );

    let vas = k.ok(&["get", "volumeattachments"]).await;
    assert_eq!(
        header(&vas),
        ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]
    );
    assert_eq!(
        &row(&vas, "csi-5a1c")[..5],
        [
            "csi-5a1c",
            "cinder.csi.openstack.org",
            "pvc-0c3d7e2a",
            "demo-w-0",
            "false"
        ]
    );
    let drivers = k.ok(&["get", "csidrivers"]).await;
    assert_eq!(
        header(&drivers),
        [
            "NAME",
            "ATTACHREQUIRED",
            "PODINFOONMOUNT",
            "STORAGECAPACITY",
            "TOKENREQUESTS",
            "REQUIRESREPUBLISH",
            "MODES",
            "AGE"
        ]
    );
    assert_eq!(
        &row(&drivers, "cinder.csi.openstack.org")[..7],
        [
            "cinder.csi.openstack.org",
            "true",
            "true",
            "false",
            "<unset>",
            "false",
            "Persistent,Ephemeral"
        ]
    );
    let nodes = k.ok(&["get", "csinodes"]).await;
    assert_eq!(header(&nodes), ["NAME", "DRIVERS", "AGE"]);
    assert_eq!(&row(&nodes, "demo-w-0")[..2], ["demo-w-0", "1"]);
    let refused = k
        .fails(&[
            "patch",
            "volumeattachment",
            "csi-5a1c",
            "--type=merge",
            "-p",
            r#"{"spec":{"nodeName":"demo-cp-0"}}"#,
        ])
        .await;
    assert!(
        refused.stderr.contains("spec: Invalid value:")
            && refused.stderr.contains("field is immutable"),
        "{}",
        refused.stderr
    );

    // A protected claim being deleted reads Terminating until its finalizer goes.
    k.ok(&["delete", "pvc", "data", "--wait=false"]).await;
    assert_eq!(
        row(&k.ok(&["get", "pvc", "data"]).await, "data")[1],
        "Terminating"
    );
    Ok(())
}

#[tokio::test]
async fn the_external_snapshotters_crds_apply_and_their_cel_rules_refuse() -> R {
    let fake = cluster().await?;
    let k = Kubectl::new(&fake);
    let dir = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("tests/fixtures/storage");
    for crd in [
        "volumesnapshotclasses",
        "volumesnapshotcontents",
        "volumesnapshots",
    ] {
        let path = dir.join(format!("snapshot.storage.k8s.io_{crd}.yaml"));
        let out = k.ok(&["apply", "-f", &path.display().to_string()]).await;
        assert!(
            out.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{crd}.snapshot.storage.k8s.io created"
            )),
            "{out}"
        );
    }
    let snap = k.write(
        "snap.yaml",
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: snap\n  namespace: default\n\
         spec:\n  volumeSnapshotClassName: csi-cinder-snapclass\n  source:\n    persistentVolumeClaimName: data\n    volumeSnapshotContentName: c\n",
    );
    let refused = k.fails(&["apply", "-f", &snap]).await;
    assert!(
        refused.stderr.contains(
            r#"spec.source: Invalid value: "object": exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set"#
        ),
        "{}",
        refused.stderr
    );
    k.write(
        "snap.yaml",
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: snap\n  namespace: default\n\
         spec:\n  volumeSnapshotClassName: csi-cinder-snapclass\n  source:\n    persistentVolumeClaimName: data\n",
    );
    k.ok(&["apply", "-f", &snap]).await;
    // The CRD's printer columns.
    let table = k.ok(&["get", "volumesnapshot"]).await;
    assert_eq!(&header(&table)[..3], ["NAME", "READYTOUSE", "SOURCEPVC"]);
    assert_eq!(&row(&table, "snap")[..2], ["snap", "data"]);
    let refused = k
        .fails(&[
            "patch",
            "volumesnapshot",
            "snap",
            "--type=merge",
            "-p",
            r#"{"spec":{"source":{"persistentVolumeClaimName":"other"}}}"#,
        ])
        .await;
    assert!(
        refused
            .stderr
            .contains("persistentVolumeClaimName is immutable"),
        "{}",
        refused.stderr
    );
    Ok(())
}
