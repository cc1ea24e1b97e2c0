//! Day two through the real protocols (issue 11): a kube-rs client written here, not kos's,
//! finds the etcd mirror pods of a simulated 3-control-plane cluster, port-forwards to
//! `etcd-<node>` port 2379, speaks TLS with a client certificate from the etcd CA and etcd's JSON
//! gateway: lists the members, reads the status, removes one (that node's etcd stops serving),
//! fails to remove an unknown one; a certificate from another CA is refused in the handshake. A
//! control plane re-created on the same address joins again once its member was removed, and
//! fails as etcd would while its old member is still there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod sim_cloud;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kos_bootstrap::pki::{CaKind, CaPair};
use kos_bootstrap::{ClusterSecrets, Role};
use kos_guest::sim::SimGuests;
use kos_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use sim_cloud::*;

/// A client without kube-rs's default retry of 429/503/504 (minutes of back-off).
fn no_retry(client_config: kube::Config) -> kube::Client {
    let mut c = client_config;
    c.default_retry = false;
    kube::Client::try_from(c).unwrap()
}

/// A TLS client config for etcd: trusts the etcd CA, presents a client certificate from `signer`.
fn etcd_tls(s: &ClusterSecrets, signer: &CaPair, kind: CaKind) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (cert, key) = kos_bootstrap::pki::sign_client(
        &mut rand::rng(),
        signer,
        kind,
        "kube-etcd-healthcheck-client",
        &[],
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(s.etcd_ca.cert_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).unwrap(),
        )
        .unwrap();
    Arc::new(config)
}

