//! `csi: kos`: the manifests run kos-csi from the spec's image with flags kos-csi itself accepts. The
//! driver containers' args are expanded as the kubelet expands them (`$(VAR)` from the container's
//! env) and parsed with kos-csi's own `Options`, as its binary parses them; the socket, cloud.conf and
//! kubelet paths they name are checked against the volumes the pods mount. cinder-csi's manifests
//! are held to the same wiring, and parse with kos-csi's flags too (it is their drop-in).
#![allow(clippy::unwrap_used)]

mod common;

use clap::Parser;
use common::*;
use kos_bootstrap::*;
use kos_csi::run::Options;
use serde_json::Value;

const IMAGE: &str = "registry.example.com/kos/kos-csi:0.1.0";

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    opts: Options,
}

fn kos(c: &mut ClusterInput) -> &mut ClusterInput {
    c.csi = Csi::Kos {
        image: IMAGE.into(),
    };
    c
}

/// The documents of the CSI driver's manifest.
fn driver_docs(c: &ClusterInput) -> (String, Vec<Value>) {
    let m = render_addons(c)
        .unwrap()
        .into_iter()
        .find(|m| m.name.starts_with("20-"))
        .expect("a CSI manifest");
    let docs = m
        .yaml
        .expose()
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    (m.name, docs)
}

fn workload<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn containers(w: &Value) -> &Vec<Value> {
    w["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
}

fn container<'a>(w: &'a Value, name: &str) -> &'a Value {
    containers(w)
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The driver: the container whose command (its args: the images have no entrypoint) is the
/// driver's binary, as the simulated cluster recognises it.
fn driver(w: &Value) -> &Value {
    let found: Vec<&Value> = containers(w)
        .iter()
        .filter(|c| {
            c["args"][0]
                .as_str()
                .is_some_and(|a| a.ends_with("/kos-csi") || a.ends_with("/cinder-csi-plugin"))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one driver container in {}",
        w["metadata"]["name"]
    );
    found[0]
}

/// `text` with `$(VAR)` replaced by the container's env value, as the kubelet does (an undefined
/// variable stays as written; `$$` is a `$`).
fn expand(text: &str, c: &Value) -> String {
    let env = |name: &str| {
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
    };
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = rest
            .strip_prefix("$(")
            .and_then(|r| r.split_once(')'))
            .filter(|(name, _)| env(name).is_some())
        {
            out.push_str(env(name).unwrap_or_default());
            rest = after;
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The container's args, expanded, parsed as kos-csi's binary parses them (a leading binary path is
/// dropped, `crates/kos-csi/src/main.rs`), and checked as it checks them before it starts.
fn options(c: &Value) -> Options {
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| expand(a.as_str().unwrap(), c))
        .collect();
    assert!(
        args[0].starts_with('/'),
        "the first arg is the binary: {args:?}"
    );
    let opts = Flags::try_parse_from(
        std::iter::once("kos-csi").chain(args[1..].iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("kos-csi refuses {args:?}: {e}"))
    .opts;
    opts.check()
        .unwrap_or_else(|e| panic!("kos-csi refuses {args:?}: {e}"));
    opts
}

/// Which volume of the pod, and which path inside it, `path` is in container `c` (the longest
/// mount holding it).
fn in_volume(c: &Value, path: &str) -> (String, String) {
    c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let at = m["mountPath"].as_str()?.trim_end_matches('/');
            let inside = path.strip_prefix(at)?;
            let name = m["name"].as_str()?;
            (inside.is_empty() || inside.starts_with('/'))
                .then(|| (at.len(), name.to_owned(), inside.to_owned()))
        })
        .max_by_key(|(len, ..)| *len)
        .map(|(_, volume, inside)| (volume, inside))
        .unwrap_or_else(|| panic!("{path} is on no volume of {}", c["name"]))
}

fn volume<'a>(w: &'a Value, name: &str) -> &'a Value {
    w["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

fn env<'a>(c: &'a Value, name: &str) -> &'a str {
    c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("no {name} in {}", c["name"]))
}

