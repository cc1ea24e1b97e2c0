//! Real user_data from kos-bootstrap, booted through the guest: clusters form as kubeadm would make
//! them, with the Nodes the kubelet registers and the console markers the script writes.
// The test's own hands set up and break the cluster, as no component of it would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod common;

use common::*;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Secret};
use kos_bootstrap::{PkiDelivery, Role};
use kos_guest::kubelet::ready_status;
use kos_guest::{Logged, ServerEvent};

fn taints(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.clone().unwrap_or_default(),
                t.effect
            )
        })
        .collect()
}

fn label<'a>(n: &'a Node, k: &str) -> Option<&'a str> {
    n.metadata.labels.as_ref()?.get(k).map(String::as_str)
}

#[tokio::test]
async fn one_control_plane_and_two_workers_form_a_ready_cluster() {
    let c = cluster("1.34.2", 1, 2);
    let s = secrets();
    let mut w = World::new();
    // Workers boot in parallel with the first control plane: they wait for its API.
    let cp = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let w0 = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    let w1 = w.boot("w-1", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(3);

    let mut cp_markers = init_markers();
    cp_markers.extend(ok(&["cleanup"]));
    assert_eq!(w.markers(&cp), cp_markers, "{:?}", w.failure_details(&cp));
    assert_eq!(w.markers(&w0), join_markers());
    assert_eq!(w.markers(&w1), join_markers());

    let cluster = w.only_cluster();
    assert_eq!(cluster.name, "demo");
    let uploaded = cluster.cluster_configuration().unwrap().unwrap();
    assert_eq!(uploaded.kubernetes_version.to_string(), "v1.34.2");
    assert_eq!(
        w.guest.api_server_version(&cp).map(|v| v.to_string()),
        Some("v1.34.2".to_owned())
    );
    assert_eq!(w.guest.api_server_version(&w0), None);
    let members: Vec<&str> = cluster.etcd.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(members, ["kos-demo-cp-0"]);

    let nodes = cluster.kube.list::<Node>(None).unwrap();
    let names: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["kos-demo-cp-0", "kos-demo-w-0", "kos-demo-w-1"]);
    for (n, id) in nodes.iter().zip([&cp, &w0, &w1]) {
        let pid = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        assert_eq!(pid, Some(format!("openstack:///{id}").as_str()));
        assert_eq!(ready_status(n), Some("True"), "{:?}", n.metadata.name);
    }
    let (cpn, wn) = (&nodes[0], &nodes[1]);
    assert_eq!(label(cpn, "kos/pool"), Some("control-plane"));
    assert_eq!(
        label(cpn, "node-role.kubernetes.io/control-plane"),
        Some("")
    );
    assert_eq!(
        taints(cpn),
        [
            "node-role.kubernetes.io/control-plane=:NoSchedule",
            "node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule"
        ]
    );
    assert_eq!(label(wn, "kos/pool"), Some("workers"));
    assert_eq!(label(wn, "tier"), Some("general"));
    assert_eq!(label(wn, "node-role.kubernetes.io/control-plane"), None);
    assert_eq!(
        taints(wn),
        [
            "dedicated=batch:PreferNoSchedule",
            "node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule"
        ]
    );

    // The CNI stand-in and the addons are in the cluster's API.
    assert!(
        cluster
            .kube
            .get::<DaemonSet>(Some("kube-system"), "calico-node")
            .unwrap()
            .is_some()
    );
    assert!(
        cluster
            .kube
            .get::<DaemonSet>(Some("kube-system"), "openstack-cloud-controller-manager")
            .unwrap()
            .is_some()
    );
    let cloud_config = cluster
        .kube
        .get::<Secret>(Some("kube-system"), "cloud-config")
        .unwrap()
        .unwrap();
    assert!(cloud_config.data.unwrap().contains_key("cloud.conf"));

    // The cleanup removed the join secrets once all three nodes registered.
    let token = format!("bootstrap-token-{}", s.token.id);
    assert!(
        cluster
            .kube
            .get::<Secret>(Some("kube-system"), &token)
            .unwrap()
            .is_none()
    );
    assert!(
        cluster
            .kube
            .get::<Secret>(Some("kube-system"), "kubeadm-certs")
            .unwrap()
            .is_none()
    );

    // Nothing secret reached a console line or the log.
    let secret_values = [
        s.token.secret.expose().to_string(),
        s.certificate_key.expose().to_string(),
        "CANARY-app-cred-secret".to_string(),
    ];
    for e in w.guest.log() {
        let text = format!("{:?}", e.what);
        for v in &secret_values {
            assert!(!text.contains(v.as_str()), "a secret in {text}");
        }
    }
    assert_eq!(w.guest.split_brains(), []);
    assert!(
        w.guest
            .log()
            .iter()
            .all(|e| !matches!(e.what, Logged::Reported(_))),
        "{:?}",
        w.guest.log()
    );
}

