//! Issue 24 (4): a cluster on an air-gapped cloud. The simulated internet refuses every public host
//! the bootstrap uses (as a cloud without internet access does); with the spec's mirrors the cluster
//! comes up and every URL its nodes fetched is the mirror's; without them the same cloud fails at the
//! step that could not download, saying what. `kos artefacts` lists what to put on the mirror and
//! `kos plan` says where nodes fetch from.

mod support;

use reqwest::Method;
use serde_json::{Value, json};
use support::{admin, code, example, isolated, kos, serve, sim_admin, text};

/// Every public host a node's bootstrap fetches from (the distributions' archives, packages,
/// manifests, the four registries).
const PUBLIC_HOSTS: &str = r"^https?://(archive\.ubuntu\.com|security\.ubuntu\.com|deb\.debian\.org|security\.debian\.org|pkgs\.k8s\.io|raw\.githubusercontent\.com|github\.com|registry\.k8s\.io|registry-1\.docker\.io|docker\.io|quay\.io|ghcr\.io)([/:]|$)";

/// `kos artefacts | head`: the reader has gone before kos writes; kos ends as a program killed by
/// SIGPIPE would (141), with no panic on stderr (it printed "failed printing to stdout: Broken pipe").
#[test]
fn a_closed_stdout_ends_kos_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = example("air-gapped.yaml");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let o = isolated(
        dir.path(),
        None,
        &["artefacts", "-f", spec.to_str().expect("utf8")],
    )
    .stdout(writer)
    .output()
    .expect("kos runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn artefacts_list_what_the_mirror_must_hold_without_a_cloud() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = example("air-gapped.yaml");
    let o = kos(
        dir.path(),
        None,
        &[
            "artefacts",
            "-f",
            spec.to_str().expect("utf8"),
            "--output",
            "json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let list: Vec<Value> = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(list.len() > 10, "{list:?}");
    for a in &list {
        let fetched = a["fetched"].as_str().expect("fetched");
        assert!(fetched.contains("mirror.example"), "{a}");
        assert_ne!(a["fetched"], a["origin"], "{a}");
    }
    let cni = list
        .iter()
        .find(|a| a["kind"] == "manifest")
        .expect("the CNI manifest");
    assert_eq!(
        cni["sha256"],
        "a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744"
    );
    // The table says the same for a person.
    let o = kos(
        dir.path(),
        None,
        &["artefacts", "-f", spec.to_str().expect("utf8")],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    // cinder-csi's snapshot sidecar and external-snapshotter's controller, from the mirror.
    for image in ["csi-snapshotter:v8.4.0", "snapshot-controller:v8.4.0"] {
        assert!(
            t.contains(&format!("from registry.k8s.io/sig-storage/{image}")),
            "{t}"
        );
    }
    assert!(
        t.contains("mirror.example:5000/kube-apiserver:v1.36.4")
            && t.contains("from registry.k8s.io/kube-apiserver:v1.36.4"),
        "{t}"
    );
}

/// `csi: {kos: {image}}`: the mirror must hold kos-csi's image (pulled through the mirror of its
/// registry) and cinder-csi's sidecars, and no cinder-csi-plugin.
#[test]
fn artefacts_of_a_kos_csi_cluster_list_its_image_from_the_mirror() {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = std::fs::read_to_string(example("air-gapped.yaml")).expect("example");
    assert_eq!(example.matches("  nodePools:").count(), 1);
    let spec = dir.path().join("kos-csi.yaml");
    std::fs::write(
        &spec,
        example.replace(
            "  nodePools:",
            "  addons:\n    csi: {kos: {image: ghcr.io/example/kos-csi:0.1.0}}\n  nodePools:",
        ),
    )
    .expect("spec");
    let o = kos(
        dir.path(),
        None,
        &[
            "artefacts",
            "-f",
            spec.to_str().expect("utf8"),
            "--output",
            "json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let list: Vec<Value> = serde_json::from_slice(&o.stdout).expect("JSON");
    let csi = list
        .iter()
        .find(|a| a["origin"] == "ghcr.io/example/kos-csi:0.1.0")
        .unwrap_or_else(|| panic!("no kos-csi image in {list:#?}"));
    assert_eq!(csi["fetched"], "mirror.example:5000/example/kos-csi:0.1.0");
    assert_eq!(csi["kind"], "image");
    let origins: Vec<&str> = list.iter().filter_map(|a| a["origin"].as_str()).collect();
    assert!(
        origins.contains(&"registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0"),
        "{origins:#?}"
    );
    // Volume snapshots come with either driver: the sidecar and the controller are mirrored too.
    for image in [
        "registry.k8s.io/sig-storage/csi-snapshotter:v8.4.0",
        "registry.k8s.io/sig-storage/snapshot-controller:v8.4.0",
    ] {
        let a = list
            .iter()
            .find(|a| a["origin"] == image)
            .unwrap_or_else(|| panic!("no {image} in {origins:#?}"));
        assert_eq!(a["step"], "addons");
        assert!(
            a["fetched"]
                .as_str()
                .is_some_and(|f| f.starts_with("mirror.example") && f.ends_with(&image[15..])),
            "{a}"
        );
    }
    assert!(
        !origins.iter().any(|o| o.contains("cinder-csi-plugin")),
        "{origins:#?}"
    );
}

#[test]
fn an_air_gapped_cloud_makes_a_cluster_from_the_mirror_and_fails_clearly_without() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let (status, body) = admin(
        &served.base,
        Method::PUT,
        "/_sim/internet",
        Some(json!({"unreachable": [PUBLIC_HOSTS]})),
    );
    assert_eq!(status, 200, "{body}");

    let spec = example("air-gapped.yaml");
    let spec = spec.to_str().expect("utf8");
    let plan = kos(
        d,
        Some(&served.clouds),
        &["plan", "-f", spec, "--cloud", "sim"],
    );
    let p = text(&plan);
    assert_eq!(code(&plan), 0, "{p}");
    assert!(
        p.contains("images of registry.k8s.io from https://mirror.example:5000"),
        "{p}"
    );
    assert!(
        p.contains("manifests from https://mirror.example/files (same sha256)"),
        "{p}"
    );
    assert!(
        p.contains("OS packages from https://mirror.example/ubuntu"),
        "{p}"
    );
    assert!(
        p.contains("through the proxy (http http://proxy.example:3128"),
        "{p}"
    );

    let up = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", spec, "--cloud", "sim"],
    );
    let out = text(&up);
    assert_eq!(code(&up), 0, "{out}");
    assert!(out.contains("cp-0: bootstrap ok"), "{out}");

    // Every node fetched, and only from the mirror.
    let clusters = sim_admin(&served.base, "/_sim/clusters");
    let nodes: Vec<&Value> = clusters
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["nodes"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(nodes.len(), 2, "{clusters}");
    let mut all = Vec::new();
    for n in &nodes {
        let fetched = n["fetched"].as_array().expect("fetched");
        assert!(!fetched.is_empty(), "{n}");
        all.extend(fetched.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    assert!(
        all.iter().all(|u| u.starts_with("https://mirror.example")),
        "{all:#?}"
    );
    for want in [
        "https://mirror.example/ubuntu/dists/noble/InRelease",
        "https://mirror.example/ubuntu/dists/noble-security/InRelease",
        "https://mirror.example/pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key",
        "https://mirror.example/files/raw.githubusercontent.com/projectcalico/calico/v3.32.1/manifests/calico.yaml",
        "https://mirror.example:5000/v2/kube-apiserver/manifests/v1.36.4",
    ] {
        assert!(
            all.iter().any(|u| u == want),
            "{want} not fetched: {all:#?}"
        );
    }

    // The same cloud, a spec without mirrors: the first download fails, named: the image's own
    // archive, which apt cannot reach, so its install finds no package.
    let plain = std::fs::read_to_string(example("minimal.yaml"))
        .expect("example")
        .replace("name: demo", "name: plain")
        .replace("cidr: 10.0.0.0/24", "cidr: 10.1.0.0/24");
    let plain_path = d.join("plain.yaml");
    std::fs::write(&plain_path, plain).expect("write");
    let up = kos(
        d,
        Some(&served.clouds),
        &[
            "up",
            "-f",
            plain_path.to_str().expect("utf8"),
            "--cloud",
            "sim",
        ],
    );
    let out = text(&up);
    assert_eq!(code(&up), 1, "{out}");
    assert!(
        out.contains("packages failed: the OS packages' archive is unreachable (Failed to fetch http://archive.ubuntu.com/ubuntu/dists/noble/InRelease"),
        "{out}"
    );
    assert!(out.contains("set mirrors.packages.os"), "{out}");
    // Before the Kubernetes packages: the OS install is the first thing a node fetches.
    assert!(!out.contains("pkgs.k8s.io"), "{out}");
}

/// A pool with `autoscaling` gets cluster-autoscaler of the cluster's minor from kos-operator: a
/// mirror must hold it too, and a cluster without one does not list it.
#[test]
fn artefacts_of_an_autoscaled_pool_list_cluster_autoscaler_from_the_mirror() {
    let dir = tempfile::tempdir().expect("tempdir");
    let example_text = std::fs::read_to_string(example("air-gapped.yaml")).expect("example");
    let list_of = |body: &str| -> Vec<Value> {
        let spec = dir.path().join("spec.yaml");
        std::fs::write(&spec, body).expect("spec");
        let o = kos(
            dir.path(),
            None,
            &[
                "artefacts",
                "-f",
                spec.to_str().expect("utf8"),
                "--output",
                "json",
            ],
        );
        assert_eq!(code(&o), 0, "{}", text(&o));
        serde_json::from_slice(&o.stdout).expect("JSON")
    };
    let autoscaled = example_text.replace(
        "    - name: workers\n      count: 1\n",
        "    - name: workers\n      count: 1\n      autoscaling: {min: 0, max: 4}\n",
    );
    assert_ne!(autoscaled, example_text);
    let list = list_of(&autoscaled);
    let ca = list
        .iter()
        .find(|a| {
            a["origin"].as_str().is_some_and(|o| {
                o.starts_with("registry.k8s.io/autoscaling/cluster-autoscaler:v1.")
            })
        })
        .unwrap_or_else(|| panic!("no cluster-autoscaler in {list:#?}"));
    let origin = ca["origin"].as_str().expect("origin");
    assert_eq!(
        ca["fetched"],
        format!(
            "mirror.example:5000/{}",
            &origin["registry.k8s.io/".len()..]
        )
    );
    assert!(
        !list_of(&example_text).iter().any(|a| a["origin"]
            .as_str()
            .is_some_and(|o| o.contains("cluster-autoscaler"))),
        "listed for a cluster without autoscaling"
    );
}
