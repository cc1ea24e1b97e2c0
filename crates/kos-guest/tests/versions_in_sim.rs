//! Versions per node in a simulated cloud, driven over HTTP as kos and kubectl drive it (issue 11):
//! a control plane whose kubeadm is a minor newer joins at the version the cluster's
//! `kube-system/kubeadm-config` names and the cloud reports its kubelet newer than the API
//! servers; a client changes that ConfigMap through the cluster's API, and the next control plane
//! runs the new version, which `GET /_sim/clusters` reports per node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod sim_cloud;

use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kos_bootstrap::Role;
use kos_guest::sim::SimGuests;
use kos_sim::{Sim, SimConfig};
use serde_json::{Value, json};

use sim_cloud::*;

fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    report[0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_bumps_kubeadm_config_and_the_next_control_plane_runs_the_new_version() {
    let mut cfg = SimConfig::fast();
    cfg.project_network = true;
    let mut sim = Sim::start(cfg).await.unwrap();
    let guests = Arc::new(SimGuests::new().unwrap());
    assert!(sim.attach_guests(guests.clone()));
    let cloud = Cloud::start(sim).await;
    let private = cloud
        .first("/network/v2.0/networks?name=private", "networks")
        .await["id"]
        .clone();
    let public = cloud
        .first("/network/v2.0/networks?name=public", "networks")
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ports = Vec::new();
    for name in ["cp-0", "cp-1", "cp-2", "w-0"] {
        let p = cloud
            .call(
                "POST",
                "/network/v2.0/ports",
                Some(json!({"port": {"network_id": private, "name": name}})),
            )
            .await;
        ports.push(p["port"]["id"].as_str().unwrap().to_owned());
    }
    let fip = cloud
        .call(
            "POST",
            "/network/v2.0/floatingips",
            Some(json!({"floatingip": {"floating_network_id": public, "port_id": ports[0]}})),
        )
        .await["floatingip"]["floating_ip_address"]
        .as_str()
        .unwrap()
        .to_owned();
    let spec = |version: &str| {
        let mut c = common::cluster(version, 3, 1);
        c.endpoint.host = fip.clone();
        c.cert_sans = vec![fip.clone()];
        c
    };
    let (old, new) = (spec("1.35.2"), spec("1.36.0"));
    let s = common::secrets_with_ttl(std::time::Duration::from_secs(24 * 3600));
    let image = cloud
        .first("/image/v2/images?name=ubuntu-24.04", "images")
        .await["id"]
        .clone();
    let boot = async |name: &str, c: &kos_bootstrap::ClusterInput, role: Role, port: &str| {
        let ud = base64::engine::general_purpose::STANDARD.encode(common::user_data(c, role, &s));
        let body = json!({"server": {"name": name, "imageRef": image, "flavorRef": "3", "networks": [{"port": port}], "user_data": ud}});
        let id = cloud
            .call("POST", &format!("{P}/servers"), Some(body))
            .await["server"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let console = eventually(180, "the bootstrap's end", || async {
            let c = cloud.console(&id).await;
            (c.contains("kos-bootstrap: bootstrap ok") || c.contains(" failed: ")).then_some(c)
        })
        .await;
        assert!(
            console.contains("kos-bootstrap: bootstrap ok"),
            "{name}: {console}"
        );
    };
    boot("kos-demo-cp-0", &old, Role::InitControlPlane, &ports[0]).await;
    boot("kos-demo-w-0", &old, Role::Worker, &ports[3]).await;
    // kubeadm 1.36 joins the 1.35 cluster at 1.35: the cloud reports its kubelet as too new.
    boot("kos-demo-cp-1", &new, Role::JoinControlPlane, &ports[1]).await;
    let report = cloud.call("GET", "/_sim/clusters", None).await;
    let cp1 = node(&report, "kos-demo-cp-1");
    assert_eq!(
        (&cp1["apiserver"], &cp1["version"]),
        (&json!("v1.35.2"), &json!("v1.36.0")),
        "{report}"
    );
    assert_eq!(node(&report, "kos-demo-w-0")["apiserver"], Value::Null);
    assert_eq!(node(&report, "kos-demo-cp-0")["apiserver"], "v1.35.2");
    let violations = report[0]["violations"].to_string();
    assert!(
        violations
            .contains("kubelet v1.36.0 of kos-demo-cp-1 is newer than kube-apiserver v1.35.2"),
        "{report}"
    );

    // An admin client through the endpoint: the API server behind it answers /version with its
    // own version; the client sets the ClusterConfiguration's kubernetesVersion (Cluster API's
    // UpdateKubernetesVersionInKubeadmConfigMap).
    let eps = cloud.call("GET", "/_sim/kube-endpoints", None).await;
    let endpoint = format!("{fip}:6443");
    let local = eps
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == endpoint.as_str())
        .unwrap()["local"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = kube::Client::try_from(admin_config(&s, &local, &fip)).unwrap();
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(
        (
            info.major.as_str(),
            info.minor.as_str(),
            info.git_version.as_str()
        ),
        ("1", "35", "v1.35.2")
    );
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "kube-system");
    let mut cm = cms.get("kubeadm-config").await.unwrap();
    let data = cm.data.as_mut().unwrap();
    let text = data["ClusterConfiguration"].clone();
    assert!(text.contains("kubernetesVersion: v1.35.2\n"), "{text}");
    data.insert(
        "ClusterConfiguration".into(),
        text.replace(
            "kubernetesVersion: v1.35.2\n",
            "kubernetesVersion: v1.36.0\n",
        ),
    );
    cms.replace("kubeadm-config", &Default::default(), &cm)
        .await
        .unwrap();

    boot("kos-demo-cp-2", &new, Role::JoinControlPlane, &ports[2]).await;
    let report = cloud.call("GET", "/_sim/clusters", None).await;
    assert_eq!(node(&report, "kos-demo-cp-2")["apiserver"], "v1.36.0");
    assert_eq!(node(&report, "kos-demo-cp-1")["apiserver"], "v1.35.2");
    let violations = report[0]["violations"].to_string();
    assert!(
        !violations.contains("more than one minor apart"),
        "{report}"
    );
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");
    let p = pods.get("kube-apiserver-kos-demo-cp-2").await.unwrap();
    assert_eq!(
        p.spec.unwrap().containers[0].image.as_deref(),
        Some("registry.k8s.io/kube-apiserver:v1.36.0")
    );
}
