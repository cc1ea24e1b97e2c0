//! The route controller's pass against an in-process kos-sim: pod-CIDR routes on the router and
//! allowed address pairs on the nodes' ports; nothing written when nothing changed; routes of
//! nodes that left removed; routes outside the cluster CIDR never touched.

mod support;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
use kos_ccm::route::{Routes, check, host_route};
use kos_cloud::model::network::{FixedIpRequest, HostRoute, PortCreate};
use kos_cloud::{RetryPolicy, ServiceKind, Session};
use kos_sim::{Sim, SimConfig};

struct Cloud {
    sim: Sim,
    session: Session,
    router: String,
    ports: Vec<String>,
    _dir: tempfile::TempDir,
}

/// A network 10.0.0.0/24 on a router, and three node ports 10.0.0.11-13.
async fn cloud() -> Cloud {
    let sim = Sim::start(SimConfig::fast()).await.expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let session = support::connect(&sim, dir.path(), RetryPolicy::fast())
        .await
        .expect("connect");
    let net = session.network();
    let (network, subnet, router) = support::node_network(&session, "10.0.0.0/24", None).await;
    let mut ports = Vec::new();
    for i in 11..=13 {
        let p = net
            .create_port(&PortCreate {
                network_id: network.clone(),
                name: format!("node-{i}"),
                fixed_ips: vec![FixedIpRequest::Address {
                    subnet_id: subnet.clone(),
                    ip_address: format!("10.0.0.{i}"),
                }],
                ..Default::default()
            })
            .await
            .expect("port");
        ports.push(p.id);
    }
    Cloud {
        sim,
        session,
        router,
        ports,
        _dir: dir,
    }
}

fn node(name: &str, pod_cidr: &str, ip: &str) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.spec = Some(NodeSpec {
        pod_cidr: Some(pod_cidr.into()),
        pod_cidrs: Some(vec![pod_cidr.into()]),
        ..Default::default()
    });
    n.status = Some(NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: name.into(),
            },
        ]),
        ..Default::default()
    });
    n
}

fn route(d: &str, n: &str) -> HostRoute {
    host_route(d.parse().expect("destination"), n.parse().expect("nexthop"))
}

async fn router_routes(c: &Cloud) -> Vec<HostRoute> {
    let mut r = c
        .session
        .network()
        .get_router(&c.router)
        .await
        .expect("get")
        .expect("router")
        .routes;
    r.sort_by(|a, b| a.destination.cmp(&b.destination));
    r
}

async fn pairs(c: &Cloud, i: usize) -> Vec<String> {
    c.session
        .network()
        .get_port(&c.ports[i])
        .await
        .expect("get")
        .expect("port")
        .allowed_address_pairs
        .into_iter()
        .map(|a| a.ip_address)
        .collect()
}

fn writes(session: &Session) -> u64 {
    let c = session.counters();
    c.by_operation
        .iter()
        .filter(|((s, op), _)| {
            *s == ServiceKind::Network
                && (op.ends_with(".update")
                    || op.ends_with("_extraroutes")
                    || op.ends_with(".create")
                    || op.ends_with(".delete"))
        })
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test]
async fn routes_follow_the_nodes_and_leave_foreign_routes_alone() {
    let c = cloud().await;
    let net = c.session.network();
    // Someone else's route, outside the cluster CIDR (its nexthop is on the router's subnet).
    net.set_router_routes(&c.router, &[route("192.168.50.0/24", "10.0.0.200")])
        .await
        .expect("foreign route");
    check(&c.session, &c.router).await.expect("router usable");
    let routes = Routes {
        router_id: c.router.clone(),
        cluster_cidr: "10.244.0.0/16".parse().expect("cidr"),
    };
    let nodes = vec![
        node("a", "10.244.1.0/24", "10.0.0.11"),
        node("b", "10.244.2.0/24", "10.0.0.12"),
    ];
    let report = routes.sync(&c.session, &nodes).await.expect("first pass");
    assert_eq!(report.routed, ["a", "b"]);
    assert_eq!(
        router_routes(&c).await,
        [
            route("10.244.1.0/24", "10.0.0.11"),
            route("10.244.2.0/24", "10.0.0.12"),
            route("192.168.50.0/24", "10.0.0.200"),
        ]
    );
    assert_eq!(pairs(&c, 0).await, ["10.244.1.0/24"]);
    assert_eq!(pairs(&c, 1).await, ["10.244.2.0/24"]);
    assert!(pairs(&c, 2).await.is_empty());

    // Nothing changed: nothing written.
    let before = writes(&c.session);
    let report = routes.sync(&c.session, &nodes).await.expect("no-op pass");
    assert!(report.plan.is_empty(), "{:?}", report.plan);
    assert_eq!(writes(&c.session), before);

    // Node b leaves, c joins.
    let nodes = vec![
        node("a", "10.244.1.0/24", "10.0.0.11"),
        node("c", "10.244.3.0/24", "10.0.0.13"),
    ];
    routes.sync(&c.session, &nodes).await.expect("third pass");
    assert_eq!(
        router_routes(&c).await,
        [
            route("10.244.1.0/24", "10.0.0.11"),
            route("10.244.3.0/24", "10.0.0.13"),
            route("192.168.50.0/24", "10.0.0.200"),
        ]
    );
    assert!(
        pairs(&c, 1).await.is_empty(),
        "b's pod CIDR is no longer allowed"
    );
    assert_eq!(pairs(&c, 2).await, ["10.244.3.0/24"]);
}

