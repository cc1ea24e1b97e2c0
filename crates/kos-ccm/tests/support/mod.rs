//! What the controller tests share: their error type and polling with a generous deadline (never a
//! timing assertion: only a loaded machine gets near it).

// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

pub type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Far more than any step needs on an idle machine.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Polls `check` until it returns `Some`, or fails after [`DEADLINE`] saying what it waited for.
pub async fn wait_for<T>(what: &str, mut check: impl FnMut() -> R<Option<T>>) -> R<T> {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() > end {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The async flavour, for checks that ask the cloud.
pub async fn wait_for_async<T, F, Fut>(what: &str, mut check: F) -> R<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R<Option<T>>>,
{
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > end {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A session of the simulated project, as a user with its clouds.yaml has it (written into `dir`);
/// nothing of the machine running the tests is read.
pub async fn connect(
    sim: &kos_sim::Sim,
    dir: &std::path::Path,
    policy: kos_cloud::RetryPolicy,
) -> R<kos_cloud::Session> {
    let clouds = dir.join("clouds.yaml");
    std::fs::write(&clouds, sim.clouds_yaml("sim"))?;
    let env =
        kos_cloud::Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.join("no-etc"));
    let profile = kos_cloud::CloudProfile::load(&env, Some("sim"), Some(&clouds))?;
    Ok(kos_cloud::Session::connect(&profile)
        .await?
        .with_retry_policy(policy))
}

/// The sequence number of the simulator's last logged request.
pub fn sim_seq(sim: &kos_sim::Sim) -> u64 {
    sim.app().observations().log.back().map_or(0, |e| e.seq)
}

/// The requests the simulator logged after `seq`.
pub fn sim_log_since(sim: &kos_sim::Sim, seq: u64) -> Vec<kos_sim::LogEntry> {
    sim.app()
        .observations()
        .log
        .iter()
        .filter(|e| e.seq > seq)
        .cloned()
        .collect()
}

/// A controller running in the background until dropped: the drop sends its shutdown signal (a
/// graceful stop, as SIGTERM would), then aborts whatever is left of the task.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Spawns `run(shutdown)`, where `shutdown` completes when this is dropped.
    pub fn spawn<F, Fut>(run: F) -> Running
    where
        F: FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = Box::pin(async {
            let _ = rx.await;
        });
        Running {
            stop: Some(tx),
            task: tokio::spawn(run(shutdown)),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.abort();
    }
}

/// Service ports `p<port>` from (protocol, port, nodePort).
pub fn ports_of(ports: &[(&str, i32, i32)]) -> Vec<k8s_openapi::api::core::v1::ServicePort> {
    ports
        .iter()
        .map(
            |(proto, port, node_port)| k8s_openapi::api::core::v1::ServicePort {
                name: Some(format!("p{port}")),
                protocol: Some((*proto).into()),
                port: *port,
                node_port: Some(*node_port),
                ..Default::default()
            },
        )
        .collect()
}

/// A Node with one InternalIP and no conditions.
pub fn node(name: &str, ip: &str) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.spec = Some(NodeSpec::default());
    n.status = Some(NodeStatus {
        addresses: Some(vec![NodeAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        }]),
        ..Default::default()
    });
    n
}

/// A `nodes` network with a `cidr` subnet behind a router (with a gateway to `external`, when
/// given): where the tests' nodes live. Returns (network id, subnet id, router id).
pub async fn node_network(
    session: &kos_cloud::Session,
    cidr: &str,
    external: Option<&str>,
) -> (String, String, String) {
    use kos_cloud::model::network::{NetworkCreate, RouterCreate, SubnetCreate};
    let net = session.network();
    let n = net
        .create_network(&NetworkCreate {
            name: "nodes".into(),
            ..Default::default()
        })
        .await
        .expect("network");
    let s = net
        .create_subnet(&SubnetCreate::new(&n.id, "nodes", cidr))
        .await
        .expect("subnet");
    let router = match external {
        Some(ext) => RouterCreate::with_gateway("router", ext),
        None => RouterCreate {
            name: "router".into(),
            ..Default::default()
        },
    };
    let r = net.create_router(&router).await.expect("router");
    net.add_router_interface(&r.id, &s.id)
        .await
        .expect("interface");
    (n.id, s.id, r.id)
}

/// An ACTIVE server named `name` on `network`, of the smallest flavor and the first image.
pub async fn active_server(s: &kos_cloud::Session, network: &str, name: &str) -> R<String> {
    use kos_cloud::model::compute::{Boot, Nic, ServerCreate};
    use kos_cloud::model::image::ImageFilter;
    let flavor = s
        .compute()
        .list_flavors()
        .await?
        .into_iter()
        .min_by_key(|f| (f.ram, f.vcpus))
        .ok_or("no flavor")?;
    let image = s
        .image()
        .list_images(&ImageFilter::default())
        .await?
        .into_iter()
        .next()
        .ok_or("no image")?;
    let mut req = ServerCreate::new(name, &flavor.id, Boot::Image(image.id));
    req.nics = vec![Nic::Network {
        id: network.to_owned(),
        fixed_ip: None,
    }];
    let created = s.compute().create_server(&req).await?;
    s.compute()
        .wait_for_server_active(&created.id, Instant::now() + DEADLINE)
        .await?;
    Ok(created.id)
}

/// The taint kubelet `--cloud-provider=external` puts on its Node until a CCM initialises it.
pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A Node as kubelet `--cloud-provider=external` registers it.
pub fn kubelet_node(name: &str) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n.status = Some(NodeStatus::default());
    n
}

/// The Node once a CCM initialised it: untainted, with a providerID.
pub fn initialised(
    fake: &kos_kube_fake::FakeKube,
    name: &str,
) -> R<Option<k8s_openapi::api::core::v1::Node>> {
    use k8s_openapi::api::core::v1::Node;
    Ok(fake.get::<Node>(None, name)?.filter(|n| {
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED));
        !tainted && n.spec.as_ref().is_some_and(|s| s.provider_id.is_some())
    }))
}

/// `default/web`: a LoadBalancer Service on port 80, node port 30080.
pub fn web_service() -> k8s_openapi::api::core::v1::Service {
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    let mut svc = Service::default();
    svc.metadata.name = Some("web".into());
    svc.metadata.namespace = Some("default".into());
    svc.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![ServicePort {
            port: 80,
            node_port: Some(30080),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    svc
}