/// One etcd gateway call through `pods/portforward` of `pod`: (HTTP status, JSON body), or why it
/// failed (the port's error, the handshake).
async fn etcd(
    pods: &kube::Api<Pod>,
    pod: &str,
    tls: Arc<rustls::ClientConfig>,
    path: &str,
    body: Value,
) -> Result<(u16, Value), String> {
    let mut pf = pods
        .portforward(pod, &[2379])
        .await
        .map_err(|e| e.to_string())?;
    let stream = pf.take_stream(2379).unwrap();
    let mut error = Box::pin(pf.take_error(2379).unwrap());
    let connector = tokio_rustls::TlsConnector::from(tls);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let handshake = tokio::time::timeout(Duration::from_secs(60), connector.connect(name, stream));
    let mut tls = tokio::select! {
        r = handshake => match r {
            Ok(Ok(t)) => t,
            // A refused port closes the stream too: its error text, when there is one, says why.
            Ok(Err(e)) => {
                return match tokio::time::timeout(Duration::from_secs(5), &mut error).await {
                    Ok(Some(msg)) => Err(format!("port-forward: {msg}")),
                    _ => Err(format!("TLS: {e}")),
                };
            }
            Err(_) => return Err("TLS: timed out".into()),
        },
        e = &mut error => return Err(format!("port-forward: {}", e.unwrap_or_default())),
    };
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost:2379\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    // etcd's close may come without close_notify through the tunnel: what was read counts.
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no response: {text:?}"))?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = serde_json::from_str(rest).map_err(|e| format!("{e}: {rest:?}"))?;
    Ok((status, json))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_is_reached_through_the_api_server_and_a_member_removed_as_cluster_api_does() {
    let mut cfg = SimConfig::fast();
    cfg.project_network = true;
    let mut sim = Sim::start(cfg.clone()).await.unwrap();
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
    for i in 0..3 {
        let p = cloud
            .call(
                "POST",
                "/network/v2.0/ports",
                Some(json!({"port": {"network_id": private, "name": format!("cp-{i}")}})),
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
    // More nodes expected than booted: the join token stays for the re-created control planes.
    let mut c = common::cluster("1.36.4", 3, 3);
    c.endpoint.host = fip.clone();
    c.cert_sans = vec![fip.clone()];
    // A day of the cloud's time: it runs a thousand times faster than this machine, and kos's
    // default two hours (seven real seconds) ran out before a late join on a loaded CI machine.
    let s = common::secrets_with_ttl(Duration::from_secs(24 * 3600));
    let image = cloud
        .first("/image/v2/images?name=ubuntu-24.04", "images")
        .await["id"]
        .clone();
    let boot = async |name: &str, role: Role, port: &str| -> String {
        let ud = base64::engine::general_purpose::STANDARD.encode(common::user_data(&c, role, &s));
        let body = json!({"server": {"name": name, "imageRef": image, "flavorRef": "3", "networks": [{"port": port}], "user_data": ud}});
        cloud
            .call("POST", &format!("{P}/servers"), Some(body))
            .await["server"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let outcome = async |id: &str| -> String {
        eventually(180, "the bootstrap's end", || async {
            let c = cloud.console(id).await;
            (c.contains("kos-bootstrap: bootstrap ok") || c.contains(" failed: ")).then_some(c)
        })
        .await
    };
    let mut cps = vec![boot("kos-demo-cp-0", Role::InitControlPlane, &ports[0]).await];
    for (i, port) in ports.iter().enumerate().skip(1) {
        cps.push(boot(&format!("kos-demo-cp-{i}"), Role::JoinControlPlane, port).await);
    }
    for id in &cps {
        let console = outcome(id).await;
        assert!(console.contains("kos-bootstrap: bootstrap ok"), "{console}");
    }

    let endpoint = format!("{fip}:6443");
    let eps = cloud.call("GET", "/_sim/kube-endpoints", None).await;
    let local = eps
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == endpoint.as_str())
        .unwrap()["local"]
        .as_str()
        .unwrap()
        .to_owned();
    let admin_config = admin_config(&s, &local, &fip);
    let client = no_retry(admin_config);
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");

    // kubeadm's etcd mirror pods, one per control plane, found as kos finds them.
    let etcd_pods = pods
        .list(&kube::api::ListParams::default().labels("component=etcd"))
        .await
        .unwrap();
    let mut names: Vec<String> = etcd_pods
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "etcd-kos-demo-cp-0",
            "etcd-kos-demo-cp-1",
            "etcd-kos-demo-cp-2"
        ]
    );
    for p in &etcd_pods.items {
        let labels = p.metadata.labels.clone().unwrap();
        assert_eq!(labels["tier"], "control-plane");
        let node = p.spec.as_ref().unwrap().node_name.clone().unwrap();
        assert_eq!(p.metadata.name.clone().unwrap(), format!("etcd-{node}"));
        assert!(
            p.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key("kubernetes.io/config.mirror")
        );
    }
    for component in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let l = pods
            .list(&kube::api::ListParams::default().labels(&format!("component={component}")))
            .await
            .unwrap();
        assert_eq!(l.items.len(), 3, "{component}");
    }

    let good = etcd_tls(&s, &s.etcd_ca, CaKind::Etcd);
    let (code, list) = etcd(
        &pods,
        "etcd-kos-demo-cp-0",
        good.clone(),
        "/v3/cluster/member/list",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{list}");
    let members = list["members"].as_array().unwrap().clone();
    assert_eq!(members.len(), 3, "{list}");
    assert!(
        list["header"]["cluster_id"]
            .as_str()
            .is_some_and(|c| c.parse::<u64>().is_ok())
    );
    let member = |name: &str| {
        members
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {members:?}"))
            .clone()
    };
    let m2 = member("kos-demo-cp-2");
    assert!(
        m2["peerURLs"][0].as_str().unwrap().ends_with(":2380"),
        "{m2}"
    );
    assert_eq!(m2["isLearner"], false);

    let (code, st) = etcd(
        &pods,
        "etcd-kos-demo-cp-1",
        good.clone(),
        "/v3/maintenance/status",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{st}");
    assert!(st["version"].as_str().unwrap().starts_with("3.6."), "{st}");
    assert_ne!(st["leader"], "0");
    assert_eq!(st["header"]["member_id"], member("kos-demo-cp-1")["ID"]);

    // A client certificate from another CA (the cluster's) is refused in the handshake.
    let foreign = etcd_tls(&s, &s.ca, CaKind::Cluster);
    let e = etcd(
        &pods,
        "etcd-kos-demo-cp-0",
        foreign,
        "/v3/cluster/member/list",
        json!({}),
    )
    .await
    .unwrap_err();
    assert!(e.starts_with("TLS") || e.starts_with("no response"), "{e}");

    // Removing cp-2's member: two left, cp-2's etcd no longer serves.
    let (code, removed) = etcd(
        &pods,
        "etcd-kos-demo-cp-0",
        good.clone(),
        "/v3/cluster/member/remove",
        json!({"ID": m2["ID"]}),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{removed}");
    assert_eq!(removed["members"].as_array().unwrap().len(), 2, "{removed}");
    let e = etcd(
        &pods,
        "etcd-kos-demo-cp-2",
        good.clone(),
        "/v3/maintenance/status",
        json!({}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("connection refused"), "{e}");
    let (code, nf) = etcd(
        &pods,
        "etcd-kos-demo-cp-0",
        good.clone(),
        "/v3/cluster/member/remove",
        json!({"ID": m2["ID"]}),
    )
    .await
    .unwrap();
    assert_eq!(code, 404, "{nf}");
    assert_eq!(nf["message"], "etcdserver: member not found");

    // The cloud's view: cp-2's member was removed while it ran, as Cluster API removes a machine's
    // right before deleting it: its etcd stopped, and its API server with it. That is a machine on
    // its way out, not a control plane that joined without a member: no violation.
    let report = cloud.call("GET", "/_sim/clusters", None).await;
    assert_eq!(
        report[0]["etcd"]["members"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    assert_eq!(report[0]["violations"], json!([]), "{report}");
    assert_eq!(report[0]["etcd"]["members"].as_array().unwrap().len(), 2);

    // cp-2 re-created on its address joins again (its member was removed) ...
    cloud
        .call("DELETE", &format!("{P}/servers/{}", cps[2]), None)
        .await;
    eventually(120, "cp-2 gone", || async {
        let r = cloud
            .http
            .get(format!("{}{P}/servers/{}", cloud.sim.base_url(), cps[2]))
            .header("x-auth-token", &cloud.token)
            .send()
            .await
            .ok()?;
        (r.status() == 404).then_some(())
    })
    .await;
    let cp2 = boot("kos-demo-cp-2", Role::JoinControlPlane, &ports[2]).await;
    let console = outcome(&cp2).await;
    assert!(console.contains("kos-bootstrap: bootstrap ok"), "{console}");

    // ... while cp-1, re-created with its old member still registered, fails as etcd would.
    cloud
        .call("DELETE", &format!("{P}/servers/{}", cps[1]), None)
        .await;
    eventually(120, "cp-1 gone", || async {
        let r = cloud
            .http
            .get(format!("{}{P}/servers/{}", cloud.sim.base_url(), cps[1]))
            .header("x-auth-token", &cloud.token)
            .send()
            .await
            .ok()?;
        (r.status() == 404).then_some(())
    })
    .await;
    let cp1 = boot("kos-demo-cp-1", Role::JoinControlPlane, &ports[1]).await;
    let console = outcome(&cp1).await;
    assert!(
        console.contains("failed: ") && console.contains("already exists"),
        "{console}"
    );
    let (_, list) = etcd(
        &pods,
        "etcd-kos-demo-cp-0",
        good,
        "/v3/cluster/member/list",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(list["members"].as_array().unwrap().len(), 3, "{list}");

    // cp-1's member outlives its server past the grace.
    let report = eventually(120, "the stale member's violation", || async {
        let r = cloud.call("GET", "/_sim/clusters", None).await;
        let text = r.to_string();
        text.contains("outlives its server").then_some(r)
    })
    .await;
    let cluster = &report[0];
    let violations = cluster["violations"].to_string();
    assert!(violations.contains("kos-demo-cp-1"), "{violations}");
    assert_eq!(cluster["etcd"]["quorum"], true, "{cluster}");
    let members = cluster["etcd"]["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!(
        members.iter().filter(|m| m["up"] == true).count(),
        2,
        "{cluster}"
    );
    assert!(
        cluster["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["name"] == "kos-demo-cp-0" && n["ready"] == true),
        "{cluster}"
    );
}
