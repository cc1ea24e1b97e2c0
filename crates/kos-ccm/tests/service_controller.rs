//! The Service controller end to end: kos-sim as OpenStack, kos-kube-fake as Kubernetes, the real
//! controller (`kos_ccm::service::run`) in a task, Services created and changed through the
//! Kubernetes API as a user would. Covers the upstream's five e2e load-balancer scenarios
//! (`tests/e2e/cloudprovider/test-lb-service.sh`) plus the controller's own promises.
//! Every check polls for the expected state with a generous deadline; none times anything.

mod support;
use support::{DEADLINE, R, ports_of, wait_for, wait_for_async};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeCondition, Service, ServicePort, ServiceSpec,
};
use kos_ccm::CloudConfig;
use kos_ccm::context::Context;
use kos_ccm::lb::annotations as a;
use kos_ccm::lb::{LbSettings, LoadBalancers, reasons};
use kos_ccm::metrics::Metrics;
use kos_ccm::service::{self, FINALIZER, ServiceSettings};
use kos_cloud::model::load_balancer::{
    Listener, LoadBalancer, LoadBalancerCreate, LoadBalancerFilter, Member, Pool, Protocol, Vip,
};
use kos_cloud::model::network::{
    FloatingIp, FloatingIpCreate, FloatingIpFilter, NetworkCreate, RouterCreate, SubnetCreate,
};
use kos_cloud::{CloudProfile, Env, RetryPolicy, Session};
use kos_kube_fake::{FakeKube, Fault, RecordedEvent, Verb};
use kos_sim::{LogEntry, Sim, SimConfig};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

const NS: &str = "default";

struct Harness {
    sim: Sim,
    fake: FakeKube,
    session: Session,
    services: Api<Service>,
    metrics: Arc<Metrics>,
    public: String,
    subnet: String,
    cluster_uid: String,
    _controller: support::Running,
    _dir: tempfile::TempDir,
}

/// Quick retries; a resync period long enough that only the tests that want it see one.
fn settings() -> ServiceSettings {
    ServiceSettings {
        concurrency: 4,
        resync_period: Duration::from_secs(3600),
        retry_min: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        ..ServiceSettings::default()
    }
}

fn resyncing(period: Duration) -> ServiceSettings {
    ServiceSettings {
        resync_period: period,
        ..settings()
    }
}

fn node(name: &str, ip: &str) -> Node {
    let mut n = support::node(name, ip);
    if let Some(st) = n.status.as_mut() {
        st.conditions = Some(vec![ready(true)]);
    }
    n
}

fn ready(yes: bool) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: if yes { "True" } else { "False" }.into(),
        ..Default::default()
    }
}

/// A sim with a node network routed to the public one, a fake API server with two nodes and
/// `kube-system`, and the controller, configured by a cloud.conf whose `[LoadBalancer]` names the
/// node subnet and the public network, plus `extra`.
async fn start(extra: &str, settings: ServiceSettings) -> R<Harness> {
    start_full(extra, None, settings, Duration::from_millis(50)).await
}

/// [`start`], with `fault` injected into the fake API server before the controller starts.
async fn start_with_fault(fault: Fault, settings: ServiceSettings) -> R<Harness> {
    start_full("", Some(fault), settings, Duration::from_millis(50)).await
}

/// `pending`: the core's requeue delay while Octavia is busy.
async fn start_full(
    extra: &str,
    fault: Option<Fault>,
    settings: ServiceSettings,
    pending: Duration,
) -> R<Harness> {
    let sim = Sim::start(SimConfig::fast()).await?;
    let c = sim.config();
    let global = format!(
        "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = Default\nregion = {}\n",
        sim.auth_url(),
        c.username,
        c.password,
        c.project,
        c.region
    );
    let dir = tempfile::tempdir()?;
    // Nothing of the machine running the tests: no HOME, no /etc/openstack.
    let env = Env::from_vars([("HOME", "/nonexistent")]).with_system_dir(dir.path().join("no-etc"));
    let profile: CloudProfile = CloudConfig::parse("cloud.conf", &global)?
        .config
        .profile(&env)?;
    let session = Session::connect(&profile)
        .await?
        .with_retry_policy(RetryPolicy::fast());
    let net = session.network();
    let public = net.external_network(None).await?.id;
    let n = net
        .create_network(&NetworkCreate {
            name: "nodes".into(),
            ..Default::default()
        })
        .await?;
    let subnet = net
        .create_subnet(&SubnetCreate::new(&n.id, "nodes", "10.10.0.0/24"))
        .await?
        .id;
    let router = net
        .create_router(&RouterCreate::with_gateway("router", &public))
        .await?;
    net.add_router_interface(&router.id, &subnet).await?;
    let conf = format!(
        "{global}\n[LoadBalancer]\nsubnet-id = {subnet}\nfloating-network-id = {public}\n{extra}"
    );
    let config = CloudConfig::parse("cloud.conf", &conf)?.config;

    let fake = FakeKube::start().await?;
    let mut kube_system = Namespace::default();
    kube_system.metadata.name = Some("kube-system".into());
    fake.insert(&kube_system)?;
    fake.insert(&node("node-1", "10.10.0.11"))?;
    fake.insert(&node("node-2", "10.10.0.12"))?;
    let client = fake.client()?;
    let cluster_uid = service::cluster_id(&client)
        .await?
        .ok_or("kube-system has no uid")?;
    let ctx = Arc::new(Context::new(
        session.clone(),
        config,
        "kubernetes",
        client.clone(),
        Reporter {
            controller: "kos-ccm".into(),
            instance: Some("test".into()),
        },
    ));
    let lbs = Arc::new(LoadBalancers::new(
        session.clone(),
        ctx.config.clone(),
        LbSettings {
            cluster_id: Some(cluster_uid.clone()),
            pending_requeue: pending,
            retry_requeue: Duration::from_millis(500),
            // Only writes and resyncs refresh the observation: drift must wait for a resync.
            snapshot_max_age: Duration::from_secs(3600),
            ..LbSettings::new("kubernetes")
        },
    ));
    if let Some(f) = fault {
        fake.inject(f);
    }
    let metrics = Arc::new(Metrics::new());
    let controller = support::Running::spawn({
        let metrics = metrics.clone();
        |shutdown| service::run(ctx, lbs, settings, Some(metrics), shutdown)
    });
    Ok(Harness {
        sim,
        fake,
        session,
        services: Api::namespaced(client, NS),
        metrics,
        public,
        subnet,
        cluster_uid,
        _controller: controller,
        _dir: dir,
    })
}

