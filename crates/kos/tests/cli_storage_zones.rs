//! Cinder's zones named apart from Nova's, through the real `kos` binary and kubectl: compute zones
//! `az1, az2, az3` over one Cinder zone `nova`, as many clouds have them. Preflight sees that
//! Cinder lacks the nodes' zones and picks Cinder's only zone; the cluster's cloud.conf ignores the
//! volume's zone and the default StorageClass names `nova`, so README's claim binds (its volume
//! made in `nova`, attached across zones) and its pod runs. Without that, Cinder refuses the
//! node's zone ("Availability zone 'az1' is invalid") and the claim never binds.

mod support;

use support::*;

#[test]
fn a_claim_binds_in_cinders_only_zone_under_other_compute_zones() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let config = sim_config(d, "zones: [az1, az2, az3]\nvolume_zones: [nova]\n");
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

    // The default class names Cinder's zone; its binding still waits for the pod's node.
    let classes = kube_get(d, &["storageclass"]).expect("storage classes");
    let default = classes["items"]
        .as_array()
        .and_then(|i| {
            i.iter().find(|c| {
                c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"]
                    == "true"
            })
        })
        .cloned()
        .expect("a default class");
    assert_eq!(default["parameters"]["availability"], "nova", "{default}");
    assert_eq!(default["volumeBindingMode"], "WaitForFirstConsumer");

    // README's walk, with its file.
    let walk = example("kubectl/storage.yaml");
    let walk = walk.to_str().expect("utf8");
    let o = kubectl(d, &["apply", "-f", walk]);
    assert!(o.status.success(), "{}", text(&o));
    let claim = eventually(180, "the claim to be Bound", || {
        let c = kube_get(d, &["pvc", "data"])?;
        (c["status"]["phase"] == "Bound").then_some(c)
    });
    let pod = eventually(180, "the pod to run", || {
        let p = kube_get(d, &["pod", "app"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let node_name = pod["spec"]["nodeName"].as_str().expect("scheduled");
    let node = kube_get(d, &["node", node_name]).expect("node");
    let node_zone = node["metadata"]["labels"]["topology.cinder.csi.openstack.org/zone"]
        .as_str()
        .expect("the node plugin's zone label")
        .to_owned();
    assert!(
        ["az1", "az2", "az3"].contains(&node_zone.as_str()),
        "{node_zone}"
    );

    // The PV may be used where the pod runs: its topology is the node's compute zone.
    let pv = kube_get(
        d,
        &[
            "pv",
            claim["spec"]["volumeName"].as_str().expect("volumeName"),
        ],
    )
    .expect("volume");
    let handle = pv["spec"]["csi"]["volumeHandle"]
        .as_str()
        .expect("handle")
        .to_owned();
    let terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"].to_string();
    assert!(terms.contains(&format!("\"{node_zone}\"")), "{pv}");
    assert!(!terms.contains("\"nova\""), "{pv}");

    // The Cinder volume is in Cinder's zone, attached to the pod's server in a compute zone.
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
    assert_eq!(volume["availability_zone"], "nova", "{volume}");

    let o = kubectl(d, &["delete", "-f", walk]);
    assert!(o.status.success(), "{}", text(&o));
    eventually(180, "the volume to be deleted", || {
        csi_volumes(&sim.base).is_empty().then_some(())
    });
    let down = kos(d, Some(&sim.clouds), &["down", "demo", "--cloud", "sim"]);
    assert_eq!(code(&down), 0, "{}", text(&down));
}

/// Several Cinder zones, none the nodes': `kos up` refuses the spec before anything is made, naming
/// the field to set; naming one of Cinder's zones there makes the cluster.
#[test]
fn several_cinder_zones_and_none_named_is_refused_before_anything_is_made() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let config = sim_config(d, "zones: [az1, az2]\nvolume_zones: [nova, archive]\n");
    let sim = serve_with(d, "0.02", Some(&config));
    let spec = example("minimal.yaml");
    let spec = spec.to_str().expect("utf8");
    let up = kos(d, Some(&sim.clouds), &["up", "-f", spec, "--cloud", "sim"]);
    let said = text(&up);
    assert_ne!(code(&up), 0, "{said}");
    assert!(
        said.contains("csi_zone_unknown") && said.contains("csiAvailabilityZone"),
        "{said}"
    );
    let state = sim_state(&sim.base);
    assert!(
        state["nova"]["servers"]
            .as_array()
            .is_none_or(|s| s.is_empty()),
        "nothing is made: {}",
        state["nova"]["servers"]
    );
}
