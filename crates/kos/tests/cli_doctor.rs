//! `kos doctor` as a user runs it, against clusters `kos up` made on a `kos sim serve`: a Service load
//! balancer made the way the CCM makes it, a rule deleted by python-openstackclient behind kos's back,
//! and an API listener that admits only the user's CIDRs.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kos_ccm::CloudConfig;
use kos_ccm::lb::{LbSettings, LoadBalancers};
use kos_cloud::model::load_balancer::ListenerUpdate;
use kos_cloud::model::network::PortFilter;
use kos_cloud::{CloudProfile, Env, Session};
use serde_json::Value;
use support::*;

const NODE_PORT: i32 = 31080;
const HEALTH_CHECK_NODE_PORT: i32 = 32100;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn session(clouds: &Path) -> Session {
    let profile = CloudProfile::load(&Env::process(), Some("sim"), Some(clouds)).expect("profile");
    Session::connect(&profile).await.expect("session")
}

fn up(d: &Path, served: &Served, spec: &Path) {
    let o = kos(
        d,
        Some(&served.clouds),
        &["up", "-f", spec.to_str().expect("utf8"), "--cloud", "sim"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
}

/// `kos doctor demo -f spec --output json`: the exit code and the report.
fn doctor(d: &Path, served: &Served, spec: &Path) -> (i32, Value) {
    let o = kos(
        d,
        Some(&served.clouds),
        &[
            "doctor",
            "demo",
            "--cloud",
            "sim",
            "-f",
            spec.to_str().expect("utf8"),
            "--output",
            "json",
        ],
    );
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON ({e}): {}", text(&o)));
    (code(&o), v)
}

fn flows<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    report["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .flat_map(|s| s["flows"].as_array().expect("flows"))
        .filter(|f| f["name"] == name)
        .collect()
}

fn status(flow: &Value) -> &str {
    flow["verdict"]["status"].as_str().unwrap_or_default()
}

fn evidence(flow: &Value) -> Vec<String> {
    flow["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter_map(|e| e.as_str().map(str::to_owned))
        .collect()
}

/// The minimal example with its API endpoint changed.
fn spec_with(d: &Path, name: &str, endpoint: &str) -> PathBuf {
    let spec = std::fs::read_to_string(example("minimal.yaml"))
        .expect("example")
        .replace("  apiEndpoint:\n    type: floatingIP\n", endpoint);
    let p = d.join(name);
    std::fs::write(&p, spec).expect("write spec");
    p
}

/// The cloud.conf kos rendered for the cluster's CCM, read back from the first control plane's
/// user_data (the `kube-system/cloud-config` Secret it applies).
async fn rendered_cloud_conf(base: &str) -> String {
    let state: Value = reqwest::get(format!("{base}/_sim/state"))
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    let user_data = state["nova"]["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|s| s["name"] == "kos-demo-cp-0" && s["vm_state"] != "deleted")
        .and_then(|s| s["user_data_decoded"].as_str())
        .expect("cp-0's user_data");
    let doc: Value = serde_saphyr::from_str(user_data).expect("cloud-config YAML");
    let secret = doc["write_files"]
        .as_array()
        .expect("write_files")
        .iter()
        .find(|f| f["path"] == "/etc/kos/addons/00-cloud-config-secret.yaml")
        .and_then(|f| f["content"].as_str())
        .expect("the cloud-config Secret");
    let secret: Value = serde_saphyr::from_str(secret).expect("Secret YAML");
    secret["stringData"]["cloud.conf"]
        .as_str()
        .expect("cloud.conf")
        .to_owned()
}

fn worker(name: &str, ip: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `default/web`, type LoadBalancer, port 80 on NodePort 31080, externalTrafficPolicy Local (so the
/// CCM adds an HTTP monitor on the health-check NodePort).
fn web() -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("00000000-0000-4000-8000-00000000d0c7".into()),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            external_traffic_policy: Some("Local".into()),
            health_check_node_port: Some(HEALTH_CHECK_NODE_PORT),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                node_port: Some(NODE_PORT),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: Some(ServiceStatus::default()),
    }
}

/// The Service's load balancer, made as the cluster's CCM makes it: kos-ccm's Service core with the
/// cloud.conf kos rendered, the workers as members, passes until converged.
async fn make_service_lb(served: &Served) {
    let s = session(&served.clouds).await;
    let conf = rendered_cloud_conf(&served.base).await;
    let config = CloudConfig::parse("cloud.conf", &conf)
        .expect("kos's cloud.conf")
        .config;
    let ports = s
        .network()
        .list_ports(&PortFilter::default())
        .await
        .expect("ports");
    let nodes: Vec<Node> = ["workers-0", "workers-1"]
        .iter()
        .map(|w| {
            let p = ports
                .iter()
                .find(|p| p.name == format!("kos-demo-port-{w}"))
                .unwrap_or_else(|| panic!("{w}'s port"));
            worker(&format!("kos-demo-{w}"), &p.fixed_ips[0].ip_address)
        })
        .collect();
    let lbs = LoadBalancers::new(
        s.clone(),
        Arc::new(config),
        LbSettings {
            pending_requeue: Duration::from_millis(100),
            ..LbSettings::new("demo")
        },
    );
    let mut svc = web();
    for _ in 0..600 {
        let o = lbs.ensure_service(&svc, &nodes).await.expect("ensure");
        let ann = svc.metadata.annotations.get_or_insert_with(BTreeMap::new);
        ann.extend(o.annotations.clone());
        if o.converged {
            return;
        }
        tokio::time::sleep(o.requeue_after.unwrap_or(Duration::from_millis(100))).await;
    }
    panic!("the Service's load balancer never converged");
}

#[test]
fn doctor_follows_a_service_load_balancer_to_its_node_ports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let spec = example("minimal.yaml");
    up(d, &served, &spec);

    let (code, report) = doctor(d, &served, &spec);
    assert_eq!(code, 0, "a fresh minimal cluster passes: {report:#}");
    assert_eq!(flows(&report, "node → API").len(), 3, "{report:#}");
    assert!(
        flows(&report, "IP-in-IP")
            .iter()
            .all(|f| status(f) == "allowed"),
        "calico's IP-in-IP is checked with the spec: {report:#}"
    );

    runtime().block_on(make_service_lb(&served));
    let rt = runtime();
    rt.block_on(async {
        reqwest::Client::new()
            .delete(format!("{}/_sim/counters", served.base))
            .send()
            .await
            .expect("reset counters")
    });
    let (code, report) = doctor(d, &served, &spec);
    let counters: Value = rt.block_on(async {
        reqwest::get(format!("{}/_sim/counters", served.base))
            .await
            .expect("counters")
            .json()
            .await
            .expect("json")
    });
    // Lists only: one per Neutron resource type, one per Octavia type, one member list per pool (the
    // Service's one pool); never a GET of one object.
    let api_calls = |service: &str, prefix: &str| -> BTreeMap<String, u64> {
        counters["services"][service]["by_operation"]
            .as_object()
            .expect("by_operation")
            .iter()
            .filter(|(op, _)| op.starts_with(prefix))
            .map(|(op, n)| (op.clone(), n.as_u64().unwrap_or_default()))
            .collect()
    };
    let neutron = api_calls("network", "GET /network/v2.0/");
    let octavia = api_calls("load-balancer", "GET /load-balancer/v2/lbaas/");
    assert_eq!(
        (neutron.len(), neutron.values().sum::<u64>()),
        (6, 6),
        "{neutron:?}"
    );
    assert_eq!(
        (octavia.len(), octavia.values().sum::<u64>()),
        (5, 5),
        "{octavia:?}"
    );
    assert!(
        neutron
            .keys()
            .chain(octavia.keys())
            .all(|op| !op.ends_with("{id}")),
        "{neutron:?} {octavia:?}"
    );
    let data = flows(&report, "LB → NodePort");
    let checks = flows(&report, "LB → NodePort (health check HTTP)");
    assert_eq!(
        (data.len(), checks.len()),
        (2, 2),
        "one data and one health-check flow per worker: {report:#}"
    );
    for f in data.iter().chain(&checks) {
        let port = if f["name"] == "LB → NodePort" {
            NODE_PORT
        } else {
            HEALTH_CHECK_NODE_PORT
        };
        assert!(
            f["from"]
                .as_str()
                .unwrap_or_default()
                .contains("octavia-lb-vrrp-"),
            "the amphora's own port is the source: {f:#}"
        );
        // sg-node admits NodePorts only from its own members: what lets the amphora in is the
        // Service's own group, which the CCM makes because kos's cloud.conf has
        // `manage-security-groups = true` (before, this flow was blocked and every Service dark).
        assert_eq!(status(f), "allowed", "{f:#}");
        assert!(
            evidence(f)
                .iter()
                .any(|e| e.starts_with("security group lb-sg-")
                    && e.contains(&format!("admits tcp/{port} from 10.0.0."))
                    && e.contains("(amphora port octavia-lb-vrrp-")
                    && e.contains("of LB kube_service_demo_default_web)")),
            "names the CCM's rule: {f:#}"
        );
    }
    assert_eq!(code, 0, "exit code: {report:#}");

    // The text table says the same, grouped under the Service.
    let o = kos(
        d,
        Some(&served.clouds),
        &["doctor", "demo", "--cloud", "sim"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Service default/web (load balancer kube_service_demo_default_web)"),
        "{}",
        text(&o)
    );
    assert!(
        out.contains("pass -f to check the CNI's traffic"),
        "without the spec the CNI is not checked: {}",
        text(&o)
    );
}

/// Deletes one security group rule with python-openstackclient.
fn delete_rule(served: &Served, home: &Path, id: &str) {
    let o = Command::new(openstack_cli())
        .args(["security", "group", "rule", "delete", id])
        .env("OS_CLIENT_CONFIG_FILE", &served.clouds)
        .env("OS_CLOUD", "sim")
        .env("HOME", home)
        .output()
        .expect("openstack runs");
    assert!(
        o.status.success(),
        "openstack security group rule delete {id}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The id in `… rule <id> (ingress …`.
fn ingress_rule_ids(flow: &Value) -> Vec<String> {
    evidence(flow)
        .iter()
        .filter(|e| e.contains("(ingress "))
        .flat_map(|e| {
            e.split(" rule ")
                .skip(1)
                .filter_map(|r| r.split_whitespace().next().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_rule_deleted_behind_kos_s_back_turns_its_flow_red() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let spec = example("minimal.yaml");
    up(d, &served, &spec);
    let home = tempfile::tempdir().expect("home");

    // Delete whatever admits the nodes' traffic to the API, as the report names it, until nothing does.
    let mut deleted = Vec::new();
    for _ in 0..5 {
        let (code, report) = doctor(d, &served, &spec);
        let flow = flows(&report, "node → API")
            .into_iter()
            .find(|f| {
                f["from"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("workers-0"))
            })
            .cloned()
            .expect("workers-0 → API");
        if status(&flow) == "blocked" {
            assert_eq!(code, 2, "{report:#}");
            assert!(!deleted.is_empty());
            assert!(
                evidence(&flow).iter().any(|e| e.starts_with(
                    "no ingress rule on any security group of port kos-demo-port-cp-0"
                ) && e.contains("admits tcp/6443 from 172.24.4.")
                    && e.contains("router kos-demo-router's gateway")),
                "names the flow's missing rule: {flow:#}"
            );
            return;
        }
        assert_eq!(status(&flow), "allowed", "{flow:#}");
        assert_eq!(code, 0, "{report:#}");
        let ids = ingress_rule_ids(&flow);
        assert!(!ids.is_empty(), "an allowed flow names its rule: {flow:#}");
        for id in ids {
            delete_rule(&served, home.path(), &id);
            deleted.push(id);
        }
    }
    panic!("the node → API flow stayed allowed after deleting {deleted:?}");
}

#[test]
fn allowed_cidrs_that_exclude_the_nodes_lock_them_out_of_the_api_naming_the_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let served = serve(d);
    let spec = spec_with(
        d,
        "locked.yaml",
        "  apiEndpoint:\n    type: loadBalancer\n    allowedCIDRs: [198.51.100.0/24]\n",
    );
    up(d, &served, &spec);
    // What kos's listener admits before the listener fix: the user's CIDRs only. Set explicitly, so
    // this test keeps checking doctor (not kos up) once kos adds the nodes' sources.
    runtime().block_on(async {
        let s = session(&served.clouds).await;
        let lb = s.load_balancer();
        let listener = lb
            .list_project_listeners()
            .await
            .expect("listeners")
            .into_iter()
            .find(|l| l.name == "kos-demo-api-listener")
            .expect("kos's API listener");
        lb.update_listener(
            &listener.id,
            &ListenerUpdate {
                allowed_cidrs: Some(vec!["198.51.100.0/24".into()]),
                ..Default::default()
            },
        )
        .await
        .expect("listener update");
    });

    let (code, report) = doctor(d, &served, &spec);
    assert_eq!(code, 2, "{report:#}");
    let to_api = flows(&report, "node → API");
    assert_eq!(to_api.len(), 3, "{report:#}");
    for f in to_api {
        assert_eq!(status(f), "blocked", "{f:#}");
        assert!(
            evidence(f).iter().any(|e| e.contains(
                "listener kos-demo-api-listener of LB kos-demo-api-lb admits only 198.51.100.0/24"
            ) && e.contains("172.24.4.")),
            "names the listener and the router's address: {f:#}"
        );
    }
    let clients = flows(&report, "clients → API");
    assert_eq!(clients.len(), 1, "{report:#}");
    assert_eq!(status(clients[0]), "allowed", "{report:#}");
    // The amphora reaches the control plane from its port on the node subnet, which sg-cp admits.
    let lb_to_cp = flows(&report, "API LB → control plane");
    assert_eq!(lb_to_cp.len(), 1, "{report:#}");
    assert_eq!(status(lb_to_cp[0]), "allowed", "{report:#}");
}

#[test]
fn doctor_refuses_a_spec_of_another_cluster_and_an_unknown_cluster() {
    let data = tempfile::tempdir().expect("tempdir");
    let d = data.path();
    // A short path: miette wraps long ones.
    let spec = d.join("demo.yaml");
    std::fs::copy(example("minimal.yaml"), &spec).expect("copy");
    let o = kos(
        d,
        None,
        &[
            "doctor",
            "other",
            "--cloud",
            "sim",
            "-f",
            spec.to_str().expect("utf8"),
        ],
    );
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("demo.yaml is the spec of cluster `demo`"),
        "{}",
        text(&o)
    );
    let o = kos(d, None, &["doctor", "nosuch", "--cloud", "sim"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no cluster nosuch here"),
        "{}",
        text(&o)
    );
}