fn lb_service(name: &str, ports: &[(&str, i32, i32)]) -> Service {
    let mut s = Service::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some(NS.into());
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(ports_of(ports)),
        ..Default::default()
    });
    s
}

fn annotated(mut s: Service, key: &str, value: &str) -> Service {
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    s
}

fn annotation<'a>(s: &'a Service, key: &str) -> Option<&'a str> {
    s.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn ingress_ip(s: &Service) -> Option<String> {
    s.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

fn has_finalizer(s: &Service) -> bool {
    s.finalizers().iter().any(|f| f == FINALIZER)
}

fn is_write(e: &LogEntry) -> bool {
    e.method != "GET" && !e.path.starts_with("/identity") && !e.path.starts_with("/_sim")
}

impl Harness {
    async fn create(&self, svc: &Service) -> R<Service> {
        Ok(self.services.create(&PostParams::default(), svc).await?)
    }

    async fn patch(&self, name: &str, body: serde_json::Value) -> R<Service> {
        Ok(self
            .services
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?)
    }

    async fn delete(&self, name: &str) -> R {
        self.services.delete(name, &Default::default()).await?;
        Ok(())
    }

    fn get(&self, name: &str) -> R<Option<Service>> {
        Ok(self.fake.get::<Service>(Some(NS), name)?)
    }

    /// The Service once it has an address in its status and both annotations.
    async fn served(&self, name: &str) -> R<Service> {
        wait_for(&format!("service {name} served"), || {
            Ok(self.get(name)?.filter(|s| {
                ingress_ip(s).is_some()
                    && annotation(s, a::LOAD_BALANCER_ID).is_some()
                    && annotation(s, a::LOAD_BALANCER_ADDRESS).is_some()
            }))
        })
        .await
    }

    async fn gone(&self, name: &str) -> R {
        wait_for(&format!("service {name} gone"), || {
            Ok(self.get(name)?.is_none().then_some(()))
        })
        .await
    }

    fn events_for(&self, name: &str) -> Vec<RecordedEvent> {
        self.fake
            .events()
            .into_iter()
            .filter(|e| e.regarding_name.as_deref() == Some(name))
            .collect()
    }

    fn sim_seq(&self) -> u64 {
        support::sim_seq(&self.sim)
    }

    fn sim_log_since(&self, seq: u64) -> Vec<LogEntry> {
        support::sim_log_since(&self.sim, seq)
    }

    fn sim_writes_since(&self, seq: u64) -> Vec<String> {
        self.sim_log_since(seq)
            .iter()
            .filter(|e| is_write(e))
            .map(|e| format!("{} {}", e.operation, e.status))
            .collect()
    }

    fn kube_seq(&self) -> u64 {
        self.fake.requests().last().map_or(0, |r| r.seq)
    }

    fn kube_writes_since(&self, seq: u64) -> Vec<String> {
        self.fake
            .writes()
            .iter()
            .filter(|r| r.seq > seq)
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// Reconciles counted so far under `operation`.
    fn reconciles(&self, operation: &str) -> u64 {
        let prefix =
            format!("cloudprovider_openstack_reconcile_total{{operation=\"{operation}\"}} ");
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).and_then(|n| n.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Waits until at least `n` more ensure passes than `since` have finished.
    async fn ensure_passes(&self, since: u64, n: u64) -> R {
        wait_for(&format!("{n} more ensure passes"), || {
            Ok((self.reconciles("loadbalancer_ensure") >= since + n).then_some(()))
        })
        .await
    }

    /// Touches the Service (a label) and waits for the pass that follows: everything that was
    /// pending for it is done after that.
    async fn settle(&self, name: &str, round: u32) -> R {
        let before = self.reconciles("loadbalancer_ensure");
        self.patch(
            name,
            json!({"metadata": {"labels": {"settle": round.to_string()}}}),
        )
        .await?;
        self.ensure_passes(before, 1).await
    }

    /// How many times the sim listed the load balancers since `seq` (once per fresh observation).
    /// Full lists of the load balancers (an observation of the project).
    fn lb_lists_since(&self, seq: u64) -> usize {
        self.sim_log_since(seq)
            .iter()
            .filter(|e| e.method == "GET" && e.operation.ends_with("/lbaas/loadbalancers"))
            .count()
    }

    /// Light lists of the load balancers' states (the wait for PENDING_* to end).
    fn lb_state_lists_since(&self, seq: u64) -> usize {
        self.sim_log_since(seq)
            .iter()
            .filter(|e| {
                e.operation.ends_with("/lbaas/loadbalancers?fields")
                    && e.query.contains("fields=provisioning_status")
            })
            .count()
    }

    async fn lbs(&self) -> R<Vec<LoadBalancer>> {
        Ok(self
            .session
            .load_balancer()
            .list_load_balancers(&LoadBalancerFilter::default())
            .await?)
    }

    async fn lb(&self, id: &str) -> R<Option<LoadBalancer>> {
        Ok(self.session.load_balancer().get_load_balancer(id).await?)
    }

    async fn listeners(&self, lb: &str) -> R<Vec<Listener>> {
        let mut l = self.session.load_balancer().list_listeners(lb).await?;
        l.sort_by_key(|l| l.protocol_port);
        Ok(l)
    }

    async fn pool(&self, id: &str) -> R<Pool> {
        Ok(self
            .session
            .load_balancer()
            .get_pool(id)
            .await?
            .ok_or("no such pool")?)
    }

    async fn pools(&self, lb: &str) -> R<Vec<Pool>> {
        Ok(self.session.load_balancer().list_pools(lb).await?)
    }

    async fn members(&self, pool: &str) -> R<Vec<Member>> {
        let mut m = self.session.load_balancer().list_members(pool).await?;
        m.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(m)
    }

    async fn fips(&self) -> R<Vec<FloatingIp>> {
        Ok(self
            .session
            .network()
            .list_floating_ips(&FloatingIpFilter::default())
            .await?)
    }

    async fn wait_active(&self, id: &str) -> R {
        self.session
            .load_balancer()
            .wait_for_active(id, Instant::now() + DEADLINE)
            .await?;
        Ok(())
    }

    /// (listener port, member ports) of every listener of the load balancer, by port.
    async fn layout(&self, lb: &str) -> R<Vec<(u16, Vec<u16>)>> {
        let mut out = Vec::new();
        for l in self.listeners(lb).await? {
            let ports = match &l.default_pool_id {
                // The pool may go between the two calls while the controller is at work.
                Some(p) => match self.session.load_balancer().list_members(p).await {
                    Ok(m) => m.iter().map(|m| m.protocol_port).collect(),
                    Err(e) if e.is_not_found() => Vec::new(),
                    Err(e) => return Err(e.into()),
                },
                None => Vec::new(),
            };
            out.push((l.protocol_port, ports));
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------- the upstream e2e scenarios

/// Upstream `test_basic`: a Service asking for an existing floating IP gets it as its address.
#[tokio::test]
async fn basic_service_gets_its_floating_ip_in_status_and_annotations() -> R {
    let h = start("", settings()).await?;
    let fip = h
        .session
        .network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: h.public.clone(),
            description: Some("reserved for basic".into()),
            ..Default::default()
        })
        .await?;
    let mut svc = lb_service("basic", &[("TCP", 80, 30080)]);
    if let Some(spec) = svc.spec.as_mut() {
        spec.load_balancer_ip = Some(fip.floating_ip_address.clone());
    }
    h.create(&svc).await?;

    let s = h.served("basic").await?;
    let ingress = &s
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.clone())
        .ok_or("no ingress")?[0];
    assert_eq!(
        ingress.ip.as_deref(),
        Some(fip.floating_ip_address.as_str())
    );
    assert_eq!(ingress.ip_mode.as_deref(), Some("VIP"));
    assert_eq!(
        annotation(&s, a::LOAD_BALANCER_ADDRESS),
        Some(fip.floating_ip_address.as_str())
    );
    assert!(has_finalizer(&s));
    let lbs = h.lbs().await?;
    assert_eq!(lbs.len(), 1);
    let lb = &lbs[0];
    assert_eq!(annotation(&s, a::LOAD_BALANCER_ID), Some(lb.id.as_str()));
    assert_eq!(lb.name, "kube_service_kubernetes_default_basic");
    assert!(
        lb.tags
            .contains(&format!("kos-cluster-id={}", h.cluster_uid)),
        "the kube-system UID tells this cluster's load balancers apart: {:?}",
        lb.tags
    );
    let attached = h
        .fips()
        .await?
        .into_iter()
        .find(|f| f.id == fip.id)
        .ok_or("the FIP is gone")?;
    assert_eq!(attached.port_id, lb.vip_port_id);
    assert_eq!(
        h.layout(&lb.id).await?,
        vec![(80, vec![30080, 30080])],
        "one listener with both nodes as members"
    );
    let ensured: Vec<RecordedEvent> = h
        .events_for("basic")
        .into_iter()
        .filter(|e| e.reason == reasons::ENSURED)
        .collect();
    assert_eq!(ensured.len(), 1, "{:#?}", h.events_for("basic"));
    assert_eq!(ensured[0].type_, "Normal");

    // Deleting the Service deletes the load balancer but not the user's floating IP.
    h.delete("basic").await?;
    h.gone("basic").await?;
    assert!(h.lbs().await?.is_empty());
    assert!(h.fips().await?.iter().any(|f| f.id == fip.id));
    Ok(())
}

/// Upstream `test_forwarded`: x-forwarded-for makes an HTTP listener inserting the header.
#[tokio::test]
async fn x_forwarded_for_gets_an_http_listener_that_inserts_the_header() -> R {
    let h = start("", settings()).await?;
    let svc = annotated(
        lb_service("xff", &[("TCP", 80, 30080)]),
        a::X_FORWARDED_FOR,
        "true",
    );
    h.create(&svc).await?;
    let s = h.served("xff").await?;
    let id = annotation(&s, a::LOAD_BALANCER_ID).ok_or("no id")?;
    let listeners = h.listeners(id).await?;
    assert_eq!(listeners.len(), 1);
    let l = &listeners[0];
    assert_eq!(l.protocol, Protocol::Http);
    assert_eq!(
        l.insert_headers.get("X-Forwarded-For").map(String::as_str),
        Some("true")
    );
    let pool = h
        .pool(l.default_pool_id.as_deref().ok_or("no pool")?)
        .await?;
    assert_eq!(pool.protocol, Protocol::Http);
    assert_eq!(h.members(&pool.id).await?.len(), 2);
    Ok(())
}

/// Upstream `test_update_port`: ports added, removed and node ports changed are followed.
#[tokio::test]
async fn changing_the_ports_updates_listeners_pools_and_members() -> R {
    let h = start("", settings()).await?;
    h.create(&lb_service(
        "web",
        &[("TCP", 80, 30080), ("TCP", 443, 30443)],
    ))
    .await?;
    let s = h.served("web").await?;
    let id = annotation(&s, a::LOAD_BALANCER_ID)
        .ok_or("no id")?
        .to_owned();
    let address = ingress_ip(&s);
    assert_eq!(
        h.layout(&id).await?,
        vec![(80, vec![30080, 30080]), (443, vec![30443, 30443])]
    );

    // 443 goes, 8080 comes, 80 moves to another node port.
    h.patch(
        "web",
        json!({"spec": {"ports": [
            {"name": "p80", "protocol": "TCP", "port": 80, "nodePort": 31080},
            {"name": "p8080", "protocol": "TCP", "port": 8080, "nodePort": 30880},
        ]}}),
    )
    .await?;
    let want = vec![(80, vec![31080, 31080]), (8080, vec![30880, 30880])];
    wait_for_async("listeners to follow the ports", || async {
        Ok((h.layout(&id).await? == want).then_some(()))
    })
    .await?;
    // The removed port's pool went with its listener.
    wait_for_async("the old pool removed", || async {
        Ok((h.pools(&id).await?.len() == 2).then_some(()))
    })
    .await?;
    let s = h.get("web")?.ok_or("service gone")?;
    assert_eq!(ingress_ip(&s), address, "same load balancer, same address");
    assert_eq!(h.lbs().await?.len(), 1);
    Ok(())
}

/// Upstream `test_shared_lb`: a second Service joins through the load-balancer-id annotation, a
/// port collision is refused, the owner can go first, the last one takes the load balancer.
#[tokio::test]
async fn two_services_share_a_load_balancer_through_the_id_annotation() -> R {
    let h = start("max-shared-lb = 3\n", settings()).await?;
    h.create(&lb_service("owner", &[("TCP", 80, 30080)]))
        .await?;
    let owner = h.served("owner").await?;
    let id = annotation(&owner, a::LOAD_BALANCER_ID)
        .ok_or("no id")?
        .to_owned();

    h.create(&annotated(
        lb_service("second", &[("TCP", 8080, 30880)]),
        a::LOAD_BALANCER_ID,
        &id,
    ))
    .await?;
    let second = h.served("second").await?;
    assert_eq!(ingress_ip(&second), ingress_ip(&owner));
    let lb = h.lb(&id).await?.ok_or("lb gone")?;
    for tag in [
        "kube_service_kubernetes_default_owner",
        "kube_service_kubernetes_default_second",
    ] {
        assert!(lb.tags.contains(&tag.to_owned()), "{tag}: {:?}", lb.tags);
    }
    assert_eq!(h.listeners(&id).await?.len(), 2);

    // A third Service on a port the owner uses: a Warning, nothing on the load balancer.
    h.create(&annotated(
        lb_service("clash", &[("TCP", 80, 30111)]),
        a::LOAD_BALANCER_ID,
        &id,
    ))
    .await?;
    let warning = wait_for("the port conflict warning", || {
        Ok(h.events_for("clash")
            .into_iter()
            .find(|e| e.reason == reasons::PORT_CONFLICT))
    })
    .await?;
    assert_eq!(warning.type_, "Warning");
    assert_eq!(h.listeners(&id).await?.len(), 2);
    let clash = h.get("clash")?.ok_or("clash gone")?;
    assert_eq!(ingress_ip(&clash), None);
    h.delete("clash").await?;
    h.gone("clash").await?;
    assert_eq!(h.listeners(&id).await?.len(), 2);

    // The owner first: only its listener and tag go; the load balancer and its address stay.
    h.delete("owner").await?;
    h.gone("owner").await?;
    let lb = h.lb(&id).await?.ok_or("the shared LB was deleted")?;
    assert!(
        !lb.tags
            .contains(&"kube_service_kubernetes_default_owner".to_owned())
    );
    assert_eq!(h.layout(&id).await?, vec![(8080, vec![30880, 30880])]);
    assert_eq!(h.fips().await?.len(), 1);

    // The last one takes the load balancer and the floating IP kos-ccm made.
    h.delete("second").await?;
    h.gone("second").await?;
    assert!(h.lb(&id).await?.is_none());
    assert!(h.fips().await?.is_empty());
    Ok(())
}

/// Upstream `test_shared_user_lb`: a load balancer (and floating IP) made by the user serves two
/// Services and outlives both.
#[tokio::test]
async fn a_user_made_load_balancer_is_shared_and_survives_both_services() -> R {
    let h = start("", settings()).await?;
    let api = h.session.load_balancer();
    let mut req = LoadBalancerCreate::new("my-edge", Vip::Subnet(h.subnet.clone()));
    req.tags = vec!["team=edge".into()];
    let user_lb = api.create_load_balancer(&req).await?;
    h.wait_active(&user_lb.id).await?;
    let user_fip = h
        .session
        .network()
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: h.public.clone(),
            port_id: user_lb.vip_port_id.clone(),
            description: Some("edge address".into()),
            ..Default::default()
        })
        .await?;

    for (name, proto, port, node_port) in [("x", "TCP", 80, 30080), ("y", "UDP", 53, 30053)] {
        h.create(&annotated(
            lb_service(name, &[(proto, port, node_port)]),
            a::LOAD_BALANCER_ID,
            &user_lb.id,
        ))
        .await?;
    }
    for name in ["x", "y"] {
        let s = h.served(name).await?;
        assert_eq!(
            ingress_ip(&s).as_deref(),
            Some(user_fip.floating_ip_address.as_str())
        );
    }
    assert_eq!(h.listeners(&user_lb.id).await?.len(), 2);

    h.delete("x").await?;
    h.delete("y").await?;
    h.gone("x").await?;
    h.gone("y").await?;
    let lb = h
        .lb(&user_lb.id)
        .await?
        .ok_or("the user's load balancer was deleted")?;
    assert_eq!(lb.tags, vec!["team=edge".to_owned()], "our tags are gone");
    assert!(h.listeners(&user_lb.id).await?.is_empty());
    let fips = h.fips().await?;
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0].port_id, user_lb.vip_port_id, "the user's FIP stays");
    Ok(())
}

