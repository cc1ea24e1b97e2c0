//! Storage on a cluster of the simulated cloud, through the real `kos` binary and kubectl (peers kos
//! did not write): the cluster's CSI driver (kos-csi, standing in for upstream's cinder-csi-plugin)
//! runs in the cluster with the sidecars and the kubelet's volume manager modelled. The seed's walk:
//! the default StorageClass, a 1 Gi claim → `Bound` once a pod names it, the Cinder volume attached
//! to that pod's node and `in-use`; the pod deleted → detached; the claim deleted → the volume gone.
//! Then an expansion, a clone, a snapshot and a claim restored from it, a class whose zone no
//! compute host has, and `kos down` removing what the driver made. kubectl as in cli_kubectl.rs
//! (never skipped).

mod support;

use serde_json::Value;
use support::*;

fn apply(d: &std::path::Path, file: &str, yaml: &str) {
    std::fs::write(d.join(file), yaml).expect("write");
    let o = kubectl(d, &["apply", "-f", file]);
    assert!(o.status.success(), "{}", text(&o));
}

const CLAIM: &str = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: default\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n";

fn pod(name: &str, claim: &str) -> String {
    pod_on(name, claim, None)
}

/// A pod naming `claim`, on the node `host` when given (a clone must be made in its source's zone).
fn pod_on(name: &str, claim: &str, host: Option<&str>) -> String {
    let selector = host
        .map(|h| format!("  nodeSelector:\n    kubernetes.io/hostname: {h}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{selector}  containers:\n  - name: app\n    image: registry.k8s.io/pause:3.10\n    volumeMounts:\n    - name: data\n      mountPath: /data\n  volumes:\n  - name: data\n    persistentVolumeClaim:\n      claimName: {claim}\n"
    )
}

#[test]
fn a_claim_is_bound_attached_to_its_pods_node_and_gone_with_the_claim() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    // Cinder has a zone no compute host is in (an archive backend, say).
    let config = sim_config(
        d,
        "zones: [az1, az2, az3]\nvolume_zones: [az1, az2, az3, archive]\n",
    );
    let sim = serve_with(d, "0.02", Some(&config));
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    assert_eq!(code(&up), 0, "{}", text(&up));
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));

    // The default class waits for the first consumer: the claim stays Pending without a pod.
    let sc = kube_get(d, &["storageclass"]).expect("storage classes");
    assert!(
        sc["items"].as_array().is_some_and(|i| i.iter().any(|c| {
            c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
        })),
        "{sc}"
    );
    apply(d, "claim.yaml", CLAIM);
    let claim = kube_get(d, &["pvc", "data"]).expect("claim");
    assert_eq!(claim["status"]["phase"], "Pending", "{claim}");
    assert!(
        csi_volumes(&sim.base).is_empty(),
        "no volume before a consumer"
    );

    apply(d, "pod.yaml", &pod("app", "data"));
    let claim = eventually(180, "the claim to be Bound", || {
        let c = kube_get(d, &["pvc", "data"])?;
        (c["status"]["phase"] == "Bound").then_some(c)
    });
    assert_eq!(claim["status"]["capacity"]["storage"], "1Gi", "{claim}");
    let pv_name = claim["spec"]["volumeName"]
        .as_str()
        .expect("volumeName")
        .to_owned();
    let pv = kube_get(d, &["pv", &pv_name]).expect("volume");
    assert_eq!(
        pv["spec"]["csi"]["driver"], "cinder.csi.openstack.org",
        "{pv}"
    );
    let handle = pv["spec"]["csi"]["volumeHandle"]
        .as_str()
        .expect("handle")
        .to_owned();

    let pod_obj = eventually(180, "the pod to run", || {
        let p = kube_get(d, &["pod", "app"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let node_name = pod_obj["spec"]["nodeName"]
        .as_str()
        .expect("scheduled")
        .to_owned();
    let node = kube_get(d, &["node", &node_name]).expect("node");
    let server = server_of(&node);
    let volume = eventually(60, "the volume in-use on the pod's node", || {
        csi_volumes(&sim.base).into_iter().find(|v| {
            v["id"] == handle.as_str()
                && v["status"] == "in-use"
                && v["attachments"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x["server_id"] == server.as_str()))
        })
    });
    assert_eq!(volume["size"], 1, "{volume}");
    assert_eq!(
        volume["metadata"]["csi.storage.k8s.io/pvc/name"], "data",
        "{volume}"
    );
    let va = kube_get(d, &["volumeattachments"]).expect("attachments");
    assert!(
        va["items"].as_array().is_some_and(|i| i.iter().any(|a| {
            a["spec"]["nodeName"] == node_name.as_str() && a["status"]["attached"] == true
        })),
        "{va}"
    );

    // The pod goes: the volume is unmounted and detached, and stays.
    let del = kubectl(d, &["delete", "pod", "app"]);
    assert!(del.status.success(), "{}", text(&del));
    eventually(180, "the volume to be detached", || {
        csi_volumes(&sim.base)
            .into_iter()
            .any(|v| v["id"] == handle.as_str() && v["status"] == "available")
            .then_some(())
    });
    // The claim goes: the volume with it (reclaim policy Delete).
    let del = kubectl(d, &["delete", "pvc", "data"]);
    assert!(del.status.success(), "{}", text(&del));
    eventually(180, "the volume to be deleted", || {
        csi_volumes(&sim.base)
            .iter()
            .all(|v| v["id"] != handle.as_str())
            .then_some(())
    });
    eventually(60, "the PersistentVolume to go", || {
        kube_get(d, &["pv"])?["items"]
            .as_array()
            .is_some_and(|i| i.is_empty())
            .then_some(())
    });

    // An expansion: the claim asks for 2 Gi; Cinder extends the volume in use, the node grows the
    // filesystem, and the claim says 2 Gi.
    apply(d, "claim.yaml", CLAIM);
    apply(d, "pod.yaml", &pod("app", "data"));
    let claim = eventually(180, "the second claim to be Bound", || {
        let c = kube_get(d, &["pvc", "data"])?;
        (c["status"]["phase"] == "Bound").then_some(c)
    });
    let handle = {
        let pv = kube_get(
            d,
            &[
                "pv",
                claim["spec"]["volumeName"].as_str().expect("volumeName"),
            ],
        )
        .expect("volume");
        pv["spec"]["csi"]["volumeHandle"]
            .as_str()
            .expect("handle")
            .to_owned()
    };
    let host = eventually(180, "the pod to run", || {
        let p = kube_get(d, &["pod", "app"])?;
        (p["status"]["phase"] == "Running")
            .then(|| p["spec"]["nodeName"].as_str().map(str::to_owned))
            .flatten()
    });
    let grow = kubectl(
        d,
        &[
            "patch",
            "pvc",
            "data",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
        ],
    );
    assert!(grow.status.success(), "{}", text(&grow));
    eventually(240, "the claim to say 2Gi", || {
        let c = kube_get(d, &["pvc", "data"])?;
        (c["status"]["capacity"]["storage"] == "2Gi").then_some(())
    });
    let volume = csi_volumes(&sim.base)
        .into_iter()
        .find(|v| v["id"] == handle.as_str())
        .expect("the volume");
    assert_eq!(volume["size"], 2, "{volume}");

    // A clone: a claim whose data source is the first one gets a volume made from it, in its zone
    // (Cinder refuses a clone in another zone: the pod goes where the source is).
    apply(
        d,
        "clone.yaml",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: copy\n  namespace: default\nspec:\n  accessModes: [ReadWriteOnce]\n  dataSource:\n    kind: PersistentVolumeClaim\n    name: data\n  resources:\n    requests:\n      storage: 2Gi\n",
    );
    apply(d, "reader.yaml", &pod_on("reader", "copy", Some(&host)));
    eventually(240, "the clone to be Bound", || {
        (kube_get(d, &["pvc", "copy"])?["status"]["phase"] == "Bound").then_some(())
    });
    assert!(
        csi_volumes(&sim.base)
            .iter()
            .any(|v| v["source_volid"] == handle.as_str()),
        "the clone is made from the volume"
    );

    // A snapshot of the claim (the default snapshot class), then a claim restored from it.
    apply(
        d,
        "snap.yaml",
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: data-snap\n  namespace: default\nspec:\n  source:\n    persistentVolumeClaimName: data\n",
    );
    let snap = eventually(240, "the snapshot to be ready", || {
        let v = kube_get(d, &["volumesnapshot", "data-snap"])?;
        (v["status"]["readyToUse"] == true).then_some(v)
    });
    assert_eq!(snap["status"]["restoreSize"], "2Gi", "{snap}");
    let content = kube_get(
        d,
        &[
            "volumesnapshotcontent",
            snap["status"]["boundVolumeSnapshotContentName"]
                .as_str()
                .expect("bound content"),
        ],
    )
    .expect("content");
    let snapshot_id = content["status"]["snapshotHandle"]
        .as_str()
        .expect("handle")
        .to_owned();
    let snapshots = || -> Vec<Value> {
        sim_state(&sim.base)["cinder"]["snapshots"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert!(
        snapshots()
            .iter()
            .any(|x| x["id"] == snapshot_id.as_str() && x["volume_id"] == handle.as_str()),
        "a Cinder snapshot of the claim's volume"
    );
    apply(
        d,
        "restored.yaml",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: restored\n  namespace: default\nspec:\n  accessModes: [ReadWriteOnce]\n  dataSource:\n    apiGroup: snapshot.storage.k8s.io\n    kind: VolumeSnapshot\n    name: data-snap\n  resources:\n    requests:\n      storage: 2Gi\n",
    );
    apply(
        d,
        "restorer.yaml",
        &pod_on("restorer", "restored", Some(&host)),
    );
    eventually(240, "the restored claim to be Bound", || {
        (kube_get(d, &["pvc", "restored"])?["status"]["phase"] == "Bound").then_some(())
    });
    assert!(
        csi_volumes(&sim.base)
            .iter()
            .any(|v| v["snapshot_id"] == snapshot_id.as_str()),
        "the restored volume is made from the snapshot"
    );
    // The restored volume goes first (Cinder keeps a snapshot a volume was made from on some
    // backends), then the snapshot and its Cinder snapshot.
    for what in [
        ["pod", "restorer"],
        ["pvc", "restored"],
        ["volumesnapshot", "data-snap"],
    ] {
        let o = kubectl(d, &["delete", what[0], what[1]]);
        assert!(o.status.success(), "{}", text(&o));
    }
    eventually(240, "the Cinder snapshot to be deleted", || {
        snapshots()
            .iter()
            .all(|x| x["id"] != snapshot_id.as_str())
            .then_some(())
    });

    // A class whose volumes land in a zone no compute host is in: the volume is made there, and
    // the pod that names it is refused, saying why.
    apply(
        d,
        "archive.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: archive\nprovisioner: cinder.csi.openstack.org\nparameters:\n  availability: archive\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: cold\n  namespace: default\nspec:\n  storageClassName: archive\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n",
    );
    apply(d, "cold.yaml", &pod("cold", "cold"));
    // (First "unbound immediate PersistentVolumeClaims" while the volume is made, as the real
    // scheduler says.)
    let message = eventually(240, "the pod to be refused for its volume's zone", || {
        let p = kube_get(d, &["pod", "cold"])?;
        p["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
            .and_then(|c| c["message"].as_str().map(str::to_owned))
            .filter(|m| m.contains("volume node affinity conflict"))
    });
    assert!(message.starts_with("0/3 nodes are available"), "{message}");
    let events = kubectl(
        d,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=cold",
        ],
    );
    assert!(
        String::from_utf8_lossy(&events.stdout).contains("FailedScheduling"),
        "{}",
        text(&events)
    );
    assert!(
        csi_volumes(&sim.base)
            .iter()
            .any(|v| v["availability_zone"] == "archive"),
        "the claim's volume is in the archive zone"
    );

    // `kos down` removes the volumes the driver made, attached or not.
    assert!(csi_volumes(&sim.base).len() >= 3);
    let down = kos(d, Some(&sim.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
    let left = csi_volumes(&sim.base);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `csi: {kos: {image}}`: kos's own manifests (the non-root controller, its flags, its RBAC) run
/// the same walk: the claim is Bound, the pod runs on the volume's node, and the claim's deletion
/// takes the volume.
#[test]
fn kos_csi_manifests_bind_and_release_a_claim() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sim = serve_scaled(d, "0.02");
    let minimal = std::fs::read_to_string(example("minimal.yaml")).expect("example");
    let spec = format!(
        "{minimal}  addons:\n    csi:\n      kos:\n        image: registry.example.com/kos/kos-csi:0.1.0\n"
    );
    std::fs::write(d.join("kos-csi.yaml"), spec).expect("write");
    let up = kos(
        d,
        Some(&sim.clouds),
        &["up", "-f", "kos-csi.yaml", "--cloud", "sim"],
    );
    assert_eq!(code(&up), 0, "{}", text(&up));
    let kc = kos(
        d,
        Some(&sim.clouds),
        &["kubeconfig", "demo", "--cloud", "sim"],
    );
    assert_eq!(code(&kc), 0, "{}", text(&kc));
    let deploy = kube_get(d, &["deployment", "-n", "kube-system"]).expect("deployments");
    assert!(
        deploy["items"].as_array().is_some_and(|i| i
            .iter()
            .any(|x| x["metadata"]["name"] == "kos-csi-controllerplugin")),
        "{deploy}"
    );

    // README's walk, with its file.
    let walk = example("kubectl/storage.yaml");
    let walk = walk.to_str().expect("utf8");
    let o = kubectl(d, &["apply", "-f", walk]);
    assert!(o.status.success(), "{}", text(&o));
    eventually(180, "the pod to run", || {
        (kube_get(d, &["pod", "app"])?["status"]["phase"] == "Running").then_some(())
    });
    let claim = kube_get(d, &["pvc", "data"]).expect("claim");
    assert_eq!(claim["status"]["phase"], "Bound", "{claim}");
    assert!(
        csi_volumes(&sim.base)
            .iter()
            .any(|v| v["status"] == "in-use"
                && v["metadata"]["cinder.csi.openstack.org/cluster"] == "demo"),
        "the volume is attached"
    );
    let o = kubectl(d, &["delete", "-f", walk]);
    assert!(o.status.success(), "{}", text(&o));
    eventually(180, "the volume to be deleted", || {
        csi_volumes(&sim.base).is_empty().then_some(())
    });
    let down = kos(d, Some(&sim.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
}
