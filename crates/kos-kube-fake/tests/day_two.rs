//! What a day-two client needs of the API, through the real kube-rs client: `pods/portforward`
//! over WebSocket (kube-client's `ws` Portforwarder) to whatever the backend connects a pod's port
//! to, and draining: cordon, the Eviction API, PodDisruptionBudgets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kos_kube_fake::{FakeKube, ForwardError, PodStream, PortForward};
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Port 7 of any pod is an echo server; port 9 of a pod on node `gone` cannot be dialed; anything
/// else is refused.
struct Echo {
    addr: std::net::SocketAddr,
}

impl PortForward for Echo {
    fn connect(
        &self,
        pod: &Value,
        port: u16,
    ) -> BoxFuture<'static, Result<Box<dyn PodStream>, ForwardError>> {
        let addr = self.addr;
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Box::pin(async move {
            if node == "gone" {
                return Err(ForwardError::Unreachable(
                    "dial tcp 10.0.0.9:10250: connect: no route to host".into(),
                ));
            }
            if port != 7 {
                return Err(ForwardError::Refused(format!(
                    "failed to connect to localhost:{port}: connection refused"
                )));
            }
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| ForwardError::Refused(e.to_string()))?;
            Ok(Box::new(s) as Box<dyn PodStream>)
        })
    }
}

async fn echo_server() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A client without kube-rs's default retry policy, which retries a 429 up to 15 times with
/// exponential back-off (minutes): a drain wants the 429 at once.
fn no_retry(fake: &FakeKube) -> kube::Client {
    let mut config = kube::Config::new(fake.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

fn pod(name: &str, node: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portforward_carries_bytes_to_the_backend_and_says_why_a_port_is_refused() {
    let fake = FakeKube::start().await.unwrap();
    fake.set_port_forward(Arc::new(Echo {
        addr: echo_server().await,
    }));
    fake.insert(&pod("echo", "n1", json!({}))).unwrap();
    fake.insert(&pod("far", "gone", json!({}))).unwrap();
    let pods: Api<Pod> = Api::namespaced(fake.client().unwrap(), "default");

    let mut pf = pods.portforward("echo", &[7]).await.unwrap();
    let mut s = pf.take_stream(7).unwrap();
    s.write_all(b"hello etcd").await.unwrap();
    let mut buf = [0u8; 10];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello etcd");
    drop(s);

    // A port nothing listens on: the kubelet's text on the port's error channel.
    let mut pf = pods.portforward("echo", &[8]).await.unwrap();
    let err = pf.take_error(8).unwrap().await.unwrap();
    assert!(
        err.starts_with("error forwarding port 8 to pod echo, uid ")
            && err.ends_with("connection refused"),
        "{err}"
    );

    // No such pod: 404 before any upgrade; a node that cannot be dialed: the apiserver's 500.
    let e = pods.portforward("nope", &[7]).await.err().unwrap();
    assert!(e.to_string().contains("404"), "{e}");
    let e = pods.portforward("far", &[7]).await.err().unwrap();
    assert!(e.to_string().contains("500"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_respect_a_disruption_budget_and_cordon_is_a_patch() {
    let fake = FakeKube::start().await.unwrap();
    let client = no_retry(&fake);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        fake.insert(&pod(&format!("web-{i}"), "n1", json!({"app": "web"})))
            .unwrap();
        fake.modify::<Pod>(Some("default"), &format!("web-{i}"), |p| {
            p.status = serde_json::from_value(json!({
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }))
            .unwrap();
        })
        .unwrap();
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    fake.reconcile_disruption_budgets().unwrap();
    let st = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            st.disruptions_allowed,
            st.current_healthy,
            st.desired_healthy
        ),
        (Some(1), Some(3), Some(2))
    );

    // One may go: 201 and the pod is gone.
    let s = pods.evict("web-0", &EvictParams::default()).await.unwrap();
    assert_eq!(s.code, 201);
    assert!(fake.get::<Pod>(Some("default"), "web-0").unwrap().is_none());

    // The next would leave one: 429 with the budget named.
    let e = pods
        .evict("web-1", &EvictParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(status) = e else {
        panic!("{e}")
    };
    assert_eq!(status.code, 429);
    assert_eq!(
        status.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let raw = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.subresource.as_deref() == Some("eviction"))
        .unwrap();
    assert_eq!(raw.status, 429);
    assert!(fake.get::<Pod>(Some("default"), "web-1").unwrap().is_some());
    let st = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(st.disruptions_allowed, Some(0));

    // A pod no budget selects goes; an unknown one is 404.
    fake.insert(&pod("lonely", "n1", json!({"app": "other"})))
        .unwrap();
    pods.evict("lonely", &EvictParams::default()).await.unwrap();
    let e = pods
        .evict("nope", &EvictParams::default())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 404));

    // Cordon: spec.unschedulable.
    let nodes: Api<Node> = Api::all(client);
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    nodes.create(&PostParams::default(), &n).await.unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let n = nodes.get("n1").await.unwrap();
    assert_eq!(n.spec.unwrap().unschedulable, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_percentage_budget_counts_the_controllers_scale() {
    let fake = FakeKube::start().await.unwrap();
    let client = no_retry(&fake);
    let rs: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "namespace": "default"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }))
    .unwrap();
    let rs = fake.insert(&rs).unwrap();
    for i in 0..3 {
        let mut p = pod(&format!("web-{i}"), "n1", json!({"app": "web"}));
        p.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web-abc".into(),
                uid: rs.metadata.uid.clone().unwrap(),
                controller: Some(true),
                block_owner_deletion: None,
            },
        ]);
        fake.insert(&p).unwrap();
        fake.modify::<Pod>(Some("default"), &format!("web-{i}"), |p| {
            p.status = serde_json::from_value(json!({
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            }))
            .unwrap();
        })
        .unwrap();
    }
    // 4 expected, at most 25% (1) unavailable: 3 must stay healthy, and 3 are.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap();
    fake.insert(&pdb).unwrap();
    fake.reconcile_disruption_budgets().unwrap();
    let st = fake
        .get::<PodDisruptionBudget>(Some("default"), "web")
        .unwrap()
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        (st.expected_pods, st.desired_healthy, st.disruptions_allowed),
        (Some(4), Some(3), Some(0))
    );
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let e = pods
        .evict("web-0", &EvictParams::default())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(s) if s.code == 429));
}