/// Issue 19 item 5: a Service pointed at the cluster's API load balancer (made by kos, tagged
/// `kos-cluster=<name>` and `kos-id=api-lb`) gets a Warning Event naming the annotation, no
/// listener on it, and no address from it.
#[tokio::test]
async fn the_api_load_balancer_is_refused_with_an_event_naming_the_annotation() -> R {
    let h = start("max-shared-lb = 5\n", settings()).await?;
    let api = h.session.load_balancer();
    let mut req = LoadBalancerCreate::new("kos-kubernetes-api-lb", Vip::Subnet(h.subnet.clone()));
    req.tags = vec!["kos-cluster=kubernetes".into(), "kos-id=api-lb".into()];
    let api_lb = api.create_load_balancer(&req).await?;
    h.wait_active(&api_lb.id).await?;
    api.create_listener(&kos_cloud::model::load_balancer::ListenerCreate::new(
        &api_lb.id,
        "kos-kubernetes-api-listener",
        Protocol::Tcp,
        6443,
    ))
    .await?;
    h.wait_active(&api_lb.id).await?;

    let start = h.sim_seq();
    h.create(&annotated(
        lb_service("grab", &[("TCP", 8443, 30443)]),
        a::LOAD_BALANCER_ID,
        &api_lb.id,
    ))
    .await?;
    let warning = wait_for("a Warning naming load-balancer-id", || {
        Ok(h.events_for("grab")
            .into_iter()
            .find(|e| e.message.contains(a::LOAD_BALANCER_ID)))
    })
    .await?;
    assert_eq!(warning.type_, "Warning");
    assert!(warning.message.contains("kos"), "{}", warning.message);
    let ports: Vec<u16> = h
        .listeners(&api_lb.id)
        .await?
        .iter()
        .map(|l| l.protocol_port)
        .collect();
    assert_eq!(ports, vec![6443], "no listener on the API load balancer");
    assert_eq!(h.sim_writes_since(start), Vec::<String>::new());
    let grab = h.get("grab")?.ok_or("grab gone")?;
    assert_eq!(ingress_ip(&grab), None);
    assert_eq!(
        h.lb(&api_lb.id).await?.ok_or("API LB gone")?.tags,
        api_lb.tags
    );

    h.delete("grab").await?;
    h.gone("grab").await?;
    assert_eq!(h.listeners(&api_lb.id).await?.len(), 1);
    Ok(())
}

