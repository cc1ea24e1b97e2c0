//! The seam to a guest runtime: a recording runtime attached to a simulator sees every server's boot
//! (with its user_data, hostname, zone, addresses and image properties), reboot, stop, start and
//! delete, in time order; its console lines reach `os-getConsoleOutput`; its snapshot is saved next
//! to the cloud's state; and the network it is told about is the cloud's own: floating IPs, load
//! balancers with their listeners' allowed CIDRs, routers.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::{Harness, Resp};
use kos_sim::SimConfig;
use kos_sim::guests::{
    Backend, BootInfo, BoxFuture, GuestEvent, GuestHost, GuestRuntime, KubeEndpoint, Source,
};
use serde_json::{Value, json};

const P: &str = "/compute/v2.1";
const LBAAS: &str = "/load-balancer/v2/lbaas";
const LATEST: Option<(&str, &str)> = Some(("compute", "2.96"));

#[derive(Default)]
struct Recorder {
    /// (cloud seconds, server, event name)
    events: Mutex<Vec<(f64, String, &'static str)>>,
    boots: Mutex<Vec<(String, BootInfo)>>,
}

impl GuestRuntime for Recorder {
    fn handle(&self, host: &mut GuestHost<'_>, server: &str, event: GuestEvent) {
        let name = match &event {
            GuestEvent::Boot(b) => {
                self.boots
                    .lock()
                    .expect("lock")
                    .push((server.to_owned(), b.clone()));
                host.console(server, "recorder: booted");
                "boot"
            }
            GuestEvent::Reboot => "reboot",
            GuestEvent::Shutdown => "shutdown",
            GuestEvent::Start => "start",
            GuestEvent::Delete => "delete",
        };
        self.events
            .lock()
            .expect("lock")
            .push((host.now().0, server.to_owned(), name));
    }
    fn tick(&self, _host: &mut GuestHost<'_>) {}
    fn next_wake(&self) -> Option<kos_sim::SimTime> {
        None
    }
    fn kube_endpoints(&self) -> Vec<KubeEndpoint> {
        vec![KubeEndpoint {
            endpoint: "172.24.4.99:6443".into(),
            local: "127.0.0.1:1".parse().expect("addr"),
        }]
    }
    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(b"{\"recorded\": true}".to_vec())
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

impl Recorder {
    fn events_of(&self, server: &str) -> Vec<&'static str> {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, s, _)| s == server)
            .map(|(_, _, e)| *e)
            .collect()
    }
}

fn id(r: &Resp, key: &str) -> String {
    assert!((200..300).contains(&r.status), "{key}: {}", r.json);
    r.json[key]["id"].as_str().expect("id").to_owned()
}

async fn find(h: &Harness, path: &str, key: &str) -> Value {
    let r = h.call("GET", path, None, None).await;
    r.json[key][0].clone()
}

async fn server(h: &Harness, name: &str, network: &str) -> String {
    let image = find(h, "/image/v2/images?name=ubuntu-24.04", "images").await["id"].clone();
    let ud = base64::engine::general_purpose::STANDARD.encode(b"#cloud-config\n{}\n");
    let body = json!({"server": {"name": name, "imageRef": image, "flavorRef": "1",
        "networks": [{"uuid": network}], "user_data": ud}});
    let r = h
        .call("POST", &format!("{P}/servers"), Some(body), LATEST)
        .await;
    id(&r, "server")
}

async fn wait_server(h: &Harness, id: &str, status: &str) -> Value {
    for _ in 0..4000 {
        let r = h
            .call("GET", &format!("{P}/servers/{id}"), None, LATEST)
            .await;
        if r.json["server"]["status"] == status {
            return r.json["server"].clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("server {id} never reached {status}");
}

async fn port_of(h: &Harness, server: &str) -> Value {
    find(
        h,
        &format!("/network/v2.0/ports?device_id={server}"),
        "ports",
    )
    .await
}

async fn wait_lb(h: &Harness, id: &str) {
    for _ in 0..4000 {
        let r = h
            .call("GET", &format!("{LBAAS}/loadbalancers/{id}"), None, None)
            .await;
        if r.json["loadbalancer"]["provisioning_status"] == "ACTIVE" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("load balancer {id} never became ACTIVE");
}

async fn fip(h: &Harness, port: &str) -> String {
    let public = find(h, "/network/v2.0/networks?name=public", "networks").await["id"].clone();
    let r = h
        .call(
            "POST",
            "/network/v2.0/floatingips",
            Some(json!({"floatingip": {"floating_network_id": public, "port_id": port}})),
            None,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let id = r.json["floatingip"]["id"].as_str().expect("id").to_owned();
    for _ in 0..4000 {
        let f = h
            .call(
                "GET",
                &format!("/network/v2.0/floatingips/{id}"),
                None,
                None,
            )
            .await;
        if f.json["floatingip"]["status"] == "ACTIVE" {
            return f.json["floatingip"]["floating_ip_address"]
                .as_str()
                .expect("address")
                .to_owned();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("floating IP {id} never became ACTIVE");
}

fn reach(h: &Harness, from: &Source, endpoint: &str) -> Vec<Backend> {
    let cloud = h.sim.app().cloud();
    kos_sim::guests::reach::reach(&cloud, from, endpoint)
}

fn at(server: &str) -> Vec<Backend> {
    vec![Backend {
        server: server.to_owned(),
        port: 6443,
    }]
}

#[tokio::test]
async fn an_attached_runtime_sees_every_server_event_and_the_clouds_network() {
    let mut cfg = SimConfig::fast();
    cfg.project_network = true;
    let mut h = Harness::with_config(cfg).await;
    let rec = Arc::new(Recorder::default());
    assert!(h.sim.attach_guests(rec.clone()));
    assert!(!h.sim.attach_guests(rec.clone()), "one runtime per cloud");

    let private = find(&h, "/network/v2.0/networks?name=private", "networks").await;
    let private = private["id"].as_str().expect("private").to_owned();
    let cp = server(&h, "cp", &private).await;
    let worker = server(&h, "worker", &private).await;
    // A network no router connects: nothing outside it is reachable from there.
    let lonely_net = h
        .call(
            "POST",
            "/network/v2.0/networks",
            Some(json!({"network": {"name": "lonely"}})),
            None,
        )
        .await;
    let lonely_net = id(&lonely_net, "network");
    let sub = h
        .call(
            "POST",
            "/network/v2.0/subnets",
            Some(json!({"subnet": {"network_id": lonely_net, "cidr": "192.168.77.0/24", "ip_version": 4}})),
            None,
        )
        .await;
    id(&sub, "subnet");
    let lonely = server(&h, "lonely", &lonely_net).await;
    for s in [&cp, &worker, &lonely] {
        wait_server(&h, s, "ACTIVE").await;
    }

    // Boot: what the metadata service and the image say.
    let boots = rec.boots.lock().expect("lock").clone();
    let (_, b) = boots.iter().find(|(s, _)| s == &cp).expect("cp booted");
    assert_eq!(b.user_data.as_deref(), Some(&b"#cloud-config\n{}\n"[..]));
    assert_eq!(b.hostname, "cp");
    assert!(b.availability_zone.starts_with("nova"), "{b:?}");
    assert_eq!(
        b.image_properties.get("os_distro").map(String::as_str),
        Some("ubuntu")
    );
    let cp_port = port_of(&h, &cp).await;
    let cp_ip = cp_port["fixed_ips"][0]["ip_address"]
        .as_str()
        .expect("ip")
        .to_owned();
    assert_eq!(
        b.addresses,
        vec![cp_ip.parse::<std::net::IpAddr>().expect("ip")]
    );
    // Its console line is the server's.
    let out = h
        .call(
            "POST",
            &format!("{P}/servers/{cp}/action"),
            Some(json!({"os-getConsoleOutput": {}})),
            LATEST,
        )
        .await;
    let console = out.json["output"].as_str().expect("output");
    assert!(console.contains("recorder: booted"), "{console}");
    assert!(
        !console.contains("simulated cloud"),
        "no stand-in boot: {console}"
    );

    // A floating IP on the control plane: from the worker through router1, from the workstation,
    // never from a network without a router.
    let cp_fip = fip(&h, cp_port["id"].as_str().expect("port")).await;
    let ep = format!("{cp_fip}:6443");
    assert_eq!(reach(&h, &Source::Server(worker.clone()), &ep), at(&cp));
    assert_eq!(reach(&h, &Source::Workstation, &ep), at(&cp));
    assert_eq!(reach(&h, &Source::Server(lonely.clone()), &ep), vec![]);
    // A fixed IP: on the same network yes, from the isolated one no.
    let fixed = format!("{cp_ip}:6443");
    assert_eq!(reach(&h, &Source::Server(worker.clone()), &fixed), at(&cp));
    assert_eq!(reach(&h, &Source::Server(lonely.clone()), &fixed), vec![]);

    // A load balancer whose listener admits only an outside range locks the nodes out of its VIP.
    let subnet =
        find(&h, "/network/v2.0/subnets?name=private-subnet", "subnets").await["id"].clone();
    let lb = h
        .call(
            "POST",
            &format!("{LBAAS}/loadbalancers"),
            Some(json!({"loadbalancer": {"name": "api", "vip_subnet_id": subnet, "provider": "amphora",
                "listeners": [{"name": "api", "protocol": "TCP", "protocol_port": 6443,
                    "allowed_cidrs": ["198.51.100.0/24"],
                    "default_pool": {"name": "api", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                        "members": [{"address": cp_ip, "protocol_port": 6443, "subnet_id": subnet}]}}]}})),
            None,
        )
        .await;
    let lb_id = id(&lb, "loadbalancer");
    let vip = lb.json["loadbalancer"]["vip_address"]
        .as_str()
        .expect("vip")
        .to_owned();
    let vip_port = lb.json["loadbalancer"]["vip_port_id"]
        .as_str()
        .expect("vip port")
        .to_owned();
    let listener = lb.json["loadbalancer"]["listeners"][0]["id"]
        .as_str()
        .expect("listener")
        .to_owned();
    let vip_ep = format!("{vip}:6443");
    assert_eq!(
        reach(&h, &Source::Workstation, &vip_ep),
        vec![],
        "not ACTIVE yet"
    );
    wait_lb(&h, &lb_id).await;
    assert_eq!(
        reach(&h, &Source::Server(worker.clone()), &vip_ep),
        vec![],
        "locked out"
    );
    assert_eq!(
        reach(&h, &Source::Workstation, &vip_ep),
        at(&cp),
        "anywhere"
    );
    assert_eq!(
        reach(&h, &Source::Workstation, &format!("{vip}:443")),
        vec![],
        "no listener"
    );

    // The node subnet admitted: the worker reaches the VIP with its own address.
    let r = put(&h, &listener, json!(["198.51.100.0/24", "10.10.0.0/24"])).await;
    assert_eq!(r.status, 200, "{}", r.json);
    wait_lb(&h, &lb_id).await;
    assert_eq!(reach(&h, &Source::Server(worker.clone()), &vip_ep), at(&cp));

    // Through a floating IP on the VIP, the worker's traffic is SNATed to router1's gateway address:
    // the node subnet alone does not admit it, the gateway address does.
    let api_fip = fip(&h, &vip_port).await;
    let fip_ep = format!("{api_fip}:6443");
    assert_eq!(reach(&h, &Source::Server(worker.clone()), &fip_ep), vec![]);
    let router = find(&h, "/network/v2.0/routers?name=router1", "routers").await;
    let gw = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
        .as_str()
        .expect("gateway ip")
        .to_owned();
    let r = put(
        &h,
        &listener,
        json!(["198.51.100.0/24", "10.10.0.0/24", format!("{gw}/32")]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json);
    wait_lb(&h, &lb_id).await;
    assert_eq!(reach(&h, &Source::Server(worker.clone()), &fip_ep), at(&cp));
    assert_eq!(reach(&h, &Source::Workstation, &fip_ep), at(&cp));

    // Power: stop, start, reboot, delete reach the runtime in order; a stopped server is no backend.
    assert_eq!(action(&h, &cp, json!({"os-stop": null})).await.status, 202);
    wait_server(&h, &cp, "SHUTOFF").await;
    assert_eq!(reach(&h, &Source::Workstation, &ep), vec![]);
    assert_eq!(reach(&h, &Source::Workstation, &vip_ep), vec![]);
    assert_eq!(action(&h, &cp, json!({"os-start": null})).await.status, 202);
    wait_server(&h, &cp, "ACTIVE").await;
    assert_eq!(
        action(&h, &cp, json!({"reboot": {"type": "SOFT"}}))
            .await
            .status,
        202
    );
    wait_server(&h, &cp, "ACTIVE").await;
    let r = h
        .call("DELETE", &format!("{P}/servers/{lonely}"), None, LATEST)
        .await;
    assert_eq!(r.status, 204);
    for _ in 0..4000 {
        if rec.events_of(&lonely).contains(&"delete") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(h.sim.app().cloud());
    }
    assert_eq!(rec.events_of(&cp), ["boot", "shutdown", "start", "reboot"]);
    assert_eq!(rec.events_of(&lonely), ["boot", "delete"]);
    let times: Vec<f64> = rec
        .events
        .lock()
        .expect("lock")
        .iter()
        .map(|e| e.0)
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "in time order: {times:?}"
    );

    // The runtime's endpoints through the admin API, and its snapshot next to the cloud's state.
    let eps = h.call("GET", "/_sim/kube-endpoints", None, None).await;
    assert_eq!(
        eps.json,
        json!([{"endpoint": "172.24.4.99:6443", "local": "127.0.0.1:1"}])
    );
    let dir = tempfile_dir();
    let state = dir.join("state.json");
    h.sim.save(&state).expect("saved");
    let saved = kos_sim::persist::load_guests(&state)
        .expect("reads")
        .expect("present");
    assert_eq!(saved, b"{\"recorded\": true}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(kos_sim::persist::guests_path(&state))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn without_a_runtime_there_are_no_kube_endpoints_and_no_snapshot() {
    let h = Harness::new().await;
    let eps = h.call("GET", "/_sim/kube-endpoints", None, None).await;
    assert_eq!(eps.status, 200);
    assert_eq!(eps.json, json!([]));
    let dir = tempfile_dir();
    let state = dir.join("state.json");
    h.sim.save(&state).expect("saved");
    assert!(
        kos_sim::persist::load_guests(&state)
            .expect("reads")
            .is_none()
    );
    let _ = std::fs::remove_dir_all(dir);
}

async fn put(h: &Harness, listener: &str, cidrs: Value) -> Resp {
    h.call(
        "PUT",
        &format!("{LBAAS}/listeners/{listener}"),
        Some(json!({"listener": {"allowed_cidrs": cidrs}})),
        None,
    )
    .await
}

async fn action(h: &Harness, server: &str, body: Value) -> Resp {
    h.call(
        "POST",
        &format!("{P}/servers/{server}/action"),
        Some(body),
        LATEST,
    )
    .await
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kos-sim-guests-{}", kos_sim::ids::hex_id()));
    std::fs::create_dir_all(&d).expect("dir");
    d
}