/// kube-apiserver compares the Eviction's `metadata.name` with the URL's, so a body without a name
/// is refused 400 before anything is deleted (`EvictionREST.Create`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_without_the_pods_name_is_refused() {
    let fake = FakeKube::start().await.unwrap();
    fake.insert(&pod("web-0", "n1", json!({}))).unwrap();
    let url = format!(
        "{}/api/v1/namespaces/default/pods/web-0/eviction",
        fake.url()
    );
    let http = reqwest::Client::new();
    for body in [
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"namespace": "default"}}),
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}}),
    ] {
        let r = http.post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
        let status: Value = r.json().await.unwrap();
        assert_eq!(
            status["message"],
            "name in URL does not match name in Eviction object"
        );
    }
    assert!(fake.get::<Pod>(Some("default"), "web-0").unwrap().is_some());
}

/// The scheduler's `pods/binding` (`BindingREST`): the pod gets the node and `PodScheduled=True`
/// once; a second binding is a conflict naming the node, a mismatched name 400, a target without a
/// name 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_assigns_a_pod_once() {
    let fake = FakeKube::start().await.unwrap();
    fake.insert(&pod("web-0", "", json!({}))).unwrap();
    let url = format!(
        "{}/api/v1/namespaces/default/pods/web-0/binding",
        fake.url()
    );
    let http = reqwest::Client::new();
    let binding = |name: &str, node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    };
    let r = http
        .post(&url)
        .json(&binding("web-1", "n1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = http
        .post(&url)
        .json(&binding("web-0", ""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let status: Value = r.json().await.unwrap();
    assert_eq!(
        status["details"]["causes"][0]["field"], "target.name",
        "{status}"
    );

    let r = http
        .post(&url)
        .json(&binding("web-0", "n1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let bound = fake.get::<Pod>(Some("default"), "web-0").unwrap().unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("n1"));
    let conditions = bound.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
        "{conditions:?}"
    );

    let r = http
        .post(&url)
        .json(&binding("web-0", "n2"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let status: Value = r.json().await.unwrap();
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("pod web-0 is already assigned to node \"n1\"")),
        "{status}"
    );
}
