//! The guest attached to kos-sim: servers booted through Nova with kos's real user_data make a
//! cluster whose API is served over TLS with the cluster's CA and reached from this machine through
//! the endpoint's local address, and by curl at the endpoint itself through the simulator's CONNECT
//! proxy; the CCM the addons deploy runs against it, initialises the nodes
//! and gives a LoadBalancer Service an Octavia load balancer; the whole state survives a save and
//! a new process's restore.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod sim_cloud;

use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use kos_bootstrap::{Ccm, ClusterSecrets, Role};
use kos_guest::sim::SimGuests;
use kos_sim::{Sim, SimConfig};
use serde_json::{Value, json};

use sim_cloud::*;

/// An admin client of the cluster (see [`admin_config`]).
fn admin(s: &ClusterSecrets, local: &str, endpoint_host: &str) -> kube::Client {
    kube::Client::try_from(admin_config(s, local, endpoint_host)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_forms_in_the_simulated_cloud_and_its_ccm_runs_in_it() {
    let mut cfg = SimConfig::fast();
    cfg.project_network = true;
    let mut sim = Sim::start(cfg.clone()).await.unwrap();
    let guests = Arc::new(SimGuests::new().unwrap());
    assert!(sim.attach_guests(guests.clone()));
    let cloud = Cloud::start(sim).await;

    // The network devstack has, a port for the control plane and its floating IP: the endpoint.
    let private = cloud
        .first("/network/v2.0/networks?name=private", "networks")
        .await["id"]
        .clone();
    let subnet = cloud
        .first("/network/v2.0/subnets?name=private-subnet", "subnets")
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let public = cloud
        .first("/network/v2.0/networks?name=public", "networks")
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cp_port = cloud
        .call(
            "POST",
            "/network/v2.0/ports",
            Some(json!({"port": {"network_id": private, "name": "cp"}})),
        )
        .await["port"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let fip = cloud
        .call(
            "POST",
            "/network/v2.0/floatingips",
            Some(json!({"floatingip": {"floating_network_id": public, "port_id": cp_port}})),
        )
        .await["floatingip"]["floating_ip_address"]
        .as_str()
        .unwrap()
        .to_owned();
    let cred = cloud
        .call(
            "POST",
            &format!("/identity/v3/users/{}/application_credentials", cloud.user),
            Some(json!({"application_credential": {"name": "ccm"}})),
        )
        .await;

    let mut c = common::cluster("1.36.4", 1, 1);
    c.endpoint.host = fip.clone();
    c.cert_sans = vec![fip.clone()];
    c.ccm = Ccm::Upstream;
    c.cloud.auth_url = cloud.sim.auth_url();
    c.cloud.application_credential_id = cred["application_credential"]["id"]
        .as_str()
        .unwrap()
        .into();
    c.cloud.application_credential_secret =
        secrecy::SecretString::from(cred["application_credential"]["secret"].as_str().unwrap());
    c.cloud.floating_network_id = public.clone();
    c.cloud.subnet_id = subnet.clone();
    // A day of the cloud's time: it runs a thousand times faster than this machine, and kos's
    // default two hours (seven real seconds) ran out before a late join on a loaded CI machine.
    let s = common::secrets_with_ttl(std::time::Duration::from_secs(24 * 3600));
    let image = cloud
        .first("/image/v2/images?name=ubuntu-24.04", "images")
        .await["id"]
        .clone();
    let boot = |name: &str, role: Role, nic: Value| {
        let ud = base64::engine::general_purpose::STANDARD.encode(common::user_data(&c, role, &s));
        json!({"server": {"name": name, "imageRef": image, "flavorRef": "3", "networks": [nic], "user_data": ud}})
    };
    let cp = cloud
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(boot(
                "kos-demo-cp-0",
                Role::InitControlPlane,
                json!({"port": cp_port}),
            )),
        )
        .await["server"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let worker = cloud
        .call(
            "POST",
            &format!("{P}/servers"),
            Some(boot("kos-demo-w-0", Role::Worker, json!({"uuid": private}))),
        )
        .await["server"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Both bootstraps finish on the console, as the script writes them.
    for id in [&cp, &worker] {
        let console = eventually(120, "the bootstrap markers", || async {
            let c = cloud.console(id).await;
            (c.contains("kos-bootstrap: bootstrap ok") || c.contains(" failed: ")).then_some(c)
        })
        .await;
        assert!(console.contains("kos-bootstrap: bootstrap ok"), "{console}");
        assert!(!console.contains("simulated cloud"), "{console}");
    }

    // The endpoint's local address, from the admin API.
    let endpoint = format!("{fip}:6443");
    let eps = cloud.call("GET", "/_sim/kube-endpoints", None).await;
    let local = eps
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == endpoint.as_str())
        .unwrap_or_else(|| panic!("{endpoint} in {eps}"))["local"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = admin(&s, &local, &fip);
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());

    // kos-ccm (running for `ccm: upstream`) initialises both nodes: providerID, addresses, no taint.
    let initialised = eventually(120, "nodes Ready and initialised", || async {
        let list = nodes.list(&Default::default()).await.ok()?;
        let done = list.items.len() == 2
            && list.items.iter().all(|n| {
                let ready = kos_guest::kubelet::ready_status(n) == Some("True");
                let tainted = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| {
                        ts.iter()
                            .any(|t| t.key == kos_guest::kubelet::UNINITIALIZED_TAINT)
                    });
                let addressed = n
                    .status
                    .as_ref()
                    .and_then(|s| s.addresses.as_ref())
                    .is_some_and(|a| !a.is_empty());
                ready && !tainted && addressed
            });
        done.then_some(list.items)
    })
    .await;
    // This machine's clock when the nodes were seen Ready: their conditions were stamped before.
    let seen_ready = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut pids: Vec<String> = initialised
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.clone())
        .collect();
    pids.sort();
    let mut want = vec![
        format!("openstack:///{cp}"),
        format!("openstack:///{worker}"),
    ];
    want.sort();
    assert_eq!(pids, want);
    let status = guests.ccm_status();
    assert!(
        status.values().any(|s| s.starts_with("running")),
        "{status:?}"
    );

    // A client kos did not write (curl) reaches the API at the endpoint itself, not routable here,
    // through the simulator's CONNECT proxy, verifying the serving certificate for the floating IP.
    let proxy = cloud.call("GET", "/_sim/proxy", None).await["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(proxy, cloud.sim.proxy_url());
    let (code, body) = curl_through(&proxy, &s, &endpoint, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = curl_through(&proxy, &s, &endpoint, "/api/v1/nodes").await;
    assert_eq!(code, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2), "{body}");

    // The cluster's date is the cloud's, the one its `Date` header shows, though that runs a
    // thousand times faster than this machine's: a token whose expiration kos wrote ten minutes
    // past the cloud's now is expired two real seconds later (2000 s of the cloud's) and
    // cleaned, one ten hours past it is kept, and the Nodes' conditions carry the cloud's date.
    // Before, the guest dated everything by this machine's clock while the cloud's servers
    // (Nova's `created`) and its `Date` said otherwise, and a Node NotReady for a second looked
    // NotReady for hours to anyone judging by the cloud's clock.
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), "kube-system");
    let token = |id: &str, expires: time::OffsetDateTime| -> Secret {
        let expiration = expires
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {"token-id": id, "token-secret": "0123456789abcdef",
                           "expiration": expiration, "usage-bootstrap-authentication": "true",
                           "usage-bootstrap-signing": "true"},
        }))
        .unwrap()
    };
    let date = cloud.date().await;
    for (id, expires) in [
        ("soon01", date + time::Duration::minutes(10)),
        ("later1", date + time::Duration::hours(10)),
    ] {
        secrets
            .create(&Default::default(), &token(id, expires))
            .await
            .unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    eventually(
        60,
        "the token cleaner to delete the token expired by the cloud's clock",
        || async {
            secrets
                .get_opt("bootstrap-token-soon01")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        secrets
            .get_opt("bootstrap-token-later1")
            .await
            .unwrap()
            .is_some(),
        "a token expiring in ten of the cloud's hours was deleted"
    );
    let after = cloud.date().await.unix_timestamp();
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    for n in nodes.list(&Default::default()).await.unwrap() {
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_second())
            .unwrap();
        // Stamped after the cluster formed (the first `Date` above was read after that), by
        // the cloud's clock: this machine's is far behind it by now.
        assert!(
            ready <= after + 1,
            "a Ready condition dated {}s after the cloud's date",
            ready - after
        );
        // Booting and joining took the cloud minutes and this machine seconds.
        assert!(
            ready > seen_ready + 5,
            "a Ready condition dated by this machine's clock ({}s before it saw it), not the \
             cloud's",
            seen_ready - ready
        );
    }

    // A LoadBalancer Service gets an Octavia load balancer and an address.
    let services: kube::Api<Service> = kube::Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                 "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}]},
    }))
    .unwrap();
    services.create(&Default::default(), &svc).await.unwrap();
    let ip = eventually(180, "the Service's external address", || async {
        let s = services.get("web").await.ok()?;
        s.status?.load_balancer?.ingress?.first()?.ip.clone()
    })
    .await;
    let lbs = cloud
        .call("GET", "/load-balancer/v2/lbaas/loadbalancers", None)
        .await;
    let lb = lbs["loadbalancers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| {
            l["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kube_service_demo_default_web"))
        })
        .unwrap_or_else(|| panic!("no LB for the Service: {lbs}"))
        .clone();
    let fips = cloud.call("GET", "/network/v2.0/floatingips", None).await;
    assert!(
        fips["floatingips"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["floating_ip_address"] == ip.as_str()),
        "{ip} is a floating IP of the cloud: {fips}"
    );
    services.delete("web", &Default::default()).await.unwrap();
    let lb_id = lb["id"].as_str().unwrap().to_owned();
    eventually(180, "the Service's load balancer to go", || async {
        let lbs = cloud
            .call("GET", "/load-balancer/v2/lbaas/loadbalancers", None)
            .await;
        (!lbs["loadbalancers"]
            .as_array()?
            .iter()
            .any(|l| l["id"] == lb_id.as_str()))
        .then_some(())
    })
    .await;

    // Saved and restored in a new simulator: the cluster answers again with its nodes.
    let dir = tempfile_dir();
    let state = dir.join("state.json");
    cloud.sim.shutdown_guests().await;
    cloud.sim.save(&state).unwrap();
    let saved_cloud = kos_sim::persist::load(&state).unwrap().unwrap();
    let saved_guests = kos_sim::persist::load_guests(&state).unwrap().unwrap();
    drop(client);
    drop(cloud);
    let mut sim = Sim::serve(cfg, "127.0.0.1:0".parse().unwrap(), Some(saved_cloud))
        .await
        .unwrap();
    let guests = Arc::new(SimGuests::restore(&saved_guests).unwrap());
    assert!(sim.attach_guests(guests.clone()));
    let cloud = Cloud::start(sim).await;
    let local = eventually(60, "the endpoint again", || async {
        let eps = cloud.call("GET", "/_sim/kube-endpoints", None).await;
        eps.as_array()?
            .iter()
            .find(|e| e["endpoint"] == endpoint.as_str())
            .and_then(|e| e["local"].as_str().map(str::to_owned))
    })
    .await;
    let nodes: kube::Api<Node> = kube::Api::all(admin(&s, &local, &fip));
    let list = eventually(60, "the nodes after the restore", || async {
        nodes.list(&Default::default()).await.ok()
    })
    .await;
    assert_eq!(list.items.len(), 2);
    assert!(
        list.items
            .iter()
            .all(|n| kos_guest::kubelet::ready_status(n) == Some("True"))
    );
    // The restored simulator's proxy tunnels to the restored endpoint.
    let (code, body) = curl_through(&cloud.sim.proxy_url(), &s, &endpoint, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `curl --proxy PROXY https://ENDPOINT/PATH` with the cluster's CA and an admin client
/// certificate, as kubectl with `HTTPS_PROXY` would: the status code and the body.
async fn curl_through(
    proxy: &str,
    s: &ClusterSecrets,
    endpoint: &str,
    path: &str,
) -> (u16, String) {
    // Removed on drop, whatever the assertions do (it holds an admin key).
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (cert, key) = kos_bootstrap::pki::sign_client(
        &mut rand::rng(),
        &s.ca,
        kos_bootstrap::pki::CaKind::Cluster,
        kos_bootstrap::kubeconfig::ADMIN_CN,
        &["kubeadm:cluster-admins"],
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let files = [
        ("ca.crt", s.ca.cert_pem.as_str()),
        ("admin.crt", cert.as_str()),
        ("admin.key", key.expose()),
    ];
    for (name, pem) in files {
        std::fs::write(dir.join(name), pem).unwrap();
    }
    let out = tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--proxy", proxy, "--cacert"])
        .arg(dir.join("ca.crt"))
        .arg("--cert")
        .arg(dir.join("admin.crt"))
        .arg("--key")
        .arg(dir.join("admin.key"))
        .args(["--write-out", "\n%{http_code}"])
        .arg(format!("https://{endpoint}{path}"))
        // `--proxy` is the only way out: no NO_PROXY from the environment may bypass it.
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = stdout.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kos-guest-in-sim-{}", kos_sim::ids::hex_id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