// ---------------------------------------------------------------- the controller's promises

/// The finalizer is there before the first cloud write (a Service whose finalizer cannot be
/// written costs the cloud nothing), and goes only with the load balancer and its floating IP.
#[tokio::test]
async fn the_finalizer_guards_every_cloud_write_and_goes_last() -> R {
    let h = start("", settings()).await?;
    h.fake.inject(
        Fault::new(500)
            .verb(Verb::Patch)
            .resource("services")
            .name("guarded"),
    );
    let start_seq = h.sim_seq();
    h.create(&lb_service("guarded", &[("TCP", 80, 30080)]))
        .await?;
    wait_for("three refused finalizer writes", || {
        let refused = h
            .fake
            .requests()
            .iter()
            .filter(|r| {
                r.verb == Verb::Patch && r.name.as_deref() == Some("guarded") && r.status == 500
            })
            .count();
        Ok((refused >= 3).then_some(()))
    })
    .await?;
    assert!(
        h.sim_writes_since(start_seq).is_empty(),
        "a cloud write without the finalizer: {:?}",
        h.sim_writes_since(start_seq)
    );
    assert!(!has_finalizer(&h.get("guarded")?.ok_or("gone")?));

    h.fake.clear_faults();
    let s = h.served("guarded").await?;
    assert!(has_finalizer(&s));
    assert_eq!(h.lbs().await?.len(), 1);
    assert_eq!(h.fips().await?.len(), 1);

    h.delete("guarded").await?;
    // Marked for deletion, held by the finalizer until the cloud is clean.
    h.gone("guarded").await?;
    assert!(h.lbs().await?.is_empty(), "{:?}", h.lbs().await?);
    assert!(h.fips().await?.is_empty(), "our floating IP is deleted");
    assert!(h.reconciles("loadbalancer_ensure") >= 1);
    assert!(h.reconciles("loadbalancer_delete") >= 1);
    let deleting = h
        .events_for("guarded")
        .iter()
        .any(|e| e.reason == reasons::DELETING);
    assert!(deleting, "{:#?}", h.events_for("guarded"));
    Ok(())
}