/// What both drivers' manifests must wire: the socket the sidecars dial is the driver's, its
/// cloud.conf is the `cloud-config` Secret's, and on the node the kubelet registers the socket
/// where the driver serves it.
fn check_wiring(docs: &[Value], cluster: &str) -> (Options, Options) {
    let controller = workload(docs, "Deployment");
    let d = driver(controller);
    let o = options(d);
    assert!(o.provide_controller_service);
    assert_eq!(
        o.cluster, cluster,
        "the cluster `kos down` deletes volumes of"
    );
    let sock = kos_csi::server::socket_path(&o.endpoint).unwrap();
    // Relative paths are from the image's working directory, `/`.
    let sock = format!("/{}", sock.display()).replace("//", "/");
    let served = in_volume(d, &sock);
    for sidecar in [
        "csi-attacher",
        "csi-provisioner",
        "csi-snapshotter",
        "csi-resizer",
        "liveness-probe",
    ] {
        let s = container(controller, sidecar);
        assert_eq!(
            in_volume(s, env(s, "ADDRESS")),
            served,
            "{sidecar} dials the driver's socket"
        );
    }
    let [conf] = o.cloud_config.as_slice() else {
        panic!("one cloud.conf: {:?}", o.cloud_config);
    };
    let (vol, file) = in_volume(d, conf.to_str().unwrap());
    assert_eq!(file, "/cloud.conf");
    assert_eq!(
        volume(controller, &vol)["secret"]["secretName"],
        "cloud-config"
    );

    let node = workload(docs, "DaemonSet");
    let d = driver(node);
    let n = options(d);
    assert!(n.provide_node_service && !n.provide_controller_service);
    let sock = kos_csi::server::socket_path(&n.endpoint).unwrap();
    let sock = format!("/{}", sock.display()).replace("//", "/");
    let (vol, file) = in_volume(d, &sock);
    let registrar = container(node, "node-driver-registrar");
    assert_eq!(
        in_volume(registrar, env(registrar, "ADDRESS")),
        (vol.clone(), file.clone())
    );
    let host = volume(node, &vol)["hostPath"]["path"].as_str().unwrap();
    assert_eq!(
        format!("{}{file}", host.trim_end_matches('/')),
        env(registrar, "DRIVER_REG_SOCK_PATH"),
        "the kubelet dials the socket the driver serves"
    );
    // Every path the kubelet gives the node service is under --kubelet-dir: mounted from the host,
    // with mounts propagating back.
    let kubelet = n.kubelet_dir.to_str().unwrap();
    let (vol, inside) = in_volume(d, kubelet);
    assert_eq!(inside, "");
    assert_eq!(volume(node, &vol)["hostPath"]["path"], kubelet);
    let mount = d["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == vol.as_str())
        .unwrap();
    assert_eq!(mount["mountPropagation"], "Bidirectional");
    (o, n)
}

#[test]
fn kos_csi_runs_from_the_specs_image_with_flags_it_accepts() {
    let mut c = cluster("1.36.4", 1, 0);
    let (name, docs) = driver_docs(kos(&mut c));
    assert_eq!(name, "20-kos-csi.yaml");
    let (controller, node) = check_wiring(&docs, "demo");
    // No node service in the controller: it needs nothing of the node.
    assert!(!controller.provide_node_service);
    // Its metrics on a port the pod declares.
    assert_eq!(controller.http_endpoint, ":8080");
    let deployment = workload(&docs, "Deployment");
    let d = driver(deployment);
    assert!(
        d["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["containerPort"] == 8080),
        "{d}"
    );
    // The controller runs as the image's unprivileged user; the node plugin, which mounts, as root.
    let sc = &d["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    let n = driver(workload(&docs, "DaemonSet"));
    assert_eq!(n["securityContext"]["privileged"], true);
    assert!(
        node.http_endpoint.is_empty(),
        "no port on every host's network"
    );
    for w in [deployment, workload(&docs, "DaemonSet")] {
        let d = driver(w);
        assert_eq!(d["image"], IMAGE);
        assert_eq!(d["args"][0], "/bin/kos-csi");
    }
    // The same driver name: cinder-csi's CSIDriver, StorageClass and volumes are kos-csi's.
    assert_eq!(
        workload(&docs, "CSIDriver")["metadata"]["name"],
        kos_csi::DRIVER_NAME
    );
    for w in docs.iter().filter(|d| d["spec"]["template"].is_object()) {
        for c in containers(w) {
            let run = format!("{} {}", c["image"], c["args"]);
            assert!(!run.contains("cinder-csi-plugin"), "{run}");
        }
    }
    let all = render_addons(&c).unwrap();
    let sc = all
        .iter()
        .find(|m| m.name == "30-storageclass.yaml")
        .expect("the default StorageClass");
    assert!(
        sc.yaml
            .expose()
            .contains(&format!("provisioner: {}", kos_csi::DRIVER_NAME))
    );
}

/// kos's cinder-csi manifests hold to the same wiring, and kos-csi takes their flags.
#[test]
fn cinder_csi_is_wired_alike_and_its_flags_are_kos_csis() {
    let (name, docs) = driver_docs(&cluster("1.36.4", 1, 0));
    assert_eq!(name, "20-cinder-csi.yaml");
    check_wiring(&docs, "demo");
}

/// The check can fail: a flag kos-csi does not have is refused, as the binary would refuse it.
#[test]
fn a_flag_kos_csi_lacks_is_refused() {
    let mut c = cluster("1.36.4", 1, 0);
    let (_, mut docs) = driver_docs(kos(&mut c));
    let d = docs.iter_mut().find(|d| d["kind"] == "Deployment").unwrap();
    let args = d["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == "kos-csi")
        .unwrap()["args"]
        .as_array_mut()
        .unwrap();
    args.push(Value::from("--metrics-address=:8080"));
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let refused = std::panic::catch_unwind(|| options(driver(d)));
    assert!(refused.is_err());
    assert_eq!(
        expand("a=$(CSI_ENDPOINT) $$(X) $(NOPE)", driver(d)),
        "a=unix:///csi/csi.sock $(X) $(NOPE)"
    );
}

/// Both drivers' controllers run the csi-snapshotter at its pin, with the args upstream cinder-csi's
/// manifest gives it (cloud-provider-openstack v1.34.1 to v1.36.0 alike), dialing the driver.
#[test]
fn both_controllers_run_the_pinned_csi_snapshotter_as_upstream_does() {
    let pin = &kos_bootstrap::addons::Pins::builtin()
        .unwrap()
        .images
        .csi_snapshotter;
    let mut k = cluster("1.36.4", 1, 0);
    kos(&mut k);
    for c in [cluster("1.34.1", 1, 0), k] {
        let (name, docs) = driver_docs(&c);
        let s = container(workload(&docs, "Deployment"), "csi-snapshotter");
        assert_eq!(s["image"], pin.as_str(), "{name}");
        assert_eq!(
            s["args"],
            serde_json::json!([
                "--csi-address=$(ADDRESS)",
                "--timeout=3m",
                "--extra-create-metadata",
                "--leader-election=true"
            ]),
            "{name}"
        );
        assert_eq!(
            expand(s["args"][0].as_str().unwrap(), s),
            "--csi-address=/var/lib/csi/sockets/pluginproxy/csi.sock"
        );
        // Never on the node: snapshots are the controller service's.
        let node = workload(&docs, "DaemonSet");
        assert!(
            containers(node)
                .iter()
                .all(|c| c["name"] != "csi-snapshotter")
        );
    }
}