#[tokio::test]
async fn a_wrong_router_id_is_reported_with_its_fix() {
    let c = cloud().await;
    let e = check(&c.session, "00000000-0000-0000-0000-000000000000")
        .await
        .expect_err("no such router");
    assert!(e.to_string().contains("fix [Route] router-id"), "{e}");
}

/// The controller as the binary runs it: nodes listed from the Kubernetes API, routes made, and the
/// routed nodes marked `NetworkUnavailable=False` once; later passes write nothing anywhere.
#[tokio::test]
async fn the_controller_routes_listed_nodes_and_marks_them_once() {
    use std::sync::Arc;
    use std::time::Duration;

    use kos_ccm::CloudConfig;
    use kos_ccm::context::Context;
    use kube::runtime::events::Reporter;

    let c = cloud().await;
    let fake = kos_kube_fake::FakeKube::start().await.expect("fake API");
    for n in [
        node("a", "10.244.1.0/24", "10.0.0.11"),
        node("b", "10.244.2.0/24", "10.0.0.12"),
    ] {
        fake.insert(&n).expect("node");
    }
    let config = CloudConfig::parse(
        "cloud.conf",
        &format!(
            "[Global]\nauth-url = http://unused.invalid/v3\nusername = u\npassword = p\ntenant-name = t\n\n[Route]\nrouter-id = {}\n",
            c.router
        ),
    )
    .expect("cloud.conf")
    .config;
    let ctx = Arc::new(Context::new(
        c.session.clone(),
        config,
        "kubernetes",
        fake.client().expect("client"),
        Reporter {
            controller: "kos-ccm".into(),
            instance: Some("test".into()),
        },
    ));
    let routes = Routes {
        router_id: c.router.clone(),
        cluster_cidr: "10.244.0.0/16".parse().expect("cidr"),
    };
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(kos_ccm::route::run(
        ctx,
        routes,
        Duration::from_millis(100),
        async {
            let _ = rx.await;
        },
    ));
    let marked = |name: &str| {
        fake.get::<Node>(None, name)
            .ok()
            .flatten()
            .and_then(|n| n.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "NetworkUnavailable"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("RouteCreated")
                })
            })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !(marked("a") && marked("b")) {
        assert!(tokio::time::Instant::now() < deadline, "nodes never marked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        router_routes(&c).await,
        [
            route("10.244.1.0/24", "10.0.0.11"),
            route("10.244.2.0/24", "10.0.0.12"),
        ]
    );
    // Let a pass in flight finish, then count: several more passes change nothing, anywhere.
    let router_gets = || {
        c.sim
            .app()
            .observations()
            .log
            .iter()
            .filter(|e| e.method == "GET" && e.path.contains("/routers/"))
            .count()
    };
    let settle = router_gets() + 2;
    while router_gets() < settle {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (kube_writes, cloud_writes) = (fake.writes().len(), writes(&c.session));
    let later = router_gets() + 3;
    while router_gets() < later {
        assert!(tokio::time::Instant::now() < deadline, "no more passes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.writes().len(), kube_writes, "no Kubernetes write");
    assert_eq!(writes(&c.session), cloud_writes, "no OpenStack write");
    let _ = stop.send(());
    let _ = task.await;
}