/// Nothing is reconciled before the Nodes are listed: an empty node list would empty every pool.
#[tokio::test]
async fn services_wait_for_the_first_node_list() -> R {
    let h = start_with_fault(
        Fault::new(500).verb(Verb::List).resource("nodes"),
        settings(),
    )
    .await?;
    let start_seq = h.sim_seq();
    h.create(&lb_service("early", &[("TCP", 80, 30080)]))
        .await?;
    wait_for("two refused node lists", || {
        let refused = h
            .fake
            .requests()
            .iter()
            .filter(|r| r.verb == Verb::List && r.resource.as_deref() == Some("nodes"))
            .filter(|r| r.status == 500)
            .count();
        Ok((refused >= 2).then_some(()))
    })
    .await?;
    assert!(
        h.sim_log_since(start_seq).is_empty(),
        "no cloud call at all"
    );
    assert!(!has_finalizer(&h.get("early")?.ok_or("gone")?));
    assert_eq!(h.reconciles("loadbalancer_ensure"), 0);

    h.fake.clear_faults();
    let s = h.served("early").await?;
    let id = annotation(&s, a::LOAD_BALANCER_ID).ok_or("no id")?;
    assert_eq!(h.layout(id).await?, vec![(80, vec![30080, 30080])]);
    Ok(())
}