#[tokio::test]
async fn three_control_planes_make_one_etcd_of_three_and_nodes_go_not_ready_when_off() {
    let c = cluster("1.34.2", 3, 1);
    let s = secrets();
    let mut w = World::new();
    let cp0 = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let cp1 = w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    let cp2 = w.boot("cp-2", true, user_data(&c, Role::JoinControlPlane, &s));
    let w0 = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(3);
    for id in [&cp1, &cp2, &w0] {
        assert_eq!(w.markers(id), join_markers(), "{id}");
    }
    let cluster = w.only_cluster();
    let members: Vec<&str> = cluster.etcd.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(members.len(), 3);
    assert!(members.contains(&"kos-demo-cp-1") && members.contains(&"kos-demo-cp-2"));
    let nodes = cluster.kube.list::<Node>(None).unwrap();
    assert_eq!(nodes.len(), 4);
    let cps = nodes
        .iter()
        .filter(|n| label(n, "node-role.kubernetes.io/control-plane").is_some())
        .count();
    assert_eq!(cps, 3);
    assert!(nodes.iter().all(|n| ready_status(n) == Some("True")));

    // A shut-off server's Node goes NotReady (Unknown); its etcd member stays.
    w.event(&cp2, ServerEvent::Shutdown);
    w.event(&w0, ServerEvent::Delete);
    let cluster = w.only_cluster();
    let status = |name: &str| {
        let n = cluster.kube.get::<Node>(None, name).unwrap().unwrap();
        ready_status(&n).map(str::to_owned)
    };
    assert_eq!(status("kos-demo-cp-2").as_deref(), Some("Unknown"));
    assert_eq!(status("kos-demo-w-0").as_deref(), Some("Unknown"));
    assert_eq!(status("kos-demo-cp-0").as_deref(), Some("True"));
    assert_eq!(cluster.etcd.len(), 3);
    // And is Ready again once it is back.
    w.event(&cp2, ServerEvent::Start);
    let n = w
        .only_cluster()
        .kube
        .get::<Node>(None, "kos-demo-cp-2")
        .unwrap()
        .unwrap();
    assert_eq!(ready_status(&n), Some("True"));
    assert_eq!(w.guest.cluster_of(&cp0), w.guest.cluster_of(&cp1));
}

#[tokio::test]
async fn uploaded_certificates_are_decrypted_by_joining_control_planes() {
    let mut c = cluster("1.35.0", 3, 0);
    c.pki_delivery = PkiDelivery::UploadCerts;
    let s = secrets();
    let mut w = World::new();
    let cp0 = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let cp1 = w.boot("cp-1", true, user_data(&c, Role::JoinControlPlane, &s));
    // The joining control plane carries no PKI of its own.
    assert!(
        !w.guest
            .vfs(&cp1)
            .unwrap()
            .exists("/etc/kubernetes/pki/ca.key")
    );
    w.settle_hours(1);
    assert_eq!(w.markers(&cp1), join_markers());
    let key = |id| {
        w.guest
            .vfs(id)
            .unwrap()
            .get("/etc/kubernetes/pki/ca.key")
            .unwrap()
            .content
            .clone()
    };
    assert_eq!(key(&cp1), key(&cp0));
    assert_eq!(key(&cp1), s.ca.key_pem.expose().as_bytes());
}