/// A node added or removed is one batch member PUT per pool; a node only changing readiness costs
/// nothing (readiness is not a member filter).
#[tokio::test]
async fn node_changes_cost_exactly_one_member_put_per_pool() -> R {
    let h = start("", settings()).await?;
    h.create(&lb_service(
        "web",
        &[("TCP", 80, 30080), ("UDP", 53, 30053)],
    ))
    .await?;
    let s = h.served("web").await?;
    let id = annotation(&s, a::LOAD_BALANCER_ID)
        .ok_or("no id")?
        .to_owned();
    h.wait_active(&id).await?;
    h.settle("web", 0).await?;
    let pools: Vec<String> = h
        .listeners(&id)
        .await?
        .iter()
        .filter_map(|l| l.default_pool_id.clone())
        .collect();
    assert_eq!(pools.len(), 2);

    let member_puts = |log: &[LogEntry]| {
        let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
        for e in log
            .iter()
            .filter(|e| e.method == "PUT" && e.path.ends_with("/members"))
        {
            *per_pool.entry(e.path.clone()).or_default() += 1;
        }
        per_pool
    };

    for (round, (label, n)) in [("node added", 3usize), ("node removed", 2)]
        .into_iter()
        .enumerate()
    {
        let start_seq = h.sim_seq();
        if n == 3 {
            h.fake.insert(&node("node-3", "10.10.0.13"))?;
        } else {
            h.fake.delete::<Node>(None, "node-3")?;
        }
        for p in &pools {
            wait_for_async(&format!("{label}: {n} members in {p}"), || async {
                Ok((h.members(p).await?.len() == n).then_some(()))
            })
            .await?;
        }
        h.wait_active(&id).await?;
        h.settle("web", u32::try_from(round)? + 1).await?;
        let log = h.sim_log_since(start_seq);
        let puts = member_puts(&log);
        assert_eq!(puts.len(), 2, "{label}: one PUT per pool: {puts:?}");
        assert!(puts.values().all(|c| *c == 1), "{label}: {puts:?}");
        assert_eq!(
            h.sim_writes_since(start_seq).len(),
            2,
            "{label}: nothing but the member PUTs: {:?}",
            h.sim_writes_since(start_seq)
        );
    }

    // Readiness only: no write at all.
    let start_seq = h.sim_seq();
    h.fake.modify::<Node>(None, "node-1", |n| {
        n.status.get_or_insert_default().conditions = Some(vec![ready(false)]);
    })?;
    h.settle("web", 10).await?;
    assert!(
        h.sim_writes_since(start_seq).is_empty(),
        "{:?}",
        h.sim_writes_since(start_seq)
    );
    for p in &pools {
        assert_eq!(h.members(p).await?.len(), 2);
    }
    Ok(())
}

/// The controller's own writes (the finalizer, the load-balancer annotations) change the Service,
/// and each change is a pass; while the load balancer is still being provisioned such a pass can
/// only find what the pass before it found, so it does not list the project again. A change of the
/// user's is a pass as always.
#[tokio::test]
async fn passes_on_its_own_writes_do_not_look_at_the_cloud_again() -> R {
    // Octavia takes its time and the core looks again only after an hour.
    let h = start_full("", None, settings(), Duration::from_secs(3600)).await?;
    h.sim.app().set_latency(kos_sim::LatencyModel {
        lb_create_secs: 3600.0,
        ..h.sim.app().latency()
    });
    let sim_start = h.sim_seq();
    let passes = h.reconciles("loadbalancer_ensure");
    h.create(&lb_service("web", &[("TCP", 80, 30080)])).await?;
    wait_for("the load-balancer id annotation", || {
        Ok(h.get("web")?
            .filter(|s| annotation(s, a::LOAD_BALANCER_ID).is_some()))
    })
    .await?;
    // The first pass, then at least one on its own writes.
    h.ensure_passes(passes, 2).await?;
    assert_eq!(h.lb_lists_since(sim_start), 1, "one look at the cloud");

    // The user changes the Service: that pass looks again.
    let passes = h.reconciles("loadbalancer_ensure");
    h.patch(
        "web",
        json!({"metadata": {"annotations": {"example.com/note": "changed"}}}),
    )
    .await?;
    h.ensure_passes(passes, 1).await?;
    wait_for("a second look", || {
        Ok((h.lb_lists_since(sim_start) == 2).then_some(()))
    })
    .await?;
    Ok(())
}

/// A Service is looked at again the moment its load balancer settles, not at its pass's requeue:
/// with that requeue an hour away, each of three Services created at once still gets its address.
/// The wait costs light lists of the load balancers' states, one per poll for all of them, and
/// none once nothing is awaited.
#[tokio::test]
async fn a_service_is_addressed_as_soon_as_its_load_balancer_settles() -> R {
    let polling = ServiceSettings {
        pending_poll: Duration::from_millis(50),
        ..settings()
    };
    let h = start_full("", None, polling, Duration::from_secs(3600)).await?;
    // Half a real second to provision, on the fast clock.
    h.sim.app().set_latency(kos_sim::LatencyModel {
        lb_create_secs: 500.0,
        ..h.sim.app().latency()
    });
    let seq = h.sim_seq();
    let names = ["a", "b", "c"];
    for (i, name) in (0..).zip(names) {
        h.create(&lb_service(name, &[("TCP", 80, 30080 + i)]))
            .await?;
    }
    for name in names {
        h.served(name).await?;
    }
    let polls = h.lb_state_lists_since(seq);
    assert!(polls >= 1, "the wait listed the states");
    // One poll covers every wait: never more polls than 50 ms ticks, whatever the Services.
    let full = h.lb_lists_since(seq);
    assert!(
        full <= polls + 3,
        "full observations follow settled polls, not each Service: {full} for {polls} polls"
    );

    // Nothing is awaited any more: nothing is polled.
    let idle = h.sim_seq();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        h.lb_state_lists_since(idle),
        0,
        "no poll while nothing waits"
    );
    Ok(())
}

/// Services are reconciled in parallel: ten created at once all get their own address.
#[tokio::test]
async fn ten_services_created_at_once_all_get_addresses() -> R {
    let h = start("", settings()).await?;
    let names: Vec<String> = (0..10).map(|i| format!("svc-{i}")).collect();
    let creates = names.iter().enumerate().map(|(i, name)| {
        let node_port = 30100 + i32::try_from(i).unwrap_or_default();
        let svc = lb_service(name, &[("TCP", 80, node_port)]);
        let h = &h;
        async move { h.create(&svc).await }
    });
    for r in futures::future::join_all(creates).await {
        r?;
    }
    let mut addresses = Vec::new();
    for name in &names {
        let s = h.served(name).await?;
        assert!(has_finalizer(&s));
        addresses.push(ingress_ip(&s).ok_or("no address")?);
    }
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 10, "each its own floating IP");
    assert_eq!(h.lbs().await?.len(), 10);
    assert_eq!(h.fips().await?.len(), 10);
    Ok(())
}

/// A resync with nothing to do writes nothing, to the cloud or to Kubernetes; a standing warning
/// (an annotation typo) is recorded once, not on every resync.
#[tokio::test]
async fn a_resync_with_nothing_to_do_writes_nothing_anywhere() -> R {
    let h = start(
        "create-monitor = true\n",
        resyncing(Duration::from_millis(300)),
    )
    .await?;
    h.create(&lb_service("a", &[("TCP", 80, 30080), ("UDP", 53, 30053)]))
        .await?;
    h.create(&annotated(
        lb_service("typo", &[("TCP", 80, 30081)]),
        "loadbalancer.openstack.org/x-forwarded-fro",
        "true",
    ))
    .await?;
    let mut plain = lb_service("plain", &[("TCP", 80, 80)]);
    if let Some(spec) = plain.spec.as_mut() {
        spec.type_ = Some("ClusterIP".into());
        spec.ports = Some(vec![ServicePort {
            port: 80,
            ..Default::default()
        }]);
    }
    h.create(&plain).await?;
    h.served("a").await?;
    h.served("typo").await?;
    // Two resync rounds first: the controller's cache has surely caught up with its own last
    // writes (a pass on a cache that has not would repeat one, harmlessly but countably).
    h.ensure_passes(h.reconciles("loadbalancer_ensure"), 4)
        .await?;

    let (kube_start, sim_start) = (h.kube_seq(), h.sim_seq());
    let passes = h.reconciles("loadbalancer_ensure");
    // Three full resyncs: three fresh observations, and every LB Service reconciled each time.
    wait_for("three resyncs", || {
        Ok((h.lb_lists_since(sim_start) >= 3).then_some(()))
    })
    .await?;
    h.ensure_passes(passes, 6).await?;
    assert_eq!(
        h.sim_writes_since(sim_start),
        Vec::<String>::new(),
        "cloud writes"
    );
    assert_eq!(
        h.kube_writes_since(kube_start),
        Vec::<String>::new(),
        "Kubernetes writes"
    );
    let typo: Vec<RecordedEvent> = h
        .events_for("typo")
        .into_iter()
        .filter(|e| e.reason == reasons::IGNORED)
        .collect();
    assert_eq!(typo.len(), 1, "{typo:#?}");
    assert_eq!(typo[0].type_, "Warning");
    assert_eq!(typo[0].count, 1, "recorded once: {typo:#?}");
    assert!(typo[0].message.contains("x-forwarded-fro"), "{typo:#?}");
    let plain = h.get("plain")?.ok_or("gone")?;
    assert!(!has_finalizer(&plain));
    Ok(())
}