#[tokio::test]
async fn a_recreated_worker_runs_its_user_data_again_and_takes_its_node_over() {
    let c = cluster("1.34.2", 1, 1);
    let s = secrets_with_ttl(std::time::Duration::from_secs(24 * 3600));
    let mut w = World::new();
    w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let old = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(1);
    w.event(&old, ServerEvent::Delete);
    // The cleanup deleted the token once both nodes registered: give the cluster a new one, as
    // `kos up` does for a re-created node (bootstrap_token_secret).
    let s2 = {
        let mut s2 = s.clone();
        s2.token = kos_bootstrap::secrets::ClusterSecrets::generate(
            &mut <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7),
            t0(),
            std::time::Duration::from_secs(24 * 3600),
        )
        .unwrap()
        .token;
        s2
    };
    let manifest = kos_bootstrap::bootstrap_token_secret(&s2).unwrap();
    let mut doc: serde_json::Value = serde_saphyr::from_str(manifest.yaml.expose()).unwrap();
    let sd = doc.as_object_mut().unwrap().remove("stringData").unwrap();
    let data: serde_json::Map<String, serde_json::Value> = sd
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let b = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                v.as_str().unwrap(),
            );
            (k.clone(), serde_json::Value::from(b))
        })
        .collect();
    doc["data"] = serde_json::Value::Object(data);
    w.only_cluster().kube.apply_json(&doc, "kos").unwrap();

    let new = w.boot("w-0", false, user_data(&c, Role::Worker, &s2));
    w.settle_hours(1);
    assert_eq!(w.markers(&new), join_markers());
    let n = w
        .only_cluster()
        .kube
        .get::<Node>(None, "kos-demo-w-0")
        .unwrap()
        .unwrap();
    assert_eq!(ready_status(&n), Some("True"));
    // providerID is immutable: the Node keeps the deleted server's; the guest reports it.
    assert_eq!(
        n.spec.unwrap().provider_id.unwrap(),
        format!("openstack:///{old}")
    );
    assert!(
        w.guest
            .log_of(&new)
            .any(|l| matches!(l, Logged::Reported(r) if r.contains("providerID")))
    );
}

/// The kubelets act as their nodes (`system:node:<name>`): their Nodes and mirror pods are
/// written by them, and the Node authorizer and NodeRestriction keep each to its own.
#[tokio::test]
async fn kubelets_write_as_their_nodes_and_never_another_nodes_objects() {
    use k8s_openapi::api::core::v1::Pod;
    let c = cluster("1.34.2", 1, 1);
    let s = secrets();
    let mut w = World::new();
    let cp = w.boot("cp-0", true, user_data(&c, Role::InitControlPlane, &s));
    let w0 = w.boot("w-0", false, user_data(&c, Role::Worker, &s));
    w.settle_hours(3);
    assert_eq!(
        w.markers(&w0),
        join_markers(),
        "{:?}",
        w.failure_details(&w0)
    );
    let cluster = w.only_cluster();

    let log = cluster.kube.requests();
    let by = |user: &str, resource: &str, status: u16| {
        log.iter().any(|r| {
            r.user.as_deref() == Some(user)
                && r.resource.as_deref() == Some(resource)
                && r.status == status
        })
    };
    assert!(by("system:node:kos-demo-w-0", "nodes", 201), "{log:#?}");
    assert!(by("system:node:kos-demo-cp-0", "nodes", 201));
    assert!(
        by("system:node:kos-demo-cp-0", "pods", 201),
        "the mirror pods"
    );
    let mirror = cluster
        .kube
        .get::<Pod>(Some("kube-system"), "etcd-kos-demo-cp-0")
        .unwrap()
        .unwrap();
    assert!(
        kos_guest::kubelet::pod_ready(&mirror),
        "{:?}",
        w.failure_details(&cp)
    );

    // The worker's kubelet may not touch the control plane's Node or pods.
    let worker = kos_guest::kubelet::acting(&cluster.kube, "kos-demo-w-0");
    let err = worker
        .update::<Node>(None, "kos-demo-cp-0", true, |n| {
            kos_guest::kubelet::set_readiness(
                n,
                kos_guest::kubelet::Readiness::Unknown,
                time::OffsetDateTime::UNIX_EPOCH,
            );
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "403 Forbidden: nodes \"kos-demo-cp-0\" is forbidden: node \"kos-demo-w-0\" is not allowed to modify node \"kos-demo-cp-0\""
    );
    let err = worker
        .delete::<Pod>(Some("kube-system"), "etcd-kos-demo-cp-0")
        .unwrap_err();
    assert!(
        err.to_string().ends_with(
            "node \"kos-demo-w-0\" can only delete pods with spec.nodeName set to itself"
        ),
        "{err}"
    );
    let err = worker
        .get::<Pod>(Some("kube-system"), "etcd-kos-demo-cp-0")
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("no relationship found between node 'kos-demo-w-0' and this object"),
        "{err}"
    );
    // Its own labels it may set only within the kubelet's set.
    let err = worker
        .update::<Node>(None, "kos-demo-w-0", false, |n| {
            n.metadata.labels.get_or_insert_default().insert(
                "node-role.kubernetes.io/control-plane".into(),
                String::new(),
            );
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("is not allowed to modify labels: node-role.kubernetes.io/control-plane"),
        "{err}"
    );
}