/// A Service whose annotations cannot be honoured gets a Warning naming the annotation, and no
/// load balancer until it is fixed.
#[tokio::test]
async fn a_bad_annotation_is_a_warning_event_naming_it() -> R {
    let h = start("", settings()).await?;
    h.create(&annotated(
        lb_service("bad", &[("TCP", 80, 30080)]),
        a::TIMEOUT_CLIENT_DATA,
        "5s",
    ))
    .await?;
    let w = wait_for("the warning", || {
        Ok(h.events_for("bad")
            .into_iter()
            .find(|e| e.reason == reasons::INVALID))
    })
    .await?;
    assert_eq!(w.type_, "Warning");
    assert!(w.message.contains(a::TIMEOUT_CLIENT_DATA), "{}", w.message);
    assert!(w.message.contains("5s"), "{}", w.message);
    assert_eq!(w.regarding_kind.as_deref(), Some("Service"));
    assert!(h.lbs().await?.is_empty());
    assert_eq!(ingress_ip(&h.get("bad")?.ok_or("gone")?), None);

    // Fixed: served.
    h.patch(
        "bad",
        json!({"metadata": {"annotations": {a::TIMEOUT_CLIENT_DATA: "5000"}}}),
    )
    .await?;
    h.served("bad").await?;
    assert_eq!(h.lbs().await?.len(), 1);
    Ok(())
}

/// A Service of another load-balancer class is another controller's: no finalizer, no write, not
/// one cloud call on its behalf, across resyncs.
#[tokio::test]
async fn a_service_of_another_class_is_left_alone() -> R {
    let h = start("", resyncing(Duration::from_millis(300))).await?;
    let mut classed = lb_service("classed", &[("TCP", 80, 30080)]);
    if let Some(spec) = classed.spec.as_mut() {
        spec.load_balancer_class = Some("example.com/other".into());
    }
    h.create(&classed).await?;
    h.create(&lb_service("ours", &[("TCP", 80, 30081)])).await?;
    h.served("ours").await?;
    let sim_start = h.sim_seq();
    wait_for("two resyncs", || {
        Ok((h.lb_lists_since(sim_start) >= 2).then_some(()))
    })
    .await?;
    let s = h.get("classed")?.ok_or("gone")?;
    assert!(!has_finalizer(&s));
    assert_eq!(ingress_ip(&s), None);
    assert!(s.annotations().is_empty(), "{:?}", s.annotations());
    let writes: Vec<String> = h
        .fake
        .writes()
        .iter()
        .filter(|r| r.name.as_deref() == Some("classed") && r.verb != Verb::Create)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert!(h.events_for("classed").is_empty());
    let lbs = h.lbs().await?;
    assert_eq!(lbs.len(), 1);
    assert_eq!(lbs[0].name, "kube_service_kubernetes_default_ours");
    Ok(())
}

/// A Service that stops being a LoadBalancer loses its load balancer, floating IP, status,
/// annotations and finalizer, and stays.
#[tokio::test]
async fn a_service_switched_to_cluster_ip_is_cleaned_up() -> R {
    let h = start("", settings()).await?;
    h.create(&lb_service("switch", &[("TCP", 80, 30080)]))
        .await?;
    h.served("switch").await?;
    h.patch("switch", json!({"spec": {"type": "ClusterIP"}}))
        .await?;
    let s = wait_for("the finalizer removed", || {
        Ok(h.get("switch")?.filter(|s| !has_finalizer(s)))
    })
    .await?;
    assert_eq!(ingress_ip(&s), None);
    assert_eq!(annotation(&s, a::LOAD_BALANCER_ID), None);
    assert_eq!(annotation(&s, a::LOAD_BALANCER_ADDRESS), None);
    assert!(h.lbs().await?.is_empty());
    assert!(h.fips().await?.is_empty());
    Ok(())
}

/// Drift: a pool deleted behind kos-ccm's back is back, with its members, after a resync.
#[tokio::test]
async fn a_pool_deleted_behind_its_back_is_repaired_by_the_resync() -> R {
    let h = start("", resyncing(Duration::from_millis(500))).await?;
    h.create(&lb_service("drift", &[("TCP", 80, 30080)]))
        .await?;
    let s = h.served("drift").await?;
    let id = annotation(&s, a::LOAD_BALANCER_ID)
        .ok_or("no id")?
        .to_owned();
    h.wait_active(&id).await?;
    let pool = h.listeners(&id).await?[0]
        .default_pool_id
        .clone()
        .ok_or("no pool")?;
    h.session.load_balancer().delete_pool(&pool).await?;

    let repaired = wait_for_async("a new pool with both members", || async {
        let Some(new) = h.listeners(&id).await?[0].default_pool_id.clone() else {
            return Ok(None);
        };
        if new == pool {
            return Ok(None);
        }
        Ok((h.members(&new).await?.len() == 2).then_some(new))
    })
    .await?;
    assert_ne!(repaired, pool);
    assert_eq!(h.pools(&id).await?.len(), 1);
    Ok(())
}
